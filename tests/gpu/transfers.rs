//! Host<->device transfers on both paths: zero-copy (lavapipe is UMA) and the staging path
//! that discrete GPUs take (forced with `zero_copy: false`).

use crate::harness;
use crate::harness::refusals::assert_pending_in_sequence;
use crate::harness::{context_with, test_config, Rng};
use gpu_arena::error::Access;
use gpu_arena::{
    ArenaConfig, Context, Error, TransferDirection, TransferGuard, TransferGuardLevel,
    TransferGuardLevels,
};

/// Both transfer paths, the second with a small staging pool so chunking is exercised.
fn both_paths() -> Vec<(&'static str, Context)> {
    vec![
        ("zero-copy", context_with(test_config())),
        (
            "staging",
            context_with(ArenaConfig {
                zero_copy: false,
                staging_bytes: 1 << 20,
                ..test_config()
            }),
        ),
    ]
}

fn round_trip<T: bytemuck::Pod + PartialEq + std::fmt::Debug>(ctx: &Context, data: &[T]) {
    let a = ctx.device_put(data, &[data.len()]).unwrap();
    assert_eq!(a.len(), data.len());
    let back = ctx.device_get(&a).unwrap();
    assert!(
        back == data,
        "round trip of {} x {}",
        data.len(),
        std::any::type_name::<T>()
    );
}

#[gpu_test]
fn every_element_size_round_trips_at_odd_and_zero_lengths() {
    for (_, ctx) in both_paths() {
        let mut rng = Rng(7);
        for len in [0usize, 1, 3, 5, 255, 257, 1023, 4099] {
            let bytes = rng.bytes(len * 8);
            round_trip::<u8>(&ctx, &bytes[..len]);
            let halves: Vec<u16> = (0..len).map(|i| i as u16 ^ 0xA5A5).collect();
            round_trip::<u16>(&ctx, &halves);
            let words: Vec<f32> = (0..len).map(|i| i as f32 * 0.5 - 3.0).collect();
            round_trip::<f32>(&ctx, &words);
            let longs: Vec<u64> = (0..len).map(|_| rng.next_u64()).collect();
            round_trip::<u64>(&ctx, &longs);
        }
    }
}

#[gpu_test]
fn arrays_larger_than_the_staging_pool_go_through_in_pieces() {
    for (path, ctx) in both_paths() {
        let mut rng = Rng(11);
        let data = rng.bytes((5 << 20) + 3); // 5 MiB + 3 bytes through a 1 MiB pool
        let a = ctx.device_put(&data, &[data.len()]).unwrap();
        assert!(ctx.device_get(&a).unwrap() == data, "{path}");
        let (up, down) = ctx.staging_buffers_created();
        assert!(
            up <= 3 && down <= 3,
            "{path}: the pool stays bounded ({up}, {down})"
        );
    }
}

#[gpu_test]
fn a_batch_of_100000_small_uploads_arrives_intact() {
    for (path, ctx) in both_paths() {
        let n = 100_000usize;
        let data: Vec<[u32; 4]> = (0..n as u32)
            .map(|i| [i, !i, i.wrapping_mul(2_654_435_761), 7])
            .collect();
        let mut batch = ctx.upload_batch();
        let pending: Vec<_> = data
            .iter()
            .map(|d| batch.put(&d[..], &[4]).unwrap())
            .collect();
        assert_eq!(batch.len(), n);
        let mut done = batch.finish().unwrap();
        let arrays: Vec<_> = pending.into_iter().map(|p| done.take(p).unwrap()).collect();
        let refs: Vec<_> = arrays.iter().collect();
        let back = ctx.device_get_many(&refs).unwrap();
        let bad = back
            .iter()
            .zip(&data)
            .filter(|(b, d)| b[..] != d[..])
            .count();
        assert_eq!(
            bad, 0,
            "{path}: {bad} of {n} arrays corrupted (the first ones are the usual victims)"
        );
        let stats = ctx.transfer_stats();
        assert_eq!(stats.host_to_device.explicit.count, n as u64);
        assert_eq!(stats.host_to_device.explicit.bytes, (n * 16) as u64);
        assert_eq!(stats.device_to_host.explicit.count, n as u64);
    }
}

