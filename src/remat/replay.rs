//! Running a schedule's allocations and frees through an arena.

use serde::Serialize;

use super::schedule::{Buffer, Schedule};
use crate::arena::{AllocationId, Arena, ArenaError, ArenaOptions, RegionSource, VirtualRegions};

/// What [`Schedule::replay`] measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ReplayReport {
    /// The most bytes the schedule had in use at once, as the arena counted them: its
    /// `bytes_in_use` above what was in use before the replay. Equal to
    /// [`Schedule::peak_bytes`].
    pub peak_bytes_in_use: u64,
    /// The arena's `bytes_reserved` at its highest during the replay: what the pool had to
    /// hold for the schedule, fragmentation included (in growth mode, what it grew to).
    pub peak_bytes_reserved: u64,
}

impl Schedule {
    /// Runs the schedule's allocations and frees (no compute) through `arena`: the input,
    /// then every step, then the input is freed again. Allocations made before stay as they
    /// are, and whatever the replay allocated is freed again, also when an allocation fails.
    /// With [`VirtualRegions`](crate::arena::VirtualRegions) as the source, no device is
    /// needed: an arena preallocating some size then says whether the plan fits in it.
    ///
    /// # Errors
    /// The arena's error when an allocation fails (an out-of-memory report says why).
    pub fn replay(
        &self,
        arena: &mut Arena,
        source: &mut dyn RegionSource,
    ) -> Result<ReplayReport, ArenaError> {
        self.replay_labelled(arena, source, true)
    }

    /// Whether the schedule replays without running out of memory in an arena that
    /// preallocates `bytes` ([`ArenaOptions::preallocated`]): what
    /// [`CheckpointPolicy::Budget`](super::CheckpointPolicy::Budget) means by fitting.
    pub(crate) fn fits_in_arena(&self, bytes: u64) -> bool {
        // Sizes that hold the plan for certain are answered without building the arena (one
        // of 2^63 bytes would reserve 2^31 regions): an arena of one region holds the plan when
        // it is as large as all the plan's allocations together (each buffer fits past the
        // highest one placed so far); one with more full regions than buffers are ever live at
        // once always has an empty region, and every buffer fits in one (the planner checks).
        let region = ArenaOptions::preallocated(bytes).max_region_bytes;
        let one_region_fits = self.allocated_bytes() <= bytes && bytes <= region;
        let live = u64::try_from(self.most_live_buffers()).unwrap_or(u64::MAX);
        let empty_region_left = bytes / region > live;
        if one_region_fits || empty_region_left {
            return true;
        }
        let mut arena = Arena::new(ArenaOptions::preallocated(bytes));
        self.replay_labelled(&mut arena, &mut VirtualRegions::default(), false)
            .is_ok()
    }

    /// [`replay`](Schedule::replay), naming each allocation after its buffer when `labels` is
    /// set (planning leaves the names out: formatting them costs more than the allocation).
    fn replay_labelled(
        &self,
        arena: &mut Arena,
        source: &mut dyn RegionSource,
        labels: bool,
    ) -> Result<ReplayReport, ArenaError> {
        let before = arena.stats();
        let mut report = ReplayReport {
            peak_bytes_in_use: 0,
            peak_bytes_reserved: before.bytes_reserved,
        };
        let mut live: Vec<Option<AllocationId>> = vec![None; self.slot_count()];
        // Each step as what it allocates and what it frees, after the input's allocation.
        let input = (Some(Buffer::Activation(0)), None);
        let actions = self
            .steps()
            .iter()
            .map(|step| (step.allocates(), step.frees()));
        let mut outcome = Ok(());
        for (allocates, frees) in std::iter::once(input).chain(actions) {
            if let Some(buffer) = allocates {
                let label = labels.then(|| buffer.to_string());
                let bytes = self.bytes_of_step_buffer(buffer);
                match arena.allocate(bytes, 0, label.as_deref(), source) {
                    Ok(allocation) => live[self.slot(buffer)] = Some(allocation.id),
                    Err(error) => {
                        outcome = Err(error);
                        break;
                    }
                };
                let stats = arena.stats();
                report.peak_bytes_in_use = report
                    .peak_bytes_in_use
                    .max(stats.bytes_in_use - before.bytes_in_use);
                report.peak_bytes_reserved = report.peak_bytes_reserved.max(stats.bytes_reserved);
            }
            if let Some(buffer) = frees {
                if let Some(id) = live[self.slot(buffer)].take() {
                    arena.free(id, None, source)?;
                }
            }
        }
        for id in live.into_iter().flatten() {
            arena.free(id, None, source)?;
        }
        outcome.map(|()| report)
    }
}
