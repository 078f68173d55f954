// y = max(z, 0), elementwise.
@group(0) @binding(0) var<storage, read> z: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let o = gid.x;
    if (o < arrayLength(&y)) {
        y[o] = max(z[o], 0.0);
    }
}
