//! The content of the context's memory lock ([`ContextInner::lock_memory`](super::ContextInner)):
//! the arena of each memory kind, the buffers behind its regions, and what memory snapshots say
//! of live arrays.
//!
//! A file of its own so that the state has one owner: its parts are private to this file, and
//! the rest of the crate reaches them through the methods below, which read a part or do one
//! operation on the memory (allocate, free, reserve, release) with both the arena and the
//! regions it draws from, as every such operation needs them at once.

use crate::arena::{Allocation, AllocationId, Arena, ArenaError};
use crate::backend::Regions;
use crate::memory_kind::MemoryKind;
use crate::trace::array_info::{ArrayInfo, ArrayRegistry};
use std::time::{Duration, Instant};

/// One memory kind's arena, the buffers behind its regions, and its live arrays.
pub(crate) struct KindMemory {
    arena: Arena,
    regions: Regions,
    /// Element type, shape and age of every live array, for memory snapshots.
    arrays: ArrayRegistry,
}

impl KindMemory {
    /// A kind's memory: `arena` over `regions`, no array yet.
    pub(crate) fn new(arena: Arena, regions: Regions) -> Self {
        Self {
            arena,
            regions,
            arrays: ArrayRegistry::default(),
        }
    }
}

/// The arenas of the context's memory kinds and the buffers behind their regions, under one
/// lock: every allocation and free touches an arena and its regions.
pub(crate) struct MemoryState {
    device: KindMemory,
    /// The pinned-host kind's memory; `None` where the device has none (a discrete device
    /// without host-visible system memory: `MemoryPlan::pinned_host`).
    pinned_host: Option<KindMemory>,
    /// How long the first-allocation reservation took, once it has happened.
    reserve_duration: Option<Duration>,
    /// What the device arena's out-of-memory reports say of the device.
    device_limits: DeviceLimits,
}

/// What the device arena's out-of-memory reports say of the device: the memory size assumed
/// where the backend does not report it
/// ([`OutOfMemory::assumed_device_memory`](crate::arena::OutOfMemory::assumed_device_memory)),
/// and the limit at a memory fraction of 1
/// ([`OutOfMemory::max_limit_bytes`](crate::arena::OutOfMemory::max_limit_bytes)).
#[derive(Clone, Copy, Debug)]
pub(crate) struct DeviceLimits {
    pub(crate) assumed_memory: Option<u64>,
    pub(crate) max_limit_bytes: u64,
}

impl MemoryState {
    /// The memory of a newly opened context: nothing reserved, no array yet.
    pub(crate) fn new(
        device: KindMemory,
        pinned_host: Option<KindMemory>,
        device_limits: DeviceLimits,
    ) -> Self {
        Self {
            device,
            pinned_host,
            reserve_duration: None,
            device_limits,
        }
    }

    fn kind(&self, kind: MemoryKind) -> Option<&KindMemory> {
        match kind {
            MemoryKind::Device => Some(&self.device),
            MemoryKind::PinnedHost => self.pinned_host.as_ref(),
        }
    }

    fn kind_mut(&mut self, kind: MemoryKind) -> Option<&mut KindMemory> {
        match kind {
            MemoryKind::Device => Some(&mut self.device),
            MemoryKind::PinnedHost => self.pinned_host.as_mut(),
        }
    }

    /// Every kind's memory the device has.
    fn kinds_mut(&mut self) -> impl Iterator<Item = &mut KindMemory> {
        std::iter::once(&mut self.device).chain(self.pinned_host.as_mut())
    }

    /// The device arena, for its figures, labels and snapshots.
    pub(crate) fn arena(&self) -> &Arena {
        &self.device.arena
    }

    /// The arena of `kind`, when the device has that kind.
    pub(crate) fn arena_of(&self, kind: MemoryKind) -> Option<&Arena> {
        self.kind(kind).map(|k| &k.arena)
    }

    /// The buffers behind the device arena's regions and the backend they come from.
    pub(crate) fn regions(&self) -> &Regions {
        &self.device.regions
    }

    /// The buffers behind the regions of `kind` (it exists: an array of it does).
    pub(crate) fn regions_of(&self, kind: MemoryKind) -> &Regions {
        &self.kind(kind).unwrap_or(&self.device).regions
    }

    /// The description of every live array of `kind`.
    pub(crate) fn arrays_of(&self, kind: MemoryKind) -> Option<&ArrayRegistry> {
        self.kind(kind).map(|k| &k.arrays)
    }

    /// How long the reservation took, once it has happened.
    pub(crate) fn reserve_duration(&self) -> Option<Duration> {
        self.reserve_duration
    }

    /// Reserves the device arena's base now, timing it; does nothing once it is reserved.
    pub(crate) fn reserve(&mut self) -> Result<(), ArenaError> {
        if self.device.arena.is_reserved() {
            return Ok(());
        }
        let start = Instant::now();
        self.device.arena.reserve(&mut self.device.regions)?;
        self.reserve_duration = Some(start.elapsed());
        Ok(())
    }

    /// Takes `bytes` (default alignment) from the arena of `kind`, growing it by a region if it
    /// must, and reserving the device arena's base at its first allocation (not before a
    /// request no region could hold); `None` when the device has no such kind. An
    /// out-of-memory names the kind, and one of device memory says how much the pinned-host
    /// kind could still take.
    #[inline]
    pub(crate) fn allocate(
        &mut self,
        kind: MemoryKind,
        bytes: u64,
        label: Option<&str>,
    ) -> Option<Result<Allocation, ArenaError>> {
        let memory = self.kind_mut(kind)?;
        // The device arena's first allocation reserves its base: timed, as `reserve` is.
        let reserving =
            (kind == MemoryKind::Device && !memory.arena.is_reserved()).then(Instant::now);
        let outcome = (memory.arena).allocate(bytes, 0, label, &mut memory.regions);
        if let Some(start) = reserving.filter(|_| self.device.arena.is_reserved()) {
            self.reserve_duration = Some(start.elapsed());
        }
        Some(outcome.map_err(|error| self.of_kind(kind, error)))
    }

