//! Captured steps under hostile or unusual use: a capture whose recorder was moved out of it,
//! slots of a capture on another context, hostile starts at capture and at run against a CPU
//! reference in every copy unit, odd-length host data, arrays dropped while a step holds them,
//! a capture dropped without `finish`, refused runs that must apply none of their slots, and two
//! threads running their own steps over one shared array.

use crate::harness;
use gpu_arena::error::{CaptureRefusal, SlotKind};
use gpu_arena::{Context, DeviceArray, Error};

/// `a += p` elementwise.
const ADD: &str = r#"
@group(0) @binding(0) var<uniform> p: u32;
@group(0) @binding(1) var<storage, read_write> a: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) i: vec3<u32>) {
    if (i.x < arrayLength(&a)) { a[i.x] = a[i.x] + p; }
}
"#;

/// `y = x * p.scale + p.shift` elementwise.
const AFFINE: &str = r#"
struct P { scale: f32, shift: f32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) i: vec3<u32>) {
    if (i.x < arrayLength(&y)) { y[i.x] = x[i.x] * p.scale + p.shift; }
}
"#;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
struct Affine {
    scale: f32,
    shift: f32,
}

/// A refusal because the capture's recorder was moved out of it.
fn is_recorder_replaced(error: &Error) -> bool {
    matches!(
        error,
        Error::Capture {
            refusal: CaptureRefusal::RecorderReplaced,
            ..
        }
    )
}

/// XLA's clamp of one start index into `[0, dim - size]`.
fn clamp(start: i64, dim: usize, size: usize) -> usize {
    start.clamp(0, (dim - size) as i64) as usize
}

#[gpu_test]
fn a_capture_whose_recorder_was_moved_out_refuses_its_ops_with_errors_and_never_panics() {
    let ctx = harness::context();
    let operand = ctx.device_put(&[1u32, 2, 3, 4], &[4]).unwrap();
    let update = ctx.device_put(&[9u32], &[1]).unwrap();
    let mut cap = ctx.capture();
    // Safe code may move the capture's recorder out through `DerefMut`.
    let moved = std::mem::replace(&mut *cap, ctx.sequence());
    let refused = cap.input(&[5u32; 4], &[4]).unwrap_err();
    assert!(is_recorder_replaced(&refused), "{refused}");
    let refused = cap.read(&operand).unwrap_err();
    assert!(is_recorder_replaced(&refused), "{refused}");
    // Slots made now belong to no capture: every use of them is refused.
    let at = cap.index_slot(&[0]);
    let params = cap.params_slot(&1u32);
    let refused = cap.dynamic_slice_at(&operand, &at, &[1]).unwrap_err();
    assert!(is_recorder_replaced(&refused), "{refused}");
    let refused = cap
        .dynamic_update_slice_at(operand, &update, &at)
        .unwrap_err();
    assert!(is_recorder_replaced(&refused.error), "{}", refused.error);
    let operand = refused.array;
    let k = ctx.kernel(ADD, "main").unwrap();
    let mut target = ctx.zeros::<u32>(&[4]).unwrap();
    let refused = cap
        .launch(&k)
        .arg_mut(&mut target)
        .params_slot(&params)
        .grid_for(4)
        .run()
        .unwrap_err();
    assert!(is_recorder_replaced(&refused), "{refused}");
    assert!(cap.is_empty(), "the refused ops recorded nothing");
    // Nothing was marked pending by the refusals: single ops and host reads go on.
    assert_eq!(ctx.device_get(&operand).unwrap(), [1, 2, 3, 4]);
    assert_eq!(ctx.device_get(&target).unwrap(), [0; 4]);
    let refused = cap.finish().unwrap_err();
    assert!(is_recorder_replaced(&refused), "{refused}");
    let refused = moved.submit().unwrap_err();
    assert!(is_recorder_replaced(&refused), "{refused}");
}

