//! Events the arena reports to an optional sink, so a profiler can draw a timeline.

use std::fmt;

use super::allocation::AllocationId;
use super::region::RegionId;

/// Something that changed in the arena. Every variant carries `bytes_in_use` and
/// `bytes_reserved` as they are after the event, so a profiler can draw counters without
/// calling back into the arena.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArenaEvent<'a> {
    /// An allocation was made.
    Alloc {
        /// The new allocation.
        id: AllocationId,
        /// Its region.
        region: RegionId,
        /// Its offset in the region.
        offset: u64,
        /// Rounded size.
        size: u64,
        /// Size asked for.
        requested: u64,
        /// Its label, if any.
        label: Option<&'a str>,
        /// Its sequence number (`num_allocs` after it).
        sequence: u64,
        /// Bytes in use after the event.
        bytes_in_use: u64,
        /// Bytes held in regions after the event.
        bytes_reserved: u64,
    },
    /// An allocation was freed. With `pending`, its chunk waits for the GPU before reuse.
    Free {
        /// The freed allocation.
        id: AllocationId,
        /// Its region.
        region: RegionId,
        /// Its offset in the region.
        offset: u64,
        /// Rounded size.
        size: u64,
        /// True when the chunk waits for a queue frontier before it can be reused.
        pending: bool,
        /// Bytes in use after the event.
        bytes_in_use: u64,
        /// Bytes held in regions after the event.
        bytes_reserved: u64,
    },
    /// A region was obtained from the source.
    RegionCreated {
        /// The new region.
        region: RegionId,
        /// Its size.
        size: u64,
        /// Bytes in use after the event.
        bytes_in_use: u64,
        /// Bytes held in regions after the event.
        bytes_reserved: u64,
    },
    /// A region was given back to the source.
    RegionReleased {
        /// The region given back.
        region: RegionId,
        /// Its size.
        size: u64,
        /// Bytes in use after the event.
        bytes_in_use: u64,
        /// Bytes held in regions after the event.
        bytes_reserved: u64,
    },
}

/// A callback receiving [`ArenaEvent`]s. It runs inside the arena's call, so it should be quick
/// (append to a buffer); it must not call back into the arena.
pub type EventSink = Box<dyn Fn(&ArenaEvent<'_>) + Send + Sync>;

/// Holds the optional sink; `None` costs one branch per event.
#[derive(Default)]
pub(crate) struct Events {
    sink: Option<EventSink>,
}

impl Events {
    pub fn set(&mut self, sink: Option<EventSink>) {
        self.sink = sink;
    }

    /// Builds and sends an event only when a sink is installed.
    #[inline]
    pub fn emit<'a>(&self, event: impl FnOnce() -> ArenaEvent<'a>) {
        if let Some(sink) = &self.sink {
            sink(&event());
        }
    }
}

impl fmt::Debug for Events {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.sink.is_some() {
            "Some(sink)"
        } else {
            "None"
        })
    }
}
