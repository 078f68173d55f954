//! Kernel times on the test machine's GPU (lavapipe in CI): with the timeline on, every
//! dispatch (single ops, sequences, captured runs) gets its GPU begin and duration from
//! timestamp queries, on the timeline, the trace's GPU track, `Context::kernel_times` and the
//! report; a device without timestamp queries records no durations and reports no error.

use crate::harness::{context_with, test_config};
use gpu_arena::profile::{TimelineEventKind as Kind, DEFAULT_TIMELINE_CAPACITY};
use gpu_arena::{ArenaConfig, Context, KernelDesc};
use std::time::Instant;

/// A kernel whose every invocation runs `p.iters` dependent multiply-adds: as long as asked,
/// and the compiler cannot fold the loop (the count is a parameter).
const SPIN: &str = r#"
struct P { iters: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read_write> a: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x >= arrayLength(&a)) { return; }
    var x = a[id.x];
    for (var i = 0u; i < p.iters; i = i + 1u) {
        x = fract(x * 1.0001 + 0.37);
    }
    a[id.x] = x;
}
"#;

/// Elements of the spinning kernel's array: 64 workgroups.
const SPIN_ELEMENTS: usize = 4096;

fn timed() -> Context {
    timed_with_a_pass_per_dispatch(false)
}

/// A timed context; `pass_per_dispatch` times each dispatch by a pass of its own, as on a
/// device without `TIMESTAMP_QUERY_INSIDE_PASSES`.
fn timed_with_a_pass_per_dispatch(pass_per_dispatch: bool) -> Context {
    context_with(ArenaConfig {
        timeline_capacity: DEFAULT_TIMELINE_CAPACITY,
        max_region_bytes: Some(8 << 20),
        force_pass_per_timed_dispatch: pass_per_dispatch,
        ..test_config()
    })
}

/// The spinning kernel under `label`, from a source of its own.
fn spin_kernel(ctx: &Context, label: &str) -> gpu_arena::Kernel {
    let source = format!("// {label}\n{SPIN}");
    ctx.kernel_with(KernelDesc::wgsl(&source, "main").label(label))
        .unwrap()
}

fn kernel_events(ctx: &Context, name: &str) -> Vec<(u64, u64)> {
    ctx.memory_timeline()
        .unwrap()
        .events
        .iter()
        .filter_map(|e| match &e.kind {
            Kind::Kernel {
                name: n,
                duration_ns,
                ..
            } if n == name => Some((e.time_ns, *duration_ns)),
            _ => None,
        })
        .collect()
}

#[gpu_test]
fn every_launch_path_records_gpu_durations_named_by_the_kernel() {
    every_launch_path_is_timed(false);
}

#[gpu_test]
fn every_launch_path_is_timed_by_a_pass_per_dispatch_without_stamps_inside_passes() {
    every_launch_path_is_timed(true);
}

