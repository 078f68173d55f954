//! The driver's pipeline cache, seeded from bytes a previous process saved.
//!
//! wgpu marks creating one `unsafe` because the driver trusts the bytes; it lives here with the
//! rest of the crate's `unsafe` so the kernels stay safe code.

/// A pipeline cache on `device`, seeded with `data` when given (what `PipelineCache::get_data`
/// wrote on an earlier run), otherwise empty.
pub(crate) fn create_pipeline_cache(
    device: &wgpu::Device,
    label: &str,
    data: Option<&[u8]>,
) -> wgpu::PipelineCache {
    // SAFETY: the caller passes nothing or bytes that `get_data` wrote for an adapter with the
    // same `pipeline_cache_key`; wgpu checks its own header (magic, adapter, driver, version,
    // size) and, with `fallback: true`, starts an empty cache when anything does not match.
    unsafe {
        device.create_pipeline_cache(&wgpu::PipelineCacheDescriptor {
            label: Some(label),
            data,
            fallback: true,
        })
    }
}
