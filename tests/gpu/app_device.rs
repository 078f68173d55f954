//! A context on a device the app created (`Context::from_wgpu`) and arrays in the app's own
//! passes (`AppWork`): the device is opened here as an app would, with only what
//! `DeviceRequirements` lists; the app's error handler and device-lost callback stay the app's;
//! several contexts share one device; an array drawn by the app is not reused before the draw
//! completes; the app's device outlives the context. wgpu's default uncaptured-error handler
//! panics, so a device without the app's handler also proves the library raised no uncaptured
//! error on it.

use crate::harness;
use crate::harness::ordering::{affine, params, run_affine, AFFINE};
use crate::harness::{init_logging, test_config};
use gpu_arena::{wgpu, AppDevice, ArenaConfig, Context, DeviceArray, DeviceRequirements, Error};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// An app's adapter, device and queue on `backends`, with validation on and exactly the
/// features and `limits` given; `None` when the machine has no such adapter.
fn app_device_with(
    backends: wgpu::Backends,
    features: wgpu::Features,
    limits: wgpu::Limits,
) -> Option<AppDevice> {
    let (instance, adapter, device, queue) = instance_adapter_device(backends, features, limits)?;
    Some(AppDevice::new(&adapter, &device, &queue).with_instance(&instance))
}

/// An instance, its first adapter of `backends`, and a device of it with `features` and
/// `limits`: the parts an app holds.
fn instance_adapter_device(
    backends: wgpu::Backends,
    features: wgpu::Features,
    limits: wgpu::Limits,
) -> Option<(wgpu::Instance, wgpu::Adapter, wgpu::Device, wgpu::Queue)> {
    init_logging();
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends,
        flags: wgpu::InstanceFlags::VALIDATION,
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    });
    let adapter =
        pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions::default()))
            .ok()?;
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("the app's device"),
        required_features: features,
        required_limits: limits,
        ..Default::default()
    }))
    .ok()?;
    Some((instance, adapter, device, queue))
}

/// An app's device with only what the docs list for `config`.
fn app_device(backends: wgpu::Backends, config: &ArenaConfig) -> Option<AppDevice> {
    let needs = DeviceRequirements::for_config(config);
    app_device_with(backends, needs.features, needs.limits)
}

/// The paths of the core cases on an app's device: zero-copy and staging on Vulkan, plain
/// buffers on GL where a GL adapter exists.
fn app_paths() -> Vec<(&'static str, AppDevice, Context)> {
    let mut paths = Vec::new();
    for (name, backends, zero_copy) in [
        ("vulkan zero-copy", wgpu::Backends::VULKAN, true),
        ("vulkan staging", wgpu::Backends::VULKAN, false),
        ("gl", wgpu::Backends::GL, true),
    ] {
        let config = ArenaConfig {
            zero_copy,
            ..test_config()
        };
        let Some(app) = app_device(backends, &config) else {
            assert_ne!(name, "vulkan zero-copy", "no Vulkan adapter (lavapipe)");
            eprintln!("{name}: no adapter, skipped");
            continue;
        };
        let ctx = Context::from_wgpu(app.clone(), config).unwrap();
        paths.push((name, app, ctx));
    }
    paths
}

const DOUBLE: &str = "@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) i: vec3<u32>) {
    if (i.x < arrayLength(&y)) { y[i.x] = 2.0 * x[i.x]; }
}";

#[gpu_test(needs = Vulkan)]
fn a_device_with_only_the_documented_requirements_runs_the_core_cases() {
    let paths = app_paths();
    let names: Vec<&str> = paths.iter().map(|(name, ..)| *name).collect();
    eprintln!("core cases on an app's device: {names:?}");
    for (path, app, ctx) in paths {
        assert_eq!(
            ctx.limits(),
            &app.device.limits(),
            "{path}: the device's own limits"
        );
        assert_eq!(ctx.device(), &app.device, "{path}");
        if path.starts_with("vulkan") {
            assert!(ctx.is_vulkan(), "{path}: gpu-allocator on the app's device");
            assert_eq!(ctx.config().zero_copy, path.ends_with("zero-copy"));
        }
        // Transfers.
        let x = ctx.device_put(&[1.0f32, 2.0, 3.0, 4.0], &[4]).unwrap();
        assert_eq!(ctx.device_get(&x).unwrap(), [1.0, 2.0, 3.0, 4.0], "{path}");
        // A user launch.
        let double = ctx.kernel(DOUBLE, "main").unwrap();
        let mut y = ctx.zeros::<f32>(&[4]).unwrap();
        ctx.launch(&double)
            .arg(&x)
            .arg_mut(&mut y)
            .grid_for(4)
            .run()
            .unwrap();
        assert_eq!(ctx.device_get(&y).unwrap(), [2.0, 4.0, 6.0, 8.0], "{path}");
        // Library ops.
        let cache = ctx.fill(&[4, 4], 0.0f32).unwrap();
        let update = ctx.copy(&y).unwrap().reshape(&[1, 4]).unwrap();
        let cache = ctx.dynamic_update_slice(cache, &update, &[2, 0]).unwrap();
        let row = ctx.dynamic_slice(&cache, &[2, 0], &[1, 4]).unwrap();
        assert_eq!(
            ctx.device_get(&row).unwrap(),
            [2.0, 4.0, 6.0, 8.0],
            "{path}"
        );
        // A sequence.
        let mut z = ctx.zeros::<f32>(&[4]).unwrap();
        let mut seq = ctx.sequence();
        seq.launch(&double)
            .arg(&y)
            .arg_mut(&mut z)
            .grid_for(4)
            .run()
            .unwrap();
        seq.submit().unwrap();
        assert_eq!(
            ctx.device_get(&z).unwrap(),
            [4.0, 8.0, 12.0, 16.0],
            "{path}"
        );
        // Gathered single ops: many launches, one read.
        let k = ctx.kernel(AFFINE, "main").unwrap();
        let mut a = ctx.device_put(&vec![1u32; 100], &[100]).unwrap();
        for i in 0..40 {
            run_affine(&ctx, &k, &mut a, params(i));
        }
        let want = (0..40).fold(1u32, |v, i| affine(v, params(i)));
        assert_eq!(ctx.device_get(&a).unwrap(), vec![want; 100], "{path}");
        ctx.synchronize().unwrap();
    }
}

#[gpu_test(needs = Vulkan)]
fn a_device_missing_what_the_arena_needs_is_refused_naming_it() {
    // A device with WebGL2's limits has no storage buffers and no compute.
    let app = app_device_with(
        wgpu::Backends::VULKAN,
        wgpu::Features::empty(),
        wgpu::Limits::downlevel_webgl2_defaults(),
    )
    .expect("a Vulkan adapter (lavapipe)");
    let error = Context::from_wgpu(app, test_config()).unwrap_err();
    let message = error.to_string();
    let Error::DeviceRequirements { missing } = &error else {
        panic!("{error:?}");
    };
    assert!(
        missing
            .iter()
            .any(|m| m.name == "limit max_storage_buffers_per_shader_stage"
                && m.has == "0"
                && m.needs == "4"),
        "{missing:?}"
    );
    assert!(
        message.contains("max_storage_buffers_per_shader_stage is 0, needs 4"),
        "{message}"
    );
    assert!(
        message.contains("DeviceRequirements::for_config"),
        "{message}"
    );

    // A needed feature the device was not created with is named the same way.
    let needs = DeviceRequirements {
        features: wgpu::Features::SHADER_F16,
        ..DeviceRequirements::for_config(&test_config())
    };
    let missing = needs.shortfalls(
        wgpu::Features::empty(),
        &wgpu::Limits::default(),
        wgpu::DownlevelFlags::all(),
    );
    assert_eq!(missing.len(), 1, "{missing:?}");
    assert_eq!(
        (missing[0].name.as_str(), missing[0].has.as_str()),
        ("features SHADER_F16", "not requested"),
        "{missing:?}"
    );
    assert!(
        missing[0].to_string().contains("SHADER_F16"),
        "{}",
        missing[0]
    );
    // And a device whose adapter is another one is refused before anything is made.
    let app = app_device(wgpu::Backends::VULKAN, &test_config()).unwrap();
    if let Some(gl) = app_device(wgpu::Backends::GL, &test_config()) {
        let mixed = AppDevice {
            adapter: gl.adapter,
            ..app
        };
        let message = Context::from_wgpu(mixed, test_config())
            .unwrap_err()
            .to_string();
        assert!(message.contains("pass the adapter the device"), "{message}");
    }
}

