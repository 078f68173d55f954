//! The content of the context's memory lock ([`ContextInner::lock_memory`](super::ContextInner)):
//! the arena, the buffers behind its regions, and what memory snapshots say of live arrays.
//!
//! A file of its own so that the state has one owner: its parts are private to this file, and
//! the rest of the crate reaches them through the methods below, which read a part or do one
//! operation on the memory (allocate, free, reserve, release) with both the arena and the
//! regions it draws from, as every such operation needs them at once.

use crate::arena::{Allocation, AllocationId, Arena, ArenaError};
use crate::backend::Regions;
use crate::trace::array_info::{ArrayInfo, ArrayRegistry};
use std::time::{Duration, Instant};

/// The arena and the buffers behind its regions, under one lock: every allocation and free
/// touches both.
pub(crate) struct MemoryState {
    arena: Arena,
    regions: Regions,
    /// How long the first-allocation reservation took, once it has happened.
    reserve_duration: Option<Duration>,
    /// Element type, shape and age of every live array, for memory snapshots.
    arrays: ArrayRegistry,
}

impl MemoryState {
    /// The memory of a newly opened context: nothing reserved, no array yet.
    pub(crate) fn new(arena: Arena, regions: Regions) -> Self {
        Self {
            arena,
            regions,
            reserve_duration: None,
            arrays: ArrayRegistry::default(),
        }
    }

    /// The arena, for its figures, labels and snapshots.
    pub(crate) fn arena(&self) -> &Arena {
        &self.arena
    }

    /// The buffers behind the arena's regions and the backend they come from.
    pub(crate) fn regions(&self) -> &Regions {
        &self.regions
    }

    /// The description of every live array, for memory snapshots and errors.
    pub(crate) fn arrays(&self) -> &ArrayRegistry {
        &self.arrays
    }

    /// How long the reservation took, once it has happened.
    pub(crate) fn reserve_duration(&self) -> Option<Duration> {
        self.reserve_duration
    }

    /// Reserves the arena's base now, timing it; does nothing once it is reserved.
    pub(crate) fn reserve(&mut self) -> Result<(), ArenaError> {
        if self.arena.is_reserved() {
            return Ok(());
        }
        let start = Instant::now();
        self.arena.reserve(&mut self.regions)?;
        self.reserve_duration = Some(start.elapsed());
        Ok(())
    }

    /// Takes `bytes` (default alignment) from the arena, growing it by a region if it must.
    #[inline]
    pub(crate) fn allocate(
        &mut self,
        bytes: u64,
        label: Option<&str>,
    ) -> Result<Allocation, ArenaError> {
        self.arena.allocate(bytes, 0, label, &mut self.regions)
    }

    /// Records the description of the array that has just taken allocation `id`.
    pub(crate) fn register_array(&mut self, id: AllocationId, info: ArrayInfo) {
        self.arrays.insert(id, info);
    }

    /// Forgets the array of allocation `id` and gives its memory back to the arena, reusable
    /// once submission `frontier` has completed (at once when `None`).
    #[inline]
    pub(crate) fn free(
        &mut self,
        id: AllocationId,
        frontier: Option<u64>,
    ) -> Result<(), ArenaError> {
        self.arrays.remove(id);
        self.arena.free(id, frontier, &mut self.regions)
    }

    /// Makes free the pending frees behind submissions up to `completed`; skips the arena's
    /// walk when nothing is pending.
    pub(crate) fn retire_completed(&mut self, completed: u64) {
        if self.arena.pending_free_bytes() > 0 {
            self.arena.advance_frontier(completed, &mut self.regions);
        }
    }

    /// Names allocation `id` in snapshots and OOM reports.
    pub(crate) fn set_label(
        &mut self,
        id: AllocationId,
        label: Option<&str>,
    ) -> Result<(), ArenaError> {
        self.arena.set_label(id, label)
    }

    /// Resets the arena's peak figures to the current values.
    pub(crate) fn reset_peaks(&mut self) {
        self.arena.reset_peaks();
    }

    /// Gives wholly free regions above the reserved base back to the device; returns the bytes
    /// released.
    pub(crate) fn release_free_regions(&mut self) -> u64 {
        self.arena.release_free_regions(&mut self.regions)
    }

    /// Gives every region back to the device, when the context goes away.
    pub(crate) fn release_all(&mut self) {
        self.arena.release_all(&mut self.regions);
    }
}
