//! Memory statistics with the keys of JAX's `Device.memory_stats()`.

use serde::{Deserialize, Serialize};

/// A snapshot of the arena's counters, with the keys JAX's `Device.memory_stats()` returns
/// (from XLA's `AllocatorStats`), plus `num_regions` and `fragmentation`.
///
/// All byte counts are rounded sizes (multiples of 256). Reading them is cheap: the arena keeps
/// the counters up to date and finds the largest free block from its bin index.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct MemoryStats {
    /// Allocations made since the arena was created (XLA counts allocation calls, not live ones).
    pub num_allocs: u64,
    /// Bytes of live allocations. Pending frees no longer count.
    pub bytes_in_use: u64,
    /// Highest `bytes_in_use` since creation or the last `reset_peaks()`.
    pub peak_bytes_in_use: u64,
    /// Largest single allocation since creation or the last `reset_peaks()`, which sets it to
    /// the largest allocation live then (as it sets the peaks to the current figures).
    pub largest_alloc_size: u64,
    /// The cap on bytes held in regions (`ArenaOptions::limit_bytes`).
    pub bytes_limit: Option<u64>,
    /// Bytes held in regions right now.
    pub bytes_reserved: u64,
    /// Highest `bytes_reserved` since creation or the last `reset_peaks()`.
    pub peak_bytes_reserved: u64,
    /// How far `bytes_reserved` may grow: the same cap as `bytes_limit`.
    pub bytes_reservable_limit: Option<u64>,
    /// The largest free chunk: the biggest allocation that fits without growing.
    pub largest_free_block_bytes: u64,
    /// Same as `bytes_reserved` (XLA reports the BFC pool size under this key).
    pub pool_bytes: Option<u64>,
    /// Same as `peak_bytes_reserved`.
    pub peak_pool_bytes: Option<u64>,
    /// Regions held right now.
    pub num_regions: u64,
    /// `1 − largest_free_block / total free bytes`; 0 when nothing is free. 0 means all free
    /// memory is one block; near 1 means it is scattered in small pieces.
    pub fragmentation: f64,
}

/// `1 − largest / total`, or 0 when nothing is free.
pub(crate) fn fragmentation(largest_free_block: u64, total_free: u64) -> f64 {
    if total_free == 0 {
        0.0
    } else {
        1.0 - largest_free_block as f64 / total_free as f64
    }
}