#[gpu_test(needs = Vulkan)]
fn a_usage_the_arena_buffers_lack_is_refused_naming_the_flag() {
    let config = ArenaConfig {
        array_usages: gpu_arena::config::DEFAULT_ARRAY_USAGES - wgpu::BufferUsages::VERTEX,
        ..test_config()
    };
    let app = app_device(wgpu::Backends::VULKAN, &config).unwrap();
    let ctx = Context::from_wgpu(app, config).unwrap();
    let a = ctx.device_put(&[1.0f32; 8], &[8]).unwrap();
    let mut work = ctx.app_work();
    let error = work.vertex_buffer(&a).unwrap_err();
    assert!(
        matches!(error, Error::ArrayUsage { missing, .. } if missing == wgpu::BufferUsages::VERTEX),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .contains("add VERTEX to ArenaConfig::array_usages"),
        "{error}"
    );
    // Nothing was recorded; the other uses work.
    assert!(work.is_empty());
    work.index_buffer(&ctx.device_put(&[0u32; 3], &[3]).unwrap())
        .unwrap();
    drop(work);
    // A policy without what the library needs is refused when the context opens.
    let message = ArenaConfig {
        array_usages: wgpu::BufferUsages::VERTEX,
        ..test_config()
    }
    .validate()
    .unwrap_err()
    .to_string();
    assert!(message.contains("ArenaConfig::array_usages"), "{message}");
    assert!(
        message.contains("missing: COPY_SRC | COPY_DST | STORAGE"),
        "{message}"
    );
}

#[gpu_test(needs = Vulkan)]
fn the_apps_uncaptured_error_handler_still_receives_the_apps_own_errors() {
    let app = app_device(wgpu::Backends::VULKAN, &test_config()).unwrap();
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&seen);
    app.device
        .on_uncaptured_error(Arc::new(move |error: wgpu::Error| {
            assert!(matches!(error, wgpu::Error::Validation { .. }), "{error}");
            counter.fetch_add(1, Ordering::SeqCst);
        }));
    let ctx = Context::from_wgpu(app.clone(), test_config()).unwrap();
    // The library's work, including a launch it refuses, reaches the app's handler not once.
    let x = ctx.device_put(&[1.0f32; 64], &[64]).unwrap();
    let double = ctx.kernel(DOUBLE, "main").unwrap();
    let mut y = ctx.zeros::<f32>(&[64]).unwrap();
    ctx.launch(&double)
        .arg(&x)
        .arg_mut(&mut y)
        .grid_for(64)
        .run()
        .unwrap();
    assert!(ctx.kernel("not wgsl", "main").is_err());
    assert_eq!(ctx.device_get(&y).unwrap(), vec![2.0; 64]);
    assert_eq!(seen.load(Ordering::SeqCst), 0);
    // The app's own mistake (a buffer both mappable for reading and a storage buffer) goes
    // to the app's handler.
    let _bad = app.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("the app's invalid buffer"),
        size: 64,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::STORAGE,
        mapped_at_creation: false,
    });
    assert_eq!(seen.load(Ordering::SeqCst), 1);
    drop(ctx);
}

#[gpu_test(needs = Vulkan)]
fn the_apps_device_lost_callback_stays_the_apps_and_forwards_the_loss() {
    let app = app_device(wgpu::Backends::VULKAN, &test_config()).unwrap();
    let ctx = Context::from_wgpu(app.clone(), test_config()).unwrap();
    let x = ctx.device_put(&[3u32; 16], &[16]).unwrap();
    let lost_seen = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&lost_seen);
    let notifier = ctx.device_lost_notifier();
    // Set after the context opened: opening it did not take the slot, and nothing replaces it.
    app.device.set_device_lost_callback(move |reason, message| {
        seen.fetch_add(1, Ordering::SeqCst);
        notifier.notify(reason, &message);
    });
    assert_eq!(ctx.device_get(&x).unwrap(), [3; 16]);
    app.device.destroy();
    let _ = app.device.poll(wgpu::PollType::wait_indefinitely());
    assert_eq!(
        lost_seen.load(Ordering::SeqCst),
        1,
        "the app's callback ran"
    );
    let error = ctx.device_get(&x).unwrap_err();
    assert!(matches!(error, Error::DeviceLost { .. }), "{error:?}");
    assert!(
        error
            .to_string()
            .contains("(destroyed by wgpu::Device::destroy"),
        "{error}"
    );
    drop(x);
    drop(ctx);

    // An app that forwards nothing: the next host read finds the loss itself.
    let app = app_device(wgpu::Backends::VULKAN, &test_config()).unwrap();
    let ctx = Context::from_wgpu(app.clone(), test_config()).unwrap();
    let x = ctx.device_put(&[4u32; 16], &[16]).unwrap();
    assert_eq!(ctx.device_get(&x).unwrap(), [4; 16]);
    app.device.destroy();
    let error = ctx.device_get(&x).unwrap_err();
    assert!(matches!(error, Error::DeviceLost { .. }), "{error:?}");
    assert!(
        error.to_string().contains("device_lost_notifier"),
        "{error}"
    );
    assert!(matches!(
        ctx.synchronize().unwrap_err(),
        Error::DeviceLost { .. }
    ));
}

#[gpu_test]
fn an_app_device_destroyed_is_found_by_the_next_read_on_every_backend_with_no_error_at_any_handler()
{
    // On GL the read's own buffer map is what meets the destroyed device: its validation
    // error must stay in the library's error scopes, away from the app's handler and from
    // wgpu's default one (which panics).
    let mut ran = 0;
    for backends in [wgpu::Backends::VULKAN, wgpu::Backends::GL] {
        for with_handler in [true, false] {
            let Some(app) = app_device(backends, &test_config()) else {
                continue;
            };
            let seen = Arc::new(AtomicUsize::new(0));
            if with_handler {
                let counter = Arc::clone(&seen);
                app.device
                    .on_uncaptured_error(Arc::new(move |error: wgpu::Error| {
                        eprintln!("the app's handler got: {error}");
                        counter.fetch_add(1, Ordering::SeqCst);
                    }));
            }
            let ctx = Context::from_wgpu(app.clone(), test_config()).unwrap();
            let x = ctx.device_put(&[5u32; 16], &[16]).unwrap();
            assert_eq!(ctx.device_get(&x).unwrap(), [5; 16]);
            app.device.destroy();
            let error = ctx.device_get(&x).unwrap_err();
            assert!(
                matches!(error, Error::DeviceLost { .. }),
                "{backends:?}: {error:?}"
            );
            assert!(matches!(
                ctx.synchronize().unwrap_err(),
                Error::DeviceLost { .. }
            ));
            assert_eq!(seen.load(Ordering::SeqCst), 0, "{backends:?}");
            ran += 1;
        }
    }
    assert!(ran >= 2, "no adapter ran the case");
}

