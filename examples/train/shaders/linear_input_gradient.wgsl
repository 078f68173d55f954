// dx = dz · w for dz [batch, outputs], w [outputs, inputs], dx [batch, inputs].
// One invocation per element of dx, summing over j in order.
struct Dims { batch: u32, inputs: u32, outputs: u32 }

@group(0) @binding(0) var<uniform> dims: Dims;
@group(0) @binding(1) var<storage, read> dz: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> dx: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let o = gid.x;
    if (o >= dims.batch * dims.inputs) {
        return;
    }
    let i = o / dims.inputs;
    let k = o % dims.inputs;
    var sum = 0.0;
    for (var j = 0u; j < dims.outputs; j = j + 1u) {
        sum = sum + dz[i * dims.outputs + j] * w[j * dims.inputs + k];
    }
    dx[o] = sum;
}
