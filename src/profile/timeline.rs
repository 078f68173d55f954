//! The event timeline: allocations, frees, region changes, transfers and kernel dispatches with
//! timestamps, in a bounded ring that keeps the newest events.
//!
//! Off by default (`GPU_ARENA_TIMELINE` unset or 0): the context then installs no arena sink
//! and every hook is one branch on an `Option`. On, each event costs a clock read, an
//! uncontended lock and a copy of a fixed-size record: no heap allocation per event (labels
//! are interned once).

use crate::arena::{AllocationId, ArenaEvent, EventSink, RegionId};
use crate::submission::SubmissionId;
use crate::transfer::TransferDirection;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Events kept when the timeline is turned on without a size (`GPU_ARENA_TIMELINE=on`): at
/// about 80 bytes each, 2^18 events take some 20 MiB of host memory, enough for minutes of a
/// training loop's allocations.
pub const DEFAULT_TIMELINE_CAPACITY: usize = 1 << 18;

/// Distinct labels the timeline interns; later new labels are recorded as
/// [`LABEL_TABLE_FULL`]. Bounds the host memory a program that makes up a label per array
/// (`"tmp-1234"`) can make the timeline hold.
pub const MAX_TIMELINE_LABELS: usize = 1 << 16;

/// The label recorded once [`MAX_TIMELINE_LABELS`] distinct labels have been seen.
pub const LABEL_TABLE_FULL: &str = "(label table full)";

/// One recorded event: when, what, and the arena's counters just after it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimelineEvent {
    /// Nanoseconds since the timeline started (the context opened).
    pub time_ns: u64,
    /// Bytes of live allocations after the event.
    pub bytes_in_use: u64,
    /// Bytes held in regions after the event.
    pub bytes_reserved: u64,
    /// What happened.
    pub kind: TimelineEventKind,
}

/// What happened.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TimelineEventKind {
    /// An allocation was made.
    Alloc {
        /// The allocation.
        allocation: AllocationId,
        /// Its region.
        region: RegionId,
        /// Its offset in the region.
        offset: u64,
        /// Bytes set aside (rounded to 256).
        size: u64,
        /// Bytes asked for.
        requested: u64,
        /// Its label when it was made (explicit or from a [`label_scope`](super::label_scope)).
        label: Option<String>,
    },
    /// An allocation was freed.
    Free {
        /// The allocation.
        allocation: AllocationId,
        /// Its region.
        region: RegionId,
        /// Its offset in the region.
        offset: u64,
        /// Bytes given back.
        size: u64,
        /// True when queued GPU work still uses the memory, so it is reusable only later.
        pending: bool,
    },
    /// A region was obtained from the device.
    RegionReserve {
        /// The region.
        region: RegionId,
        /// Its size.
        size: u64,
    },
    /// A region was given back to the device.
    RegionRelease {
        /// The region.
        region: RegionId,
        /// Its size.
        size: u64,
    },
    /// Data moved between host and device (or device and device); `time_ns` is its start.
    Transfer {
        /// Which way.
        direction: TransferDirection,
        /// Bytes moved.
        bytes: u64,
        /// Arrays moved.
        arrays: u64,
        /// `device_put`/`device_get`/batches (true) or host data used where a device array
        /// was expected, `to_vec`, comparisons (false).
        explicit: bool,
        /// Host-side duration: from the call to its return. An upload's GPU copy may still
        /// run afterwards; a readback includes waiting for the GPU.
        duration_ns: u64,
    },
    /// A live allocation was given a label after it was made
    /// ([`DeviceArray::with_label`](crate::DeviceArray::with_label)).
    Label {
        /// The allocation.
        allocation: AllocationId,
        /// Its new label.
        label: String,
    },
    /// GPU work was submitted.
    Dispatch {
        /// The operation (`"submit"` for [`Context::submit`](crate::Context::submit)).
        name: String,
        /// Its queue position.
        submission: u64,
    },
}

/// What the crate's hooks hand to [`Timeline::record`] besides arena events.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Record<'a> {
    /// A transfer that started at `started` and ends now.
    Transfer {
        direction: TransferDirection,
        explicit: bool,
        arrays: u64,
        bytes: u64,
        started: Instant,
    },
    /// A submission of GPU work.
    Dispatch {
        name: &'static str,
        submission: SubmissionId,
    },
    /// A label given to a live allocation.
    Label {
        allocation: AllocationId,
        label: &'a str,
    },
}

/// A recorded copy of the timeline: what [`Timeline::snapshot`] and
/// [`Context::memory_timeline`](crate::Context::memory_timeline) return; serialisable, and what
/// the Perfetto export and the HTML report read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryTimeline {
    /// Events in time order, oldest first.
    pub events: Vec<TimelineEvent>,
    /// Older events the ring overwrote because it was full.
    pub dropped: u64,
    /// The ring's capacity in events.
    pub capacity: usize,
}

