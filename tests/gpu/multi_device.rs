//! Several devices in one process: the device list, contexts on any and all of them with
//! their own arenas, transfers between devices (zero-copy on UMA and through staging, in
//! chunks), the guard's device-to-device level, sharding, refusal of another context's arrays,
//! and contexts outliving each other. CI has one adapter (lavapipe), opened several times; a
//! Mesa GL adapter joins where one is installed.

use crate::harness;
use crate::harness::refusals::assert_pending_in_sequence;
use crate::harness::{context_with, init_logging, test_config, Rng};
use gpu_arena::error::Access;
use gpu_arena::{
    devices, gather, shard, shard_rows, AdapterSelector, ArenaConfig, BackendChoice, Context,
    DeviceArray, Error, TransferGuard, TransferGuardLevel, TransferGuardLevels,
};

/// A configuration that takes the staging path (as a discrete GPU does) with a staging pool
/// of `staging_bytes`, so that larger arrays go in chunks.
fn staging_config(staging_bytes: u64) -> ArenaConfig {
    ArenaConfig {
        zero_copy: false,
        staging_bytes,
        ..test_config()
    }
}

/// A small staging size that is not a multiple of the copy alignment.
const ODD_STAGING_BYTES: u64 = 64 * 1024 + 2;

/// Lengths around the staging size, odd ones included.
fn odd_lengths() -> Vec<usize> {
    let staging = ODD_STAGING_BYTES as usize;
    vec![
        0,
        1,
        3,
        5,
        255,
        4097,
        staging - 1,
        staging + 3,
        3 * staging + 7,
        1 << 20,
    ]
}

/// Device-to-device bytes counted explicit in a context.
fn d2d(ctx: &Context) -> (u64, u64) {
    let stats = ctx.transfer_stats().device_to_device.explicit;
    (stats.count, stats.bytes)
}

#[gpu_test(needs = Vulkan)]
fn devices_lists_the_adapters_in_selection_order_with_the_default_marked() {
    init_logging();
    let config = test_config();
    let list = devices(&config).unwrap();
    assert!(!list.is_empty());
    for (i, device) in list.iter().enumerate() {
        assert_eq!(device.index(), i);
        assert_eq!(device.is_default(), i == 0, "{device}");
        let plan = device
            .memory_plan()
            .expect("lavapipe's table can be planned");
        assert!(plan.heap_bytes > 0 && plan.reservable_bytes > 0, "{plan:?}");
        assert_eq!(device.name(), device.adapter_info().name);
        let line = device.to_string();
        assert!(
            line.starts_with(&format!("{i}: {}", device.name())),
            "{line}"
        );
        // Backend and kind in words, as the memory table's schema writes them.
        let kind = device.device_description().device_kind.name();
        assert!(
            line.contains(&format!(", {}, {kind}); ", device.backend())),
            "{line}"
        );
        assert!(!line.contains("Cpu") && !line.contains("Vulkan"), "{line}");
        // Sizes in the unit that fits, as every byte count for people.
        let sizes = format!(
            "of a {} heap, {} reservable",
            gpu_arena::arena::Bytes(plan.heap_bytes),
            gpu_arena::arena::Bytes(plan.reservable_bytes)
        );
        assert!(line.contains(&sizes), "{line}");
    }
    assert!(list[0].to_string().ends_with("[default]"));
    // Auto lists Vulkan adapters first (here: only them, as lavapipe is Vulkan).
    assert_eq!(list[0].backend(), wgpu::Backend::Vulkan);
    // Context::new opens the default; its plan is the one listed.
    let ctx = Context::new(config.clone()).unwrap();
    assert_eq!(ctx.adapter_info().name, list[0].name());
    assert_eq!(
        ctx.memory_plan().arena_type,
        list[0].memory_plan().unwrap().arena_type
    );
    // GPU_ARENA_ADAPTER's index numbers the same list.
    let last = list.len() - 1;
    let chosen = devices(&ArenaConfig {
        adapter: Some(AdapterSelector::Index(last)),
        ..config.clone()
    })
    .unwrap();
    assert!(chosen[last].is_default());
    assert_eq!(chosen.iter().filter(|d| d.is_default()).count(), 1);
    let by_name = devices(&ArenaConfig {
        adapter: Some(AdapterSelector::NameContains(
            list[last].name().to_uppercase(),
        )),
        ..config.clone()
    })
    .unwrap();
    assert!(by_name
        .iter()
        .any(|d| d.is_default() && d.name() == list[last].name()));
}

#[gpu_test]
fn a_selector_that_matches_no_device_is_refused_with_the_list() {
    init_logging();
    for selector in [
        AdapterSelector::Index(99),
        AdapterSelector::NameContains("no such gpu".into()),
    ] {
        let config = ArenaConfig {
            adapter: Some(selector),
            ..test_config()
        };
        let err = devices(&config).unwrap_err();
        assert!(matches!(err, Error::AdapterNotFound { .. }), "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains("0: ") && msg.contains("GPU_ARENA_ADAPTER"),
            "{msg}"
        );
        let err = Context::open_all(config).unwrap_err();
        assert!(matches!(err, Error::AdapterNotFound { .. }), "{err}");
    }
}

