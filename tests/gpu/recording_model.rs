//! The recording model (crate docs, `kernels`): only a user's unsubmitted `Sequence` makes an
//! array pending; every single op, launches included, refuses a pending array with an error
//! naming the sequence; the library's own one-op submissions never refuse each other across
//! threads; a refused launch marks nothing; a sequence runs all or nothing; `raw_submit`
//! records its uses before the queue gets the work; the staging pool returns to its size.

use crate::harness::{context, context_with, test_config};
use gpu_arena::error::{Access, Recorder, RecorderKind};
use gpu_arena::profile::TimelineEventKind;
use gpu_arena::{AllocatorKind, ArenaConfig, Context, DeviceArray, Error, GpuUse, SubmissionId};

/// Adds `p` to every element of `a`.
const ADD: &str = r#"
@group(0) @binding(0) var<uniform> p: u32;
@group(0) @binding(1) var<storage, read_write> a: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < arrayLength(&a)) { a[id.x] = a[id.x] + p; }
}
"#;

/// `y[i] = y[i] + x[i]`.
const ACCUMULATE: &str = r#"
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < arrayLength(&y)) { y[id.x] = y[id.x] + x[id.x]; }
}
"#;

fn assert_names_the_pending_sequence(error: &Error, operation: &str) {
    let message = error.to_string();
    assert!(
        matches!(
            error,
            Error::PendingInRecorder {
                operation: refused,
                recorder: Recorder { kind: RecorderKind::Sequence, .. },
                ..
            } if refused.contains(operation)
        ),
        "{operation}: {message}"
    );
    assert!(
        message.contains("pending in Sequence #"),
        "{operation}: {message}"
    );
    assert!(
        message.contains("call submit() on that Sequence first"),
        "{operation}: {message}"
    );
    assert!(message.contains(operation), "{operation}: {message}");
}

fn launch_after_an_unsubmitted_put_is_refused(ctx: &Context) {
    let k = ctx.kernel(ACCUMULATE, "main").unwrap();
    let mut y = ctx.device_put(&[1.0f32; 100], &[100]).unwrap();
    let mut s = ctx.sequence();
    let x = s.put(&[10.0f32; 100], &[100]).unwrap();
    let refused = ctx
        .launch(&k)
        .arg(&x)
        .arg_mut(&mut y)
        .grid_for(100)
        .run()
        .unwrap_err();
    assert_names_the_pending_sequence(&refused, "launch");
    // Nothing ran: y is as it was once the sequence is submitted, and the launch then works.
    s.submit().unwrap();
    assert_eq!(ctx.device_get(&y).unwrap(), [1.0; 100]);
    ctx.launch(&k)
        .arg(&x)
        .arg_mut(&mut y)
        .grid_for(100)
        .run()
        .unwrap();
    assert_eq!(ctx.device_get(&y).unwrap(), [11.0; 100]);
}

#[gpu_test]
fn launch_over_an_array_put_by_an_unsubmitted_sequence_is_refused_on_the_zero_copy_path() {
    launch_after_an_unsubmitted_put_is_refused(&context());
}

#[gpu_test]
fn launch_over_an_array_put_by_an_unsubmitted_sequence_is_refused_on_the_staging_path() {
    let ctx = context_with(ArenaConfig {
        zero_copy: false,
        ..test_config()
    });
    launch_after_an_unsubmitted_put_is_refused(&ctx);
}

#[gpu_test]
fn launch_over_an_array_with_an_unsubmitted_sequence_step_is_refused() {
    let ctx = context();
    let add = ctx.kernel(ADD, "main").unwrap();
    let mut x = ctx.device_put(&[20u32; 64], &[64]).unwrap();
    let mut s = ctx.sequence();
    s.launch(&add)
        .arg_mut(&mut x)
        .params(&1u32)
        .grid_for(64)
        .run()
        .unwrap();
    let refused = ctx
        .launch(&add)
        .arg_mut(&mut x)
        .params(&1u32)
        .grid_for(64)
        .run()
        .unwrap_err();
    assert_names_the_pending_sequence(&refused, "launch");
    s.submit().unwrap();
    ctx.launch(&add)
        .arg_mut(&mut x)
        .params(&1u32)
        .grid_for(64)
        .run()
        .unwrap();
    assert_eq!(ctx.device_get(&x).unwrap(), [22; 64]);
}

#[gpu_test]
fn every_single_op_refuses_an_array_pending_in_a_sequence_naming_it() {
    let ctx = context();
    let other = context();
    let mut s = ctx.sequence();
    let x = s.put(&[3u32; 64], &[64]).unwrap();
    let number = s.number();
    let ready = ctx.device_put(&[0u32; 64], &[64]).unwrap();

    let refused = ctx.device_get(&x).unwrap_err();
    assert!(
        refused
            .to_string()
            .contains(&format!("pending in Sequence #{number}")),
        "{refused} / Sequence #{number}"
    );
    assert_names_the_pending_sequence(&refused, "device_get");
    assert_names_the_pending_sequence(&ctx.copy(&x).unwrap_err(), "copy");
    assert_names_the_pending_sequence(
        &ctx.dynamic_slice(&x, &[0], &[4]).unwrap_err(),
        "dynamic_slice",
    );
    assert_names_the_pending_sequence(
        &ctx.dynamic_update_slice_copy(&x, &ready, &[0]).unwrap_err(),
        "dynamic_update_slice_copy",
    );
    // The pending array as the update of a donated operand: the operand comes back intact.
    let donated = ctx.dynamic_update_slice(ready, &x, &[0]).unwrap_err();
    assert_names_the_pending_sequence(&donated.error, "dynamic_update_slice");
    let ready = donated.array;
    assert_eq!(ctx.device_get(&ready).unwrap(), [0; 64]);
    assert_names_the_pending_sequence(&x.copy_to(&other).unwrap_err(), "device_put_from");
    assert_names_the_pending_sequence(&x.to_vec().unwrap_err(), "DeviceArray::to_vec");
    // A host read cannot be recorded in a sequence: its refusal offers only submit().
    let host_reads = [
        refused.to_string(),
        x.to_vec().unwrap_err().to_string(),
        x.equals_host(&[3u32; 64]).unwrap_err().to_string(),
        x.to_string(),
    ];
    for message in host_reads {
        assert!(message.contains("pending in Sequence #"), "{message}");
        assert!(!message.contains(", or record"), "{message}");
    }
    let gathered =
        gpu_arena::gather(std::slice::from_ref(&ctx), std::slice::from_ref(&x)).unwrap_err();
    assert_names_the_pending_sequence(&gathered, "gather");
    // Only an op the sequence records by that name is offered to be recorded in it: not a
    // copy to another context, a gather or an AppWork hand-out.
    assert!(
        ctx.copy(&x)
            .unwrap_err()
            .to_string()
            .ends_with(", or record copy in it"),
        "copy"
    );
    let mut work = ctx.app_work();
    let not_recordable = [
        x.copy_to(&other).unwrap_err(),
        ctx.device_put_from(&x).unwrap_err(),
        gathered,
        work.storage(&x).unwrap_err(),
    ];
    for error in not_recordable {
        let message = error.to_string();
        assert!(message.contains("pending in Sequence #"), "{message}");
        assert!(!message.contains(", or record"), "{message}");
    }
    drop(work);
    s.submit().unwrap();
    assert_eq!(ctx.device_get(&x).unwrap(), [3; 64]);
    assert_eq!(ctx.copy(&x).unwrap().to_vec().unwrap(), [3; 64]);
}

