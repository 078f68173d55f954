//! Small host data gathered with the single ops (`transfer/gathered_staging.rs`): single
//! `device_put`s and single ops' host operands up to `MAX_GATHERED_UPLOAD_BYTES` are staged in
//! the batch's own staging and copied by commands of the batch, in call order with the ops
//! around them, within `GATHERED_STAGING_BYTES` per batch; host reads right after gathered
//! writes see them on every memory; host-path ops on arrays still busy on the GPU are gathered
//! instead of waiting. Ordering tests use ops that do not commute, checked against a host
//! model.

use crate::harness::ordering::{affine, double_add, params, run_affine, AFFINE, DOUBLE_ADD};
use crate::harness::{context_with, op_paths, submissions_made, test_config};
use gpu_arena::transfer::{
    GATHERED_STAGING_BUFFERS, GATHERED_STAGING_BYTES, MAX_GATHERED_UPLOAD_BYTES,
};
use gpu_arena::{ArenaConfig, Context, DeviceArray};

/// The staging path with a small `staging_bytes`: the batch's staging (16 KiB, uploads of at
/// most 4 KiB) fills after a few uploads, so the tests cross its cap many times.
fn small_staging() -> Context {
    context_with(ArenaConfig {
        zero_copy: false,
        staging_bytes: 16 << 10,
        ..test_config()
    })
}

/// Every path: zero-copy, staging, device kernels, plain wgpu (where it opens), forced
/// non-coherent memory with and without zero-copy, and staging with a small cap.
fn paths() -> Vec<(&'static str, Context)> {
    let mut paths = op_paths();
    for (name, zero_copy) in [
        ("non-coherent zero-copy", true),
        ("non-coherent staging", false),
    ] {
        paths.push((
            name,
            context_with(ArenaConfig {
                force_non_coherent: true,
                zero_copy,
                ..test_config()
            }),
        ));
    }
    paths.push(("staging, 16 KiB cap", small_staging()));
    paths
}

/// The `i`-th small host array: different for every `i` and element.
fn values(i: u32, n: usize) -> Vec<u32> {
    (0..n as u32)
        .map(|e| {
            e.wrapping_mul(2654435761)
                .wrapping_add(i.wrapping_mul(40503))
                >> 7
        })
        .collect()
}

/// `rounds` rounds of: a launch on `a`, a single `device_put` read by a launch into `a`, and
/// an update of `a` from host rows; applied to `host` too. Returns `a`.
fn interleaved(
    ctx: &Context,
    rounds: u32,
    mut a: DeviceArray<u32>,
    host: &mut [u32],
    seed: u32,
) -> DeviceArray<u32> {
    let k = ctx.kernel(AFFINE, "main").unwrap();
    let add = ctx.kernel(DOUBLE_ADD, "main").unwrap();
    let n = host.len();
    for i in 0..rounds {
        let p = params(i + seed);
        run_affine(ctx, &k, &mut a, p);
        host.iter_mut().for_each(|v| *v = affine(*v, p));
        let t = values(i + seed, n);
        let put = ctx.device_put(&t, &[n]).unwrap();
        double_add(ctx, &add, &put, &mut a);
        for (v, x) in host.iter_mut().zip(&t) {
            *v = v.wrapping_mul(2).wrapping_add(*x);
        }
        // Dropped at once: its memory must not be reused before the batch that read it ran.
        drop(put);
        let len = 3 + (i as usize * 7) % 29;
        let start = (i as usize * 53) % (n - len);
        let row = values(i * 3 + seed + 1, len);
        a = ctx
            .dynamic_update_slice(a, &row[..], &[start as i64])
            .map_err(|d| d.error)
            .unwrap();
        host[start..start + len].copy_from_slice(&row);
    }
    a
}

