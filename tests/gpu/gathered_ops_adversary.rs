//! The gathered single ops (the recording model in `gpu_arena::kernels`, "Gathered single
//! ops"), attacked: memory dropped and reused while ops on it are gathered (growing arenas, OOM
//! retries, `release_free_regions`, `zeros` writing host memory at once), transfers between two
//! contexts, user sequences recorded around gathered ops (host-path steps, `put`), library ops
//! of several dispatches with parameter blocks, views and bitcasts, several threads on one
//! array, long loops without a wait, and a context dropped with ops still gathered. Every
//! result is checked against a host model with ops that do not commute (`a = a * mul + add`,
//! overlapping updates), so work run in the wrong order, or on reused memory, gives a wrong
//! number.

use crate::harness;
use crate::harness::ordering::{affine, double_add, params, run_affine, AFFINE, DOUBLE_ADD};
use crate::harness::{context_with, test_config};
use gpu_arena::kernels::MAX_GATHERED_OPS;
use gpu_arena::{ArenaConfig, Context, DeviceArray, Kernel};
use std::sync::Mutex;

/// The paths of `harness::op_paths`, zero-copy on memory treated as non-coherent (flushes and
/// invalidations around every host access), and a growing arena (regions made and released
/// as arrays come and go, none reserved up front).
fn paths() -> Vec<(&'static str, Context)> {
    let mut paths = harness::op_paths();
    paths.push((
        "non-coherent zero-copy",
        context_with(ArenaConfig {
            force_non_coherent: true,
            ..test_config()
        }),
    ));
    paths.push((
        "growing arena",
        context_with(ArenaConfig {
            preallocate: false,
            ..test_config()
        }),
    ));
    paths
}

/// The `i`-th temporary's contents: different for every `i` and every element.
fn temporary(i: u32, n: usize) -> Vec<u32> {
    (0..n as u32)
        .map(|e| e.wrapping_mul(31).wrapping_add(i.wrapping_mul(1009)) ^ 0x3C3C)
        .collect()
}

#[gpu_test]
fn temporaries_dropped_while_gathered_ops_read_them_are_not_overwritten_by_later_zeros_or_puts() {
    for (path, ctx) in paths() {
        let k = ctx.kernel(DOUBLE_ADD, "main").unwrap();
        let n = 4096;
        let mut y = ctx.zeros::<u32>(&[n]).unwrap();
        let mut want = vec![0u32; n];
        for i in 0..(3 * MAX_GATHERED_OPS as u32 + 5) {
            // On UMA both write host memory at once: the memory of the temporaries dropped
            // above must not be theirs before the launches that read it ran.
            let t = ctx.device_put(&temporary(i, n), &[n]).unwrap();
            double_add(&ctx, &k, &t, &mut y);
            drop(t);
            let z = ctx.zeros::<u32>(&[n]).unwrap();
            double_add(&ctx, &k, &z, &mut y);
            for (w, v) in want.iter_mut().zip(temporary(i, n)) {
                *w = w.wrapping_mul(2).wrapping_add(v).wrapping_mul(2);
            }
        }
        assert_eq!(ctx.device_get(&y).unwrap(), want, "{path}");
    }
}

/// A context whose arena holds about `temporaries` arrays of `bytes` (plus one more for the
/// accumulator), growing or preallocated.
fn small_arena(preallocate: bool, bytes: u64, temporaries: u64) -> Context {
    let probe = context_with(test_config());
    let heap = probe.memory_plan().heap_bytes;
    drop(probe);
    let fraction = ((temporaries + 1) * bytes) as f64 / heap as f64;
    context_with(ArenaConfig {
        preallocate,
        mem_fraction: gpu_arena::MemFraction::fixed(fraction),
        ..test_config()
    })
}

#[gpu_test]
fn an_arena_that_holds_a_few_temporaries_runs_a_long_loop_of_gathered_ops_on_new_ones() {
    // Out-of-memory with memory pending behind gathered ops must submit them, wait and retry:
    // never refuse a program that fits when run in order.
    let n = 256 << 10; // 1 MiB of u32
    for preallocate in [true, false] {
        let ctx = small_arena(preallocate, 4 * n as u64, 4);
        let k = ctx.kernel(DOUBLE_ADD, "main").unwrap();
        let mut y = ctx.zeros::<u32>(&[n]).unwrap();
        let mut want = vec![0u32; n];
        for i in 0..(2 * MAX_GATHERED_OPS as u32) {
            let t = ctx
                .device_put(&temporary(i, n), &[n])
                .unwrap_or_else(|e| panic!("preallocate {preallocate}, temporary {i}: {e}"));
            double_add(&ctx, &k, &t, &mut y);
            for (w, v) in want.iter_mut().zip(temporary(i, n)) {
                *w = w.wrapping_mul(2).wrapping_add(v);
            }
        }
        assert_eq!(
            ctx.device_get(&y).unwrap(),
            want,
            "preallocate {preallocate}"
        );
        drop(y);
        ctx.synchronize().unwrap();
        assert_eq!(ctx.memory_stats().bytes_in_use, 0);
    }
}

