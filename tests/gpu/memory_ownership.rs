//! The crate, not wgpu, owns its device memory: ending a buffer or the device early from safe
//! code (`DeviceArray::buffer().destroy()`, `Context::device().destroy()`, as a lost device
//! would) never makes a later call read or write freed memory. Every later call returns the
//! right data (the memory is still there) or a typed error, never garbage, never a crash.
//!
//! Each scenario runs in a child process (this test binary, re-run on one test with
//! `MEMORY_OWNERSHIP_SCENARIO` set), so that a segfault or an abort fails the test instead of
//! the whole binary, and the child's output can be read for validation errors.

use crate::harness;
use crate::harness::{context_with, test_config};
use gpu_arena::{ArenaConfig, Context, DeviceArray, Error};

const SCENARIO_VAR: &str = "MEMORY_OWNERSHIP_SCENARIO";
/// What a child prints last when its scenario ran to the end.
const DONE: &str = "memory-ownership scenario finished";

/// Runs `scenario` in a child process and fails unless it finished cleanly, without a crash and
/// without a Vulkan validation error.
fn run_in_child(scenario: &str) {
    let child = harness::run_test_in_child(
        module_path!(),
        "child_scenario",
        &[(SCENARIO_VAR, scenario)],
    );
    let text = &child.text;
    assert!(
        child.status.success(),
        "scenario {scenario} failed ({}):\n{text}",
        child.status
    );
    assert!(
        text.contains(&format!("{DONE}: {scenario}")),
        "scenario {scenario} did not finish:\n{text}"
    );
    // wgpu's own refusals read "Validation Error" and are expected here; Vulkan's are not
    // (the child also checks its logger's count).
    assert!(
        !text.contains("VUID-"),
        "scenario {scenario} logged a Vulkan validation error:\n{text}"
    );
}

/// The entry point of the child processes; does nothing in a normal test run.
#[gpu_test]
fn child_scenario() {
    let Ok(scenario) = std::env::var(SCENARIO_VAR) else {
        return;
    };
    let (name, non_coherent) = match scenario.strip_suffix("+non_coherent") {
        Some(name) => (name, true),
        None => (scenario.as_str(), false),
    };
    let config = |zero_copy: bool| ArenaConfig {
        zero_copy,
        force_non_coherent: non_coherent,
        ..test_config()
    };
    match name {
        "device_destroy_zero_copy" => device_destroy(context_with(config(true))),
        "device_destroy_staging" => device_destroy(context_with(config(false))),
        "buffer_destroy_zero_copy" => buffer_destroy(context_with(config(true))),
        "buffer_destroy_staging" => buffer_destroy(context_with(config(false))),
        "buffer_destroy_two_threads" => buffer_destroy_two_threads(context_with(config(true))),
        "gl_buffer_and_device_destroy" => gl_buffer_and_device_destroy(),
        "gathered_ops_zero_copy" => gathered_ops_then_device_destroy(context_with(config(true))),
        "gathered_ops_staging" => gathered_ops_then_device_destroy(context_with(config(false))),
        other => panic!("unknown scenario {other}"),
    }
    println!("{DONE}: {scenario}");
}

/// `n` values that differ per `seed`, so that stale or foreign bytes show.
fn pattern(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| i.wrapping_mul(2_654_435_761) ^ seed)
        .collect()
}

/// A read after an early destroy: the array's own data, or a typed error about the device.
fn assert_data_or_device_error(result: gpu_arena::Result<Vec<u32>>, want: &[u32], what: &str) {
    match result {
        Ok(got) => assert!(
            got == want,
            "{what}: read back bytes that are not the array's"
        ),
        Err(e @ (Error::Device { .. } | Error::DeviceLost { .. })) => {
            let message = e.to_string();
            assert!(!message.is_empty());
            println!("{what}: {message}");
        }
        Err(other) => panic!("{what}: unexpected error {other}"),
    }
}

