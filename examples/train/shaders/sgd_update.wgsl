// p −= lr · g, then g = 0 so the next step accumulates from zero.
@group(0) @binding(0) var<uniform> learning_rate: f32;
@group(0) @binding(1) var<storage, read_write> p: array<f32>;
@group(0) @binding(2) var<storage, read_write> g: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let o = gid.x;
    if (o < arrayLength(&p)) {
        p[o] = p[o] - learning_rate * g[o];
        g[o] = 0.0;
    }
}
