//! wgpu's device type in the memory policy's terms, which both backends put in the memory table
//! they describe.

use crate::memplan::DeviceKind;

/// wgpu's device type in the memory policy's terms.
pub(crate) fn device_kind(device_type: wgpu::DeviceType) -> DeviceKind {
    match device_type {
        wgpu::DeviceType::DiscreteGpu => DeviceKind::Discrete,
        wgpu::DeviceType::IntegratedGpu => DeviceKind::Integrated,
        wgpu::DeviceType::Cpu => DeviceKind::Cpu,
        wgpu::DeviceType::VirtualGpu => DeviceKind::Virtual,
        wgpu::DeviceType::Other => DeviceKind::Other,
    }
}