#[gpu_test]
fn batches_of_mixed_types_and_sizes_round_trip() {
    for (path, ctx) in both_paths() {
        let mut rng = Rng(3);
        let sizes: Vec<usize> = (0..3000).map(|_| rng.below(3000) as usize).collect();
        let floats: Vec<Vec<f32>> = sizes
            .iter()
            .map(|&s| (0..s).map(|i| i as f32).collect())
            .collect();
        let bytes: Vec<Vec<u8>> = sizes.iter().map(|&s| rng.bytes(s % 37)).collect();
        let mut batch = ctx.upload_batch();
        let pf: Vec<_> = floats
            .iter()
            .map(|f| batch.put(f, &[f.len()]).unwrap())
            .collect();
        let pb: Vec<_> = bytes
            .iter()
            .map(|b| batch.put(b, &[b.len()]).unwrap())
            .collect();
        let mut done = batch.finish().unwrap();
        let af = done.take_all(pf).unwrap();
        let ab = done.take_all(pb).unwrap();
        assert_eq!(done.remaining(), 0);
        for (a, f) in af.iter().zip(&floats) {
            assert!(ctx.device_get(a).unwrap() == *f, "{path}");
        }
        let refs: Vec<_> = ab.iter().collect();
        assert!(ctx.device_get_many(&refs).unwrap() == bytes, "{path}");
    }
}

#[gpu_test]
fn a_batch_counts_its_transfers_when_it_finishes_and_a_refused_one_counts_none() {
    for (path, ctx) in harness::op_paths() {
        let before = ctx.transfer_stats();
        let mut dropped = ctx.upload_batch();
        let _ = dropped.put(&[1u32; 1024], &[1024]).unwrap();
        assert_eq!(
            ctx.transfer_stats(),
            before,
            "{path}: nothing counted at put"
        );
        drop(dropped);
        assert_eq!(
            ctx.transfer_stats(),
            before,
            "{path}: a dropped batch counts nothing"
        );
        let mut batch = ctx.upload_batch();
        let a = batch.put(&[2u32; 1024], &[1024]).unwrap();
        let b = batch.put(&[3u8; 7], &[7]).unwrap();
        let mut done = batch.finish().unwrap();
        let up = ctx.transfer_stats().host_to_device.explicit;
        let was = before.host_to_device.explicit;
        assert_eq!(
            (up.count, up.bytes),
            (was.count + 2, was.bytes + 4096 + 7),
            "{path}"
        );
        assert_eq!(
            ctx.device_get(&done.take(a).unwrap()).unwrap(),
            [2u32; 1024]
        );
        assert_eq!(ctx.device_get(&done.take(b).unwrap()).unwrap(), [3u8; 7]);
        // Refused at `finish` (the device lost since the put): counted nowhere.
        let mut refused = ctx.upload_batch();
        let _ = refused.put(&[4u32; 1024], &[1024]).unwrap();
        let counted = ctx.transfer_stats();
        ctx.device_lost_notifier().notify(
            gpu_arena::wgpu::DeviceLostReason::Unknown,
            "lost by the test",
        );
        let error = refused.finish().err();
        assert!(
            matches!(error, Some(Error::DeviceLost { .. })),
            "{path}: {error:?}"
        );
        assert_eq!(ctx.transfer_stats(), counted, "{path}");
    }
}