#[gpu_test]
fn slots_of_a_capture_on_another_context_are_refused_and_change_nothing() {
    let ctx = harness::context();
    let other = harness::context();
    let k = ctx.kernel(ADD, "main").unwrap();
    let cache = ctx.zeros::<u32>(&[4, 4]).unwrap();
    let mut cap = ctx.capture();
    let (mut row, new_row) = cap.input(&[1u32; 4], &[1, 4]).unwrap();
    let add = cap.params_slot(&0u32);
    cap.launch(&k)
        .arg_mut(&mut row)
        .params_slot(&add)
        .grid_for(4)
        .run()
        .unwrap();
    let at = cap.index_slot(&[0, 0]);
    let cache = cap.dynamic_update_slice_at(cache, &row, &at).unwrap();
    let read = cap.read(&cache).unwrap();
    drop(row);
    let mut step = cap.finish().unwrap();

    // A capture on the other context, numbered apart from every capture of this one.
    let theirs = other.zeros::<u32>(&[4, 4]).unwrap();
    let mut foreign = other.capture();
    let (their_row, their_input) = foreign.input(&[2u32; 4], &[1, 4]).unwrap();
    let their_params = foreign.params_slot(&7u32);
    let their_at = foreign.index_slot(&[3, 0]);
    let theirs = foreign
        .dynamic_update_slice_at(theirs, &their_row, &their_at)
        .unwrap();
    let their_read = foreign.read(&theirs).unwrap();
    // This context's capture refuses the other capture's index slot, giving the operand back.
    let mine = ctx.device_put(&[5u32; 16], &[4, 4]).unwrap();
    let update = ctx.device_put(&[6u32; 4], &[1, 4]).unwrap();
    let mut third = ctx.capture();
    let refused = third
        .dynamic_update_slice_at(mine, &update, &their_at)
        .unwrap_err();
    assert!(
        matches!(
            &refused.error,
            Error::Capture {
                refusal: CaptureRefusal::ForeignSlot {
                    slot: SlotKind::Index,
                    slot_capture,
                    capture: Some(capture),
                },
                ..
            } if *slot_capture == foreign.number() && *capture == third.number()
        ),
        "{}",
        refused.error
    );
    assert!(third.is_empty());
    let outsider = other.zeros::<u32>(&[4]).unwrap();
    let foreign_read = third.read(&outsider).unwrap_err();
    assert!(
        matches!(foreign_read, Error::ForeignArray { .. }),
        "{foreign_read}"
    );
    assert!(third.is_empty());
    drop(third);
    assert_eq!(ctx.device_get(&refused.array).unwrap(), [5; 16]);

    step.run()
        .input(&new_row, &[3; 4])
        .params(&add, &1)
        .start(&at, &[1, 0])
        .submit()
        .unwrap();
    let before = ctx.device_get(&cache).unwrap();
    let mut out = [0u32; 16];
    let refusals = vec![
        step.run()
            .input(&their_input, &[8; 4])
            .start(&at, &[2, 0])
            .submit()
            .unwrap_err(),
        step.run()
            .params(&their_params, &100)
            .start(&at, &[2, 0])
            .submit()
            .unwrap_err(),
        step.run()
            .params(&add, &100)
            .start(&their_at, &[2, 0])
            .submit()
            .unwrap_err(),
        step.run()
            .input(&new_row, &[8; 4])
            .read_into(&their_read, &mut out)
            .submit()
            .unwrap_err(),
    ];
    for refused in &refusals {
        assert!(
            matches!(
                refused,
                Error::CapturedRun {
                    refusal: gpu_arena::error::RunRefusal::ForeignSlot { .. }
                }
            ),
            "{refused}"
        );
        assert!(
            refused.to_string().contains("belongs to Capture #"),
            "{refused}"
        );
    }
    assert_eq!(out, [0; 16], "a refused run fills nothing");
    assert_eq!(step.runs(), 1);
    assert_eq!(ctx.device_get(&cache).unwrap(), before, "nothing ran");
    // None of the refused values stuck: the next run repeats the first one's row 1 = 3 + 1.
    step.run().read_into(&read, &mut out).submit().unwrap();
    let mut expected = [0u32; 16];
    expected[4..8].copy_from_slice(&[4; 4]);
    assert_eq!(out, expected);
    drop(foreign);
}

/// `dynamic_slice_at` with hostile starts, in each copy unit (bytes, words, 16-byte vectors),
/// against the same slice taken on the CPU with XLA's clamp.
fn slices_match_the_cpu_at_hostile_starts<T>(ctx: &Context, make: impl Fn(usize) -> T)
where
    T: bytemuck::Pod + PartialEq + std::fmt::Debug,
{
    let (rows, cols, size) = (5usize, 7usize, [2usize, 3]);
    let host: Vec<T> = (0..rows * cols).map(&make).collect();
    let operand = ctx.device_put(&host, &[rows, cols]).unwrap();
    let mut cap = ctx.capture();
    let at = cap.index_slot(&[0, 0]);
    let slice = cap.dynamic_slice_at(&operand, &at, &size).unwrap();
    let read = cap.read(&slice).unwrap();
    drop(slice);
    let mut step = cap.finish().unwrap();
    let starts = [
        [0i64, 0],
        [u32::MAX as i64, -1],
        [i64::MIN, i64::MAX],
        [3, 4],
        [4, 5],
        [1, -(1i64 << 40)],
        [-1, 2],
        [i64::MAX, 1],
        [2, u32::MAX as i64 + 1],
    ];
    for start in starts {
        let mut got = vec![make(0); size[0] * size[1]];
        step.run()
            .start(&at, &start)
            .read_into(&read, &mut got)
            .submit()
            .unwrap();
        let (r0, c0) = (
            clamp(start[0], rows, size[0]),
            clamp(start[1], cols, size[1]),
        );
        let expected: Vec<T> = (0..size[0])
            .flat_map(|r| (0..size[1]).map(move |c| (r0 + r) * cols + c0 + c))
            .map(&make)
            .collect();
        assert_eq!(got, expected, "{} at {start:?}", std::any::type_name::<T>());
    }
}

#[gpu_test]
fn slices_at_hostile_starts_match_the_cpu_in_every_copy_unit() {
    let ctx = harness::context();
    slices_match_the_cpu_at_hostile_starts(&ctx, |i| i as u8 ^ 0x5a);
    slices_match_the_cpu_at_hostile_starts(&ctx, |i| (i as u32).wrapping_mul(2654435761));
    slices_match_the_cpu_at_hostile_starts(&ctx, |i| {
        let i = i as u32;
        [i, i + 100, i + 200, i + 300]
    });
}