/// Two sequences that share an array run in the order they are submitted, whichever was
/// recorded first, on every path: on a CPU adapter too, where their copies and fills are host
/// copies (made at `submit`).
#[gpu_test]
fn two_sequences_sharing_an_array_run_in_the_order_they_are_submitted_on_every_path() {
    for (path, ctx) in crate::harness::op_paths() {
        for reader_recorded_first in [true, false] {
            for writer_submitted_first in [true, false] {
                let x = ctx.device_put(&[1u32; 64], &[64]).unwrap();
                let (mut reader, mut writer) = (ctx.sequence(), ctx.sequence());
                let read = |reader: &mut gpu_arena::Sequence, x: &DeviceArray<u32>| {
                    let copied = reader.copy(x).unwrap();
                    (copied, reader.dynamic_slice(x, &[8], &[8]).unwrap())
                };
                let fill = |writer: &mut gpu_arena::Sequence, x| {
                    writer.fill_in_place(x, 7u32).map_err(|d| d.error).unwrap()
                };
                let (x, (copied, sliced)) = if reader_recorded_first {
                    let read = read(&mut reader, &x);
                    (fill(&mut writer, x), read)
                } else {
                    let x = fill(&mut writer, x);
                    let read = read(&mut reader, &x);
                    (x, read)
                };
                if writer_submitted_first {
                    writer.submit().unwrap();
                    reader.submit().unwrap();
                } else {
                    reader.submit().unwrap();
                    writer.submit().unwrap();
                }
                let want = if writer_submitted_first { 7 } else { 1 };
                let case = format!(
                    "{path}: reader recorded first {reader_recorded_first}, writer submitted \
                     first {writer_submitted_first}"
                );
                assert_eq!(ctx.device_get(&copied).unwrap(), [want; 64], "{case}");
                assert_eq!(ctx.device_get(&sliced).unwrap(), [want; 8], "{case}");
                assert_eq!(ctx.device_get(&x).unwrap(), [7; 64], "{case}");
            }
        }
        // A dropped sequence's copies and fills never run; they count in its length alike.
        let x = ctx.device_put(&[1u32; 64], &[64]).unwrap();
        let mut dropped = ctx.sequence();
        let x = dropped.fill_in_place(x, 9u32).map_err(|d| d.error).unwrap();
        assert_eq!(dropped.len(), 1, "{path}: one fill");
        assert!(!dropped.is_empty(), "{path}");
        drop(dropped);
        assert_eq!(ctx.device_get(&x).unwrap(), [1; 64], "{path}: dropped");
        // Two threads, each with a sequence that reads one array.
        std::thread::scope(|s| {
            for offset in [0i64, 32] {
                let (ctx, x) = (&ctx, &x);
                s.spawn(move || {
                    for _ in 0..20 {
                        let mut sequence = ctx.sequence();
                        let head = sequence.dynamic_slice(x, &[offset], &[32]).unwrap();
                        sequence.submit().unwrap();
                        assert_eq!(ctx.device_get(&head).unwrap(), [1; 32], "{path}");
                    }
                });
            }
        });
    }
}

#[gpu_test]
fn a_reshaped_or_bitcast_array_is_described_by_its_new_shape_and_type() {
    let ctx = context();
    let a = ctx.zeros::<u32>(&[8]).unwrap().reshape(&[2, 4]).unwrap();
    let described = |id| {
        let snapshot = ctx.memory_snapshot();
        let chunk = snapshot.chunk(id).expect("a live array").clone();
        (chunk.dtype, chunk.shape)
    };
    assert_eq!(
        described(a.allocation_id()),
        (Some("u32".into()), Some(vec![2, 4]))
    );
    let b = a.bitcast::<f32>().unwrap();
    assert_eq!(
        described(b.allocation_id()),
        (Some("f32".into()), Some(vec![2, 4]))
    );
    // A refused reshape describes nothing new.
    let b = b.reshape(&[3, 3]).unwrap_err().array;
    assert_eq!(described(b.allocation_id()).1, Some(vec![2, 4]));
    let mut s = ctx.sequence();
    let b = s.fill_in_place(b, 1.0f32).map_err(|d| d.error).unwrap();
    match ctx.device_get(&b) {
        Err(Error::PendingInRecorder { array, .. }) => {
            assert_eq!((array.dtype, array.shape), (Some("f32"), Some(vec![2, 4])));
        }
        other => panic!("{other:?}"),
    }
    s.submit().unwrap();
    assert_eq!(ctx.device_get(&b).unwrap(), [1.0f32; 8]);
}