#[gpu_test]
fn releasing_free_regions_keeps_the_region_of_a_dropped_array_that_gathered_ops_still_read() {
    let ctx = context_with(ArenaConfig {
        preallocate: false,
        ..test_config()
    });
    let k = ctx.kernel(DOUBLE_ADD, "main").unwrap();
    let n = 1 << 20;
    let mut y = ctx.zeros::<u32>(&[n]).unwrap();
    ctx.synchronize().unwrap();
    let mut want = vec![0u32; n];
    for i in 0..3 {
        // Large enough for a region of its own in a growing arena.
        let big = 16 << 20;
        let t = ctx.device_put(&temporary(i, big), &[big]).unwrap();
        ctx.launch(&k)
            .arg(&t)
            .arg_mut(&mut y)
            .grid_for(n as u64)
            .run()
            .unwrap();
        drop(t);
        // The region's only chunk is pending behind the gathered launch: it must stay.
        ctx.release_free_regions();
        for (w, v) in want.iter_mut().zip(temporary(i, big)) {
            *w = w.wrapping_mul(2).wrapping_add(v);
        }
    }
    assert_eq!(ctx.device_get(&y).unwrap(), want);
    ctx.synchronize().unwrap();
    ctx.release_free_regions();
}

/// A second context on the same adapter as `ctx`, with `ctx`'s way of reaching memory.
fn second_context(zero_copy: bool) -> (Context, Context) {
    let config = ArenaConfig {
        zero_copy,
        ..test_config()
    };
    (context_with(config.clone()), context_with(config))
}

#[gpu_test]
fn a_copy_to_another_context_sees_the_gathered_ops_called_before_it_and_none_after() {
    for zero_copy in [true, false] {
        let (a, b) = second_context(zero_copy);
        let k = a.kernel(AFFINE, "main").unwrap();
        let n = 3000;
        let mut x = a.device_put(&vec![7u32; n], &[n]).unwrap();
        let mut want = 7u32;
        for i in 0..5 {
            run_affine(&a, &k, &mut x, params(i));
            want = affine(want, params(i));
        }
        let on_b = b.device_put_from(&x).unwrap();
        let back = x.copy_to(&b).unwrap();
        // Gathered after the copies: they must not see it.
        run_affine(&a, &k, &mut x, params(99));
        assert_eq!(
            b.device_get(&on_b).unwrap(),
            vec![want; n],
            "zero-copy {zero_copy}"
        );
        assert_eq!(
            b.device_get(&back).unwrap(),
            vec![want; n],
            "zero-copy {zero_copy}"
        );
        // And the other way: gathered ops of b on its copy, read back on a.
        let kb = b.kernel(AFFINE, "main").unwrap();
        let mut on_b = on_b;
        run_affine(&b, &kb, &mut on_b, params(5));
        let home = a.device_put_from(&on_b).unwrap();
        assert_eq!(
            a.device_get(&home).unwrap(),
            vec![affine(want, params(5)); n],
            "zero-copy {zero_copy}"
        );
        assert_eq!(
            a.device_get(&x).unwrap(),
            vec![affine(want, params(99)); n],
            "zero-copy {zero_copy}"
        );
    }
}

#[gpu_test]
fn a_sequence_recorded_around_gathered_ops_runs_after_those_called_before_its_submit() {
    for (path, ctx) in paths() {
        let k = ctx.kernel(AFFINE, "main").unwrap();
        let acc = ctx.kernel(DOUBLE_ADD, "main").unwrap();
        let n = 700;
        let mut x = ctx.device_put(&vec![2u32; n], &[n]).unwrap();
        let mut s = ctx.sequence();
        // Put into the sequence before the gathered launch, read after it.
        let u: Vec<u32> = (0..n as u32).collect();
        let put = s.put(&u, &[n]).unwrap();
        run_affine(&ctx, &k, &mut x, params(3));
        s.launch(&acc)
            .arg(&put)
            .arg_mut(&mut x)
            .grid_for(n as u64)
            .run()
            .unwrap();
        s.submit().unwrap();
        let want: Vec<u32> = u
            .iter()
            .map(|&v| affine(2, params(3)).wrapping_mul(2).wrapping_add(v))
            .collect();
        assert_eq!(ctx.device_get(&x).unwrap(), want, "{path}");
    }
}

#[gpu_test]
fn a_host_path_step_of_a_sequence_runs_after_the_gathered_launch_on_its_array() {
    for (path, ctx) in paths() {
        let k = ctx.kernel(AFFINE, "main").unwrap();
        let n = 512;
        let mut x = ctx.device_put(&vec![9u32; n], &[n]).unwrap();
        run_affine(&ctx, &k, &mut x, params(4));
        // On lavapipe's zero-copy path this runs now, on the host: after the launch.
        let mut s = ctx.sequence();
        let row: Vec<u32> = (100..164).collect();
        let x = s
            .dynamic_update_slice(x, &row[..], &[10])
            .map_err(|d| d.error)
            .unwrap();
        let x = s.fill_in_place(x, 1u32).map_err(|d| d.error).unwrap();
        s.submit().unwrap();
        assert_eq!(ctx.device_get(&x).unwrap(), vec![1u32; n], "{path}");
        // Now without the fill: the update lands on the launch's result.
        let mut y = ctx.device_put(&vec![9u32; n], &[n]).unwrap();
        run_affine(&ctx, &k, &mut y, params(4));
        let mut s = ctx.sequence();
        let y = s
            .dynamic_update_slice(y, &row[..], &[10])
            .map_err(|d| d.error)
            .unwrap();
        s.submit().unwrap();
        let mut want = vec![affine(9, params(4)); n];
        want[10..74].copy_from_slice(&row);
        assert_eq!(ctx.device_get(&y).unwrap(), want, "{path}");
    }
}