#[gpu_test]
fn a_staging_size_of_zero_or_beyond_the_device_is_refused_at_open() {
    init_logging();
    let list = devices(&test_config()).unwrap();
    for staging_bytes in [0, u64::MAX] {
        let config = ArenaConfig {
            staging_bytes,
            ..test_config()
        };
        let err = Context::on_device(&list[0], config.clone()).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::Config { .. }), "{msg}");
        assert!(
            msg.contains("GPU_ARENA_STAGING_MB") && msg.contains("max_buffer_size"),
            "{msg}"
        );
        assert!(Context::new(config).is_err());
    }
}

/// The largest staging size a refusal names opens a context: the device's `max_buffer_size`
/// rounded down to whole words (lavapipe's is 2^31 - 1, between two words).
#[gpu_test]
fn the_largest_staging_size_a_refusal_names_is_accepted() {
    let list = devices(&test_config()).unwrap();
    let max = Context::on_device(&list[0], test_config())
        .unwrap()
        .limits()
        .max_buffer_size;
    let config = |staging_bytes| ArenaConfig {
        staging_bytes,
        ..test_config()
    };
    let Err(Error::Config { expected, .. }) = Context::on_device(&list[0], config(max + 1)) else {
        panic!("a staging size above max_buffer_size opened a context");
    };
    let named: u64 = expected
        .strip_prefix("at most ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no size in {expected:?}"));
    assert_eq!(named, max - max % 4, "{expected}");
    let ctx = Context::on_device(&list[0], config(named)).unwrap();
    assert_eq!(ctx.config().staging_bytes, named);
    if named < max {
        assert!(Context::on_device(&list[0], config(named + 1)).is_err());
    }
}

/// A context on a given device ignores the configuration's choice of adapter, a blank name
/// included (which `devices` and `Context::new` refuse), on two threads at once.
#[gpu_test]
fn a_context_on_a_given_device_ignores_the_adapter_it_is_configured_with() {
    init_logging();
    let list = devices(&test_config()).unwrap();
    let blank = ArenaConfig {
        adapter: Some(gpu_arena::AdapterSelector::NameContains("  ".into())),
        ..test_config()
    };
    assert!(matches!(
        Context::new(blank.clone()),
        Err(Error::Config { .. })
    ));
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                let ctx = Context::on_device(&list[0], blank.clone()).unwrap();
                let x = ctx.device_put(&[3u32; 8], &[8]).unwrap();
                assert_eq!(ctx.device_get(&x).unwrap(), [3; 8]);
            });
        }
    });
    // Everything else is still checked.
    let bad = ArenaConfig {
        staging_bytes: 0,
        ..blank
    };
    assert!(matches!(
        Context::on_device(&list[0], bad),
        Err(Error::Config { .. })
    ));
}

#[gpu_test(needs = Vulkan)]
fn contexts_on_one_device_have_their_own_arena_stats_and_staging() {
    init_logging();
    let config = staging_config(ODD_STAGING_BYTES);
    let list = devices(&config).unwrap();
    let a = Context::on_device(&list[0], config.clone()).unwrap();
    let b = Context::on_device(&list[0], config.clone()).unwrap();
    let all = Context::open_all(config).unwrap();
    assert_eq!(all.len(), list.len());
    // Opening reserves nothing; reserving one reserves nothing on the others.
    a.reserve().unwrap();
    assert!(a.memory_stats().bytes_reserved > 0);
    for other in std::iter::once(&b).chain(&all) {
        assert_eq!(other.memory_stats().bytes_reserved, 0);
    }
    let x = a.device_put(&vec![7u8; 300_000], &[300_000]).unwrap();
    assert_eq!(a.memory_stats().num_allocs, 1);
    assert_eq!(b.memory_stats().num_allocs, 0);
    assert_eq!(a.transfer_stats().host_to_device.explicit.bytes, 300_000);
    assert_eq!(b.transfer_stats().host_to_device.explicit.bytes, 0);
    assert!(a.staging_buffers_created().0 > 0);
    assert_eq!(b.staging_buffers_created(), (0, 0));
    // Each context numbers itself in messages.
    let y = b.device_put_from(&x).unwrap();
    assert_eq!(b.memory_stats().num_allocs, 1);
    assert_eq!(b.device_get(&y).unwrap(), vec![7u8; 300_000]);
}

/// Checks that `data` survives a -> b -> a, and that both sides counted each move.
fn round_trip_between(a: &Context, b: &Context, data: &[u8], label: &str) {
    let shape = [data.len()];
    let x = a.device_put(data, &shape).unwrap();
    let (a_before, b_before) = (d2d(a), d2d(b));
    let on_b = b.device_put_from(&x).unwrap();
    assert_eq!(on_b.shape(), shape);
    assert!(
        b.device_get(&on_b).unwrap() == data,
        "{label}: a -> b, {} bytes",
        data.len()
    );
    let back = on_b.copy_to(a).unwrap();
    assert!(
        a.device_get(&back).unwrap() == data,
        "{label}: b -> a, {} bytes",
        data.len()
    );
    let n = data.len() as u64;
    assert_eq!(d2d(a), (a_before.0 + 2, a_before.1 + 2 * n), "{label}");
    assert_eq!(d2d(b), (b_before.0 + 2, b_before.1 + 2 * n), "{label}");
}