/// Single ops, a sequence and a captured step's runs, each timed per dispatch, on the
/// timeline, in the table and on the trace's GPU track; `pass_per_dispatch` times them as on a
/// device without `TIMESTAMP_QUERY_INSIDE_PASSES`.
fn every_launch_path_is_timed(pass_per_dispatch: bool) {
    let ctx = timed_with_a_pass_per_dispatch(pass_per_dispatch);
    assert!(ctx.times_kernels(), "lavapipe has timestamp queries");
    let single = spin_kernel(&ctx, "single");
    let sequenced = spin_kernel(&ctx, "sequenced");
    let captured = spin_kernel(&ctx, "captured");
    let mut a = ctx.zeros::<f32>(&[SPIN_ELEMENTS]).unwrap();
    let started_ns = ctx.timeline().unwrap().now_ns();
    for _ in 0..3 {
        ctx.launch(&single)
            .arg_mut(&mut a)
            .params(&100u32)
            .grid_for(SPIN_ELEMENTS as u64)
            .run()
            .unwrap();
    }
    let mut s = ctx.sequence();
    for _ in 0..2 {
        s.launch(&sequenced)
            .arg_mut(&mut a)
            .params(&100u32)
            .grid_for(SPIN_ELEMENTS as u64)
            .run()
            .unwrap();
    }
    s.submit().unwrap();
    let mut cap = ctx.capture();
    cap.launch(&captured)
        .arg_mut(&mut a)
        .params(&100u32)
        .grid_for(SPIN_ELEMENTS as u64)
        .run()
        .unwrap();
    let mut step = cap.finish().unwrap();
    for _ in 0..4 {
        step.run().submit().unwrap();
    }

    let times = ctx.kernel_times().unwrap().expect("timed");
    for (name, calls) in [("single", 3), ("sequenced", 2), ("captured", 4)] {
        let row = times
            .get(name)
            .unwrap_or_else(|| panic!("{name} in\n{times}"));
        assert_eq!(row.calls, calls, "{name}\n{times}");
        assert!(row.total_ns > 0 && row.max_ns >= row.mean_ns(), "{times}");
        let events = kernel_events(&ctx, name);
        assert_eq!(events.len(), calls as usize, "{name}");
        for (begin_ns, duration_ns) in events {
            assert!(duration_ns > 0, "{name}");
            // Placed on the timeline's clock: after the loop began, and not in the future.
            assert!(begin_ns >= started_ns, "{name}: {begin_ns} < {started_ns}");
            assert!(begin_ns <= ctx.timeline().unwrap().now_ns(), "{name}");
        }
    }
    let printed = times.to_string();
    assert!(
        printed.contains("sequenced") && printed.contains("calls"),
        "{printed}"
    );

    // The trace's GPU track: one complete slice per dispatch, named by its kernel.
    let trace: serde_json::Value =
        serde_json::from_str(&ctx.memory_timeline().unwrap().to_chrome_trace("lavapipe")).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    let gpu_tid = events
        .iter()
        .find(|e| e["name"] == "thread_name" && e["args"]["name"] == "GPU")
        .map(|e| e["tid"].clone())
        .expect("a GPU track");
    let slices: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["tid"] == gpu_tid && e["ph"] == "X")
        .collect();
    assert_eq!(slices.len(), 9);
    assert!(slices
        .iter()
        .all(|e| e["dur"].as_f64().unwrap() > 0.0 && e["cat"] == "kernel"));
    assert_eq!(slices.iter().filter(|e| e["name"] == "captured").count(), 4);
}

#[gpu_test]
fn a_sequence_past_one_query_set_is_timed_whole() {
    // A pass per dispatch takes two stamps each: 2100 dispatches take 4200 stamps, past the
    // 4096 of one query set.
    let ctx = timed_with_a_pass_per_dispatch(true);
    let spin = spin_kernel(&ctx, "many");
    let mut a = ctx.zeros::<f32>(&[64]).unwrap();
    const DISPATCHES: u64 = 2100;
    let mut s = ctx.sequence();
    for _ in 0..DISPATCHES {
        s.launch(&spin)
            .arg_mut(&mut a)
            .params(&1u32)
            .grid_for(64)
            .run()
            .unwrap();
    }
    s.submit().unwrap();
    let times = ctx.kernel_times().unwrap().unwrap();
    let row = times.get("many").unwrap();
    assert_eq!(row.calls, DISPATCHES, "{times}");
    assert!(row.max_ns > 0, "{times}");
}

#[gpu_test]
fn the_per_kernel_total_is_within_ten_percent_of_a_gpu_bound_loops_wall_time() {
    let ctx = timed();
    let spin = spin_kernel(&ctx, "spin");
    let mut a = ctx.zeros::<f32>(&[SPIN_ELEMENTS]).unwrap();
    // Sizes the loop on this machine: a dispatch alone (after a first one, which may compile
    // the shader on lavapipe), then enough iterations that a dispatch takes about 25 ms (the
    // CPU's share of the loop, a launch's few µs, is then well under 1%).
    let probe_iters = 2000u32;
    let mut probe = 0;
    for _ in 0..2 {
        ctx.timeline().unwrap().clear();
        ctx.launch(&spin)
            .arg_mut(&mut a)
            .params(&probe_iters)
            .grid_for(SPIN_ELEMENTS as u64)
            .run()
            .unwrap();
        probe = ctx
            .kernel_times()
            .unwrap()
            .unwrap()
            .get("spin")
            .unwrap()
            .total_ns;
    }
    let iters = ((25e6 / probe.max(1) as f64) * f64::from(probe_iters)).clamp(200.0, 2e6) as u32;
    ctx.timeline().unwrap().clear();

    const LAUNCHES: u64 = 16;
    let started = Instant::now();
    for _ in 0..LAUNCHES {
        ctx.launch(&spin)
            .arg_mut(&mut a)
            .params(&iters)
            .grid_for(SPIN_ELEMENTS as u64)
            .run()
            .unwrap();
    }
    ctx.synchronize().unwrap();
    let wall_ns = started.elapsed().as_nanos() as f64;
    let times = ctx.kernel_times().unwrap().unwrap();
    let row = times.get("spin").unwrap();
    assert_eq!(row.calls, LAUNCHES, "{times}");
    let ratio = times.total_ns() as f64 / wall_ns;
    eprintln!(
        "{LAUNCHES} dispatches of {iters} iterations: kernels {:.1} ms, wall {:.1} ms, ratio {ratio:.3}\n{times}",
        times.total_ns() as f64 / 1e6,
        wall_ns / 1e6
    );
    assert!(
        (0.9..=1.1).contains(&ratio),
        "kernel total {} ns vs wall {wall_ns} ns\n{times}",
        times.total_ns()
    );
}

