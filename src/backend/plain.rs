//! Plain wgpu buffers, for backends where gpu-allocator cannot reach the device (GL, Metal, DX12).

use super::DeviceBuffer;

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

pub(crate) fn create_buffer(
    device: &wgpu::Device,
    size: u64,
    purpose: Purpose,
    label: &str,
) -> DeviceBuffer {
    let usage = match purpose {
        Purpose::Arena => {
            wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST
        }
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
    }
}
