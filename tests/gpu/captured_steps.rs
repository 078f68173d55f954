//! Captured steps (`Context::capture` → `CapturedStep`): replays match the same work done op by
//! op, bit for bit, on every path; what a run may change (parameters, host data, starts, reads)
//! changes; a run allocates nothing, makes no bind group and is one submission; the memory plan
//! holds; bad runs are refused before anything changes; threads share a context.

use crate::harness;
use crate::harness::{context_with, op_paths, submissions_made, test_config};
use gpu_arena::error::{CaptureRefusal, IndexRefusal};
use gpu_arena::{ArenaConfig, CapturedStep, Context, DeviceArray, Error, InputSlot, StepPlan};

/// `y = x * p.scale + p.shift` elementwise (not commutative with the cache updates).
const AFFINE: &str = r#"
struct P { scale: f32, shift: f32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) i: vec3<u32>, @builtin(num_workgroups) g: vec3<u32>) {
    let j = i.x + i.y * g.x * 64u;
    if (j < arrayLength(&y)) { y[j] = x[j] * p.scale + p.shift; }
}
"#;

/// `acc += x` elementwise.
const ACCUMULATE: &str = r#"
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> acc: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) i: vec3<u32>, @builtin(num_workgroups) g: vec3<u32>) {
    let j = i.x + i.y * g.x * 64u;
    if (j < arrayLength(&acc)) { acc[j] = acc[j] + x[j]; }
}
"#;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Affine {
    scale: f32,
    shift: f32,
}

const ROWS: usize = 16;
const WIDTH: usize = 64;

fn query(t: usize) -> Vec<f32> {
    (0..WIDTH)
        .map(|i| (t * 131 + i * 7) as f32 * 0.25 - 3.0)
        .collect()
}

fn affine(t: usize) -> Affine {
    Affine {
        scale: 1.0 + t as f32 * 0.5,
        shift: t as f32 - 2.0,
    }
}

/// One decode-like step: a query row comes from the host, is scaled (a temporary), written into
/// the KV cache at position `t`, the row at `t` is sliced back out (a temporary), accumulated
/// into a running sum (an output), and the sum is read back.
struct Decode {
    step: CapturedStep,
    new_row: gpu_arena::InputSlot<f32>,
    params: gpu_arena::ParamsSlot<Affine>,
    at: gpu_arena::IndexSlot,
    read: gpu_arena::ReadSlot<f32>,
    /// The cache and the sum as array slots: a run may bind another request's.
    cache_slot: gpu_arena::ArraySlot<f32>,
    sum_slot: gpu_arena::ArraySlot<f32>,
}

fn capture_decode(
    ctx: &Context,
    cache: DeviceArray<f32>,
    sum: &mut DeviceArray<f32>,
) -> (Decode, DeviceArray<f32>) {
    let affine_k = ctx.kernel(AFFINE, "main").unwrap();
    let accumulate = ctx.kernel(ACCUMULATE, "main").unwrap();
    let mut cap = ctx.capture();
    let cache_slot = cap.array_slot(&cache).unwrap();
    let sum_slot = cap.array_slot(&*sum).unwrap();
    let (row, new_row) = cap.input(&query(0), &[1, WIDTH]).unwrap();
    let params = cap.params_slot(&affine(0));
    let mut scaled = cap.fill(&[1, WIDTH], 0.0f32).unwrap();
    cap.launch(&affine_k)
        .arg(&row)
        .arg_mut(&mut scaled)
        .params_slot(&params)
        .grid_for(WIDTH as u64)
        .run()
        .unwrap();
    let at = cap.index_slot(&[0, 0]);
    let cache = cap.dynamic_update_slice_at(cache, &scaled, &at).unwrap();
    let back = cap.dynamic_slice_at(&cache, &at, &[1, WIDTH]).unwrap();
    cap.launch(&accumulate)
        .arg(&back)
        .arg_mut(sum)
        .grid_for(WIDTH as u64)
        .run()
        .unwrap();
    let read = cap.read(&*sum).unwrap();
    drop((row, scaled, back));
    let step = cap.finish().unwrap();
    (
        Decode {
            step,
            new_row,
            params,
            at,
            read,
            cache_slot,
            sum_slot,
        },
        cache,
    )
}

/// The same work op by op: single ops, one at a time.
fn decode_op_by_op(
    ctx: &Context,
    cache: DeviceArray<f32>,
    sum: &mut DeviceArray<f32>,
    t: usize,
) -> DeviceArray<f32> {
    let affine_k = ctx.kernel(AFFINE, "main").unwrap();
    let accumulate = ctx.kernel(ACCUMULATE, "main").unwrap();
    let row = ctx.device_put(&query(t), &[1, WIDTH]).unwrap();
    let mut scaled = ctx.zeros::<f32>(&[1, WIDTH]).unwrap();
    ctx.launch(&affine_k)
        .arg(&row)
        .arg_mut(&mut scaled)
        .params(&affine(t))
        .grid_for(WIDTH as u64)
        .run()
        .unwrap();
    let cache = ctx
        .dynamic_update_slice(cache, &scaled, &[t as i64, 0])
        .unwrap();
    let back = ctx
        .dynamic_slice(&cache, &[t as i64, 0], &[1, WIDTH])
        .unwrap();
    ctx.launch(&accumulate)
        .arg(&back)
        .arg_mut(sum)
        .grid_for(WIDTH as u64)
        .run()
        .unwrap();
    cache
}

/// The op paths and forced non-coherent zero-copy memory (runs write and read mapped staging).
fn every_path() -> Vec<(&'static str, Context)> {
    let mut paths = op_paths();
    paths.push((
        "non-coherent zero-copy",
        context_with(ArenaConfig {
            force_non_coherent: true,
            ..test_config()
        }),
    ));
    paths
}

fn bits(values: &[f32]) -> Vec<u32> {
    values.iter().map(|v| v.to_bits()).collect()
}

#[gpu_test]
fn replays_in_a_loop_match_the_same_work_op_by_op_bit_for_bit_on_every_path() {
    for (path, ctx) in every_path() {
        let mut sum = ctx.zeros::<f32>(&[1, WIDTH]).unwrap();
        let cache = ctx.zeros::<f32>(&[ROWS, WIDTH]).unwrap();
        let (mut decode, cache) = capture_decode(&ctx, cache, &mut sum);
        let mut ref_sum = ctx.zeros::<f32>(&[1, WIDTH]).unwrap();
        let mut ref_cache = ctx.zeros::<f32>(&[ROWS, WIDTH]).unwrap();
        // Positions past the end clamp to the last row, as XLA clamps.
        for t in [0usize, 1, 2, 3, 7, 15, 20, 4] {
            let q = query(t);
            let mut read = vec![0.0f32; WIDTH];
            decode
                .step
                .run()
                .input(&decode.new_row, &q)
                .params(&decode.params, &affine(t))
                .start(&decode.at, &[t as i64, 0])
                .read_into(&decode.read, &mut read)
                .submit()
                .unwrap();
            ref_cache = decode_op_by_op(&ctx, ref_cache, &mut ref_sum, t);
            let ref_read = ctx.device_get(&ref_sum).unwrap();
            assert_eq!(bits(&read), bits(&ref_read), "{path}: the read at t = {t}");
        }
        assert_eq!(
            bits(&ctx.device_get(&cache).unwrap()),
            bits(&ctx.device_get(&ref_cache).unwrap()),
            "{path}: the cache, updated in place across runs"
        );
        assert_eq!(decode.step.runs(), 8);
    }
}

#[gpu_test]
fn a_run_allocates_nothing_makes_no_bind_group_and_is_one_submission() {
    for (path, ctx) in op_paths() {
        let mut sum = ctx.zeros::<f32>(&[1, WIDTH]).unwrap();
        let cache = ctx.zeros::<f32>(&[ROWS, WIDTH]).unwrap();
        let (mut decode, _cache) = capture_decode(&ctx, cache, &mut sum);
        ctx.synchronize().unwrap();
        let allocs = ctx.memory_stats().num_allocs;
        let groups = ctx.bind_groups_made();
        for t in 0..5usize {
            let (submissions, result) = submissions_made(&ctx, || {
                decode
                    .step
                    .run()
                    .input(&decode.new_row, &query(t))
                    .params(&decode.params, &affine(t))
                    .start(&decode.at, &[t as i64, 0])
                    .submit()
            });
            result.unwrap();
            assert_eq!(submissions, 1, "{path}: one submission per run");
        }
        assert_eq!(
            ctx.memory_stats().num_allocs,
            allocs,
            "{path}: no allocation"
        );
        assert_eq!(ctx.bind_groups_made(), groups, "{path}: no bind group");
        assert!(decode.step.bind_groups() >= 3, "{path}: made at capture");
    }
}

#[gpu_test]
fn the_plan_states_the_peak_of_every_run_to_the_byte() {
    for zero_copy in [true, false] {
        let ctx = context_with(ArenaConfig {
            zero_copy,
            ..test_config()
        });
        let mut sum = ctx.zeros::<f32>(&[1, WIDTH]).unwrap();
        let cache = ctx.zeros::<f32>(&[ROWS, WIDTH]).unwrap();
        let (mut decode, cache) = capture_decode(&ctx, cache, &mut sum);
        let plan = decode.step.plan();
        // Three temporaries (the uploaded row, the scaled row, the row sliced back), each live
        // over part of the step: a block of at most 1.05 times the least any plan could use.
        assert_eq!(plan.temporaries.len(), 3, "{plan}");
        assert!(plan.block_bytes > 0);
        assert!(
            plan.block_bytes as f64 <= 1.05 * plan.lower_bound_bytes as f64,
            "{plan}"
        );
        for (i, a) in plan.temporaries.iter().enumerate() {
            for b in &plan.temporaries[i + 1..] {
                let live_together = a.first_step <= b.last_step && b.first_step <= a.last_step;
                let apart = a.offset + a.bytes <= b.offset || b.offset + b.bytes <= a.offset;
                assert!(!live_together || apart, "{plan}");
            }
        }
        assert!(plan.to_string().contains("temporaries in a block of"));
        // The step holds the cache, the sum and the block: nothing else is alive.
        drop((cache, sum));
        ctx.synchronize().unwrap();
        assert_eq!(ctx.memory_stats().bytes_in_use, plan.bytes_in_use, "{plan}");
        ctx.reset_peak_stats();
        for t in 0..6usize {
            decode
                .step
                .run()
                .params(&decode.params, &affine(t))
                .start(&decode.at, &[t as i64, 0])
                .submit()
                .unwrap();
        }
        ctx.synchronize().unwrap();
        assert_eq!(ctx.memory_stats().peak_bytes_in_use, plan.bytes_in_use);
        // Dropped with its last runs in flight: everything goes back.
        decode.step.run().submit().unwrap();
        drop(decode);
        ctx.synchronize().unwrap();
        assert_eq!(ctx.memory_stats().bytes_in_use, 0);
    }
}

#[gpu_test]
fn a_run_with_a_wrong_slice_rank_or_foreign_slot_is_refused_and_changes_nothing() {
    let ctx = harness::context();
    let mut sum = ctx.zeros::<f32>(&[1, WIDTH]).unwrap();
    let cache = ctx.zeros::<f32>(&[ROWS, WIDTH]).unwrap();
    let (mut decode, cache) = capture_decode(&ctx, cache, &mut sum);
    let mut other_sum = ctx.zeros::<f32>(&[1, WIDTH]).unwrap();
    let other_cache = ctx.zeros::<f32>(&[ROWS, WIDTH]).unwrap();
    let (other, _other_cache) = capture_decode(&ctx, other_cache, &mut other_sum);
    decode
        .step
        .run()
        .start(&decode.at, &[2, 0])
        .submit()
        .unwrap();
    let before = ctx.device_get(&cache).unwrap();
    let runs = decode.step.runs();
    let short = vec![1.0f32; WIDTH - 1];
    let mut out_short = vec![0.0f32; 3];
    let refusals: Vec<Error> = vec![
        decode
            .step
            .run()
            .input(&decode.new_row, &short)
            .submit()
            .unwrap_err(),
        decode
            .step
            .run()
            .start(&decode.at, &[1])
            .submit()
            .unwrap_err(),
        decode
            .step
            .run()
            .params(&other.params, &affine(9))
            .start(&decode.at, &[9, 0])
            .submit()
            .unwrap_err(),
        decode
            .step
            .run()
            .read_into(&decode.read, &mut out_short)
            .submit()
            .unwrap_err(),
    ];
    use gpu_arena::error::{RunRefusal, SlotKind};
    let (step_capture, other_capture) = (decode.step.number(), other.step.number());
    let expected = [
        RunRefusal::InputLength {
            given: WIDTH - 1,
            captured: WIDTH,
        },
        RunRefusal::StartRank { given: 1, rank: 2 },
        RunRefusal::ForeignSlot {
            slot: SlotKind::Params,
            slot_capture: other_capture,
            step_capture,
        },
        RunRefusal::ReadLength {
            given: 3,
            captured: WIDTH,
        },
    ];
    for ((refused, want), says) in refusals.iter().zip(expected).zip([
        "63 elements",
        "rank 2",
        "belongs to Capture #",
        "holds 3 elements",
    ]) {
        assert!(
            matches!(refused, Error::CapturedRun { refusal } if *refusal == want),
            "{refused:?}"
        );
        assert!(refused.to_string().contains(says), "{refused}");
    }
    ctx.synchronize().unwrap();
    assert_eq!(ctx.device_get(&cache).unwrap(), before, "nothing ran");
    assert_eq!(decode.step.runs(), runs);
    // The refused parameters did not stick: the next run uses the last good ones.
    decode.step.run().submit().unwrap();
    assert_eq!(
        ctx.device_get(&cache).unwrap(),
        before,
        "the same row rewritten"
    );
}

