//! With `GPU_ARENA_CACHE_DIR` the driver pipeline cache is written to disk and read back by the
//! next context (the next process, in real use).

mod common;
mod kernels_common;

use common::assert_no_validation_errors;
use kernels_common::kernel_context;

#[test]
fn the_driver_pipeline_cache_persists_to_the_cache_dir() {
    let dir = std::env::temp_dir().join(format!("gpu-arena-cache-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // Read when a context opens; the only test of this binary, so no other test races it.
    std::env::set_var(gpu_arena::kernels::CACHE_DIR_ENV, &dir);
    let ctx = kernel_context();
    if !ctx
        .device()
        .features()
        .contains(wgpu::Features::PIPELINE_CACHE)
    {
        eprintln!("the device has no pipeline cache; nothing to persist");
        return;
    }
    let _ = ctx.fill(&[4], 1u32).unwrap();
    let stats = ctx.kernel_cache_stats();
    let file = stats.disk_cache_file.clone().expect("a cache file");
    assert_eq!(stats.disk_cache_loaded_bytes, 0, "nothing on disk yet");
    let written = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
    assert!(written > 0, "{} was written", file.display());
    drop(ctx);

    let again = kernel_context();
    let _ = again.fill(&[4], 1u32).unwrap();
    let stats = again.kernel_cache_stats();
    assert_eq!(
        stats.disk_cache_loaded_bytes, written,
        "read back by the next context"
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert_no_validation_errors();
}
