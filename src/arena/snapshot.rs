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

/// Where a chunk lies and what holds it: the fields every snapshot of a chunk shows, the
/// arena's ([`ChunkSnapshot`]) and the profiler's (`profile::SnapshotChunk`, which adds what
/// the caller knows of the array in it). Both contain it flattened, so their JSON stays one
/// flat object with its keys in the same order; they stay two types because each writes keys
/// the other has not (the arena's allocation sequence number; the profiler's ages, element
/// type, shape and site).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkRecord {
    /// Byte offset inside the region.
    pub offset: u64,
    /// Bytes (a multiple of 256).
    pub size: u64,
    /// Free, in use or pending free.
    pub state: ChunkState,
    /// The allocation that holds (or, pending, held) the chunk; `None` when free.
    pub allocation: Option<AllocationId>,
    /// The allocation's label (given with `with_label`, or the label scope it was made in), if
    /// it had one.
    pub label: Option<String>,
    /// Bytes the caller asked for (before rounding to 256); 0 when free.
    pub requested: u64,
}

/// One chunk of a region: its [`ChunkRecord`] (whose fields it derefs to, for reads and
/// writes) and the arena's bookkeeping of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkSnapshot {
    /// Where the chunk lies and what holds it.
    #[serde(flatten)]
    pub record: ChunkRecord,
    /// The allocation's sequence number (the value of `num_allocs` just after it was made,
    /// so from 1; exact while the arena has made fewer than 2^32 allocations since); 0 when
    /// free.
    pub sequence: u64,
    /// For a pending free: the queue position after which the chunk is reusable.
    #[serde(default)]
    pub frontier: Option<u64>,
}

/// `chunk.offset`, `chunk.size`, ...: the record's fields read through the snapshot.
impl std::ops::Deref for ChunkSnapshot {
    type Target = ChunkRecord;

    fn deref(&self) -> &ChunkRecord {
        &self.record
    }
}

/// `chunk.state = ...`: the record's fields written through the snapshot.
impl std::ops::DerefMut for ChunkSnapshot {
    fn deref_mut(&mut self) -> &mut ChunkRecord {
        &mut self.record
    }
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