#[gpu_test]
fn a_run_over_an_array_a_pending_sequence_writes_is_refused_naming_it() {
    let ctx = harness::context();
    let mut sum = ctx.zeros::<f32>(&[1, WIDTH]).unwrap();
    let cache = ctx.zeros::<f32>(&[ROWS, WIDTH]).unwrap();
    let (mut decode, cache) = capture_decode(&ctx, cache, &mut sum);
    let mut s = ctx.sequence();
    let cache = s.fill_in_place(cache, 1.0).unwrap();
    let refused = decode.step.run().submit().unwrap_err();
    let message = refused.to_string();
    assert!(
        matches!(&refused, Error::PendingInRecorder { argument, .. }
            if argument.contains("an array of the captured step")),
        "{message}"
    );
    assert!(message.contains("pending in Sequence #"), "{message}");
    assert!(
        message.contains("an array of the captured step"),
        "{message}"
    );
    s.submit().unwrap();
    decode
        .step
        .run()
        .input(&decode.new_row, &vec![5.0; WIDTH])
        .params(
            &decode.params,
            &Affine {
                scale: 1.0,
                shift: 0.0,
            },
        )
        .start(&decode.at, &[3, 0])
        .submit()
        .unwrap();
    let cache = ctx.device_get(&cache).unwrap();
    assert_eq!(cache[3 * WIDTH..4 * WIDTH], vec![5.0; WIDTH][..]);
    assert_eq!(cache[0], 1.0, "the sequence ran first");
    // While capturing, the capture's own arrays are pending, named as a capture.
    let x = ctx.device_put(&[1.0f32; 8], &[8]).unwrap();
    let mut cap = ctx.capture();
    let x = cap.fill_in_place(x, 2.0).unwrap();
    let refused = ctx.device_get(&x).unwrap_err();
    assert!(
        matches!(
            &refused,
            Error::PendingInRecorder {
                recorder: gpu_arena::error::Recorder {
                    kind: gpu_arena::error::RecorderKind::Capture,
                    ..
                },
                ..
            }
        ),
        "{refused}"
    );
    let refused = refused.to_string();
    assert!(refused.contains("pending in Capture #"), "{refused}");
    assert!(
        refused.contains("call finish() on that Capture"),
        "{refused}"
    );
    drop(cap);
    assert_eq!(
        ctx.device_get(&x).unwrap(),
        [1.0; 8],
        "a dropped capture ran nothing"
    );
}

#[gpu_test]
fn threads_run_their_own_steps_on_one_context_between_single_ops_of_another() {
    let ctx = harness::context();
    let shared = ctx.device_put(&[1.0f32; WIDTH], &[1, WIDTH]).unwrap();
    std::thread::scope(|scope| {
        for worker in 0..2usize {
            let (ctx, shared) = (&ctx, &shared);
            scope.spawn(move || {
                let accumulate = ctx.kernel(ACCUMULATE, "main").unwrap();
                let mut acc = ctx.zeros::<f32>(&[1, WIDTH]).unwrap();
                let mut cap = ctx.capture();
                let (row, new_row) = cap.input(&vec![0.0f32; WIDTH], &[1, WIDTH]).unwrap();
                cap.launch(&accumulate)
                    .arg(&row)
                    .arg_mut(&mut acc)
                    .grid_for(WIDTH as u64)
                    .run()
                    .unwrap();
                cap.launch(&accumulate)
                    .arg(shared)
                    .arg_mut(&mut acc)
                    .grid_for(WIDTH as u64)
                    .run()
                    .unwrap();
                drop(row);
                let mut step = cap.finish().unwrap();
                let mut model = vec![0.0f32; WIDTH];
                for t in 0..30usize {
                    let data: Vec<f32> =
                        (0..WIDTH).map(|i| (worker * 1000 + t + i) as f32).collect();
                    step.run().input(&new_row, &data).submit().unwrap();
                    for (m, d) in model.iter_mut().zip(&data) {
                        *m += d + 1.0;
                    }
                    if t % 7 == 0 {
                        assert_eq!(ctx.device_get(&acc).unwrap(), model, "worker {worker}");
                    }
                }
                assert_eq!(ctx.device_get(&acc).unwrap(), model, "worker {worker}");
            });
        }
        let (ctx, shared) = (&ctx, &shared);
        scope.spawn(move || {
            for _ in 0..60 {
                let copy = ctx.copy(shared).unwrap();
                assert_eq!(ctx.device_get(&copy).unwrap(), vec![1.0; WIDTH]);
            }
        });
    });
}

#[gpu_test]
fn out_of_memory_while_capturing_is_an_error_and_leaves_the_arena_as_it_was() {
    let ctx = context_with(ArenaConfig {
        mem_fraction: gpu_arena::MemFraction::fixed(0.01),
        ..test_config()
    });
    let x = ctx.device_put(&[1.0f32; 1024], &[1024]).unwrap();
    ctx.synchronize().unwrap();
    let in_use = ctx.memory_stats().bytes_in_use;
    let limit = ctx.memory_stats().bytes_reserved as usize + 1;
    let mut cap = ctx.capture();
    let small = cap.copy(&x).unwrap();
    let refused = cap.fill(&[limit], 0u8).unwrap_err();
    assert!(matches!(refused, Error::OutOfMemory { .. }), "{refused}");
    drop(small);
    drop(cap);
    ctx.synchronize().unwrap();
    assert_eq!(ctx.memory_stats().bytes_in_use, in_use);
    assert_eq!(ctx.device_get(&x).unwrap(), [1.0; 1024]);
}

#[gpu_test]
fn a_moving_start_over_arrays_above_the_binding_limit_is_refused_at_capture() {
    let ctx = harness::context_with(ArenaConfig {
        max_binding_bytes: Some(4096),
        ..harness::test_config()
    });
    let cache = ctx.zeros::<f32>(&[64, 64]).unwrap(); // 16 KiB, above the 4 KiB binding
    let row = ctx.zeros::<f32>(&[1, 64]).unwrap();
    let mut cap = ctx.capture();
    let at = cap.index_slot(&[0, 0]);
    let refused = cap.dynamic_update_slice_at(cache, &row, &at).unwrap_err();
    assert!(matches!(
        refused.error,
        Error::Capture {
            refusal: CaptureRefusal::BindingTooLarge {
                bytes: 16384,
                limit: 4096
            },
            ..
        }
    ));
    assert!(
        refused.error.to_string().contains("binding limit"),
        "{}",
        refused.error
    );
    let cache = refused.array;
    // A slot of another rank is refused too, and the operand comes back each time.
    let flat = cap.index_slot(&[0]);
    let refused = cap.dynamic_update_slice_at(cache, &row, &flat).unwrap_err();
    assert!(
        matches!(
            refused.error,
            Error::Capture {
                operation: "Capture::dynamic_update_slice_at",
                refusal: gpu_arena::error::CaptureRefusal::SlotRank {
                    slot_rank: 1,
                    array_rank: 2
                },
            }
        ),
        "{}",
        refused.error
    );
    assert!(
        refused.error.to_string().contains("rank"),
        "{}",
        refused.error
    );
    assert_eq!(refused.array.shape(), [64, 64]);
    drop(cap);
}

#[gpu_test]
fn immediate_parameters_from_a_slot_change_per_run() {
    let ctx = harness::context();
    if !ctx.device().features().contains(wgpu::Features::IMMEDIATES) {
        harness::skip(harness::Need::Immediates);
        return;
    }
    let k = ctx
        .kernel(
            r#"
        var<immediate> p: vec2<u32>;
        @group(0) @binding(0) var<storage, read_write> out: array<u32>;
        @compute @workgroup_size(1)
        fn main() { out[p.x] = out[p.x] + p.y; }"#,
            "main",
        )
        .unwrap();
    let mut out = ctx.zeros::<u32>(&[8]).unwrap();
    let mut cap = ctx.capture();
    let first = cap.params_slot(&[0u32, 1]);
    let second = cap.params_slot(&[1u32, 1]);
    for slot in [&first, &second, &first] {
        cap.launch(&k)
            .params_slot(slot)
            .arg_mut(&mut out)
            .grid([1, 1, 1])
            .run()
            .unwrap();
    }
    let mut step = cap.finish().unwrap();
    let mut model = [0u32; 8];
    for i in 0..8u32 {
        let (a, b) = ((i % 8, i + 10), ((i * 3) % 8, 100 * i));
        step.run()
            .params(&first, &[a.0, a.1])
            .params(&second, &[b.0, b.1])
            .submit()
            .unwrap();
        model[a.0 as usize] += 2 * a.1;
        model[b.0 as usize] += b.1;
    }
    assert_eq!(ctx.device_get(&out).unwrap(), model);
}

#[gpu_test]
fn host_operands_and_fills_are_redone_by_every_run() {
    for (path, ctx) in op_paths() {
        let cache = ctx.zeros::<u32>(&[4, 8]).unwrap();
        let mut cap = ctx.capture();
        // A host row written in place at row 1, and row 3 filled: constants of the step.
        let shape = [1usize, 8];
        let cache = cap
            .dynamic_update_slice(cache, (&[7u32; 8][..], &shape[..]), &[1, 0])
            .unwrap();
        let filled = cap.fill(&shape, 9u32).unwrap();
        let cache = cap.dynamic_update_slice(cache, &filled, &[3, 0]).unwrap();
        drop(filled);
        let mut step = cap.finish().unwrap();
        assert_eq!(
            ctx.device_get(&cache).unwrap(),
            [0; 32],
            "{path}: nothing ran yet"
        );
        step.run().submit().unwrap();
        let mut want = [0u32; 32];
        want[8..16].copy_from_slice(&[7; 8]);
        want[24..32].copy_from_slice(&[9; 8]);
        assert_eq!(ctx.device_get(&cache).unwrap(), want, "{path}");
        // Overwritten by single ops between runs, and rewritten by the next run.
        let cache = ctx.fill_in_place(cache, 1).unwrap();
        step.run().submit().unwrap();
        want.iter_mut()
            .enumerate()
            .filter(|(i, _)| !(8..16).contains(i) && !(24..32).contains(i))
            .for_each(|(_, w)| *w = 1);
        assert_eq!(ctx.device_get(&cache).unwrap(), want, "{path}");
    }
}

#[gpu_test]
fn a_parameter_slot_outside_its_capture_is_refused_and_records_nothing() {
    let ctx = harness::context();
    let k = ctx.kernel(AFFINE, "main").unwrap();
    let x = ctx.device_put(&[1.0f32; 64], &[64]).unwrap();
    let mut y = ctx.zeros::<f32>(&[64]).unwrap();
    let mut cap = ctx.capture();
    // Eager work beside the open capture on purpose (else the launch is refused for that).
    cap.set_mode(gpu_arena::CaptureMode::Relaxed);
    let slot = cap.params_slot(&affine(1));
    let refused = ctx
        .launch(&k)
        .arg(&x)
        .arg_mut(&mut y)
        .params_slot(&slot)
        .grid_for(64)
        .run()
        .unwrap_err();
    assert!(
        matches!(
            refused,
            Error::Capture {
                operation: "launch",
                refusal: gpu_arena::error::CaptureRefusal::ForeignSlot {
                    slot: gpu_arena::error::SlotKind::Params,
                    capture: None,
                    ..
                },
            }
        ),
        "{refused}"
    );
    assert!(
        refused.to_string().contains("outside any capture"),
        "{refused}"
    );
    let mut other = ctx.capture();
    let refused = other
        .launch(&k)
        .arg(&x)
        .arg_mut(&mut y)
        .params_slot(&slot)
        .grid_for(64)
        .run()
        .unwrap_err();
    assert!(
        matches!(
            refused,
            Error::Capture {
                operation: "launch",
                refusal: gpu_arena::error::CaptureRefusal::ForeignSlot {
                    slot: gpu_arena::error::SlotKind::Params,
                    slot_capture,
                    capture: Some(recorded_in),
                },
            } if slot_capture == cap.number() && recorded_in == other.number()
        ),
        "{refused}"
    );
    assert!(
        refused
            .to_string()
            .contains(&format!("recorded in Capture #{}", other.number())),
        "{refused}"
    );
    assert!(other.is_empty(), "the refused launch recorded nothing");
    assert_eq!(
        ctx.device_get(&y).unwrap(),
        [0.0; 64],
        "y is not pending: the refusal marked nothing"
    );
    drop((cap, other));
}

