//! Transfers, views and single ops under hostile or unusual use: the smallest staging pool
//! (every transfer in many pieces), zero-size element types, ranks above the maximum, failed
//! donated ops (the array must come back unchanged), arrays of another context, the guard per
//! direction on implicit uploads, and two threads on one context.

use crate::harness::{context_with, test_config, Rng};
use gpu_arena::{
    config::MIN_STAGING_BYTES, error::IndexRefusal, ArenaConfig, Context, DeviceArray, Error,
    TransferDirection, TransferGuard, TransferGuardLevel,
};

/// Every path a transfer or single op can take here: zero-copy with host copies (lavapipe's
/// default), zero-copy with the WGSL kernels forced, and the staging path with the smallest
/// pool (4 KiB) so that anything above a few pages goes through in pieces, kernels forced.
fn paths() -> Vec<(&'static str, Context)> {
    vec![
        ("zero-copy", context_with(test_config())),
        (
            "zero-copy kernels",
            context_with(ArenaConfig {
                force_device_kernels: true,
                ..test_config()
            }),
        ),
        (
            "min staging kernels",
            context_with(ArenaConfig {
                zero_copy: false,
                staging_bytes: MIN_STAGING_BYTES,
                force_device_kernels: true,
                ..test_config()
            }),
        ),
        (
            "min staging",
            context_with(ArenaConfig {
                zero_copy: false,
                staging_bytes: MIN_STAGING_BYTES,
                ..test_config()
            }),
        ),
    ]
}

fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

fn clamp(start: i64, dim: usize, size: usize) -> usize {
    start.clamp(0, (dim - size) as i64) as usize
}

/// Every multi-index of `shape`, row-major.
fn indices(shape: &[usize]) -> Vec<Vec<usize>> {
    let n: usize = shape.iter().product();
    let st = strides(shape);
    (0..n)
        .map(|i| (0..shape.len()).map(|d| i / st[d] % shape[d]).collect())
        .collect()
}

fn reference_slice<T: Copy>(data: &[T], shape: &[usize], start: &[i64], sizes: &[usize]) -> Vec<T> {
    let st = strides(shape);
    let s: Vec<usize> = (0..shape.len())
        .map(|d| clamp(start[d], shape[d], sizes[d]))
        .collect();
    indices(sizes)
        .iter()
        .map(|ix| {
            data[(0..shape.len())
                .map(|d| (s[d] + ix[d]) * st[d])
                .sum::<usize>()]
        })
        .collect()
}

fn reference_update<T: Copy>(
    data: &[T],
    shape: &[usize],
    update: &[T],
    ushape: &[usize],
    start: &[i64],
) -> Vec<T> {
    let st = strides(shape);
    let s: Vec<usize> = (0..shape.len())
        .map(|d| clamp(start[d], shape[d], ushape[d]))
        .collect();
    let mut out = data.to_vec();
    for (k, ix) in indices(ushape).iter().enumerate() {
        out[(0..shape.len())
            .map(|d| (s[d] + ix[d]) * st[d])
            .sum::<usize>()] = update[k];
    }
    out
}

#[gpu_test(needs = Vulkan)]
fn multi_piece_transfers_through_small_and_odd_sized_pools_round_trip_bytes_views_and_batches() {
    // The smallest pool, and pools whose size is not a whole number of words.
    for staging_bytes in [MIN_STAGING_BYTES, MIN_STAGING_BYTES + 3, 6002] {
        multi_piece_round_trips(staging_bytes);
    }
}

fn multi_piece_round_trips(staging_bytes: u64) {
    let ctx = context_with(ArenaConfig {
        zero_copy: false,
        staging_bytes,
        ..test_config()
    });
    let mut rng = Rng(21);
    // Lengths around the pool's size and its multiples, odd ones included.
    for len in [4095usize, 4096, 4097, 8191, 3 * 4096 + 1, 40_003] {
        let data = rng.bytes(len);
        let a = ctx.device_put(&data, &[len]).unwrap();
        assert!(ctx.device_get(&a).unwrap() == data, "{len}");
        let mut out = vec![0u8; len];
        ctx.device_get_into(&a, &mut out).unwrap();
        assert!(out == data, "{len}: device_get_into");
    }
    // Rows of bytes that start off a word boundary and span several staging buffers.
    let rows = 5usize;
    let cols = 9_999usize;
    let data = rng.bytes(rows * cols);
    let a = ctx.device_put(&data, &[rows, cols]).unwrap();
    let mut row = vec![0u8; cols];
    for r in 0..rows {
        ctx.device_get_into(a.view(&[r]).unwrap(), &mut row)
            .unwrap();
        assert!(row[..] == data[r * cols..(r + 1) * cols], "row {r}");
    }
    // 16-bit views with an odd element offset (2 mod 4 bytes), larger than the pool.
    let halves: Vec<u16> = (0..3 * 4097).map(|i| (i * 31) as u16).collect();
    let h = ctx.device_put(&halves, &[3, 4097]).unwrap();
    let mut hrow = vec![0u16; 4097];
    for r in 0..3 {
        ctx.device_get_into(h.view(&[r]).unwrap(), &mut hrow)
            .unwrap();
        assert!(hrow[..] == halves[r * 4097..(r + 1) * 4097], "u16 row {r}");
    }
    // A batch mixing arrays larger than a staging buffer with small ones and empty ones.
    let items: Vec<Vec<u8>> = (0..40)
        .map(|i| rng.bytes([0, 1, 3, 4095, 4097, 12_289][i % 6]))
        .collect();
    let mut batch = ctx.upload_batch();
    let pending: Vec<_> = items
        .iter()
        .map(|d| batch.put(d, &[d.len()]).unwrap())
        .collect();
    let mut done = batch.finish().unwrap();
    let arrays = done.take_all(pending).unwrap();
    let refs: Vec<_> = arrays.iter().collect();
    assert!(ctx.device_get_many(&refs).unwrap() == items);
    let (up, down) = ctx.staging_buffers_created();
    assert!(
        up <= 3 && down <= 3,
        "the pool stays bounded: ({up}, {down})"
    );
    assert!(
        up >= 1 && down >= 1,
        "the staging path was taken: ({up}, {down})"
    );
}

