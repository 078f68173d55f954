//! Everything that touches the driver or the operating system through raw handles and
//! pointers: the crate's only `unsafe` code (the crate root denies it everywhere else). Kept
//! in one room so that there is one place to audit, and so that the modules above it (context,
//! transfers, kernels, profiling) stay safe code that sees buffers, ranges and typed results.
//!
//! It holds four groups:
//! - **Where regions come from**: `vulkan.rs` (gpu-allocator memory on wgpu's own `VkDevice`,
//!   imported into wgpu as buffers; the device's memory table, limits and heap budgets),
//!   `vulkan_buffer.rs` (a `VkBuffer` imported into wgpu and the memory it is bound to, who
//!   owns each), `alias.rs` (buffers of their own over one array's part of a Vulkan region,
//!   for the app's passes), `plain.rs` (plain wgpu buffers on GL, Metal and DX12), `buffer.rs` (the buffer both
//!   return and how making one fails), `device_kind.rs` (wgpu's device type in the memory
//!   policy's terms), `device_origin.rs` (which adapter made a device, by the driver's
//!   handles), and in this file `Regions`, the arena's `RegionSource`, with the staging
//!   buffers made beside it.
//! - **Host access to mapped memory**: `mapped.rs` (every host read and write of mapped
//!   device memory, through checked ranges), `host_sync.rs` (flush and invalidate where the
//!   memory is not coherent), `barrier.rs` (the global memory barriers wgpu does not record: GPU
//!   writes made visible to host reads, work through aliases ordered).
//! - **Files**: `private_files.rs` (the operating system's side of the files the crate writes:
//!   never through a planted link, never trusting another user's files; below both of its
//!   users, the pipeline cache on disk and the memory-profile dumps), `pipeline_cache.rs` (the
//!   driver's pipeline cache, seeded from bytes a previous process saved).
//! - **MPI buffers** (feature `mpi`): `mpi_buffer.rs` (mapped memory as MPI buffers, a
//!   communicator handed to the progress thread, and the in-place all-reduce through
//!   `mpi::ffi` with the library's `MPI_IN_PLACE`).
//!
//! # Who owns each object, and when it dies
//! wgpu hands out its device and buffers to safe code (`Context::device`,
//! `DeviceArray::buffer`), where `wgpu::Device::destroy` and `wgpu::Buffer::destroy` can end
//! them early, and a device can be lost at any time. So nothing here relies on wgpu keeping
//! memory alive:
//! - **`VkDevice`, queue**: wgpu's. They stay open while any `wgpu::Device` handle exists, and
//!   everything below that holds a Vulkan handle also holds a `wgpu::Device`, so the device
//!   closes after all of it (destroying or losing the device does not close it).
//! - **gpu-allocator** (`vulkan.rs`): one per context, in an `Arc` shared by the context's
//!   `Regions` and by every allocation it made; dropped after the last of them.
//! - **Device memory** (`vulkan.rs`, `AllocatedMemory`): one gpu-allocator allocation per
//!   region or staging buffer (dedicated for staging; regions may share a block), in an `Arc` held by wgpu's buffer (through its drop callback) and by every
//!   [`MappedRange`] of it: the region's `DeviceBuffer`, each array's storage, each staging
//!   buffer, and ranges cut from them while an op runs. Freed when the last holder drops it.
//! - **`VkBuffer`**: wgpu's, destroyed by our drop callback when wgpu destroys the buffer,
//!   after the submissions that used it: when its last handle is dropped (the arena released
//!   the region and no array or staging buffer holds it), or early through `destroy` or a lost
//!   device. GPU work on a destroyed buffer is refused by wgpu (an [`crate::Error::Device`]);
//!   host access through mappings still reaches live memory.
//! - **Plain buffers** (`plain.rs`, GL, Metal, DX12): wholly wgpu's. The crate keeps no pointer
//!   into them: it reads and writes them only through wgpu (`write_buffer`, `map_async` with
//!   a mapped view that wgpu checks), so an early `destroy` turns into wgpu errors there.
#![allow(unsafe_code)]