#[gpu_test]
fn a_donated_array_pending_in_a_sequence_comes_back_from_a_refused_single_op() {
    let ctx = context();
    let mut s = ctx.sequence();
    let x = s.put(&[5u32; 32], &[32]).unwrap();
    let refused = ctx.fill_in_place(x, 9).unwrap_err();
    assert_names_the_pending_sequence(&refused.error, "fill_in_place");
    let x = refused.array;
    let refused = ctx.dynamic_update_slice(x, &[1u32][..], &[0]).unwrap_err();
    assert_names_the_pending_sequence(&refused.error, "dynamic_update_slice");
    let x = refused.array;
    s.submit().unwrap();
    assert_eq!(ctx.device_get(&x).unwrap(), [5; 32]);
}

#[gpu_test]
fn raw_submit_refuses_an_array_pending_in_a_sequence_and_submits_nothing() {
    let ctx = context();
    let done = ctx.device_put(&[1u32; 64], &[64]).unwrap();
    let mut s = ctx.sequence();
    let pending = s.put(&[2u32; 64], &[64]).unwrap();
    let mut encoder = ctx.device().create_command_encoder(&Default::default());
    encoder.clear_buffer(done.buffer(), done.byte_offset(), Some(256));
    let before = done.last_use();
    let refused = ctx
        .raw_submit([encoder.finish()], &[&done, &pending])
        .unwrap_err();
    assert_names_the_pending_sequence(&refused, "raw_submit");
    assert_eq!(done.last_use(), before, "nothing recorded");
    s.submit().unwrap();
    assert_eq!(ctx.device_get(&done).unwrap(), [1; 64], "nothing submitted");
    assert_eq!(ctx.device_get(&pending).unwrap(), [2; 64]);
}

#[gpu_test]
fn dropping_an_unsubmitted_sequence_releases_its_arrays() {
    let ctx = context();
    let x = ctx.device_put(&[1u32; 16], &[16]).unwrap();
    let mut s = ctx.sequence();
    let _slice = s.dynamic_slice(&x, &[0], &[4]).unwrap();
    // The sequence reads `x`: a write would overtake that read.
    let refused = ctx.fill_in_place(x, 2).unwrap_err();
    let x = refused.array;
    drop(s);
    let x = ctx.fill_in_place(x, 2).unwrap();
    assert_eq!(ctx.copy(&x).unwrap().to_vec().unwrap(), [2; 16]);
}

#[gpu_test]
fn a_sequence_dropped_unsubmitted_leaves_the_arrays_it_was_given_as_they_were() {
    // On the library's kernels and on lavapipe's host copies (made by submit, not when
    // recorded): in-place updates, fills and copies of a dropped sequence never land.
    for (path, ctx) in crate::kernels_common::both_paths() {
        let a = ctx.device_put(&[1u32; 16], &[16]).unwrap();
        let b = ctx.device_put(&[2u32; 16], &[16]).unwrap();
        let mut s = ctx.sequence();
        let a = s.dynamic_update_slice(a, &[9u32; 4][..], &[3]).unwrap();
        let update = ctx.device_put(&[8u32; 2], &[2]).unwrap();
        let a = s.dynamic_update_slice(a, &update, &[12]).unwrap();
        let b = s.fill_in_place(b, 5).unwrap();
        let made = s.put(&[4u32; 4], &[4]).unwrap();
        drop(s);
        assert_eq!(ctx.device_get(&a).unwrap(), [1; 16], "{path}");
        assert_eq!(ctx.device_get(&b).unwrap(), [2; 16], "{path}");
        assert_eq!(ctx.device_get(&update).unwrap(), [8; 2], "{path}");
        assert_eq!(made.shape(), [4], "{path}");
    }
}

/// `y = x * 2` over `x` read-only: a reader of shared weights.
const DOUBLE: &str = r#"
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < arrayLength(&y)) { y[id.x] = 2.0 * x[id.x]; }
}
"#;

#[gpu_test]
fn two_readers_on_two_threads_never_refuse_each_other() {
    for zero_copy in [true, false] {
        let ctx = context_with(ArenaConfig {
            zero_copy,
            ..test_config()
        });
        let k = ctx.kernel(DOUBLE, "main").unwrap();
        let n = 1024;
        let weights = ctx
            .device_put(&(0..n).map(|i| i as f32).collect::<Vec<_>>(), &[n])
            .unwrap()
            .with_label("shared weights");
        let expected: Vec<f32> = (0..n).map(|i| 2.0 * i as f32).collect();
        let rounds = 40;
        std::thread::scope(|scope| {
            // Two threads record sequences that read the weights and hold them unsubmitted
            // while the other two use the weights through single ops.
            for _ in 0..2 {
                scope.spawn(|| {
                    for _ in 0..rounds {
                        let mut s = ctx.sequence();
                        let mut y = s.context().zeros::<f32>(&[n]).unwrap();
                        s.launch(&k)
                            .arg(&weights)
                            .arg_mut(&mut y)
                            .grid_for(n as u64)
                            .run()
                            .expect("a recorded read is never refused for another reader");
                        let head = s.dynamic_slice(&weights, &[0], &[8]).unwrap();
                        std::thread::yield_now();
                        s.submit().unwrap();
                        assert_eq!(ctx.device_get(&y).unwrap(), expected);
                        assert_eq!(
                            ctx.device_get(&head).unwrap(),
                            [0., 1., 2., 3., 4., 5., 6., 7.]
                        );
                    }
                });
            }
            for t in 0..2 {
                let (ctx, k, weights, expected) = (&ctx, &k, &weights, &expected);
                scope.spawn(move || {
                    for i in 0..rounds {
                        match (i + t) % 4 {
                            0 => {
                                let mut y = ctx.zeros::<f32>(&[n]).unwrap();
                                ctx.launch(k)
                                    .arg(weights)
                                    .arg_mut(&mut y)
                                    .grid_for(n as u64)
                                    .run()
                                    .expect("a launch reading the weights is never refused");
                                assert_eq!(&ctx.device_get(&y).unwrap(), expected);
                            }
                            1 => assert_eq!(ctx.device_get(weights).expect("device_get")[5], 5.0),
                            2 => assert_eq!(
                                ctx.copy(weights).expect("copy").to_vec().unwrap()[7],
                                7.0
                            ),
                            _ => assert_eq!(
                                ctx.dynamic_slice(weights, &[3], &[2])
                                    .expect("dynamic_slice")
                                    .to_vec()
                                    .unwrap(),
                                [3.0, 4.0]
                            ),
                        }
                    }
                });
            }
        });
    }
}