#[gpu_test]
fn odd_length_byte_inputs_written_at_moving_starts_match_a_cpu_model_over_runs() {
    let ctx = harness::context();
    let (rows, cols) = (3usize, 5usize);
    let operand = ctx.zeros::<u8>(&[rows, cols]).unwrap();
    let mut cap = ctx.capture();
    let (row, new_row) = cap.input(&[1u8, 2, 3], &[1, 3]).unwrap();
    let at = cap.index_slot(&[0, 0]);
    let operand = cap.dynamic_update_slice_at(operand, &row, &at).unwrap();
    let read = cap.read(&operand).unwrap();
    drop(row);
    let mut step = cap.finish().unwrap();
    let mut model = vec![0u8; rows * cols];
    let runs: [([u8; 3], [i64; 2]); 6] = [
        ([10, 11, 12], [0, 0]),
        ([20, 21, 22], [2, 2]),
        ([30, 31, 32], [1, 1]),
        ([40, 41, 42], [-5, 99]),
        ([50, 51, 52], [99, -5]),
        ([60, 61, 62], [1, 3]),
    ];
    for (data, start) in runs {
        let mut got = vec![0u8; rows * cols];
        step.run()
            .input(&new_row, &data)
            .start(&at, &start)
            .read_into(&read, &mut got)
            .submit()
            .unwrap();
        let (r, c) = (clamp(start[0], rows, 1), clamp(start[1], cols, 3));
        model[r * cols + c..r * cols + c + 3].copy_from_slice(&data);
        assert_eq!(got, model, "after writing {data:?} at {start:?}");
    }
    assert_eq!(ctx.device_get(&operand).unwrap(), model);
}

#[gpu_test]
fn a_rank_zero_index_slot_updates_a_scalar_and_an_empty_slice_reads_nothing() {
    let ctx = harness::context();
    let scalar = ctx.device_put(&[5u32], &[]).unwrap();
    let matrix = ctx.device_put(&[1u32; 12], &[4, 3]).unwrap();
    let mut cap = ctx.capture();
    let (value, new_value) = cap.input(&[6u32], &[]).unwrap();
    let none = cap.index_slot(&[]);
    let scalar = cap.dynamic_update_slice_at(scalar, &value, &none).unwrap();
    let at = cap.index_slot(&[1, 1]);
    let empty = cap.dynamic_slice_at(&matrix, &at, &[0, 2]).unwrap();
    let read_empty = cap.read(&empty).unwrap();
    drop(value);
    let mut step = cap.finish().unwrap();
    assert_eq!(empty.shape(), [0, 2]);
    let mut nothing: [u32; 0] = [];
    step.run()
        .input(&new_value, &[7])
        .start(&none, &[])
        .start(&at, &[i64::MAX, i64::MIN])
        .read_into(&read_empty, &mut nothing)
        .submit()
        .unwrap();
    assert_eq!(ctx.device_get(&scalar).unwrap(), [7]);
    use gpu_arena::error::RunRefusal;
    let refused = step.run().start(&none, &[0]).submit().unwrap_err();
    assert!(
        matches!(
            refused,
            Error::CapturedRun {
                refusal: RunRefusal::StartRank { given: 1, rank: 0 }
            }
        ),
        "{refused}"
    );
    let refused = step.run().input(&new_value, &[]).submit().unwrap_err();
    assert!(
        matches!(
            refused,
            Error::CapturedRun {
                refusal: RunRefusal::InputLength {
                    given: 0,
                    captured: 1
                }
            }
        ),
        "{refused}"
    );
    assert_eq!(ctx.device_get(&scalar).unwrap(), [7]);
    assert_eq!(ctx.device_get(&matrix).unwrap(), [1; 12]);
}

#[gpu_test]
fn hostile_index_slots_and_boxes_at_capture_are_refused_and_give_the_operand_back() {
    let ctx = harness::context();
    let host: Vec<u32> = (0..12).collect();
    let operand = ctx.device_put(&host, &[4, 3]).unwrap();
    let row = ctx.device_put(&[90u32, 91, 92], &[1, 3]).unwrap();
    let big = ctx.device_put(&[0u32; 15], &[5, 3]).unwrap();
    let mut cap = ctx.capture();
    let wrong_rank = cap.index_slot(&[0]);
    let extreme = cap.index_slot(&[i64::MAX, i64::MIN]);
    let mut elsewhere = ctx.capture();
    let foreign = elsewhere.index_slot(&[0, 0]);
    drop(elsewhere);
    let mut operand = operand;
    for (update, slot) in [(&row, &wrong_rank), (&big, &extreme), (&row, &foreign)] {
        let refused = cap
            .dynamic_update_slice_at(operand, update, slot)
            .unwrap_err();
        assert!(
            matches!(
                refused.error,
                Error::InvalidArgument { .. }
                    | Error::Index { .. }
                    | Error::Shape { .. }
                    | Error::Capture { .. }
            ),
            "{}",
            refused.error
        );
        operand = refused.array;
        assert!(cap.is_empty(), "a refused op records nothing");
    }
    for (slot, sizes) in [
        (&wrong_rank, vec![1usize, 3]),
        (&extreme, vec![usize::MAX, 1]),
        (&extreme, vec![1, 4]),
        (&extreme, vec![1]),
        (&foreign, vec![1, 3]),
    ] {
        let refused = cap.dynamic_slice_at(&operand, slot, &sizes).unwrap_err();
        assert!(
            matches!(
                refused,
                Error::InvalidArgument { .. }
                    | Error::Index { .. }
                    | Error::Shape { .. }
                    | Error::Capture { .. }
            ),
            "{sizes:?}: {refused}"
        );
        assert!(cap.is_empty(), "a refused op records nothing");
    }
    assert_eq!(
        ctx.device_get(&operand).unwrap(),
        host,
        "the operand came back intact and not pending"
    );
    // The extreme initial start is clamped (last row, first column) for a run that sets none.
    let operand = cap
        .dynamic_update_slice_at(operand, &row, &extreme)
        .unwrap();
    let mut step = cap.finish().unwrap();
    step.run().submit().unwrap();
    let mut expected = host.clone();
    expected[9..12].copy_from_slice(&[90, 91, 92]);
    assert_eq!(ctx.device_get(&operand).unwrap(), expected);
}