#[gpu_test]
fn slices_and_updates_match_the_reference_on_every_path_with_extreme_starts() {
    for (path, ctx) in paths() {
        let mut rng = Rng(5);
        let shape = [3usize, 5, 70];
        let data: Vec<u8> = rng.bytes(shape.iter().product());
        let a = ctx.device_put(&data, &shape).unwrap();
        let starts: [[i64; 3]; 5] = [
            [0, 0, 0],
            [1, -7, 3],
            [i64::MAX, i64::MIN, 61],
            [-1, 2, i64::MAX],
            [2, 4, 1],
        ];
        for sizes in [[1usize, 2, 7], [3, 5, 70], [2, 0, 3], [1, 5, 1]] {
            for start in &starts {
                let s = ctx.dynamic_slice(&a, start, &sizes).unwrap();
                assert_eq!(s.shape(), sizes);
                assert_eq!(
                    ctx.device_get(&s).unwrap(),
                    reference_slice(&data, &shape, start, &sizes),
                    "{path}: slice {sizes:?} at {start:?}"
                );
                let upd: Vec<u8> = rng.bytes(sizes.iter().product());
                let u = ctx.device_put(&upd, &sizes).unwrap();
                let expected = reference_update(&data, &shape, &upd, &sizes, start);
                let copy = ctx.dynamic_update_slice_copy(&a, &u, start).unwrap();
                assert_eq!(
                    ctx.device_get(&copy).unwrap(),
                    expected,
                    "{path}: update copy {sizes:?} at {start:?}"
                );
                let b = ctx.copy(&a).unwrap();
                let b = ctx
                    .dynamic_update_slice(b, (&upd[..], &sizes[..]), start)
                    .unwrap();
                assert_eq!(
                    ctx.device_get(&b).unwrap(),
                    expected,
                    "{path}: donated host update {sizes:?} at {start:?}"
                );
            }
        }
        assert_eq!(ctx.device_get(&a).unwrap(), data, "{path}: the operand");
    }
}

#[gpu_test]
fn a_recorded_sequence_of_puts_slices_updates_fills_and_copies_matches_the_reference() {
    for (path, ctx) in paths() {
        let data: Vec<u32> = (0..6 * 900).collect();
        let mut s = ctx.sequence();
        let a = s.put(&data, &[6, 900]).unwrap();
        let slice = s.dynamic_slice(&a, &[4, 100], &[3, 801]).unwrap();
        let filled = s.fill(&[2, 3], 9u32).unwrap();
        let a = s.dynamic_update_slice(a, &filled, &[-5, 898]).unwrap();
        let host_update = [7u32; 5];
        let a = s
            .dynamic_update_slice(a, &host_update[..], &[0, 0])
            .unwrap_err();
        // Rank 1 update of a rank 2 operand: refused, the operand comes back.
        assert!(
            matches!(a.error, Error::Shape { .. }),
            "{path}: {}",
            a.error
        );
        let a = a.array;
        let copied = s.copy(&a).unwrap();
        let refilled = s.fill_in_place(copied, 1u32).unwrap();
        s.submit().unwrap();
        assert_eq!(
            ctx.device_get(&slice).unwrap(),
            reference_slice(&data, &[6, 900], &[4, 100], &[3, 801]),
            "{path}: the slice sees the put, not the later update"
        );
        let expected = reference_update(&data, &[6, 900], &[9; 6], &[2, 3], &[-5, 898]);
        assert_eq!(ctx.device_get(&a).unwrap(), expected, "{path}");
        assert_eq!(ctx.device_get(&refilled).unwrap(), vec![1; 5400], "{path}");
    }
}