/// A put after an early destroy: a new array that reads back its data, or a typed error.
fn put_then_check(ctx: &Context, data: &[u32], what: &str) -> Option<DeviceArray<u32>> {
    match ctx.device_put(data, &[data.len()]) {
        Ok(array) => {
            assert_data_or_device_error(ctx.device_get(&array), data, what);
            Some(array)
        }
        Err(e @ (Error::Device { .. } | Error::DeviceLost { .. })) => {
            println!("{what}: {e}");
            None
        }
        Err(other) => panic!("{what}: unexpected error {other}"),
    }
}

/// Host memory that the old code's freed mappings could land in: allocated after the device
/// memory was freed, it must keep its bytes whatever the arrays do.
fn sentinels() -> Vec<Vec<u8>> {
    (0..16).map(|i| vec![0xA5 ^ i as u8; 1 << 20]).collect()
}

fn assert_sentinels_intact(sentinels: &[Vec<u8>]) {
    for (i, s) in sentinels.iter().enumerate() {
        assert!(
            s.iter().all(|&b| b == 0xA5 ^ i as u8),
            "host memory {i} was overwritten through a stale mapping"
        );
    }
}

/// A kernel whose entry point is `entry`.
fn kernel_source(entry: &str) -> String {
    format!(
        "@group(0) @binding(0) var<storage, read_write> q: array<u32>;
         @compute @workgroup_size(1) fn {entry}() {{ q[0] = 1u; }}"
    )
}

fn device_destroy(ctx: Context) {
    let (n, m) = (64 << 10, 1000);
    let (da, db) = (pattern(n, 1), pattern(m, 2));
    let a = ctx.device_put(&da, &[n]).unwrap();
    let b = ctx.device_put(&db, &[m]).unwrap();
    ctx.kernel(&kernel_source("compiled_before"), "compiled_before")
        .unwrap();
    ctx.synchronize().unwrap();
    ctx.device().destroy();
    // The first calls may not know yet (wgpu tells at its next poll).
    assert_data_or_device_error(ctx.device_get(&a), &da, "get right after destroy");
    let _ = put_then_check(&ctx, &pattern(n, 3), "put right after destroy");
    // A wait polls the device: from here on wgpu has destroyed every buffer.
    match ctx.synchronize() {
        Ok(()) => {}
        Err(e) => assert!(matches!(e, Error::DeviceLost { .. }), "{e}"),
    }
    let sentinels = sentinels();
    for round in 0..3 {
        assert_data_or_device_error(ctx.device_get(&a), &da, "get after destroy");
        assert_data_or_device_error(ctx.device_get(&b), &db, "get of b after destroy");
        let _ = put_then_check(&ctx, &pattern(n, 10 + round), "put after destroy");
        // Ops: kernels and host-path copies alike refuse or give the right bytes.
        match ctx.dynamic_slice(&b, &[10], &[100]) {
            Ok(sliced) => {
                assert_data_or_device_error(ctx.device_get(&sliced), &db[10..110], "slice")
            }
            Err(e) => assert!(
                matches!(e, Error::Device { .. } | Error::DeviceLost { .. }),
                "slice after destroy: {e}"
            ),
        }
        match ctx.fill(&[64], 9u32) {
            Ok(filled) => assert_data_or_device_error(ctx.device_get(&filled), &[9; 64], "fill"),
            Err(e) => assert!(
                matches!(e, Error::Device { .. } | Error::DeviceLost { .. }),
                "fill after destroy: {e}"
            ),
        }
        assert_sentinels_intact(&sentinels);
    }
    let lost = ctx.device_get(&a).unwrap_err();
    assert!(matches!(lost, Error::DeviceLost { .. }), "{lost}");
    // A sequence's submit says so, an empty one's too.
    let empty = ctx.sequence().submit();
    assert!(matches!(empty, Err(Error::DeviceLost { .. })), "{empty:?}");
    // Compiling refuses too, a source compiled before as well as a new one.
    for entry in ["compiled_before", "never_compiled"] {
        let refused = ctx.kernel(&kernel_source(entry), entry).map(drop);
        assert!(
            matches!(refused, Err(Error::DeviceLost { .. })),
            "{refused:?}"
        );
    }
    assert!(
        lost.to_string().contains("lost or was destroyed")
            && lost.to_string().contains("open a new Context"),
        "{lost}"
    );
    drop((a, b));
    assert_sentinels_intact(&sentinels);
}