/// A copy between two contexts, one of them lost, is refused with `DeviceLost` before the
/// destination allocates anything: neither context's figures move, either way round; nor do
/// the lost context's when an op that makes an array is refused.
#[gpu_test(needs = Vulkan)]
fn a_copy_from_or_to_a_lost_device_is_refused_before_anything_is_allocated() {
    for (path, _app, ctx) in app_paths() {
        let other = harness::context();
        let on_lost = ctx.device_put(&[1u32, 2, 3], &[3]).unwrap();
        let on_other = other.device_put(&[4u32, 5, 6], &[3]).unwrap();
        ctx.synchronize().unwrap();
        other.synchronize().unwrap();
        ctx.device_lost_notifier()
            .notify(wgpu::DeviceLostReason::Unknown, "lost in a test");
        let before = (ctx.memory_stats(), other.memory_stats());
        let copies: [(&str, gpu_arena::Result<DeviceArray<u32>>); 4] = [
            ("from the lost device", other.device_put_from(&on_lost)),
            ("copy_to from the lost device", on_lost.copy_to(&other)),
            ("to the lost device", ctx.device_put_from(&on_other)),
            ("copy_to the lost device", on_other.copy_to(&ctx)),
        ];
        for (what, result) in copies {
            assert!(
                matches!(result, Err(Error::DeviceLost { .. })),
                "{path}: {what}: {result:?}"
            );
        }
        assert_eq!((ctx.memory_stats(), other.memory_stats()), before, "{path}");
        assert_eq!(other.device_get(&on_other).unwrap(), [4, 5, 6], "{path}");
        let probes: Vec<(&str, gpu_arena::Result<DeviceArray<u32>>)> = vec![
            ("device_put", ctx.device_put(&[1u32, 2], &[2])),
            ("zeros", ctx.zeros(&[2])),
            ("fill", ctx.fill(&[2], 7)),
            ("copy", ctx.copy(&on_lost)),
            ("alloc", ctx.alloc(&[2])),
            ("dynamic_slice", ctx.dynamic_slice(&on_lost, &[1], &[1])),
        ];
        for (what, result) in probes {
            assert!(
                matches!(result, Err(Error::DeviceLost { .. })),
                "{path}: {what}: {result:?}"
            );
        }
        assert_eq!(ctx.memory_stats(), before.0, "{path}");
    }
}

/// Once the context knows of a loss, an array pending in a recorder is refused as lost (no
/// order of the two would help), and an `AppWork` hand-out refuses with `DeviceLost` before
/// it looks at the array's size, element type or context.
#[gpu_test(needs = Vulkan)]
fn after_a_loss_pending_arrays_and_every_hand_out_refuse_with_device_lost() {
    for (path, _app, ctx) in app_paths() {
        let other = harness::context();
        let foreign = other.zeros::<u32>(&[4]).unwrap();
        let limit = ctx.limits().max_uniform_buffer_binding_size as usize;
        let too_big = ctx.zeros::<u8>(&[limit + 8]).unwrap();
        let bytes = ctx.zeros::<u8>(&[16]).unwrap();
        let mut written = ctx.zeros::<u32>(&[16]).unwrap();
        let mut work = ctx.app_work();
        let _ = work.storage_mut(&mut written).unwrap();
        let mut s = ctx.sequence();
        let filled = s.fill::<u32>(&[16], 3).unwrap();
        // Before the loss: the pending and foreign refusals, foreign first.
        assert!(matches!(
            ctx.device_get(&written),
            Err(Error::PendingInRecorder { .. })
        ));
        let mut probe = ctx.app_work();
        assert!(
            matches!(probe.uniform(&foreign), Err(Error::ForeignArray { .. })),
            "{path}"
        );
        ctx.device_lost_notifier()
            .notify(wgpu::DeviceLostReason::Unknown, "lost in a test");
        let lost = |result: gpu_arena::Result<()>, what: &str| {
            assert!(
                matches!(result, Err(Error::DeviceLost { .. })),
                "{path}: {what}: {result:?}"
            );
        };
        lost(
            ctx.device_get(&written).map(drop),
            "a read of an AppWork's array",
        );
        lost(ctx.copy(&filled).map(drop), "a copy of a sequence's array");
        lost(
            probe.uniform(&too_big).map(drop),
            "uniform of an array over the limit",
        );
        lost(
            probe.index_buffer(&bytes).map(drop),
            "index_buffer of bytes",
        );
        lost(
            probe.storage(&foreign).map(drop),
            "storage of another context's array",
        );
        drop((probe, work, s));
    }
}

/// With the timeline on, `for_config` offers timestamp queries, and `kernel_times` on a device
/// without them still reports a lost device (it waits as `synchronize` does) before saying
/// `None`.
#[gpu_test(needs = Vulkan)]
fn kernel_times_on_a_device_without_timestamps_reports_a_loss() {
    let config = ArenaConfig {
        timeline_capacity: 1000,
        ..test_config()
    };
    let needs = DeviceRequirements::for_config(&config);
    assert!(needs
        .optional_features
        .contains(wgpu::Features::TIMESTAMP_QUERY));
    let without = DeviceRequirements::for_config(&test_config());
    assert!(!without
        .optional_features
        .contains(wgpu::Features::TIMESTAMP_QUERY));
    // Only the required features: no timestamps.
    let app = app_device(wgpu::Backends::VULKAN, &config).expect("a Vulkan device");
    let ctx = Context::from_wgpu(app.clone(), config).unwrap();
    assert!(!ctx.times_kernels());
    let x = ctx.device_put(&[1.0f32; 64], &[64]).unwrap();
    let _y = ctx.copy(&x).unwrap();
    assert!(ctx.kernel_times().unwrap().is_none());
    app.device.destroy();
    assert!(matches!(ctx.kernel_times(), Err(Error::DeviceLost { .. })));
}

/// A sequence whose launch takes parameters, submitted just after the app destroyed the
/// device: the parameters' write meets a destroyed buffer, and the submission says the device
/// is lost (or succeeds with work that never runs), never another error.
#[gpu_test(needs = Vulkan)]
fn a_sequence_with_parameters_submitted_after_a_destroy_is_ok_or_device_lost() {
    for (path, app, ctx) in app_paths() {
        submit_parameters_after_destroy(&ctx, || app.device.destroy(), path);
    }
}

/// Records a launch with parameters, destroys the device, submits: `Ok` (work that never
/// runs) or `DeviceLost`, never another error; the next read says the device is lost.
fn submit_parameters_after_destroy(ctx: &Context, destroy: impl FnOnce(), path: &str) {
    let affine = ctx.kernel(AFFINE, "main").unwrap();
    let mut z = ctx.zeros::<u32>(&[64]).unwrap();
    let mut s = ctx.sequence();
    s.launch(&affine)
        .params(&params(1))
        .arg_mut(&mut z)
        .grid_for(64)
        .run()
        .unwrap();
    destroy();
    match s.submit() {
        Ok(_) | Err(Error::DeviceLost { .. }) => {}
        Err(other) => panic!("{path}: {other:?}"),
    }
    assert!(
        matches!(ctx.device_get(&z), Err(Error::DeviceLost { .. })),
        "{path}"
    );
}

