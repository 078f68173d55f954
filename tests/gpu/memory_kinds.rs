//! Memory kinds (device and pinned host) on every path: arrays of each kind round-trip
//! bitwise, kernels read and write pinned-host arrays, `offload` / `prefetch` move contents and
//! free their source after the copy, in single ops, sequences and captured steps; a full
//! pinned-host arena refuses with the donated array intact; statistics per kind; two threads.

use crate::harness::{context_with, op_paths, slow_copy_wgsl, test_config};
use gpu_arena::arena::ArenaError;
use gpu_arena::{
    ArenaConfig, Context, DeviceArray, Error, MemoryKind, TransferDirection, TransferGuard,
    TransferGuardLevel,
};

/// The paths of `op_paths`, and non-coherent mappings.
fn kind_paths() -> Vec<(&'static str, Context)> {
    let mut paths = op_paths();
    paths.push((
        "non-coherent",
        context_with(ArenaConfig {
            force_non_coherent: true,
            ..test_config()
        }),
    ));
    paths
}

fn pattern(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| i.wrapping_mul(2_654_435_761).wrapping_add(seed))
        .collect()
}

fn pinned_in_use(ctx: &Context) -> u64 {
    ctx.memory_stats_of(MemoryKind::PinnedHost)
        .expect("every test device has pinned-host memory")
        .bytes_in_use
}

#[gpu_test]
fn arrays_of_each_kind_round_trip_bitwise_on_every_path() {
    for (path, ctx) in kind_paths() {
        for n in [1usize, 3, 64, 1000, 70_000] {
            let data = pattern(2 * n, n as u32);
            let device_before = ctx.memory_stats().bytes_in_use;
            let before = pinned_in_use(&ctx);
            let host = ctx
                .device_put_in(MemoryKind::PinnedHost, &data, &[2, n])
                .unwrap();
            assert_eq!(host.memory_kind(), MemoryKind::PinnedHost, "{path}");
            assert_eq!(ctx.device_get(&host).unwrap(), data, "{path}: n = {n}");
            let mut out = vec![0u32; n];
            ctx.device_get_into(host.view(&[1]).unwrap(), &mut out)
                .unwrap();
            assert_eq!(out, data[n..], "{path}: a view of n = {n}");
            assert_eq!(
                pinned_in_use(&ctx),
                before + host.allocated_bytes(),
                "{path}: the pinned-host arena holds it"
            );
            assert_eq!(
                ctx.memory_stats().bytes_in_use,
                device_before,
                "{path}: device memory is untouched"
            );
            let zeros = ctx.zeros_in::<u32>(MemoryKind::PinnedHost, &[n]).unwrap();
            assert_eq!(ctx.device_get(&zeros).unwrap(), vec![0; n], "{path}");
            let device = ctx.device_put(&data, &[2 * n]).unwrap();
            assert_eq!(device.memory_kind(), MemoryKind::Device);
            drop((host, zeros));
            ctx.synchronize().unwrap();
            assert_eq!(pinned_in_use(&ctx), before, "{path}: freed");
        }
    }
}

#[gpu_test]
fn offload_and_prefetch_move_the_contents_and_count_as_explicit_transfers() {
    for (path, ctx) in kind_paths() {
        let data = pattern(5000, 9);
        let array = ctx.device_put(&data, &[50, 100]).unwrap();
        let device_before = ctx.memory_stats().bytes_in_use;
        let out_before = ctx.transfer_stats().device_to_host.explicit;
        let host = ctx.offload(array).unwrap();
        assert_eq!(host.memory_kind(), MemoryKind::PinnedHost, "{path}");
        assert_eq!(host.shape(), &[50, 100]);
        let out_after = ctx.transfer_stats().device_to_host.explicit;
        assert_eq!(out_after.count, out_before.count + 1, "{path}");
        assert_eq!(out_after.bytes, out_before.bytes + 20_000, "{path}");
        ctx.synchronize().unwrap();
        assert_eq!(
            ctx.memory_stats().bytes_in_use,
            device_before - 20_224,
            "{path}: the donated source's memory went back to the device arena"
        );
        // Already pinned host: the same array, no copy.
        let offset = host.byte_offset();
        let host = ctx.offload(host).unwrap();
        assert_eq!(host.byte_offset(), offset, "{path}");
        assert_eq!(ctx.transfer_stats().device_to_host.explicit, out_after);
        let in_before = ctx.transfer_stats().host_to_device.explicit;
        let back = ctx.prefetch(host).unwrap();
        assert_eq!(back.memory_kind(), MemoryKind::Device);
        let in_after = ctx.transfer_stats().host_to_device.explicit;
        assert_eq!(in_after.count, in_before.count + 1, "{path}");
        assert_eq!(ctx.device_get(&back).unwrap(), data, "{path}");
        ctx.synchronize().unwrap();
        assert_eq!(pinned_in_use(&ctx), 0, "{path}");
        // A copy keeps the kind of its source.
        let host = ctx.offload(back).unwrap();
        let copy = ctx.copy(&host).unwrap();
        assert_eq!(copy.memory_kind(), MemoryKind::PinnedHost, "{path}");
        assert_eq!(ctx.device_get(&copy).unwrap(), data, "{path}");
    }
}

