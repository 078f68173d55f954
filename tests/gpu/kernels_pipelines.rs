//! Kernels are compiled once per context and variant.

use crate::harness;
use crate::kernels_common::kernel_context;

#[gpu_test]
fn each_kernel_variant_is_compiled_once_per_context() {
    let ctx = kernel_context();
    assert_eq!(ctx.kernel_cache_stats().pipelines_compiled, 0);
    let mut a = ctx.zeros::<f32>(&[64, 64]).unwrap();
    let row = ctx.zeros::<f32>(&[1, 64]).unwrap();
    a = ctx.dynamic_update_slice(a, &row, &[3, 0]).unwrap();
    let first = ctx.kernel_cache_stats();
    assert_eq!(first.pipelines_compiled, 1, "{first:?}");
    assert_eq!(first.compiles[0].0, "copy_rows<vec4<u32>>(contiguous)");
    for i in 0..10 {
        a = ctx.dynamic_update_slice(a, &row, &[i, 0]).unwrap();
    }
    let later = ctx.kernel_cache_stats();
    assert_eq!(later.pipelines_compiled, 1);
    assert_eq!(later.pipeline_hits, first.pipeline_hits + 10);
    assert_eq!(later.compile_time, first.compile_time);
    // Other variants compile on first use, once each.
    let column = ctx.zeros::<f32>(&[64, 1]).unwrap();
    let bytes = ctx.zeros::<u8>(&[5, 5]).unwrap();
    for _ in 0..3 {
        a = ctx.dynamic_update_slice(a, &column, &[0, 1]).unwrap();
        let _ = ctx.dynamic_slice(&bytes, &[1, 1], &[2, 3]).unwrap();
        let _ = ctx.fill(&[10], 1u8).unwrap();
    }
    let names: Vec<_> = ctx
        .kernel_cache_stats()
        .compiles
        .iter()
        .map(|c| c.0.clone())
        .collect();
    assert_eq!(
        names,
        [
            "copy_rows<vec4<u32>>(contiguous)",
            "copy_rows<u32>",
            "copy_bytes",
            "fill"
        ]
    );
    drop(a);
}

#[gpu_test]
fn cpu_adapters_copy_on_the_host_without_compiling_kernels() {
    let ctx = harness::context();
    // The host path needs arena memory we can map: a CPU adapter on Vulkan (lavapipe). On GL
    // the arena is a plain wgpu buffer and the kernels run.
    if ctx.adapter_info().device_type != wgpu::DeviceType::Cpu
        || !ctx.memory_plan().arena_host_visible
        || !ctx.is_vulkan()
    {
        harness::skip(harness::Need::HostVisibleArena);
        return;
    }
    let mut a = ctx.zeros::<u8>(&[33, 7]).unwrap();
    let b = ctx.fill(&[3, 3], 5u8).unwrap();
    a = ctx.dynamic_update_slice(a, &b, &[30, 5]).unwrap();
    let c = ctx.dynamic_slice(&a, &[31, 3], &[2, 3]).unwrap();
    let d = ctx.copy(&c).unwrap();
    assert_eq!(ctx.device_get(&d).unwrap(), [0, 5, 5, 0, 5, 5]);
    assert_eq!(ctx.kernel_cache_stats().pipelines_compiled, 0);
}