#[gpu_test]
fn pending_arrays_are_only_redeemed_from_their_own_finished_batch() {
    let ctx = context_with(test_config());
    let mut first = ctx.upload_batch();
    let x = first.put(&[1u32, 2, 3][..], &[3]).unwrap();
    let mut second = ctx.upload_batch();
    let y = second.put(&[4u32][..], &[1]).unwrap();
    let mut done_second = second.finish().unwrap();
    let msg = done_second.take(x).unwrap_err().to_string();
    assert!(msg.contains("another upload batch"), "{msg}");
    assert_eq!(
        ctx.device_get(&done_second.take(y).unwrap()).unwrap(),
        vec![4]
    );
    // Redeeming many at once stops at the foreign ticket and says why.
    let z = first.put(&[5u32][..], &[1]).unwrap();
    let mut third = ctx.upload_batch();
    let w = third.put(&[6u32][..], &[1]).unwrap();
    let mut done_third = third.finish().unwrap();
    let error = done_third.take_all([w, z]).unwrap_err();
    assert!(
        matches!(
            error,
            gpu_arena::Error::InvalidArgument {
                operation: "FinishedUpload::take_all",
                ..
            }
        ),
        "{error:?}"
    );
    let msg = error.to_string();
    assert!(msg.contains("another upload batch"), "{msg}");
    assert_eq!(
        done_third.remaining(),
        0,
        "the own ticket before it was redeemed"
    );
    // The first batch was never finished: its memory goes back when it is dropped.
    drop(first);
    drop(done_third);
    drop(done_second);
    assert_eq!(ctx.memory_stats().bytes_in_use, 0);
}

#[gpu_test]
fn disallow_refuses_implicit_transfers_and_moves_nothing() {
    for (path, ctx) in both_paths() {
        let a = ctx.device_put(&[1.0f32, 2.0, 3.0], &[3]).unwrap();
        let before_stats = ctx.transfer_stats();
        let before_mem = ctx.memory_stats();
        {
            let _guard = TransferGuard::scoped(TransferGuardLevel::Disallow);
            let err = a.to_vec().unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::TransferGuard {
                        direction: TransferDirection::DeviceToHost,
                        ..
                    }
                ),
                "{path}"
            );
            let msg = err.to_string();
            assert!(
                msg.starts_with("Disallowed device-to-host transfer: 12 bytes"),
                "{msg}"
            );
            assert!(msg.contains("make the transfer explicit"), "{msg}");
            assert!(!(a == vec![1.0, 2.0, 3.0]), "a refused comparison is false");
            assert!(
                a.to_string().contains("Disallowed"),
                "Display shows the refusal"
            );
            // Explicit transfers still pass under `disallow`.
            assert_eq!(ctx.device_get(&a).unwrap(), vec![1.0, 2.0, 3.0]);
        }
        let after = ctx.transfer_stats();
        assert_eq!(
            after.device_to_host.implicit, before_stats.device_to_host.implicit,
            "{path}: nothing implicit moved"
        );
        assert_eq!(
            after.device_to_host.explicit.count,
            before_stats.device_to_host.explicit.count + 1
        );
        assert_eq!(ctx.memory_stats().bytes_in_use, before_mem.bytes_in_use);
        // Outside the scope implicit transfers work again and are counted as implicit.
        assert_eq!(a.to_vec().unwrap(), vec![1.0, 2.0, 3.0]);
        assert!(a == vec![1.0, 2.0, 3.0]);
        assert_eq!(ctx.transfer_stats().device_to_host.implicit.count, 2);
    }
}