#[gpu_test(needs = Vulkan)]
fn two_contexts_on_one_device_share_it_without_interfering() {
    let app = app_device(wgpu::Backends::VULKAN, &test_config()).unwrap();
    let a = Context::from_wgpu(app.clone(), test_config()).unwrap();
    let b = Context::from_wgpu(app.clone(), test_config()).unwrap();
    let k_a = a.kernel(AFFINE, "main").unwrap();
    let k_b = b.kernel(AFFINE, "main").unwrap();
    let mut xa = a.device_put(&vec![1u32; 256], &[256]).unwrap();
    let mut xb = b.device_put(&vec![2u32; 256], &[256]).unwrap();
    // Both contexts' work interleaved on one queue, from two threads.
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..20 {
                run_affine(&a, &k_a, &mut xa, params(i));
            }
        });
        s.spawn(|| {
            for i in 20..40 {
                run_affine(&b, &k_b, &mut xb, params(i));
            }
        });
    });
    let want_a = (0..20).fold(1u32, |v, i| affine(v, params(i)));
    let want_b = (20..40).fold(2u32, |v, i| affine(v, params(i)));
    assert_eq!(a.device_get(&xa).unwrap(), vec![want_a; 256]);
    assert_eq!(b.device_get(&xb).unwrap(), vec![want_b; 256]);
    // Each has its own arena and statistics; arrays stay with their context.
    assert_eq!(a.memory_stats().num_allocs, 1);
    assert_eq!(b.memory_stats().num_allocs, 1);
    assert!(matches!(
        a.device_get(&xb).unwrap_err(),
        Error::ForeignArray { .. }
    ));
    // Dropping one leaves the other working.
    drop(xa);
    drop(a);
    run_affine(&b, &k_b, &mut xb, params(99));
    assert_eq!(
        b.device_get(&xb).unwrap(),
        vec![affine(want_b, params(99)); 256]
    );
}

/// A point list drawn into a 16×16 R8 texture: every vertex (in pixel units, at pixel
/// centres) marks its pixel 255. The vertex shader burns time first, so the draw is still
/// running when the host reuses memory.
const SLOW_POINTS: &str = "
struct Out { @builtin(position) pos: vec4<f32> }
@vertex fn vs(@location(0) p: vec2<f32>) -> Out {
    var acc = 1u;
    for (var k = 0u; k < 200000u; k++) { acc = acc * 1664525u + 1013904223u; }
    var o: Out;
    o.pos = vec4<f32>(p.x / 8.0 - 1.0, 1.0 - p.y / 8.0, 0.0, 1.0);
    if (acc == 7u) { o.pos.x = 3.0; }
    return o;
}
@fragment fn fs() -> @location(0) vec4<f32> { return vec4<f32>(1.0, 0.0, 0.0, 1.0); }
";

/// A fresh 16×16 R8 texture to draw into, and a point-list pipeline of `wgsl` (entry points
/// `vs` and `fs`, one `vec2<f32>` vertex attribute) that draws into it.
fn points_target(
    device: &wgpu::Device,
    wgsl: &str,
    label: &str,
) -> (wgpu::Texture, wgpu::RenderPipeline) {
    let texture = device.create_texture(&wgpu::TextureDescriptor {
        label: Some(label),
        size: wgpu::Extent3d {
            width: 16,
            height: 16,
            depth_or_array_layers: 1,
        },
        mip_level_count: 1,
        sample_count: 1,
        dimension: wgpu::TextureDimension::D2,
        format: wgpu::TextureFormat::R8Unorm,
        usage: wgpu::TextureUsages::RENDER_ATTACHMENT | wgpu::TextureUsages::COPY_SRC,
        view_formats: &[],
    });
    let shader = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some(label),
        source: wgpu::ShaderSource::Wgsl(wgsl.into()),
    });
    let pipeline = device.create_render_pipeline(&wgpu::RenderPipelineDescriptor {
        label: Some(label),
        layout: None,
        vertex: wgpu::VertexState {
            module: &shader,
            entry_point: Some("vs"),
            compilation_options: Default::default(),
            buffers: &[Some(wgpu::VertexBufferLayout {
                array_stride: 8,
                step_mode: wgpu::VertexStepMode::Vertex,
                attributes: &wgpu::vertex_attr_array![0 => Float32x2],
            })],
        },
        primitive: wgpu::PrimitiveState {
            topology: wgpu::PrimitiveTopology::PointList,
            ..Default::default()
        },
        depth_stencil: None,
        multisample: Default::default(),
        fragment: Some(wgpu::FragmentState {
            module: &shader,
            entry_point: Some("fs"),
            compilation_options: Default::default(),
            targets: &[Some(wgpu::TextureFormat::R8Unorm.into())],
        }),
        multiview_mask: None,
        cache: None,
    });
    (texture, pipeline)
}

/// A render pass over `view`, cleared to black first.
fn clear_pass<'e>(
    encoder: &'e mut wgpu::CommandEncoder,
    view: &wgpu::TextureView,
) -> wgpu::RenderPass<'e> {
    encoder.begin_render_pass(&wgpu::RenderPassDescriptor {
        label: Some("points"),
        color_attachments: &[Some(wgpu::RenderPassColorAttachment {
            view,
            depth_slice: None,
            resolve_target: None,
            ops: wgpu::Operations {
                load: wgpu::LoadOp::Clear(wgpu::Color::BLACK),
                store: wgpu::StoreOp::Store,
            },
        })],
        ..Default::default()
    })
}

/// Draws `vertices` (handed out by `work`) as points into a fresh 16×16 texture, submits
/// through `work`, and returns the texture.
fn draw_points(
    ctx: &Context,
    device: &wgpu::Device,
    vertices: &DeviceArray<[f32; 2]>,
    drop_after_handing_out: impl FnOnce(),
) -> wgpu::Texture {
    let (texture, pipeline) = points_target(device, SLOW_POINTS, "slow points");
    let view = texture.create_view(&Default::default());
    let mut encoder = device.create_command_encoder(&Default::default());
    let mut work = ctx.app_work();
    {
        let mut pass = clear_pass(&mut encoder, &view);
        pass.set_pipeline(&pipeline);
        pass.set_vertex_buffer(0, work.vertex_buffer(vertices).unwrap());
        pass.draw(0..vertices.len() as u32, 0..1);
    }
    drop_after_handing_out();
    work.submit([encoder.finish()]).unwrap();
    texture
}

/// The 16×16 R8 texture's pixels, read back by the app (rows padded to 256 bytes).
fn read_pixels(device: &wgpu::Device, queue: &wgpu::Queue, texture: &wgpu::Texture) -> Vec<u8> {
    let buffer = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("readback"),
        size: 256 * 16,
        usage: wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::MAP_READ,
        mapped_at_creation: false,
    });
    let mut encoder = device.create_command_encoder(&Default::default());
    encoder.copy_texture_to_buffer(
        texture.as_image_copy(),
        wgpu::TexelCopyBufferInfo {
            buffer: &buffer,
            layout: wgpu::TexelCopyBufferLayout {
                offset: 0,
                bytes_per_row: Some(256),
                rows_per_image: None,
            },
        },
        texture.size(),
    );
    queue.submit([encoder.finish()]);
    buffer
        .slice(..)
        .map_async(wgpu::MapMode::Read, |r| r.unwrap());
    device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
    let data = buffer.slice(..).get_mapped_range().unwrap();
    (0..16)
        .flat_map(|row| data[row * 256..row * 256 + 16].to_vec())
        .collect()
}

/// The pixels [`SLOW_POINTS`] draws for `points`.
fn expected_pixels(points: &[[f32; 2]]) -> Vec<u8> {
    let mut pixels = vec![0u8; 256];
    for p in points {
        pixels[p[1] as usize * 16 + p[0] as usize] = 255;
    }
    pixels
}