#[gpu_test]
fn zero_sized_elements_go_through_every_transfer_view_and_op() {
    for (path, ctx) in paths() {
        let a = ctx.device_put(&[(); 12], &[3, 4]).unwrap();
        assert_eq!(a.len(), 12);
        assert_eq!(a.size_in_bytes(), 0);
        assert_eq!(ctx.device_get(&a).unwrap().len(), 12, "{path}");
        let mut out = [(); 12];
        ctx.device_get_into(&a, &mut out).unwrap();
        let mut row = [(); 4];
        ctx.device_get_into(a.view(&[2]).unwrap(), &mut row)
            .unwrap();
        let s = ctx.dynamic_slice(&a, &[5, -1], &[2, 3]).unwrap();
        assert_eq!(s.shape(), [2, 3]);
        assert_eq!(ctx.device_get(&s).unwrap().len(), 6, "{path}");
        let u = ctx.fill(&[1, 2], ()).unwrap();
        let c = ctx.dynamic_update_slice_copy(&a, &u, &[1, 1]).unwrap();
        assert_eq!(c.len(), 12);
        let a = ctx.dynamic_update_slice(a, &u, &[1, 1]).unwrap();
        let a = ctx.fill_in_place(a, ()).unwrap();
        let b = ctx.copy(&a).unwrap();
        assert_eq!(ctx.device_get(&b).unwrap().len(), 12, "{path}");
        let seven = [(); 7];
        let mut batch = ctx.upload_batch();
        let p = batch.put(&seven[..], &[7]).unwrap();
        let mut done = batch.finish().unwrap();
        assert_eq!(ctx.device_get(&done.take(p).unwrap()).unwrap().len(), 7);
        // Too many elements for the shape is still an error.
        assert!(matches!(
            ctx.device_put(&[(); 5], &[2, 2]),
            Err(Error::Shape { .. })
        ));
    }
}

#[gpu_test]
fn ranks_above_the_maximum_are_refused_by_every_maker_and_view() {
    let ctx = context_with(test_config());
    let rank7 = [1usize; 7];
    let one = [5u32];
    for result in [
        ctx.device_put(&one, &rank7).map(drop),
        ctx.alloc::<u32>(&rank7).map(drop),
        ctx.zeros::<u32>(&rank7).map(drop),
        ctx.fill(&rank7, 1u32).map(drop),
    ] {
        assert!(matches!(result, Err(Error::Shape { .. })), "{result:?}");
    }
    let mut batch = ctx.upload_batch();
    assert!(matches!(
        batch.put(&one[..], &rank7),
        Err(Error::Shape { .. })
    ));
    let mut s = ctx.sequence();
    assert!(matches!(s.put(&one, &rank7), Err(Error::Shape { .. })));
    assert!(matches!(s.fill(&rank7, 0u32), Err(Error::Shape { .. })));
    s.submit().unwrap();
    let a = ctx.device_put(&one, &[1]).unwrap();
    assert!(matches!(a.reshaped(&rank7), Err(Error::Shape { .. })));
    assert!(a.view(&[]).unwrap().reshape(&rank7).is_err());
    let a = a.reshape(&rank7).unwrap_err().array;
    // Slices and updates of another rank: errors, the operand back intact.
    assert!(ctx.dynamic_slice(&a, &[0; 7], &rank7).is_err());
    let host: &[u32] = &[9];
    let a = ctx
        .dynamic_update_slice(a, (host, &rank7[..]), &[0; 7])
        .unwrap_err()
        .array;
    assert_eq!(ctx.device_get(&a).unwrap(), [5]);
    assert_eq!(ctx.memory_stats().bytes_in_use, a.allocated_bytes());
}

/// `a`'s contents and memory, to compare before and after a refused op.
fn snapshot<T: bytemuck::Pod>(ctx: &Context, a: &DeviceArray<T>) -> (Vec<T>, u64, Vec<usize>) {
    (
        ctx.device_get(a).unwrap(),
        a.byte_offset(),
        a.shape().to_vec(),
    )
}

/// A donated op that must be refused, given the array.
type Refusal<'a> = Box<dyn Fn(DeviceArray<u16>) -> gpu_arena::DonatedResult<u16> + 'a>;