#[gpu_test]
fn disallow_explicit_refuses_explicit_transfers_before_allocating() {
    let ctx = context_with(test_config());
    let _guard = TransferGuard::scoped_direction(
        TransferDirection::HostToDevice,
        TransferGuardLevel::DisallowExplicit,
    );
    let err = ctx.device_put(&[0u8; 100], &[100]).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("Disallowed host-to-device transfer: 100 bytes by device_put (explicit)"),
        "{err}"
    );
    // The transfer is explicit already: the advice is a level that lets it through.
    assert!(
        !err.to_string().contains("make the transfer explicit"),
        "{err}"
    );
    assert!(err.to_string().contains("\"log_explicit\""), "{err}");
    // The ways to change it name this direction's own variable, which overrides the rest.
    assert!(
        err.to_string().contains(
            "GPU_ARENA_TRANSFER_GUARD_HOST_TO_DEVICE / JAX_TRANSFER_GUARD_HOST_TO_DEVICE"
        ),
        "{err}"
    );
    assert_eq!(ctx.memory_stats().num_allocs, 0, "nothing was allocated");
    // An implicit transfer under this level is not let through by making it explicit.
    let operand = {
        let _allow = TransferGuard::scoped(TransferGuardLevel::Allow);
        ctx.device_put(&[0u8; 16], &[16]).unwrap()
    };
    let implicit = ctx
        .dynamic_update_slice(operand, &[1u8; 4][..], &[0])
        .unwrap_err()
        .error
        .to_string();
    assert!(implicit.contains("(implicit)"), "{implicit}");
    assert!(
        implicit.contains("where it is \"disallow\" rather than \"disallow_explicit\""),
        "{implicit}"
    );
    let mut batch = ctx.upload_batch();
    assert!(batch.put(&[1u8][..], &[1]).is_err());
    // Other directions are unaffected.
    drop(_guard);
    let a = ctx.device_put(&[5u8], &[1]).unwrap();
    let _d2h = TransferGuard::scoped_direction(
        TransferDirection::HostToDevice,
        TransferGuardLevel::DisallowExplicit,
    );
    assert_eq!(ctx.device_get(&a).unwrap(), vec![5]);
}

#[gpu_test]
fn dropping_a_stale_guard_leaves_a_newer_disallowing_guard_in_force() {
    // g1, g2; drop g1; g3, g4 (disallow_explicit); drop g2. Dropping g2 must not cut the
    // stack back to its depth: `device_get` stays refused while g4 is alive.
    let ctx = context_with(test_config());
    let a = ctx.device_put(&[3u8, 4], &[2]).unwrap();
    let g1 = TransferGuard::scoped(TransferGuardLevel::Log);
    let g2 = TransferGuard::scoped(TransferGuardLevel::Allow);
    drop(g1);
    let g3 = TransferGuard::scoped(TransferGuardLevel::Allow);
    let g4 = TransferGuard::scoped(TransferGuardLevel::DisallowExplicit);
    drop(g2);
    let err = ctx.device_get(&a).unwrap_err();
    assert!(matches!(err, Error::TransferGuard { .. }), "{err}");
    assert!(ctx.copy(&a).is_err());
    drop(g4);
    assert_eq!(ctx.device_get(&a).unwrap(), [3, 4], "g3 allows");
    drop(g3);
    assert_eq!(ctx.device_get(&a).unwrap(), [3, 4]);
}

#[gpu_test]
fn log_levels_pass_transfers() {
    let ctx = context_with(test_config());
    let a = ctx.device_put(&[9u16; 10], &[10]).unwrap();
    for level in [
        TransferGuardLevel::Log,
        TransferGuardLevel::LogExplicit,
        TransferGuardLevel::Allow,
    ] {
        let _g = TransferGuard::scoped(level);
        assert_eq!(a.to_vec().unwrap(), vec![9u16; 10]);
        assert_eq!(ctx.device_get(&a).unwrap(), vec![9u16; 10]);
    }
}

#[gpu_test]
fn the_environment_sets_the_contexts_default_levels() {
    let levels = TransferGuardLevels::from_lookup(|name| {
        (name == "JAX_TRANSFER_GUARD_DEVICE_TO_HOST").then(|| "disallow".to_string())
    })
    .unwrap();
    let ctx = context_with(ArenaConfig {
        transfer_guard: levels,
        ..test_config()
    });
    assert_eq!(
        ctx.transfer_guard_defaults().device_to_host,
        TransferGuardLevel::Disallow
    );
    let a = ctx.device_put(&[1i32, 2], &[2]).unwrap();
    assert!(a.to_vec().is_err());
    assert!(ctx.device_get(&a).is_ok());
    let _allow = TransferGuard::scoped(TransferGuardLevel::Allow);
    assert!(
        a.to_vec().is_ok(),
        "a scoped guard overrides the environment"
    );
}

