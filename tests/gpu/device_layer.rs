//! The device layer on the test machine's GPU (lavapipe in CI): reservation at first use,
//! growth, platform mode, OOM reports, safe reuse after in-flight work, teardown.

use crate::harness;
use crate::harness::{context, context_with, test_config};
use gpu_arena::arena::OomCause;
use gpu_arena::{AllocatorKind, ArenaConfig, Error, MemFraction};

#[gpu_test]
fn pool_is_empty_until_first_allocation_then_holds_the_fraction_of_the_heap() {
    let ctx = context_with(ArenaConfig {
        mem_fraction: MemFraction::fixed(0.75),
        ..test_config()
    });
    let before = ctx.memory_stats();
    assert_eq!(before.pool_bytes, Some(0));
    assert_eq!(before.num_regions, 0);
    let expected = ctx.memory_plan().prealloc_bytes(0.75);
    assert!(expected > 0);
    let a = ctx.zeros::<f32>(&[1024]).unwrap();
    let after = ctx.memory_stats();
    assert_eq!(after.pool_bytes, Some(expected));
    assert_eq!(after.bytes_limit, Some(expected));
    assert_eq!(after.bytes_in_use, 4096);
    let regions = expected.div_ceil(ctx.max_array_bytes());
    assert_eq!(after.num_regions, regions);
    assert!(ctx.reserve_duration().is_some());
    if let Some((allocations, bytes)) = ctx.allocator_report() {
        assert_eq!(
            allocations as u64, regions,
            "one gpu-allocator block per region"
        );
        assert!(bytes >= expected);
    }
    drop(a);
    assert_eq!(ctx.memory_stats().bytes_in_use, 0);
}

#[gpu_test]
fn reserve_does_it_eagerly_and_is_idempotent() {
    let ctx = context();
    ctx.reserve().unwrap();
    let pool = ctx.memory_stats().pool_bytes;
    assert_eq!(pool, Some(ctx.memory_plan().prealloc_bytes(0.25)));
    ctx.reserve().unwrap();
    assert_eq!(ctx.memory_stats().pool_bytes, pool);
}

#[gpu_test]
fn growth_mode_starts_at_zero_and_grows_region_by_region() {
    let ctx = context_with(ArenaConfig {
        preallocate: false,
        ..test_config()
    });
    let a = ctx.zeros::<u8>(&[1000]).unwrap();
    let small = ctx.memory_stats();
    assert!(small.pool_bytes.unwrap() > 0);
    assert!(
        small.pool_bytes.unwrap() < 64 << 20,
        "grows from small regions: {small:?}"
    );
    let b = ctx.zeros::<u8>(&[32 << 20]).unwrap();
    let grown = ctx.memory_stats();
    assert!(grown.num_regions > small.num_regions);
    assert!(grown.pool_bytes.unwrap() >= (32 << 20) + 1000);
    drop((a, b));
    ctx.synchronize().unwrap();
    let released = ctx.release_free_regions();
    assert!(released > 0);
    assert_eq!(ctx.memory_stats().pool_bytes, Some(0));
}

#[gpu_test]
fn plus_fraction_reserves_the_base_and_may_grow_to_the_cap() {
    let ctx = context_with(ArenaConfig {
        mem_fraction: MemFraction::parse("0.1+").unwrap(),
        ..test_config()
    });
    let plan = ctx.memory_plan().clone();
    let _a = ctx.zeros::<u8>(&[256]).unwrap();
    let stats = ctx.memory_stats();
    assert_eq!(stats.pool_bytes, Some(plan.prealloc_bytes(0.1)));
    assert_eq!(stats.bytes_limit, Some(plan.prealloc_bytes(1.0)));
    // Growing past the base works, within the cap.
    let big = ctx.alloc::<u8>(&[(plan.prealloc_bytes(0.1) + (1 << 20)) as usize]);
    if let Ok(big) = big {
        assert!(ctx.memory_stats().pool_bytes.unwrap() > plan.prealloc_bytes(0.1));
        drop(big);
    }
}