#[gpu_test]
fn arrays_move_between_devices_both_ways_at_odd_sizes_on_every_path() {
    init_logging();
    let mapped = || context_with(test_config());
    let staged = || context_with(staging_config(ODD_STAGING_BYTES));
    let pairs = [
        ("mapped -> mapped", mapped(), mapped()),
        ("staged -> staged", staged(), staged()),
        ("mapped -> staged", mapped(), staged()),
        ("staged -> mapped", staged(), mapped()),
    ];
    let mut rng = Rng(17);
    for (label, a, b) in &pairs {
        for len in odd_lengths() {
            round_trip_between(a, b, &rng.bytes(len), label);
        }
        // The pools did not grow with the number of chunks.
        for ctx in [a, b] {
            let (up, down) = ctx.staging_buffers_created();
            assert!(
                up <= 3 && down <= 3,
                "{label}: {up} / {down} staging buffers"
            );
        }
    }
    // Element types other than bytes keep their shape and values.
    let (_, a, b) = &pairs[1];
    let values: Vec<f64> = (0..30_001).map(|i| i as f64 * 0.25 - 7.0).collect();
    let x = a.device_put(&values, &[1, 30_001]).unwrap();
    let y = x.copy_to(b).unwrap();
    assert_eq!(y.shape(), [1, 30_001]);
    assert_eq!(b.device_get(&y).unwrap(), values);
    // Empty arrays move too, and count as a transfer of 0 bytes.
    let empty = a.device_put::<u32>(&[], &[0, 4]).unwrap();
    let before = d2d(b);
    let moved = b.device_put_from(&empty).unwrap();
    assert_eq!(moved.shape(), [0, 4]);
    assert_eq!(d2d(b), (before.0 + 1, before.1));
}

#[gpu_test(needs = Vulkan)]
fn transfers_between_devices_flush_and_invalidate_non_coherent_memory() {
    init_logging();
    let forced = |zero_copy: bool| {
        context_with(ArenaConfig {
            force_non_coherent: true,
            zero_copy,
            staging_bytes: ODD_STAGING_BYTES,
            ..test_config()
        })
    };
    let pairs = [
        (
            "non-coherent staged -> staged",
            forced(false),
            forced(false),
        ),
        ("non-coherent mapped -> staged", forced(true), forced(false)),
        ("non-coherent staged -> mapped", forced(false), forced(true)),
        ("non-coherent mapped -> mapped", forced(true), forced(true)),
    ];
    let mut rng = Rng(29);
    for (label, a, b) in &pairs {
        for len in [1usize, 63, 65, 4099, 3 * ODD_STAGING_BYTES as usize + 7] {
            let data = rng.bytes(len);
            let x = a.device_put(&data, &[len]).unwrap();
            let (a_before, b_before) = (a.host_sync_counts(), b.host_sync_counts());
            let y = b.device_put_from(&x).unwrap();
            let (a_after, b_after) = (a.host_sync_counts(), b.host_sync_counts());
            assert!(a_after.invalidates > a_before.invalidates, "{label}: {len}");
            assert!(b_after.flushes > b_before.flushes, "{label}: {len}");
            assert!(b.device_get(&y).unwrap() == data, "{label}: {len} bytes");
        }
    }
}

#[gpu_test]
fn a_copy_to_another_device_sees_the_source_devices_finished_work() {
    init_logging();
    const DOUBLE: &str = "@group(0) @binding(0) var<storage, read_write> a: array<u32>;
        @compute @workgroup_size(64) fn main(@builtin(global_invocation_id) i: vec3<u32>) {
            if (i.x < arrayLength(&a)) { a[i.x] = a[i.x] * 2u + 1u; } }";
    for (a, b) in [
        (context_with(test_config()), context_with(test_config())),
        (
            context_with(staging_config(ODD_STAGING_BYTES)),
            context_with(staging_config(ODD_STAGING_BYTES)),
        ),
    ] {
        let k = a.kernel(DOUBLE, "main").unwrap();
        let n = 100_003;
        let host: Vec<u32> = (0..n as u32).collect();
        let mut x = a.device_put(&host, &[n]).unwrap();
        for _ in 0..3 {
            a.launch(&k)
                .arg_mut(&mut x)
                .grid_for(n as u64)
                .run()
                .unwrap();
        }
        // No synchronize: the transfer must wait for the launches itself.
        let y = x.copy_to(&b).unwrap();
        let expected: Vec<u32> = host.iter().map(|v| ((v * 2 + 1) * 2 + 1) * 2 + 1).collect();
        assert_eq!(b.device_get(&y).unwrap(), expected);
        // Work on the copy on b runs after the copy landed.
        let kb = b.kernel(DOUBLE, "main").unwrap();
        let mut y = y;
        b.launch(&kb)
            .arg_mut(&mut y)
            .grid_for(n as u64)
            .run()
            .unwrap();
        let again: Vec<u32> = expected.iter().map(|v| v * 2 + 1).collect();
        assert_eq!(b.device_get(&y).unwrap(), again);
    }
}