#[gpu_test]
fn shapes_must_match_the_data() {
    let ctx = context_with(test_config());
    let msg = ctx.device_put(&[1u32; 6], &[4, 2]).unwrap_err().to_string();
    assert!(msg.contains("8 elements") && msg.contains("6"), "{msg}");
    let a = ctx.device_put(&[1u32; 6], &[2, 3]).unwrap();
    assert_eq!(a.shape(), &[2, 3]);
    let empty = ctx.device_put::<f64>(&[], &[0, 5]).unwrap();
    assert!(empty.is_empty());
    assert!(ctx.device_get(&empty).unwrap().is_empty());
}

#[gpu_test]
fn uma_puts_write_the_arena_directly_without_staging() {
    let ctx = context_with(test_config());
    if !ctx.memory_plan().arena_host_visible {
        return; // only meaningful on UMA devices such as lavapipe
    }
    let data = vec![3u32; 1 << 16];
    let a = ctx.device_put(&data, &[data.len()]).unwrap();
    assert_eq!(ctx.device_get(&a).unwrap(), data);
    assert_eq!(
        ctx.staging_buffers_created(),
        (0, 0),
        "zero-copy made no staging buffer"
    );
}

#[gpu_test]
fn the_plain_wgpu_backend_round_trips_and_batches() {
    // GL over Mesa: the path for machines without Vulkan. Skip where no GL adapter exists.
    let Some(ctx) = harness::gl_context() else {
        crate::harness::skip(crate::harness::Need::GlAdapter);
        return;
    };
    assert!(!ctx.is_vulkan());
    let data: Vec<u16> = (0..1001).collect();
    let a = ctx.device_put(&data, &[1001]).unwrap();
    assert_eq!(ctx.device_get(&a).unwrap(), data);
    let rows: Vec<Vec<u8>> = (0..500u32)
        .map(|i| vec![i as u8; (i % 13) as usize])
        .collect();
    let mut batch = ctx.upload_batch();
    let pending: Vec<_> = rows
        .iter()
        .map(|r| batch.put(r, &[r.len()]).unwrap())
        .collect();
    let mut done = batch.finish().unwrap();
    let arrays: Vec<_> = pending.into_iter().map(|p| done.take(p).unwrap()).collect();
    let refs: Vec<_> = arrays.iter().collect();
    assert_eq!(ctx.device_get_many(&refs).unwrap(), rows);
    let z = ctx.zeros::<u64>(&[77]).unwrap();
    assert_eq!(ctx.device_get(&z).unwrap(), vec![0u64; 77]);
}

/// Every path a read into caller memory takes: zero-copy, staging, and wgpu's own where a GL
/// adapter exists.
fn every_read_path() -> Vec<(&'static str, Context)> {
    let mut paths = both_paths();
    if let Some(ctx) = harness::gl_context() {
        paths.push(("plain wgpu", ctx));
    }
    paths
}

#[gpu_test]
fn device_get_into_reads_arrays_and_views_into_the_callers_memory() {
    for (path, ctx) in every_read_path() {
        // Larger than the staging path's 1 MiB pool, so the read goes through in pieces.
        let data: Vec<f32> = (0..(3 << 18)).map(|i| i as f32).collect();
        let a = ctx.device_put(&data, &[3, 1 << 18]).unwrap();
        let mut out = vec![-1.0f32; data.len()];
        ctx.device_get_into(&a, &mut out).unwrap();
        assert!(out == data, "{path}: whole array");
        let mut row = vec![0.0f32; 1 << 18];
        for r in 0..3 {
            ctx.device_get_into(a.view(&[r]).unwrap(), &mut row)
                .unwrap();
            assert!(row[..] == data[r << 18..(r + 1) << 18], "{path}: row {r}");
        }
        let view = a.view(&[2]).unwrap();
        ctx.device_get_into(&view, &mut row).unwrap();
        assert!(row[..] == data[2 << 18..], "{path}: &view");
        // Bytes: views that start between two words (offsets 1, 2, 3 mod 4) and odd lengths.
        let bytes: Vec<u8> = (0..4 * 37).map(|i| (i * 7 % 251) as u8).collect();
        let b = ctx.device_put(&bytes, &[4, 37]).unwrap();
        let mut out = [0u8; 37];
        for r in 0..4 {
            ctx.device_get_into(b.view(&[r]).unwrap(), &mut out)
                .unwrap();
            assert_eq!(out[..], bytes[r * 37..(r + 1) * 37], "{path}: byte row {r}");
        }
        let mut one = [0u8; 1];
        ctx.device_get_into(b.view(&[3, 36]).unwrap(), &mut one)
            .unwrap();
        assert_eq!(one[0], bytes[4 * 37 - 1], "{path}: the last byte");
        // Zero-size: nothing to read, no error.
        let empty = ctx.zeros::<u32>(&[0, 5]).unwrap();
        ctx.device_get_into(&empty, &mut []).unwrap();
    }
}