#[gpu_test]
fn platform_mode_gives_memory_back_to_the_device_on_drop() {
    let ctx = context_with(ArenaConfig {
        allocator: AllocatorKind::Platform,
        ..test_config()
    });
    let base = ctx.allocator_report();
    let a = ctx.zeros::<f32>(&[1 << 16]).unwrap();
    let b = ctx.zeros::<f32>(&[1 << 10]).unwrap();
    let stats = ctx.memory_stats();
    assert_eq!(stats.num_regions, 2);
    if let (Some((n0, _)), Some((n1, _))) = (base, ctx.allocator_report()) {
        assert_eq!(n1, n0 + 2);
    }
    drop(a);
    drop(b);
    ctx.synchronize().unwrap();
    let _ = ctx.release_free_regions(); // retires pending frees
    ctx.synchronize().unwrap();
    assert_eq!(ctx.memory_stats().num_regions, 0);
    assert_eq!(ctx.memory_stats().pool_bytes, Some(0));
    if let (Some((n0, b0)), Some((n1, b1))) = (base, ctx.allocator_report()) {
        assert_eq!(
            (n1, b1),
            (n0, b0),
            "gpu-allocator's report shows the memory back"
        );
    }
}

#[gpu_test]
fn out_of_memory_is_an_error_that_explains_itself() {
    let ctx = context_with(ArenaConfig {
        mem_fraction: MemFraction::fixed(0.05),
        ..test_config()
    });
    let limit = ctx.memory_plan().prealloc_bytes(0.05);
    let err = ctx.alloc::<u8>(&[(limit + 4096) as usize]).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::OutOfMemory { .. }), "{msg}");
    assert!(
        msg.contains(&format!("{}", limit + 4096)) || msg.contains("MiB"),
        "{msg}"
    );
    assert!(
        msg.contains("GPU_ARENA_MEM_FRACTION") || msg.contains("GPU_ARENA_PREALLOCATE"),
        "the remedy names a knob: {msg}"
    );
}