fn buffer_destroy(ctx: Context) {
    let n = 4096;
    let data: Vec<Vec<u32>> = (0..3).map(|i| pattern(n, i)).collect();
    let arrays: Vec<_> = data
        .iter()
        .map(|d| ctx.device_put(d, &[n]).unwrap())
        .collect();
    assert!(
        arrays.iter().all(|a| a.buffer() == arrays[0].buffer()),
        "the three arrays share one region"
    );
    ctx.synchronize().unwrap();
    arrays[1].buffer().destroy();
    ctx.synchronize().unwrap();
    if !ctx.config().zero_copy {
        // Through staging, the GPU copy out of the destroyed buffer is refused, and said so.
        let refused = ctx.device_get(&arrays[0]).unwrap_err();
        assert!(matches!(refused, Error::Device { .. }), "{refused}");
        assert!(refused.to_string().contains("destroyed"), "{refused}");
    }
    let sentinels = sentinels();
    for round in 0..3 {
        for (i, (array, want)) in arrays.iter().zip(&data).enumerate() {
            assert_data_or_device_error(
                ctx.device_get(array),
                want,
                &format!("get of array {i}, round {round}"),
            );
        }
        // Ops on the destroyed buffer: GPU work is refused, host work sees live memory.
        match ctx.dynamic_slice(&arrays[1], &[0], &[16]) {
            Ok(sliced) => {
                assert_data_or_device_error(ctx.device_get(&sliced), &data[1][..16], "slice")
            }
            Err(e) => assert!(matches!(e, Error::Device { .. }), "slice: {e}"),
        }
        let _ = put_then_check(&ctx, &pattern(n, 20 + round), "put into the region");
        assert_sentinels_intact(&sentinels);
    }
    drop(arrays);
    ctx.synchronize().unwrap();
    assert_sentinels_intact(&sentinels);
}

fn buffer_destroy_two_threads(ctx: Context) {
    let n = 16 << 10;
    let data = pattern(n, 7);
    let a = ctx.device_put(&data, &[n]).unwrap();
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                for _ in 0..50 {
                    assert_data_or_device_error(ctx.device_get(&a), &data, "reader thread");
                }
            });
        }
        a.buffer().destroy();
        ctx.device().destroy();
    });
    let _ = ctx.synchronize();
    assert_data_or_device_error(ctx.device_get(&a), &data, "after both threads");
}

