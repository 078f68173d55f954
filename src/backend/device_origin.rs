//! Which adapter made a device: the identity of the adapter behind a `wgpu::Device` against a
//! `wgpu::Adapter`, not what the two report. Two identical GPUs report the same name, vendor
//! and device id, and so does one GPU enumerated by two `wgpu::Instance`s; only the driver's
//! handles tell them apart.

use super::vulkan_buffer::VulkanApi;

type GlesApi = wgpu::hal::api::Gles;

/// Whether `device` was requested from `adapter`: `Some` where the backend's handles tell
/// (Vulkan: the same `VkPhysicalDevice`, which is per instance; GL: the same adapter context),
/// `None` on a backend whose handles this cannot compare.
pub(crate) fn device_made_from(adapter: &wgpu::Adapter, device: &wgpu::Device) -> Option<bool> {
    // SAFETY: the hal objects are only read (a handle value, an address) while their guards
    // live; nothing is destroyed or used through them.
    unsafe {
        if let (Some(hal_adapter), Some(hal_device)) =
            (adapter.as_hal::<VulkanApi>(), device.as_hal::<VulkanApi>())
        {
            return Some(hal_adapter.raw_physical_device() == hal_device.raw_physical_device());
        }
        if let (Some(hal_adapter), Some(hal_device)) =
            (adapter.as_hal::<GlesApi>(), device.as_hal::<GlesApi>())
        {
            // Both hold the adapter's shared state; its context is one object per adapter.
            return Some(std::ptr::eq(
                hal_adapter.adapter_context(),
                hal_device.context(),
            ));
        }
        // One backend's adapter and another's device.
        if adapter.get_info().backend != device.adapter_info().backend {
            return Some(false);
        }
    }
    None
}

/// Whether `queue` is `device`'s own: `Some` where the backend's handles tell (Vulkan: the
/// same `VkDevice`), `None` elsewhere (GL's queue shows no handle to compare).
pub(crate) fn queue_of_device(device: &wgpu::Device, queue: &wgpu::Queue) -> Option<bool> {
    // SAFETY: as above: handle values are read while the guards live.
    unsafe {
        let (hal_device, hal_queue) = (device.as_hal::<VulkanApi>()?, queue.as_hal::<VulkanApi>()?);
        Some(hal_device.raw_device().handle() == hal_queue.raw_device().handle())
    }
}