/// Where the backend does not report the device's memory (GL), the limit is a share of the
/// size assumed, and the report says so and names the knob that gives the real one; on Vulkan
/// the size is the device's own and the report says nothing of it.
#[gpu_test]
fn out_of_memory_on_an_assumed_memory_size_says_how_to_give_the_real_one() {
    let config = ArenaConfig {
        fallback_device_memory_bytes: 64 << 20,
        mem_fraction: MemFraction::fixed(0.5),
        ..test_config()
    };
    let default = context_with(config.clone());
    if default.adapter_info().backend == wgpu::Backend::Vulkan {
        let err = default.alloc::<u8>(&[3 << 30]).unwrap_err();
        let Error::OutOfMemory { report, .. } = &err else {
            panic!("{err}")
        };
        assert_eq!(report.assumed_device_memory, None, "{err}");
        assert!(
            !err.to_string().contains("GPU_ARENA_DEVICE_MEMORY_MB"),
            "{err}"
        );
    }
    let Some(gl) = crate::harness::gl_context_with(config) else {
        return;
    };
    let err = gl.alloc::<u8>(&[40 << 20]).unwrap_err();
    let Error::OutOfMemory { report, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(report.assumed_device_memory, Some(64 << 20), "{err}");
    assert_eq!(report.bytes_limit, 32 << 20, "{err}");
    assert!(
        report.remedy().contains(
            "so the arena's limit is a share of an assumed 64.00 MiB: set \
             GPU_ARENA_DEVICE_MEMORY_MB (ArenaConfig::fallback_device_memory_bytes) to the \
             device's real size"
        ),
        "{err}"
    );
    // The failed request changed nothing: a request inside the limit is served.
    gl.alloc::<u8>(&[16 << 20]).unwrap();
}

/// At a memory fraction of 1 no fraction raises the limit, and no fraction holds a request
/// larger than that limit: the remedy does not advise one, and on GL its first advice is the
/// assumed memory size, which does lift the limit.
#[gpu_test]
fn out_of_memory_at_the_full_fraction_does_not_advise_raising_it() {
    let full = ArenaConfig {
        fallback_device_memory_bytes: 8 << 20,
        mem_fraction: MemFraction::fixed(1.0),
        preallocate: false,
        ..test_config()
    };
    let ctx = context_with(full.clone());
    let max = ctx.memory_plan().prealloc_bytes(1.0);
    let err = ctx.alloc::<u8>(&[(max + (1 << 20)) as usize]).unwrap_err();
    let Error::OutOfMemory { report, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(report.max_limit_bytes, Some(max), "{err}");
    let remedy = report.remedy();
    assert!(!remedy.contains("raise the memory fraction"), "{err}");
    if report.assumed_device_memory.is_none() {
        assert_eq!(report.cause, OomCause::LimitReached, "{err}");
        assert!(
            remedy
                .starts_with("split the data into smaller arrays: the request is larger than the")
                && remedy
                    .ends_with("that the arena may hold on this device at any memory fraction"),
            "{err}"
        );
    }
    // Nor at a lower fraction, for a request larger than the most a fraction of 1 gives.
    let half = context_with(ArenaConfig {
        mem_fraction: MemFraction::fixed(0.5),
        ..full.clone()
    });
    let err = half.alloc::<u8>(&[(max + (1 << 20)) as usize]).unwrap_err();
    assert!(
        !err.to_string().contains("raise the memory fraction"),
        "{err}"
    );
    let Some(gl) = crate::harness::gl_context_with(full.clone()) else {
        return;
    };
    let err = gl.alloc::<u8>(&[9 << 20]).unwrap_err();
    let Error::OutOfMemory { report, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(report.cause, OomCause::LimitReached, "{err}");
    assert!(
        report.remedy().starts_with(
            "set GPU_ARENA_DEVICE_MEMORY_MB (ArenaConfig::fallback_device_memory_bytes) to the \
             device's real memory size: this backend does not report it"
        ),
        "{err}"
    );
    // Doing so lifts the limit.
    let real = crate::harness::gl_context_with(ArenaConfig {
        fallback_device_memory_bytes: 64 << 20,
        ..full
    })
    .unwrap();
    real.alloc::<u8>(&[9 << 20]).unwrap();
}

#[gpu_test]
fn an_array_larger_than_any_region_names_the_limit() {
    let ctx = context_with(ArenaConfig {
        max_region_bytes: Some(8 << 20),
        mem_fraction: MemFraction::fixed(0.05),
        ..test_config()
    });
    assert_eq!(ctx.max_array_bytes(), 8 << 20);
    let err = ctx.alloc::<u8>(&[(9 << 20) as usize]).unwrap_err();
    let Error::OutOfMemory { report, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(report.cause, OomCause::LargerThanAnyRegion, "{err}");
    assert!(err.to_string().contains("region"), "{err}");
    // A first allocation that no region could hold fails before the base is reserved.
    assert_eq!(ctx.memory_stats().bytes_reserved, 0);
    ctx.alloc::<u8>(&[16]).unwrap();
    assert!(ctx.memory_stats().bytes_reserved > 0);
}

#[gpu_test]
fn bad_shapes_are_errors_not_panics() {
    let ctx = context();
    let msg = ctx
        .alloc::<f32>(&[1, 1, 1, 1, 1, 1, 1])
        .unwrap_err()
        .to_string();
    assert!(msg.contains("rank 7"), "{msg}");
    let msg = ctx.alloc::<f32>(&[usize::MAX, 4]).unwrap_err().to_string();
    assert!(msg.contains("overflow"), "{msg}");
    let msg = ctx
        .device_put(&[1.0f32; 5], &[2, 3])
        .unwrap_err()
        .to_string();
    assert!(msg.contains("6 elements") && msg.contains("5"), "{msg}");
}

#[gpu_test]
fn zeros_are_zero_and_rank_zero_works() {
    let ctx = context();
    // Dirty some memory first so zeros must really clear it.
    let dirty = ctx.device_put(&vec![0xABu8; 1 << 16], &[1 << 16]).unwrap();
    drop(dirty);
    let z = ctx.zeros::<u32>(&[128, 128]).unwrap();
    assert!(ctx.device_get(&z).unwrap().iter().all(|&v| v == 0));
    let s = ctx.device_put(&[7.5f64], &[]).unwrap();
    assert_eq!(s.shape(), &[] as &[usize]);
    assert_eq!(ctx.device_get(&s).unwrap(), vec![7.5]);
}

#[gpu_test]
fn unknown_adapter_lists_the_ones_that_exist() {
    harness::init_logging();
    let err = gpu_arena::Context::new(ArenaConfig {
        adapter: Some(gpu_arena::AdapterSelector::NameContains(
            "no-such-gpu-xyz".into(),
        )),
        ..test_config()
    })
    .expect_err("no adapter has that name");
    let msg = err.to_string();
    assert!(
        msg.contains("no-such-gpu-xyz") && msg.contains("0: "),
        "{msg}"
    );
}

/// The frontier test the issue asks for: a kernel reads X, X is dropped right after submit, a
/// new array takes memory and is written at once; the kernel's result must be X's old data.
#[gpu_test]
fn memory_used_by_inflight_work_is_not_reused_until_it_completes() {
    let ctx = context();
    const N: usize = 1 << 16;
    let shader = ctx
        .device()
        .create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("slow copy"),
            source: wgpu::ShaderSource::Wgsl(harness::slow_copy_wgsl("read_write").into()),
        });
    let pipeline = ctx
        .device()
        .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("slow copy"),
            layout: None,
            module: &shader,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
    let data: Vec<u32> = (0..N as u32).collect();
    let x = ctx.device_put(&data, &[N]).unwrap();
    let y = ctx.zeros::<u32>(&[N]).unwrap();
    let sink = ctx.zeros::<u32>(&[N]).unwrap();
    let bind = ctx.device().create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[
            wgpu::BindGroupEntry {
                binding: 0,
                resource: wgpu::BindingResource::Buffer(x.raw_binding()),
            },
            wgpu::BindGroupEntry {
                binding: 1,
                resource: wgpu::BindingResource::Buffer(y.raw_binding()),
            },
            wgpu::BindGroupEntry {
                binding: 2,
                resource: wgpu::BindingResource::Buffer(sink.raw_binding()),
            },
        ],
    });
    let mut encoder = ctx.device().create_command_encoder(&Default::default());
    {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bind, &[]);
        pass.dispatch_workgroups((N / 64) as u32, 1, 1);
    }
    drop(bind);
    let x_offset = (x.buffer().clone(), x.byte_offset());
    ctx.raw_submit([encoder.finish()], &[&x, &y, &sink])
        .unwrap();
    drop(x);
    harness::assert_dropped_source_was_not_reused(&ctx, x_offset, &y, &data, "raw_submit");
}

