//! Vendor-aware memory-type policy: a pure function of a device's memory table.
//!
//! [`plan_memory`] turns a [`DeviceDescription`] (heaps, types, vendor, device kind, and the
//! memory budget when the device reports one) into a [`MemoryPlan`]: which memory type and
//! heap back the arena, which types serve upload and readback staging, whether the device is
//! UMA, how much of its VRAM the host can map ([`BarClass`]), and how many bytes the arena may
//! preallocate. Every choice comes with a short reason.
//!
//! gpu-allocator alone takes the first memory type with the flags it wants: on a small-BAR GPU
//! its `CpuToGpu` lands in the 256 MiB BAR window, and it will pick AMD's device-coherent
//! types. This module instead
//! - drops the types wgpu-hal drops (PROTECTED, LAZILY_ALLOCATED, DEVICE_COHERENT_AMD,
//!   DEVICE_UNCACHED_AMD, flags it does not know) and types on empty heaps;
//! - ranks the rest per purpose by required / preferred / not-preferred flags with VMA's cost
//!   (preferred flags missing + not-preferred flags present; ties to the lowest index);
//! - puts the arena on the largest device-local heap: plain VRAM on a discrete GPU, a
//!   host-visible type on UMA, and on a UMA device whose device-local heap is a small
//!   carve-out (AMD APUs), on the large host heap of the same DRAM. A type is device-local by
//!   its own `DEVICE_LOCAL` flag, which Vulkan sets on every type of a device-local heap; the
//!   table made for backends without one (GL) leaves it off its staging type there, so that
//!   the arena, which wgpu cannot map on those backends, is not host-visible;
//! - keeps staging in host memory: for uploads coherent first, then system memory, then
//!   write-combined; for readbacks system memory on a discrete GPU (never through a BAR), then
//!   host-cached, then coherent;
//! - places the pinned-host memory kind ([`PinnedHostPlan`]): the system heap on a discrete
//!   GPU (never a device-local heap), the arena's heap on UMA, host-cached first.
//!
//! Apply a plan by masking `memory_type_bits` with [`MemoryPlan::type_mask`] of a candidate
//! list. The Vulkan backend converts `vk::PhysicalDeviceMemoryProperties` into
//! [`MemoryProperties`] with `MemoryTypeFlags(flags.as_raw())`: the flag types use Vulkan's
//! bit values.
//!
//! ```
//! use gpu_arena::memplan::{plan_memory, BarClass, DeviceDescription};
//! let text = std::fs::read_to_string("tests/data/memprops/nvidia-h200-linux-580.json")?;
//! let plan = plan_memory(&DeviceDescription::from_json(&text)?)?;
//! assert_eq!(plan.bar, BarClass::Full);
//! assert_eq!((plan.arena_type, plan.prealloc_heap), (1, 0));
//! println!("{}", plan.reasons.join("\n"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]

mod error;
mod json;
mod pinned_host;
mod placement;
mod plan;
mod rank;
mod table;

pub use error::MemPlanError;
pub use pinned_host::PinnedHostPlan;
pub use plan::{
    plan_memory, BarClass, MemoryPlan, NO_BUDGET_PERCENT, PREALLOC_ALIGN, SMALL_BAR_MAX,
    UMA_CARVEOUT_RATIO,
};
pub use rank::{usable_type_mask, MemoryRequest, MAX_MEMORY_TYPES, USABLE_FLAGS};
#[cfg(test)]
pub(crate) use table::vram_and_host_heaps;
pub use table::{
    DeviceDescription, DeviceKind, HeapBudget, HeapFlags, MemoryHeap, MemoryProperties, MemoryType,
    MemoryTypeFlags, Vendor,
};
