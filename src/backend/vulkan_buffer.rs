//! A `VkBuffer` imported into wgpu and the gpu-allocator memory it is bound to: who owns each
//! and when each dies (the rules are in the module doc of `backend`). Below both places that
//! bind buffers to memory: `vulkan.rs` (a buffer with memory of its own) and `alias.rs` (a
//! second buffer over memory that a region's buffer already uses).

use crate::arena::RegionRefusal;
use crate::lock::Mutex;
use ash::vk;
use gpu_allocator::vulkan::{Allocation, Allocator};
use std::sync::Arc;

pub(super) type VulkanApi = wgpu::hal::api::Vulkan;

/// The Vulkan usage flags of a buffer wgpu knows with `usage`, as wgpu-hal's own
/// `conv::map_buffer_usage` makes them for the usages gpu-arena gives (the MAP_* usages need no
/// Vulkan flag and are never given: gpu-allocator maps the memory).
pub(super) fn vulkan_usage(usage: wgpu::BufferUsages) -> vk::BufferUsageFlags {
    use wgpu::BufferUsages as U;
    [
        (U::COPY_SRC, vk::BufferUsageFlags::TRANSFER_SRC),
        (U::COPY_DST, vk::BufferUsageFlags::TRANSFER_DST),
        (U::STORAGE, vk::BufferUsageFlags::STORAGE_BUFFER),
        (U::UNIFORM, vk::BufferUsageFlags::UNIFORM_BUFFER),
        (U::VERTEX, vk::BufferUsageFlags::VERTEX_BUFFER),
        (U::INDEX, vk::BufferUsageFlags::INDEX_BUFFER),
        (U::INDIRECT, vk::BufferUsageFlags::INDIRECT_BUFFER),
    ]
    .into_iter()
    .filter(|(wgpu_usage, _)| usage.contains(*wgpu_usage))
    .fold(vk::BufferUsageFlags::empty(), |flags, (_, vk_usage)| {
        flags | vk_usage
    })
}

/// One gpu-allocator allocation (a `VkDeviceMemory` or, for arena regions, part of one, persistently mapped when
/// host-visible), owned by the crate rather than by wgpu: freed when the last holder (wgpu's
/// buffer through its drop callback, or a mapped range of it) drops it.
pub(super) struct AllocatedMemory {
    /// Taken out in `drop`, to be freed.
    allocation: Option<Allocation>,
    allocator: Arc<Mutex<Allocator>>,
    /// The buffer's label, for the log when freeing fails.
    label: String,
    /// Keeps the `VkDevice` open until the memory is freed (declared last, so dropped last).
    _wgpu_device: wgpu::Device,
}

impl AllocatedMemory {
    /// Takes over `allocation` of `allocator` (named `label` in the log if freeing it fails) on
    /// `device`, which it keeps open.
    pub(super) fn new(
        allocation: Allocation,
        allocator: &Arc<Mutex<Allocator>>,
        label: &str,
        device: &wgpu::Device,
    ) -> Arc<Self> {
        Arc::new(Self {
            allocation: Some(allocation),
            allocator: Arc::clone(allocator),
            label: label.to_string(),
            _wgpu_device: device.clone(),
        })
    }

    /// The `VkDeviceMemory` and the byte range of it this allocation covers (offset, size).
    pub(super) fn range(&self) -> Option<(vk::DeviceMemory, u64, u64)> {
        let allocation = self.allocation.as_ref()?;
        // SAFETY: the handle is used only while `self`, which keeps the allocation, lives.
        let memory = unsafe { allocation.memory() };
        Some((memory, allocation.offset(), allocation.size()))
    }
}

impl Drop for AllocatedMemory {
    fn drop(&mut self) {
        if let Some(allocation) = self.allocation.take() {
            free_allocation(&self.allocator, allocation, &self.label);
        }
    }
}

/// Gives an allocation back to gpu-allocator. A lock poisoned by a panic elsewhere is
/// recovered (the allocator's state is updated under it in one call, so it stays consistent),
/// as everywhere else; a failure cannot be returned from a drop, so it is logged.
pub(super) fn free_allocation(allocator: &Mutex<Allocator>, allocation: Allocation, label: &str) {
    let mut allocator = allocator.lock().unwrap_or_else(|p| p.into_inner());
    if let Err(e) = allocator.free(allocation) {
        log::error!("gpu-arena: freeing the device memory of {label} failed: {e}");
    }
}

/// What a buffer's drop callback needs: the `VkBuffer` to destroy, and its reference to the
/// memory to drop.
pub(super) struct BufferRelease {
    pub(super) device: ash::Device,
    pub(super) raw: vk::Buffer,
    pub(super) memory: Arc<AllocatedMemory>,
}

impl BufferRelease {
    /// wgpu's buffer of `size` bytes with the usages `usage` over `raw`: wgpu owns the
    /// `VkBuffer` from here, and the buffer's drop callback runs this release.
    pub(super) fn import(
        self,
        device: &wgpu::Device,
        size: u64,
        usage: wgpu::BufferUsages,
        label: &str,
    ) -> wgpu::Buffer {
        let raw = self.raw;
        // SAFETY: `raw` is valid and bound to memory that stays allocated while this release
        // holds it, and the callback, which destroys `raw`, runs once: when wgpu-hal destroys
        // the buffer, after wgpu-core has waited for every submission that used it, whether the
        // last handle was dropped or the buffer or device was destroyed early. wgpu never maps
        // it (no MAP usages) and never uses `raw` after the callback.
        let hal_buffer = unsafe {
            wgpu::hal::vulkan::Buffer::from_raw_externally_owned(raw, Box::new(move || self.run()))
        };
        // SAFETY: the hal buffer was created on this device with the Vulkan usages of `usage`
        // (`vulkan_usage`, as wgpu-hal would make them).
        unsafe {
            device.create_buffer_from_hal::<VulkanApi>(
                hal_buffer,
                &wgpu::BufferDescriptor {
                    label: Some(label),
                    size,
                    usage,
                    mapped_at_creation: false,
                },
            )
        }
    }

    fn run(self) {
        // SAFETY: wgpu-hal runs this from its own `destroy_buffer`, once no GPU work uses `raw`
        // and on the live device that made it; nothing uses `raw` afterwards.
        unsafe { self.device.destroy_buffer(self.raw, None) };
        // The memory is freed here only if no mapped range of it is left; otherwise by the
        // last range, so host access never reaches freed memory.
        drop(self.memory);
    }
}

/// The refusal kind of a failed Vulkan call, with `reason` as its text.
pub(super) fn vk_refusal(result: vk::Result, reason: String) -> RegionRefusal {
    match result {
        vk::Result::ERROR_OUT_OF_DEVICE_MEMORY | vk::Result::ERROR_OUT_OF_HOST_MEMORY => {
            RegionRefusal::OutOfMemory { reason }
        }
        vk::Result::ERROR_DEVICE_LOST => RegionRefusal::DeviceLost { reason },
        _ => RegionRefusal::Other { reason },
    }
}