#[gpu_test]
fn an_empty_capture_runs_as_an_empty_submission_and_a_step_moves_between_threads() {
    let ctx = harness::context();
    let cap = ctx.capture();
    let mut step = cap.finish().unwrap();
    assert_eq!(step.plan().steps, 0);
    assert_eq!(step.plan().block_bytes, 0);
    let id = step.run().submit().unwrap();
    assert!(id.0 > 0);
    let handle = std::thread::spawn(move || step.run().submit().map(|_| step.runs()));
    assert_eq!(handle.join().unwrap().unwrap(), 2);
    ctx.synchronize().unwrap();
}

#[gpu_test]
fn identical_dispatches_share_one_bind_group_and_still_each_run() {
    let ctx = harness::context();
    let add = ctx
        .kernel(
            r#"@group(0) @binding(0) var<uniform> p: u32;
            @group(0) @binding(1) var<storage, read_write> a: array<u32>;
            @compute @workgroup_size(64) fn main(@builtin(global_invocation_id) i: vec3<u32>) {
            if (i.x < arrayLength(&a)) { a[i.x] = a[i.x] * 2u + p; } }"#,
            "main",
        )
        .unwrap();
    let mut a = ctx.zeros::<u32>(&[64]).unwrap();
    let mut b = ctx.zeros::<u32>(&[64]).unwrap();
    let mut cap = ctx.capture();
    let slot = cap.params_slot(&5u32);
    for (p, on_b) in [(1u32, false), (1, false), (1, true), (2, false), (1, false)] {
        let target = if on_b { &mut b } else { &mut a };
        cap.launch(&add)
            .params(&p)
            .arg_mut(target)
            .grid_for(64)
            .run()
            .unwrap();
    }
    // Set per run: never shared, even when its value matches another launch's.
    cap.launch(&add)
        .params_slot(&slot)
        .arg_mut(&mut a)
        .grid_for(64)
        .run()
        .unwrap();
    let mut step = cap.finish().unwrap();
    // (1, a) three times share one; (1, b), (2, a) and the slotted launch have their own.
    assert_eq!(step.bind_groups(), 4);
    let run = |x: u32, p: u32| x * 2 + p;
    let (mut ma, mut mb) = (0u32, 0u32);
    for value in [3u32, 1] {
        step.run().params(&slot, &value).submit().unwrap();
        ma = run(run(ma, 1), 1);
        mb = run(mb, 1);
        ma = run(run(run(ma, 2), 1), value);
    }
    assert_eq!(ctx.device_get(&a).unwrap(), vec![ma; 64]);
    assert_eq!(ctx.device_get(&b).unwrap(), vec![mb; 64]);
}

#[gpu_test]
fn hostile_starts_clamp_and_empty_inputs_and_reads_run() {
    let ctx = harness::context();
    let cache = ctx.zeros::<u32>(&[4, 8]).unwrap();
    let mut cap = ctx.capture();
    let (row, new_row) = cap.input(&[1u32; 8], &[1, 8]).unwrap();
    let (empty, no_data) = cap.input::<u32>(&[], &[0, 8]).unwrap();
    let at = cap.index_slot(&[0, 0]);
    let cache = cap.dynamic_update_slice_at(cache, &row, &at).unwrap();
    let read = cap.read(&empty).unwrap();
    drop(row);
    let mut step = cap.finish().unwrap();
    let mut nothing: [u32; 0] = [];
    for (value, start) in [
        (2u32, [i64::MAX, i64::MIN]),
        (3, [i64::MIN, i64::MAX]),
        (4, [-1, 3]),
    ] {
        step.run()
            .input(&new_row, &[value; 8])
            .input(&no_data, &[])
            .start(&at, &start)
            .read_into(&read, &mut nothing)
            .submit()
            .unwrap();
    }
    // Clamped as XLA clamps: [MAX, MIN] is row 3, [MIN, MAX] and [-1, 3] are row 0.
    let got = ctx.device_get(&cache).unwrap();
    assert_eq!(got[24..32], [2; 8]);
    assert_eq!(got[0..8], [4; 8]);
    assert_eq!(got[8..24], [0; 16]);
}

#[gpu_test]
fn a_moving_start_just_over_the_binding_limit_is_refused_and_at_it_is_accepted() {
    let ctx = harness::context_with(ArenaConfig {
        max_binding_bytes: Some(4096),
        ..harness::test_config()
    });
    let at_limit = ctx.zeros::<f32>(&[1024]).unwrap(); // 4096 bytes: binds whole
    let over = ctx.zeros::<f32>(&[1025]).unwrap(); // 4100 bytes, bound as 4112
    let row = ctx.device_put(&[7.0f32; 4], &[4]).unwrap();
    let mut cap = ctx.capture();
    let start = cap.index_slot(&[0]);
    let refused = cap.dynamic_update_slice_at(over, &row, &start).unwrap_err();
    assert!(matches!(
        refused.error,
        Error::Capture {
            refusal: CaptureRefusal::BindingTooLarge {
                bytes: 4112,
                limit: 4096
            },
            ..
        }
    ));
    assert_eq!(
        refused.array.shape(),
        [1025],
        "the donated array comes back"
    );
    let at_limit = cap.dynamic_update_slice_at(at_limit, &row, &start).unwrap();
    let mut step = cap.finish().unwrap();
    step.run().start(&start, &[1020]).submit().unwrap();
    let got = ctx.device_get(&at_limit).unwrap();
    assert_eq!(got[1020..1024], [7.0; 4]);
    assert_eq!(got[0..4], [0.0; 4], "the captured start is not run");
}

/// `out = a * 1024 + b` elementwise.
const COMBINE: &str = r#"
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) i: vec3<u32>) {
    if (i.x < arrayLength(&out)) { out[i.x] = a[i.x] * 1024.0 + b[i.x]; }
}
"#;

#[gpu_test]
fn back_to_back_runs_that_set_some_inputs_keep_the_latest_bytes_of_the_others() {
    const RUNS: usize = 24;
    let row =
        |seed: usize| -> Vec<f32> { (0..WIDTH).map(|i| ((seed * 37 + i) % 512) as f32).collect() };
    for (path, ctx) in every_path() {
        let combine = ctx.kernel(COMBINE, "main").unwrap();
        let history = ctx.zeros::<f32>(&[RUNS, WIDTH]).unwrap();
        let mut cap = ctx.capture();
        let (a, a_slot) = cap.input(&row(1000), &[1, WIDTH]).unwrap();
        let (b, b_slot) = cap.input(&row(2000), &[1, WIDTH]).unwrap();
        let mut out = cap.fill(&[1, WIDTH], 0.0f32).unwrap();
        cap.launch(&combine)
            .arg(&a)
            .arg(&b)
            .arg_mut(&mut out)
            .grid_for(WIDTH as u64)
            .run()
            .unwrap();
        let at = cap.index_slot(&[0, 0]);
        let history = cap.dynamic_update_slice_at(history, &out, &at).unwrap();
        drop((a, b, out));
        let mut step = cap.finish().unwrap();
        // Runs go out back to back, none waited: each sets one input, the other or both, and
        // the input it leaves unset keeps the bytes of the last run that set it.
        let (mut want_a, mut want_b) = (row(1000), row(2000));
        let mut want = vec![0.0f32; RUNS * WIDTH];
        for r in 0..RUNS {
            let (new_a, new_b) = (row(r), row(r + 500));
            let mut run = step.run().start(&at, &[r as i64, 0]);
            if r % 3 != 1 {
                run = run.input(&a_slot, &new_a);
                want_a = new_a.clone();
            }
            if r % 3 != 0 {
                run = run.input(&b_slot, &new_b);
                want_b = new_b.clone();
            }
            run.submit().unwrap();
            for i in 0..WIDTH {
                want[r * WIDTH + i] = want_a[i] * 1024.0 + want_b[i];
            }
        }
        assert_eq!(
            bits(&ctx.device_get(&history).unwrap()),
            bits(&want),
            "{path}: every run's row from the latest bytes of both inputs"
        );
    }
}

#[gpu_test]
fn an_uninitialised_array_of_a_capture_is_a_temporary_that_no_run_clears() {
    for (path, ctx) in op_paths() {
        let affine_k = ctx.kernel(AFFINE, "main").unwrap();
        let accumulate = ctx.kernel(ACCUMULATE, "main").unwrap();
        let mut sum = ctx.zeros::<f32>(&[1, WIDTH]).unwrap();
        let capture_with = |uninitialised: bool, sum: &mut DeviceArray<f32>| {
            let mut cap = ctx.capture();
            let (row, new_row) = cap.input(&query(0), &[1, WIDTH]).unwrap();
            let mut scaled = if uninitialised {
                cap.alloc::<f32>(&[1, WIDTH]).unwrap()
            } else {
                cap.fill(&[1, WIDTH], 0.0f32).unwrap()
            };
            cap.launch(&affine_k)
                .arg(&row)
                .arg_mut(&mut scaled)
                .params(&affine(3))
                .grid_for(WIDTH as u64)
                .run()
                .unwrap();
            cap.launch(&accumulate)
                .arg(&scaled)
                .arg_mut(sum)
                .grid_for(WIDTH as u64)
                .run()
                .unwrap();
            drop((row, scaled));
            (cap.finish().unwrap(), new_row)
        };
        let (filled, _) = capture_with(false, &mut sum);
        let (mut step, new_row) = capture_with(true, &mut sum);
        assert_eq!(
            step.plan().steps + 1,
            filled.plan().steps,
            "{path}: no clear step for the uninitialised array"
        );
        assert_eq!(
            step.plan().temporaries.len(),
            2,
            "{path}: the row and the scaled row"
        );
        drop(filled);
        let mut want = vec![0.0f32; WIDTH];
        for t in 0..4 {
            let q = query(t);
            step.run().input(&new_row, &q).submit().unwrap();
            let p = affine(3);
            for (w, x) in want.iter_mut().zip(&q) {
                *w += x * p.scale + p.shift;
            }
        }
        assert_eq!(
            bits(&ctx.device_get(&sum).unwrap()),
            bits(&want),
            "{path}: every run's kernel wrote the whole uninitialised array"
        );
    }
}

#[gpu_test]
fn a_recorders_alloc_refuses_hostile_shapes_and_records_nothing() {
    let ctx = harness::context();
    let mut cap = ctx.capture();
    let before = ctx.memory_stats().num_allocs;
    for shape in [
        vec![usize::MAX, 2],
        vec![1usize << 40, 1 << 40],
        vec![1; 7], // past the largest rank
    ] {
        match cap.alloc::<f32>(&shape) {
            Err(Error::Shape { .. }) => {}
            other => panic!("shape {shape:?}: {other:?}"),
        }
    }
    let empty = cap.alloc::<f32>(&[0, 5]).unwrap();
    assert_eq!(empty.len(), 0);
    assert_eq!(cap.len(), 0, "an allocation records no step");
    drop(empty);
    let step = cap.finish().unwrap();
    assert_eq!(step.plan().steps, 0);
    assert_eq!(
        ctx.memory_stats().num_allocs,
        before + 1,
        "only the empty array"
    );
}