/// The fixed-size form events take in the ring: no heap allocation per event.
#[derive(Clone, Copy, Debug)]
struct RawEvent {
    time_ns: u64,
    bytes_in_use: u64,
    bytes_reserved: u64,
    kind: RawKind,
}

/// `label` and `name` index the ring's tables; [`NO_LABEL`] means none.
#[derive(Clone, Copy, Debug)]
enum RawKind {
    Alloc {
        allocation: AllocationId,
        region: RegionId,
        offset: u64,
        size: u64,
        requested: u64,
        label: u32,
    },
    Free {
        allocation: AllocationId,
        region: RegionId,
        offset: u64,
        size: u64,
        pending: bool,
    },
    RegionReserve {
        region: RegionId,
        size: u64,
    },
    RegionRelease {
        region: RegionId,
        size: u64,
    },
    Transfer {
        direction: TransferDirection,
        explicit: bool,
        arrays: u64,
        bytes: u64,
        duration_ns: u64,
    },
    Dispatch {
        name: &'static str,
        submission: u64,
    },
    Label {
        allocation: AllocationId,
        label: u32,
    },
}

/// An interned label index meaning "no label".
const NO_LABEL: u32 = u32::MAX;

struct Ring {
    events: VecDeque<RawEvent>,
    capacity: usize,
    dropped: u64,
    labels: Vec<Arc<str>>,
    label_index: HashMap<Arc<str>, u32>,
    /// The counters of the latest arena event, for events the arena does not see.
    bytes_in_use: u64,
    bytes_reserved: u64,
}

impl Ring {
    fn push(&mut self, event: RawEvent) {
        if self.capacity == 0 {
            self.dropped += 1;
            return;
        }
        if self.events.len() == self.capacity {
            self.events.pop_front();
            self.dropped += 1;
        }
        self.events.push_back(event);
    }

    fn intern(&mut self, label: Option<&str>) -> u32 {
        let Some(label) = label else {
            return NO_LABEL;
        };
        if let Some(&index) = self.label_index.get(label) {
            return index;
        }
        let label: Arc<str> = if self.labels.len() < MAX_TIMELINE_LABELS {
            Arc::from(label)
        } else {
            Arc::from(LABEL_TABLE_FULL)
        };
        if let Some(&index) = self.label_index.get(&label) {
            return index;
        }
        let index = self.labels.len() as u32;
        self.labels.push(Arc::clone(&label));
        self.label_index.insert(label, index);
        index
    }
}

/// A bounded ring of [`TimelineEvent`]s, shared by the context's hooks and the arena's event
/// sink. When full it drops the oldest events and counts them.
///
/// A context makes one when `ArenaConfig::timeline_capacity` is above 0 (env
/// `GPU_ARENA_TIMELINE`). It also works with a bare [`Arena`](crate::arena::Arena):
///
/// ```
/// use gpu_arena::arena::{Arena, ArenaOptions, RegionId, RegionSource};
/// use gpu_arena::profile::Timeline;
/// # struct Heap;
/// # impl RegionSource for Heap {
/// #     fn create_region(&mut self, _: u64) -> Result<RegionId, String> { Ok(RegionId(0)) }
/// #     fn release_region(&mut self, _: RegionId) {}
/// # }
/// let timeline = std::sync::Arc::new(Timeline::new(1024));
/// let mut arena = Arena::new(ArenaOptions::preallocated(1 << 20));
/// arena.set_event_sink(Some(timeline.event_sink()));
/// let a = arena.allocate(1000, 0, Some("weights"), &mut Heap)?;
/// arena.free(a.id, None, &mut Heap)?;
/// // A region reserve, the allocation and the free.
/// assert_eq!(timeline.snapshot().events.len(), 3);
/// # Ok::<(), gpu_arena::arena::ArenaError>(())
/// ```
pub struct Timeline {
    origin: Instant,
    ring: Mutex<Ring>,
}

impl std::fmt::Debug for Timeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ring = self.lock();
        f.debug_struct("Timeline")
            .field("events", &ring.events.len())
            .field("capacity", &ring.capacity)
            .field("dropped", &ring.dropped)
            .finish()
    }
}

impl Timeline {
    /// A timeline keeping the newest `capacity` events; time 0 is now. The ring's memory is
    /// allocated here, once.
    pub fn new(capacity: usize) -> Timeline {
        Timeline {
            origin: Instant::now(),
            ring: Mutex::new(Ring {
                events: VecDeque::with_capacity(capacity),
                capacity,
                dropped: 0,
                labels: Vec::new(),
                label_index: HashMap::new(),
                bytes_in_use: 0,
                bytes_reserved: 0,
            }),
        }
    }

    /// Nanoseconds since the timeline started.
    pub fn now_ns(&self) -> u64 {
        self.ns_since_origin(Instant::now())
    }