/// The configurations the readers' tests below run over: on a CPU adapter (lavapipe) with
/// zero-copy on, the library's ops copy on the host; forced, or without zero-copy, they run as
/// their WGSL kernels. The marks must hold on both paths.
fn reader_configs() -> Vec<ArenaConfig> {
    let mut configs = Vec::new();
    for force_device_kernels in [false, true] {
        for zero_copy in [true, false] {
            configs.push(ArenaConfig {
                force_device_kernels,
                zero_copy,
                ..test_config()
            });
        }
    }
    configs
}

/// A table of 1000 `u32`s labelled "shared table" on `ctx`, with its host data.
fn shared_table(ctx: &Context) -> (Vec<u32>, DeviceArray<u32>) {
    let data: Vec<u32> = (0..1000).map(|i| 7 * i + 3).collect();
    let shared = ctx
        .device_put(&data, &[data.len()])
        .unwrap()
        .with_label("shared table");
    (data, shared)
}

/// Two threads meeting, as at a `std::sync::Barrier`, except that a thread whose partner
/// panicked fails after a while instead of waiting forever (a hung test reports nothing).
struct Rendezvous {
    /// The meeting's number and how many threads have come to it.
    state: std::sync::Mutex<(u64, usize)>,
    met: std::sync::Condvar,
}

impl Rendezvous {
    fn new() -> Self {
        Rendezvous {
            state: std::sync::Mutex::new((0, 0)),
            met: std::sync::Condvar::new(),
        }
    }

    fn meet(&self) {
        let mut state = self.state.lock().unwrap();
        let meeting = state.0;
        state.1 += 1;
        if state.1 == 2 {
            *state = (meeting + 1, 0);
            self.met.notify_all();
            return;
        }
        let (state, waited) = self
            .met
            .wait_timeout_while(state, std::time::Duration::from_secs(300), |state| {
                state.0 == meeting
            })
            .unwrap();
        drop(state);
        assert!(
            !waited.timed_out(),
            "the other thread never came: it failed first (see its panic)"
        );
    }
}

/// Compares element by element, naming the first element that differs.
fn assert_elements(got: &[u32], want: &[u32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (got, want)) in got.iter().zip(want).enumerate() {
        assert_eq!(got, want, "{what}: element {i}");
    }
}

#[gpu_test]
fn two_threads_recording_copies_and_slices_of_one_array_in_their_own_sequences_never_refuse_each_other(
) {
    const REFUSED: &str = "a reader was refused by a reader";
    for config in reader_configs() {
        let name = format!(
            "force_device_kernels: {}, zero_copy: {}",
            config.force_device_kernels, config.zero_copy
        );
        let ctx = context_with(config);
        let (data, shared) = shared_table(&ctx);
        let n = data.len();
        let both = Rendezvous::new();
        std::thread::scope(|scope| {
            for t in 0..2 {
                let (ctx, shared, data, both, name) = (&ctx, &shared, &data, &both, &name);
                scope.spawn(move || {
                    for round in 0..20 {
                        // Each thread and round its own window of the array.
                        let len = 1 + (13 * round + 29 * t) % 64;
                        let start = (37 * round + 101 * t) % (n - len);
                        let window = &data[start..start + len];
                        let mut s = ctx.sequence();
                        let copied = s.copy(shared).expect(REFUSED);
                        let sliced = s
                            .dynamic_slice(shared, &[start as i64], &[len])
                            .expect(REFUSED);
                        // Both sequences now hold their reads of `shared`, unsubmitted.
                        both.meet();
                        let got = ctx.device_get(shared).expect(REFUSED);
                        let copied_now = ctx.copy(shared).expect(REFUSED);
                        let sliced_now = ctx
                            .dynamic_slice(shared, &[start as i64], &[len])
                            .expect(REFUSED);
                        // Neither sequence is submitted before both threads' single ops ran.
                        both.meet();
                        s.submit().expect("a sequence of reads submits");
                        let what = |op: &str| format!("{name}, thread {t}, round {round}: {op}");
                        assert_elements(&got, data, &what("device_get"));
                        assert_elements(&ctx.device_get(&copied_now).unwrap(), data, &what("copy"));
                        assert_elements(
                            &ctx.device_get(&sliced_now).unwrap(),
                            window,
                            &what("dynamic_slice"),
                        );
                        assert_elements(
                            &ctx.device_get(&copied).unwrap(),
                            data,
                            &what("the sequence's copy"),
                        );
                        assert_elements(
                            &ctx.device_get(&sliced).unwrap(),
                            window,
                            &what("the sequence's dynamic_slice"),
                        );
                    }
                });
            }
        });
        assert_elements(&ctx.device_get(&shared).unwrap(), &data, &name);
    }
}

/// Checks that `error` refuses `operation`'s write of the array labelled "shared table" for
/// the read sequence `number` recorded.
fn assert_refused_for_a_recorded_read(error: &Error, operation: &str, argument: &str, number: u64) {
    match error {
        Error::PendingInRecorder {
            operation: refused,
            argument: named,
            array,
            recorder:
                Recorder {
                    kind: RecorderKind::Sequence,
                    number: by,
                    ..
                },
            recorded: Access::Read,
            access: Access::Write,
            ..
        } => {
            assert_eq!(*refused, operation, "{error}");
            assert_eq!(named, argument, "{error}");
            assert_eq!(*by, number, "{error}");
            assert_eq!(array.label.as_deref(), Some("shared table"), "{error}");
        }
        other => panic!("{operation}: a write refused for a recorded read, got: {other}"),
    }
}

