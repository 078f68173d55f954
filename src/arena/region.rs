//! Regions: the large blocks (GPU buffers, device memory) that a backend creates and the arena
//! carves up. The arena only knows a region's id and size.

use serde::{Deserialize, Serialize};

/// Names a region. The [`RegionSource`] chooses the number; the arena never interprets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RegionId(pub u64);

/// Where regions come from. The GPU backend implements this; tests implement a fake.
///
/// The arena calls it only from inside its own methods, with the caller's `&mut`, so an
/// implementation needs no locking of its own.
///
/// ```
/// use gpu_arena::arena::{RegionId, RegionSource};
///
/// /// Pretends to be a device with 1 GiB of memory.
/// struct FakeDevice { next: u64, used: u64 }
///
/// impl RegionSource for FakeDevice {
///     fn create_region(&mut self, size: u64) -> Result<RegionId, String> {
///         if self.used + size > 1 << 30 {
///             return Err("out of device memory".into());
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
    /// Returns `Err(reason)` if the device cannot; the arena then tries a smaller region or
    /// reports out of memory with `reason` in the message.
    fn create_region(&mut self, size: u64) -> Result<RegionId, String>;

    /// Gives a region back. Only called for regions with no live or pending chunk.
    fn release_region(&mut self, region: RegionId);
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
    fn create_region(&mut self, _size: u64) -> Result<RegionId, String> {
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