#[gpu_test]
fn overlapping_updates_of_bytes_by_library_ops_of_several_dispatches_land_in_call_order() {
    for (path, ctx) in paths() {
        let n = 4099;
        let mut host: Vec<u8> = (0..n).map(|i| (i * 7 % 251) as u8).collect();
        let mut x = ctx.device_put(&host, &[n]).unwrap();
        for i in 0..(2 * MAX_GATHERED_OPS + 7) {
            // Odd starts and lengths: byte updates that do not start or end on a word.
            let len = 1 + (i * 37) % 301;
            let start = (i * 113) % (n - len);
            let update: Vec<u8> = (0..len).map(|e| (i * 3 + e) as u8 ^ 0xA5).collect();
            let on_device = ctx.device_put(&update, &[len]).unwrap();
            x = ctx
                .dynamic_update_slice(x, &on_device, &[start as i64])
                .map_err(|d| d.error)
                .unwrap();
            host[start..start + len].copy_from_slice(&update);
            if i % 17 == 0 {
                let copy = ctx
                    .dynamic_update_slice_copy(&x, &update[..1], &[0])
                    .unwrap();
                let mut with = host.clone();
                with[0] = update[0];
                assert_eq!(ctx.device_get(&copy).unwrap(), with, "{path}, op {i}");
            }
        }
        assert_eq!(ctx.device_get(&x).unwrap(), host, "{path}");
    }
}

#[gpu_test]
fn views_and_bitcasts_read_after_gathered_launches_see_them() {
    for (path, ctx) in paths() {
        let k = ctx.kernel(AFFINE, "main").unwrap();
        let mut x = ctx.device_put(&vec![4u32; 12 * 10], &[12, 10]).unwrap();
        run_affine(&ctx, &k, &mut x, params(8));
        let want = affine(4, params(8));
        let mut row = vec![0u32; 10];
        ctx.device_get_into(x.view(&[7]).unwrap(), &mut row)
            .unwrap();
        assert_eq!(row, vec![want; 10], "{path}");
        run_affine(&ctx, &k, &mut x, params(9));
        let signed = x.bitcast::<i32>().map_err(|d| d.error).unwrap();
        let want = affine(want, params(9));
        assert_eq!(
            ctx.device_get(&signed).unwrap(),
            vec![want as i32; 120],
            "{path}"
        );
    }
}

#[gpu_test]
fn four_threads_sharing_one_array_see_every_gathered_op_of_the_others() {
    for (path, ctx) in paths() {
        let k = ctx.kernel(AFFINE, "main").unwrap();
        let n = 640;
        let shared = Mutex::new((ctx.device_put(&vec![1u32; n], &[n]).unwrap(), 1u32));
        std::thread::scope(|scope| {
            for thread in 0..4u32 {
                let (ctx, k, shared) = (&ctx, &k, &shared);
                scope.spawn(move || {
                    for i in 0..60u32 {
                        let mut guard = shared.lock().unwrap();
                        let (array, want) = &mut *guard;
                        let p = params(i * 4 + thread);
                        run_affine(ctx, k, array, p);
                        *want = affine(*want, p);
                        let want = *want;
                        match (i + thread) % 5 {
                            0 => assert_eq!(ctx.device_get(array).unwrap(), vec![want; n]),
                            1 => {
                                let copy = ctx.copy(array).unwrap();
                                drop(guard);
                                assert_eq!(ctx.device_get(&copy).unwrap(), vec![want; n]);
                            }
                            2 => {
                                let slice = ctx.dynamic_slice(array, &[i as i64], &[5]).unwrap();
                                drop(guard);
                                assert_eq!(ctx.device_get(&slice).unwrap(), vec![want; 5]);
                            }
                            3 => {
                                drop(guard);
                                ctx.flush().unwrap();
                            }
                            _ => {}
                        }
                    }
                });
            }
        });
        let (array, want) = shared.into_inner().unwrap();
        assert_eq!(ctx.device_get(&array).unwrap(), vec![want; n], "{path}");
    }
}