#[gpu_test]
fn uploads_and_host_operands_interleaved_with_launches_land_in_call_order_on_every_path() {
    for (path, ctx) in paths() {
        let n = 1000;
        let mut host = values(7, n);
        let a = ctx.device_put(&host, &[n]).unwrap();
        let a = interleaved(&ctx, 120, a, &mut host, 0);
        assert_eq!(ctx.device_get(&a).unwrap(), host, "{path}");
        drop(a);
        ctx.synchronize().unwrap();
        assert_eq!(ctx.memory_stats().bytes_in_use, 0, "{path}");
    }
}

#[gpu_test]
fn two_threads_putting_and_updating_beside_one_shared_array_see_every_result() {
    for (path, ctx) in paths() {
        let add = ctx.kernel(DOUBLE_ADD, "main").unwrap();
        let n = 512;
        let shared = ctx.device_put(&values(99, n), &[n]).unwrap();
        std::thread::scope(|scope| {
            for thread in 0..2u32 {
                let (ctx, add, shared) = (&ctx, &add, &shared);
                scope.spawn(move || {
                    let mut host = values(thread, n);
                    let a = ctx.device_put(&host, &[n]).unwrap();
                    let mut a = interleaved(ctx, 60, a, &mut host, 1000 * (thread + 1));
                    // Both threads read the shared array through gathered launches.
                    double_add(ctx, add, shared, &mut a);
                    for (v, x) in host.iter_mut().zip(values(99, n)) {
                        *v = v.wrapping_mul(2).wrapping_add(x);
                    }
                    assert_eq!(ctx.device_get(&a).unwrap(), host, "{path}");
                });
            }
        });
        assert_eq!(ctx.device_get(&shared).unwrap(), values(99, n), "{path}");
    }
}

#[gpu_test(needs = Vulkan)]
fn small_puts_in_a_loop_make_one_submission_per_full_staging_and_stay_within_its_cap() {
    let ctx = context_with(ArenaConfig {
        zero_copy: false,
        ..test_config()
    });
    assert_eq!(ctx.gathered_staging_bytes(), 0);
    let array_bytes = 4096usize;
    let per_batch = (GATHERED_STAGING_BYTES / array_bytes as u64) as usize;
    let count = 3 * per_batch + 10;
    let host: Vec<Vec<u8>> = (0..count)
        .map(|i| (0..array_bytes).map(|j| (i * 31 + j) as u8).collect())
        .collect();
    ctx.synchronize().unwrap();
    let before = ctx.memory_stats();
    let (made, arrays) = submissions_made(&ctx, || {
        host.iter()
            .map(|h| ctx.device_put(h, &[array_bytes]).unwrap())
            .collect::<Vec<_>>()
    });
    // Three full batches went out as the cap was reached; the last ten went out when the
    // count's closing submission submitted the gathered ops first.
    assert_eq!(made, 4, "{count} puts of 4 KiB made {made} submissions");
    let after = ctx.memory_stats();
    assert_eq!(
        after.bytes_in_use - before.bytes_in_use,
        (count * array_bytes) as u64,
        "the arrays, and nothing else, came from the arena"
    );
    let held = ctx.gathered_staging_bytes();
    assert!(
        held > 0 && held <= GATHERED_STAGING_BUFFERS as u64 * GATHERED_STAGING_BYTES,
        "the batches' staging holds {held} bytes"
    );
    for (i, array) in arrays.iter().enumerate().step_by(97) {
        assert_eq!(ctx.device_get(array).unwrap(), host[i], "array {i}");
    }
    assert_eq!(
        ctx.device_get(arrays.last().unwrap()).unwrap(),
        host[count - 1]
    );
}

