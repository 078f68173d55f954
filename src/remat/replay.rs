//! Running a schedule's allocations and frees through an arena.

use std::collections::HashMap;

use serde::Serialize;

use super::schedule::{Buffer, Schedule, Step};
use crate::arena::{AllocationId, Arena, ArenaError, RegionSource};

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
        let before = arena.stats();
        let mut report = ReplayReport {
            peak_bytes_in_use: 0,
            peak_bytes_reserved: before.bytes_reserved,
        };
        let mut live: HashMap<Buffer, AllocationId> = HashMap::new();
        // Each step as what it allocates and what it frees, after the input's allocation.
        let input = (Some(Buffer::Activation(0)), None);
        let actions = self.steps().iter().map(|step| match *step {
            Step::Free(buffer) => (None, Some(buffer)),
            step => (step.allocates(), None),
        });
        let mut outcome = Ok(());
        for (allocates, frees) in std::iter::once(input).chain(actions) {
            if let Some(buffer) = allocates {
                let label = format!("{buffer:?}");
                match arena.allocate(self.bytes_of_step_buffer(buffer), 0, Some(&label), source) {
                    Ok(allocation) => live.insert(buffer, allocation.id),
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
                if let Some(id) = live.remove(&buffer) {
                    arena.free(id, None, source)?;
                }
            }
        }
        for (_, id) in live.drain() {
            arena.free(id, None, source)?;
        }
        outcome.map(|()| report)
    }
}