#[gpu_test(needs = Vulkan)]
fn an_array_drawn_by_the_app_is_not_reused_before_the_draw_completes() {
    let app = app_device(wgpu::Backends::VULKAN, &test_config()).unwrap();
    let ctx = Context::from_wgpu(app.clone(), test_config()).unwrap();
    let points: Vec<[f32; 2]> = (0..16)
        .map(|i| [i as f32 + 0.5, (i * 7 % 16) as f32 + 0.5])
        .collect();
    let vertices = ctx.device_put(&points, &[points.len()]).unwrap();
    let at = (vertices.buffer().clone(), vertices.byte_offset());
    let texture = draw_points(&ctx, &app.device, &vertices, || ());
    // Dropped right after submitting, while the slow draw still reads it; a new array of the
    // same size is written at once (best fit would take the dropped one's memory if it were
    // free).
    drop(vertices);
    let far = [[100.0f32, 100.0]; 16];
    let clobber = ctx.device_put(&far, &[16]).unwrap();
    let reused_at_once = clobber.buffer() == &at.0 && clobber.byte_offset() == at.1;
    let pixels = read_pixels(&app.device, &app.queue, &texture);
    assert_eq!(
        pixels,
        expected_pixels(&points),
        "the draw saw other data (memory reused at once: {reused_at_once})"
    );
    assert_eq!(ctx.device_get(&clobber).unwrap(), far);
    // Dropped between the hand-out and the submission: AppWork holds the memory.
    let vertices = ctx.device_put(&points, &[points.len()]).unwrap();
    let texture = draw_points(&ctx, &app.device, &vertices, || ());
    drop(vertices);
    assert_eq!(
        read_pixels(&app.device, &app.queue, &texture),
        expected_pixels(&points)
    );
}

/// Copies `src` into `dst` with the app's own compute pipeline (bindings from `AppWork`).
const APP_COPY: &str = "
@group(0) @binding(0) var<storage, read_write> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) i: vec3<u32>) {
    if (i.x < arrayLength(&dst)) { dst[i.x] = src[i.x] + 1u; }
}";

fn app_copy(
    ctx: &Context,
    device: &wgpu::Device,
    src: &DeviceArray<u32>,
    dst: &mut DeviceArray<u32>,
) {
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("app copy"),
        source: wgpu::ShaderSource::Wgsl(APP_COPY.into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("app copy"),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let n = dst.len() as u32;
    let mut work = ctx.app_work();
    let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some("app copy"),
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[
            wgpu::BindGroupEntry {
                binding: 0,
                resource: work.storage(src).unwrap(),
            },
            wgpu::BindGroupEntry {
                binding: 1,
                resource: work.storage_mut(dst).unwrap(),
            },
        ],
    });
    let mut encoder = device.create_command_encoder(&Default::default());
    {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bind_group, &[]);
        pass.dispatch_workgroups(n.div_ceil(64), 1, 1);
    }
    work.submit([encoder.finish()]).unwrap();
}

#[gpu_test(needs = Vulkan)]
fn two_threads_hand_one_array_to_their_own_passes() {
    let app = app_device(wgpu::Backends::VULKAN, &test_config()).unwrap();
    let ctx = Context::from_wgpu(app.clone(), test_config()).unwrap();
    let n = 1000;
    let src = ctx
        .device_put(&(0..n as u32).collect::<Vec<_>>(), &[n])
        .unwrap();
    let results: Vec<Vec<u32>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let mut dst = ctx.zeros::<u32>(&[n]).unwrap();
                    for _ in 0..5 {
                        app_copy(&ctx, &app.device, &src, &mut dst);
                    }
                    ctx.device_get(&dst).unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for result in results {
        assert_eq!(result, (1..=n as u32).collect::<Vec<_>>());
    }
}

#[gpu_test(needs = Vulkan)]
fn an_array_the_apps_pass_writes_is_pending_until_the_work_is_submitted() {
    let app = app_device(wgpu::Backends::VULKAN, &test_config()).unwrap();
    let ctx = Context::from_wgpu(app, test_config()).unwrap();
    let mut a = ctx.device_put(&[1u32; 8], &[8]).unwrap();
    let b = ctx.device_put(&[2u32; 8], &[8]).unwrap();
    let mut work = ctx.app_work();
    let _ = work.storage_mut(&mut a).unwrap();
    let _ = work.storage(&b).unwrap();
    let error = ctx.device_get(&a).unwrap_err();
    assert!(
        matches!(
            &error,
            Error::PendingInRecorder { recorder, .. }
                if recorder.kind == gpu_arena::error::RecorderKind::AppWork
                    && recorder.number == work.number()
        ),
        "{error:?}"
    );
    let refused = error.to_string();
    assert!(
        refused.contains(&format!("AppWork #{}", work.number())),
        "{refused}"
    );
    assert!(refused.contains("Context::app_work"), "{refused}");
    // Readers do not refuse readers.
    assert_eq!(ctx.device_get(&b).unwrap(), [2; 8]);
    work.submit(std::iter::empty()).unwrap();
    assert_eq!(ctx.device_get(&a).unwrap(), [1; 8]);
    // A dropped AppWork leaves nothing pending.
    let mut work = ctx.app_work();
    let _ = work.storage_mut(&mut a).unwrap();
    drop(work);
    assert_eq!(ctx.device_get(&a).unwrap(), [1; 8]);
}

#[gpu_test(needs = Vulkan)]
fn dropping_the_context_leaves_the_apps_device_and_resources_working() {
    let app = app_device(wgpu::Backends::VULKAN, &test_config()).unwrap();
    let kept = app.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("the app's buffer"),
        size: 16,
        usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    app.queue
        .write_buffer(&kept, 0, bytemuck::cast_slice(&[7u32, 8, 9, 10]));
    {
        let ctx = Context::from_wgpu(app.clone(), test_config()).unwrap();
        let k = ctx.kernel(AFFINE, "main").unwrap();
        let mut a = ctx.device_put(&[1u32; 64], &[64]).unwrap();
        run_affine(&ctx, &k, &mut a, params(1));
        assert_eq!(ctx.device_get(&a).unwrap(), vec![affine(1, params(1)); 64]);
    }
    // The app keeps using its device, its queue and its buffer.
    let read = app.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("the app's readback"),
        size: 16,
        usage: wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::MAP_READ,
        mapped_at_creation: false,
    });
    let mut encoder = app.device.create_command_encoder(&Default::default());
    encoder.copy_buffer_to_buffer(&kept, 0, &read, 0, 16);
    app.queue.submit([encoder.finish()]);
    read.slice(..)
        .map_async(wgpu::MapMode::Read, |r| r.unwrap());
    app.device
        .poll(wgpu::PollType::wait_indefinitely())
        .unwrap();
    let values: Vec<u32> =
        bytemuck::cast_slice(&read.slice(..).get_mapped_range().unwrap()).to_vec();
    assert_eq!(values, [7, 8, 9, 10]);
    // And a new context opens on it.
    let again = Context::from_wgpu(app, test_config()).unwrap();
    assert_eq!(
        again
            .device_get(&again.device_put(&[5u8; 4], &[4]).unwrap())
            .unwrap(),
        [5; 4]
    );
}

#[gpu_test(needs = Vulkan)]
fn the_instance_and_adapter_are_handed_on_when_the_context_has_them() {
    let Some(app) = app_device(wgpu::Backends::VULKAN, &test_config()) else {
        return;
    };
    let with = Context::from_wgpu(app.clone(), test_config()).unwrap();
    let instance = with.instance().expect("handed over by with_instance");
    assert!(
        pollster::block_on(instance.enumerate_adapters(wgpu::Backends::VULKAN))
            .iter()
            .any(|a| a.get_info().name == with.adapter_info().name)
    );
    assert_eq!(with.adapter().get_info().name, with.adapter_info().name);
    let without = Context::from_wgpu(
        AppDevice::new(&app.adapter, &app.device, &app.queue),
        test_config(),
    )
    .unwrap();
    assert!(
        without.instance().is_none(),
        "an app's device without its instance"
    );
    assert_eq!(
        without.adapter().get_info().name,
        without.adapter_info().name
    );
    let own = harness::context();
    assert!(
        own.instance().is_some(),
        "a context's own device has its instance"
    );
    assert_eq!(own.adapter().get_info().name, own.adapter_info().name);
    drop((with, without, own));
}