#[gpu_test]
fn the_guard_device_to_device_level_of_either_context_can_refuse_a_transfer() {
    init_logging();
    let a = context_with(test_config());
    let b = context_with(test_config());
    let x = a.device_put(&[1u32, 2, 3], &[3]).unwrap();
    let check_refused = |err: Error, ctx_b: &Context| {
        let msg = err.to_string();
        assert!(matches!(err, Error::TransferGuard { .. }), "{msg}");
        assert!(
            msg.contains("device-to-device") && msg.contains("12 bytes"),
            "{msg}"
        );
        assert!(
            msg.contains("device_put_from") && msg.contains("explicit"),
            "{msg}"
        );
        assert_eq!(ctx_b.memory_stats().num_allocs, 0, "nothing allocated");
    };
    {
        // disallow refuses implicit transfers only: a device-to-device put is explicit.
        let _g = TransferGuard::scoped(TransferGuardLevel::Disallow);
        let y = b.device_put_from(&x).unwrap();
        assert_eq!(b.device_get(&y).unwrap(), [1, 2, 3]);
    }
    let (a_before, b_before) = (d2d(&a), d2d(&b));
    let fresh = context_with(test_config());
    {
        let _g = TransferGuard::scoped_direction(
            gpu_arena::TransferDirection::DeviceToDevice,
            TransferGuardLevel::DisallowExplicit,
        );
        check_refused(fresh.device_put_from(&x).unwrap_err(), &fresh);
        check_refused(x.copy_to(&fresh).unwrap_err(), &fresh);
        // Other directions are untouched by a device-to-device guard.
        assert_eq!(a.device_get(&x).unwrap(), [1, 2, 3]);
    }
    assert_eq!((d2d(&a), d2d(&b)), (a_before, b_before));
    // A context's own default level refuses, whichever side it is on.
    let strict = context_with(ArenaConfig {
        transfer_guard: TransferGuardLevels {
            device_to_device: TransferGuardLevel::DisallowExplicit,
            ..TransferGuardLevels::default()
        },
        ..test_config()
    });
    check_refused(strict.device_put_from(&x).unwrap_err(), &strict);
    let own = strict.device_put(&[1u32, 2, 3], &[3]).unwrap();
    let err = fresh.device_put_from(&own).unwrap_err();
    check_refused(err, &fresh);
    // Log levels let it through.
    let _g = TransferGuard::scoped(TransferGuardLevel::LogExplicit);
    let y = fresh.device_put_from(&own).unwrap();
    assert_eq!(fresh.device_get(&y).unwrap(), [1, 2, 3]);
}

#[gpu_test]
fn a_copy_within_one_context_is_a_device_copy() {
    let a = harness::context();
    let x = a.device_put(&[5u16; 9], &[3, 3]).unwrap();
    let y = a.device_put_from(&x).unwrap();
    assert_eq!(y.shape(), [3, 3]);
    assert_eq!(a.device_get(&y).unwrap(), [5u16; 9]);
    assert_eq!(d2d(&a), (1, 18));
}

/// An array an unsubmitted sequence writes is not copied to another device; one it only reads
/// is (the copy reads it too: readers never refuse readers).
#[gpu_test]
fn an_array_in_an_unsubmitted_sequence_is_not_copied_to_another_device() {
    let a = harness::context();
    let b = harness::context();
    let mut s = a.sequence();
    let read = a.device_put(&[2.0f32; 16], &[16]).unwrap();
    let _copy = s.copy(&read).unwrap();
    let on_b = b.device_put_from(&read).unwrap();
    assert_eq!(b.device_get(&on_b).unwrap(), [2.0; 16]);
    let x = s.put(&[1.0f32; 16], &[16]).unwrap();
    let err = b.device_put_from(&x).unwrap_err();
    assert_pending_in_sequence(
        &err,
        "device_put_from",
        "the array",
        Access::Write,
        Access::Read,
    );
    s.submit().unwrap();
    let y = b.device_put_from(&x).unwrap();
    assert_eq!(b.device_get(&y).unwrap(), [1.0; 16]);
}

#[gpu_test]
fn shard_rows_splits_like_array_split() {
    assert_eq!(shard_rows(10, 3), [0..4, 4..7, 7..10]);
    assert_eq!(shard_rows(9, 3), [0..3, 3..6, 6..9]);
    assert_eq!(shard_rows(2, 4), [0..1, 1..2, 2..2, 2..2]);
    assert_eq!(shard_rows(0, 2), [0..0, 0..0]);
    assert!(shard_rows(5, 0).next().is_none());
    for rows in 0..40 {
        for shards in 1..7 {
            let ranges: Vec<_> = shard_rows(rows, shards).collect();
            assert_eq!(shard_rows(rows, shards).len(), shards);
            assert_eq!(ranges.last().unwrap().end, rows);
            let lens: Vec<usize> = ranges.iter().map(|r| r.len()).collect();
            assert!(lens.iter().max().unwrap() - lens.iter().min().unwrap() <= 1);
            assert!(ranges.windows(2).all(|w| w[0].end == w[1].start));
        }
    }
}

