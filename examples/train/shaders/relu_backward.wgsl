// dz = dy where y > 0, else 0: ReLU's backward reads its output, not its input.
@group(0) @binding(0) var<storage, read> y: array<f32>;
@group(0) @binding(1) var<storage, read> dy: array<f32>;
@group(0) @binding(2) var<storage, read_write> dz: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let o = gid.x;
    if (o < arrayLength(&dz)) {
        dz[o] = select(0.0, dy[o], y[o] > 0.0);
    }
}