#[gpu_test]
fn ten_thousand_launches_without_a_wait_keep_memory_and_give_the_right_result() {
    let ctx = context_with(test_config());
    let k = ctx.kernel(AFFINE, "main").unwrap();
    let mut a = ctx.device_put(&[1u32; 64], &[64]).unwrap();
    ctx.synchronize().unwrap();
    let before = ctx.memory_stats();
    let mut want = 1u32;
    for i in 0..10_000u32 {
        run_affine(&ctx, &k, &mut a, params(i));
        want = affine(want, params(i));
    }
    assert_eq!(ctx.memory_stats().bytes_in_use, before.bytes_in_use);
    assert_eq!(ctx.memory_stats().bytes_reserved, before.bytes_reserved);
    assert_eq!(ctx.device_get(&a).unwrap(), vec![want; 64]);
}

#[gpu_test]
fn a_context_dropped_with_gathered_ops_submits_them_and_reads_nothing_stale() {
    for (path, ctx) in paths() {
        let k = ctx.kernel(AFFINE, "main").unwrap();
        let mut a = ctx.device_put(&[5u32; 64], &[64]).unwrap();
        for i in 0..5 {
            run_affine(&ctx, &k, &mut a, params(i));
        }
        // The last handle to the context goes with the array, ops still gathered.
        drop(k);
        drop(ctx);
        drop(a);
        let _ = path;
    }
}

/// The peak bytes a growing arena reserves for a loop of 96 temporaries of 8 MiB, each read by
/// a gathered launch and dropped; with `flush_each` every op is submitted at once (what single
/// ops did before they were gathered).
fn growing_arena_peak(flush_each: bool) -> u64 {
    let ctx = context_with(ArenaConfig {
        preallocate: false,
        mem_fraction: gpu_arena::MemFraction::fixed(0.5),
        ..test_config()
    });
    let k = ctx.kernel(DOUBLE_ADD, "main").unwrap();
    let n = 2 << 20;
    let mut y = ctx.zeros::<u32>(&[n]).unwrap();
    let mut want = vec![0u32; n];
    for i in 0..96 {
        let t = ctx.device_put(&temporary(i, n), &[n]).unwrap();
        double_add(&ctx, &k, &t, &mut y);
        drop(t);
        if flush_each {
            ctx.flush().unwrap();
        }
        for (w, v) in want.iter_mut().zip(temporary(i, n)) {
            *w = w.wrapping_mul(2).wrapping_add(v);
        }
    }
    assert_eq!(ctx.device_get(&y).unwrap(), want, "flush each {flush_each}");
    ctx.memory_stats().peak_bytes_reserved
}

#[gpu_test]
fn a_growing_arena_reclaims_temporaries_of_gathered_ops_as_if_each_op_were_submitted() {
    // Before: memory freed behind the gathered batch could not come back until the batch was
    // submitted, so the arena grew to its limit (1024 MiB on lavapipe) where submitting each
    // op kept it at 128 MiB.
    let gathered = growing_arena_peak(false);
    let flushed = growing_arena_peak(true);
    println!(
        "peak reserved: gathered {} MiB, each op flushed {} MiB",
        gathered >> 20,
        flushed >> 20
    );
    assert!(
        gathered <= 2 * flushed,
        "gathered {} MiB, each op flushed {} MiB",
        gathered >> 20,
        flushed >> 20
    );
}

/// 64 overlapping updates of `x` from host rows, applied to the host model too.
fn host_row_updates(ctx: &Context, mut x: DeviceArray<u32>, host: &mut [u32]) -> DeviceArray<u32> {
    for i in 0..64u32 {
        let len = 5 + (i as usize * 7) % 40;
        let start = (i as usize * 53) % (host.len() - len);
        let row: Vec<u32> = (0..len as u32).map(|e| i * 1000 + e).collect();
        x = ctx
            .dynamic_update_slice(x, &row[..], &[start as i64])
            .map_err(|d| d.error)
            .unwrap();
        host[start..start + len].copy_from_slice(&row);
    }
    x
}

#[gpu_test]
fn host_rows_written_by_single_ops_land_in_call_order_on_every_path() {
    for (path, ctx) in paths() {
        let n = 4096;
        let mut host: Vec<u32> = (0..n as u32).collect();
        let x = ctx.device_put(&host, &[n]).unwrap();
        let x = host_row_updates(&ctx, x, &mut host);
        assert_eq!(ctx.device_get(&x).unwrap(), host, "{path}");
    }
}

#[gpu_test]
fn single_ops_with_host_operands_on_the_staging_path_are_gathered_like_other_ops() {
    let ctx = context_with(ArenaConfig {
        zero_copy: false,
        ..test_config()
    });
    let n = 4096;
    let mut host: Vec<u32> = (0..n as u32).collect();
    let x = ctx.device_put(&host, &[n]).unwrap();
    ctx.synchronize().unwrap();
    let (made, x) = harness::submissions_made(&ctx, || host_row_updates(&ctx, x, &mut host));
    assert_eq!(ctx.device_get(&x).unwrap(), host);
    assert!(
        made <= 3,
        "64 single ops with host rows made {made} submissions"
    );
}