#[gpu_test]
fn sharding_round_trips_across_devices() {
    init_logging();
    let a = context_with(test_config());
    let b = context_with(staging_config(ODD_STAGING_BYTES));
    let contexts = [a.clone(), b.clone(), a.clone()];
    let data: Vec<f32> = (0..10 * 3 * 2).map(|i| i as f32).collect();
    let shards = shard(&contexts, &data, &[10, 3, 2]).unwrap();
    let shapes: Vec<&[usize]> = shards.iter().map(|s| s.shape()).collect();
    assert_eq!(shapes, [&[4, 3, 2][..], &[3, 3, 2], &[3, 3, 2]]);
    assert_eq!(a.device_get(&shards[2]).unwrap(), &data[42..]);
    assert_eq!(b.device_get(&shards[1]).unwrap(), &data[24..42]);
    assert_eq!(a.memory_stats().num_allocs, 2);
    assert_eq!(b.memory_stats().num_allocs, 1);
    let (back, shape) = gather(&contexts, &shards).unwrap();
    assert_eq!((back, shape), (data.clone(), vec![10, 3, 2]));
    // One device_get_many per device: a's two shards in one call.
    assert_eq!(a.transfer_stats().device_to_host.explicit.count, 1 + 2);
    // More devices than rows: empty shards, still gathered in order.
    let few = shard(&contexts, &data[..6], &[1, 6]).unwrap();
    assert_eq!(
        few.iter().map(|s| s.shape()[0]).collect::<Vec<_>>(),
        [1, 0, 0]
    );
    assert_eq!(
        gather(&contexts, &few).unwrap(),
        (data[..6].to_vec(), vec![1, 6])
    );
    // Rank 1 and one device.
    let one = shard(&contexts[..1], &data, &[60]).unwrap();
    assert_eq!(
        gather(&contexts[..1], &one).unwrap(),
        (data.clone(), vec![60])
    );
}

#[gpu_test]
fn zero_size_arrays_of_any_shape_move_between_devices_keeping_their_shape() {
    let a = harness::context();
    let b = harness::context();
    for shape in [vec![0usize], vec![4, 0, 3], vec![1 << 62, 0]] {
        let x = a.alloc::<u8>(&shape).unwrap();
        let on_b = b.device_put_from(&x).unwrap();
        assert_eq!(on_b.shape(), shape.as_slice());
        assert!(b.device_get(&on_b).unwrap().is_empty());
        let back = on_b.copy_to(&a).unwrap();
        assert_eq!(back.shape(), shape.as_slice());
    }
}