#[gpu_test]
fn a_step_keeps_arrays_the_user_dropped_and_reads_temporaries_that_share_memory() {
    let ctx = harness::context();
    let affine = ctx.kernel(AFFINE, "main").unwrap();
    let n = 256usize;
    let host: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 7.0).collect();
    let x = ctx.device_put(&host, &[n]).unwrap();
    let mut cap = ctx.capture();
    let slot = cap.params_slot(&Affine {
        scale: 1.0,
        shift: 0.0,
    });
    // `first` lives over the launch that writes it and the read; `second` only after, so the
    // plan may give both the same bytes.
    let mut first = cap.alloc::<f32>(&[n]).unwrap();
    cap.launch(&affine)
        .arg(&x)
        .arg_mut(&mut first)
        .params_slot(&slot)
        .grid_for(n as u64)
        .run()
        .unwrap();
    let read_first = cap.read(&first).unwrap();
    drop(first);
    let mut second = cap.alloc::<f32>(&[n]).unwrap();
    cap.launch(&affine)
        .arg(&x)
        .arg_mut(&mut second)
        .params(&Affine {
            scale: -2.0,
            shift: 1.0,
        })
        .grid_for(n as u64)
        .run()
        .unwrap();
    let read_second = cap.read(&second).unwrap();
    drop(second);
    let mut output = cap.alloc::<f32>(&[n]).unwrap();
    cap.launch(&affine)
        .arg(&x)
        .arg_mut(&mut output)
        .params(&Affine {
            scale: 3.0,
            shift: 0.0,
        })
        .grid_for(n as u64)
        .run()
        .unwrap();
    let read_output = cap.read(&output).unwrap();
    let mut step = cap.finish().unwrap();
    assert_eq!(step.plan().temporaries.len(), 2);
    let in_use = ctx.memory_stats().bytes_in_use;
    // The step holds its input and output: dropping them frees nothing.
    drop((x, output));
    ctx.synchronize().unwrap();
    assert_eq!(ctx.memory_stats().bytes_in_use, in_use);
    // New arrays do not take the step's bytes, and its runs do not touch them.
    let bystanders: Vec<DeviceArray<f32>> = (0..4)
        .map(|i| ctx.device_put(&vec![i as f32; n], &[n]).unwrap())
        .collect();
    for t in 0..3 {
        let p = Affine {
            scale: t as f32 + 0.5,
            shift: -(t as f32),
        };
        let (mut a, mut b, mut c) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
        step.run()
            .params(&slot, &p)
            .read_into(&read_first, &mut a)
            .read_into(&read_second, &mut b)
            .read_into(&read_output, &mut c)
            .submit()
            .unwrap();
        let expect = |scale: f32, shift: f32| -> Vec<f32> {
            host.iter().map(|v| v * scale + shift).collect()
        };
        assert_eq!(a, expect(p.scale, p.shift), "run {t}: the first temporary");
        assert_eq!(b, expect(-2.0, 1.0), "run {t}: the second temporary");
        assert_eq!(c, expect(3.0, 0.0), "run {t}: the output");
    }
    for (i, array) in bystanders.iter().enumerate() {
        assert_eq!(ctx.device_get(array).unwrap(), vec![i as f32; n]);
    }
}

