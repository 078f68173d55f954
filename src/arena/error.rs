//! The arena's error type.

use super::allocation::AllocationId;
use super::oom::OutOfMemory;

/// What can go wrong in an arena call. Nothing in the arena panics on user input; it returns
/// one of these.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ArenaError {
    /// No memory for the request; the payload explains why and what to change.
    #[error("{0}")]
    OutOfMemory(Box<OutOfMemory>),
    /// The id was already freed (a double free) or never came from this arena.
    #[error(
        "unknown allocation {0:?}: it was already freed (double free), forgotten by \
         release_all, or never came from this arena"
    )]
    UnknownAllocation(AllocationId),
    /// The alignment is not 0 (default) or a power of two.
    #[error("invalid alignment {0}: use 0 for the default of 256 bytes or a power of two")]
    InvalidAlignment(u64),
    /// The source refused to create a region outside an allocation (while reserving the
    /// preallocated base), or the options allow no region at all.
    #[error("the region source could not provide memory: {0}")]
    RegionSource(String),
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
