// dy = 2 (y − t) / n: the gradient of mean((y − t)²) over the n elements of y.
@group(0) @binding(0) var<storage, read> y: array<f32>;
@group(0) @binding(1) var<storage, read> t: array<f32>;
@group(0) @binding(2) var<storage, read_write> dy: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let o = gid.x;
    let n = arrayLength(&dy);
    if (o < n) {
        dy[o] = 2.0 * (y[o] - t[o]) / f32(n);
    }
}