#[gpu_test]
fn a_capture_dropped_without_finish_runs_nothing_frees_what_it_made_and_marks_nothing() {
    let ctx = harness::context();
    let k = ctx.kernel(ADD, "main").unwrap();
    let cache = ctx.device_put(&[3u32; 32], &[4, 8]).unwrap();
    let mut counter = ctx.device_put(&[1u32; 8], &[8]).unwrap();
    ctx.synchronize().unwrap();
    let base = ctx.memory_stats().bytes_in_use;
    let mut cap = ctx.capture();
    let (row, _new_row) = cap.input(&[7u32; 8], &[1, 8]).unwrap();
    let at = cap.index_slot(&[2, 0]);
    let cache = cap.dynamic_update_slice_at(cache, &row, &at).unwrap();
    let slot = cap.params_slot(&5u32);
    cap.launch(&k)
        .arg_mut(&mut counter)
        .params_slot(&slot)
        .grid_for(8)
        .run()
        .unwrap();
    let filled = cap.fill(&[64], 9u32).unwrap();
    let _read = cap.read(&cache).unwrap();
    drop(row);
    assert!(!cap.is_empty());
    drop(cap);
    // Nothing ran, and nothing is pending: host reads and single ops go on at once.
    assert_eq!(ctx.device_get(&cache).unwrap(), [3; 32]);
    assert_eq!(ctx.device_get(&counter).unwrap(), [1; 8]);
    let counter = ctx.fill_in_place(counter, 4u32).unwrap();
    assert_eq!(ctx.device_get(&counter).unwrap(), [4; 8]);
    drop(filled);
    ctx.synchronize().unwrap();
    assert_eq!(
        ctx.memory_stats().bytes_in_use,
        base,
        "what the capture made went back"
    );
}

#[gpu_test]
fn a_run_refused_for_a_pending_array_applies_none_of_its_slots() {
    let ctx = harness::context();
    let k = ctx.kernel(ADD, "main").unwrap();
    let cache = ctx.zeros::<u32>(&[4, 8]).unwrap();
    let source = ctx.device_put(&[42u32; 8], &[8]).unwrap();
    let mut cap = ctx.capture();
    let (mut row, new_row) = cap.input(&[0u32; 8], &[1, 8]).unwrap();
    let add = cap.params_slot(&0u32);
    cap.launch(&k)
        .arg_mut(&mut row)
        .params_slot(&add)
        .grid_for(8)
        .run()
        .unwrap();
    let at = cap.index_slot(&[0, 0]);
    let cache = cap.dynamic_update_slice_at(cache, &row, &at).unwrap();
    let _read_source = cap.read(&source).unwrap();
    drop(row);
    let mut step = cap.finish().unwrap();
    step.run()
        .input(&new_row, &[1; 8])
        .params(&add, &10)
        .start(&at, &[0, 0])
        .submit()
        .unwrap();
    // A sequence that reads the cache, not yet submitted: a run that writes it would overtake
    // that read.
    let mut s = ctx.sequence();
    let snapshot = s.copy(&cache).unwrap();
    let refused = step
        .run()
        .input(&new_row, &[2; 8])
        .params(&add, &20)
        .start(&at, &[3, 0])
        .submit()
        .unwrap_err();
    assert!(
        matches!(refused, Error::PendingInRecorder { .. }),
        "{refused}"
    );
    assert_eq!(step.runs(), 1);
    s.submit().unwrap();
    let mut expected = vec![0u32; 32];
    expected[0..8].copy_from_slice(&[11; 8]);
    assert_eq!(ctx.device_get(&snapshot).unwrap(), expected);
    // The next run sets nothing: it repeats the last accepted run, not the refused one.
    step.run().submit().unwrap();
    assert_eq!(ctx.device_get(&cache).unwrap(), expected);
    // A pending read does not stop a run that only reads the same array.
    let mut s = ctx.sequence();
    let _copy = s.copy(&source).unwrap();
    let mut out = [0u32; 8];
    let mut reader = {
        let mut cap = ctx.capture();
        let read = cap.read(&source).unwrap();
        (cap.finish().unwrap(), read)
    };
    reader
        .0
        .run()
        .read_into(&reader.1, &mut out)
        .submit()
        .unwrap();
    assert_eq!(out, [42; 8]);
    s.submit().unwrap();
}

#[gpu_test]
fn two_threads_running_their_own_steps_over_one_shared_array_lose_no_update() {
    let ctx = harness::context();
    let k = ctx.kernel(ADD, "main").unwrap();
    let n = 512usize;
    let mut shared = ctx.zeros::<u32>(&[n]).unwrap();
    let mut steps = Vec::new();
    for _ in 0..2 {
        let mut cap = ctx.capture();
        let slot = cap.params_slot(&0u32);
        cap.launch(&k)
            .arg_mut(&mut shared)
            .params_slot(&slot)
            .grid_for(n as u64)
            .run()
            .unwrap();
        let read = cap.read(&shared).unwrap();
        steps.push((cap.finish().unwrap(), slot, read));
    }
    const RUNS: u32 = 25;
    std::thread::scope(|scope| {
        for (worker, (mut step, slot, read)) in steps.into_iter().enumerate() {
            let add = if worker == 0 { 1u32 } else { 1000 };
            scope.spawn(move || {
                for run in 1..=RUNS {
                    let mut out = vec![0u32; n];
                    step.run()
                        .params(&slot, &add)
                        .read_into(&read, &mut out)
                        .submit()
                        .unwrap();
                    // Its own runs are all in; the other thread's are some number of whole runs.
                    let (ones, thousands) = (out[0] % 1000, out[0] / 1000);
                    let (mine, theirs) = if worker == 0 {
                        (ones, thousands)
                    } else {
                        (thousands, ones)
                    };
                    assert_eq!(mine, run, "worker {worker}");
                    assert!(theirs <= RUNS, "worker {worker}: {}", out[0]);
                    assert!(out.iter().all(|&v| v == out[0]), "worker {worker}");
                }
            });
        }
    });
    assert_eq!(
        ctx.device_get(&shared).unwrap(),
        vec![RUNS * 1001; n],
        "every run of both threads landed"
    );
}