/// A run's host data and reads are explicit transfers: the transfer guard refuses them at
/// each level that refuses explicit transfers (nothing runs), and the transfer statistics
/// count their bytes, on every path.
#[gpu_test]
fn a_runs_inputs_and_reads_are_explicit_transfers_the_guard_sees_and_the_stats_count() {
    use gpu_arena::{TransferDirection, TransferGuard, TransferGuardLevel};
    for (path, ctx) in op_paths() {
        let cache = ctx.zeros::<f32>(&[ROWS, WIDTH]).unwrap();
        let mut sum = ctx.zeros::<f32>(&[1, WIDTH]).unwrap();
        // The capture's own input is refused under its own name.
        {
            let _guard = TransferGuard::scoped(TransferGuardLevel::DisallowExplicit);
            let mut cap = ctx.capture();
            let refused = cap.input(&[1.0f32; 4], &[4]).map(drop).unwrap_err();
            assert!(
                matches!(
                    refused,
                    Error::TransferGuard {
                        operation: "Capture::input",
                        ..
                    }
                ),
                "{path}: {refused:?}"
            );
        }
        let (mut decode, cache) = capture_decode(&ctx, cache, &mut sum);
        let before = ctx.transfer_stats();
        let mut out = vec![0.0f32; WIDTH];
        let nines = vec![9.0f32; WIDTH];
        for (direction, input) in [
            (TransferDirection::HostToDevice, true),
            (TransferDirection::DeviceToHost, false),
        ] {
            let _guard =
                TransferGuard::scoped_direction(direction, TransferGuardLevel::DisallowExplicit);
            let run = decode.step.run();
            let run = if input {
                run.input(&decode.new_row, &nines)
            } else {
                run.read_into(&decode.read, &mut out)
            };
            let refused = run.submit().unwrap_err();
            assert!(
                matches!(refused, Error::TransferGuard { .. }),
                "{path}, {direction:?}: {refused:?}"
            );
        }
        assert_eq!(ctx.transfer_stats(), before, "{path}: nothing was counted");
        assert_eq!(
            ctx.device_get(&cache).unwrap(),
            vec![0.0; ROWS * WIDTH],
            "{path}: nothing ran"
        );
        let before = ctx.transfer_stats();
        decode
            .step
            .run()
            .input(&decode.new_row, &nines)
            .read_into(&decode.read, &mut out)
            .submit()
            .unwrap();
        let after = ctx.transfer_stats();
        let bytes = (WIDTH * 4) as u64;
        let up = after.host_to_device.explicit;
        let down = after.device_to_host.explicit;
        assert_eq!(up.count - before.host_to_device.explicit.count, 1, "{path}");
        assert_eq!(
            up.bytes - before.host_to_device.explicit.bytes,
            bytes,
            "{path}"
        );
        assert_eq!(
            down.count - before.device_to_host.explicit.count,
            1,
            "{path}"
        );
        assert_eq!(
            down.bytes - before.device_to_host.explicit.bytes,
            bytes,
            "{path}"
        );
        assert!(
            out.iter().any(|&v| v != 0.0),
            "{path}: the run read its sum"
        );
    }
}

/// Capturing moves nothing, so it counts no transfer and puts none on the timeline, kept or
/// dropped; a run that sets an input counts it once, and a run that sets none counts nothing:
/// captured data (an input's first value, a captured `put`) is counted by no run.
#[gpu_test]
fn capturing_counts_no_transfer_and_only_the_runs_that_set_an_input_count_it() {
    use gpu_arena::profile::TimelineEventKind;
    let ctx = crate::harness::context_with(gpu_arena::ArenaConfig {
        timeline_capacity: 1 << 12,
        ..crate::harness::test_config()
    });
    let transfers_on_the_timeline = || {
        ctx.timeline()
            .unwrap()
            .snapshot()
            .events
            .iter()
            .filter(|e| matches!(e.kind, TimelineEventKind::Transfer { .. }))
            .count()
    };
    let before = ctx.transfer_stats();
    let on_timeline = transfers_on_the_timeline();
    // Dropped without finishing.
    let mut cap = ctx.capture();
    let _ = cap.input(&[1u32; 1000], &[1000]).unwrap();
    drop(cap);
    assert_eq!(ctx.transfer_stats(), before);
    // Finished.
    let mut cap = ctx.capture();
    let (x, slot) = cap.input(&[1u32; 1000], &[1000]).unwrap();
    let constant = cap.put(&[3u32; 100], &[100]).unwrap();
    let mut step = cap.finish().unwrap();
    assert_eq!(ctx.transfer_stats(), before);
    assert_eq!(transfers_on_the_timeline(), on_timeline);
    step.run().submit().unwrap();
    assert_eq!(ctx.transfer_stats(), before, "a run that sets no input");
    step.run().input(&slot, &[7u32; 1000]).submit().unwrap();
    let after = ctx.transfer_stats();
    let up = after.host_to_device.explicit;
    assert_eq!(up.count - before.host_to_device.explicit.count, 1);
    assert_eq!(up.bytes - before.host_to_device.explicit.bytes, 4000);
    assert_eq!(transfers_on_the_timeline(), on_timeline + 1);
    drop(step);
    assert_eq!(ctx.device_get(&x).unwrap(), vec![7; 1000]);
    assert_eq!(ctx.device_get(&constant).unwrap(), vec![3; 100]);
}

/// An open capture refuses eager single ops and launches on its context from the thread that
/// opened it (a `ctx.launch` meant as `cap.launch` would run now and not be part of the step),
/// names the capture and the op, runs nothing; in `CaptureMode::Relaxed` they run; another
/// thread is never refused; after `finish` the context is as before.
#[gpu_test]
fn eager_work_on_the_capturing_thread_is_refused_unless_the_capture_is_relaxed() {
    use gpu_arena::CaptureMode;
    let ctx = harness::context();
    let k = ctx.kernel(AFFINE, "main").unwrap();
    let x = ctx.device_put(&vec![1.0f32; WIDTH], &[WIDTH]).unwrap();
    let mut y = ctx.zeros::<f32>(&[WIDTH]).unwrap();
    let mut cap = ctx.capture();
    let number = cap.number();
    let refused = |what: &str, error: Error| match &error {
        Error::EagerDuringCapture { operation, capture } => {
            assert_eq!(*capture, number, "{what}");
            assert!(
                error.to_string().contains(&format!("cap.{operation}(..)")),
                "{error}"
            );
        }
        other => panic!("{what}: {other:?}"),
    };
    refused(
        "launch",
        ctx.launch(&k)
            .arg(&x)
            .arg_mut(&mut y)
            .params(&affine(1))
            .grid_for(WIDTH)
            .run()
            .unwrap_err(),
    );
    refused("copy", ctx.copy(&x).unwrap_err());
    refused("fill", ctx.fill(&[4], 1u32).unwrap_err());
    refused(
        "dynamic_slice",
        ctx.dynamic_slice(&x, &[0], &[4]).unwrap_err(),
    );
    let donated = ctx.fill_in_place(y, 2.0).unwrap_err();
    refused("fill_in_place", donated.error);
    let mut y = donated.array;
    // Another thread's work is its own.
    std::thread::scope(|scope| {
        scope.spawn(|| ctx.copy(&x).unwrap());
    });
    cap.set_mode(CaptureMode::Relaxed);
    ctx.launch(&k)
        .arg(&x)
        .arg_mut(&mut y)
        .params(&affine(1))
        .grid_for(WIDTH)
        .run()
        .unwrap();
    cap.set_mode(CaptureMode::ThreadLocal);
    assert!(ctx.copy(&x).is_err(), "refused again");
    // The capture itself records as before, and finishing it ends the refusals.
    let mut z = cap.alloc::<f32>(&[WIDTH]).unwrap();
    cap.launch(&k)
        .arg(&x)
        .arg_mut(&mut z)
        .params(&affine(0))
        .grid_for(WIDTH)
        .run()
        .unwrap();
    let mut step = cap.finish().unwrap();
    step.run().submit().unwrap();
    // y = x * scale + shift, with x all ones.
    let want = vec![affine(1).scale + affine(1).shift; WIDTH];
    assert_eq!(ctx.device_get(&y).unwrap(), want, "the relaxed launch ran");
    ctx.copy(&x).unwrap();
    // Dropping a capture ends its refusals too.
    let cap = ctx.capture();
    assert!(ctx.copy(&x).is_err());
    drop(cap);
    ctx.copy(&x).unwrap();
}

/// An input or output dropped while the step still uses it stays held by the step, and the
/// plan says so (its memory comes back with the step).
#[gpu_test]
fn the_plan_names_arrays_the_user_dropped_that_the_step_still_holds() {
    let ctx = harness::context();
    let k = ctx.kernel(AFFINE, "main").unwrap();
    let x = ctx.device_put(&vec![1.0f32; WIDTH], &[WIDTH]).unwrap();
    let mut y = ctx.zeros::<f32>(&[WIDTH]).unwrap();
    let mut cap = ctx.capture();
    cap.launch(&k)
        .arg(&x)
        .arg_mut(&mut y)
        .params(&affine(1))
        .grid_for(WIDTH)
        .run()
        .unwrap();
    let mut step = cap.finish().unwrap();
    let plan = step.plan();
    assert_eq!(plan.arrays_held_by_the_step_alone, 0, "{plan}");
    assert!(
        !plan.to_string().contains("held by the step alone"),
        "{plan}"
    );
    // Counts in words, and no table header over no temporaries.
    let steps = match plan.steps {
        1 => "1 step".to_string(),
        n => format!("{n} steps"),
    };
    assert!(plan.temporaries.is_empty(), "{plan}");
    assert!(
        plan.to_string()
            .starts_with(&format!("captured step: {steps}, no temporaries, ")),
        "{plan}"
    );
    assert!(!plan.to_string().contains("offset"), "{plan}");
    assert!(!plan.to_string().contains("block"), "{plan}");
    let in_use = ctx.memory_stats().bytes_in_use;
    drop(x);
    ctx.synchronize().unwrap();
    let plan = step.plan();
    assert_eq!(plan.arrays_held_by_the_step_alone, 1, "{plan}");
    assert_eq!(
        plan.bytes_held_by_the_step_alone,
        (WIDTH * 4) as u64,
        "{plan}"
    );
    assert!(
        plan.to_string()
            .contains("1 of its arrays (256 bytes) is held by the step alone"),
        "{plan}"
    );
    assert_eq!(
        ctx.memory_stats().bytes_in_use,
        in_use,
        "its memory is still held"
    );
    step.run().submit().unwrap();
    drop(step);
    ctx.synchronize().unwrap();
    assert!(
        ctx.memory_stats().bytes_in_use < in_use,
        "it comes back with the step"
    );
}

/// With `strict_starts` (a debugging option), a start outside the operand is refused where XLA
/// would clamp it, by single ops and by every run of a captured step alike, and nothing runs;
/// starts in range work as ever.
#[gpu_test]
fn strict_starts_refuse_what_would_be_clamped_in_single_ops_and_captured_runs() {
    let ctx = context_with(ArenaConfig {
        strict_starts: true,
        ..test_config()
    });
    let x = ctx
        .device_put(&(0..40u32).collect::<Vec<_>>(), &[4, 10])
        .unwrap();
    let strict = |error: Error| match &error {
        Error::Index {
            refusal: IndexRefusal::StartOutOfRange { .. },
            ..
        } => assert!(
            error.to_string().contains("GPU_ARENA_STRICT_STARTS"),
            "{error}"
        ),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        ctx.device_get(&ctx.dynamic_slice(&x, &[3, 8], &[1, 2]).unwrap())
            .unwrap(),
        [38, 39]
    );
    strict(ctx.dynamic_slice(&x, &[3, 9], &[1, 2]).unwrap_err());
    strict(ctx.dynamic_slice(&x, &[-1, 0], &[1, 2]).unwrap_err());
    let row = ctx.device_put(&[7u32; 10], &[1, 10]).unwrap();
    let refused = ctx.dynamic_update_slice(x, &row, &[4, 0]).unwrap_err();
    strict(refused.error);
    let x = refused.array;
    assert_eq!(
        ctx.device_get(&x).unwrap(),
        (0..40u32).collect::<Vec<_>>(),
        "intact"
    );

    let cache = ctx.zeros::<f32>(&[ROWS, WIDTH]).unwrap();
    let mut sum = ctx.zeros::<f32>(&[1, WIDTH]).unwrap();
    let (mut decode, cache) = capture_decode(&ctx, cache, &mut sum);
    let run = |step: &mut CapturedStep, at: &gpu_arena::IndexSlot, row: i64| {
        step.run().start(at, &[row, 0]).submit()
    };
    run(&mut decode.step, &decode.at, ROWS as i64 - 1).unwrap();
    let before = ctx.device_get(&cache).unwrap();
    strict(run(&mut decode.step, &decode.at, ROWS as i64).unwrap_err());
    strict(run(&mut decode.step, &decode.at, -1).unwrap_err());
    assert_eq!(ctx.device_get(&cache).unwrap(), before, "nothing ran");
}

