//! A `Sequence` never costs more submissions than the ops it holds would one by one, on every
//! path: zero-copy (lavapipe is a CPU adapter with mapped arena memory, where single ops copy on
//! the host and submit nothing), staging (`zero_copy: false`), device kernels forced, and
//! wgpu's own `write_buffer` uploads (the GL backend, where there is one).
//! Submissions are counted by the ids gpu-arena hands out: an empty `raw_submit` before and
//! after the work.

use crate::harness::refusals::assert_pending_in_sequence;
use crate::harness::{context_with, op_paths, submissions_made, test_config};
use gpu_arena::error::Access;
use gpu_arena::{Context, DeviceArray, Kernel};

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

const DIM: usize = 64;
const MAX_SEQ: usize = 64;

/// One decode step over `layers` layers, recorded (`sequenced`) or op by op.
fn decode_step(
    ctx: &Context,
    kernel: &Kernel,
    mut cache: DeviceArray<f32>,
    scores: &mut DeviceArray<f32>,
    layers: usize,
    t: usize,
    sequenced: bool,
) -> DeviceArray<f32> {
    let query: Vec<f32> = (0..DIM).map(|d| (d % 3) as f32).collect();
    let params = [(t + 1) as u32, DIM as u32];
    if sequenced {
        let mut s = ctx.sequence();
        let q = s.put(&query, &[DIM]).unwrap();
        for l in 0..layers {
            let row = s.put(&[(l + t) as f32; DIM], &[1, 1, DIM]).unwrap();
            cache = s
                .dynamic_update_slice(cache, &row, &[l as i64, t as i64, 0])
                .unwrap();
            let layer = cache.view(&[l]).unwrap();
            let mut out = scores.view_mut(&[l]).unwrap();
            s.launch(kernel)
                .params(&params)
                .arg(&layer)
                .arg(&q)
                .arg_mut(&mut out)
                .grid_for((t + 1) as u64)
                .run()
                .unwrap();
        }
        s.submit().unwrap();
    } else {
        let q = ctx.device_put(&query, &[DIM]).unwrap();
        for l in 0..layers {
            let row = ctx
                .device_put(&[(l + t) as f32; DIM], &[1, 1, DIM])
                .unwrap();
            cache = ctx
                .dynamic_update_slice(cache, &row, &[l as i64, t as i64, 0])
                .unwrap();
            let layer = cache.view(&[l]).unwrap();
            let mut out = scores.view_mut(&[l]).unwrap();
            ctx.launch(kernel)
                .params(&params)
                .arg(&layer)
                .arg(&q)
                .arg_mut(&mut out)
                .grid_for((t + 1) as u64)
                .run()
                .unwrap();
        }
    }
    cache
}

/// The scores after step `t` (every row so far holds `l + r` in each of its `DIM` places).
fn expected(layers: usize, t: usize) -> Vec<f32> {
    let q_sum: f32 = (0..DIM).map(|d| (d % 3) as f32).sum();
    let mut out = vec![0.0; layers * MAX_SEQ];
    for l in 0..layers {
        for r in 0..=t {
            out[l * MAX_SEQ + r] = (l + r) as f32 * q_sum;
        }
    }
    out
}

#[gpu_test]
fn a_decode_step_as_a_sequence_costs_at_most_the_submissions_of_its_ops() {
    for (path, ctx) in op_paths() {
        let kernel = ctx.kernel(SCORES, "main").unwrap();
        for layers in [1, 3] {
            let mut counts = [0u64; 2];
            for (i, sequenced) in [false, true].into_iter().enumerate() {
                let mut cache = ctx.zeros::<f32>(&[layers, MAX_SEQ, DIM]).unwrap();
                let mut scores = ctx.zeros::<f32>(&[layers, MAX_SEQ]).unwrap();
                for t in 0..3 {
                    let (n, next) = submissions_made(&ctx, || {
                        decode_step(&ctx, &kernel, cache, &mut scores, layers, t, sequenced)
                    });
                    cache = next;
                    counts[i] = counts[i].max(n);
                    assert_eq!(
                        ctx.device_get(&scores).unwrap(),
                        expected(layers, t),
                        "{path}, {layers} layers, sequenced {sequenced}, step {t}"
                    );
                }
            }
            let [by_ops, by_sequence] = counts;
            assert_eq!(
                by_sequence, 1,
                "{path}, {layers} layers: one submission per step"
            );
            assert!(
                by_sequence <= by_ops,
                "{path}, {layers} layers: the sequence made {by_sequence} submissions, the ops {by_ops}"
            );
        }
    }
}