#[gpu_test]
fn single_ops_before_and_after_runs_in_flight_keep_call_order_on_every_path() {
    for (path, ctx) in harness::op_paths() {
        let k = ctx.kernel(ADD, "main").unwrap();
        let n = 256usize;
        let mut x = ctx.zeros::<u32>(&[n]).unwrap();
        let mut cap = ctx.capture();
        let add = cap.params_slot(&0u32);
        cap.launch(&k)
            .arg_mut(&mut x)
            .params_slot(&add)
            .grid_for(n as u64)
            .run()
            .unwrap();
        let mut step = cap.finish().unwrap();
        let mut copies = Vec::new();
        for t in 1..=6u32 {
            // Written by a single op while the last run (which writes it) may be in flight.
            x = ctx.fill_in_place(x, t).unwrap();
            step.run().params(&add, &(t * 100)).submit().unwrap();
            copies.push(ctx.copy(&x).unwrap());
        }
        for (t, copy) in (1..=6u32).zip(&copies) {
            assert_eq!(
                ctx.device_get(copy).unwrap(),
                vec![t * 101; n],
                "{path}: the copy after run {t}"
            );
        }
        assert_eq!(ctx.device_get(&x).unwrap(), vec![606; n], "{path}");
    }
}

#[gpu_test]
fn dropping_a_step_right_after_a_run_hands_out_none_of_its_memory_while_the_run_is_in_flight() {
    let ctx = harness::context();
    let slow = ctx
        .kernel(&harness::slow_copy_wgsl("read"), "main")
        .unwrap();
    let n = 16 * 1024usize;
    let data: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(2654435761)).collect();
    let mut y = ctx.zeros::<u32>(&[n]).unwrap();
    let mut cap = ctx.capture();
    let (src, new_src) = cap.input(&vec![0u32; n], &[n]).unwrap();
    let mut sink = cap.alloc::<u32>(&[n]).unwrap();
    cap.launch(&slow)
        .arg(&src)
        .arg_mut(&mut y)
        .arg_mut(&mut sink)
        .grid_for(n as u64)
        .run()
        .unwrap();
    drop((src, sink));
    let mut step = cap.finish().unwrap();
    let block = step.plan().block_bytes as usize;
    assert!(block >= 2 * n * 4, "{}", step.plan());
    step.run().input(&new_src, &data).submit().unwrap();
    drop(step);
    // Written at once on the host where the arena is mapped: best fit would take the block's
    // bytes if they were free while the run still reads `src` and writes `sink` there.
    let fillers: Vec<DeviceArray<u32>> = [block / 4, n, n]
        .into_iter()
        .map(|len| ctx.device_put(&vec![0xDEAD_BEEFu32; len], &[len]).unwrap())
        .collect();
    let got = ctx.device_get(&y).unwrap();
    let wrong = got.iter().zip(&data).filter(|(a, b)| a != b).count();
    assert_eq!(wrong, 0, "the run read a source overwritten under it");
    for filler in &fillers {
        assert!(
            ctx.device_get(filler)
                .unwrap()
                .iter()
                .all(|&v| v == 0xDEAD_BEEF),
            "the run wrote into memory handed out after the step was dropped"
        );
    }
}

#[gpu_test]
fn reads_on_another_thread_see_a_captured_step_array_between_runs_never_in_the_middle() {
    // A step holds its arrays and writes them at every run, with no borrow to keep a reader
    // of the same array out: each read must still give the array before or after a run.
    let mut paths = harness::op_paths();
    // Arrays four staging buffers long: a staged read takes several submissions.
    let small_staging = harness::context_with(gpu_arena::ArenaConfig {
        zero_copy: false,
        staging_bytes: 64 << 10,
        ..harness::test_config()
    });
    paths.push(("staging in several submissions", small_staging));
    for (path, ctx) in paths {
        let n = 1usize << 16;
        let k = ctx.kernel(ADD, "main").unwrap();
        let mut a = ctx.zeros::<u32>(&[2, n / 2]).unwrap();
        let mut cap = ctx.capture();
        cap.launch(&k)
            .params(&1u32)
            .arg_mut(&mut a)
            .grid_for(n)
            .run()
            .unwrap();
        let mut step = cap.finish().unwrap();
        let runs = 120u32;
        let other = harness::context();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let whole = |values: &[u32], how: &str| {
            assert!(
                values.iter().all(|&v| v == values[0]) && values[0] <= runs,
                "{path}, {how}: a read saw {:?}",
                values.iter().collect::<std::collections::BTreeSet<_>>()
            );
        };
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut out = vec![0u32; n / 2];
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    whole(&ctx.device_get(&a).unwrap(), "device_get");
                    ctx.device_get_into(a.view(&[1]).unwrap(), &mut out)
                        .unwrap();
                    whole(&out, "device_get_into");
                    for got in ctx.device_get_many(&[&a, &a]).unwrap() {
                        whole(&got, "device_get_many");
                    }
                    let copied = ctx.copy(&a).unwrap();
                    whole(&ctx.device_get(&copied).unwrap(), "copy");
                    let moved = other.device_put_from(&a).unwrap();
                    whole(&other.device_get(&moved).unwrap(), "device_put_from");
                }
            });
            for _ in 0..runs {
                step.run().submit().unwrap();
            }
            ctx.synchronize().unwrap();
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        assert_eq!(ctx.device_get(&a).unwrap(), vec![runs; n], "{path}");
    }
}