const SCALE_ADD: &str = r#"
@group(0) @binding(0) var<storage, read> x: array<u32>;
@group(0) @binding(1) var<storage, read_write> y: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < arrayLength(&y)) { y[id.x] = y[id.x] + 3u * x[id.x]; }
}
"#;

#[gpu_test]
fn kernels_and_ops_read_and_write_pinned_host_arrays() {
    for (path, ctx) in kind_paths() {
        let k = ctx.kernel(SCALE_ADD, "main").unwrap();
        let xs = pattern(777, 1);
        let ys = pattern(777, 2);
        let x = ctx
            .device_put_in(MemoryKind::PinnedHost, &xs, &[777])
            .unwrap();
        let mut y = ctx
            .device_put_in(MemoryKind::PinnedHost, &ys, &[777])
            .unwrap();
        let device = ctx.device_put(&xs, &[777]).unwrap();
        ctx.launch(&k)
            .arg(&x)
            .arg_mut(&mut y)
            .grid_for(777)
            .run()
            .unwrap();
        // A device array beside a pinned-host one in one launch.
        ctx.launch(&k)
            .arg(&device)
            .arg_mut(&mut y)
            .grid_for(777)
            .run()
            .unwrap();
        let expected: Vec<u32> = xs
            .iter()
            .zip(&ys)
            .map(|(x, y)| y.wrapping_add(6u32.wrapping_mul(*x)))
            .collect();
        assert_eq!(ctx.device_get(&y).unwrap(), expected, "{path}");
        // The library's ops, in place on a donated pinned-host array.
        let y = ctx
            .dynamic_update_slice(y, &[7u32, 8, 9][..], &[10])
            .unwrap();
        let y = ctx.fill_in_place(y, 5u32).unwrap();
        assert_eq!(y.memory_kind(), MemoryKind::PinnedHost);
        assert_eq!(ctx.device_get(&y).unwrap(), vec![5; 777], "{path}");
        let slice = ctx.dynamic_slice(&x, &[700], &[77]).unwrap();
        assert_eq!(slice.memory_kind(), MemoryKind::Device);
        assert_eq!(ctx.device_get(&slice).unwrap(), xs[700..], "{path}");
    }
}