/// On UMA with zero-copy on, a run whose step is idle writes its inputs straight into their
/// arrays before its commands run and leaves their copies out; otherwise it copies them from
/// an upload buffer. Either way a run sees exactly the data of its copy's point in the step:
/// an input never shares bytes with a temporary that dies before the input's copy, and an
/// input the step overwrites after using it is whole again at the next run that does not set
/// it. Runs alternate between waiting (idle: in place) and back-to-back (in flight).
#[gpu_test]
fn inputs_written_in_place_or_copied_give_every_run_its_own_data_on_every_path() {
    let n = 256usize;
    for (path, ctx) in every_path() {
        let affine = ctx.kernel(AFFINE, "main").unwrap();
        let host: Vec<f32> = (0..n).map(|i| i as f32 - 100.0).collect();
        let x = ctx.device_put(&host, &[n]).unwrap();
        let mut cap = ctx.capture();
        // Dies before the input is copied in: the plan could give both the same bytes.
        let mut early = cap.alloc::<f32>(&[n]).unwrap();
        cap.launch(&affine)
            .arg(&x)
            .arg_mut(&mut early)
            .params(&Affine {
                scale: 2.0,
                shift: 0.0,
            })
            .grid_for(n)
            .run()
            .unwrap();
        let read_early = cap.read(&early).unwrap();
        drop(early);
        let (mut input, slot) = cap.input(&vec![0.5f32; n], &[n]).unwrap();
        let mut out = cap.alloc::<f32>(&[n]).unwrap();
        cap.launch(&affine)
            .arg(&input)
            .arg_mut(&mut out)
            .params(&Affine {
                scale: 1.0,
                shift: 1.0,
            })
            .grid_for(n)
            .run()
            .unwrap();
        // The step overwrites its own input after using it.
        cap.launch(&affine)
            .arg(&x)
            .arg_mut(&mut input)
            .params(&Affine {
                scale: 0.0,
                shift: -5.0,
            })
            .grid_for(n)
            .run()
            .unwrap();
        drop(input);
        let read_out = cap.read(&out).unwrap();
        let mut step = cap.finish().unwrap();
        let mut latest = vec![0.5f32; n];
        for run in 0..8 {
            let data: Vec<f32> = (0..n).map(|i| (run * 1000 + i) as f32).collect();
            let sets = run % 3 != 2;
            if sets {
                latest = data.clone();
            }
            let (mut got_early, mut got_out) = (vec![0.0f32; n], vec![0.0f32; n]);
            let mut r = step.run();
            if sets {
                r = r.input(&slot, &data);
            }
            if run % 2 == 0 {
                r.read_into(&read_early, &mut got_early)
                    .read_into(&read_out, &mut got_out)
                    .submit()
                    .unwrap();
                let expect_out: Vec<f32> = latest.iter().map(|v| v + 1.0).collect();
                let expect_early: Vec<f32> = host.iter().map(|v| v * 2.0).collect();
                assert_eq!(bits(&got_out), bits(&expect_out), "{path}, run {run}");
                assert_eq!(bits(&got_early), bits(&expect_early), "{path}, run {run}");
            } else {
                // Back to back: the next run may find this one in flight.
                r.submit().unwrap();
            }
        }
        drop(out);
        ctx.synchronize().unwrap();
    }
}

/// Where the arena is host-visible, an input that is a temporary is planned live from the
/// step's first step (its run may write it before any command), so it shares no bytes with a
/// temporary that lives before its copy.
#[gpu_test(needs = HostVisibleArena)]
fn an_input_in_host_visible_memory_is_planned_live_from_the_first_step() {
    let ctx = harness::context();
    let affine = ctx.kernel(AFFINE, "main").unwrap();
    let n = 64usize;
    let x = ctx.device_put(&vec![1.0f32; n], &[n]).unwrap();
    let mut cap = ctx.capture();
    let mut early = cap.alloc::<f32>(&[n]).unwrap();
    cap.launch(&affine)
        .arg(&x)
        .arg_mut(&mut early)
        .params(&Affine {
            scale: 1.0,
            shift: 0.0,
        })
        .grid_for(n)
        .run()
        .unwrap();
    let mut late = cap.alloc::<f32>(&[n]).unwrap();
    cap.launch(&affine)
        .arg(&early)
        .arg_mut(&mut late)
        .params(&Affine {
            scale: 1.0,
            shift: 0.0,
        })
        .grid_for(n)
        .run()
        .unwrap();
    drop(early);
    let (input, _slot) = cap.input(&vec![2.0f32; n], &[n]).unwrap();
    let mut out = cap.alloc::<f32>(&[n]).unwrap();
    cap.launch(&affine)
        .arg(&input)
        .arg_mut(&mut out)
        .params(&Affine {
            scale: 1.0,
            shift: 0.0,
        })
        .grid_for(n)
        .run()
        .unwrap();
    drop((input, late));
    let _read = cap.read(&out).unwrap();
    let step = cap.finish().unwrap();
    let plan = step.plan();
    // early: steps 0-1; late: 1; the input: its copy at step 2, planned from 0.
    let lives: Vec<(usize, usize)> = plan
        .temporaries
        .iter()
        .map(|t| (t.first_step, t.last_step))
        .collect();
    assert_eq!(lives.len(), 3, "{lives:?}");
    assert_eq!(
        lives.iter().filter(|(first, _)| *first == 0).count(),
        2,
        "early and the input start at step 0: {lives:?}"
    );
    for (i, a) in plan.temporaries.iter().enumerate() {
        for b in &plan.temporaries[i + 1..] {
            let share_bytes = a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
            let share_steps = a.first_step <= b.last_step && b.first_step <= a.last_step;
            assert!(!(share_bytes && share_steps), "{a:?} and {b:?} overlap");
        }
    }
}

/// One capture serves four requests, each with its own KV cache and sum bound to the step's
/// array slots per run: every read and the final arrays are bitwise those of four captures,
/// one per request; no bind group is made after each request's first run; the arrays the
/// capture was made over are left untouched.
#[gpu_test]
fn one_capture_serves_four_requests_with_their_own_caches_bitwise_as_four_captures() {
    for (path, ctx) in every_path() {
        let new = || {
            (
                ctx.zeros::<f32>(&[ROWS, WIDTH]).unwrap(),
                ctx.zeros::<f32>(&[WIDTH]).unwrap(),
            )
        };
        let (cache, mut sum) = new();
        let (mut shared, captured_cache) = capture_decode(&ctx, cache, &mut sum);
        let mut requests: Vec<(DeviceArray<f32>, DeviceArray<f32>)> =
            (0..4).map(|_| new()).collect();
        let mut own: Vec<(Decode, DeviceArray<f32>, DeviceArray<f32>)> = (0..4)
            .map(|_| {
                let (cache, mut sum) = new();
                let (decode, cache) = capture_decode(&ctx, cache, &mut sum);
                (decode, cache, sum)
            })
            .collect();
        let mut groups_after_first_round = 0;
        for t in 0..ROWS + 3 {
            for (r, ((cache, sum), (decode, _, _))) in requests.iter_mut().zip(&mut own).enumerate()
            {
                let row = query(t * 4 + r);
                let p = affine(t + r);
                let start = [(t % ROWS) as i64, 0];
                let (mut got, mut want) = (vec![0.0f32; WIDTH], vec![0.0f32; WIDTH]);
                shared
                    .step
                    .run()
                    .input(&shared.new_row, &row)
                    .params(&shared.params, &p)
                    .start(&shared.at, &start)
                    .array(&shared.cache_slot, cache)
                    .array(&shared.sum_slot, sum)
                    .read_into(&shared.read, &mut got)
                    .submit()
                    .unwrap();
                decode
                    .step
                    .run()
                    .input(&decode.new_row, &row)
                    .params(&decode.params, &p)
                    .start(&decode.at, &start)
                    .read_into(&decode.read, &mut want)
                    .submit()
                    .unwrap();
                assert_eq!(bits(&got), bits(&want), "{path}: request {r}, step {t}");
            }
            if t == 0 {
                groups_after_first_round = shared.step.bind_groups();
            }
        }
        assert_eq!(
            shared.step.bind_groups(),
            groups_after_first_round,
            "{path}: a bind group was made after each cache's first run"
        );
        for (r, ((cache, sum), (_, own_cache, own_sum))) in requests.iter().zip(&own).enumerate() {
            let (got, want) = (
                ctx.device_get(cache).unwrap(),
                ctx.device_get(own_cache).unwrap(),
            );
            assert_eq!(bits(&got), bits(&want), "{path}: request {r}'s cache");
            let (got, want) = (
                ctx.device_get(sum).unwrap(),
                ctx.device_get(own_sum).unwrap(),
            );
            assert_eq!(bits(&got), bits(&want), "{path}: request {r}'s sum");
        }
        assert_eq!(
            ctx.device_get(&captured_cache).unwrap(),
            vec![0.0; ROWS * WIDTH],
            "{path}"
        );
        assert_eq!(ctx.device_get(&sum).unwrap(), vec![0.0; WIDTH], "{path}");
        // A run that binds nothing uses the arrays the capture was made over again.
        shared
            .step
            .run()
            .start(&shared.at, &[1, 0])
            .submit()
            .unwrap();
        let cache = ctx.device_get(&captured_cache).unwrap();
        assert!(cache[WIDTH..2 * WIDTH].iter().any(|&v| v != 0.0), "{path}");
    }
}

/// What a run cannot bind is refused before anything runs, with the values: an array of
/// another shape, a slot of another capture, an array the step uses elsewhere, an array of
/// another context; a capture refuses a slot of an
/// array it made itself.
#[gpu_test]
fn array_slots_refuse_what_a_run_cannot_bind_and_change_nothing() {
    use gpu_arena::error::{CaptureRefusal, RunRefusal, SlotKind};
    let ctx = harness::context();
    let other_ctx = harness::context();
    let (cache, mut sum) = (
        ctx.zeros::<f32>(&[ROWS, WIDTH]).unwrap(),
        ctx.zeros::<f32>(&[WIDTH]).unwrap(),
    );
    let (mut decode, _cache) = capture_decode(&ctx, cache, &mut sum);
    let (cache2, mut sum2) = (
        ctx.zeros::<f32>(&[ROWS, WIDTH]).unwrap(),
        ctx.zeros::<f32>(&[WIDTH]).unwrap(),
    );
    let (other, _cache2) = capture_decode(&ctx, cache2, &mut sum2);
    let mut wrong_shape = ctx.zeros::<f32>(&[ROWS + 1, WIDTH]).unwrap();
    let mut spare = ctx.zeros::<f32>(&[WIDTH]).unwrap();
    let mut foreign = other_ctx.zeros::<f32>(&[WIDTH]).unwrap();
    let runs = decode.step.runs();
    let refused = decode
        .step
        .run()
        .array(&decode.cache_slot, &mut wrong_shape)
        .submit()
        .unwrap_err();
    assert!(
        matches!(&refused, Error::CapturedRun { refusal: RunRefusal::ArrayShape { given, captured } }
            if *given == [ROWS + 1, WIDTH] && *captured == [ROWS, WIDTH]),
        "{refused:?}"
    );
    let refused = decode
        .step
        .run()
        .array(&other.sum_slot, &mut spare)
        .submit()
        .unwrap_err();
    assert!(
        matches!(
            &refused,
            Error::CapturedRun {
                refusal: RunRefusal::ForeignSlot {
                    slot: SlotKind::Array,
                    ..
                }
            }
        ),
        "{refused:?}"
    );
    let refused = decode
        .step
        .run()
        .array(&decode.sum_slot, &mut foreign)
        .submit()
        .unwrap_err();
    assert!(
        matches!(&refused, Error::ForeignArray { .. }),
        "{refused:?}"
    );
    // An array the step also uses elsewhere cannot stand in for a slot's: the step was planned
    // over distinct arrays.
    let accumulate = ctx.kernel(ACCUMULATE, "main").unwrap();
    let (mut a, b) = (
        ctx.zeros::<f32>(&[WIDTH]).unwrap(),
        ctx.zeros::<f32>(&[WIDTH]).unwrap(),
    );
    let mut cap = ctx.capture();
    let slot_a = cap.array_slot(&a).unwrap();
    cap.launch(&accumulate)
        .arg(&b)
        .arg_mut(&mut a)
        .grid_for(WIDTH)
        .run()
        .unwrap();
    let mut small = cap.finish().unwrap();
    let mut b = b;
    let refused = small.run().array(&slot_a, &mut b).submit().unwrap_err();
    assert!(
        matches!(
            &refused,
            Error::CapturedRun {
                refusal: RunRefusal::ArrayUsedByTheStep { slot: 0 }
            }
        ),
        "{refused:?}"
    );
    assert_eq!(small.runs(), 0);
    // Its own array stands for itself.
    small.run().array(&slot_a, &mut a).submit().unwrap();
    let mut cap = ctx.capture();
    let (made, _slot) = cap.input(&[1.0f32; 4], &[4]).unwrap();
    let refused = cap.array_slot(&made).unwrap_err();
    assert!(
        matches!(
            &refused,
            Error::Capture {
                refusal: CaptureRefusal::ArrayMadeByCapture,
                ..
            }
        ),
        "{refused:?}"
    );
    drop(cap);
    assert_eq!(decode.step.runs(), runs, "the refused runs ran nothing");
    assert_eq!(ctx.device_get(&spare).unwrap(), vec![0.0; WIDTH]);
}