#[gpu_test]
fn a_write_from_another_thread_is_refused_while_a_sequence_holds_a_read_and_the_array_comes_back_intact(
) {
    for config in reader_configs() {
        let ctx = context_with(config);
        let (data, shared) = shared_table(&ctx);
        let mut s = ctx.sequence();
        let copied = s.copy(&shared).unwrap();
        let sliced = s.dynamic_slice(&shared, &[500], &[40]).unwrap();
        let number = s.number();
        // The sequence holds no borrow of `shared`, so another thread may own it meanwhile: its
        // writes would overtake the recorded reads, and are refused.
        let (ctx, data) = (&ctx, &data);
        let shared = std::thread::scope(|scope| {
            scope
                .spawn(move || {
                    let refused = ctx.fill_in_place(shared, 0).unwrap_err();
                    assert_refused_for_a_recorded_read(
                        &refused.error,
                        "fill_in_place",
                        "the array",
                        number,
                    );
                    let refused = ctx
                        .dynamic_update_slice(refused.array, &[9u32; 4][..], &[0])
                        .unwrap_err();
                    assert_refused_for_a_recorded_read(
                        &refused.error,
                        "dynamic_update_slice",
                        "the operand",
                        number,
                    );
                    // Readers still read it, as it was.
                    let shared = refused.array;
                    assert_elements(
                        &ctx.device_get(&shared)
                            .expect("a reader was refused by a reader"),
                        data,
                        "the donated array",
                    );
                    shared
                })
                .join()
                .unwrap()
        });
        s.submit().unwrap();
        assert_elements(&ctx.device_get(&copied).unwrap(), data, "copy");
        assert_elements(&ctx.device_get(&sliced).unwrap(), &data[500..540], "slice");
        // Submitted: the write is no longer refused.
        let shared = ctx.fill_in_place(shared, 1).unwrap();
        assert_elements(&ctx.device_get(&shared).unwrap(), &[1; 1000], "filled");
    }
}

#[gpu_test]
fn a_write_overtaking_a_recorded_read_is_refused_naming_the_array() {
    let ctx = context();
    let k = ctx.kernel(DOUBLE, "main").unwrap();
    let add = ctx.kernel(ADD, "main").unwrap();
    let weights = ctx
        .device_put(&[1.0f32; 64], &[64])
        .unwrap()
        .with_label("layer 3 weights");
    let mut s = ctx.sequence();
    let mut y = ctx.zeros::<f32>(&[64]).unwrap();
    s.launch(&k)
        .arg(&weights)
        .arg_mut(&mut y)
        .grid_for(64)
        .run()
        .unwrap();
    let number = s.number();
    let names_everything = |error: &Error, operation: &str, argument: &str, dtype: &str| {
        assert_names_the_pending_sequence(error, operation);
        let Error::PendingInRecorder {
            argument: named,
            array,
            recorder,
            recorded,
            access,
            ..
        } = error
        else {
            unreachable!("checked above");
        };
        assert_eq!(array.label.as_deref(), Some("layer 3 weights"));
        assert_eq!(array.dtype, Some(dtype));
        assert_eq!(array.shape.as_deref(), Some(&[64][..]));
        assert_eq!(named, argument, "the argument exactly as the docs spell it");
        assert_eq!(recorder.number, number);
        assert_eq!((*recorded, *access), (Access::Read, Access::Write));
        let message = error.to_string();
        assert!(message.contains("\"layer 3 weights\""), "{message}");
        assert!(message.contains(&format!("{dtype} [64]")), "{message}");
        assert!(message.contains(argument), "{message}");
        assert!(
            message.contains(&format!("Sequence #{number}")),
            "{message}"
        );
        assert!(message.contains("a read of it"), "{message}");
    };
    // Writers are refused, each naming the argument.
    let donated = ctx.fill_in_place(weights, 0.0).unwrap_err();
    names_everything(&donated.error, "fill_in_place", "the array", "f32");
    let donated = ctx
        .dynamic_update_slice(donated.array, &[9.0f32][..], &[0])
        .unwrap_err();
    names_everything(&donated.error, "dynamic_update_slice", "the operand", "f32");
    let mut weights = donated.array;
    let mut as_bits = weights.bitcast::<u32>().unwrap();
    let refused = ctx
        .launch(&add)
        .arg_mut(&mut as_bits)
        .params(&1u32)
        .grid_for(64)
        .run()
        .unwrap_err();
    // Bitcast, the array is named as what it is now.
    let binding = "@binding(1) a: array<u32> (read_write)";
    names_everything(&refused, "launch", binding, "u32");
    weights = as_bits.bitcast::<f32>().unwrap();
    // Readers are not.
    assert_eq!(ctx.device_get(&weights).unwrap(), [1.0; 64]);
    s.submit().unwrap();
    assert_eq!(
        ctx.device_get(&y).unwrap(),
        [2.0; 64],
        "the recorded read saw no write"
    );
    let weights = ctx.fill_in_place(weights, 4.0).unwrap();
    assert_eq!(ctx.device_get(&weights).unwrap(), [4.0; 64]);
}