#[gpu_test]
fn moves_record_in_sequences_and_captured_steps() {
    for (path, ctx) in kind_paths() {
        let data = pattern(300, 4);
        let a = ctx.device_put(&data, &[300]).unwrap();
        let b = ctx
            .device_put_in(MemoryKind::PinnedHost, &data, &[300])
            .unwrap();
        let mut sequence = ctx.sequence();
        let a = sequence.offload(a).unwrap();
        let b = sequence.prefetch(b).unwrap();
        sequence.submit().unwrap();
        assert_eq!(a.memory_kind(), MemoryKind::PinnedHost);
        assert_eq!(b.memory_kind(), MemoryKind::Device);
        assert_eq!(ctx.device_get(&a).unwrap(), data, "{path}");
        assert_eq!(ctx.device_get(&b).unwrap(), data, "{path}");

        // A captured step that offloads a temporary: every run writes the same pinned array.
        let k = ctx.kernel(SCALE_ADD, "main").unwrap();
        let mut cap = ctx.capture();
        let before_capture = ctx.transfer_stats();
        let (x, slot) = cap.input(&data, &[300]).unwrap();
        let mut y = cap.fill(&[300], 0u32).unwrap();
        cap.launch(&k)
            .arg(&x)
            .arg_mut(&mut y)
            .grid_for(300)
            .run()
            .unwrap();
        let saved = cap.offload(y).unwrap();
        assert_eq!(saved.memory_kind(), MemoryKind::PinnedHost);
        let copy = ctx_copy_source(&mut cap, &saved);
        let back = cap.prefetch(copy).unwrap();
        let read = cap.read(&back).unwrap();
        drop((x, back));
        let mut step = cap.finish().unwrap();
        assert_eq!(
            ctx.transfer_stats(),
            before_capture,
            "{path}: recording the copy and the moves counted them"
        );
        for seed in [5u32, 6] {
            let input = pattern(300, seed);
            let mut out = vec![0u32; 300];
            let (out_before, in_before) = {
                let stats = ctx.transfer_stats();
                (stats.device_to_host.explicit, stats.host_to_device.explicit)
            };
            step.run()
                .input(&slot, &input)
                .read_into(&read, &mut out)
                .submit()
                .unwrap();
            // Each run counts its moves (one offload out, one prefetch in) beside its input
            // and its read.
            let stats = ctx.transfer_stats();
            let out_after = stats.device_to_host.explicit;
            let in_after = stats.host_to_device.explicit;
            assert_eq!(
                out_after.count,
                out_before.count + 2,
                "{path}: offload and read"
            );
            assert_eq!(out_after.bytes, out_before.bytes + 2400, "{path}");
            assert_eq!(
                in_after.count,
                in_before.count + 2,
                "{path}: prefetch and input"
            );
            assert_eq!(in_after.bytes, in_before.bytes + 2400, "{path}");
            let expected: Vec<u32> = input.iter().map(|x| 3u32.wrapping_mul(*x)).collect();
            assert_eq!(
                out, expected,
                "{path}: run {seed}, through pinned host and back"
            );
            assert_eq!(ctx.device_get(&saved).unwrap(), expected, "{path}: {seed}");
        }
        // The guard sees a run's moves: refused before anything runs.
        let guard = TransferGuard::scoped_direction(
            TransferDirection::DeviceToHost,
            TransferGuardLevel::DisallowExplicit,
        );
        let refused = step.run().input(&slot, &pattern(300, 9)).submit();
        assert!(
            matches!(
                refused,
                Err(Error::TransferGuard {
                    direction: TransferDirection::DeviceToHost,
                    ..
                })
            ),
            "{path}: {refused:?}"
        );
        drop(guard);
        let expected: Vec<u32> = pattern(300, 6)
            .iter()
            .map(|x| 3u32.wrapping_mul(*x))
            .collect();
        assert_eq!(
            ctx.device_get(&saved).unwrap(),
            expected,
            "{path}: nothing ran"
        );
    }
}

#[gpu_test]
fn a_captured_steps_plan_counts_its_pinned_host_arrays_apart_from_its_device_bytes() {
    for (path, ctx) in kind_paths() {
        let a = ctx.device_put(&pattern(4096, 1), &[4096]).unwrap();
        let mut cap = ctx.capture();
        let temporary = cap.fill(&[4096], 2u32).unwrap();
        let saved = cap.offload(temporary).unwrap();
        let copied = cap.copy(&a).unwrap();
        let mut step = cap.finish().unwrap();
        let plan = step.plan();
        assert_eq!(
            plan.pinned_host_bytes, 16384,
            "{path}: the offloaded output"
        );
        assert_eq!(
            plan.array_bytes,
            2 * 16384,
            "{path}: the input and the copy"
        );
        assert_eq!(
            plan.bytes_in_use,
            plan.array_bytes + plan.block_bytes,
            "{path}"
        );
        assert!(
            plan.to_string()
                .contains("(and 16384 bytes of pinned host memory)"),
            "{path}: {plan}"
        );
        ctx.synchronize().unwrap();
        ctx.reset_peak_stats();
        for _ in 0..3 {
            step.run().submit().unwrap();
        }
        ctx.synchronize().unwrap();
        assert_eq!(
            ctx.memory_stats().peak_bytes_in_use,
            plan.bytes_in_use,
            "{path}: the device peak of every run"
        );
        assert_eq!(pinned_in_use(&ctx), plan.pinned_host_bytes, "{path}");
        assert_eq!(ctx.device_get(&saved).unwrap(), vec![2u32; 4096], "{path}");
        assert_eq!(ctx.device_get(&copied).unwrap(), pattern(4096, 1), "{path}");
    }
}