#[gpu_test]
fn launches_whose_parameter_blocks_are_off_the_slot_alignment_still_go_out_32_at_a_time() {
    // A 272-byte block takes a 288-byte slot where the alignment is 32 (512 where it is 256):
    // the batch's parameter buffer was sized for 32 blocks, not 32 slots, so batches were cut
    // at 30 ops (16 at an alignment of 256) and 64 launches made 3 submissions.
    for (path, ctx) in paths() {
        let align = ctx.limits().min_uniform_buffer_offset_alignment;
        let k = ctx
            .kernel(
                r#"
            struct P { index: u32, value: u32, pad: vec2<u32>, check: array<vec4<u32>, 16> }
            @group(0) @binding(0) var<uniform> p: P;
            @group(0) @binding(1) var<storage, read_write> out: array<u32>;
            @compute @workgroup_size(1)
            fn main() { out[p.index] = p.value * 5u + p.check[15].x; }"#,
                "main",
            )
            .unwrap();
        let mut out = ctx.zeros::<u32>(&[64]).unwrap();
        ctx.synchronize().unwrap();
        let (made, ()) = harness::submissions_made(&ctx, || {
            for i in 0..64u32 {
                let mut p = [0u32; 4 + 64];
                p[0] = i;
                p[1] = i * 3;
                p[4 + 60] = i ^ 0x55;
                ctx.launch(&k)
                    .params(&p)
                    .arg_mut(&mut out)
                    .grid([1, 1, 1])
                    .run()
                    .unwrap();
            }
        });
        let want: Vec<u32> = (0..64).map(|i| i * 15 + (i ^ 0x55)).collect();
        assert_eq!(ctx.device_get(&out).unwrap(), want, "{path}");
        assert_eq!(
            made, 2,
            "{path}: alignment {align}, 64 launches of 272-byte blocks made {made} submissions"
        );
    }
}

#[gpu_test]
fn two_threads_in_an_arena_that_holds_a_few_temporaries_never_see_a_spurious_out_of_memory() {
    let n = 256 << 10; // 1 MiB of u32
    for preallocate in [true, false] {
        let ctx = small_arena(preallocate, 4 * n as u64, 6);
        let k = ctx.kernel(DOUBLE_ADD, "main").unwrap();
        std::thread::scope(|scope| {
            for thread in 0..2u32 {
                let (ctx, k) = (&ctx, &k);
                scope.spawn(move || {
                    let mut y = ctx.zeros::<u32>(&[n]).unwrap();
                    let mut want = vec![0u32; n];
                    for i in 0..40u32 {
                        let values = temporary(i * 2 + thread, n);
                        let t = ctx.device_put(&values, &[n]).unwrap_or_else(|e| {
                            panic!("preallocate {preallocate}, thread {thread}, temporary {i}: {e}")
                        });
                        double_add(ctx, k, &t, &mut y);
                        for (w, v) in want.iter_mut().zip(values) {
                            *w = w.wrapping_mul(2).wrapping_add(v);
                        }
                    }
                    assert_eq!(ctx.device_get(&y).unwrap(), want, "thread {thread}");
                });
            }
        });
    }
}

#[gpu_test]
fn an_allocation_too_large_for_the_arena_is_refused_and_leaves_the_gathered_ops_to_run() {
    let n = 256 << 10;
    let ctx = small_arena(true, 4 * n as u64, 2);
    let k = ctx.kernel(AFFINE, "main").unwrap();
    let mut a = ctx.device_put(&vec![3u32; n], &[n]).unwrap();
    let mut want = 3u32;
    for i in 0..5 {
        run_affine(&ctx, &k, &mut a, params(i));
        want = affine(want, params(i));
    }
    let message = ctx.zeros::<u32>(&[8 * n]).unwrap_err().to_string();
    assert!(message.contains("out of memory"), "{message}");
    // A launch refused by its own checks in the middle of the batch changes nothing either.
    let refused = ctx
        .launch(&k)
        .params(&[1u32, 2, 3])
        .arg_mut(&mut a)
        .grid_for(n as u64)
        .run();
    assert!(refused.is_err());
    for i in 5..9 {
        run_affine(&ctx, &k, &mut a, params(i));
        want = affine(want, params(i));
    }
    ctx.flush().unwrap();
    assert_eq!(ctx.device_get(&a).unwrap(), vec![want; n]);
}

/// One thread's arrays and their host model, for the random test below.
struct Slot {
    array: DeviceArray<u32>,
    model: Vec<u32>,
}

