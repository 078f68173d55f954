//! A serialisable picture of every region and every chunk, for profilers and tests.

use serde::{Deserialize, Serialize};

use super::allocation::AllocationId;
use super::region::RegionId;
use super::stats::MemoryStats;

/// What a chunk is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ChunkState {
    /// Available for allocation.
    Free,
    /// Holds a live allocation.
    InUse,
    /// Freed by the caller, but queued GPU work may still touch it: reusable once the device
    /// reports its frontier as completed.
    PendingFree,
}

/// One chunk of a region.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkSnapshot {
    /// Byte offset inside the region.
    pub offset: u64,
    /// Bytes (a multiple of 256).
    pub size: u64,
    /// Free, in use or pending free.
    pub state: ChunkState,
    /// The allocation that holds (or, pending, held) the chunk; `None` when free.
    pub allocation: Option<AllocationId>,
    /// The allocation's label, if it had one.
    pub label: Option<String>,
    /// Bytes the caller asked for; 0 when free.
    pub requested: u64,
    /// The allocation's sequence number (the value of `num_allocs` just after it was made,
    /// so from 1; modulo 2^48); 0 when free.
    pub sequence: u64,
    /// For a pending free: the queue position after which the chunk is reusable.
    #[serde(default)]
    pub frontier: Option<u64>,
}

/// One region with its chunks in address order; the chunks tile `0..size` exactly.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionSnapshot {
    /// The source's name for the region.
    pub id: RegionId,
    /// Bytes.
    pub size: u64,
    /// Chunks in address order.
    pub chunks: Vec<ChunkSnapshot>,
}

/// Every region (in creation order, which is the order the best-fit tie-break uses) and the
/// statistics at the same instant.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArenaSnapshot {
    /// Regions in creation order.
    pub regions: Vec<RegionSnapshot>,
    /// Statistics at the time of the snapshot.
    pub stats: MemoryStats,
}
