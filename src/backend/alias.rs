//! Buffers of their own over part of a region's memory (Vulkan only).
//!
//! wgpu tracks usage per buffer: a pass may not use one buffer both as writable storage and in
//! any other way. Arena arrays share their region's buffer, so without this an app's pass could
//! not draw one arena array while a shader writes another. Vulkan lets several buffers share
//! one memory at different offsets: [`AliasableMemory::alias`] makes a `VkBuffer` over exactly
//! one array's bytes, imported into wgpu as a buffer like any the app makes (no copy, no memory
//! of its own).
//!
//! wgpu inserts barriers per buffer, and it does not know that an alias and the region's buffer
//! are one memory: work that uses aliases is submitted between two global barriers
//! (`barrier.rs`, `alias_barrier`), so that it and the library's own work through the region's
//! buffer see each other's writes.

use super::vulkan_buffer::{vk_refusal, vulkan_usage, AllocatedMemory, BufferRelease};
use crate::arena::RegionRefusal;
use ash::vk;
use std::sync::Arc;

/// The memory of one Vulkan buffer, shared with the buffers cut from it: each alias holds it,
/// so the memory outlives every alias, as it outlives the buffer it was made for.
pub(crate) struct AliasableMemory {
    device: ash::Device,
    memory: Arc<AllocatedMemory>,
    /// The memory type of `memory`: an alias whose requirements exclude it cannot be bound.
    memory_type: u32,
    /// The wgpu usages every alias gets (those of the buffer the memory was made for).
    usage: wgpu::BufferUsages,
}

impl AliasableMemory {
    pub(super) fn new(
        device: &ash::Device,
        memory: &Arc<AllocatedMemory>,
        memory_type: u32,
        usage: wgpu::BufferUsages,
    ) -> Arc<Self> {
        Arc::new(Self {
            device: device.clone(),
            memory: Arc::clone(memory),
            memory_type,
            usage,
        })
    }

    /// A wgpu buffer of `size` bytes over the memory's bytes from `offset`, with the usages of
    /// the buffer the memory was made for. Refused (`RegionRefusal::Other`, naming the step)
    /// when the device requires an alignment or memory type that the range does not have;
    /// a failed Vulkan call is refused as the rest of the backend refuses it (`vk_refusal`:
    /// `OutOfMemory`, `DeviceLost`, `Other`).
    pub(crate) fn alias(
        &self,
        wgpu_device: &wgpu::Device,
        offset: u64,
        size: u64,
        label: &str,
    ) -> Result<wgpu::Buffer, RegionRefusal> {
        let text = |during: &str, reason: &dyn std::fmt::Display| {
            format!("{during} ({label}, {size} bytes at {offset}): {reason}")
        };
        let failure = |during: &str, result: vk::Result| vk_refusal(result, text(during, &result));
        let refused = |reason: &dyn std::fmt::Display| RegionRefusal::Other {
            reason: text("aliasing memory", reason),
        };
        let Some((memory, memory_offset, memory_size)) = self.memory.range() else {
            return Err(refused(&"the memory is freed"));
        };
        let info = vk::BufferCreateInfo::default()
            .size(size)
            .usage(vulkan_usage(self.usage))
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: a valid create-info on the live device that made the memory.
        let raw = unsafe { self.device.create_buffer(&info, None) }
            .map_err(|e| failure("vkCreateBuffer", e))?;
        // SAFETY: `raw` was just created on this device.
        let needs = unsafe { self.device.get_buffer_memory_requirements(raw) };
        let at = memory_offset + offset;
        let fits = needs.memory_type_bits & (1 << self.memory_type) != 0
            && at.is_multiple_of(needs.alignment.max(1))
            && offset + needs.size <= memory_size;
        let bound = match fits {
            // SAFETY: the range lies inside the live allocation, with the type and alignment
            // the buffer requires; aliasing buffers over one memory is allowed by Vulkan.
            true => unsafe { self.device.bind_buffer_memory(raw, memory, at) }
                .map_err(|e| failure("vkBindBufferMemory", e)),
            false => Err(refused(&format_args!(
                "the range does not meet the buffer's requirements (alignment {}, {} bytes, memory types {:#b})",
                needs.alignment, needs.size, needs.memory_type_bits
            ))),
        };
        if let Err(refused) = bound {
            // SAFETY: the buffer is unused and bound to nothing of ours.
            unsafe { self.device.destroy_buffer(raw, None) };
            return Err(refused);
        }
        let release = BufferRelease {
            device: self.device.clone(),
            raw,
            memory: Arc::clone(&self.memory),
        };
        Ok(release.import(wgpu_device, size, self.usage, label))
    }
}