/// Single ops gathered and not yet submitted when the device goes: the call that submits them
/// (here `synchronize`) reports the loss, and reads give the data from before the ops (which
/// never ran) or a typed error, never garbage.
fn gathered_ops_then_device_destroy(ctx: Context) {
    let kernel = ctx
        .kernel(
            "@group(0) @binding(0) var<storage, read_write> a: array<u32>;
             @compute @workgroup_size(64)
             fn main(@builtin(global_invocation_id) i: vec3<u32>) {
                 if (i.x < arrayLength(&a)) { a[i.x] = a[i.x] + 1u; }
             }",
            "main",
        )
        .unwrap();
    let n = 4096;
    let data = pattern(n, 9);
    let mut a = ctx.device_put(&data, &[n]).unwrap();
    ctx.synchronize().unwrap();
    for _ in 0..5 {
        ctx.launch(&kernel)
            .arg_mut(&mut a)
            .grid_for(n as u64)
            .run()
            .unwrap();
    }
    ctx.device().destroy();
    let refused = ctx.synchronize().unwrap_err();
    assert!(
        matches!(refused, Error::Device { .. } | Error::DeviceLost { .. }),
        "{refused}"
    );
    println!("synchronize after destroy: {refused}");
    let sentinels = sentinels();
    for round in 0..3 {
        assert_data_or_device_error(ctx.device_get(&a), &data, &format!("get, round {round}"));
        match ctx.launch(&kernel).arg_mut(&mut a).grid_for(n as u64).run() {
            Ok(()) => {}
            Err(e) => assert!(
                matches!(e, Error::Device { .. } | Error::DeviceLost { .. }),
                "launch after destroy: {e}"
            ),
        }
        assert_sentinels_intact(&sentinels);
    }
    let lost = ctx.synchronize().unwrap_err();
    assert!(matches!(lost, Error::DeviceLost { .. }), "{lost}");
    // With nothing gathered, flush still says the device is gone.
    let lost = ctx.flush().unwrap_err();
    assert!(matches!(lost, Error::DeviceLost { .. }), "{lost}");
}

/// GL buffers are plain wgpu buffers: the crate holds no pointer into them, so destroying one
/// turns into wgpu errors only. Skipped where no GL adapter exists.
fn gl_buffer_and_device_destroy() {
    let Some(ctx) = harness::gl_context() else {
        harness::skip(harness::Need::GlAdapter);
        return;
    };
    let data = pattern(1000, 5);
    let a = ctx.device_put(&data, &[1000]).unwrap();
    let b = ctx.device_put(&data, &[1000]).unwrap();
    a.buffer().destroy();
    assert_data_or_device_error(ctx.device_get(&a), &data, "GL get of a destroyed buffer");
    assert_data_or_device_error(ctx.device_get(&b), &data, "GL get of its neighbour");
    ctx.device().destroy();
    let _ = ctx.synchronize();
    assert_data_or_device_error(ctx.device_get(&b), &data, "GL get after device destroy");
    let _ = put_then_check(&ctx, &data, "GL put after device destroy");
}

#[gpu_test(needs = Vulkan)]
fn device_destroy_never_lets_zero_copy_gets_and_puts_reach_freed_memory() {
    run_in_child("device_destroy_zero_copy");
}

#[gpu_test(needs = Vulkan)]
fn device_destroy_never_lets_staging_uploads_and_readbacks_reach_freed_memory() {
    run_in_child("device_destroy_staging");
}

#[gpu_test(needs = Vulkan)]
fn device_destroy_on_non_coherent_memory_never_flushes_or_reads_freed_memory() {
    run_in_child("device_destroy_zero_copy+non_coherent");
    run_in_child("device_destroy_staging+non_coherent");
}

#[gpu_test(needs = Vulkan)]
fn a_destroyed_region_buffer_leaves_its_arrays_and_neighbours_readable_or_refused() {
    run_in_child("buffer_destroy_zero_copy");
    run_in_child("buffer_destroy_staging");
}

#[gpu_test(needs = Vulkan)]
fn a_destroyed_region_buffer_on_non_coherent_memory_is_never_flushed_after_free() {
    run_in_child("buffer_destroy_zero_copy+non_coherent");
    run_in_child("buffer_destroy_staging+non_coherent");
}

#[gpu_test(needs = Vulkan)]
fn two_threads_reading_an_array_while_its_buffer_and_device_are_destroyed_see_data_or_errors() {
    run_in_child("buffer_destroy_two_threads");
}

#[gpu_test]
fn gl_buffers_destroyed_early_give_wgpu_errors_not_stale_bytes() {
    run_in_child("gl_buffer_and_device_destroy");
}

#[gpu_test]
fn single_ops_gathered_when_the_device_is_destroyed_are_reported_by_the_next_wait() {
    run_in_child("gathered_ops_zero_copy");
    run_in_child("gathered_ops_staging");
}