/// A pinned-host copy of `saved` made in the capture (donated to `prefetch` there).
fn ctx_copy_source(cap: &mut gpu_arena::Capture, saved: &DeviceArray<u32>) -> DeviceArray<u32> {
    let copy = cap.copy(saved).unwrap();
    assert_eq!(copy.memory_kind(), MemoryKind::PinnedHost);
    copy
}

#[gpu_test]
fn a_full_pinned_host_kind_refuses_the_move_and_gives_the_array_back() {
    let ctx = context_with(ArenaConfig {
        pinned_host_bytes: Some(1 << 20),
        ..test_config()
    });
    let data = pattern(300_000, 3);
    let array = ctx.device_put(&data, &[300_000]).unwrap();
    let offset = array.byte_offset();
    let device = ctx.memory_stats();
    let Err(donated) = ctx.offload(array) else {
        panic!("1.2 MB fits no 1 MiB pinned-host arena");
    };
    let Error::OutOfMemory { report, .. } = &donated.error else {
        panic!("{}", donated.error);
    };
    assert_eq!(report.memory_kind, MemoryKind::PinnedHost);
    assert_eq!(report.bytes_limit, 1 << 20, "{report}");
    let text = donated.error.to_string();
    assert!(text.contains("of pinned_host memory"), "{text}");
    assert!(text.contains("GPU_ARENA_PINNED_HOST_MB"), "{text}");
    let array = donated.array;
    assert_eq!(array.byte_offset(), offset);
    assert_eq!(ctx.device_get(&array).unwrap(), data, "intact");
    assert_eq!(ctx.memory_stats().bytes_in_use, device.bytes_in_use);
    assert_eq!(pinned_in_use(&ctx), 0, "nothing allocated");
    let direct = ctx.alloc_in::<u8>(MemoryKind::PinnedHost, &[(1 << 20) + 1]);
    assert!(matches!(direct, Err(Error::OutOfMemory { .. })));
    let fits = ctx
        .alloc_in::<u8>(MemoryKind::PinnedHost, &[1 << 20])
        .unwrap();
    assert_eq!(fits.memory_kind(), MemoryKind::PinnedHost);
}

#[gpu_test]
fn the_guard_refuses_moves_as_explicit_transfers_and_gives_the_array_back() {
    let ctx = context_with(test_config());
    let data = pattern(64, 8);
    let array = ctx.device_put(&data, &[64]).unwrap();
    let guard = TransferGuard::scoped_direction(
        TransferDirection::DeviceToHost,
        TransferGuardLevel::DisallowExplicit,
    );
    let donated = ctx.offload(array).unwrap_err();
    assert!(
        matches!(
            donated.error,
            Error::TransferGuard {
                direction: TransferDirection::DeviceToHost,
                ..
            }
        ),
        "{}",
        donated.error
    );
    assert_eq!(pinned_in_use(&ctx), 0);
    drop(guard);
    let host = ctx.offload(donated.array).unwrap();
    let _guard = TransferGuard::scoped_direction(
        TransferDirection::HostToDevice,
        TransferGuardLevel::DisallowExplicit,
    );
    let donated = ctx.prefetch(host).unwrap_err();
    assert!(matches!(donated.error, Error::TransferGuard { .. }));
    assert_eq!(donated.array.memory_kind(), MemoryKind::PinnedHost);
    // Reading it back is a transfer of its own, outside the guard's direction.
    assert_eq!(ctx.device_get(&donated.array).unwrap(), data);
}

#[gpu_test]
fn frees_of_the_pinned_host_kind_wait_for_the_gpu() {
    for (path, ctx) in kind_paths() {
        let k = ctx.kernel(&slow_copy_wgsl("read"), "main").unwrap();
        let data = pattern(4096, 11);
        let source = ctx
            .device_put_in(MemoryKind::PinnedHost, &data, &[4096])
            .unwrap();
        let at = (source.buffer().clone(), source.byte_offset());
        let mut y = ctx.zeros::<u32>(&[4096]).unwrap();
        let mut sink = ctx.zeros::<u32>(&[4096]).unwrap();
        ctx.launch(&k)
            .arg(&source)
            .arg_mut(&mut y)
            .arg_mut(&mut sink)
            .grid_for(4096)
            .run()
            .unwrap();
        drop(source);
        let z = ctx
            .device_put_in(MemoryKind::PinnedHost, &vec![0xDEAD_BEEFu32; 4096], &[4096])
            .unwrap();
        assert_eq!(ctx.device_get(&y).unwrap(), data, "{path}");
        let reused = z.buffer() == &at.0 && z.byte_offset() == at.1;
        assert!(
            ctx.device_get(&z)
                .unwrap()
                .iter()
                .all(|&v| v == 0xDEAD_BEEF),
            "{path} ({reused})"
        );
    }
}