/// Where staging is wgpu's own (GL), small puts and host operands go with the gathered ops
/// too: a loop of launches and small puts makes no submission per put, and every put lands.
#[gpu_test]
fn small_puts_on_plain_wgpu_buffers_make_no_submission_each() {
    let Some(ctx) = crate::harness::gl_context() else {
        crate::harness::skip(crate::harness::Need::GlAdapter);
        return;
    };
    let k = ctx.kernel(AFFINE, "main").unwrap();
    let add = ctx.kernel(DOUBLE_ADD, "main").unwrap();
    let n = 256;
    let mut host = values(3, n);
    let mut a = ctx.device_put(&host, &[n]).unwrap();
    ctx.synchronize().unwrap();
    let (made, puts) = submissions_made(&ctx, || {
        let mut puts = Vec::new();
        for i in 0..20 {
            let p = params(i);
            run_affine(&ctx, &k, &mut a, p);
            host.iter_mut().for_each(|v| *v = affine(*v, p));
            let t = values(100 + i, n);
            let put = ctx.device_put(&t, &[n]).unwrap();
            double_add(&ctx, &add, &put, &mut a);
            for (v, x) in host.iter_mut().zip(&t) {
                *v = v.wrapping_mul(2).wrapping_add(*x);
            }
            puts.push((put, t));
        }
        puts
    });
    // 20 launches, 20 puts and 20 more launches: within two batches of 32 ops.
    assert!(made <= 2, "{made} submissions");
    assert_eq!(ctx.device_get(&a).unwrap(), host);
    for (put, t) in &puts {
        assert_eq!(&ctx.device_get(put).unwrap(), t);
    }
    // A loop of puts alone: one submission carries them, within the batch's cap.
    let (made, arrays) = submissions_made(&ctx, || {
        (0..40u32)
            .map(|i| ctx.device_put(&values(i, n), &[n]).unwrap())
            .collect::<Vec<_>>()
    });
    assert_eq!(made, 1, "{made} submissions");
    for (i, array) in arrays.iter().enumerate() {
        assert_eq!(ctx.device_get(array).unwrap(), values(i as u32, n));
    }
}

#[gpu_test(needs = Vulkan)]
fn uploads_above_the_gathered_size_keep_their_own_submission() {
    let ctx = context_with(ArenaConfig {
        zero_copy: false,
        ..test_config()
    });
    let large = vec![5u8; MAX_GATHERED_UPLOAD_BYTES as usize + 256];
    let small = vec![6u8; MAX_GATHERED_UPLOAD_BYTES as usize];
    ctx.synchronize().unwrap();
    let (made, (a, b)) = submissions_made(&ctx, || {
        (
            ctx.device_put(&large, &[large.len()]).unwrap(),
            ctx.device_put(&small, &[small.len()]).unwrap(),
        )
    });
    // The large upload's own submission, then the batch holding the small one.
    assert_eq!(made, 2, "{made} submissions");
    assert_eq!(ctx.device_get(&a).unwrap(), large);
    assert_eq!(ctx.device_get(&b).unwrap(), small);
    assert_eq!(ctx.gathered_staging_bytes(), GATHERED_STAGING_BYTES);
}

#[gpu_test]
fn a_host_read_right_after_gathered_writes_sees_them_on_every_memory() {
    for (path, ctx) in paths() {
        let k = ctx.kernel(AFFINE, "main").unwrap();
        let n = 300;
        let mut a = ctx.device_put(&vec![2u32; n], &[n]).unwrap();
        let mut want = 2;
        for i in 0..20 {
            run_affine(&ctx, &k, &mut a, params(i));
            want = affine(want, params(i));
            if i % 3 == 0 {
                // A flush without a read: no host read waits for this submission.
                ctx.flush().unwrap();
            }
            if i % 4 == 0 {
                assert_eq!(ctx.device_get(&a).unwrap(), vec![want; n], "{path}");
                let mut out = vec![0u32; n];
                ctx.device_get_into(&a, &mut out).unwrap();
                assert_eq!(out, vec![want; n], "{path}");
            }
        }
        ctx.synchronize().unwrap();
        assert_eq!(ctx.device_get(&a).unwrap(), vec![want; n], "{path}");
    }
}

