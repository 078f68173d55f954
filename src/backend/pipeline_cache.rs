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
    // SAFETY: the caller (`pipelines/disk_cache.rs`) passes nothing, or bytes whose checksum
    // shows them to be exactly what `get_data` wrote on an earlier run, read from a file only
    // this user could have written (`private_files.rs`: a regular file, not a link, owned by
    // the effective user and not writable by group or others, in a directory of the user's
    // that only the user may write; never taken from the environment of a setuid process).
    // The checksum rules out damage, the ownership forgery, so the driver data behind wgpu's
    // header is what a driver wrote. wgpu checks its header (magic, ABI, backend, adapter,
    // driver version, size) and, without `fallback`, refuses any it cannot use (outdated,
    // truncated, damaged, for another device) with a validation error, which the caller
    // captures in an error scope before anything uses the cache, and reports as the file's
    // data discarded rather than used. The driver checks its own header as Vulkan requires.
    unsafe {
        device.create_pipeline_cache(&wgpu::PipelineCacheDescriptor {
            label: Some(label),
            data,
            fallback: false,
        })
    }
}
