// dw += dzᵀ · x for dz [batch, outputs], x [batch, inputs], dw [outputs, inputs]: the layer's
// weight gradient, accumulated. One invocation per weight, summing over the batch in order.
struct Dims { batch: u32, inputs: u32, outputs: u32 }

@group(0) @binding(0) var<uniform> dims: Dims;
@group(0) @binding(1) var<storage, read> dz: array<f32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> dw: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let o = gid.x;
    if (o >= dims.outputs * dims.inputs) {
        return;
    }
    let j = o / dims.inputs;
    let k = o % dims.inputs;
    var sum = 0.0;
    for (var i = 0u; i < dims.batch; i = i + 1u) {
        sum = sum + dz[i * dims.outputs + j] * x[i * dims.inputs + k];
    }
    dw[o] = dw[o] + sum;
}