// Where regions come from.
mod alias;
mod buffer;
mod device_kind;
mod device_origin;
mod plain;
mod vulkan;
mod vulkan_buffer;

// Host access to mapped memory.
mod barrier;
mod host_sync;
mod mapped;

// Files.
mod pipeline_cache;
mod private_files;

// MPI buffers.
#[cfg(feature = "mpi")]
mod mpi_buffer;

pub(crate) use alias::AliasableMemory;
pub(crate) use barrier::{alias_barrier, host_read_barrier, needs_host_read_barrier};
use buffer::{check_buffer_size, BufferFailure};
pub(crate) use buffer::{ArrayRegion, DeviceBuffer};
pub(crate) use device_kind::device_kind;
pub(crate) use device_origin::{device_made_from, queue_of_device};
pub use host_sync::HostSyncCounts;
pub(crate) use mapped::{copy_threads, MappedRange};
#[cfg(feature = "mpi")]
pub(crate) use mpi_buffer::{all_reduce_in_place, in_place_sentinel, MappedElements, SharedComm};
pub(crate) use pipeline_cache::create_pipeline_cache;
pub(crate) use private_files::{
    create_new_private_file, private_dir, read_private_file, replace_private_file,
    runs_with_borrowed_identity, unguessable_name, write_named_file, PrivateFileRefusal,
};
pub use vulkan::VulkanLimits;
pub(crate) use vulkan::{heap_budgets, vulkan_limits};

use crate::memplan::DeviceDescription;

/// The memory table of an adapter: Vulkan's own, or a synthetic one of `fallback_heap_bytes`
/// on backends that cannot report memory.
pub(crate) fn describe_adapter(
    adapter: &wgpu::Adapter,
    fallback_heap_bytes: u64,
) -> DeviceDescription {
    vulkan::describe_vulkan_adapter(adapter)
        .unwrap_or_else(|| plain::synthetic_description(&adapter.get_info(), fallback_heap_bytes))
}

use crate::arena::{RegionId, RegionRefusal, RegionSource};
use crate::error::{Error, Result};
use std::collections::HashMap;

/// The memory source of one context (shared by the arenas of its memory kinds).
#[derive(Clone)]
pub(crate) enum MemoryBackend {
    /// gpu-allocator on wgpu's Vulkan device, under the memory plan.
    Vulkan(Box<vulkan::VulkanMemory>),
    /// Plain wgpu buffers (GL, Metal, DX12).
    Plain,
}

/// What the arena's region ids stand for: one buffer each.
pub(crate) struct Regions {
    device: wgpu::Device,
    backend: MemoryBackend,
    /// Memory types to try for arena regions, best first (Vulkan only).
    arena_types: Vec<u32>,
    /// The wgpu usages of arena regions (`ArenaConfig::array_usages`).
    arena_usages: wgpu::BufferUsages,
    regions: HashMap<RegionId, DeviceBuffer>,
    next_id: u64,
}

impl Regions {
    /// Regions of `device` in `arena_types` (best first), with `arena_usages`;
    /// `force_non_coherent` makes every mapping flush and invalidate as if it were not coherent.
    pub(crate) fn new(
        device: wgpu::Device,
        arena_types: Vec<u32>,
        arena_usages: wgpu::BufferUsages,
        force_non_coherent: bool,
    ) -> Result<Self> {
        let backend = match vulkan::VulkanMemory::new(&device, force_non_coherent)? {
            Some(vk) => MemoryBackend::Vulkan(Box::new(vk)),
            None => MemoryBackend::Plain,
        };
        Ok(Self {
            device,
            backend,
            arena_types,
            arena_usages,
            regions: HashMap::new(),
            next_id: 0,
        })
    }

    /// Regions from the same memory source (one gpu-allocator per context) in other memory
    /// types, `arena_types` best first: the arena of another memory kind.
    pub(crate) fn sibling(&self, arena_types: Vec<u32>) -> Regions {
        Regions {
            device: self.device.clone(),
            backend: self.backend.clone(),
            arena_types,
            arena_usages: self.arena_usages,
            regions: HashMap::new(),
            next_id: 0,
        }
    }