#[gpu_test]
fn an_array_a_sequence_writes_stays_pending_for_readers_and_writers() {
    let ctx = context();
    let k = ctx.kernel(DOUBLE, "main").unwrap();
    let x = ctx.device_put(&[3.0f32; 64], &[64]).unwrap();
    let mut y = ctx.zeros::<f32>(&[64]).unwrap().with_label("activations");
    let mut s = ctx.sequence();
    s.launch(&k)
        .arg(&x)
        .arg_mut(&mut y)
        .grid_for(64)
        .run()
        .unwrap();
    let mut z = ctx.zeros::<f32>(&[64]).unwrap();
    let refused = ctx
        .launch(&k)
        .arg(&y)
        .arg_mut(&mut z)
        .grid_for(64)
        .run()
        .unwrap_err();
    assert_names_the_pending_sequence(&refused, "launch");
    let message = refused.to_string();
    assert!(
        message.contains("@binding(0) x: array<f32> (read)"),
        "{message}"
    );
    assert!(message.contains("\"activations\""), "{message}");
    assert!(message.contains("a write to it"), "{message}");
    assert_names_the_pending_sequence(&ctx.device_get(&y).unwrap_err(), "device_get");
    assert_names_the_pending_sequence(&ctx.copy(&y).unwrap_err(), "copy");
    // `x`, only read by the sequence, is free for readers, a single launch included.
    assert_eq!(ctx.device_get(&x).unwrap(), [3.0; 64]);
    ctx.launch(&k)
        .arg(&x)
        .arg_mut(&mut z)
        .grid_for(64)
        .run()
        .unwrap();
    assert_eq!(ctx.device_get(&z).unwrap(), [6.0; 64]);
    s.submit().unwrap();
    assert_eq!(ctx.device_get(&y).unwrap(), [6.0; 64]);
}

#[gpu_test]
fn a_sequence_that_reads_then_writes_an_array_keeps_it_pending_for_readers() {
    let ctx = context();
    let k = ctx.kernel(DOUBLE, "main").unwrap();
    let x = ctx.device_put(&[1.0f32; 64], &[64]).unwrap();
    let mut s = ctx.sequence();
    let _copy = s.copy(&x).unwrap();
    assert_eq!(ctx.device_get(&x).unwrap(), [1.0; 64], "only read so far");
    let mut x = s.fill_in_place(x, 5.0).unwrap();
    assert_names_the_pending_sequence(&ctx.device_get(&x).unwrap_err(), "device_get");
    s.submit().unwrap();
    let mut y = ctx.zeros::<f32>(&[64]).unwrap();
    ctx.launch(&k)
        .arg(&x)
        .arg_mut(&mut y)
        .grid_for(64)
        .run()
        .unwrap();
    assert_eq!(ctx.device_get(&y).unwrap(), [10.0; 64]);
    // Submitted: every mark is gone, writers too.
    x = ctx.fill_in_place(x, 0.0).unwrap();
    assert_eq!(ctx.device_get(&x).unwrap(), [0.0; 64]);
}

#[gpu_test]
fn a_raw_queue_copy_without_flush_sees_the_gathered_ops() {
    for zero_copy in [true, false] {
        let ctx = context_with(ArenaConfig {
            zero_copy,
            ..test_config()
        });
        let add = ctx.kernel(ADD, "main").unwrap();
        let mut x = ctx.device_put(&[0u32; 64], &[64]).unwrap();
        for _ in 0..5 {
            ctx.launch(&add)
                .arg_mut(&mut x)
                .params(&1u32)
                .grid_for(64)
                .run()
                .unwrap();
        }
        let readback = ctx.device().create_buffer(&wgpu::BufferDescriptor {
            label: Some("raw queue readback"),
            size: 256,
            usage: wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::MAP_READ,
            mapped_at_creation: false,
        });
        let mut encoder = ctx.device().create_command_encoder(&Default::default());
        encoder.copy_buffer_to_buffer(x.buffer(), x.byte_offset(), &readback, 0, 256);
        // No flush(): taking the queue submits the five gathered launches first.
        ctx.queue().submit([encoder.finish()]);
        readback
            .slice(..)
            .map_async(wgpu::MapMode::Read, |r| r.unwrap());
        ctx.device()
            .poll(wgpu::PollType::wait_indefinitely())
            .unwrap();
        let seen: Vec<u32> =
            bytemuck::cast_slice(&readback.slice(..).get_mapped_range().unwrap()).to_vec();
        assert_eq!(seen, [5; 64], "zero_copy: {zero_copy}");
        ctx.synchronize().unwrap();
    }
}

#[gpu_test]
fn two_threads_launching_and_reading_one_array_never_refuse_each_other() {
    let ctx = context();
    let k = ctx.kernel(ACCUMULATE, "main").unwrap();
    let n = 4096;
    let x = ctx.device_put(&vec![1.0f32; n], &[n]).unwrap();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut y = ctx.zeros::<f32>(&[n]).unwrap();
            for _ in 0..200 {
                ctx.launch(&k)
                    .arg(&x)
                    .arg_mut(&mut y)
                    .grid_for(n as u64)
                    .run()
                    .expect("a launch is never refused for another thread's single op");
            }
            assert_eq!(ctx.device_get(&y).unwrap(), vec![200.0; n]);
        });
        scope.spawn(|| {
            for i in 0..200 {
                match i % 3 {
                    0 => assert_eq!(ctx.device_get(&x).expect("device_get"), vec![1.0; n]),
                    1 => assert_eq!(ctx.copy(&x).expect("copy").to_vec().unwrap(), vec![1.0; n]),
                    _ => assert_eq!(
                        ctx.dynamic_slice(&x, &[17], &[100])
                            .expect("dynamic_slice")
                            .to_vec()
                            .unwrap(),
                        vec![1.0; 100]
                    ),
                }
            }
        });
    });
}

#[gpu_test]
fn a_launch_refused_for_a_foreign_second_argument_marks_nothing() {
    let ctx = context();
    let other = context();
    let k = ctx.kernel(ACCUMULATE, "main").unwrap();
    let x = ctx.device_put(&[1.0f32; 8], &[8]).unwrap();
    let mut foreign = other.device_put(&[2.0f32; 8], &[8]).unwrap();
    let mut s = ctx.sequence();
    let refused = s
        .launch(&k)
        .arg(&x)
        .arg_mut(&mut foreign)
        .grid_for(8)
        .run()
        .unwrap_err();
    assert!(matches!(refused, Error::ForeignArray { .. }), "{refused}");
    assert!(s.is_empty(), "nothing recorded");
    // x was not marked pending by the refused launch.
    assert_eq!(ctx.device_get(&x).unwrap(), [1.0; 8]);
    let refused = ctx
        .launch(&k)
        .arg(&x)
        .arg_mut(&mut foreign)
        .grid_for(8)
        .run()
        .unwrap_err();
    assert!(matches!(refused, Error::ForeignArray { .. }), "{refused}");
    assert_eq!(ctx.device_get(&x).unwrap(), [1.0; 8]);
    drop(s);
}