#[gpu_test(needs = HostVisibleArena)]
fn host_path_ops_recorded_on_a_cpu_adapter_submit_nothing_as_they_would_alone() {
    let ctx = context_with(test_config());
    let cache = ctx.zeros::<f32>(&[4, 8]).unwrap();
    ctx.synchronize().unwrap();
    let (alone, cache) = submissions_made(&ctx, || {
        let c = ctx
            .dynamic_update_slice(cache, (&[1.0f32; 8][..], &[1usize, 8][..]), &[1, 0])
            .unwrap();
        ctx.fill_in_place(c, 2.0).unwrap()
    });
    let (recorded, (cache, filled)) = submissions_made(&ctx, || {
        let mut s = ctx.sequence();
        let row = s.put(&[5.0f32; 8], &[1, 8]).unwrap();
        let c = s.dynamic_update_slice(cache, &row, &[3, 0]).unwrap();
        let filled = s.fill(&[3], 7u32).unwrap();
        let c = s.fill_in_place(c, 9.0).unwrap();
        // Pending until submit on every path, the host's included: what runs here runs on a GPU.
        for err in [
            ctx.device_get(&c).unwrap_err(),
            ctx.device_get(&filled).unwrap_err(),
        ] {
            assert_pending_in_sequence(
                &err,
                "device_get",
                "the array",
                Access::Write,
                Access::Read,
            );
        }
        s.submit().unwrap();
        (c, filled)
    });
    let cpu = ctx.adapter_info().device_type == gpu_arena::wgpu::DeviceType::Cpu;
    if cpu && ctx.memory_plan().uma {
        assert_eq!((alone, recorded), (0, 0));
    }
    assert!(recorded <= alone.max(1));
    assert_eq!(ctx.device_get(&cache).unwrap(), vec![9.0; 32]);
    assert_eq!(ctx.device_get(&filled).unwrap(), vec![7; 3]);
}

#[gpu_test]
fn an_update_recorded_after_a_launch_that_reads_the_array_runs_after_it() {
    // The update may not run at once on the host: the recorded launch must see the old rows.
    for (path, ctx) in op_paths() {
        let kernel = ctx.kernel(SCORES, "main").unwrap();
        let cache = ctx
            .device_put(&vec![1.0f32; MAX_SEQ * DIM], &[1, MAX_SEQ, DIM])
            .unwrap();
        let mut scores = ctx.zeros::<f32>(&[1, MAX_SEQ]).unwrap();
        let q = ctx.device_put(&[1.0f32; DIM], &[DIM]).unwrap();
        let mut s = ctx.sequence();
        {
            let layer = cache.view(&[0]).unwrap();
            let mut out = scores.view_mut(&[0]).unwrap();
            s.launch(&kernel)
                .params(&[2u32, DIM as u32])
                .arg(&layer)
                .arg(&q)
                .arg_mut(&mut out)
                .grid_for(2)
                .run()
                .unwrap();
        }
        let cache = s
            .dynamic_update_slice(
                cache,
                (&[3.0f32; DIM][..], &[1usize, 1, DIM][..]),
                &[0, 0, 0],
            )
            .unwrap();
        s.submit().unwrap();
        let got = ctx.device_get(&scores).unwrap();
        assert_eq!(
            got[..2],
            [DIM as f32, DIM as f32],
            "{path}: old rows scored"
        );
        let rows = ctx.device_get(&cache).unwrap();
        assert!(
            rows[..DIM].iter().all(|&v| v == 3.0),
            "{path}: then updated"
        );
    }
}

#[gpu_test]
fn two_threads_record_updates_into_one_array_through_sequences() {
    let ctx = context_with(test_config());
    let shared = ctx.device_put(&[4.0f32; DIM], &[1, DIM]).unwrap();
    std::thread::scope(|scope| {
        for t in 0..2 {
            let (ctx, shared) = (&ctx, &shared);
            scope.spawn(move || {
                let mut cache = ctx.zeros::<f32>(&[8, DIM]).unwrap();
                for i in 0..8 {
                    let mut s = ctx.sequence();
                    cache = s
                        .dynamic_update_slice(cache, shared, &[i as i64, 0])
                        .unwrap();
                    cache = s.fill_in_place(cache, (t + i) as f32).unwrap();
                    cache = s
                        .dynamic_update_slice(cache, shared, &[i as i64, 0])
                        .unwrap();
                    s.submit().unwrap();
                    let got = ctx.device_get(&cache).unwrap();
                    for (r, row) in got.chunks(DIM).enumerate() {
                        let want = if r == i { 4.0 } else { (t + i) as f32 };
                        assert!(
                            row.iter().all(|&v| v == want),
                            "thread {t}, step {i}, row {r}"
                        );
                    }
                }
            });
        }
    });
}

#[gpu_test]
fn recorded_uploads_alone_cost_at_most_the_submissions_of_device_put() {
    for (path, ctx) in op_paths() {
        let data: Vec<u32> = (0..1000).collect();
        let (alone, a) = submissions_made(&ctx, || ctx.device_put(&data, &[1000]).unwrap());
        let (recorded, b) = submissions_made(&ctx, || {
            let mut s = ctx.sequence();
            let b = s.put(&data, &[1000]).unwrap();
            s.submit().unwrap();
            b
        });
        assert!(recorded <= alone, "{path}: {recorded} > {alone}");
        assert_eq!(ctx.device_get(&a).unwrap(), data, "{path}");
        assert_eq!(ctx.device_get(&b).unwrap(), data, "{path}");
    }
}