#[gpu_test]
fn two_threads_move_and_read_one_pinned_host_array() {
    for (path, ctx) in kind_paths() {
        let data = pattern(10_000, 12);
        let host = ctx
            .device_put_in(MemoryKind::PinnedHost, &data, &[10_000])
            .unwrap();
        std::thread::scope(|scope| {
            let workers: Vec<_> = (0..2)
                .map(|t| {
                    let (ctx, host, data) = (&ctx, &host, &data);
                    scope.spawn(move || {
                        for i in 0..8 {
                            let copy = ctx.copy(host).unwrap();
                            let device = ctx.prefetch(copy).unwrap();
                            let again = ctx.offload(device).unwrap();
                            assert_eq!(&ctx.device_get(&again).unwrap(), data, "{t}/{i}");
                            assert_eq!(&ctx.device_get(host).unwrap(), data, "{t}/{i}");
                        }
                    })
                })
                .collect();
            workers.into_iter().for_each(|w| w.join().unwrap());
        });
        ctx.synchronize().unwrap();
        assert_eq!(
            pinned_in_use(&ctx),
            host.allocated_bytes(),
            "{path}: only the shared one"
        );
    }
}

#[gpu_test]
fn the_pinned_host_kind_has_its_own_limit_and_statistics() {
    let ctx = context_with(test_config());
    let stats = ctx.memory_stats_of(MemoryKind::PinnedHost).unwrap();
    let plan = ctx.memory_plan();
    let heap = plan
        .pinned_host
        .as_ref()
        .map_or(plan.heap_bytes, |h| h.heap_bytes);
    let percent = gpu_arena::config::DEFAULT_PINNED_HOST_PERCENT;
    assert_eq!(stats.bytes_limit, Some(heap * percent / 100 / 256 * 256));
    assert_eq!(
        (stats.bytes_in_use, stats.bytes_reserved),
        (0, 0),
        "reserves nothing"
    );
    let a = ctx
        .alloc_in::<f32>(MemoryKind::PinnedHost, &[1000])
        .unwrap();
    let stats = ctx.memory_stats_of(MemoryKind::PinnedHost).unwrap();
    assert_eq!(
        (stats.num_allocs, stats.bytes_in_use),
        (1, a.allocated_bytes())
    );
    assert_eq!(stats.peak_bytes_in_use, a.allocated_bytes());
    drop(a);
    ctx.synchronize().unwrap();
    assert!(ctx.release_free_regions() > 0, "its regions go back");
    let stats = ctx.memory_stats_of(MemoryKind::PinnedHost).unwrap();
    assert_eq!((stats.bytes_in_use, stats.bytes_reserved), (0, 0));
    let limited = context_with(ArenaConfig {
        pinned_host_bytes: Some(3 << 20),
        ..test_config()
    });
    let stats = limited.memory_stats_of(MemoryKind::PinnedHost).unwrap();
    assert_eq!(stats.bytes_limit, Some(3 << 20));
    assert_eq!(
        limited.memory_stats_of(MemoryKind::Device),
        Some(limited.memory_stats())
    );
    // A first pinned-host array reserves the device arena too, once it has its memory: a
    // refused one reserves nothing of either kind.
    let refused = limited.alloc_in::<u8>(MemoryKind::PinnedHost, &[4 << 20]);
    assert!(
        matches!(refused, Err(Error::OutOfMemory { .. })),
        "{refused:?}"
    );
    assert_eq!(limited.memory_stats().bytes_reserved, 0);
    assert_eq!(
        stats,
        limited.memory_stats_of(MemoryKind::PinnedHost).unwrap()
    );
    let _kept = limited
        .alloc_in::<u8>(MemoryKind::PinnedHost, &[1 << 20])
        .unwrap();
    assert_eq!(
        limited.memory_stats().bytes_reserved,
        limited.memory_plan().prealloc_bytes(0.25)
    );
    // A device reservation that is refused (regions so small that it would take more than a
    // reservation may have) refuses the first pinned-host array with both kinds unchanged.
    let tiny_regions = context_with(ArenaConfig {
        max_region_bytes: Some(256),
        mem_fraction: gpu_arena::MemFraction::fixed(0.5),
        ..test_config()
    });
    let before = tiny_regions
        .memory_stats_of(MemoryKind::PinnedHost)
        .unwrap();
    let refused = tiny_regions.alloc_in::<u8>(MemoryKind::PinnedHost, &[256]);
    assert!(
        matches!(
            refused,
            Err(Error::Arena(ArenaError::TooManyReservedRegions { .. }))
        ),
        "{refused:?}"
    );
    let after = tiny_regions.memory_stats_of(MemoryKind::PinnedHost);
    assert_eq!(after, Some(before));
    assert_eq!(tiny_regions.memory_stats().bytes_reserved, 0);
}