/// One random single op, recorded op or check on `slots` (the thread's own arrays), with
/// `shared` read by launches of every thread.
fn random_step(
    ctx: &Context,
    kernels: (&Kernel, &Kernel),
    shared: (&DeviceArray<u32>, &[u32]),
    slots: &mut Vec<Slot>,
    rng: &mut harness::Rng,
    n: usize,
) {
    let (k, acc) = kernels;
    let i = rng.below(slots.len() as u64) as usize;
    let tag = rng.next_u64() as u32;
    match rng.below(11) {
        0 | 1 => {
            let p = params(tag);
            run_affine(ctx, k, &mut slots[i].array, p);
            slots[i].model.iter_mut().for_each(|v| *v = affine(*v, p));
        }
        2 => {
            double_add(ctx, acc, shared.0, &mut slots[i].array);
            let model = &mut slots[i].model;
            for (v, s) in model.iter_mut().zip(shared.1) {
                *v = v.wrapping_mul(2).wrapping_add(*s);
            }
        }
        3 => {
            let copy = ctx.copy(&slots[i].array).unwrap();
            let model = slots[i].model.clone();
            slots.push(Slot { array: copy, model });
        }
        4 => {
            let len = 1 + rng.below(n as u64 / 2) as usize;
            let start = rng.below((n - len) as u64) as usize;
            let slice = ctx
                .dynamic_slice(&slots[i].array, &[start as i64], &[len])
                .unwrap();
            let want = slots[i].model[start..start + len].to_vec();
            assert_eq!(ctx.device_get(&slice).unwrap(), want, "slice");
        }
        5 => {
            let len = 1 + rng.below(n as u64 / 3) as usize;
            let start = rng.below((n - len) as u64) as usize;
            let row: Vec<u32> = (0..len as u32).map(|e| tag ^ e).collect();
            let slot = &mut slots[i];
            let array = std::mem::replace(&mut slot.array, ctx.zeros::<u32>(&[1]).unwrap());
            slot.array = if tag.is_multiple_of(2) {
                ctx.dynamic_update_slice(array, &row[..], &[start as i64])
            } else {
                let update = ctx.device_put(&row, &[len]).unwrap();
                ctx.dynamic_update_slice(array, &update, &[start as i64])
            }
            .map_err(|d| d.error)
            .unwrap();
            slot.model[start..start + len].copy_from_slice(&row);
        }
        6 => {
            let slot = &mut slots[i];
            let array = std::mem::replace(&mut slot.array, ctx.zeros::<u32>(&[1]).unwrap());
            slot.array = ctx.fill_in_place(array, tag).map_err(|d| d.error).unwrap();
            slot.model.iter_mut().for_each(|v| *v = tag);
        }
        7 => {
            // A user sequence of a few steps, some on arrays gathered ops just used.
            let mut s = ctx.sequence();
            let p = params(tag);
            let slot = &mut slots[i];
            s.launch(k)
                .params(&p)
                .arg_mut(&mut slot.array)
                .grid_for(n as u64)
                .run()
                .unwrap();
            let row = [tag, tag ^ 1, tag ^ 2];
            let array = std::mem::replace(&mut slot.array, ctx.zeros::<u32>(&[1]).unwrap());
            slot.array = s
                .dynamic_update_slice(array, &row[..], &[(tag % 50) as i64])
                .map_err(|d| d.error)
                .unwrap();
            s.submit().unwrap();
            slot.model.iter_mut().for_each(|v| *v = affine(*v, p));
            let at = (tag % 50) as usize;
            slot.model[at..at + 3].copy_from_slice(&row);
        }
        8 if slots.len() > 1 => {
            slots.swap_remove(i);
        }
        8 => {
            let zeros = ctx.zeros::<u32>(&[n]).unwrap();
            slots.push(Slot {
                array: zeros,
                model: vec![0; n],
            });
        }
        9 => ctx.flush().unwrap(),
        _ => assert_eq!(
            ctx.device_get(&slots[i].array).unwrap(),
            slots[i].model,
            "read"
        ),
    }
}

#[gpu_test]
fn three_threads_of_random_single_ops_sequences_and_drops_match_the_host_model() {
    for (path, ctx) in paths() {
        let k = ctx.kernel(AFFINE, "main").unwrap();
        let acc = ctx.kernel(DOUBLE_ADD, "main").unwrap();
        let n = 300;
        let shared_model: Vec<u32> = (0..n as u32).map(|e| e * 17 + 3).collect();
        let shared = ctx.device_put(&shared_model, &[n]).unwrap();
        std::thread::scope(|scope| {
            for thread in 0..3u64 {
                let (ctx, k, acc, shared, shared_model) = (&ctx, &k, &acc, &shared, &shared_model);
                scope.spawn(move || {
                    let mut rng = harness::Rng(thread * 7919 + 1);
                    let start: Vec<u32> = (0..n as u32).map(|e| e + thread as u32).collect();
                    let mut slots = vec![Slot {
                        array: ctx.device_put(&start, &[n]).unwrap(),
                        model: start,
                    }];
                    for _ in 0..800 {
                        random_step(
                            ctx,
                            (k, acc),
                            (shared, shared_model),
                            &mut slots,
                            &mut rng,
                            n,
                        );
                        slots.truncate(6);
                    }
                    for slot in &slots {
                        assert_eq!(ctx.device_get(&slot.array).unwrap(), slot.model, "{path}");
                    }
                });
            }
        });
        drop(shared);
        ctx.synchronize().unwrap();
        assert_eq!(ctx.memory_stats().bytes_in_use, 0, "{path}");
    }
}