#[gpu_test]
fn a_device_without_timestamp_queries_records_no_durations_and_no_error() {
    // Kernel times off in the configuration: the device is opened without timestamp queries.
    let ctx = context_with(ArenaConfig {
        timeline_capacity: DEFAULT_TIMELINE_CAPACITY,
        kernel_times: false,
        ..test_config()
    });
    assert!(!ctx
        .device()
        .features()
        .contains(gpu_arena::wgpu::Features::TIMESTAMP_QUERY));
    assert!(!ctx.times_kernels());
    let spin = spin_kernel(&ctx, "spin");
    let mut a = ctx.zeros::<f32>(&[SPIN_ELEMENTS]).unwrap();
    ctx.launch(&spin)
        .arg_mut(&mut a)
        .params(&10u32)
        .grid_for(SPIN_ELEMENTS as u64)
        .run()
        .unwrap();
    let mut s = ctx.sequence();
    s.launch(&spin)
        .arg_mut(&mut a)
        .params(&10u32)
        .grid_for(SPIN_ELEMENTS as u64)
        .run()
        .unwrap();
    s.submit().unwrap();
    assert_eq!(ctx.kernel_times().unwrap(), None);
    let timeline = ctx.memory_timeline().unwrap();
    let dispatches = timeline
        .events
        .iter()
        .filter(|e| matches!(&e.kind, Kind::Dispatch { name, .. } if name == "spin"))
        .count();
    assert_eq!(dispatches, 2, "dispatches are still instants");
    assert!(timeline.kernel_times().is_empty());
    let page = gpu_arena::report::render_html(&ctx.memory_snapshot(), Some(&timeline));
    assert!(page.contains("No kernel was timed"));
    assert!(!ctx
        .memory_timeline()
        .unwrap()
        .to_chrome_trace("x")
        .contains("\"kernel\""));
}

/// Timestamps mapped before the app destroys the device are read afterwards without a word
/// to the device's error handler (the harness fails a test on any validation error).
#[gpu_test]
fn timestamps_left_unread_when_the_app_destroys_the_device_are_dropped_quietly() {
    let ctx = timed();
    if !ctx.times_kernels() {
        println!("skipped: the device has no timestamp queries");
        return;
    }
    let spin = spin_kernel(&ctx, "spin");
    let mut a = ctx.zeros::<f32>(&[SPIN_ELEMENTS]).unwrap();
    for _ in 0..3 {
        ctx.launch(&spin)
            .arg_mut(&mut a)
            .params(&10u32)
            .grid_for(SPIN_ELEMENTS as u64)
            .run()
            .unwrap();
        ctx.flush().unwrap();
    }
    ctx.synchronize().unwrap();
    ctx.device().destroy();
    // Before and after the context learns of the loss, from two threads.
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for _ in 0..2 {
                    let _ = ctx.memory_timeline();
                    let _ = ctx.kernel_times();
                    let _ = ctx.synchronize();
                }
            });
        }
    });
    assert!(matches!(
        ctx.synchronize(),
        Err(gpu_arena::Error::DeviceLost { .. })
    ));
    let timeline = ctx.memory_timeline().expect("the timeline is on");
    let times = timeline.kernel_times();
    let spins = times.get("spin");
    assert!(spins.is_none_or(|row| row.calls <= 3), "{spins:?}");
}

#[gpu_test]
fn the_timeline_off_asks_for_no_timestamps_and_times_nothing() {
    let ctx = context_with(test_config());
    assert!(!ctx
        .device()
        .features()
        .contains(gpu_arena::wgpu::Features::TIMESTAMP_QUERY));
    assert!(!ctx.times_kernels());
    assert_eq!(ctx.kernel_times().unwrap(), None);
}