#[gpu_test]
fn device_get_into_waits_for_the_kernel_that_writes_the_array() {
    for (path, ctx) in both_paths() {
        let a = ctx.zeros::<u32>(&[1000]).unwrap();
        let a = ctx.fill_in_place(a, 7).unwrap();
        let mut out = vec![0u32; 1000];
        ctx.device_get_into(&a, &mut out).unwrap();
        assert_eq!(out, vec![7; 1000], "{path}");
    }
}

#[gpu_test]
fn device_get_into_refuses_a_slice_of_another_length_and_reads_nothing() {
    for (path, ctx) in both_paths() {
        let a = ctx.device_put(&[1u32, 2, 3, 4, 5, 6], &[2, 3]).unwrap();
        let before = ctx.transfer_stats().device_to_host.explicit.count;
        let mut short = [9u32; 5];
        let err = ctx.device_get_into(&a, &mut short).unwrap_err();
        assert!(matches!(err, Error::Shape { .. }), "{path}: {err:?}");
        assert_eq!(
            err.to_string(),
            "shape error in device_get_into: the source has 6 elements (shape [2, 3]) but the output slice holds 5; pass a slice of exactly 6 elements"
        );
        assert_eq!(short, [9; 5], "{path}: nothing was written");
        let mut long = [9u32; 4];
        let err = ctx
            .device_get_into(a.view(&[1]).unwrap(), &mut long)
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::Shape {
                    operation: "device_get_into",
                    ..
                }
            ),
            "{path}: {err}"
        );
        assert!(err.to_string().contains("holds 4"), "{path}: {err}");
        assert_eq!(
            ctx.transfer_stats().device_to_host.explicit.count,
            before,
            "{path}: a refused read is not counted"
        );
    }
}

#[gpu_test]
fn device_get_into_is_an_explicit_guarded_counted_transfer() {
    let ctx = context_with(test_config());
    let a = ctx.device_put(&[5u16; 10], &[10]).unwrap();
    let before = ctx.transfer_stats();
    let mut out = [0u16; 10];
    {
        let _g = TransferGuard::scoped(TransferGuardLevel::Disallow);
        ctx.device_get_into(&a, &mut out).unwrap(); // explicit: allowed
    }
    assert_eq!(out, [5; 10]);
    let after = ctx.transfer_stats();
    assert_eq!(
        after.device_to_host.explicit.count,
        before.device_to_host.explicit.count + 1
    );
    assert_eq!(
        after.device_to_host.explicit.bytes,
        before.device_to_host.explicit.bytes + 20
    );
    let _g = TransferGuard::scoped(TransferGuardLevel::DisallowExplicit);
    let mut out = [0u16; 10];
    let err = ctx.device_get_into(&a, &mut out).unwrap_err();
    assert!(
        err.to_string().starts_with(
            "Disallowed device-to-host transfer: 20 bytes by device_get_into (explicit)"
        ),
        "{err}"
    );
    assert_eq!(out, [0; 10]);
}