#[gpu_test]
fn two_threads_making_the_first_arrays_reserve_the_device_arena_once() {
    // One thread's first device array races another's pinned-host array over its limit: the
    // base is reserved once, the refused request leaves the pinned-host kind as it was.
    for _ in 0..4 {
        let ctx = context_with(ArenaConfig {
            pinned_host_bytes: Some(1 << 20),
            ..test_config()
        });
        let pinned_before = ctx.memory_stats_of(MemoryKind::PinnedHost).unwrap();
        let barrier = std::sync::Barrier::new(2);
        let (device, pinned) = std::thread::scope(|s| {
            let device = s.spawn(|| {
                barrier.wait();
                ctx.device_put(&[7u32; 64], &[64])
            });
            let pinned = s.spawn(|| {
                barrier.wait();
                ctx.alloc_in::<u8>(MemoryKind::PinnedHost, &[4 << 20])
                    .map(drop)
            });
            (device.join().unwrap(), pinned.join().unwrap())
        });
        assert!(
            matches!(pinned, Err(Error::OutOfMemory { .. })),
            "{pinned:?}"
        );
        assert_eq!(ctx.device_get(&device.unwrap()).unwrap(), [7u32; 64]);
        let stats = ctx.memory_stats();
        assert_eq!(stats.bytes_reserved, ctx.memory_plan().prealloc_bytes(0.25));
        assert_eq!(stats.num_allocs, 1);
        let pinned_after = ctx.memory_stats_of(MemoryKind::PinnedHost).unwrap();
        assert_eq!(pinned_after, pinned_before);
    }
}