#[gpu_test]
fn refused_donated_updates_and_fills_give_the_array_back_unchanged_and_move_nothing() {
    for (path, ctx) in paths() {
        let data: Vec<u16> = (0..5000).map(|i| i as u16).collect();
        let mut a = ctx.device_put(&data, &[50, 100]).unwrap();
        let before = snapshot(&ctx, &a);
        let big = ctx.zeros::<u16>(&[51, 1]).unwrap();
        let rank1 = ctx.zeros::<u16>(&[3]).unwrap();
        let mem = ctx.memory_stats().bytes_in_use;
        let stats = ctx.transfer_stats();
        let long: &[u16] = &[1; 7];
        let short: &[u16] = &[1; 5];
        let shape: &[usize] = &[2, 3];
        let refusals: Vec<Refusal<'_>> = vec![
            Box::new(|a| ctx.dynamic_update_slice(a, &big, &[0, 0])),
            Box::new(|a| ctx.dynamic_update_slice(a, &rank1, &[0, 0])),
            Box::new(|a| ctx.dynamic_update_slice(a, &rank1, &[0])),
            Box::new(|a| ctx.dynamic_update_slice(a, (long, shape), &[1, 1])),
            Box::new(|a| ctx.dynamic_update_slice(a, (short, shape), &[1, 1])),
            Box::new(|a| ctx.dynamic_update_slice(a, (short, &[1usize; 7][..]), &[0; 7])),
            Box::new(|a| {
                let mut s = ctx.sequence();
                let r = s.dynamic_update_slice(a, (long, shape), &[1, 1]);
                s.submit().unwrap();
                r
            }),
            Box::new(|a| {
                let _g = TransferGuard::scoped_direction(
                    TransferDirection::HostToDevice,
                    TransferGuardLevel::Disallow,
                );
                ctx.dynamic_update_slice(a, (short, &[1usize, 5][..]), &[1, 1])
            }),
            Box::new(|a| {
                let _g = TransferGuard::scoped(TransferGuardLevel::Disallow);
                let mut s = ctx.sequence();
                let r = s.dynamic_update_slice(a, (short, &[1usize, 5][..]), &[1, 1]);
                s.submit().unwrap();
                r
            }),
        ];
        for (i, refuse) in refusals.iter().enumerate() {
            let donated = refuse(a).expect_err("refused");
            a = donated.array;
            assert_eq!(
                snapshot(&ctx, &a),
                before,
                "{path}: refusal {i}: {}",
                donated.error
            );
            assert_eq!(ctx.memory_stats().bytes_in_use, mem, "{path}: refusal {i}");
        }
        let after = ctx.transfer_stats();
        assert_eq!(
            after.host_to_device, stats.host_to_device,
            "{path}: no refused upload is counted"
        );
        // A 3-byte element cannot be filled: the array comes back with its bytes.
        let odd = ctx.device_put(&[[1u8, 2, 3]; 11], &[11]).unwrap();
        let odd = ctx.fill_in_place(odd, [9, 9, 9]).unwrap_err();
        assert!(matches!(odd.error, Error::Element { .. }), "{path}");
        assert_eq!(ctx.device_get(&odd.array).unwrap(), vec![[1, 2, 3]; 11]);
        let mut s = ctx.sequence();
        let odd = s.fill_in_place(odd.array, [0, 0, 0]).unwrap_err().array;
        s.submit().unwrap();
        assert_eq!(ctx.device_get(&odd).unwrap(), vec![[1, 2, 3]; 11], "{path}");
    }
}

#[gpu_test]
fn a_donated_array_pending_in_an_unsubmitted_sequence_comes_back_from_single_ops() {
    for (path, ctx) in paths() {
        let a = ctx.device_put(&[4u32; 64], &[8, 8]).unwrap();
        let u = ctx.device_put(&[1u32; 4], &[2, 2]).unwrap();
        let mut s = ctx.sequence();
        let read = s.copy(&a).unwrap(); // the sequence reads `a`
        let written = s
            .fill_in_place(ctx.zeros::<u32>(&[2, 2]).unwrap(), 3)
            .unwrap();
        // A write of `a` would overtake the sequence's read: refused, `a` back.
        let a = ctx.dynamic_update_slice(a, &u, &[0, 0]).unwrap_err();
        assert!(
            matches!(a.error, Error::PendingInRecorder { .. }),
            "{path}: {}",
            a.error
        );
        let a = ctx.fill_in_place(a.array, 0).unwrap_err();
        assert!(matches!(a.error, Error::PendingInRecorder { .. }), "{path}");
        // An update the sequence writes cannot be read yet.
        let a = ctx
            .dynamic_update_slice(a.array, &written, &[0, 0])
            .unwrap_err();
        assert!(matches!(a.error, Error::PendingInRecorder { .. }), "{path}");
        assert!(ctx
            .dynamic_update_slice_copy(&a.array, &written, &[0, 0])
            .is_err());
        let a = a.array;
        s.submit().unwrap();
        let a = ctx.dynamic_update_slice(a, &written, &[7, 7]).unwrap();
        let mut expected = vec![4u32; 64];
        for (r, c) in [(6, 6), (6, 7), (7, 6), (7, 7)] {
            expected[r * 8 + c] = 3;
        }
        assert_eq!(ctx.device_get(&a).unwrap(), expected, "{path}");
        assert_eq!(ctx.device_get(&read).unwrap(), vec![4; 64], "{path}");
    }
}