#[gpu_test]
fn device_get_into_refuses_an_array_of_an_unsubmitted_sequence() {
    let ctx = context_with(test_config());
    let mut s = ctx.sequence();
    let a = s.put(&[3u32; 8], &[8]).unwrap();
    let mut out = [0u32; 8];
    let err = ctx.device_get_into(&a, &mut out).unwrap_err();
    assert_pending_in_sequence(
        &err,
        "device_get_into",
        "the source",
        Access::Write,
        Access::Read,
    );
    s.submit().unwrap();
    ctx.device_get_into(&a, &mut out).unwrap();
    assert_eq!(out, [3; 8]);
}

#[gpu_test]
fn two_threads_read_one_array_into_their_own_buffers() {
    for (path, ctx) in both_paths() {
        let data: Vec<u32> = (0..300_000).collect();
        let a = ctx.device_put(&data, &[300, 1000]).unwrap();
        std::thread::scope(|s| {
            for t in 0..2 {
                let (ctx, a, data) = (&ctx, &a, &data);
                s.spawn(move || {
                    let mut whole = vec![0u32; data.len()];
                    let mut row = vec![0u32; 1000];
                    for i in 0..20 {
                        ctx.device_get_into(a, &mut whole).unwrap();
                        assert!(whole == *data, "{path}: thread {t}");
                        let r = (i * 13 + t * 101) % 300;
                        ctx.device_get_into(a.view(&[r]).unwrap(), &mut row)
                            .unwrap();
                        assert!(
                            row[..] == data[r * 1000..(r + 1) * 1000],
                            "{path}: thread {t}"
                        );
                    }
                });
            }
        });
    }
}

#[gpu_test]
fn device_get_into_refuses_an_array_of_another_context() {
    let ours = context_with(test_config());
    let theirs = context_with(test_config());
    let a = theirs.device_put(&[1u8; 16], &[16]).unwrap();
    let mut out = [0u8; 16];
    let err = ours.device_get_into(&a, &mut out).unwrap_err();
    assert!(matches!(err, Error::ForeignArray { .. }), "{err:?}");
    assert!(
        err.to_string()
            .starts_with("device_get_into got an array of context"),
        "{err}"
    );
    assert_eq!(out, [0; 16]);
}

#[gpu_test]
fn device_get_into_and_bitcast_take_zero_size_arrays_and_views_on_every_path() {
    for (path, ctx) in every_read_path() {
        for shape in [&[0usize][..], &[4, 0, 3], &[3, 0]] {
            let a = ctx.zeros::<u32>(shape).unwrap();
            let mut none: [u32; 0] = [];
            ctx.device_get_into(&a, &mut none)
                .unwrap_or_else(|e| panic!("{path} {shape:?}: {e}"));
            let mut one = [7u32; 1];
            let err = ctx.device_get_into(&a, &mut one).unwrap_err();
            assert!(matches!(err, Error::Shape { .. }), "{path}: {err:?}");
            assert_eq!(one, [7], "{path}: nothing was written");
            // A row of a zero-size array is itself empty and reads into an empty slice.
            if let Some(last) = shape[0].checked_sub(1) {
                let row = a.view(&[last]).unwrap();
                ctx.device_get_into(row, &mut none).unwrap();
            } else {
                assert!(a.view(&[0]).is_err(), "{path}: no row 0 of a [0] array");
            }
            // Reinterpreting no elements is fine; another element size gives the array back.
            let floats = a.bitcast::<f32>().unwrap();
            assert_eq!(floats.shape(), shape);
            let donated = floats.bitcast::<u64>().unwrap_err();
            assert!(
                matches!(
                    donated.error,
                    Error::Element {
                        operation: "DeviceArray::bitcast",
                        ..
                    }
                ),
                "{path}: {}",
                donated.error
            );
            assert!(
                donated.error.to_string().contains("bitcast"),
                "{}",
                donated.error
            );
            assert_eq!(
                donated.array.shape(),
                shape,
                "{path}: the array comes back intact"
            );
        }
        // Data around the empty arrays is untouched by reading them.
        let b = ctx.device_put(&[1u32, 2, 3], &[3]).unwrap();
        let mut out = [0u32; 3];
        ctx.device_get_into(&b, &mut out).unwrap();
        assert_eq!(out, [1, 2, 3], "{path}");
    }
}