    /// Reserves the device arena's base for a first array of another kind (as JAX
    /// preallocates when its backend first runs), unless the request is one `kind` could
    /// never hold: before that array takes its memory, so that a refusal of either leaves
    /// both arenas as they were.
    pub(crate) fn reserve_for(
        &mut self,
        kind: MemoryKind,
        bytes: u64,
        label: Option<&str>,
    ) -> Result<(), ArenaError> {
        if kind == MemoryKind::Device || self.device.arena.is_reserved() {
            return Ok(());
        }
        // No such kind: the allocation refuses, with nothing reserved.
        let Some(memory) = self.kind(kind) else {
            return Ok(());
        };
        if let Some(error) = memory.arena.never_holds(bytes, label) {
            return Err(self.of_kind(kind, error));
        }
        self.reserve()
    }

    /// `error` of the arena of `kind`, its out-of-memory report naming the kind (and, for
    /// device memory, the room the pinned-host kind has left and what it says of the device).
    fn of_kind(&self, kind: MemoryKind, error: ArenaError) -> ArenaError {
        match error {
            ArenaError::OutOfMemory(mut report) => {
                report.memory_kind = kind;
                if kind == MemoryKind::Device {
                    report.pinned_host_room = self.pinned_host_room();
                    report.assumed_device_memory = self.device_limits.assumed_memory;
                    report.max_limit_bytes = Some(self.device_limits.max_limit_bytes);
                }
                ArenaError::OutOfMemory(report)
            }
            other => other,
        }
    }

    /// The bytes the pinned-host kind could still take below its limit, if the device has it.
    fn pinned_host_room(&self) -> Option<u64> {
        let stats = self.pinned_host.as_ref()?.arena.stats();
        let limit = stats.bytes_limit.unwrap_or(u64::MAX);
        Some(limit.saturating_sub(stats.bytes_in_use))
    }

    /// Records the description of the array that has just taken allocation `id` of `kind`.
    pub(crate) fn register_array(&mut self, kind: MemoryKind, id: AllocationId, info: ArrayInfo) {
        if let Some(memory) = self.kind_mut(kind) {
            memory.arrays.insert(id, info);
        }
    }

    /// Describes the array of allocation `id` of `kind` as elements of `U` in `shape` from
    /// now on (see [`ArrayRegistry::retype`]).
    pub(crate) fn retype_array<U>(&mut self, kind: MemoryKind, id: AllocationId, shape: &[usize]) {
        if let Some(memory) = self.kind_mut(kind) {
            memory.arrays.retype::<U>(id, shape);
        }
    }

    /// Forgets the array of allocation `id` of `kind` and gives its memory back to that arena,
    /// reusable once submission `frontier` has completed (at once when `None`).
    #[inline]
    pub(crate) fn free(
        &mut self,
        kind: MemoryKind,
        id: AllocationId,
        frontier: Option<u64>,
    ) -> Result<(), ArenaError> {
        let memory = self
            .kind_mut(kind)
            .ok_or(ArenaError::UnknownAllocation(id))?;
        memory.arrays.remove(id);
        memory.arena.free(id, frontier, &mut memory.regions)
    }

    /// Bytes freed in every kind and waiting for queued GPU work.
    pub(crate) fn pending_free_bytes(&self) -> u64 {
        let pinned = self.pinned_host.as_ref();
        self.device.arena.pending_free_bytes() + pinned.map_or(0, |k| k.arena.pending_free_bytes())
    }

    /// Makes free the pending frees behind submissions up to `completed`, in every kind; skips
    /// an arena's walk when nothing is pending there.
    pub(crate) fn retire_completed(&mut self, completed: u64) {
        for memory in self.kinds_mut() {
            if memory.arena.pending_free_bytes() > 0 {
                memory
                    .arena
                    .advance_frontier(completed, &mut memory.regions);
            }
        }
    }

    /// The name of the live allocation `id` of `kind`, if it has one.
    pub(crate) fn label(&self, kind: MemoryKind, id: AllocationId) -> Option<String> {
        self.kind(kind)?.arena.label(id).map(str::to_string)
    }

    /// Names allocation `id` of `kind` in snapshots and OOM reports.
    pub(crate) fn set_label(
        &mut self,
        kind: MemoryKind,
        id: AllocationId,
        label: Option<&str>,
    ) -> Result<(), ArenaError> {
        let memory = self
            .kind_mut(kind)
            .ok_or(ArenaError::UnknownAllocation(id))?;
        memory.arena.set_label(id, label)
    }

    /// Resets every kind's peak figures to the current values.
    pub(crate) fn reset_peaks(&mut self) {
        self.kinds_mut()
            .for_each(|memory| memory.arena.reset_peaks());
    }

    /// Gives wholly free regions above the reserved base back, in every kind; returns the
    /// bytes released.
    pub(crate) fn release_free_regions(&mut self) -> u64 {
        self.kinds_mut()
            .map(|memory| memory.arena.release_free_regions(&mut memory.regions))
            .sum()
    }

    /// Gives every region back to the device, when the context goes away.
    pub(crate) fn release_all(&mut self) {
        self.kinds_mut()
            .for_each(|memory| memory.arena.release_all(&mut memory.regions));
    }
}