#[gpu_test]
fn the_timeline_shows_each_gathered_launch_once_in_the_submission_it_went_out_in() {
    let ctx = context_with(ArenaConfig {
        timeline_capacity: 4096,
        ..test_config()
    });
    let k = ctx.kernel(AFFINE, "main").unwrap();
    let mut a = ctx.device_put(&[1u32; 64], &[64]).unwrap();
    let before = ctx.raw_submit(std::iter::empty(), &[]).unwrap().0;
    for i in 0..40 {
        run_affine(&ctx, &k, &mut a, params(i));
    }
    // Refused by its checks: not on the timeline.
    assert!(ctx
        .launch(&k)
        .params(&[1u32])
        .arg_mut(&mut a)
        .grid_for(64)
        .run()
        .is_err());
    let after = ctx.raw_submit(std::iter::empty(), &[]).unwrap().0;
    let submissions: Vec<u64> = ctx
        .memory_timeline()
        .unwrap()
        .events
        .iter()
        .filter_map(|e| match &e.kind {
            gpu_arena::profile::TimelineEventKind::Dispatch { name, submission }
                if name != "raw_submit" && *submission > before =>
            {
                Some(*submission)
            }
            _ => None,
        })
        .collect();
    let mut want = vec![before + 1; MAX_GATHERED_OPS];
    want.extend([before + 2; 40 - MAX_GATHERED_OPS]);
    assert_eq!(submissions, want);
    assert_eq!(after, before + 3);
}

#[gpu_test]
fn two_threads_copying_between_two_contexts_in_opposite_directions_finish_with_every_result() {
    for zero_copy in [true, false] {
        let (a, b) = second_context(zero_copy);
        let ka = a.kernel(AFFINE, "main").unwrap();
        let kb = b.kernel(AFFINE, "main").unwrap();
        let n = 2048;
        std::thread::scope(|scope| {
            for (from, to, k, seed) in [(&a, &b, &ka, 1u32), (&b, &a, &kb, 2u32)] {
                scope.spawn(move || {
                    let mut x = from.device_put(&vec![seed; n], &[n]).unwrap();
                    let mut want = seed;
                    for i in 0..40u32 {
                        let p = params(i + 100 * seed);
                        run_affine(from, k, &mut x, p);
                        want = affine(want, p);
                        if i % 3 == 0 {
                            // Read on the other context while this one has ops gathered.
                            let there = to.device_put_from(&x).unwrap();
                            assert_eq!(
                                to.device_get(&there).unwrap(),
                                vec![want; n],
                                "zero-copy {zero_copy}, seed {seed}, op {i}"
                            );
                        }
                    }
                });
            }
        });
    }
}

/// A growing arena's context, [`AFFINE`], an array `a` of 1024 ones and a zeroed array `x`
/// large enough (64 MiB) for a region of its own, so `x`'s buffer can be destroyed or misused
/// without touching `a`'s; all work on them has completed.
fn array_beside_a_region_of_its_own() -> (Context, Kernel, DeviceArray<u32>, DeviceArray<u32>) {
    let ctx = context_with(ArenaConfig {
        preallocate: false,
        ..test_config()
    });
    let k = ctx.kernel(AFFINE, "main").unwrap();
    let a = ctx.device_put(&[1u32; 1024], &[1024]).unwrap();
    let x = ctx.zeros::<u32>(&[16 << 20]).unwrap();
    assert!(a.buffer() != x.buffer(), "x needs a region of its own");
    ctx.synchronize().unwrap();
    (ctx, k, a, x)
}

#[gpu_test]
fn a_launch_on_a_destroyed_region_is_refused_by_its_own_call_and_the_batch_around_it_runs() {
    let (ctx, k, mut a, mut x) = array_beside_a_region_of_its_own();
    let n = a.len();
    run_affine(&ctx, &k, &mut a, params(1));
    x.buffer().destroy();
    let refused = ctx
        .launch(&k)
        .params(&params(2))
        .arg_mut(&mut x)
        .grid_for(64)
        .run()
        .unwrap_err()
        .to_string();
    assert!(refused.contains("recording a single op"), "{refused}");
    assert!(refused.contains("destroyed"), "{refused}");
    run_affine(&ctx, &k, &mut a, params(3));
    ctx.flush().unwrap();
    let want = affine(affine(1, params(1)), params(3));
    assert_eq!(ctx.device_get(&a).unwrap(), vec![want; n]);
}

/// Names the scenario a child process runs (see [`run_in_child`]).
const CHILD_SCENARIO: &str = "GATHERED_OPS_ADVERSARY_SCENARIO";

/// Runs `scenario` in a child process (this test binary, re-run on `test` with
/// [`CHILD_SCENARIO`] set) and checks it finished without a Vulkan validation error (`VUID-`).
/// A child, because the device's refusals these scenarios provoke are logged, and must not
/// reach the suite's own output.
///
/// Not checked: Khronos validation's "Timeout waiting for timeline semaphore state"
/// (`UNASSIGNED-VkSemaphore-state-timeout`, "most likely a validation bug", 10 s per wait). wgpu
/// numbers a submission it refuses without signalling that number; a later wait then sometimes
/// trips the layer's tracking of the skipped value, under load even after the empty submission
/// that follows every refused one (seen 1 run in 3 with two such children side by side, never
/// alone, never without the layer). The read still returns the right data.
fn run_in_child(test: &str, scenario: &str) {
    let child = harness::run_test_in_child(module_path!(), test, &[(CHILD_SCENARIO, scenario)]);
    let text = child.text;
    assert!(child.status.success(), "{text}");
    assert!(text.contains(&format!("{scenario} finished")), "{text}");
    assert!(!text.contains("VUID-"), "{text}");
}