    /// True when regions come from gpu-allocator under our memory plan.
    pub(crate) fn is_vulkan(&self) -> bool {
        matches!(self.backend, MemoryBackend::Vulkan(_))
    }

    /// The buffer behind a region.
    pub(crate) fn get(&self, region: RegionId) -> Option<&DeviceBuffer> {
        self.regions.get(&region)
    }

    /// A buffer outside the arena (staging memory), from the given memory types best first.
    pub(crate) fn create_buffer(
        &self,
        size: u64,
        candidates: &[u32],
        purpose: plain::Purpose,
        label: &str,
    ) -> std::result::Result<DeviceBuffer, BufferFailure> {
        let usage = match purpose {
            Purpose::Arena => self.arena_usages,
            // Staging is copied from and to, and bound as storage by the host-path ops.
            Purpose::Upload | Purpose::Readback => STAGING_USAGES,
        };
        match &self.backend {
            MemoryBackend::Vulkan(vk) => {
                let aliasable = purpose == Purpose::Arena;
                vk.create_buffer(&self.device, size, candidates, usage, aliasable, label)
            }
            MemoryBackend::Plain => {
                // wgpu reports an oversized buffer as a validation error, not a result.
                check_buffer_size(size, self.device.limits().max_buffer_size, "maxBufferSize")
                    .map_err(|refusal| BufferFailure {
                        during: format!("creating a buffer ({label}, {size} bytes)"),
                        refusal,
                    })?;
                Ok(plain::create_buffer(
                    &self.device,
                    size,
                    purpose,
                    usage,
                    label,
                ))
            }
        }
    }

    /// Flushes and invalidates of non-coherent mappings so far (zero on other backends).
    pub(crate) fn host_sync_counts(&self) -> HostSyncCounts {
        match &self.backend {
            MemoryBackend::Vulkan(vk) => vk.host_sync_counts(),
            MemoryBackend::Plain => HostSyncCounts::default(),
        }
    }

    /// gpu-allocator's count of live allocations and their bytes (Vulkan only).
    pub(crate) fn allocator_report(&self) -> Option<(usize, u64)> {
        match &self.backend {
            MemoryBackend::Vulkan(vk) => Some(vk.allocator_report()),
            MemoryBackend::Plain => None,
        }
    }
}

pub(crate) use plain::Purpose;

/// The text of `Error::Backend` for a failure `during` a step, for `reason`.
fn backend_text(during: &str, reason: &str) -> String {
    Error::Backend {
        during: during.to_string(),
        reason: reason.to_string(),
    }
    .to_string()
}

/// The usages of staging buffers made from gpu-allocator memory (plain staging buffers are
/// mappable instead: `plain.rs`).
const STAGING_USAGES: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_SRC)
    .union(wgpu::BufferUsages::COPY_DST);

impl RegionSource for Regions {
    fn create_region(&mut self, size: u64) -> std::result::Result<RegionId, RegionRefusal> {
        let id = RegionId(self.next_id);
        let label = format!("gpu-arena region {}", id.0);
        // The refusal's kind travels as is; its text gets the failed step, as the crate's
        // `Error::Backend` would say it.
        let buffer = self
            .create_buffer(size, &self.arena_types, Purpose::Arena, &label)
            .map_err(|mut failure| {
                if let RegionRefusal::OutOfMemory { reason } | RegionRefusal::Other { reason } =
                    &mut failure.refusal
                {
                    *reason = backend_text(&failure.during, reason);
                }
                failure.refusal
            })?;
        self.next_id += 1;
        self.regions.insert(id, buffer);
        Ok(id)
    }

    fn release_region(&mut self, region: RegionId) {
        // Dropping our handle (and the region's mapping) lets wgpu destroy the buffer once no
        // submission uses it and no array holds it; the memory goes with the last mapping.
        self.regions.remove(&region);
    }
}