/// Two threads run their own captured steps, each binding one shared array to its array slot
/// per run: the step's pending and use tracking order them, and no update is lost.
#[gpu_test]
fn two_threads_binding_one_shared_array_to_their_steps_lose_no_update() {
    const RUNS: usize = 40;
    let ctx = harness::context();
    let accumulate = ctx.kernel(ACCUMULATE, "main").unwrap();
    let ones = ctx.device_put(&vec![1.0f32; WIDTH], &[WIDTH]).unwrap();
    let mut shared = ctx.zeros::<f32>(&[WIDTH]).unwrap();
    let shared_lock = std::sync::Mutex::new(&mut shared);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                let mut own = ctx.zeros::<f32>(&[WIDTH]).unwrap();
                let mut cap = ctx.capture();
                let slot = cap.array_slot(&own).unwrap();
                cap.launch(&accumulate)
                    .arg(&ones)
                    .arg_mut(&mut own)
                    .grid_for(WIDTH)
                    .run()
                    .unwrap();
                let mut step = cap.finish().unwrap();
                for _ in 0..RUNS {
                    let mut guard = shared_lock.lock().unwrap();
                    step.run().array(&slot, &mut **guard).submit().unwrap();
                }
                assert_eq!(ctx.device_get(&own).unwrap(), vec![0.0; WIDTH]);
            });
        }
    });
    assert_eq!(
        ctx.device_get(&shared).unwrap(),
        vec![2.0 * RUNS as f32; WIDTH]
    );
}

/// An array bound to a slot for one run and dropped right after the run was submitted keeps
/// its memory until the run completes: an array made at once never takes its bytes while the
/// run still reads them. A slot of an empty array binds empty arrays.
#[gpu_test]
fn an_array_bound_for_one_run_and_dropped_in_flight_is_not_reused_before_the_run_completes() {
    let ctx = harness::context();
    let slow = ctx
        .kernel(&harness::slow_copy_wgsl("read"), "main")
        .unwrap();
    let n = 4096usize;
    let data: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(2654435761)).collect();
    let captured_source = ctx.zeros::<u32>(&[n]).unwrap();
    let mut y = ctx.zeros::<u32>(&[n]).unwrap();
    let mut sink = ctx.zeros::<u32>(&[n]).unwrap();
    let empty = ctx.zeros::<u32>(&[0]).unwrap();
    let mut cap = ctx.capture();
    let source_slot = cap.array_slot(&captured_source).unwrap();
    let empty_slot = cap.array_slot(&empty).unwrap();
    cap.launch(&slow)
        .arg(&captured_source)
        .arg_mut(&mut y)
        .arg_mut(&mut sink)
        .grid_for(n)
        .run()
        .unwrap();
    let mut step = cap.finish().unwrap();
    let mut source = ctx.device_put(&data, &[n]).unwrap();
    let mut other_empty = ctx.zeros::<u32>(&[0]).unwrap();
    ctx.synchronize().unwrap();
    let at = (source.buffer().clone(), source.byte_offset());
    step.run()
        .array(&source_slot, &mut source)
        .array(&empty_slot, &mut other_empty)
        .submit()
        .unwrap();
    drop(source);
    harness::assert_dropped_source_was_not_reused(&ctx, at, &y, &data, "array slot");
}

/// An array a run binds to a slot the step only reads is not refused for a user recorder's
/// pending read of it (two readers never refuse each other), and is refused for a pending
/// write, with nothing run; after the recorder is submitted the run goes through.
#[gpu_test]
fn a_bound_array_pending_in_a_recorder_is_refused_for_a_write_never_for_a_read() {
    let ctx = harness::context();
    let accumulate = ctx.kernel(ACCUMULATE, "main").unwrap();
    let captured_x = ctx.zeros::<f32>(&[WIDTH]).unwrap();
    let mut out = ctx.zeros::<f32>(&[WIDTH]).unwrap();
    let mut cap = ctx.capture();
    let x_slot = cap.array_slot(&captured_x).unwrap();
    cap.launch(&accumulate)
        .arg(&captured_x)
        .arg_mut(&mut out)
        .grid_for(WIDTH)
        .run()
        .unwrap();
    let mut step = cap.finish().unwrap();
    let mut shared = ctx.device_put(&vec![2.0f32; WIDTH], &[WIDTH]).unwrap();
    let mut elsewhere = ctx.zeros::<f32>(&[WIDTH]).unwrap();
    // A pending read of `shared`: the run, which only reads it, goes through.
    let mut reader = ctx.sequence();
    reader
        .launch(&accumulate)
        .arg(&shared)
        .arg_mut(&mut elsewhere)
        .grid_for(WIDTH)
        .run()
        .unwrap();
    step.run().array(&x_slot, &mut shared).submit().unwrap();
    reader.submit().unwrap();
    // A pending write of `shared`: refused, nothing run.
    let mut writer = ctx.sequence();
    writer
        .launch(&accumulate)
        .arg(&elsewhere)
        .arg_mut(&mut shared)
        .grid_for(WIDTH)
        .run()
        .unwrap();
    let runs = step.runs();
    let refused = step.run().array(&x_slot, &mut shared).submit().unwrap_err();
    assert!(
        matches!(&refused, Error::PendingInRecorder { .. }),
        "{refused:?}"
    );
    assert_eq!(step.runs(), runs);
    writer.submit().unwrap();
    step.run().array(&x_slot, &mut shared).submit().unwrap();
    // out = 2 (first run) + (2 + 2) (after the writer added `elsewhere` = 2 into shared).
    assert_eq!(ctx.device_get(&out).unwrap(), vec![6.0f32; WIDTH]);
}

/// Where the arena is mapped on UMA, a run takes its reads of temporaries from the step's own
/// memory once it has completed (no copy into readback staging); every read still sees its
/// array as it was at the read's place in the step: temporaries whose bytes a later temporary
/// could take, an array the step writes again after reading it, and an array slot bound to
/// another array. On every path, against the host.
#[gpu_test(needs = Vulkan)]
fn every_read_sees_its_array_as_it_was_at_the_read_on_every_path() {
    let n = 256usize;
    for (path, ctx) in every_path() {
        let affine = ctx.kernel(AFFINE, "main").unwrap();
        let host: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 7.0).collect();
        let x = ctx.device_put(&host, &[n]).unwrap();
        // As the kernel computes it (`x * scale + 0.0`: no negative zero).
        let scaled = |scale: f32| -> Vec<f32> { host.iter().map(|v| v * scale + 0.0).collect() };
        let params = |scale: f32| Affine { scale, shift: 0.0 };
        let launch = |cap: &mut gpu_arena::Capture, out: &mut DeviceArray<f32>, scale: f32| {
            cap.launch(&affine)
                .arg(&x)
                .arg_mut(out)
                .params(&params(scale))
                .grid_for(n)
                .run()
                .unwrap();
        };
        // Reads nothing writes afterwards: temporaries and a slot.
        let mut first = ctx.zeros::<f32>(&[n]).unwrap();
        let mut other = ctx.zeros::<f32>(&[n]).unwrap();
        let mut cap = ctx.capture();
        let slot = cap.array_slot(&first).unwrap();
        let mut t = cap.alloc::<f32>(&[n]).unwrap();
        launch(&mut cap, &mut t, 5.0);
        let read_t = cap.read(&t).unwrap();
        drop(t);
        let mut u = cap.alloc::<f32>(&[n]).unwrap();
        launch(&mut cap, &mut u, 7.0);
        let read_u = cap.read(&u).unwrap();
        drop(u);
        launch(&mut cap, &mut first, 3.0);
        let read_slot = cap.read(&first).unwrap();
        let mut step = cap.finish().unwrap();
        for run in 0..3 {
            let (mut got_t, mut got_u, mut got_slot) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
            let r = step.run();
            let r = match run {
                1 => r.array(&slot, &mut other),
                _ => r,
            };
            r.read_into(&read_t, &mut got_t)
                .read_into(&read_u, &mut got_u)
                .read_into(&read_slot, &mut got_slot)
                .submit()
                .unwrap();
            assert_eq!(bits(&got_t), bits(&scaled(5.0)), "{path}, run {run}");
            assert_eq!(bits(&got_u), bits(&scaled(7.0)), "{path}, run {run}");
            assert_eq!(bits(&got_slot), bits(&scaled(3.0)), "{path}, run {run}");
        }
        ctx.fill_in_place(first, 0.0).unwrap();
        // A read of an array the step writes again after it.
        let mut again = ctx.zeros::<f32>(&[n]).unwrap();
        let mut cap = ctx.capture();
        launch(&mut cap, &mut again, 2.0);
        let read_before = cap.read(&again).unwrap();
        launch(&mut cap, &mut again, -4.0);
        let read_after = cap.read(&again).unwrap();
        let mut step = cap.finish().unwrap();
        let (mut before, mut after) = (vec![0.0; n], vec![0.0; n]);
        step.run()
            .read_into(&read_before, &mut before)
            .read_into(&read_after, &mut after)
            .submit()
            .unwrap();
        assert_eq!(bits(&before), bits(&scaled(2.0)), "{path}");
        assert_eq!(bits(&after), bits(&scaled(-4.0)), "{path}");
        assert_eq!(bits(&ctx.device_get(&again).unwrap()), bits(&scaled(-4.0)));
    }
}

#[gpu_test]
fn a_step_whose_reads_are_all_taken_in_place_makes_no_readback_staging() {
    let n = 4096usize;
    for (path, ctx) in every_path() {
        let affine = ctx.kernel(AFFINE, "main").unwrap();
        let host: Vec<f32> = (0..n).map(|i| i as f32 - 100.0).collect();
        let x = ctx.device_put(&host, &[n]).unwrap();
        let capture = |with_reads: bool| {
            let mut cap = ctx.capture();
            let mut held = Vec::new();
            for scale in 0..2 {
                let mut t = cap.alloc::<f32>(&[n]).unwrap();
                cap.launch(&affine)
                    .arg(&x)
                    .arg_mut(&mut t)
                    .params(&Affine {
                        scale: scale as f32 + 2.0,
                        shift: 0.0,
                    })
                    .grid_for(n)
                    .run()
                    .unwrap();
                held.push(t);
            }
            // Read after both are written, so neither shares the other's bytes; dropped
            // before `finish`, so both are temporaries of the step's block.
            let read: Vec<_> = match with_reads {
                true => held.iter().map(|t| cap.read(t).unwrap()).collect(),
                false => Vec::new(),
            };
            drop(held);
            let before = ctx.allocator_report();
            let step = cap.finish().unwrap();
            let made = ctx
                .allocator_report()
                .map(|(count, _)| count - before.unwrap().0);
            (step, read, made)
        };
        let (mut step, reads, made) = capture(true);
        let (_, _, made_without_reads) = capture(false);
        if path == "zero-copy" || path == "non-coherent zero-copy" {
            // The step's block of temporaries is read in place: no more than the same step
            // without its reads makes.
            assert_eq!(made, made_without_reads, "{path}");
        }
        for _ in 0..2 {
            let (mut a, mut b) = (vec![0.0; n], vec![0.0; n]);
            step.run()
                .read_into(&reads[0], &mut a)
                .read_into(&reads[1], &mut b)
                .submit()
                .unwrap();
            let want =
                |s: f32| -> Vec<u32> { host.iter().map(|v| (v * s + 0.0).to_bits()).collect() };
            assert_eq!(bits(&a), want(2.0), "{path}");
            assert_eq!(bits(&b), want(3.0), "{path}");
        }
    }
}

/// A step whose host row goes straight into the cache at a moving start and is sliced straight
/// back out: both moving copies read what the run wrote in place (no kernel before them).
struct HostMoves {
    step: CapturedStep,
    row: gpu_arena::InputSlot<f32>,
    at: gpu_arena::IndexSlot,
    read: gpu_arena::ReadSlot<f32>,
    /// The cache as an array slot: a run may bind another cache.
    cache_slot: gpu_arena::ArraySlot<f32>,
}

