// z = x · wᵀ + b for x [batch, inputs], w [outputs, inputs], b [outputs], z [batch, outputs].
// One invocation per output element, summing over k in order: the same bits on every run.
struct Dims { batch: u32, inputs: u32, outputs: u32 }

@group(0) @binding(0) var<uniform> dims: Dims;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read> b: array<f32>;
@group(0) @binding(4) var<storage, read_write> z: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let o = gid.x;
    if (o >= dims.batch * dims.outputs) {
        return;
    }
    let i = o / dims.outputs;
    let j = o % dims.outputs;
    var sum = b[j];
    for (var k = 0u; k < dims.inputs; k = k + 1u) {
        sum = sum + x[i * dims.inputs + k] * w[j * dims.inputs + k];
    }
    z[o] = sum;
}
