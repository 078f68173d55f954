//! Probe (temporary).
mod common;
use common::*;

const SCORES: &str = r#"
struct Params { rows: u32, dim: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> cache: array<f32>;
@group(0) @binding(2) var<storage, read> query: array<f32>;
@group(0) @binding(3) var<storage, read_write> scores: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let row = id.x;
    if (row >= p.rows) { return; }
    var acc = 0.0;
    for (var d = 0u; d < p.dim; d++) { acc += cache[row * p.dim + d] * query[d]; }
    scores[row] = acc;
}
"#;

fn mark(ctx: &gpu_arena::Context) -> u64 {
    ctx.raw_submit(std::iter::empty(), &[]).unwrap().0
}

fn probe(zero_copy: bool) {
    let ctx = context_with(gpu_arena::ArenaConfig {
        zero_copy,
        ..test_config()
    });
    let k = ctx.kernel(SCORES, "main").unwrap();
    let mut cache = ctx.zeros::<f32>(&[1, 64, 64]).unwrap();
    let mut scores = ctx.zeros::<f32>(&[1, 64]).unwrap();
    for seq in [false, true] {
        let a = mark(&ctx);
        if seq {
            let mut s = ctx.sequence();
            let q = s.put(&[1.0f32; 64], &[64]).unwrap();
            let row = s.put(&[1.0f32; 64], &[1, 1, 64]).unwrap();
            cache = s.dynamic_update_slice(cache, &row, &[0, 3, 0]).unwrap();
            let layer = cache.view(&[0]).unwrap();
            let mut out = scores.view_mut(&[0]).unwrap();
            s.launch(&k)
                .params(&[4u32, 64])
                .arg(&layer)
                .arg(&q)
                .arg_mut(&mut out)
                .grid_for(4)
                .run()
                .unwrap();
            s.submit().unwrap();
        } else {
            let q = ctx.device_put(&[1.0f32; 64], &[64]).unwrap();
            let row = ctx.device_put(&[1.0f32; 64], &[1, 1, 64]).unwrap();
            cache = ctx.dynamic_update_slice(cache, &row, &[0, 3, 0]).unwrap();
            let layer = cache.view(&[0]).unwrap();
            let mut out = scores.view_mut(&[0]).unwrap();
            ctx.launch(&k)
                .params(&[4u32, 64])
                .arg(&layer)
                .arg(&q)
                .arg_mut(&mut out)
                .grid_for(4)
                .run()
                .unwrap();
        }
        let b = mark(&ctx);
        eprintln!(
            "zero_copy {zero_copy} sequence {seq}: {} submissions",
            b - a - 1
        );
    }
}

#[test]
fn probe_both() {
    probe(true);
    probe(false);
}