    fn ns_since_origin(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.origin).as_nanos() as u64
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Ring> {
        // Events are plain data: a panic elsewhere cannot leave the ring inconsistent.
        self.ring.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A sink for [`Arena::set_event_sink`](crate::arena::Arena::set_event_sink) that records
    /// every arena event here.
    pub fn event_sink(self: &Arc<Self>) -> EventSink {
        let timeline = Arc::clone(self);
        Box::new(move |event| timeline.record_arena(event))
    }

    /// Records one arena event.
    pub fn record_arena(&self, event: &ArenaEvent<'_>) {
        let time_ns = self.now_ns();
        let mut ring = self.lock();
        let (kind, bytes_in_use, bytes_reserved) = match *event {
            ArenaEvent::Alloc {
                id,
                region,
                offset,
                size,
                requested,
                label,
                bytes_in_use,
                bytes_reserved,
                ..
            } => (
                RawKind::Alloc {
                    allocation: id,
                    region,
                    offset,
                    size,
                    requested,
                    label: ring.intern(label),
                },
                bytes_in_use,
                bytes_reserved,
            ),
            ArenaEvent::Free {
                id,
                region,
                offset,
                size,
                pending,
                bytes_in_use,
                bytes_reserved,
            } => (
                RawKind::Free {
                    allocation: id,
                    region,
                    offset,
                    size,
                    pending,
                },
                bytes_in_use,
                bytes_reserved,
            ),
            ArenaEvent::RegionCreated {
                region,
                size,
                bytes_in_use,
                bytes_reserved,
            } => (
                RawKind::RegionReserve { region, size },
                bytes_in_use,
                bytes_reserved,
            ),
            ArenaEvent::RegionReleased {
                region,
                size,
                bytes_in_use,
                bytes_reserved,
            } => (
                RawKind::RegionRelease { region, size },
                bytes_in_use,
                bytes_reserved,
            ),
        };
        ring.bytes_in_use = bytes_in_use;
        ring.bytes_reserved = bytes_reserved;
        ring.push(RawEvent {
            time_ns,
            bytes_in_use,
            bytes_reserved,
            kind,
        });
    }

    /// Records a transfer, a dispatch or a label, with the counters of the latest arena event.
    pub(crate) fn record(&self, record: Record<'_>) {
        let now = Instant::now();
        let mut ring = self.lock();
        let (time_ns, kind) = match record {
            Record::Transfer {
                direction,
                explicit,
                arrays,
                bytes,
                started,
            } => (
                self.ns_since_origin(started),
                RawKind::Transfer {
                    direction,
                    explicit,
                    arrays,
                    bytes,
                    duration_ns: now.saturating_duration_since(started).as_nanos() as u64,
                },
            ),
            Record::Dispatch { name, submission } => (
                self.ns_since_origin(now),
                RawKind::Dispatch {
                    name,
                    submission: submission.0,
                },
            ),
            Record::Label { allocation, label } => (
                self.ns_since_origin(now),
                RawKind::Label {
                    allocation,
                    label: ring.intern(Some(label)),
                },
            ),
        };
        let (bytes_in_use, bytes_reserved) = (ring.bytes_in_use, ring.bytes_reserved);
        ring.push(RawEvent {
            time_ns,
            bytes_in_use,
            bytes_reserved,
            kind,
        });
    }

    /// Number of events held now.
    pub fn len(&self) -> usize {
        self.lock().events.len()
    }

    /// True when no event is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets every event (and the count of dropped ones); time keeps running from the same
    /// origin.
    pub fn clear(&self) {
        let mut ring = self.lock();
        ring.events.clear();
        ring.dropped = 0;
    }

    /// A copy of the events held now, oldest first. Transfers are recorded when they end but
    /// stamped with their start, so the copy is sorted by time (stable: ties keep their order).
    pub fn snapshot(&self) -> MemoryTimeline {
        let (raw, labels, dropped, capacity) = {
            let ring = self.lock();
            (
                ring.events.iter().copied().collect::<Vec<_>>(),
                ring.labels.clone(),
                ring.dropped,
                ring.capacity,
            )
        };
        let label = |index: u32| labels.get(index as usize).map(|l| l.to_string());
        let mut events: Vec<TimelineEvent> = raw
            .into_iter()
            .map(|e| TimelineEvent {
                time_ns: e.time_ns,
                bytes_in_use: e.bytes_in_use,
                bytes_reserved: e.bytes_reserved,
                kind: match e.kind {
                    RawKind::Alloc {
                        allocation,
                        region,
                        offset,
                        size,
                        requested,
                        label: index,
                    } => TimelineEventKind::Alloc {
                        allocation,
                        region,
                        offset,
                        size,
                        requested,
                        label: label(index),
                    },
                    RawKind::Free {
                        allocation,
                        region,
                        offset,
                        size,
                        pending,
                    } => TimelineEventKind::Free {
                        allocation,
                        region,
                        offset,
                        size,
                        pending,
                    },
                    RawKind::RegionReserve { region, size } => {
                        TimelineEventKind::RegionReserve { region, size }
                    }
                    RawKind::RegionRelease { region, size } => {
                        TimelineEventKind::RegionRelease { region, size }
                    }
                    RawKind::Transfer {
                        direction,
                        explicit,
                        arrays,
                        bytes,
                        duration_ns,
                    } => TimelineEventKind::Transfer {
                        direction,
                        bytes,
                        arrays,
                        explicit,
                        duration_ns,
                    },
                    RawKind::Dispatch { name, submission } => TimelineEventKind::Dispatch {
                        name: name.to_string(),
                        submission,
                    },
                    RawKind::Label {
                        allocation,
                        label: index,
                    } => TimelineEventKind::Label {
                        allocation,
                        label: label(index).unwrap_or_default(),
                    },
                },
            })
            .collect();
        events.sort_by_key(|e| e.time_ns);
        MemoryTimeline {
            events,
            dropped,
            capacity,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(id: u64, label: Option<&str>) -> ArenaEvent<'_> {
        ArenaEvent::Alloc {
            id: AllocationId(id),
            region: RegionId(1),
            offset: 0,
            size: 256,
            requested: 100,
            label,
            sequence: id,
            bytes_in_use: 256 * id,
            bytes_reserved: 1 << 20,
        }
    }

    #[test]
    fn a_full_ring_keeps_the_newest_events_and_counts_the_rest() {
        let timeline = Timeline::new(3);
        for id in 1..=5 {
            timeline.record_arena(&alloc(id, None));
        }
        let copy = timeline.snapshot();
        assert_eq!(copy.dropped, 2);
        let ids: Vec<u64> = copy
            .events
            .iter()
            .map(|e| match e.kind {
                TimelineEventKind::Alloc { allocation, .. } => allocation.0,
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(ids, [3, 4, 5]);
    }

    #[test]
    fn labels_are_interned_and_given_back_as_text() {
        let timeline = Timeline::new(8);
        timeline.record_arena(&alloc(1, Some("kv")));
        timeline.record_arena(&alloc(2, Some("kv")));
        timeline.record_arena(&alloc(3, None));
        let labels: Vec<Option<String>> = timeline
            .snapshot()
            .events
            .into_iter()
            .map(|e| match e.kind {
                TimelineEventKind::Alloc { label, .. } => label,
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(labels, [Some("kv".into()), Some("kv".into()), None]);
        assert_eq!(timeline.lock().labels.len(), 1);
    }

    #[test]
    fn transfers_carry_the_latest_counters_and_their_start_time() {
        let timeline = Timeline::new(8);
        let started = Instant::now();
        timeline.record_arena(&alloc(2, None));
        timeline.record(Record::Transfer {
            direction: TransferDirection::HostToDevice,
            explicit: true,
            arrays: 1,
            bytes: 100,
            started,
        });
        let events = timeline.snapshot().events;
        assert!(matches!(
            events[0].kind,
            TimelineEventKind::Transfer { bytes: 100, .. }
        ));
        assert_eq!(events[0].bytes_in_use, 512);
        assert!(events[0].time_ns <= events[1].time_ns);
    }

    #[test]
    fn a_zero_capacity_ring_holds_nothing() {
        let timeline = Timeline::new(0);
        timeline.record_arena(&alloc(1, None));
        assert!(timeline.is_empty());
        assert_eq!(timeline.snapshot().dropped, 1);
    }
}

/// The context's timeline: `None` when `config.timeline_capacity` is 0 (nothing is installed
/// and the hooks cost a branch), else a new ring wired to `arena` as its event sink.
pub(crate) fn attach(
    config: &crate::config::ArenaConfig,
    arena: &mut crate::arena::Arena,
) -> Option<Arc<Timeline>> {
    if config.timeline_capacity == 0 {
        return None;
    }
    let timeline = Arc::new(Timeline::new(config.timeline_capacity));
    arena.set_event_sink(Some(timeline.event_sink()));
    Some(timeline)
}

impl crate::context::Context {
    /// The events recorded so far (allocations, frees, region changes, transfers, dispatches),
    /// or `None` when the timeline is off (`ArenaConfig::timeline_capacity` 0, the default;
    /// env `GPU_ARENA_TIMELINE`).
    pub fn memory_timeline(&self) -> Option<MemoryTimeline> {
        self.inner.timeline.as_ref().map(|t| t.snapshot())
    }

    /// The live timeline, to clear it or read its length; `None` when off.
    pub fn timeline(&self) -> Option<&Timeline> {
        self.inner.timeline.as_deref()
    }
}
