//! What a caller holds after allocating: the allocation's id, its place and its size, and the
//! rounding rule every size goes through.

use serde::{Deserialize, Serialize};

use super::region::RegionId;

/// Every offset and every size the arena hands out is a multiple of this many bytes.
///
/// XLA's BFC allocator rounds every allocation to 256 bytes (`kMinAllocationSize`), and 256 is
/// also the largest `min_storage_buffer_offset_alignment` / `min_uniform_buffer_offset_alignment`
/// a wgpu adapter may demand, so any arena offset is a valid binding offset on every adapter.
pub const ALLOCATION_ALIGNMENT: u64 = 256;

/// Names one allocation for its whole life.
///
/// The low 32 bits are the chunk's slot in the arena's chunk table and the high 32 bits the
/// allocation's sequence number plus a number of the arena's own, modulo 2^32 (its stamp), so
/// [`Arena::free`](super::Arena::free) finds the chunk in O(1) and recognises an id that was
/// already freed (a double free), that belongs to a chunk reused since, or that another arena
/// handed out (each arena of the process adds a different number). An arena's first 2^31 ids
/// are never 0, and an id comes back only after 2^32 more allocations of its arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AllocationId(pub u64);

impl AllocationId {
    /// Packs a chunk slot and the stamp of the allocation in it.
    pub(crate) fn new(slot: u32, stamp: u32) -> AllocationId {
        AllocationId((u64::from(stamp) << 32) | u64::from(slot))
    }

    /// The chunk slot this id points at.
    pub(crate) fn slot(self) -> u32 {
        self.0 as u32
    }

    /// The stamp of the allocation this id names.
    pub(crate) fn stamp(self) -> u32 {
        (self.0 >> 32) as u32
    }
}

/// A live allocation: `size` bytes at `offset` inside `region`.
///
/// `offset` is a multiple of [`ALLOCATION_ALIGNMENT`] (and of the alignment asked for);
/// `size` is the rounded size actually set aside, `requested` what the caller asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allocation {
    /// Pass this to [`Arena::free`](super::Arena::free).
    pub id: AllocationId,
    /// The region (GPU buffer or memory block) the bytes live in.
    pub region: RegionId,
    /// Byte offset of the allocation inside its region.
    pub offset: u64,
    /// Bytes set aside: `requested` rounded up to [`ALLOCATION_ALIGNMENT`], at least one granule.
    pub size: u64,
    /// Bytes the caller asked for.
    pub requested: u64,
}

/// Rounds a request up to the allocation granularity. Zero becomes one granule, as in XLA, so
/// every allocation owns a distinct address. `None` when rounding would overflow `u64`.
pub(crate) fn rounded_size(requested: u64) -> Option<u64> {
    let granules = requested.div_ceil(ALLOCATION_ALIGNMENT).max(1);
    granules.checked_mul(ALLOCATION_ALIGNMENT)
}

/// Rounds `value` down to the allocation granularity.
pub(crate) fn round_down(value: u64) -> u64 {
    value - value % ALLOCATION_ALIGNMENT
}

/// The smallest multiple of `align` (a power of two) at or above `value`; `None` on overflow.
pub(crate) fn align_up(value: u64, align: u64) -> Option<u64> {
    Some(value.checked_add(align - 1)? & !(align - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_round_up_to_256_bytes_and_zero_takes_one_granule() {
        assert_eq!(rounded_size(0), Some(256));
        assert_eq!(rounded_size(1), Some(256));
        assert_eq!(rounded_size(256), Some(256));
        assert_eq!(rounded_size(257), Some(512));
        assert_eq!(rounded_size(u64::MAX), None);
    }

    #[test]
    fn an_id_gives_back_its_slot_and_stamp() {
        let id = AllocationId::new(7, 3);
        assert_eq!((id.slot(), id.stamp()), (7, 3));
    }
}
