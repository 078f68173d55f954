//! The global memory barriers wgpu does not record, which the crate adds as command buffers of
//! their own (Vulkan only): [`host_read_barrier`] and [`alias_barrier`].
//!
//! **The GPU's writes made visible to the host.** Vulkan (§7.9, "Host Write Ordering Guarantees" and the note on `vkWaitForFences`): a fence
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
//!
//! **Work through aliases ordered against work through the region's buffer.** wgpu inserts
//! barriers per buffer and does not know that an alias (`alias.rs`) and its region's buffer
//! are one memory, so work that uses aliases is submitted between two [`alias_barrier`]s.

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
    global_barrier(
        device,
        "gpu-arena host-read barrier",
        (
            vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER,
            vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_WRITE,
        ),
        (vk::PipelineStageFlags::HOST, vk::AccessFlags::HOST_READ),
    )
}

/// A command buffer holding a global memory barrier from every write of every command before
/// it to every access of every command after it, to submit before and after work that uses
/// aliases; `None` on other backends (no aliases there).
pub(crate) fn alias_barrier(device: &wgpu::Device) -> Option<wgpu::CommandBuffer> {
    let all = vk::PipelineStageFlags::ALL_COMMANDS;
    global_barrier(
        device,
        "gpu-arena alias barrier",
        (all, vk::AccessFlags::MEMORY_WRITE),
        (
            all,
            vk::AccessFlags::MEMORY_READ | vk::AccessFlags::MEMORY_WRITE,
        ),
    )
}

/// A command buffer holding one global memory barrier from `(stages, accesses)` `before` to
/// `after`; `None` when the device is not Vulkan.
fn global_barrier(
    device: &wgpu::Device,
    label: &str,
    before: (vk::PipelineStageFlags, vk::AccessFlags),
    after: (vk::PipelineStageFlags, vk::AccessFlags),
) -> Option<wgpu::CommandBuffer> {
    // SAFETY: the hal device is only read (its ash function table) while the guard lives, and
    // nothing it owns is destroyed.
    let hal_device = unsafe { device.as_hal::<VulkanApi>() }?;
    let raw_device = hal_device.raw_device().clone();
    drop(hal_device);
    let mut encoder =
        device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some(label) });
    let barrier = vk::MemoryBarrier::default()
        .src_access_mask(before.1)
        .dst_access_mask(after.1);
    // SAFETY: `as_hal_mut` gives the encoder's open Vulkan command buffer (wgpu-core began it
    // and marks the encoder as raw-encoded, so no wgpu command is mixed in); we record one
    // pipeline barrier outside any render pass, with stage and access masks that match (the
    // callers' pairs are valid on a compute-capable queue), and destroy nothing. `raw_device`
    // is the device the command buffer was allocated from, alive for the duration of the call.
    let recorded = unsafe {
        encoder.as_hal_mut::<VulkanApi, _, _>(|hal| {
            hal.map(|hal| {
                raw_device.cmd_pipeline_barrier(
                    hal.raw_handle(),
                    before.0,
                    after.0,
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