#[gpu_test]
fn snapshots_reports_and_pprof_show_each_kind_apart() {
    let ctx = context_with(test_config());
    let host = ctx
        .device_put_in(MemoryKind::PinnedHost, &[1u32; 1000], &[1000])
        .unwrap()
        .with_label("adam moments");
    let device = ctx
        .device_put(&[2u32; 10], &[10])
        .unwrap()
        .with_label("weights");
    let snapshot = ctx.memory_snapshot();
    let kinds: Vec<MemoryKind> = snapshot.kinds().map(|(kind, _)| kind).collect();
    assert_eq!(kinds, [MemoryKind::Device, MemoryKind::PinnedHost]);
    let pinned = snapshot.pinned_host.as_deref().unwrap();
    let chunk = pinned.chunk(host.allocation_id()).unwrap();
    assert_eq!(chunk.label.as_deref(), Some("adam moments"));
    assert_eq!(chunk.shape.as_deref(), Some(&[1000][..]));
    assert_eq!(pinned.stats.arena.bytes_in_use, host.allocated_bytes());
    assert!(
        snapshot
            .chunks()
            .all(|(_, c)| c.label.as_deref() != Some("adam moments")),
        "the device arena's chunks are its own"
    );
    let device_chunk = snapshot.chunk(device.allocation_id()).unwrap();
    assert_eq!(device_chunk.label.as_deref(), Some("weights"));
    let read = gpu_arena::profile::MemorySnapshot::from_json(&snapshot.to_json()).unwrap();
    assert_eq!(read, snapshot);
    let html = gpu_arena::report::render_html(&snapshot, None);
    assert!(
        html.contains("Pinned host memory"),
        "the report has the section"
    );
    assert!(html.contains("adam moments"));
    // The pinned-host kind's largest arrays are listed inside its section, under an id of
    // their own; no id is on the page twice.
    let section = &html[html.find(r#"<section id="pinned-host">"#).unwrap()..];
    let table = section.find(r#"<section id="pinned-host-top"><h2>Largest pinned-host"#);
    let end = section.find("</section></section>");
    assert!(
        table.is_some() && end.is_some() && table < end,
        "{section:.500}"
    );
    let ids: Vec<&str> = html
        .split(" id=\"")
        .skip(1)
        .map(|rest| &rest[..rest.find('"').unwrap()])
        .collect();
    let unique: std::collections::HashSet<_> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "{ids:?}");
    // pprof's gzip is of stored blocks: the string table reads as is.
    let pprof = snapshot.to_pprof();
    let has = |needle: &[u8]| pprof.windows(needle.len()).any(|w| w == needle);
    assert!(has(b"memory_kind") && has(b"pinned_host") && has(b"adam moments"));
    drop(host);
    ctx.synchronize().unwrap();
    let pinned = ctx.memory_snapshot().pinned_host.unwrap();
    assert_eq!(pinned.stats.arena.bytes_in_use, 0);
}

#[gpu_test]
fn a_device_out_of_memory_suggests_the_pinned_host_kind_when_it_has_room() {
    let ctx = context_with(ArenaConfig {
        mem_fraction: gpu_arena::MemFraction::fixed(0.01),
        ..test_config()
    });
    let limit = ctx.memory_stats().bytes_limit.unwrap();
    let error = ctx.alloc::<u8>(&[limit as usize + 1]).unwrap_err();
    let Error::OutOfMemory { report, .. } = &error else {
        panic!("{error}");
    };
    assert_eq!(report.memory_kind, MemoryKind::Device);
    let room = ctx
        .memory_stats_of(MemoryKind::PinnedHost)
        .unwrap()
        .bytes_limit;
    assert_eq!(report.pinned_host_room, room);
    assert!(report.remedy().contains("Context::offload"), "{error}");
    // Too large for the pinned-host kind as well: no such hint.
    let limited = context_with(ArenaConfig {
        mem_fraction: gpu_arena::MemFraction::fixed(0.01),
        pinned_host_bytes: Some(1 << 20),
        ..test_config()
    });
    let limit = limited.memory_stats().bytes_limit.unwrap();
    let error = limited.alloc::<u8>(&[limit as usize + 1]).unwrap_err();
    assert!(!error.to_string().contains("Context::offload"), "{error}");
}

#[gpu_test]
fn moves_refuse_foreign_and_pending_arrays_and_give_them_back() {
    let ctx = context_with(test_config());
    let other = context_with(test_config());
    let data = pattern(100, 13);
    let foreign = other.device_put(&data, &[100]).unwrap();
    let donated = ctx.offload(foreign).unwrap_err();
    assert!(
        matches!(
            donated.error,
            Error::ForeignArray {
                operation: "offload",
                ..
            }
        ),
        "{}",
        donated.error
    );
    assert_eq!(other.device_get(&donated.array).unwrap(), data);
    let mut sequence = ctx.sequence();
    // Already on the device: no copy, but refused as the eager move refuses it.
    let donated = sequence.prefetch(donated.array).unwrap_err();
    assert!(
        matches!(
            donated.error,
            Error::ForeignArray {
                operation: "prefetch",
                ..
            }
        ),
        "{}",
        donated.error
    );
    assert_eq!(donated.array.memory_kind(), MemoryKind::Device);
    let donated = ctx.sequence().offload(donated.array).unwrap_err();
    assert!(
        matches!(donated.error, Error::ForeignArray { .. }),
        "{}",
        donated.error
    );
    drop(sequence);

    // An array a user sequence writes is pending: the move would read it too early.
    let k = ctx.kernel(SCALE_ADD, "main").unwrap();
    let x = ctx.device_put(&data, &[100]).unwrap();
    let mut y = ctx.device_put(&data, &[100]).unwrap();
    let mut recording = ctx.sequence();
    recording
        .launch(&k)
        .arg(&x)
        .arg_mut(&mut y)
        .grid_for(100)
        .run()
        .unwrap();
    let donated = ctx.offload(y).unwrap_err();
    crate::harness::refusals::assert_pending_in_sequence(
        &donated.error,
        "offload",
        "the array",
        gpu_arena::error::Access::Write,
        gpu_arena::error::Access::Read,
    );
    assert_eq!(pinned_in_use(&ctx), 0, "nothing allocated");
    recording.submit().unwrap();
    let y = ctx.offload(donated.array).unwrap();
    let expected: Vec<u32> = data.iter().map(|v| v.wrapping_mul(4)).collect();
    assert_eq!(ctx.device_get(&y).unwrap(), expected);
}

#[gpu_test]
fn empty_and_oversized_arrays_of_the_pinned_host_kind() {
    for (path, ctx) in kind_paths() {
        let empty = ctx
            .device_put_in::<f32>(MemoryKind::PinnedHost, &[], &[0, 3])
            .unwrap();
        assert_eq!(empty.memory_kind(), MemoryKind::PinnedHost);
        let moved = ctx.prefetch(empty).unwrap();
        assert_eq!(
            (moved.shape(), moved.memory_kind()),
            (&[0, 3][..], MemoryKind::Device)
        );
        let back = ctx.offload(moved).unwrap();
        assert!(ctx.device_get(&back).unwrap().is_empty(), "{path}");
        let before = pinned_in_use(&ctx);
        let huge = ctx.alloc_in::<u64>(MemoryKind::PinnedHost, &[usize::MAX / 4, 8]);
        assert!(matches!(huge, Err(Error::Shape { .. })), "{path}: {huge:?}");
        let bad = ctx.device_put_in(MemoryKind::PinnedHost, &[1u8, 2, 3], &[2, 2]);
        assert!(matches!(bad, Err(Error::Shape { .. })), "{path}: {bad:?}");
        assert_eq!(
            pinned_in_use(&ctx),
            before,
            "{path}: refusals allocate nothing"
        );
    }
}

/// An array slot takes, per run, an array of its own memory kind only: the step's moves were
/// planned between the kinds' memories as captured. Another kind is refused with
/// `RunRefusal::ArrayMemoryKind` before anything runs; one of the same kind is moved.
#[gpu_test]
fn an_array_slot_refuses_an_array_of_another_memory_kind() {
    use gpu_arena::error::RunRefusal;
    for (path, ctx) in kind_paths() {
        let src = ctx.device_put(&pattern(64, 1), &[64]).unwrap();
        let mut other_device = ctx.device_put(&pattern(64, 2), &[64]).unwrap();
        let mut pinned = ctx
            .device_put_in(MemoryKind::PinnedHost, &pattern(64, 3), &[64])
            .unwrap();
        let mut cap = ctx.capture();
        let slot = cap.array_slot(&src).unwrap();
        let saved = cap.offload(src).unwrap();
        let mut step = cap.finish().unwrap();
        let refused = step.run().array(&slot, &mut pinned).submit().unwrap_err();
        assert!(
            matches!(
                refused,
                Error::CapturedRun {
                    refusal: RunRefusal::ArrayMemoryKind {
                        given: MemoryKind::PinnedHost,
                        captured: MemoryKind::Device,
                    },
                    ..
                }
            ),
            "{path}: {refused:?}"
        );
        assert_eq!(step.runs(), 0, "{path}");
        step.run().array(&slot, &mut other_device).submit().unwrap();
        assert_eq!(ctx.device_get(&saved).unwrap(), pattern(64, 2), "{path}");
        assert_eq!(ctx.device_get(&pinned).unwrap(), pattern(64, 3), "{path}");
    }
}

/// A recorded move to the kind an array is already in copies nothing but refuses as a copy
/// would: another context's array, a lost device; the array comes back in the refusal.
#[gpu_test]
fn a_recorded_move_to_the_kind_an_array_is_in_refuses_a_foreign_array_and_a_lost_device() {
    let (a, b) = (context_with(test_config()), context_with(test_config()));
    let x = a.device_put(&[1u32; 8], &[8]).unwrap();
    let pinned = a.offload(a.device_put(&[2u32; 8], &[8]).unwrap()).unwrap();
    let mut foreign = b.sequence();
    let refused = foreign.prefetch(x).unwrap_err();
    assert!(
        matches!(
            refused.error,
            Error::ForeignArray {
                operation: "prefetch",
                ..
            }
        ),
        "{}",
        refused.error
    );
    let refused = foreign.offload(pinned).unwrap_err();
    assert!(
        matches!(
            refused.error,
            Error::ForeignArray {
                operation: "offload",
                ..
            }
        ),
        "{}",
        refused.error
    );
    let pinned = refused.array;
    drop(foreign);
    let mut own = a.sequence();
    a.device_lost_notifier()
        .notify(wgpu::DeviceLostReason::Unknown, "lost by the test");
    let refused = own.offload(pinned).unwrap_err();
    assert!(
        matches!(refused.error, Error::DeviceLost { .. }),
        "{}",
        refused.error
    );
    assert_eq!(refused.array.memory_kind(), MemoryKind::PinnedHost);
}
