//! The arena's error type.

use super::allocation::{AllocationId, ALLOCATION_ALIGNMENT};
use super::bytes::Bytes;
use super::oom::OutOfMemory;
use super::options::MAX_RESERVED_REGIONS;
use super::region::RegionRefusal;

/// What can go wrong in an arena call. Nothing in the arena panics on user input; it returns
/// one of these.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ArenaError {
    /// No memory for the request; the payload explains why and what to change.
    #[error("{0}")]
    OutOfMemory(Box<OutOfMemory>),
    /// The id was already freed (a double free) or never came from this arena.
    #[error(
        "unknown allocation {} (the id snapshots show): it was already freed (double free), \
         forgotten by release_all, or never came from this arena",
        .0 .0
    )]
    UnknownAllocation(AllocationId),
    /// The alignment is not 0 (default) or a power of two.
    #[error("invalid alignment {0}: use 0 for the default of 256 bytes or a power of two")]
    InvalidAlignment(u64),
    /// The source refused a region of the preallocated base; the regions created before it
    /// were given back (and the peaks of the statistics are as before), so a later call
    /// starts over.
    #[error(
        "the region source could not provide memory: could not reserve {} up front (a region \
         of {} was refused: {refusal}); lower GPU_ARENA_MEM_FRACTION or set \
         GPU_ARENA_PREALLOCATE=false",
        Bytes(*reserve_bytes),
        Bytes(*region_bytes)
    )]
    ReserveRefused {
        /// Bytes the arena meant to reserve up front.
        reserve_bytes: u64,
        /// The size of the region that was refused.
        region_bytes: u64,
        /// Why the source refused it (in the message, so not also its `source()`: a chain
        /// printer states the cause once).
        refusal: RegionRefusal,
    },
    /// The options allow no region at all: `max_region_bytes` is below the 256-byte granule.
    #[error(
        "max_region_bytes is {max_region_bytes}, \
         below the {ALLOCATION_ALIGNMENT}-byte minimum, so no region can be created; set it to \
         {ALLOCATION_ALIGNMENT} or more"
    )]
    NoRegionAllowed {
        /// The option's value.
        max_region_bytes: u64,
    },
    /// The reserve would be split into more than [`MAX_RESERVED_REGIONS`] regions.
    #[error(
        "reserving {} in regions of at most {} \
         would take {regions} regions, more than the {MAX_RESERVED_REGIONS} a reservation may \
         have; raise max_region_bytes (GPU_ARENA_MAX_REGION_MB) where it is below the device's \
         largest buffer, or lower the reserve (GPU_ARENA_MEM_FRACTION)",
        Bytes(*reserve_bytes),
        Bytes(*max_region_bytes)
    )]
    TooManyReservedRegions {
        /// Bytes to reserve.
        reserve_bytes: u64,
        /// The largest region (rounded down to 256 bytes).
        max_region_bytes: u64,
        /// How many regions that would take.
        regions: u64,
    },
    /// The source reported the device lost: nothing more can come from it. The arena's
    /// allocations are as they were (free regions given back to make room stay given back:
    /// see [`Arena::allocate`](super::Arena::allocate)).
    #[error("the region source's device is lost: {reason}")]
    DeviceLost {
        /// The source's words.
        reason: String,
    },
}

impl ArenaError {
    /// The out-of-memory report, if this is one.
    pub fn as_out_of_memory(&self) -> Option<&OutOfMemory> {
        match self {
            ArenaError::OutOfMemory(oom) => Some(oom),
            _ => None,
        }
    }
}