fn capture_host_moves(
    ctx: &Context,
    cache: DeviceArray<f32>,
    sum: &mut DeviceArray<f32>,
) -> (HostMoves, DeviceArray<f32>) {
    let accumulate = ctx.kernel(ACCUMULATE, "main").unwrap();
    let mut cap = ctx.capture();
    let cache_slot = cap.array_slot(&cache).unwrap();
    let (new_row, row) = cap.input(&query(0), &[1, WIDTH]).unwrap();
    let at = cap.index_slot(&[0, 0]);
    let cache = cap.dynamic_update_slice_at(cache, &new_row, &at).unwrap();
    let back = cap.dynamic_slice_at(&cache, &at, &[1, WIDTH]).unwrap();
    cap.launch(&accumulate)
        .arg(&back)
        .arg_mut(sum)
        .grid_for(WIDTH)
        .run()
        .unwrap();
    let read = cap.read(&*sum).unwrap();
    drop((new_row, back));
    let step = cap.finish().unwrap();
    (
        HostMoves {
            step,
            row,
            at,
            read,
            cache_slot,
        },
        cache,
    )
}

/// Whether moving copies may run on the host on this path: a CPU adapter (lavapipe) whose
/// arena is mapped (zero-copy on Vulkan), kernels not forced.
fn host_moves_expected(ctx: &Context, path: &str) -> bool {
    ctx.adapter_info().device_type == gpu_arena::wgpu::DeviceType::Cpu
        && ctx.is_vulkan()
        && path.contains("zero-copy")
}

/// On a CPU adapter with zero-copy, a run makes its moving copies on the host (a `memcpy`,
/// as single ops there) when their arrays are idle and no earlier step of the run touches the
/// box; everywhere the results are the kernels' bit for bit, clamped starts included.
#[gpu_test]
fn moving_copies_run_on_the_host_on_a_cpu_adapter_with_the_kernels_results() {
    for (path, ctx) in every_path() {
        let mut sum = ctx.zeros::<f32>(&[1, WIDTH]).unwrap();
        let cache = ctx.zeros::<f32>(&[ROWS, WIDTH]).unwrap();
        let (mut moves, cache) = capture_host_moves(&ctx, cache, &mut sum);
        let mut want_cache = vec![0.0f32; ROWS * WIDTH];
        let mut want_sum = vec![0.0f32; WIDTH];
        // 20 and 99 clamp to the last row, as XLA clamps.
        let starts = [0usize, 1, 2, 3, 7, 15, 20, 4, 99];
        for &t in &starts {
            let row = query(t);
            let mut read = vec![0.0f32; WIDTH];
            moves
                .step
                .run()
                .input(&moves.row, &row)
                .start(&moves.at, &[t as i64, 0])
                .read_into(&moves.read, &mut read)
                .submit()
                .unwrap();
            let at = t.min(ROWS - 1) * WIDTH;
            want_cache[at..at + WIDTH].copy_from_slice(&row);
            for (s, v) in want_sum.iter_mut().zip(&row) {
                *s += v;
            }
            assert_eq!(bits(&read), bits(&want_sum), "{path}: the sum at t = {t}");
        }
        assert_eq!(
            bits(&ctx.device_get(&cache).unwrap()),
            bits(&want_cache),
            "{path}: the cache"
        );
        let made = moves.step.host_copies();
        match host_moves_expected(&ctx, path) {
            // Each run read back and waited, so each found its arrays idle: both copies.
            true => assert_eq!(made, 2 * starts.len() as u64, "{path}"),
            false => assert_eq!(made, 0, "{path}"),
        }
    }
}

/// A moving copy into an array that gathered GPU work still uses runs as the kernel, after that
/// work, and the run's results are the same as ever.
#[gpu_test]
fn a_moving_copy_into_an_array_the_gpu_still_uses_runs_as_a_kernel_after_it() {
    let ctx = context_with(test_config());
    let mut sum = ctx.zeros::<f32>(&[1, WIDTH]).unwrap();
    let cache = ctx.zeros::<f32>(&[ROWS, WIDTH]).unwrap();
    let (mut moves, mut cache) = capture_host_moves(&ctx, cache, &mut sum);
    let run = |moves: &mut HostMoves, t: usize, read: &mut [f32]| {
        moves
            .step
            .run()
            .input(&moves.row, &query(t))
            .start(&moves.at, &[t as i64, 0])
            .read_into(&moves.read, read)
            .submit()
            .unwrap()
    };
    let mut read = vec![0.0f32; WIDTH];
    run(&mut moves, 0, &mut read);
    let before = moves.step.host_copies();
    // A gathered launch (not submitted yet) writes the whole cache: ones everywhere.
    let ones = ctx.kernel(ACCUMULATE, "main").unwrap();
    let one = ctx
        .device_put(&vec![1.0f32; ROWS * WIDTH], &[ROWS, WIDTH])
        .unwrap();
    ctx.launch(&ones)
        .arg(&one)
        .arg_mut(&mut cache)
        .grid_for(ROWS * WIDTH)
        .run()
        .unwrap();
    run(&mut moves, 5, &mut read);
    if host_moves_expected(&ctx, "zero-copy") {
        // The update waited its turn as a kernel; the slice after it read the cache a kernel
        // wrote in the same run, so it stayed a kernel too.
        assert_eq!(moves.step.host_copies(), before);
    }
    let got = ctx.device_get(&cache).unwrap();
    let mut want = vec![1.0f32; ROWS * WIDTH];
    for (w, v) in want[..WIDTH].iter_mut().zip(query(0)) {
        *w = v + 1.0;
    }
    want[5 * WIDTH..6 * WIDTH].copy_from_slice(&query(5));
    assert_eq!(bits(&got), bits(&want), "the launch, then the run's row");
    let sum: Vec<f32> = query(0).iter().zip(query(5)).map(|(a, b)| a + b).collect();
    assert_eq!(bits(&read), bits(&sum));
}

/// Two threads on one cache: one runs the step (its moving copies on the host where they may
/// be), the other reads the cache meanwhile. Every element the reader sees is either not yet
/// written or the row's value, and the cache ends as the runs left it.
#[gpu_test]
fn a_thread_reading_the_cache_while_another_runs_host_moves_sees_only_whole_values() {
    let ctx = context_with(test_config());
    let mut sum = ctx.zeros::<f32>(&[1, WIDTH]).unwrap();
    let cache = ctx.zeros::<f32>(&[ROWS, WIDTH]).unwrap();
    let (mut moves, cache) = capture_host_moves(&ctx, cache, &mut sum);
    std::thread::scope(|s| {
        s.spawn(|| {
            for t in 0..ROWS {
                let mut read = vec![0.0f32; WIDTH];
                moves
                    .step
                    .run()
                    .input(&moves.row, &query(t))
                    .start(&moves.at, &[t as i64, 0])
                    .read_into(&moves.read, &mut read)
                    .submit()
                    .unwrap();
            }
        });
        s.spawn(|| {
            for _ in 0..ROWS {
                let seen = ctx.device_get(&cache).unwrap();
                for (r, row) in seen.chunks(WIDTH).enumerate() {
                    for (&v, w) in row.iter().zip(query(r)) {
                        assert!(v == 0.0 || v.to_bits() == w.to_bits(), "row {r}: {v}");
                    }
                }
            }
        });
    });
    let want: Vec<f32> = (0..ROWS).flat_map(query).collect();
    assert_eq!(bits(&ctx.device_get(&cache).unwrap()), bits(&want));
}

/// A run that binds another cache to the cache's array slot writes that cache, whether its
/// moving copies run on the host or as kernels, and leaves the captured one alone.
#[gpu_test]
fn a_host_move_into_a_slot_bound_for_one_run_writes_the_bound_array() {
    for (path, ctx) in every_path() {
        let mut sum = ctx.zeros::<f32>(&[1, WIDTH]).unwrap();
        let cache = ctx.zeros::<f32>(&[ROWS, WIDTH]).unwrap();
        let (moves, cache) = capture_host_moves(&ctx, cache, &mut sum);
        let HostMoves {
            mut step,
            row,
            at,
            cache_slot: slot,
            ..
        } = moves;
        let mut other = ctx.zeros::<f32>(&[ROWS, WIDTH]).unwrap();
        for t in [3usize, 9] {
            step.run()
                .input(&row, &query(t))
                .start(&at, &[t as i64, 0])
                .array(&slot, &mut other)
                .submit()
                .unwrap();
        }
        // A run that binds arrays leaves its copies to the kernels.
        assert_eq!(step.host_copies(), 0, "{path}");
        ctx.synchronize().unwrap();
        step.run()
            .input(&row, &query(1))
            .start(&at, &[1, 0])
            .submit()
            .unwrap();
        let on_host = if host_moves_expected(&ctx, path) {
            2
        } else {
            0
        };
        assert_eq!(
            step.host_copies(),
            on_host,
            "{path}: the run on the captured cache"
        );
        let mut want_other = vec![0.0f32; ROWS * WIDTH];
        want_other[3 * WIDTH..4 * WIDTH].copy_from_slice(&query(3));
        want_other[9 * WIDTH..10 * WIDTH].copy_from_slice(&query(9));
        let mut want_cache = vec![0.0f32; ROWS * WIDTH];
        want_cache[WIDTH..2 * WIDTH].copy_from_slice(&query(1));
        assert_eq!(
            bits(&ctx.device_get(&other).unwrap()),
            bits(&want_other),
            "{path}"
        );
        assert_eq!(
            bits(&ctx.device_get(&cache).unwrap()),
            bits(&want_cache),
            "{path}"
        );
        let want_sum: Vec<f32> = (0..WIDTH)
            .map(|i| query(3)[i] + query(9)[i] + query(1)[i])
            .collect();
        assert_eq!(
            bits(&ctx.device_get(&sum).unwrap()),
            bits(&want_sum),
            "{path}"
        );
    }
}

/// Two threads run two steps captured over one cache, each writing its own rows: every row
/// ends written and each step's sums are its own rows', whether a run's moving copies went to
/// the host or waited as kernels behind the other step's work.
#[gpu_test]
fn two_steps_on_one_cache_from_two_threads_keep_each_others_rows() {
    let ctx = context_with(test_config());
    let cache = ctx.zeros::<f32>(&[ROWS, WIDTH]).unwrap();
    let (mut sum_a, mut sum_b) = (
        ctx.zeros::<f32>(&[1, WIDTH]).unwrap(),
        ctx.zeros::<f32>(&[1, WIDTH]).unwrap(),
    );
    let (mut a, cache) = capture_host_moves(&ctx, cache, &mut sum_a);
    let (mut b, cache) = capture_host_moves(&ctx, cache, &mut sum_b);
    let run = |moves: &mut HostMoves, first: usize| {
        let mut want = vec![0.0f32; WIDTH];
        for t in (first..ROWS).step_by(2) {
            let mut read = vec![0.0f32; WIDTH];
            moves
                .step
                .run()
                .input(&moves.row, &query(t))
                .start(&moves.at, &[t as i64, 0])
                .read_into(&moves.read, &mut read)
                .submit()
                .unwrap();
            for (w, v) in want.iter_mut().zip(query(t)) {
                *w += v;
            }
            assert_eq!(bits(&read), bits(&want), "rows from {first}, at {t}");
        }
    };
    std::thread::scope(|s| {
        s.spawn(|| run(&mut a, 0));
        s.spawn(|| run(&mut b, 1));
    });
    let want: Vec<f32> = (0..ROWS).flat_map(query).collect();
    assert_eq!(bits(&ctx.device_get(&cache).unwrap()), bits(&want));
}