#[gpu_test]
fn an_input_each_run_sets_is_read_whole_by_another_thread_on_every_path() {
    for (path, ctx) in harness::op_paths() {
        let n = 1usize << 16;
        let k = ctx.kernel(ADD, "main").unwrap();
        let mut cap = ctx.capture();
        let (mut x, slot) = cap.input(&vec![0u32; n], &[n]).unwrap();
        cap.launch(&k)
            .params(&0u32)
            .arg_mut(&mut x)
            .grid_for(n)
            .run()
            .unwrap();
        let mut step = cap.finish().unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let data: Vec<Vec<u32>> = (1..=60u32).map(|v| vec![v; n]).collect();
        std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let got = ctx.device_get(&x).unwrap();
                    assert!(
                        got.iter().all(|&v| v == got[0]),
                        "{path}: {:?}",
                        got.iter().collect::<std::collections::BTreeSet<_>>()
                    );
                }
            });
            for (i, d) in data.iter().enumerate() {
                step.run().input(&slot, d).submit().unwrap();
                // Now and then the previous run has completed, so the next writes its input in
                // place on UMA, which a read on the other thread must not overlap.
                if i % 2 == 0 {
                    ctx.synchronize().unwrap();
                }
            }
            ctx.synchronize().unwrap();
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
    }
}

/// `a = p` everywhere.
const STAMP: &str = r#"
@group(0) @binding(0) var<uniform> p: u32;
@group(0) @binding(1) var<storage, read_write> a: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) i: vec3<u32>) {
    if (i.x < arrayLength(&a)) { a[i.x] = p; }
}
"#;

/// `b = a + p` elementwise.
const ADD_TO: &str = r#"
@group(0) @binding(0) var<uniform> p: u32;
@group(0) @binding(1) var<storage, read> a: array<u32>;
@group(0) @binding(2) var<storage, read_write> b: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) i: vec3<u32>) {
    if (i.x < arrayLength(&b)) { b[i.x] = a[i.x] + p; }
}
"#;

/// The one value of `values`, which must all be equal (a read of the array between two runs).
fn between_runs(values: &[u32], what: &str) -> u32 {
    assert!(
        values.iter().all(|&v| v == values[0]),
        "{what}: part of a run ({:?})",
        values.iter().collect::<std::collections::BTreeSet<_>>()
    );
    values[0]
}

/// A step whose run stamps `a` with its number and writes `b = a + 1`, run once with 0.
fn stamping_step(
    ctx: &Context,
    n: usize,
) -> (
    gpu_arena::CapturedStep,
    gpu_arena::ParamsSlot<u32>,
    DeviceArray<u32>,
) {
    let (stamp, add) = (
        ctx.kernel(STAMP, "main").unwrap(),
        ctx.kernel(ADD_TO, "main").unwrap(),
    );
    let mut a = ctx.zeros::<u32>(&[n]).unwrap();
    let mut cap = ctx.capture();
    let v = cap.params_slot(&0u32);
    cap.launch(&stamp)
        .arg_mut(&mut a)
        .params_slot(&v)
        .grid_for(n)
        .run()
        .unwrap();
    let mut b = cap.alloc::<u32>(&[n]).unwrap();
    cap.launch(&add)
        .arg(&a)
        .arg_mut(&mut b)
        .params(&1u32)
        .grid_for(n)
        .run()
        .unwrap();
    let mut step = cap.finish().unwrap();
    step.run().params(&v, &0).submit().unwrap();
    (step, v, b)
}

#[gpu_test]
fn single_ops_and_sequences_on_another_thread_never_overlap_a_captured_run() {
    let n = 1usize << 16;
    for (path, ctx) in harness::op_paths() {
        let (mut step, v, b) = stamping_step(&ctx, n);
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut reads = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) || reads < 3 {
                    reads += 1;
                    // One sequence's two reads see one state: no run comes between them.
                    let mut seq = ctx.sequence();
                    let first = seq.copy(&b).unwrap();
                    let second = seq.dynamic_slice(&b, &[0], &[n]).unwrap();
                    seq.submit().unwrap();
                    let first = between_runs(
                        &ctx.device_get(&first).unwrap(),
                        &format!("{path}, sequence copy"),
                    );
                    let second = between_runs(
                        &ctx.device_get(&second).unwrap(),
                        &format!("{path}, sequence slice"),
                    );
                    assert_eq!(first, second, "{path}: one sequence saw two runs");
                    let copied = ctx.copy(&b).unwrap();
                    between_runs(&ctx.device_get(&copied).unwrap(), &format!("{path}, copy"));
                }
            });
            for t in 1..=60u32 {
                // A sequence that reads `b` refuses a run until it is submitted.
                while let Err(e) = step.run().params(&v, &t).submit() {
                    assert!(matches!(e, Error::PendingInRecorder { .. }), "{path}: {e}");
                    std::thread::yield_now();
                }
                // Now and then the arrays go idle, so the reader's copies may be host copies,
                // which the next run must not overlap.
                if t % 3 == 0 {
                    ctx.synchronize().unwrap();
                }
            }
            ctx.synchronize().unwrap();
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        assert_eq!(between_runs(&ctx.device_get(&b).unwrap(), path), 61);
    }
}