#[gpu_test]
fn arrays_of_another_context_are_refused_by_every_transfer_and_op() {
    for (path, ours) in paths() {
        let theirs = context_with(test_config());
        let a = theirs.device_put(&[1u32, 2, 3, 4], &[2, 2]).unwrap();
        let mine = ours.device_put(&[0u32; 4], &[2, 2]).unwrap();
        let foreign = |r: Result<(), Error>, what: &str| {
            assert!(
                matches!(r, Err(Error::ForeignArray { .. })),
                "{path}: {what}: {r:?}"
            );
        };
        foreign(ours.device_get(&a).map(drop), "device_get");
        foreign(
            ours.device_get_many(&[&mine, &a]).map(drop),
            "device_get_many",
        );
        foreign(ours.copy(&a).map(drop), "copy");
        foreign(
            ours.dynamic_slice(&a, &[0, 0], &[1, 1]).map(drop),
            "dynamic_slice",
        );
        foreign(
            ours.dynamic_update_slice_copy(&mine, &a, &[0, 0]).map(drop),
            "update copy, foreign update",
        );
        foreign(
            ours.dynamic_update_slice_copy(&a, &mine, &[0, 0]).map(drop),
            "update copy, foreign operand",
        );
        let donated = ours.dynamic_update_slice(mine, &a, &[0, 0]).unwrap_err();
        foreign(Err(donated.error), "donated update, foreign update");
        let mine = donated.array;
        let donated = ours.dynamic_update_slice(a, &mine, &[0, 0]).unwrap_err();
        foreign(Err(donated.error), "donated update, foreign operand");
        let donated = ours.fill_in_place(donated.array, 9).unwrap_err();
        foreign(Err(donated.error), "fill_in_place");
        let a = donated.array;
        let mut s = ours.sequence();
        foreign(s.copy(&a).map(drop), "recorded copy");
        foreign(
            s.dynamic_slice(&a, &[0, 0], &[1, 1]).map(drop),
            "recorded slice",
        );
        foreign(
            s.dynamic_update_slice_copy(&mine, &a, &[0, 0]).map(drop),
            "recorded update copy",
        );
        let donated = s.fill_in_place(a, 9).unwrap_err();
        foreign(Err(donated.error), "recorded fill_in_place");
        let donated = s
            .dynamic_update_slice(donated.array, &mine, &[0, 0])
            .unwrap_err();
        foreign(Err(donated.error), "recorded donated update");
        let a = donated.array;
        assert!(s.is_empty(), "{path}: nothing was recorded");
        s.submit().unwrap();
        assert_eq!(theirs.device_get(&a).unwrap(), [1, 2, 3, 4], "{path}");
        assert_eq!(ours.device_get(&mine).unwrap(), [0; 4], "{path}");
    }
}

#[gpu_test]
fn the_guard_watches_each_direction_of_each_op_on_its_own() {
    for (path, ctx) in paths() {
        let a = ctx.device_put(&[1.5f32; 8], &[8]).unwrap();
        let host: &[f32] = &[2.5; 2];
        // Disallow host-to-device: explicit puts pass, implicit uploads (host updates) do not.
        {
            let _g = TransferGuard::scoped_direction(
                TransferDirection::HostToDevice,
                TransferGuardLevel::Disallow,
            );
            assert!(ctx.device_put(&[0u8; 3], &[3]).is_ok(), "{path}");
            let err = ctx.dynamic_update_slice_copy(&a, host, &[0]).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::TransferGuard {
                        direction: TransferDirection::HostToDevice,
                        ..
                    }
                ),
                "{path}: {err}"
            );
            // Other directions pass.
            assert_eq!(a.to_vec().unwrap(), vec![1.5; 8], "{path}");
            assert!(ctx.copy(&a).is_ok());
        }
        // Disallow-explicit device-to-device: copy refused (alone and recorded), slices and
        // updates are not transfers and pass.
        {
            let _g = TransferGuard::scoped_direction(
                TransferDirection::DeviceToDevice,
                TransferGuardLevel::DisallowExplicit,
            );
            let before = ctx.memory_stats().bytes_in_use;
            assert!(ctx.copy(&a).is_err(), "{path}");
            let mut s = ctx.sequence();
            assert!(s.copy(&a).is_err(), "{path}");
            assert!(s.is_empty());
            s.submit().unwrap();
            assert_eq!(
                ctx.memory_stats().bytes_in_use,
                before,
                "{path}: nothing allocated"
            );
            let s = ctx.dynamic_slice(&a, &[3], &[2]).unwrap();
            assert_eq!(ctx.device_get(&s).unwrap(), [1.5, 1.5]);
            let u = ctx.dynamic_update_slice_copy(&a, host, &[7]).unwrap();
            assert_eq!(ctx.device_get(&u).unwrap()[6..], [2.5, 2.5], "{path}");
        }
        // Log levels pass everything and change no result.
        {
            let _g = TransferGuard::scoped(TransferGuardLevel::LogExplicit);
            let u = ctx.dynamic_update_slice_copy(&a, host, &[-3]).unwrap();
            assert_eq!(ctx.device_get(&u).unwrap()[..3], [2.5, 2.5, 1.5], "{path}");
            let c = ctx.copy(&u).unwrap();
            assert_eq!(ctx.device_get(&c).unwrap(), ctx.device_get(&u).unwrap());
        }
    }
}

#[gpu_test]
fn a_config_default_that_disallows_uploads_refuses_host_updates_until_a_scope_allows_them() {
    let ctx = context_with(ArenaConfig {
        transfer_guard: gpu_arena::TransferGuardLevels {
            host_to_device: TransferGuardLevel::Disallow,
            ..Default::default()
        },
        zero_copy: false,
        staging_bytes: MIN_STAGING_BYTES,
        ..test_config()
    });
    let a = ctx.zeros::<u8>(&[10_000]).unwrap();
    let host = vec![7u8; 9000];
    let a = ctx.dynamic_update_slice(a, &host[..], &[5]).unwrap_err();
    assert!(
        matches!(a.error, Error::TransferGuard { .. }),
        "{}",
        a.error
    );
    assert_eq!(ctx.device_get(&a.array).unwrap(), vec![0; 10_000]);
    let _allow = TransferGuard::scoped(TransferGuardLevel::Allow);
    let a = ctx.dynamic_update_slice(a.array, &host[..], &[5]).unwrap();
    let got = ctx.device_get(&a).unwrap();
    assert_eq!(got[..5], [0; 5]);
    assert!(got[5..9005].iter().all(|&b| b == 7));
    assert_eq!(got[9005..], [0; 995]);
}