#[gpu_test]
fn a_device_paired_with_the_same_gpus_adapter_from_another_instance_is_refused() {
    init_logging();
    let mut backends_seen = 0;
    for backends in [wgpu::Backends::VULKAN, wgpu::Backends::GL] {
        let needs = DeviceRequirements::for_config(&test_config());
        let parts = || instance_adapter_device(backends, needs.features, needs.limits.clone());
        let Some((_first, adapter, device, queue)) = parts() else {
            continue;
        };
        // The same GPU through a second instance: it reports the same name, vendor and id.
        let Some((_second, other_adapter, _, _)) = parts() else {
            continue;
        };
        backends_seen += 1;
        assert_eq!(other_adapter.get_info(), adapter.get_info());
        let error = Context::from_wgpu(
            AppDevice::new(&other_adapter, &device, &queue),
            test_config(),
        )
        .unwrap_err();
        let Error::InvalidArgument { operation, reason } = &error else {
            panic!("{backends:?}: {error:?}");
        };
        assert_eq!(*operation, "Context::from_wgpu");
        assert!(
            reason.contains("not made from the adapter given"),
            "{reason}"
        );
        // Its own adapter is accepted, and the context works.
        let ctx =
            Context::from_wgpu(AppDevice::new(&adapter, &device, &queue), test_config()).unwrap();
        let x = ctx.device_put(&[7u32; 8], &[8]).unwrap();
        assert_eq!(ctx.device_get(&x).unwrap(), [7; 8], "{backends:?}");
    }
    assert!(backends_seen > 0, "no adapter on Vulkan or GL");
}

/// A queue of another device of the same adapter is refused on Vulkan, where the driver's
/// handles tell (work on it would name buffers its device does not have).
#[gpu_test(needs = Vulkan)]
fn a_queue_of_another_device_is_refused() {
    let needs = DeviceRequirements::for_config(&test_config());
    let (_instance, adapter, device, queue) =
        instance_adapter_device(wgpu::Backends::VULKAN, needs.features, needs.limits.clone())
            .expect("a Vulkan device");
    let (other_device, other_queue) =
        pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("another device of the app"),
            required_features: needs.features,
            required_limits: needs.limits,
            ..Default::default()
        }))
        .unwrap();
    for (device, queue) in [(&device, &other_queue), (&other_device, &queue)] {
        let error =
            Context::from_wgpu(AppDevice::new(&adapter, device, queue), test_config()).unwrap_err();
        let Error::InvalidArgument { operation, reason } = &error else {
            panic!("{error:?}");
        };
        assert_eq!(*operation, "Context::from_wgpu");
        assert!(reason.contains("not the device's own"), "{reason}");
    }
    let ctx = Context::from_wgpu(AppDevice::new(&adapter, &device, &queue), test_config()).unwrap();
    let x = ctx.device_put(&[5u32; 64], &[64]).unwrap();
    assert_eq!(ctx.device_get(&x).unwrap(), [5; 64]);
}

/// Every call that would use a lost device refuses with [`Error::DeviceLost`], allocations
/// included, on every path (a CPU adapter's arena is still mapped after the loss, so an
/// allocation there would otherwise succeed), and so does every kind of submission made ready
/// before the loss (a sequence, a captured step's run, a capture's finish, app work); a
/// donated array comes back in the refusal.
#[gpu_test]
fn every_call_after_a_device_loss_refuses_with_device_lost_allocation_included() {
    for (path, ctx) in harness::op_paths() {
        let kernel = ctx
            .kernel(
                "@group(0) @binding(0) var<storage, read_write> a: array<u32>;
                 @compute @workgroup_size(1) fn main() { a[0] = 1u; }",
                "main",
            )
            .unwrap();
        let x = ctx.device_put(&[3u32; 16], &[16]).unwrap();
        let mut y = ctx.zeros::<u32>(&[16]).unwrap();
        // One of every submission kind, made before the loss and submitted after it.
        let mut z = ctx.zeros::<u32>(&[16]).unwrap();
        let mut w = ctx.zeros::<u32>(&[16]).unwrap();
        let mut sequence = ctx.sequence();
        sequence
            .launch(&kernel)
            .arg_mut(&mut z)
            .grid([1, 1, 1])
            .run()
            .unwrap();
        let mut cap = ctx.capture();
        cap.launch(&kernel)
            .arg_mut(&mut w)
            .grid([1, 1, 1])
            .run()
            .unwrap();
        let mut step = cap.finish().unwrap();
        let mut v = ctx.zeros::<u32>(&[16]).unwrap();
        let mut work = ctx.app_work();
        let _ = work.storage_mut(&mut v).unwrap();
        ctx.synchronize().unwrap();
        // The app forwards the loss (the case an app's own device-lost callback meets).
        ctx.device().destroy();
        let _ = ctx.device().poll(wgpu::PollType::wait_indefinitely());
        ctx.device_lost_notifier()
            .notify(wgpu::DeviceLostReason::Destroyed, "destroyed by the test");
        let lost = |what: &str, error: Option<Error>| match error {
            Some(Error::DeviceLost { .. }) => {}
            other => panic!("{path}: {what} after the loss: {other:?}"),
        };
        lost("alloc", ctx.alloc::<u32>(&[4]).err());
        lost("zeros", ctx.zeros::<u32>(&[4]).err());
        lost("fill", ctx.fill(&[4], 1u32).err());
        lost("device_put", ctx.device_put(&[1u32; 4], &[4]).err());
        // The loss is said before the shape is looked at, by every way to make an array.
        let no_device_addresses = [usize::MAX, 2];
        lost(
            "alloc a bad shape",
            ctx.alloc::<u32>(&no_device_addresses).err(),
        );
        lost(
            "zeros a bad shape",
            ctx.zeros::<u32>(&no_device_addresses).err(),
        );
        lost(
            "fill a bad shape",
            ctx.fill(&no_device_addresses, 1u32).err(),
        );
        lost(
            "device_put a bad shape",
            ctx.device_put(&[1u32; 4], &no_device_addresses).err(),
        );
        lost("device_get", ctx.device_get(&x).err());
        lost("copy", ctx.copy(&x).err());
        lost("dynamic_slice", ctx.dynamic_slice(&x, &[2], &[4]).err());
        lost("tune_kernels", ctx.tune_kernels().err());
        // The loss is said before the values or the constant are looked at.
        let tunable = gpu_arena::kernels::KernelDesc::wgsl(
            "override WG: u32 = 1u;
             @group(0) @binding(0) var<storage, read_write> a: array<u32>;
             @compute @workgroup_size(WG) fn main() { a[0] = 1u; }",
            "main",
        );
        for (what, constant, values) in [
            ("tune_kernel", "WG", &[1.0, 2.0][..]),
            ("tune_kernel, no values", "WG", &[][..]),
            ("tune_kernel, no such constant", "NOPE", &[1.0][..]),
        ] {
            let tuned = ctx.tune_kernel(tunable, constant, values, |_| Ok(()));
            lost(what, tuned.err());
        }
        lost(
            "launch",
            ctx.launch(&kernel)
                .arg_mut(&mut y)
                .grid([1, 1, 1])
                .run()
                .err(),
        );
        let mut batch = ctx.upload_batch();
        let put = batch.put(&[1u32; 4], &[4]);
        lost("upload_batch", put.err().or_else(|| batch.finish().err()));
        lost("an empty upload_batch", ctx.upload_batch().finish().err());
        lost("synchronize", ctx.synchronize().err());
        lost("flush", ctx.flush().err());
        lost("Sequence::submit", sequence.submit().err());
        lost("CapturedStep::run", step.run().submit().err());
        let mut late = ctx.capture();
        // Recording refuses too, and a call with a bad argument says the loss first.
        lost(
            "Capture::launch",
            late.launch(&kernel)
                .arg_mut(&mut w)
                .grid([1, 1, 1])
                .run()
                .err(),
        );
        lost("Capture::array_slot", late.array_slot(&x).err());
        lost("Capture::read", late.read(&x).err());
        lost("Capture::finish", late.finish().err());
        let mut recording = ctx.sequence();
        lost(
            "Sequence::launch",
            recording
                .launch(&kernel)
                .arg_mut(&mut w)
                .grid([1, 1, 1])
                .run()
                .err(),
        );
        lost("reserve", ctx.reserve().err());
        // A recording says the loss before its arguments and before the transfer guard.
        lost(
            "Sequence::dynamic_slice, start of rank 2",
            recording.dynamic_slice(&x, &[1, 2], &[4]).err(),
        );
        lost(
            "Sequence::fill, a bad shape",
            recording.fill(&[usize::MAX, 2], 1u32).err(),
        );
        {
            let _guard = gpu_arena::TransferGuard::scoped(gpu_arena::TransferGuardLevel::Disallow);
            lost(
                "Sequence::put, guarded",
                recording.put(&[1u32; 4], &[4]).err(),
            );
            lost("Sequence::copy, guarded", recording.copy(&x).err());
            lost(
                "device_get_into, a wrong length",
                ctx.device_get_into(&x, &mut [0u32; 3]).err(),
            );
        }
        lost(
            "dynamic_slice, start of rank 2",
            ctx.dynamic_slice(&x, &[1, 2], &[4]).err(),
        );
        lost(
            "launch missing its argument",
            ctx.launch(&kernel).grid([1, 1, 1]).run().err(),
        );
        lost(
            "UploadBatch::put, a bad shape",
            ctx.upload_batch().put(&[1u32; 4], &[3]).err(),
        );
        let mut other = ctx.app_work();
        lost("AppWork::storage", other.storage(&x).err());
        lost("AppWork::vertex_buffer", other.vertex_buffer(&x).err());
        assert!(other.is_empty(), "{path}: refused hand-outs record nothing");
        lost("AppWork::submit", work.submit(Vec::new()).err());
        let raw = ctx
            .device()
            .create_command_encoder(&Default::default())
            .finish();
        lost("raw_submit", ctx.raw_submit([raw], &[&x]).err());
        let refused = ctx.dynamic_update_slice(y, &x, &[0]).unwrap_err();
        assert!(
            matches!(refused.error, Error::DeviceLost { .. }),
            "{path}: {:?}",
            refused.error
        );
        assert_eq!(
            refused.array.shape(),
            [16],
            "{path}: the donated array comes back"
        );
    }
}