#[gpu_test]
fn an_input_updated_whole_on_another_thread_is_read_whole_by_each_run() {
    let n = 1usize << 16;
    for (path, ctx) in harness::op_paths() {
        let add = ctx.kernel(ADD_TO, "main").unwrap();
        let mut x = ctx.device_put(&vec![0u32; n], &[n]).unwrap();
        let mut cap = ctx.capture();
        let mut c = cap.alloc::<u32>(&[n]).unwrap();
        cap.launch(&add)
            .arg(&x)
            .arg_mut(&mut c)
            .params(&1u32)
            .grid_for(n)
            .run()
            .unwrap();
        let read = cap.read(&c).unwrap();
        let mut step = cap.finish().unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut w = 0u32;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    w += 1;
                    x = ctx
                        .dynamic_update_slice(x, (&vec![w; n][..], &[n][..]), &[0])
                        .map_err(|d| d.error)
                        .unwrap();
                }
            });
            let mut out = vec![0u32; n];
            for _ in 0..60 {
                step.run().read_into(&read, &mut out).submit().unwrap();
                between_runs(&out, path);
                std::thread::yield_now();
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
    }
}

const COPY_U32: &str = r#"
@group(0) @binding(0) var<storage, read> x: array<u32>;
@group(0) @binding(1) var<storage, read_write> y: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) i: vec3<u32>) {
    if (i.x < arrayLength(&y)) { y[i.x] = x[i.x]; }
}
"#;

#[gpu_test]
fn an_op_gathered_on_another_thread_never_reads_a_runs_two_row_updates_half_made() {
    // Each run writes one value into rows r and r + 4 (two moving updates, made on the host on
    // a CPU adapter when the cache is idle); a third thread keeps the queue busy. A copy or
    // slice of the cache on another thread, gathered as a kernel, must see both rows or none.
    let (rows, width) = (8usize, 256usize);
    let mut paths = harness::op_paths();
    let zero_copy = paths.remove(0);
    let repeated = std::iter::repeat_with(|| ("zero-copy", harness::context())).take(3);
    for (path, ctx) in std::iter::once(zero_copy).chain(repeated).chain(paths) {
        let copy = ctx.kernel(COPY_U32, "main").unwrap();
        let cache = ctx.zeros::<u32>(&[rows, width]).unwrap();
        let source = ctx.fill(&[4096], 1u32).unwrap();
        let mut cap = ctx.capture();
        let (row, new_row) = cap.input(&vec![0u32; width], &[1, width]).unwrap();
        let (low, high) = (cap.index_slot(&[0, 0]), cap.index_slot(&[4, 0]));
        let cache = cap.dynamic_update_slice_at(cache, &row, &low).unwrap();
        let cache = cap.dynamic_update_slice_at(cache, &row, &high).unwrap();
        drop(row);
        let mut out = cap.alloc::<u32>(&[4096]).unwrap();
        cap.launch(&copy)
            .arg(&source)
            .arg_mut(&mut out)
            .grid_for(4096usize)
            .run()
            .unwrap();
        let read = cap.read(&out).unwrap();
        let mut step = cap.finish().unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let rows_of = |values: Vec<u32>, how: &str| -> Vec<u32> {
            let rows: Vec<u32> = values.chunks(width).map(|row| row[0]).collect();
            assert!(
                values
                    .chunks(width)
                    .all(|row| row.iter().all(|&v| v == row[0]))
                    && (0..4).all(|r| rows[r] == rows[r + 4]),
                "{path}, {how}: part of a run seen: {rows:?}"
            );
            rows
        };
        let mut source = Some(source);
        std::thread::scope(|s| {
            let (ctx, stop, source) = (&ctx, &stop, &mut source);
            s.spawn(move || {
                let mut i = 0u32;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    i += 1;
                    let filled = ctx.fill_in_place(source.take().unwrap(), 1000 + i);
                    *source = Some(filled.unwrap());
                }
            });
            s.spawn(|| {
                let mut reads = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) || reads < 4 {
                    reads += 1;
                    let copied = ctx.copy(&cache).unwrap();
                    rows_of(ctx.device_get(&copied).unwrap(), "copy");
                    let sliced = ctx.dynamic_slice(&cache, &[0, 0], &[rows, width]).unwrap();
                    rows_of(ctx.device_get(&sliced).unwrap(), "dynamic_slice");
                }
            });
            let mut got = vec![0u32; 4096];
            for k in 0..200u32 {
                let r = i64::from(k % 4);
                step.run()
                    .input(&new_row, &vec![k + 1; width])
                    .start(&low, &[r, 0])
                    .start(&high, &[r + 4, 0])
                    .read_into(&read, &mut got)
                    .submit()
                    .unwrap();
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        let last = rows_of(ctx.device_get(&cache).unwrap(), "the end");
        assert_eq!(last, [197, 198, 199, 200, 197, 198, 199, 200], "{path}");
    }
}