#[gpu_test]
fn two_threads_put_update_and_read_on_one_context_through_the_smallest_pool() {
    let ctx = context_with(ArenaConfig {
        zero_copy: false,
        staging_bytes: MIN_STAGING_BYTES,
        ..test_config()
    });
    let shared: Vec<u32> = (0..20_000).collect();
    let a = ctx.device_put(&shared, &[20, 1000]).unwrap();
    std::thread::scope(|scope| {
        for t in 0..2u32 {
            let (ctx, a, shared) = (&ctx, &a, &shared);
            scope.spawn(move || {
                let mut rng = Rng(100 + t as u64);
                let mut own = ctx.zeros::<u32>(&[3000]).unwrap();
                let mut model = vec![0u32; 3000];
                for i in 0..30 {
                    let len = 1 + rng.below(2999) as usize;
                    let start = rng.below(4000) as i64 - 500;
                    let upd: Vec<u32> = (0..len as u32).map(|k| k ^ (t << 20) ^ i).collect();
                    own = ctx.dynamic_update_slice(own, &upd[..], &[start]).unwrap();
                    let s = clamp(start, 3000, len);
                    model[s..s + len].copy_from_slice(&upd);
                    assert!(
                        ctx.device_get(&own).unwrap() == model,
                        "thread {t} step {i}"
                    );
                    let row = (i as usize * 7 + t as usize) % 20;
                    let mut out = vec![0u32; 1000];
                    ctx.device_get_into(a.view(&[row]).unwrap(), &mut out)
                        .unwrap();
                    assert!(
                        out[..] == shared[row * 1000..(row + 1) * 1000],
                        "thread {t}"
                    );
                    let fresh: Vec<u32> = (0..5000).map(|k| k * 3 + i).collect();
                    let f = ctx.device_put(&fresh, &[5000]).unwrap();
                    assert!(ctx.device_get(&f).unwrap() == fresh, "thread {t}");
                }
            });
        }
    });
    let (up, down) = ctx.staging_buffers_created();
    assert!(
        up <= 3 && down <= 3,
        "the pool returns to its size: ({up}, {down})"
    );
}

#[gpu_test]
fn views_of_views_and_reshapes_read_the_right_elements_and_refuse_bad_indices() {
    for (path, ctx) in paths() {
        let data: Vec<u8> = (0..2 * 3 * 4 * 5).map(|i| i as u8).collect();
        let a = ctx.device_put(&data, &[2, 3, 4, 5]).unwrap();
        let v = a
            .view(&[1])
            .unwrap()
            .view(&[2])
            .unwrap()
            .view(&[3])
            .unwrap();
        assert_eq!(v.shape(), [5]);
        let mut out = [0u8; 5];
        ctx.device_get_into(&v, &mut out).unwrap();
        let base = ((3 + 2) * 4 + 3) * 5;
        assert_eq!(out[..], data[base..base + 5], "{path}");
        let r = a.reshaped(&[6, 20]).unwrap().view(&[5]).unwrap();
        let mut row = [0u8; 20];
        ctx.device_get_into(r, &mut row).unwrap();
        assert_eq!(row[..], data[100..], "{path}");
        let w = a.view(&[0, 1]).unwrap().reshape(&[2, 10]).unwrap();
        let mut two = [0u8; 20];
        ctx.device_get_into(&w, &mut two).unwrap();
        assert_eq!(two[..], data[20..40], "{path}");
        for bad in [
            &[2usize][..],
            &[0, 3],
            &[0, 0, 4],
            &[0, 0, 0, 5],
            &[0, 0, 0, 0, 0],
        ] {
            assert!(
                matches!(
                    a.view(bad),
                    Err(Error::Index {
                        refusal: IndexRefusal::IndexCount { .. } | IndexRefusal::OutOfRange { .. },
                        ..
                    })
                ),
                "{path}: {bad:?}"
            );
        }
        // An index out of range says which are in range.
        let out = a
            .view(&[2])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            out.contains("give an index from 0 to 1 there"),
            "{path}: {out}"
        );
        assert!(a.view(&[1, 1]).unwrap().view(&[0, 0, 0]).is_err());
        assert!(a.reshaped(&[121]).is_err());
        assert!(a.reshaped(&[usize::MAX, 2]).is_err());
        // Wrong-length reads of views write nothing.
        let mut long = [0xAAu8; 6];
        assert!(matches!(
            ctx.device_get_into(&v, &mut long),
            Err(Error::Shape { .. })
        ));
        assert_eq!(long, [0xAA; 6]);
    }
}