/// Dropping an `AppWork` without `submit` is seen: its arrays stop being pending and a warning
/// names the work; while it lived, the refusal offered only what can be done (ending the
/// work), never recording a host read in it.
#[gpu_test]
fn an_app_work_dropped_without_submit_un_pends_its_arrays_and_warns() {
    let ctx = harness::context();
    let mut a = ctx.device_put(&[1u32; 64], &[64]).unwrap();
    let work = {
        let mut work = ctx.app_work();
        let _ = work.storage_mut(&mut a).unwrap();
        work
    };
    let refused = ctx.device_get(&a).unwrap_err();
    assert!(
        matches!(&refused, Error::PendingInRecorder { .. }),
        "{refused:?}"
    );
    let message = refused.to_string();
    assert!(
        message.contains("call submit() on that AppWork first"),
        "{message}"
    );
    assert!(!message.contains("or record"), "{message}");
    drop(work);
    assert_eq!(
        ctx.device_get(&a).unwrap(),
        vec![1; 64],
        "no longer pending"
    );
    let warnings = harness::logged_messages_containing(
        "was dropped with 1 array handed out and not submitted",
    );
    assert!(!warnings.is_empty(), "the drop is reported");
}

/// A write an `AppWork` asks for over an array that a `Sequence` reads is refused naming the
/// sequence, even where the work itself already reads the array: on two threads, each with a
/// work of its own.
#[gpu_test]
fn an_app_work_write_over_a_sequences_read_names_the_sequence_not_the_work() {
    use gpu_arena::error::{Access, RecorderKind};
    let ctx = harness::context();
    let a = ctx.device_put(&[1u32; 64], &[64]).unwrap();
    let mut sequence = ctx.sequence();
    let copied = sequence.copy(&a).unwrap();
    let a = std::sync::Mutex::new(a);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                let mut a = a.lock().unwrap();
                let mut work = ctx.app_work();
                work.vertex_buffer(&a).unwrap();
                match work.storage_mut(&mut a).unwrap_err() {
                    Error::PendingInRecorder {
                        recorder, recorded, ..
                    } => {
                        assert_eq!(recorder.kind, RecorderKind::Sequence);
                        assert_eq!(recorded, Access::Read);
                    }
                    other => panic!("{other:?}"),
                }
                assert_eq!(work.len(), 1, "the refused write records nothing");
                work.submit([]).unwrap();
            });
        }
    });
    sequence.submit().unwrap();
    assert_eq!(ctx.device_get(&copied).unwrap(), vec![1; 64]);
}

/// What an `AppWork` cannot hand out is an [`Error::AppWork`] whose `refusal` holds the values
/// (an empty array, index elements of another size, a binding above the device's limit), and
/// nothing is recorded: on two threads over one array, each refused the same way, after which
/// both hand the array out as storage and submit.
#[gpu_test]
fn app_work_refusals_are_typed_with_their_values_and_record_nothing() {
    use gpu_arena::error::AppWorkRefusal;
    let ctx = harness::context();
    let mut work = ctx.app_work();
    let empty = ctx.zeros::<f32>(&[0]).unwrap();
    match work.storage(&empty).unwrap_err() {
        Error::AppWork {
            operation: "AppWork::storage",
            refusal: AppWorkRefusal::EmptyArray { array },
        } => assert_eq!(array.shape, Some(vec![0])),
        other => panic!("{other:?}"),
    }
    let bytes = ctx.device_put(&[1u8; 6], &[6]).unwrap();
    match work.index_buffer(&bytes).unwrap_err() {
        Error::AppWork {
            refusal: AppWorkRefusal::IndexElementSize { element, bytes },
            ..
        } => assert_eq!((element, bytes), ("u8", 1)),
        other => panic!("{other:?}"),
    }
    assert!(work.is_empty(), "refused uses record nothing");
    drop(work);
    let limit = ctx.device().limits().max_uniform_buffer_binding_size;
    let words = (limit / 4 + 1) as usize;
    let big = ctx.zeros::<u32>(&[words]).unwrap();
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                let mut work = ctx.app_work();
                let error = work.uniform(&big).unwrap_err();
                match &error {
                    Error::AppWork {
                        operation: "AppWork::uniform",
                        refusal:
                            AppWorkRefusal::BindingTooLarge {
                                bytes,
                                limit: got,
                                limit_name,
                                ..
                            },
                    } => {
                        assert_eq!((*bytes, *got), (words as u64 * 4, limit));
                        assert_eq!(*limit_name, "max_uniform_buffer_binding_size");
                    }
                    other => panic!("{other:?}"),
                }
                assert!(
                    error
                        .to_string()
                        .contains("max_uniform_buffer_binding_size"),
                    "{error}"
                );
                assert!(work.is_empty());
                work.storage(&big).unwrap();
                work.submit(Vec::new()).unwrap();
            });
        }
    });
    assert_eq!(ctx.device_get(&big).unwrap(), vec![0u32; words]);
}