#[gpu_test]
fn a_single_launch_refused_for_a_pending_second_argument_marks_nothing() {
    let ctx = context();
    let k = ctx.kernel(ACCUMULATE, "main").unwrap();
    let x = ctx.device_put(&[1.0f32; 8], &[8]).unwrap();
    let mut s = ctx.sequence();
    let mut pending = s.put(&[2.0f32; 8], &[8]).unwrap();
    let refused = ctx
        .launch(&k)
        .arg(&x)
        .arg_mut(&mut pending)
        .grid_for(8)
        .run()
        .unwrap_err();
    assert_names_the_pending_sequence(&refused, "launch");
    assert_eq!(ctx.device_get(&x).unwrap(), [1.0; 8]);
    s.submit().unwrap();
    assert_eq!(ctx.device_get(&pending).unwrap(), [2.0; 8]);
}

#[gpu_test]
fn a_sequence_over_4096_dispatches_whose_last_piece_is_refused_ran_nothing() {
    // One region per array (the platform allocator), so destroying one array's buffer leaves
    // the others usable.
    let ctx = context_with(ArenaConfig {
        allocator: AllocatorKind::Platform,
        ..test_config()
    });
    let add = ctx.kernel(ADD, "main").unwrap();
    let mut x = ctx.device_put(&[0u32; 64], &[64]).unwrap();
    let mut broken = ctx.device_put(&[0u32; 64], &[64]).unwrap();
    assert_ne!(x.buffer(), broken.buffer(), "one region per array");
    // The puts' writes land before the buffer is destroyed (where they go with the gathered
    // ops, a discrete GPU or GL, they would otherwise meet the destroyed buffer).
    ctx.synchronize().unwrap();
    let mut s = ctx.sequence();
    for _ in 0..4096 {
        s.launch(&add)
            .arg_mut(&mut x)
            .params(&1u32)
            .grid_for(64)
            .run()
            .unwrap();
    }
    // The 4097th dispatch, in the second piece, binds a buffer the device will refuse.
    s.launch(&add)
        .arg_mut(&mut broken)
        .params(&1u32)
        .grid_for(64)
        .run()
        .unwrap();
    broken.buffer().destroy();
    let refused = s.submit().unwrap_err();
    assert!(matches!(refused, Error::Device { .. }), "{refused}");
    assert!(
        refused.to_string().contains("nothing of it was submitted"),
        "{refused}"
    );
    ctx.synchronize().unwrap();
    assert_eq!(
        ctx.device_get(&x).unwrap(),
        [0; 64],
        "the first 4096 dispatches did not run"
    );
    // The destroyed buffer is the wgpu validation error this test wanted, not a Vulkan one.
}

#[gpu_test]
fn a_sequence_over_4096_dispatches_runs_every_dispatch_in_order() {
    let ctx = context();
    let add = ctx.kernel(ADD, "main").unwrap();
    let mut x = ctx.device_put(&[0u32; 64], &[64]).unwrap();
    let mut s = ctx.sequence();
    for i in 0..5000u32 {
        // Parameters differ per dispatch: each piece must read its own.
        s.launch(&add)
            .arg_mut(&mut x)
            .params(&(i % 3))
            .grid_for(64)
            .run()
            .unwrap();
    }
    s.submit().unwrap();
    let expected: u32 = (0..5000u32).map(|i| i % 3).sum();
    assert_eq!(ctx.device_get(&x).unwrap(), [expected; 64]);
}

/// Wraps an array for `raw_submit` and, when the use is recorded, notes whether the context's
/// timeline already shows the submission (which it records once the queue has the work).
struct Probe<'a> {
    ctx: &'a Context,
    array: &'a DeviceArray<u32>,
    seen: std::sync::Mutex<Option<(SubmissionId, bool)>>,
}

impl GpuUse for Probe<'_> {
    fn record_use(&self, id: SubmissionId) {
        self.array.record_use(id);
        // Only looks: waiting for the work from here would wait for this very submission.
        let submitted = self
            .ctx
            .memory_timeline()
            .unwrap()
            .events
            .iter()
            .any(|e| matches!(e.kind, TimelineEventKind::Dispatch { submission, .. } if submission == id.0));
        *self.seen.lock().unwrap() = Some((id, submitted));
    }

    fn owning_context(&self) -> Option<Context> {
        self.array.owning_context()
    }
}

#[gpu_test]
fn raw_submit_records_its_uses_before_the_queue_gets_the_work() {
    let ctx = context_with(ArenaConfig {
        timeline_capacity: 1024,
        ..test_config()
    });
    // The source is a buffer of wgpu's own (a copy within one region buffer is refused).
    let src = ctx.device().create_buffer(&wgpu::BufferDescriptor {
        label: Some("raw_submit probe source"),
        size: 256,
        usage: wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: true,
    });
    src.slice(..)
        .get_mapped_range_mut()
        .unwrap()
        .copy_from_slice(bytemuck::cast_slice(&[7u32; 64]));
    src.unmap();
    let dst = ctx.device_put(&[0u32; 64], &[64]).unwrap();
    let mut encoder = ctx.device().create_command_encoder(&Default::default());
    encoder.copy_buffer_to_buffer(&src, 0, dst.buffer(), dst.byte_offset(), 256);
    let probe = Probe {
        ctx: &ctx,
        array: &dst,
        seen: Default::default(),
    };
    let id = ctx.raw_submit([encoder.finish()], &[&probe]).unwrap();
    let (recorded, submitted_before) = probe.seen.lock().unwrap().take().unwrap();
    assert_eq!(recorded, id);
    assert!(
        !submitted_before,
        "the use was recorded before the queue got the work"
    );
    assert!(
        ctx.memory_timeline()
            .unwrap()
            .events
            .iter()
            .any(|e| matches!(e.kind, TimelineEventKind::Dispatch { submission, .. } if submission == id.0)),
        "the timeline shows the submission afterwards"
    );
    assert_eq!(
        dst.last_use(),
        id,
        "the array is in flight until the work completes"
    );
    // Another thread's read waits for the work.
    let read = std::thread::scope(|scope| scope.spawn(|| ctx.device_get(&dst).unwrap()).join());
    assert_eq!(read.unwrap(), [7; 64]);
}