#[gpu_test(needs = HostVisibleArena)]
fn host_path_ops_on_arrays_busy_on_the_gpu_are_gathered_instead_of_waiting() {
    // lavapipe with zero-copy: a slice, copy or update of an array no GPU work uses is a host
    // memcpy; of one a gathered launch just wrote, a kernel gathered after it.
    let ctx = context_with(test_config());
    let k = ctx.kernel(AFFINE, "main").unwrap();
    let n = 256;
    let mut a = ctx.device_put(&vec![1u32; n], &[n]).unwrap();
    ctx.synchronize().unwrap();
    let rounds = 48u32;
    let (made, (slices, copies, a)) = submissions_made(&ctx, || {
        let (mut slices, mut copies) = (Vec::new(), Vec::new());
        for i in 0..rounds {
            run_affine(&ctx, &k, &mut a, params(i));
            slices.push(ctx.dynamic_slice(&a, &[i as i64], &[4]).unwrap());
            if i % 8 == 0 {
                copies.push(ctx.copy(&a).unwrap());
                a = ctx
                    .dynamic_update_slice(a, &[i; 2][..], &[0])
                    .map_err(|d| d.error)
                    .unwrap();
            }
        }
        (slices, copies, a)
    });
    // 48 launches, 48 slices, 6 copies and 6 updates: 108 ops, 4 batches of at most 32 (and
    // at most two empty submissions for host reads, when a batch completes before the op
    // after it looks: that op then copies on the host). Waiting, it was one per round.
    assert!(
        made <= 6,
        "host-path ops waited for the GPU: {made} submissions"
    );
    let mut host = vec![1u32; n];
    for i in 0..rounds {
        host.iter_mut().for_each(|v| *v = affine(*v, params(i)));
        let start = i as usize;
        assert_eq!(
            ctx.device_get(&slices[i as usize]).unwrap(),
            host[start..start + 4],
            "slice {i}"
        );
        if i % 8 == 0 {
            assert_eq!(ctx.device_get(&copies[i as usize / 8]).unwrap(), host);
            host[..2].copy_from_slice(&[i; 2]);
        }
    }
    assert_eq!(ctx.device_get(&a).unwrap(), host);
    // Once the GPU is done with an array, a host-path op submits nothing.
    ctx.synchronize().unwrap();
    let (made, slice) = submissions_made(&ctx, || ctx.dynamic_slice(&a, &[0], &[8]).unwrap());
    assert_eq!(made, 0);
    assert_eq!(ctx.device_get(&slice).unwrap(), host[..8]);
}

/// On the staging path a small put and the context's first launch with parameters go out
/// together: the batch's parameter buffer is made while no gathered op binds it. From two
/// threads, each on a context of its own and then on one shared context. (Vulkan: elsewhere
/// wgpu's own staging carries a put, in a submission of its own.)
#[gpu_test(needs = Vulkan)]
fn a_small_put_and_the_first_launch_with_parameters_make_one_submission() {
    let run = |ctx: &Context| {
        let k = ctx.kernel(AFFINE, "main").unwrap();
        let mut a = ctx.device_put(&[1u32; 64], &[64]).unwrap();
        ctx.synchronize().unwrap();
        let (made, put) = submissions_made(ctx, || {
            let put = ctx.device_put(&[5u32; 16], &[16]).unwrap();
            run_affine(ctx, &k, &mut a, params(0));
            put
        });
        assert_eq!(made, 1, "the put and the launch");
        assert_eq!(ctx.device_get(&put).unwrap(), [5; 16]);
        let want = affine(1, params(0));
        assert_eq!(ctx.device_get(&a).unwrap(), [want; 64]);
    };
    let staging = || {
        context_with(ArenaConfig {
            zero_copy: false,
            ..test_config()
        })
    };
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| run(&staging()));
        }
    });
    let shared = staging();
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                let k = shared.kernel(AFFINE, "main").unwrap();
                let mut a = shared.device_put(&[1u32; 64], &[64]).unwrap();
                let put = shared.device_put(&[5u32; 16], &[16]).unwrap();
                run_affine(&shared, &k, &mut a, params(0));
                assert_eq!(shared.device_get(&put).unwrap(), [5; 16]);
                assert_eq!(shared.device_get(&a).unwrap(), [affine(1, params(0)); 64]);
            });
        }
    });
}