#[gpu_test]
fn contexts_tear_down_without_leaks_or_validation_errors() {
    for _ in 0..3 {
        let ctx = context_with(ArenaConfig {
            preallocate: false,
            ..test_config()
        });
        let arrays: Vec<_> = (0..50)
            .map(|i| {
                ctx.device_put(&vec![i as u32; 1000 + i], &[1000 + i])
                    .unwrap()
            })
            .collect();
        assert_eq!(
            ctx.memory_stats().bytes_in_use,
            arrays.iter().map(|a| a.allocated_bytes()).sum::<u64>()
        );
        drop(arrays);
        ctx.synchronize().unwrap();
        ctx.release_free_regions();
        if let Some((n, bytes)) = ctx.allocator_report() {
            // Only the staging pool's buffers remain (the pool is kept for reuse).
            let (up, down) = ctx.staging_buffers_created();
            assert_eq!(
                n,
                up + down,
                "{n} live gpu-allocator allocations, {bytes} bytes"
            );
        }
    }
}

#[gpu_test]
fn the_live_plan_is_sane() {
    let ctx = context();
    let plan = ctx.memory_plan();
    let desc = ctx.device_description();
    assert!((plan.arena_type as usize) < desc.memory.types.len());
    assert!(plan.prealloc_bytes(0.75) <= plan.reservable_bytes);
    assert!(!plan.reasons.is_empty());
    if ctx.adapter_info().device_type == wgpu::DeviceType::Cpu && ctx.is_vulkan() {
        assert!(plan.uma, "lavapipe is a UMA device");
        assert!(plan.arena_host_visible);
    }
}

#[gpu_test]
fn contexts_and_arrays_can_be_shared_between_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<gpu_arena::Context>();
    assert_send_sync::<gpu_arena::DeviceArray<f32>>();
    let ctx = context();
    let handles: Vec<_> = (0..4u32)
        .map(|t| {
            let ctx = ctx.clone();
            std::thread::spawn(move || {
                for i in 0..200u32 {
                    let data = vec![t * 1000 + i; 64 + i as usize];
                    let a = ctx.device_put(&data, &[data.len()]).unwrap();
                    assert_eq!(ctx.device_get(&a).unwrap(), data);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(ctx.memory_stats().bytes_in_use, 0);
}

#[gpu_test]
fn synchronize_makes_the_memory_of_dropped_arrays_reusable_at_once() {
    // Staged uploads leave a copy submission as the array's last use, so dropping the array
    // right away parks its memory until that submission is known to have completed.
    let ctx = context_with(ArenaConfig {
        zero_copy: false,
        ..test_config()
    });
    let data = vec![7u32; 1 << 18];
    let array = ctx.device_put(&data, &[1 << 18]).unwrap();
    let in_use = ctx.memory_stats().bytes_in_use;
    drop(array);
    let parked = ctx.memory_stats_with_transfers().pending_free_bytes;
    ctx.synchronize().unwrap();
    let after = ctx.memory_stats_with_transfers();
    assert_eq!(after.pending_free_bytes, 0, "parked before: {parked}");
    assert_eq!(after.arena.bytes_in_use, in_use - (1 << 20));
}