#[gpu_test]
fn a_sequence_of_many_puts_gives_its_extra_staging_buffers_back() {
    let ctx = context_with(ArenaConfig {
        zero_copy: false,
        staging_bytes: 1 << 20,
        ..test_config()
    });
    if !ctx.is_vulkan() {
        crate::harness::skip(crate::harness::Need::Vulkan);
        return;
    }
    let rows: Vec<Vec<u8>> = (0..24u8).map(|i| vec![i; 600 << 10]).collect();
    let mut s = ctx.sequence();
    let arrays: Vec<DeviceArray<u8>> = rows
        .iter()
        .map(|row| s.put(row, &[row.len()]).unwrap())
        .collect();
    assert!(
        ctx.staging_buffers_created().0 >= 24,
        "one staging buffer per put while recorded: {:?}",
        ctx.staging_buffers_created()
    );
    s.submit().unwrap();
    ctx.synchronize().unwrap();
    let (up, _) = ctx.staging_buffers_created();
    assert!(up <= 3, "the pool is back to its 3 buffers, holds {up}");
    for (array, row) in arrays.iter().zip(&rows) {
        assert!(ctx.device_get(array).unwrap() == *row);
    }
    // A dropped sequence gives them back too.
    let mut s = ctx.sequence();
    let _more: Vec<DeviceArray<u8>> = rows
        .iter()
        .map(|row| s.put(row, &[row.len()]).unwrap())
        .collect();
    drop(s);
    assert!(ctx.staging_buffers_created().0 <= 3);
}

/// A recorded op of no bytes is recorded as any other, on every path and in a capture: its
/// arrays are pending by access (a written one for everyone, a read one for writers), and
/// another context's array is refused.
#[gpu_test]
fn a_recorded_op_of_no_bytes_makes_its_arrays_pending_and_refuses_a_foreign_one() {
    let other = context();
    for (path, ctx) in crate::harness::op_paths() {
        for capture in [false, true] {
            let case = format!("{path}, capture {capture}");
            let m = ctx.zeros::<f32>(&[4, 3]).unwrap();
            let (empty, source) = (
                ctx.zeros::<f32>(&[0, 3]).unwrap(),
                ctx.zeros::<f32>(&[0]).unwrap(),
            );
            let mut cap = ctx.capture();
            cap.set_mode(gpu_arena::CaptureMode::Relaxed);
            let mut sequence = ctx.sequence();
            let recorder: &mut gpu_arena::Sequence = if capture { &mut cap } else { &mut sequence };
            let m = recorder.dynamic_update_slice(m, &empty, &[0, 0]).unwrap();
            let filled = recorder
                .fill_in_place(ctx.zeros::<f32>(&[4, 0, 3]).unwrap(), 1.0)
                .unwrap();
            let copied = recorder.copy(&source).unwrap();
            let sliced = recorder.dynamic_slice(&m, &[0, 0], &[0, 3]).unwrap();
            let foreign = recorder.fill_in_place(other.zeros::<f32>(&[0]).unwrap(), 1.0);
            let refused = foreign.err().map(|donated| donated.error);
            assert!(
                matches!(refused, Some(Error::ForeignArray { .. })),
                "{case}: {refused:?}"
            );
            // Written arrays are pending for everyone, read ones for writers only.
            for (what, written) in [
                ("operand", &m),
                ("filled", &filled),
                ("copy", &copied),
                ("slice", &sliced),
            ] {
                let error = ctx.device_get(written).err();
                assert!(
                    matches!(error, Some(Error::PendingInRecorder { .. })),
                    "{case}, {what}: {error:?}"
                );
            }
            assert!(
                ctx.device_get(&source).is_ok(),
                "{case}: a read source stays readable"
            );
            let error = ctx
                .fill_in_place(source, 2.0)
                .err()
                .map(|donated| donated.error);
            assert!(
                matches!(error, Some(Error::PendingInRecorder { .. })),
                "{case}: {error:?}"
            );
        }
    }
}

/// Two threads on one array written by a recorded op of no bytes: while the sequence is open
/// the other thread's reads of the array are refused as pending, and once it is submitted they
/// see the array as it was (an empty update changes no element).
#[gpu_test]
fn another_thread_waits_out_a_recorded_op_of_no_bytes_on_the_array_it_reads() {
    for (path, ctx) in crate::harness::op_paths() {
        let values: Vec<f32> = (0..12).map(|i| i as f32).collect();
        let m = ctx.device_put(&values, &[4, 3]).unwrap();
        let empty = ctx.zeros::<f32>(&[0, 3]).unwrap();
        let mut sequence = ctx.sequence();
        let m = sequence.dynamic_update_slice(m, &empty, &[0, 0]).unwrap();
        let (refused, seen) = std::sync::mpsc::channel();
        std::thread::scope(|scope| {
            let reader = scope.spawn(|| {
                let mut refusals = 0;
                loop {
                    match ctx.device_get(&m) {
                        Ok(back) => return (refusals, back),
                        Err(Error::PendingInRecorder { .. }) => {
                            refusals += 1;
                            let _ = refused.send(());
                            std::thread::yield_now();
                        }
                        Err(other) => panic!("{path}: {other}"),
                    }
                }
            });
            seen.recv_timeout(std::time::Duration::from_secs(60))
                .expect("the reader was refused while the op was recorded");
            sequence.submit().unwrap();
            let (refusals, back) = reader.join().unwrap();
            assert!(refusals >= 1, "{path}");
            assert_eq!(back, values, "{path}: the empty update changed an element");
        });
    }
}
