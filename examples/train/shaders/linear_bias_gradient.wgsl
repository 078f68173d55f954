// db += the sum of dz over the batch, for dz [batch, outputs], db [outputs]: the layer's bias
// gradient, accumulated. One invocation per bias, summing over the batch in order.
struct Dims { batch: u32, inputs: u32, outputs: u32 }

@group(0) @binding(0) var<uniform> dims: Dims;
@group(0) @binding(1) var<storage, read> dz: array<f32>;
@group(0) @binding(2) var<storage, read_write> db: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let j = gid.x;
    if (j >= dims.outputs) {
        return;
    }
    var sum = 0.0;
    for (var i = 0u; i < dims.batch; i = i + 1u) {
        sum = sum + dz[i * dims.outputs + j];
    }
    db[j] = db[j] + sum;
}
