//! Plain wgpu buffers, for backends where gpu-allocator cannot reach the device (GL, Metal, DX12).

use super::buffer::DeviceBuffer;
use crate::memplan::{
    DeviceDescription, HeapFlags, MemoryHeap, MemoryProperties, MemoryType, MemoryTypeFlags,
};

/// What a buffer is for; it decides the wgpu usages of a plain buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// Arena memory: storage, copy source and destination.
    Arena,
    /// Upload staging: written by the host, copied to the arena.
    Upload,
    /// Readback staging: copied from the arena, read by the host.
    Readback,
}

/// A wgpu buffer for `purpose`; arena buffers get `arena_usages`, staging buffers the map and
/// copy usages their direction needs.
pub(crate) fn create_buffer(
    device: &wgpu::Device,
    size: u64,
    purpose: Purpose,
    arena_usages: wgpu::BufferUsages,
    label: &str,
) -> DeviceBuffer {
    let usage = match purpose {
        Purpose::Arena => arena_usages,
        Purpose::Upload => wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
        Purpose::Readback => wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
    };
    let buffer = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some(label),
        size,
        usage,
        mapped_at_creation: false,
    });
    DeviceBuffer {
        buffer,
        mapped: None,
        memory_type: None,
        aliases: None,
    }
}

/// A memory table for backends that cannot report one: one device-local heap of `heap_bytes`
/// and one host-visible type for staging. wgpu cannot map storage buffers there, so even on
/// UMA the arena is not host-visible to us: transfers go through wgpu's own staging. The
/// staging type leaves `DEVICE_LOCAL` off (as no Vulkan table would on that heap), so that
/// the policy does not take it for the arena.
pub(crate) fn synthetic_description(
    info: &wgpu::AdapterInfo,
    heap_bytes: u64,
) -> DeviceDescription {
    DeviceDescription {
        name: info.name.clone(),
        vendor_id: info.vendor,
        device_kind: super::device_kind::device_kind(info.device_type),
        memory: MemoryProperties {
            heaps: vec![MemoryHeap {
                size: heap_bytes,
                flags: HeapFlags::DEVICE_LOCAL,
            }],
            types: vec![
                MemoryType {
                    heap: 0,
                    flags: MemoryTypeFlags::DEVICE_LOCAL,
                },
                MemoryType {
                    heap: 0,
                    flags: MemoryTypeFlags::HOST_VISIBLE | MemoryTypeFlags::HOST_COHERENT,
                },
            ],
        },
        heap_budgets: None,
    }
}