#[gpu_test]
fn sequences_holding_more_staging_than_the_pool_upload_intact_and_the_pool_shrinks_back() {
    let ctx = context_with(ArenaConfig {
        zero_copy: false,
        staging_bytes: MIN_STAGING_BYTES,
        ..test_config()
    });
    let mut rng = Rng(77);
    // Each put fits a staging buffer; together they fill many more than the pool's three.
    let rows: Vec<Vec<u8>> = (0..24).map(|i| rng.bytes(1000 + i * 97)).collect();
    let mut s = ctx.sequence();
    let recorded: Vec<_> = rows.iter().map(|r| s.put(r, &[r.len()]).unwrap()).collect();
    // A single op's transfer between the recording and the submit, from the same pool.
    let between = rng.bytes(3 * 4096 + 5);
    let b = ctx.device_put(&between, &[between.len()]).unwrap();
    assert!(ctx.device_get(&b).unwrap() == between);
    // A sequence dropped without submitting gives its staging back untouched by the other.
    let mut dropped = ctx.sequence();
    let lost: Vec<_> = (0..10)
        .map(|_| dropped.put(&[0xEEu8; 4000], &[4000]).unwrap())
        .collect();
    drop(dropped);
    drop(lost);
    s.submit().unwrap();
    for (i, (a, r)) in recorded.iter().zip(&rows).enumerate() {
        assert!(ctx.device_get(a).unwrap() == *r, "recorded put {i}");
    }
    let after = rng.bytes(4096 * 5);
    let c = ctx.device_put(&after, &[after.len()]).unwrap();
    assert!(ctx.device_get(&c).unwrap() == after);
    let (up, down) = ctx.staging_buffers_created();
    assert!(
        up <= 3 && down <= 3,
        "the pool returns to its size: ({up}, {down})"
    );
}

#[gpu_test]
fn copies_between_contexts_through_small_odd_pools_arrive_intact_in_both_directions() {
    let mut rng = Rng(9);
    let small = |staging_bytes| {
        context_with(ArenaConfig {
            zero_copy: false,
            staging_bytes,
            ..test_config()
        })
    };
    let pairs = [
        (small(MIN_STAGING_BYTES), small(MIN_STAGING_BYTES + 1)),
        (small(6002), context_with(test_config())),
        (context_with(test_config()), small(MIN_STAGING_BYTES + 2)),
    ];
    for (i, (a, b)) in pairs.iter().enumerate() {
        for len in [0usize, 1, 4095, 4097, 12_301] {
            let data = rng.bytes(len);
            let x = a.device_put(&data, &[len]).unwrap();
            let y = b.device_put_from(&x).unwrap();
            assert!(b.device_get(&y).unwrap() == data, "pair {i}: {len} there");
            let z = y.copy_to(a).unwrap();
            assert!(a.device_get(&z).unwrap() == data, "pair {i}: {len} back");
        }
        // A row of bytes off a word boundary, through a slice on the source device.
        let data = rng.bytes(3 * 5001);
        let x = a.device_put(&data, &[3, 5001]).unwrap();
        let row = a.dynamic_slice(&x, &[1, 0], &[1, 5001]).unwrap();
        let y = b.device_put_from(&row).unwrap();
        assert!(
            b.device_get(&y).unwrap()[..] == data[5001..10002],
            "pair {i}: row"
        );
    }
}

#[gpu_test]
fn copies_between_contexts_obey_either_contexts_guard_and_refusals_allocate_nothing() {
    let strict = |level| {
        context_with(ArenaConfig {
            transfer_guard: gpu_arena::TransferGuardLevels {
                device_to_device: level,
                ..Default::default()
            },
            zero_copy: false,
            staging_bytes: MIN_STAGING_BYTES,
            ..test_config()
        })
    };
    let open = context_with(test_config());
    let closed = strict(TransferGuardLevel::DisallowExplicit);
    let data: Vec<u32> = (0..3000).collect();
    let x = open.device_put(&data, &[3000]).unwrap();
    let y = closed.device_put(&data, &[3000]).unwrap();
    let (open_mem, closed_mem) = (
        open.memory_stats().bytes_in_use,
        closed.memory_stats().bytes_in_use,
    );
    // Into the strict context, out of it, and within it: each refused by its guard.
    for (result, what) in [
        (closed.device_put_from(&x).map(drop), "into"),
        (open.device_put_from(&y).map(drop), "out of"),
        (y.copy_to(&closed).map(drop), "within"),
    ] {
        assert!(
            matches!(
                result,
                Err(Error::TransferGuard {
                    direction: TransferDirection::DeviceToDevice,
                    ..
                })
            ),
            "{what}: {result:?}"
        );
    }
    assert_eq!(open.memory_stats().bytes_in_use, open_mem);
    assert_eq!(closed.memory_stats().bytes_in_use, closed_mem);
    assert_eq!(closed.transfer_stats().device_to_device.explicit.count, 0);
    assert_eq!(open.transfer_stats().device_to_device.explicit.count, 0);
    // A scoped guard overrides both contexts' defaults.
    let _allow = TransferGuard::scoped(TransferGuardLevel::Allow);
    let z = closed.device_put_from(&x).unwrap();
    assert_eq!(closed.device_get(&z).unwrap(), data);
    let w = open.device_put_from(&y).unwrap();
    assert_eq!(open.device_get(&w).unwrap(), data);
}