/// A launch is eager when it runs, so the capture mode in force at `.run()` decides: one
/// described before a capture opened and run while it is open is refused, with its array
/// unchanged; one described in relaxed mode and run after the capture went back to the default
/// is refused; one described while the capture was open and run after it ended runs.
#[gpu_test]
fn a_launch_is_held_to_the_capture_mode_in_force_when_it_runs() {
    use gpu_arena::CaptureMode;
    let ctx = harness::context();
    let k = ctx.kernel(AFFINE, "main").unwrap();
    let x = ctx.device_put(&vec![1.0f32; WIDTH], &[WIDTH]).unwrap();
    let mut y = ctx.zeros::<f32>(&[WIDTH]).unwrap();
    fn eager<'a>(
        ctx: &Context,
        k: &gpu_arena::Kernel,
        x: &'a DeviceArray<f32>,
        y: &'a mut DeviceArray<f32>,
    ) -> gpu_arena::Launch<'static, 'a> {
        ctx.launch(k)
            .arg(x)
            .arg_mut(y)
            .params(&affine(1))
            .grid_for(WIDTH)
    }
    let described_before = eager(&ctx, &k, &x, &mut y);
    let mut cap = ctx.capture();
    let number = cap.number();
    let refused = described_before.run().unwrap_err();
    assert!(
        matches!(refused, Error::EagerDuringCapture { operation: "launch", capture } if capture == number),
        "{refused:?}"
    );
    cap.set_mode(CaptureMode::Relaxed);
    let described_relaxed = eager(&ctx, &k, &x, &mut y);
    cap.set_mode(CaptureMode::ThreadLocal);
    assert!(matches!(
        described_relaxed.run(),
        Err(Error::EagerDuringCapture { .. })
    ));
    assert_eq!(ctx.device_get(&y).unwrap(), vec![0.0; WIDTH], "nothing ran");
    let described_during = eager(&ctx, &k, &x, &mut y);
    drop(cap);
    described_during.run().unwrap();
    let want = affine(1).scale + affine(1).shift;
    assert_eq!(ctx.device_get(&y).unwrap(), vec![want; WIDTH]);
}

/// `device_put_from` of an array of the capturing context (and `copy_to`, the same from the
/// array's side) is refused under that name, and the refusal points at the capture's `copy`.
#[gpu_test]
fn copies_between_contexts_during_a_capture_are_refused_under_their_own_names() {
    let ctx = harness::context();
    let x = ctx.device_put(&[1u32, 2, 3], &[3]).unwrap();
    let cap = ctx.capture();
    for (name, refused) in [
        ("device_put_from", ctx.device_put_from(&x).unwrap_err()),
        ("device_put_from", x.copy_to(&ctx).unwrap_err()),
    ] {
        match &refused {
            Error::EagerDuringCapture { operation, .. } => assert_eq!(*operation, name),
            other => panic!("{name}: {other:?}"),
        }
        assert!(refused.to_string().contains("cap.copy(..)"), "{refused}");
    }
    drop(cap);
    assert_eq!(
        ctx.device_get(&x.copy_to(&ctx).unwrap()).unwrap(),
        [1, 2, 3]
    );
}

/// With `strict_starts`, a captured run's start out of range is refused even where the box
/// it places is empty (nothing to copy), as the single op refuses it; in range it runs.
#[gpu_test]
fn strict_starts_refuse_a_run_start_out_of_range_for_an_empty_box_too() {
    let ctx = context_with(ArenaConfig {
        strict_starts: true,
        ..test_config()
    });
    let operand = ctx.zeros::<u32>(&[4, 4]).unwrap();
    let single = ctx.dynamic_slice(&operand, &[5, 0], &[0, 4]).unwrap_err();
    assert!(matches!(single, Error::Index { .. }), "{single:?}");
    let mut cap = ctx.capture();
    let at = cap.index_slot(&[0, 0]);
    let _empty = cap.dynamic_slice_at(&operand, &at, &[0, 4]).unwrap();
    let mut step = cap.finish().unwrap();
    let refused = step.run().start(&at, &[5, 0]).submit().unwrap_err();
    assert!(
        matches!(
            refused,
            Error::Index {
                refusal: IndexRefusal::StartOutOfRange {
                    dimension: 0,
                    start: 5,
                    last_start: 4,
                    ..
                },
                ..
            }
        ),
        "{refused:?}"
    );
    assert_eq!(step.runs(), 0, "a refused run is not counted");
    step.run().start(&at, &[4, 0]).submit().unwrap();
}

/// An array slot's array the user dropped is still used by every run that binds nothing else:
/// the plan counts it among the arrays the step alone holds.
#[gpu_test]
fn a_dropped_array_slot_array_counts_as_held_by_the_step_alone() {
    let ctx = harness::context();
    let k = ctx.kernel(ACCUMULATE, "main").unwrap();
    let x = ctx.device_put(&vec![1.0f32; WIDTH], &[WIDTH]).unwrap();
    let mut acc = ctx.zeros::<f32>(&[WIDTH]).unwrap();
    let mut cap = ctx.capture();
    let slot = cap.array_slot(&acc).unwrap();
    cap.launch(&k)
        .arg(&x)
        .arg_mut(&mut acc)
        .grid_for(WIDTH)
        .run()
        .unwrap();
    let mut step = cap.finish().unwrap();
    assert_eq!(step.plan().arrays_held_by_the_step_alone, 0);
    drop(acc);
    let plan = step.plan();
    assert_eq!(plan.arrays_held_by_the_step_alone, 1, "{plan}");
    assert_eq!(plan.bytes_held_by_the_step_alone, (WIDTH * 4) as u64);
    step.run().submit().unwrap();
    let mut other = ctx.zeros::<f32>(&[WIDTH]).unwrap();
    step.run().array(&slot, &mut other).submit().unwrap();
    assert_eq!(ctx.device_get(&other).unwrap(), vec![1.0; WIDTH]);
}

/// Captures `out = x * 0 + (w0 + w1 + w2 + w3) * data` for an input slot's `data`: four
/// temporaries of `x.len()` floats, live together until the last launch, and the input's copy.
/// Where the device's largest array holds fewer than four of them, the plan puts them in several
/// blocks. Grids are linear, for arrays of more items than one grid dimension covers.
fn four_live_temporaries(
    ctx: &Context,
    x: &DeviceArray<f32>,
    out: &mut DeviceArray<f32>,
    weights: [f32; 4],
) -> (CapturedStep, InputSlot<f32>) {
    let n = x.len();
    let affine = ctx.kernel(AFFINE, "main").unwrap();
    let accumulate = ctx.kernel(ACCUMULATE, "main").unwrap();
    let mut cap = ctx.capture();
    let (input, slot) = cap.input(&vec![0.0f32; n], &[n]).unwrap();
    let mut temporaries = Vec::new();
    for scale in weights {
        let mut t = cap.alloc::<f32>(&[n]).unwrap();
        let params = Affine { scale, shift: 0.0 };
        let launch = cap.launch(&affine).arg(&input).arg_mut(&mut t);
        launch.params(&params).grid_linear(n).run().unwrap();
        temporaries.push(t);
    }
    let zero = Affine {
        scale: 0.0,
        shift: 0.0,
    };
    let launch = cap.launch(&affine).arg(x).arg_mut(out).params(&zero);
    launch.grid_linear(n).run().unwrap();
    for t in &temporaries {
        let launch = cap.launch(&accumulate).arg(t).arg_mut(out);
        launch.grid_linear(n).run().unwrap();
    }
    drop((input, temporaries));
    (cap.finish().unwrap(), slot)
}

/// The plan of [`four_live_temporaries`] over `n` floats: several blocks, each temporary
/// within the device's largest array, temporaries of one block live together never sharing a
/// byte.
fn assert_several_blocks(ctx: &Context, plan: &StepPlan, n: usize) {
    assert!(plan.blocks >= 2, "{plan}");
    assert!(plan.block_bytes >= 4 * n as u64 * 4, "{plan}");
    assert!(
        plan.to_string().contains(&format!(
            "in {} blocks, together {} bytes",
            plan.blocks, plan.block_bytes
        )),
        "{plan}"
    );
    for t in &plan.temporaries {
        assert!(t.block < plan.blocks, "{plan}");
        assert!(t.offset + t.bytes <= ctx.max_array_bytes(), "{plan}");
    }
    for (i, a) in plan.temporaries.iter().enumerate() {
        for b in &plan.temporaries[i + 1..] {
            let together = a.first_step <= b.last_step && b.first_step <= a.last_step;
            let overlap = a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
            assert!(!(a.block == b.block && together && overlap), "{plan}");
        }
    }
}

/// Small whole numbers, so that every sum of a run is exact in `f32` on any device.
fn run_data(n: usize, run: usize) -> Vec<f32> {
    (0..n).map(|i| ((i % 1000) + run * 7) as f32).collect()
}

/// A context whose largest array is 64 KiB (its regions' cap), growing from nothing.
fn context_of_64_kib_arrays() -> Context {
    context_with(ArenaConfig {
        max_region_bytes: Some(64 << 10),
        preallocate: false,
        ..test_config()
    })
}

/// Where one block for the temporaries would be larger than the largest array the device
/// allows, the plan cuts it into blocks of at most that (each temporary whole in one, live
/// ones never sharing a byte), and every run gives the results of the same work op by op.
#[gpu_test]
fn temporaries_larger_than_one_region_together_take_several_blocks() {
    let ctx = context_of_64_kib_arrays();
    assert_eq!(ctx.max_array_bytes(), 64 << 10);
    // Four temporaries of 24 KiB, all live until the last step: 96 KiB at once. The input's
    // host data is a temporary too (24 KiB, live from its copy to the first launch).
    let n = 6 << 10;
    let x = ctx.device_put(&vec![0.0f32; n], &[n]).unwrap();
    let mut out = ctx.zeros::<f32>(&[n]).unwrap();
    let (mut step, slot) = four_live_temporaries(&ctx, &x, &mut out, [1.0, 2.0, 3.0, 4.0]);
    let plan = step.plan();
    assert_several_blocks(&ctx, &plan, n);
    for run in 0..3 {
        let data = run_data(n, run);
        step.run().input(&slot, &data).submit().unwrap();
        let want: Vec<f32> = data.iter().map(|v| v * 10.0).collect();
        assert_eq!(ctx.device_get(&out).unwrap(), want, "run {run}");
    }
    // The arena holds the step's arrays and blocks, and nothing more, as the plan says.
    assert_eq!(ctx.memory_stats().bytes_in_use, plan.bytes_in_use, "{plan}");
}

/// Two steps of several blocks each, reading one array, run from two threads at once: each
/// run gives its own step's results, as the same work done op by op would.
#[gpu_test]
fn steps_of_several_blocks_reading_one_array_run_from_two_threads() {
    let ctx = context_of_64_kib_arrays();
    let n = 6 << 10;
    let x = ctx.device_put(&vec![5.0f32; n], &[n]).unwrap();
    let threads: Vec<(f32, [f32; 4])> =
        vec![(10.0, [1.0, 2.0, 3.0, 4.0]), (26.0, [5.0, 6.0, 7.0, 8.0])];
    std::thread::scope(|s| {
        for (thread, (sum, weights)) in threads.into_iter().enumerate() {
            let (ctx, x) = (&ctx, &x);
            s.spawn(move || {
                let mut out = ctx.zeros::<f32>(&[n]).unwrap();
                let (mut step, slot) = four_live_temporaries(ctx, x, &mut out, weights);
                assert_several_blocks(ctx, &step.plan(), n);
                for run in 0..8 {
                    let data = run_data(n, run + thread);
                    step.run().input(&slot, &data).submit().unwrap();
                    let want: Vec<f32> = data.iter().map(|v| v * sum).collect();
                    assert_eq!(
                        ctx.device_get(&out).unwrap(),
                        want,
                        "thread {thread} run {run}"
                    );
                }
            });
        }
    });
    assert_eq!(ctx.device_get(&x).unwrap(), vec![5.0; n]);
}

/// The same on a real GPU's own limit (no configured cap): temporaries of half the device's
/// largest array each, four of them live together, so several blocks of up to that size
/// (about 4 GiB on most Vulkan drivers). Skipped where the device's memory does not hold
/// several such arrays (lavapipe, GL).
#[gpu_test]
fn temporaries_beyond_the_devices_largest_array_take_several_blocks() {
    let ctx = context_with(ArenaConfig {
        preallocate: false,
        mem_fraction: gpu_arena::MemFraction::fixed(0.9),
        ..test_config()
    });
    let largest = ctx.max_array_bytes();
    let limit = ctx.memory_stats().bytes_limit.unwrap_or(0);
    if largest < 1 << 30 || limit / largest < 5 {
        harness::skip(harness::Need::RoomForLargestArrays);
        return;
    }
    let n = (largest / 8) as usize;
    let x = ctx.zeros::<f32>(&[n]).unwrap();
    let mut out = ctx.zeros::<f32>(&[n]).unwrap();
    let (mut step, slot) = four_live_temporaries(&ctx, &x, &mut out, [1.0, 2.0, 3.0, 4.0]);
    let plan = step.plan();
    assert_several_blocks(&ctx, &plan, n);
    println!("{plan}");
    let data = run_data(n, 1);
    step.run().input(&slot, &data).submit().unwrap();
    let got = ctx.device_get(&out).unwrap();
    let wrong = got.iter().zip(&data).position(|(g, d)| *g != d * 10.0);
    assert_eq!(wrong, None, "the first wrong item");
}