#[gpu_test]
fn the_gl_backend_times_kernels_where_it_has_timestamp_queries_and_never_fails() {
    let Some(gl) = crate::harness::gl_context_with(ArenaConfig {
        timeline_capacity: DEFAULT_TIMELINE_CAPACITY,
        ..test_config()
    }) else {
        crate::harness::skip(crate::harness::Need::GlAdapter);
        return;
    };
    let has = gl
        .device()
        .features()
        .contains(gpu_arena::wgpu::Features::TIMESTAMP_QUERY);
    assert_eq!(gl.times_kernels(), has);
    let spin = spin_kernel(&gl, "spin");
    let mut a = gl.zeros::<f32>(&[SPIN_ELEMENTS]).unwrap();
    for _ in 0..2 {
        gl.launch(&spin)
            .arg_mut(&mut a)
            .params(&10u32)
            .grid_for(SPIN_ELEMENTS as u64)
            .run()
            .unwrap();
    }
    let times = gl.kernel_times().unwrap();
    eprintln!("GL timestamp queries: {has}; {times:?}");
    match times {
        Some(times) => assert_eq!(times.get("spin").map(|k| k.calls), Some(2), "{times}"),
        None => assert!(!has),
    }
    let _ = gl.device_get(&a).unwrap();
}

#[gpu_test]
fn two_threads_launching_on_one_context_are_both_timed() {
    let ctx = timed();
    const LAUNCHES: u64 = 12;
    std::thread::scope(|scope| {
        for name in ["left", "right"] {
            let ctx = &ctx;
            scope.spawn(move || {
                let kernel = spin_kernel(ctx, name);
                let mut a = ctx.zeros::<f32>(&[SPIN_ELEMENTS]).unwrap();
                for i in 0..LAUNCHES {
                    if i % 4 == 3 {
                        let mut s = ctx.sequence();
                        s.launch(&kernel)
                            .arg_mut(&mut a)
                            .params(&20u32)
                            .grid_for(SPIN_ELEMENTS as u64)
                            .run()
                            .unwrap();
                        s.submit().unwrap();
                    } else {
                        ctx.launch(&kernel)
                            .arg_mut(&mut a)
                            .params(&20u32)
                            .grid_for(SPIN_ELEMENTS as u64)
                            .run()
                            .unwrap();
                    }
                }
                let _ = ctx.device_get(&a).unwrap();
            });
        }
    });
    let times = ctx.kernel_times().unwrap().unwrap();
    for name in ["left", "right"] {
        assert_eq!(times.get(name).map(|k| k.calls), Some(LAUNCHES), "{times}");
    }
}