#[gpu_test]
fn a_scoped_guard_binds_only_its_own_thread() {
    let ctx = context_with(ArenaConfig {
        zero_copy: false,
        staging_bytes: MIN_STAGING_BYTES,
        ..test_config()
    });
    let a = ctx.device_put(&[6u16; 5000], &[5000]).unwrap();
    let refused = std::sync::Barrier::new(2);
    std::thread::scope(|scope| {
        let (ctx, a, refused) = (&ctx, &a, &refused);
        scope.spawn(move || {
            let _g = TransferGuard::scoped(TransferGuardLevel::DisallowExplicit);
            for _ in 0..20 {
                assert!(ctx.device_get(a).is_err());
                assert!(ctx.copy(a).is_err());
                assert!(ctx.dynamic_update_slice_copy(a, &[1u16][..], &[0]).is_err());
            }
            refused.wait(); // the guard is still alive while the other thread transfers
        });
        scope.spawn(move || {
            for i in 0..20u16 {
                assert_eq!(a.to_vec().unwrap(), vec![6; 5000]);
                let c = ctx.copy(a).unwrap();
                let c = ctx.dynamic_update_slice(c, &[i][..], &[4999]).unwrap();
                assert_eq!(ctx.device_get(&c).unwrap()[4998..], [6, i]);
            }
            refused.wait();
            assert_eq!(ctx.device_get(a).unwrap(), vec![6; 5000]);
        });
    });
}

#[gpu_test]
fn rank_six_slices_and_updates_with_unit_and_zero_dims_match_the_reference() {
    for (path, ctx) in paths() {
        let mut rng = Rng(66);
        let shape = [2usize, 1, 3, 1, 4, 5];
        let data: Vec<u16> = (0..shape.iter().product::<usize>())
            .map(|_| rng.next_u64() as u16)
            .collect();
        let a = ctx.device_put(&data, &shape).unwrap();
        for sizes in [
            [1usize, 1, 2, 1, 3, 3],
            [2, 1, 3, 1, 4, 5],
            [1, 0, 2, 1, 3, 3],
        ] {
            let start = [1i64, -4, i64::MAX, 0, 2, -1];
            let s = ctx.dynamic_slice(&a, &start, &sizes).unwrap();
            assert_eq!(
                ctx.device_get(&s).unwrap(),
                reference_slice(&data, &shape, &start, &sizes),
                "{path}: {sizes:?}"
            );
            let upd: Vec<u16> = (0..sizes.iter().product::<usize>())
                .map(|i| i as u16 ^ 0x5555)
                .collect();
            let b = ctx.copy(&a).unwrap();
            let b = ctx
                .dynamic_update_slice(b, (&upd[..], &sizes[..]), &start)
                .unwrap();
            assert_eq!(
                ctx.device_get(&b).unwrap(),
                reference_update(&data, &shape, &upd, &sizes, &start),
                "{path}: update {sizes:?}"
            );
        }
        // Zero-sized elements with more elements than any memory holds: nothing to move.
        let huge = ctx.alloc::<()>(&[1, 1 << 62]).unwrap();
        assert_eq!(ctx.device_get(&huge).unwrap().len(), 1 << 62, "{path}");
        let s = ctx.dynamic_slice(&huge, &[0, i64::MAX], &[1, 3]).unwrap();
        assert_eq!(s.len(), 3);
        let huge = ctx.fill_in_place(huge, ()).unwrap();
        assert_eq!(ctx.copy(&huge).unwrap().len(), 1 << 62, "{path}");
    }
}

#[gpu_test]
fn log_levels_log_each_transfer_once_in_its_own_direction_only() {
    use crate::harness::logged_messages_containing;
    let ctx = context_with(ArenaConfig {
        zero_copy: false,
        staging_bytes: MIN_STAGING_BYTES,
        ..test_config()
    });
    // Byte counts no other test moves, so the messages are this test's own.
    let a = ctx.zeros::<u8>(&[20_000]).unwrap();
    let host = vec![1u8; 17_393];
    let a = {
        let _g = TransferGuard::scoped_direction(
            TransferDirection::HostToDevice,
            TransferGuardLevel::Log,
        );
        // Implicit: logged once, though it goes through staging in pieces.
        let a = ctx.dynamic_update_slice(a, &host[..], &[3]).unwrap();
        // Explicit under `log`: passes silently.
        ctx.device_put(&vec![2u8; 17_394], &[17_394]).unwrap();
        // Another direction: not logged.
        assert_eq!(a.to_vec().unwrap()[3..17_396], host[..]);
        a
    };
    let implicit = logged_messages_containing("17393 bytes by dynamic_update_slice (implicit)");
    assert_eq!(implicit.len(), 1, "{implicit:?}");
    assert!(
        implicit[0].starts_with("host-to-device transfer"),
        "{implicit:?}"
    );
    assert!(logged_messages_containing("17394 bytes").is_empty());
    assert!(logged_messages_containing("20000 bytes by DeviceArray::to_vec").is_empty());
    {
        let _g = TransferGuard::scoped_direction(
            TransferDirection::DeviceToHost,
            TransferGuardLevel::LogExplicit,
        );
        assert_eq!(ctx.device_get(&a).unwrap().len(), 20_000);
        ctx.device_put(&vec![3u8; 17_395], &[17_395]).unwrap();
    }
    let explicit = logged_messages_containing("20000 bytes by device_get (explicit)");
    assert_eq!(explicit.len(), 1, "{explicit:?}");
    assert!(logged_messages_containing("17395 bytes").is_empty());
}