#[gpu_test]
fn sharding_refuses_bad_shapes_context_lists_and_foreign_shards() {
    let a = harness::context();
    let b = harness::context();
    let data = [1u32; 12];
    let contexts = [a.clone(), b.clone()];
    let message = |err: Error| err.to_string();
    assert!(message(shard(&contexts, &data, &[5, 2]).unwrap_err()).contains("holds 10"));
    assert!(message(shard(&contexts, &data[..1], &[]).unwrap_err()).contains("leading axis"));
    assert!(message(shard::<u32>(&[], &data, &[12]).unwrap_err()).contains("no contexts"));
    assert_eq!(a.memory_stats().num_allocs, 0, "nothing uploaded");
    let shards = shard(&contexts, &data, &[6, 2]).unwrap();
    let err = gather(&contexts[..1], &shards).unwrap_err();
    assert!(message(err).contains("1 context for 2 shards"));
    assert!(message(gather::<u32>(&[], &[]).unwrap_err()).contains("no contexts"));
    // Shards in the wrong places: each names both devices.
    let swapped = [b.clone(), a.clone()];
    let err = gather(&swapped, &shards).unwrap_err();
    assert!(matches!(err, Error::ForeignArray { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("gather") && msg.matches("context ").count() >= 2,
        "{msg}"
    );
    // Trailing dimensions that differ, and rank 0.
    let odd: Vec<DeviceArray<u32>> = vec![
        a.device_put(&[1, 2], &[1, 2]).unwrap(),
        b.device_put(&[1, 2, 3], &[1, 3]).unwrap(),
    ];
    assert!(message(gather(&contexts, &odd).unwrap_err()).contains("shard 1 has shape [1, 3]"));
    let scalar = vec![a.device_put(&[1u32], &[]).unwrap()];
    assert!(message(gather(&contexts[..1], &scalar).unwrap_err()).contains("rank 1 or more"));
    // Zero-size shards whose leading dimensions add up past usize::MAX: an error, no overflow.
    let huge: Vec<DeviceArray<u8>> = (0..4)
        .map(|_| a.zeros::<u8>(&[1 << 62, 0]).unwrap())
        .collect();
    let four = [a.clone(), a.clone(), a.clone(), a.clone()];
    assert!(message(gather(&four, &huge).unwrap_err()).contains("more than usize::MAX rows"));
    assert_eq!(
        a.transfer_stats().device_to_host.explicit.count,
        0,
        "nothing read"
    );
}

/// A guard that refuses on the second device refuses `shard` and `gather` before anything
/// moves: the first device uploads, reads and counts nothing.
#[gpu_test]
fn a_guard_refusal_on_a_later_device_moves_nothing_on_an_earlier_one() {
    let a = harness::context();
    let strict = |direction: fn(&mut TransferGuardLevels) -> &mut TransferGuardLevel| {
        let mut levels = TransferGuardLevels::default();
        *direction(&mut levels) = TransferGuardLevel::DisallowExplicit;
        context_with(ArenaConfig {
            transfer_guard: levels,
            ..test_config()
        })
    };
    let data = [7u32; 8];
    let no_uploads = strict(|l| &mut l.host_to_device);
    let err = shard(&[a.clone(), no_uploads], &data, &[4, 2]).unwrap_err();
    assert!(
        matches!(
            err,
            Error::TransferGuard {
                operation: "shard",
                bytes: 16,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        a.memory_stats().num_allocs,
        0,
        "nothing uploaded to the first"
    );
    assert_eq!(a.transfer_stats(), Default::default());
    let no_reads = strict(|l| &mut l.device_to_host);
    let contexts = [a.clone(), no_reads.clone(), a.clone()];
    let shards = vec![
        a.device_put(&[1u32, 2], &[1, 2]).unwrap(),
        no_reads.device_put(&[3u32, 4], &[1, 2]).unwrap(),
        a.device_put(&[5u32, 6], &[1, 2]).unwrap(),
    ];
    let before = a.transfer_stats();
    let err = gather(&contexts, &shards).unwrap_err();
    assert!(
        matches!(
            err,
            Error::TransferGuard {
                operation: "gather",
                bytes: 8,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(a.transfer_stats(), before, "nothing read from the first");
}

/// `shard` takes every shard's memory before any batch goes out: out of memory on a later
/// device counts no transfer on an earlier one and leaves it holding what it held; a device
/// holding several shards uploads them in one batch.
#[gpu_test]
fn shard_takes_every_shards_memory_before_it_uploads_in_one_batch_per_device() {
    use gpu_arena::profile::TimelineEventKind as Kind;
    let a = context_with(ArenaConfig {
        timeline_capacity: 1024,
        ..test_config()
    });
    let heap = a.memory_plan().heap_bytes;
    let small = context_with(ArenaConfig {
        mem_fraction: gpu_arena::MemFraction::fixed((1 << 20) as f64 / heap as f64),
        ..test_config()
    });
    let _held = (
        a.zeros::<u8>(&[1]).unwrap(),
        small.zeros::<u8>(&[1]).unwrap(),
    );
    let transfers = |ctx: &Context| {
        let events = ctx.memory_timeline().unwrap().events;
        let arrays = events.iter().filter_map(|e| match e.kind {
            Kind::Transfer { arrays, .. } => Some(arrays),
            _ => None,
        });
        arrays.collect::<Vec<_>>()
    };
    let (stats, in_use) = (a.transfer_stats(), a.memory_stats().bytes_in_use);
    let data = vec![1.0f32; 1 << 20]; // two shards of 2 MiB, one more than `small` holds
    let err = shard(&[a.clone(), small.clone()], &data, &[2, 1 << 19]).unwrap_err();
    assert!(matches!(err, Error::OutOfMemory { .. }), "{err}");
    assert_eq!(
        a.transfer_stats(),
        stats,
        "nothing uploaded to the first device"
    );
    assert_eq!(transfers(&a), [0u64; 0]);
    a.synchronize().unwrap();
    assert_eq!(a.memory_stats().bytes_in_use, in_use, "its shard freed");
    let three = shard(&[a.clone(), small.clone(), a.clone()], &data[..6], &[3, 2]).unwrap();
    assert_eq!(transfers(&a), [2], "one batch of two shards");
    let (back, _) = gather(&[a.clone(), small.clone(), a.clone()], &three).unwrap();
    assert_eq!(back, &data[..6]);
}

/// Two threads shard and gather over the same devices at once, one of them reading the same
/// shards over and over: each gets its own rows back, and every shard's upload and read is
/// counted once on its device.
#[gpu_test]
fn two_threads_shard_and_gather_over_the_same_devices_each_get_their_own_rows() {
    let (a, b) = (harness::context(), harness::context());
    let contexts = [a.clone(), b.clone(), a.clone()];
    let shared_data: Vec<u32> = (0..12).collect();
    let shared = shard(&contexts, &shared_data, &[3, 4]).unwrap();
    let before = (a.transfer_stats(), b.transfer_stats());
    const ROUNDS: u64 = 8;
    std::thread::scope(|scope| {
        let readers = scope.spawn(|| {
            for _ in 0..ROUNDS {
                let (back, shape) = gather(&contexts, &shared).unwrap();
                assert_eq!((back, shape), (shared_data.clone(), vec![3, 4]));
            }
        });
        for round in 0..ROUNDS as u32 {
            let data: Vec<u32> = (0..12).map(|i| i * 100 + round).collect();
            let shards = shard(&contexts, &data, &[3, 4]).unwrap();
            assert_eq!(gather(&contexts, &shards).unwrap().0, data);
        }
        readers.join().unwrap();
    });
    // Each round on each thread reads every shard, and the writer uploads them: `a` holds two
    // shards of 16 bytes, `b` one.
    for (ctx, then, shards) in [(&a, before.0, 2), (&b, before.1, 1)] {
        let now = ctx.transfer_stats();
        let moved = |now: gpu_arena::transfer::DirectionStats,
                     then: gpu_arena::transfer::DirectionStats| {
            let (now, then) = (now.explicit, then.explicit);
            (now.count - then.count, now.bytes - then.bytes)
        };
        let reads = 2 * shards * ROUNDS;
        assert_eq!(
            moved(now.device_to_host, then.device_to_host),
            (reads, reads * 16)
        );
        let uploads = shards * ROUNDS;
        assert_eq!(
            moved(now.host_to_device, then.host_to_device),
            (uploads, uploads * 16)
        );
    }
}

/// A copy to a device whose loss its context knows refuses with `DeviceLost` before it asks
/// either guard or looks at a pending source, as every call does then.
#[gpu_test]
fn a_copy_to_a_lost_device_says_the_loss_before_the_guard_or_a_pending_source() {
    let a = harness::context();
    let b = context_with(ArenaConfig {
        transfer_guard: TransferGuardLevels {
            device_to_device: TransferGuardLevel::DisallowExplicit,
            ..TransferGuardLevels::default()
        },
        ..test_config()
    });
    let x = a.device_put(&[1.0f32; 16], &[16]).unwrap();
    let mut recording = a.sequence();
    let pending = recording.put(&[2.0f32; 16], &[16]).unwrap();
    b.device_lost_notifier()
        .notify(wgpu::DeviceLostReason::Unknown, "lost by the test");
    let results = [
        ("device_put_from", b.device_put_from(&x).err()),
        ("copy_to", x.copy_to(&b).err()),
        ("a pending source", b.device_put_from(&pending).err()),
    ];
    for (what, result) in results {
        assert!(
            matches!(result, Some(Error::DeviceLost { .. })),
            "{what}: {result:?}"
        );
    }
    drop(recording);
}

/// `shard` and `gather` over a lost device refuse with `DeviceLost` whichever place it holds,
/// before they look at their shapes or ask any device's guard.
#[gpu_test]
fn shard_and_gather_over_a_lost_device_say_the_loss_first() {
    let (a, b) = (harness::context(), harness::context());
    let shards = shard(&[a.clone(), b.clone()], &[1u32, 2, 3, 4], &[2, 2]).unwrap();
    let odd = a.device_put(&[5u32; 3], &[3]).unwrap();
    b.device_lost_notifier()
        .notify(wgpu::DeviceLostReason::Unknown, "lost by the test");
    let _guard = TransferGuard::scoped(TransferGuardLevel::DisallowExplicit);
    let before = a.transfer_stats();
    let results = [
        (
            "shard",
            shard(&[a.clone(), b.clone()], &[1u32; 4], &[2, 2]).err(),
        ),
        (
            "shard, a bad shape",
            shard(&[a.clone(), b.clone()], &[1u32; 4], &[3]).err(),
        ),
        ("gather", gather(&[a.clone(), b.clone()], &shards).err()),
        (
            "gather, shards of other shapes",
            gather(
                &[a.clone(), b.clone()],
                &[odd, shards.into_iter().nth(1).unwrap()],
            )
            .err(),
        ),
    ];
    for (what, result) in results {
        assert!(
            matches!(result, Some(Error::DeviceLost { .. })),
            "{what}: {result:?}"
        );
    }
    assert_eq!(
        a.transfer_stats(),
        before,
        "nothing moved on the healthy device"
    );
}

/// Asserts that `result` is the refusal of an array of context `array_ctx` by an operation of
/// `op_ctx`, naming the operation and both devices.
fn assert_foreign<T>(result: Result<T, Error>, operation: &str) {
    let Err(err) = result else {
        panic!("{operation}: another context's array was accepted");
    };
    let msg = err.to_string();
    assert!(
        matches!(err, Error::ForeignArray { .. }),
        "{operation}: {msg}"
    );
    assert!(msg.starts_with(operation), "{msg}");
    assert!(msg.matches("context ").count() >= 2, "{msg}");
}

#[gpu_test]
fn every_operation_refuses_arrays_of_another_context_naming_both_devices() {
    init_logging();
    let a = context_with(test_config());
    let b = context_with(test_config());
    let ours = a.device_put(&[1.0f32; 8], &[2, 4]).unwrap();
    let mut theirs = b.device_put(&[2.0f32; 8], &[2, 4]).unwrap();
    assert_foreign(a.device_get(&theirs), "device_get");
    assert_foreign(a.device_get_many(&[&ours, &theirs]), "device_get_many");
    assert_foreign(a.copy(&theirs), "copy");
    assert_foreign(a.dynamic_slice(&theirs, &[0, 0], &[1, 4]), "dynamic_slice");
    let donated = a
        .dynamic_update_slice(a.zeros::<f32>(&[2, 4]).unwrap(), &theirs, &[0, 0])
        .unwrap_err();
    assert_foreign::<()>(Err(donated.error), "dynamic_update_slice");
    let donated = a
        .dynamic_update_slice(b.zeros::<f32>(&[2, 4]).unwrap(), &ours, &[0, 0])
        .unwrap_err();
    assert_foreign::<()>(Err(donated.error), "dynamic_update_slice");
    assert_foreign(
        a.dynamic_update_slice_copy(&theirs, &ours, &[0, 0]),
        "dynamic_update_slice_copy",
    );
    assert_foreign(
        a.dynamic_update_slice_copy(&ours, &theirs, &[0, 0]),
        "dynamic_update_slice_copy",
    );
    let donated = a
        .fill_in_place(b.zeros::<f32>(&[4]).unwrap(), 1.0)
        .unwrap_err();
    assert_foreign::<()>(Err(donated.error), "fill_in_place");
    // Kernels: arrays, views and the kernel itself.
    let k = a
        .kernel(
            "@group(0) @binding(0) var<storage, read> x: array<f32>;
             @group(0) @binding(1) var<storage, read_write> y: array<f32>;
             @compute @workgroup_size(64) fn main(@builtin(global_invocation_id) i: vec3<u32>) {
                 if (i.x < arrayLength(&y)) { y[i.x] = x[i.x]; } }",
            "main",
        )
        .unwrap();
    let mut out = a.zeros::<f32>(&[2, 4]).unwrap();
    assert_foreign(
        a.launch(&k)
            .arg(&theirs)
            .arg_mut(&mut out)
            .grid_for(8)
            .run(),
        "launch",
    );
    // Rows of 64 bytes: views that meet every device's offset alignment.
    let wide = b.zeros::<f32>(&[2, 16]).unwrap();
    let mut out_wide = a.zeros::<f32>(&[2, 16]).unwrap();
    let row = wide.view(&[1]).unwrap();
    let mut out_row = out_wide.view_mut(&[0]).unwrap();
    assert_foreign(
        a.launch(&k)
            .arg(&row)
            .arg_mut(&mut out_row)
            .grid_for(16)
            .run(),
        "launch",
    );
    let mut out_b = b.zeros::<f32>(&[2, 4]).unwrap();
    assert_foreign(
        b.launch(&k)
            .arg(&theirs)
            .arg_mut(&mut out_b)
            .grid_for(8)
            .run(),
        "launch",
    );
    // Recorded ops.
    let mut s = a.sequence();
    assert_foreign(s.copy(&theirs), "copy");
    assert_foreign(s.dynamic_slice(&theirs, &[0, 0], &[1, 4]), "dynamic_slice");
    let donated = s
        .dynamic_update_slice(b.zeros::<f32>(&[2, 4]).unwrap(), &ours, &[0, 0])
        .unwrap_err();
    assert_foreign::<()>(Err(donated.error), "dynamic_update_slice");
    let donated = s
        .dynamic_update_slice(a.zeros::<f32>(&[2, 4]).unwrap(), &theirs, &[0, 0])
        .unwrap_err();
    assert_foreign::<()>(Err(donated.error), "dynamic_update_slice");
    assert_foreign(
        s.dynamic_update_slice_copy(&ours, &theirs, &[0, 0]),
        "dynamic_update_slice_copy",
    );
    assert_foreign(
        s.launch(&k)
            .arg(&ours)
            .arg_mut(&mut theirs)
            .grid_for(8)
            .run(),
        "launch",
    );
    s.submit().unwrap();
    // Hand-built submissions.
    let encoder = a.device().create_command_encoder(&Default::default());
    assert_foreign(
        a.raw_submit([encoder.finish()], &[&ours, &theirs]),
        "raw_submit",
    );
    // Gathering a shard where another device's belongs.
    assert_foreign(
        gather(std::slice::from_ref(&a), std::slice::from_ref(&theirs)),
        "gather",
    );
    // Nothing was used on either side.
    assert_eq!(a.device_get(&ours).unwrap(), [1.0; 8]);
    assert_eq!(b.device_get(&theirs).unwrap(), [2.0; 8]);
}

#[gpu_test]
fn dropping_one_context_leaves_the_other_working() {
    init_logging();
    for config in [test_config(), staging_config(ODD_STAGING_BYTES)] {
        let a = context_with(config.clone());
        let b = context_with(config.clone());
        let data: Vec<u32> = (0..200_001).collect();
        let x = a.device_put(&data, &[data.len()]).unwrap();
        let on_b = x.copy_to(&b).unwrap();
        // Drop a entirely: its arrays, then the context.
        drop(x);
        drop(a);
        assert_eq!(b.device_get(&on_b).unwrap(), data);
        let copied = b.copy(&on_b).unwrap();
        assert_eq!(b.device_get(&copied).unwrap(), data);
        // A new context gets b's arrays.
        let c = context_with(config);
        let on_c = c.device_put_from(&copied).unwrap();
        drop(b);
        drop(copied);
        drop(on_b);
        assert_eq!(c.device_get(&on_c).unwrap(), data);
        assert_eq!(c.memory_stats().num_allocs, 1);
    }
}

#[gpu_test]
fn lavapipe_and_gl_exchange_arrays_where_gl_is_present() {
    init_logging();
    let gl_config = ArenaConfig {
        backend: BackendChoice::Gl,
        ..test_config()
    };
    let gl_devices = match devices(&gl_config) {
        Ok(list) => list,
        Err(Error::NoAdapter { .. }) => {
            crate::harness::skip(crate::harness::Need::GlAdapter);
            return;
        }
        Err(other) => panic!("{other}"),
    };
    assert!(gl_devices.iter().all(|d| d.backend() == wgpu::Backend::Gl));
    let gl = match Context::on_device(&gl_devices[0], gl_config) {
        Ok(ctx) => ctx,
        Err(err) => {
            eprintln!("the GL adapter did not open ({err}): only Vulkan contexts were tested");
            return;
        }
    };
    assert!(!gl.is_vulkan());
    let vk = context_with(staging_config(ODD_STAGING_BYTES));
    let mapped = context_with(test_config());
    let mut rng = Rng(23);
    for len in [1usize, 5, 4097, (ODD_STAGING_BYTES as usize) * 2 + 1] {
        let data = rng.bytes(len);
        round_trip_between(&vk, &gl, &data, "staged <-> gl");
        round_trip_between(&gl, &mapped, &data, "gl <-> mapped");
    }
}

/// A backend this machine has no adapter of is a `NoAdapter` naming the backends tried by
/// name (not bitflags' debug form) and saying what to do.
#[gpu_test]
fn no_adapter_names_the_backends_tried() {
    init_logging();
    let config = ArenaConfig {
        backend: BackendChoice::Metal,
        ..test_config()
    };
    match devices(&config) {
        Err(Error::NoAdapter { tried, hint }) => {
            assert_eq!(tried, "METAL");
            assert!(hint.contains("GPU_ARENA_BACKEND"), "{hint}");
        }
        Ok(list) if !list.is_empty() => {} // a Metal machine
        other => panic!("{other:?}"),
    }
}