#[gpu_test]
fn the_report_lists_kernel_times() {
    let ctx = timed();
    let spin = spin_kernel(&ctx, "reported <kernel>");
    let mut a = ctx.zeros::<f32>(&[SPIN_ELEMENTS]).unwrap();
    ctx.launch(&spin)
        .arg_mut(&mut a)
        .params(&10u32)
        .grid_for(SPIN_ELEMENTS as u64)
        .run()
        .unwrap();
    ctx.synchronize().unwrap();
    let page =
        gpu_arena::report::render_html(&ctx.memory_snapshot(), ctx.memory_timeline().as_ref());
    let section = &page[page
        .find(r#"<section id="kernels">"#)
        .expect("a kernels section")..];
    let section = &section[..section.find("</section>").unwrap()];
    assert!(section.contains("reported &lt;kernel&gt;"), "{section}");
    assert!(section.contains("<th class=\"n\">calls</th>"), "{section}");
}

#[gpu_test]
fn unlabelled_kernels_whose_entry_points_are_all_main_are_rows_of_their_own() {
    let ctx = timed();
    let mut a = ctx.zeros::<f32>(&[SPIN_ELEMENTS]).unwrap();
    // Three sources, each a kernel whose entry point is `main`, as every README example.
    let kernels: Vec<gpu_arena::Kernel> = (0..3)
        .map(|k| ctx.kernel(&format!("// step {k}\n{SPIN}"), "main").unwrap())
        .collect();
    for (k, kernel) in kernels.iter().enumerate() {
        for _ in 0..=k {
            ctx.launch(kernel)
                .arg_mut(&mut a)
                .params(&10u32)
                .grid_for(SPIN_ELEMENTS as u64)
                .run()
                .unwrap();
        }
    }
    ctx.synchronize().unwrap();
    let times = ctx.kernel_times().unwrap().expect("timed");
    for (k, kernel) in kernels.iter().enumerate() {
        assert!(kernel.name().starts_with("main#"), "{}", kernel.name());
        let row = times
            .get(kernel.name())
            .unwrap_or_else(|| panic!("{} in\n{times}", kernel.name()));
        assert_eq!(row.calls, k as u64 + 1, "{times}");
    }
    let mains = times
        .kernels
        .iter()
        .filter(|row| row.name.starts_with("main"))
        .count();
    assert_eq!(mains, 3, "{times}");
}

#[gpu_test]
fn a_clear_forgets_the_times_of_work_submitted_before_it_even_when_they_are_read_after() {
    let ctx = timed();
    let kernel = spin_kernel(&ctx, "before-and-after");
    let mut a = ctx.zeros::<f32>(&[SPIN_ELEMENTS]).unwrap();
    let launch = |a: &mut gpu_arena::DeviceArray<f32>| {
        ctx.launch(&kernel)
            .arg_mut(a)
            .params(&20u32)
            .grid_for(SPIN_ELEMENTS as u64)
            .run()
            .unwrap()
    };
    launch(&mut a);
    ctx.synchronize().unwrap();
    // Nothing has read the timestamps yet: they are read after the clear.
    ctx.timeline().unwrap().clear();
    let calls = |ctx: &Context| {
        (ctx.kernel_times().unwrap().unwrap())
            .get("before-and-after")
            .map_or(0, |k| k.calls)
    };
    assert_eq!(calls(&ctx), 0);
    assert!(kernel_events(&ctx, "before-and-after").is_empty());
    // Work after the clear counts, on two threads at once.
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut b = ctx.zeros::<f32>(&[SPIN_ELEMENTS]).unwrap();
            launch(&mut b);
            ctx.synchronize().unwrap();
        });
        launch(&mut a);
    });
    ctx.synchronize().unwrap();
    assert_eq!(calls(&ctx), 2);
    assert_eq!(kernel_events(&ctx, "before-and-after").len(), 2);
}

/// A launch gathered (recorded, not yet submitted) before a clear is work of before the clear:
/// its dispatch event is gone, and so is its time; the launch after the clear, which goes out
/// in the same submission, counts alone, its kernel event matching its dispatch event.
#[gpu_test]
fn a_launch_gathered_before_a_clear_is_not_counted_after_it() {
    let ctx = timed();
    let kernel = spin_kernel(&ctx, "gathered-across-clear");
    let mut a = ctx.zeros::<f32>(&[SPIN_ELEMENTS]).unwrap();
    let launch = |a: &mut gpu_arena::DeviceArray<f32>| {
        ctx.launch(&kernel)
            .arg_mut(a)
            .params(&1u32)
            .grid_for(SPIN_ELEMENTS as u64)
            .run()
            .unwrap()
    };
    ctx.synchronize().unwrap();
    launch(&mut a);
    ctx.timeline().unwrap().clear();
    launch(&mut a);
    ctx.synchronize().unwrap();
    let times = ctx.kernel_times().unwrap().unwrap();
    assert_eq!(times.get("gathered-across-clear").map(|k| k.calls), Some(1));
    assert_eq!(kernel_events(&ctx, "gathered-across-clear").len(), 1);
    let dispatches = (ctx.memory_timeline().unwrap().events.iter())
        .filter(
            |e| matches!(&e.kind, Kind::Dispatch { name, .. } if name == "gathered-across-clear"),
        )
        .count();
    assert_eq!(dispatches, 1);
    // A sequence's dispatches are on the timeline at its submit: recorded before a clear and
    // submitted after it, they count, each with its dispatch event.
    let mut s = ctx.sequence();
    for _ in 0..2 {
        s.launch(&kernel)
            .arg_mut(&mut a)
            .params(&1u32)
            .grid_for(SPIN_ELEMENTS as u64)
            .run()
            .unwrap();
    }
    ctx.timeline().unwrap().clear();
    s.submit().unwrap();
    ctx.synchronize().unwrap();
    let times = ctx.kernel_times().unwrap().unwrap();
    assert_eq!(times.get("gathered-across-clear").map(|k| k.calls), Some(2));
    let dispatches = (ctx.memory_timeline().unwrap().events.iter())
        .filter(
            |e| matches!(&e.kind, Kind::Dispatch { name, .. } if name == "gathered-across-clear"),
        )
        .count();
    assert_eq!(dispatches, 2);
}
