//! `MemoryKind`: which memory space an array lives in (JAX's memory kinds).

use serde::{Deserialize, Serialize};

/// The memory space of an array, after JAX's memory kinds (`device`, `pinned_host`).
///
/// Each kind has an arena of its own (best-fit with coalescing, its own limit and statistics),
/// and kernels bind arrays of either kind. An array keeps its kind for life; moving one to the
/// other kind is an explicit copy ([`Context::offload`](crate::Context::offload),
/// [`Context::prefetch`](crate::Context::prefetch)).
///
/// | gpu-arena | JAX |
/// |---|---|
/// | `MemoryKind::Device` | `memory_kind="device"` |
/// | `MemoryKind::PinnedHost` | `memory_kind="pinned_host"` |
/// | [`Context::device_put_in`](crate::Context::device_put_in) | `jax.device_put(x, s.with_memory_kind(..))` |
/// | [`Context::offload`](crate::Context::offload) / [`prefetch`](crate::Context::prefetch) | `jax.device_put` of a device array to the other kind |
///
/// ```
/// use gpu_arena::MemoryKind;
/// assert_eq!(MemoryKind::PinnedHost.to_string(), "pinned_host");
/// assert_eq!(MemoryKind::default(), MemoryKind::Device);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryKind {
    /// Device memory: the arena that [`ArenaConfig::mem_fraction`](crate::ArenaConfig) sizes
    /// (VRAM on a discrete GPU). Every array is of this kind unless asked otherwise.
    #[default]
    Device,
    /// Pinned host memory: host-visible system memory the GPU reaches directly (CUDA's
    /// zero-copy pinned memory), where [`MemoryPlan::pinned_host`](crate::MemoryPlan) places
    /// it, under [`ArenaConfig::pinned_host_bytes`](crate::ArenaConfig). It spares device
    /// memory for data that waits between uses (offloaded activations, optimizer state). A
    /// kernel that binds such an array reads it over the bus on a discrete GPU (PCIe: tens of
    /// GB/s against the TB/s of VRAM); on UMA it is the same RAM at the same speed. On
    /// backends without a memory table (GL, Metal, DX12) it is an arena of plain wgpu buffers,
    /// placed by the driver, with the same limit and statistics.
    PinnedHost,
}

impl MemoryKind {
    /// JAX's name of the kind: `"device"` or `"pinned_host"`.
    pub fn name(self) -> &'static str {
        match self {
            MemoryKind::Device => "device",
            MemoryKind::PinnedHost => "pinned_host",
        }
    }
}

impl std::fmt::Display for MemoryKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