fn refused_batch_scenario() {
    let (ctx, k, mut a, mut x) = array_beside_a_region_of_its_own();
    let n = a.len();
    run_affine(&ctx, &k, &mut a, params(1));
    ctx.launch(&k)
        .params(&params(2))
        .arg_mut(&mut x)
        .grid_for(64)
        .run()
        .unwrap();
    run_affine(&ctx, &k, &mut a, params(3));
    x.buffer().destroy();
    let refused = ctx.flush().unwrap_err().to_string();
    assert!(refused.contains("none of them ran"), "{refused}");
    ctx.flush().unwrap();
    assert_eq!(ctx.device_get(&a).unwrap(), vec![1u32; n]);
    // The context goes on: later ops run.
    run_affine(&ctx, &k, &mut a, params(4));
    assert_eq!(ctx.device_get(&a).unwrap(), vec![affine(1, params(4)); n]);
    println!("refused batch finished");
}

#[gpu_test]
fn a_batch_refused_when_submitted_is_reported_once_by_the_next_flush_and_later_reads_do_not_stall()
{
    // The reads after the refused batch wait for a submission wgpu numbered but never handed to
    // the GPU: they must end, and give the data as it was before the batch.
    match std::env::var(CHILD_SCENARIO).as_deref() {
        Ok("refused batch") => refused_batch_scenario(),
        Ok(_) => {}
        Err(_) => run_in_child(
            "a_batch_refused_when_submitted_is_reported_once_by_the_next_flush_and_later_reads_do_not_stall",
            "refused batch",
        ),
    }
}

/// `raw_submit` of a copy out of a destroyed region into `a`: refused, and `a` read after it.
fn refused_raw_submit_scenario() {
    let (ctx, k, mut a, x) = array_beside_a_region_of_its_own();
    let n = a.len();
    run_affine(&ctx, &k, &mut a, params(1));
    let mut encoder = ctx.device().create_command_encoder(&Default::default());
    encoder.copy_buffer_to_buffer(
        x.buffer(),
        x.byte_offset(),
        a.buffer(),
        a.byte_offset(),
        256,
    );
    let commands = encoder.finish();
    x.buffer().destroy();
    let refused = ctx
        .raw_submit([commands], &[&a, &x])
        .unwrap_err()
        .to_string();
    assert!(refused.contains("raw_submit"), "{refused}");
    assert!(refused.contains("destroyed"), "{refused}");
    // The gathered launch went out before the refused submission, as its own.
    assert_eq!(ctx.device_get(&a).unwrap(), vec![affine(1, params(1)); n]);
    println!("refused raw_submit finished");
}

#[gpu_test]
fn reads_after_a_refused_raw_submit_do_not_wait_for_it() {
    match std::env::var(CHILD_SCENARIO).as_deref() {
        Ok("refused raw_submit") => refused_raw_submit_scenario(),
        Ok(_) => {}
        Err(_) => run_in_child(
            "reads_after_a_refused_raw_submit_do_not_wait_for_it",
            "refused raw_submit",
        ),
    }
}

#[gpu_test]
fn immediate_and_uniform_parameters_interleaved_in_one_batch_stay_with_their_launch() {
    let ctx = context_with(test_config());
    if !ctx
        .device()
        .features()
        .contains(gpu_arena::wgpu::Features::IMMEDIATES)
    {
        harness::skip(harness::Need::Immediates);
        return;
    }
    let imm = ctx
        .kernel(
            r#"
        var<immediate> p: vec2<u32>;
        @group(0) @binding(0) var<storage, read_write> out: array<u32>;
        @compute @workgroup_size(1)
        fn main() { out[p.x] = out[p.x] * 3u + p.y; }"#,
            "main",
        )
        .unwrap();
    let k = ctx.kernel(AFFINE, "main").unwrap();
    let mut out = ctx.zeros::<u32>(&[16]).unwrap();
    let mut a = ctx.device_put(&[2u32; 16], &[16]).unwrap();
    let (mut want_out, mut want_a) = (vec![0u32; 16], 2u32);
    for i in 0..(3 * MAX_GATHERED_OPS as u32) {
        let (slot, value) = (i % 16, i * i + 1);
        ctx.launch(&imm)
            .params(&[slot, value])
            .arg_mut(&mut out)
            .grid([1, 1, 1])
            .run()
            .unwrap();
        want_out[slot as usize] = want_out[slot as usize].wrapping_mul(3).wrapping_add(value);
        if i % 3 != 0 {
            run_affine(&ctx, &k, &mut a, params(i));
            want_a = affine(want_a, params(i));
        }
    }
    assert_eq!(ctx.device_get(&out).unwrap(), want_out);
    assert_eq!(ctx.device_get(&a).unwrap(), vec![want_a; 16]);
}
