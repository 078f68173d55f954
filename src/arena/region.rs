//! Regions: the large blocks (GPU buffers, device memory) that a backend creates and the arena
//! carves up. The arena only knows a region's id and size. This file holds the region id, the
//! [`RegionSource`] seam the backends fill in, its typed [`RegionRefusal`], and the
//! [`VirtualRegions`] source with no memory behind it.

use serde::{Deserialize, Serialize};

use super::bytes::Bytes;

/// Names a region. The [`RegionSource`] chooses the number; the arena never interprets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RegionId(pub u64);

/// Where regions come from. The GPU backend implements this; tests implement a fake.
///
/// The arena calls it only from inside its own methods, with the caller's `&mut`, so an
/// implementation needs no locking of its own.
///
/// ```
/// use gpu_arena::arena::{RegionId, RegionRefusal, RegionSource};
///
/// /// Pretends to be a device with 1 GiB of memory.
/// struct FakeDevice { next: u64, used: u64 }
///
/// impl RegionSource for FakeDevice {
///     fn create_region(&mut self, size: u64) -> Result<RegionId, RegionRefusal> {
///         if self.used + size > 1 << 30 {
///             return Err(RegionRefusal::out_of_memory("out of device memory"));
///         }
///         self.used += size;
///         self.next += 1;
///         Ok(RegionId(self.next))
///     }
///     fn release_region(&mut self, _region: RegionId) {}
/// }
/// ```
pub trait RegionSource {
    /// Creates a region of exactly `size` bytes (`size` is a multiple of 256).
    /// Returns a [`RegionRefusal`] if the device cannot; its kind decides what the arena does
    /// next (see [`RegionRefusal`]), and its text ends up in the arena's error.
    fn create_region(&mut self, size: u64) -> Result<RegionId, RegionRefusal>;

    /// Gives a region back. Only called for regions with no live or pending chunk.
    fn release_region(&mut self, region: RegionId);
}

/// Why a [`RegionSource`] could not create a region. The kind decides what the arena does:
/// - [`OutOfMemory`](RegionRefusal::OutOfMemory) and [`Other`](RegionRefusal::Other): it asks
///   for a region of just the request's size, then, where it holds wholly free regions, gives
///   them back and tries again, before it reports out of memory;
/// - [`TooLarge`](RegionRefusal::TooLarge): it never asks for a region above `limit` again
///   (its largest region becomes the limit), and refuses a request above it with the limit in
///   the report;
/// - [`DeviceLost`](RegionRefusal::DeviceLost): it stops at once and returns
///   [`ArenaError::DeviceLost`](super::ArenaError::DeviceLost).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegionRefusal {
    /// The device has no memory for a region this size now; a smaller one, or the same one
    /// after other regions are released, may still fit.
    #[error("{reason}")]
    OutOfMemory {
        /// The backend's words (driver or allocator message).
        reason: String,
    },
    /// A region of `size` bytes is more than the device can give in one piece, however much
    /// memory is free (a buffer or allocation size limit).
    #[error(
        "a region of {} is more than the device allows in one piece ({limit_name} is {})",
        Bytes(*size),
        Bytes(*limit)
    )]
    TooLarge {
        /// The size that was asked for, in bytes.
        size: u64,
        /// The largest size the device gives, in bytes.
        limit: u64,
        /// The device limit's name, e.g. `maxBufferSize` or `maxMemoryAllocationSize`.
        limit_name: &'static str,
    },
    /// The device is lost (driver reset, GPU removed): no region will come from it again.
    #[error("the device is lost: {reason}")]
    DeviceLost {
        /// The backend's words.
        reason: String,
    },
    /// Any other failure, in the backend's words.
    #[error("{reason}")]
    Other {
        /// The backend's words.
        reason: String,
    },
}

impl RegionRefusal {
    /// An [`OutOfMemory`](RegionRefusal::OutOfMemory) refusal with the backend's words.
    pub fn out_of_memory(reason: impl Into<String>) -> Self {
        RegionRefusal::OutOfMemory {
            reason: reason.into(),
        }
    }

    /// An [`Other`](RegionRefusal::Other) refusal with the backend's words.
    pub fn other(reason: impl Into<String>) -> Self {
        RegionRefusal::Other {
            reason: reason.into(),
        }
    }
}

/// A [`RegionSource`] with no memory behind it: it numbers regions 1, 2, 3, … and never
/// refuses. For using the arena as a pure planner or simulator (replaying an allocation
/// pattern, sizing a pool, tests), where only offsets and sizes matter; the arena's options
/// still set every limit.
///
/// ```
/// use gpu_arena::arena::{Arena, ArenaOptions, VirtualRegions};
///
/// let mut arena = Arena::new(ArenaOptions::growing(1 << 30));
/// let a = arena.allocate(1000, 0, None, &mut VirtualRegions::default())?;
/// assert_eq!(a.size, 1024);
/// # Ok::<(), gpu_arena::arena::ArenaError>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct VirtualRegions {
    /// Regions created so far (the id of the latest).
    created: u64,
}

impl RegionSource for VirtualRegions {
    fn create_region(&mut self, _size: u64) -> Result<RegionId, RegionRefusal> {
        self.created += 1;
        Ok(RegionId(self.created))
    }

    fn release_region(&mut self, _region: RegionId) {}
}

/// The arena's record of one region it holds.
#[derive(Clone, Debug)]
pub(crate) struct Region {
    /// The source's name for it.
    pub id: RegionId,
    /// Its size in bytes.
    pub size: u64,
    /// Where the region starts in the arena's private address space (see `Chunk::address`).
    /// Regions are laid out there in creation order, which makes "lowest address" a total order
    /// across regions for the best-fit tie-break.
    pub base_address: u64,
    /// The chunk at offset 0. It is never merged away (a merge keeps the lower chunk), so this
    /// stays valid for the life of the region.
    pub first_chunk: u32,
    /// Created by `reserve()`: part of the preallocated base that is never released early.
    pub is_base: bool,
}