/// Points drawn from an arena vertex buffer whose fragment shader adds the arena uniform
/// `weight.x` to each covered pixel's count in another arena array.
const MARK_POINTS: &str = "
@group(0) @binding(0) var<storage, read_write> marks: array<atomic<u32>>;
@group(0) @binding(1) var<uniform> weight: vec4<u32>;
struct Out { @builtin(position) pos: vec4<f32> }
@vertex fn vs(@location(0) p: vec2<f32>) -> Out {
    var o: Out;
    o.pos = vec4<f32>(p.x / 8.0 - 1.0, 1.0 - p.y / 8.0, 0.0, 1.0);
    return o;
}
@fragment fn fs(in: Out) -> @location(0) vec4<f32> {
    atomicAdd(&marks[u32(in.pos.y) * 16u + u32(in.pos.x)], weight.x);
    return vec4<f32>(1.0, 0.0, 0.0, 1.0);
}";

/// Draws `vertices` as points into a fresh 16×16 texture in one pass whose fragment shader
/// writes `marks` and reads `weight`, all three handed out by one `AppWork`; returns the
/// texture.
fn draw_and_mark(
    ctx: &Context,
    device: &wgpu::Device,
    vertices: &DeviceArray<[f32; 2]>,
    marks: &mut DeviceArray<u32>,
    weight: &DeviceArray<u32>,
) -> wgpu::Texture {
    let (texture, pipeline) = points_target(device, MARK_POINTS, "mark points");
    let view = texture.create_view(&Default::default());
    let mut encoder = device.create_command_encoder(&Default::default());
    let mut work = ctx.app_work();
    let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some("mark points"),
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[
            wgpu::BindGroupEntry {
                binding: 0,
                resource: work.storage_mut(marks).unwrap(),
            },
            wgpu::BindGroupEntry {
                binding: 1,
                resource: work.uniform(weight).unwrap(),
            },
        ],
    });
    {
        let mut pass = clear_pass(&mut encoder, &view);
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bind_group, &[]);
        pass.set_vertex_buffer(0, work.vertex_buffer(vertices).unwrap());
        pass.draw(0..vertices.len() as u32, 0..1);
    }
    work.submit([encoder.finish()]).unwrap();
    texture
}

/// One app pass draws arena vertices while its fragment shader writes another arena array and
/// reads a third as a uniform, all three in one region's buffer on Vulkan (in `platform` mode,
/// as the docs say for GL, each in its own). The marks are filled by a library op just before
/// and read by one just after, so both sides of the pass are ordered against the library's own
/// work; the result is checked against the host.
#[gpu_test(needs = Vulkan)]
fn one_pass_draws_arena_vertices_while_its_fragment_shader_writes_another_arena_array() {
    let points: Vec<[f32; 2]> = (0..16)
        .map(|i| [i as f32 + 0.5, (i * 5 % 16) as f32 + 0.5])
        .collect();
    for (name, backends, config) in [
        ("vulkan zero-copy", wgpu::Backends::VULKAN, test_config()),
        (
            "vulkan staging",
            wgpu::Backends::VULKAN,
            ArenaConfig {
                zero_copy: false,
                ..test_config()
            },
        ),
        (
            "gl platform",
            wgpu::Backends::GL,
            ArenaConfig {
                allocator: gpu_arena::AllocatorKind::Platform,
                ..test_config()
            },
        ),
    ] {
        let Some(app) = app_device(backends, &config) else {
            assert!(name.starts_with("gl"), "{name}: no adapter");
            continue;
        };
        let ctx = Context::from_wgpu(app.clone(), config).unwrap();
        let vertices = ctx.device_put(&points, &[points.len()]).unwrap();
        let weight = ctx.device_put(&[7u32, 0, 0, 0], &[4]).unwrap();
        let marks = ctx.zeros::<u32>(&[256]).unwrap();
        let mut marks = ctx.fill_in_place(marks, 100).unwrap();
        let one_buffer = marks.buffer() == vertices.buffer() && weight.buffer() == marks.buffer();
        assert_eq!(one_buffer, name.starts_with("vulkan"), "{name}");
        for round in 1..=2u32 {
            let texture = draw_and_mark(&ctx, &app.device, &vertices, &mut marks, &weight);
            assert_eq!(
                read_pixels(&app.device, &app.queue, &texture),
                expected_pixels(&points),
                "{name}"
            );
            let want: Vec<u32> = expected_pixels(&points)
                .iter()
                .map(|&p| if p == 255 { 100 + 7 * round } else { 100 })
                .collect();
            assert_eq!(
                ctx.device_get(&marks).unwrap(),
                want,
                "{name}, round {round}"
            );
        }
        assert_eq!(ctx.device_get(&vertices).unwrap(), points, "{name}");
    }
}

/// The same on a device the context opened itself, whose device-lost callback is its own but
/// hears of a `Device::destroy` only at the next poll.
#[gpu_test]
fn a_sequence_with_parameters_submitted_after_its_own_device_is_destroyed_is_ok_or_device_lost() {
    for (path, zero_copy) in [("zero-copy", true), ("staging", false)] {
        let ctx = crate::harness::context_with(ArenaConfig {
            zero_copy,
            ..test_config()
        });
        submit_parameters_after_destroy(&ctx, || ctx.device().destroy(), path);
    }
}

/// The guide's request (the least limits with the adapter's room for immediates, the optional
/// features the adapter has) gives a device on which a kernel's `var<immediate>` parameters
/// run, where the adapter offers immediates.
#[gpu_test]
fn the_guides_device_request_runs_immediate_parameters_where_the_adapter_has_them() {
    init_logging();
    let config = test_config();
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        flags: wgpu::InstanceFlags::VALIDATION,
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    });
    let adapter =
        pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions::default()))
            .expect("an adapter");
    let needs = DeviceRequirements::for_config(&config);
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        required_features: needs.features | (adapter.features() & needs.optional_features),
        required_limits: wgpu::Limits {
            max_immediate_size: adapter.limits().max_immediate_size,
            ..needs.limits.clone()
        },
        ..Default::default()
    }))
    .unwrap();
    let ctx = Context::from_wgpu(AppDevice::new(&adapter, &device, &queue), config).unwrap();
    let source = harness::IMMEDIATE_ADD;
    let offered = adapter.features().contains(wgpu::Features::IMMEDIATES)
        && adapter.limits().max_immediate_size >= 4;
    eprintln!("adapter offers immediates: {offered}");
    match ctx.kernel(source, "main") {
        Ok(kernel) => {
            assert!(offered, "compiled where the adapter has no immediates");
            harness::run_immediate_add(&ctx, &kernel);
        }
        Err(error) => assert!(!offered, "the recipe left immediates unusable: {error}"),
    }
    if offered {
        // Without the room, the refusal says how to ask for it.
        let features = needs.features | (adapter.features() & needs.optional_features);
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            required_features: features,
            required_limits: needs.limits.clone(),
            ..Default::default()
        }))
        .unwrap();
        let ctx = Context::from_wgpu(AppDevice::new(&adapter, &device, &queue), test_config());
        let error = ctx.unwrap().kernel(source, "main").unwrap_err();
        let Error::KernelCompile { message, .. } = &error else {
            panic!("{error:?}")
        };
        assert!(
            message.contains("max_immediate_size is 0")
                && message.contains("the adapter's max_immediate_size in its required limits"),
            "{message}"
        );
    }
}
