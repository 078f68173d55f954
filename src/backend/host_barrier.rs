//! The memory dependency that makes the GPU's writes visible to the host.
//!
//! Vulkan (§7.9, "Host Write Ordering Guarantees" and the note on `vkWaitForFences`): a fence
//! wait makes the device's work *complete*, not its writes *visible* to host reads; that takes
//! a memory dependency whose second scope is `VK_PIPELINE_STAGE_HOST_BIT` /
//! `VK_ACCESS_HOST_READ_BIT`. wgpu records one only for its own mappable buffers; the arena's
//! memory (read in place on UMA and by the host-path ops) and its readback staging are
//! gpu-allocator memory wgpu does not know is mapped. So a submission on Vulkan that a host
//! read waits for ends with a command buffer holding one global barrier from compute and
//! transfer writes to host reads; its first scope is every command submitted before it on the
//! queue, so one barrier serves every submission before it. Submissions no host read waits for
//! leave it out, and a host read after them adds it (`context/gathered.rs`,
//! `host_visible_through`). Integrated GPUs with non-coherent caches could read stale data
//! without it, and Khronos' synchronization validation reports the hazard.

use super::vulkan_buffer::VulkanApi;
use ash::vk;

/// Whether submissions on `device` need [`host_read_barrier`] before the host reads what they
/// wrote: on Vulkan.
pub(crate) fn needs_host_read_barrier(device: &wgpu::Device) -> bool {
    // SAFETY: the hal device is only checked for presence while the guard lives.
    unsafe { device.as_hal::<VulkanApi>() }.is_some()
}

/// A command buffer holding a global memory barrier from compute-shader and transfer writes
/// to host reads, to submit last in a submission; `None` on other backends (their queues'
/// completion already makes writes host-visible, or wgpu handles it).
pub(crate) fn host_read_barrier(device: &wgpu::Device) -> Option<wgpu::CommandBuffer> {
    // SAFETY: the hal device is only read (its ash function table) while the guard lives, and
    // nothing it owns is destroyed.
    let hal_device = unsafe { device.as_hal::<VulkanApi>() }?;
    let raw_device = hal_device.raw_device().clone();
    drop(hal_device);
    let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
        label: Some("gpu-arena host-read barrier"),
    });
    let barrier = vk::MemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_WRITE)
        .dst_access_mask(vk::AccessFlags::HOST_READ);
    // SAFETY: `as_hal_mut` gives the encoder's open Vulkan command buffer (wgpu-core began it
    // and marks the encoder as raw-encoded, so no wgpu command is mixed in); we record one
    // pipeline barrier outside any render pass, with stage and access masks that match (both
    // valid for a compute-capable queue), and destroy nothing. `raw_device` is the device the
    // command buffer was allocated from, alive for the duration of the call.
    let recorded = unsafe {
        encoder.as_hal_mut::<VulkanApi, _, _>(|hal| {
            hal.map(|hal| {
                raw_device.cmd_pipeline_barrier(
                    hal.raw_handle(),
                    vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER,
                    vk::PipelineStageFlags::HOST,
                    vk::DependencyFlags::empty(),
                    &[barrier],
                    &[],
                    &[],
                );
            })
        })
    };
    recorded.map(|()| encoder.finish())
}
