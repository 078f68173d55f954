//! The event timeline: allocations, frees, region changes, transfers and kernel dispatches with
//! timestamps, in a bounded ring that keeps the newest events.
//!
//! Off by default (`GPU_ARENA_TIMELINE` unset or 0): the context then installs no arena sink
//! and every hook is one branch on an `Option`. On, an arena event costs a few atomic word
//! stores in a lock-free ring and a clock read every [`CLOCK_STRIDE`] events (the context
//! reads the clock once per arena call so stamps stay exact); no heap allocation per event
//! (labels are interned once, and so is each array's allocation site, element type and shape:
//! a "description" the event refers to by index).

use super::array_info::ArrayInfo;
use super::event_ring::WordRing;
use super::kernel_times::{KernelTime, KernelTimes};
use crate::arena::{AllocationId, ArenaEvent, EventSink, RegionId};
use crate::config::TransferDirection;
use crate::error::{Error, Result};
use crate::lock::{rank, Mutex, MutexGuard};
use crate::shape::MAX_RANK;
use crate::submission::SubmissionId;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

pub use crate::config::{DEFAULT_TIMELINE_CAPACITY, MAX_TIMELINE_CAPACITY};

/// Distinct labels the timeline interns; later new labels are recorded as
/// [`LABEL_TABLE_FULL`]. Bounds the host memory a program that makes up a label per array
/// (`"tmp-1234"`) can make the timeline hold.
pub const MAX_TIMELINE_LABELS: usize = 1 << 16;

/// The label recorded once [`MAX_TIMELINE_LABELS`] distinct labels have been seen.
pub const LABEL_TABLE_FULL: &str = "(label table full)";

/// Distinct (allocation site, element type, shape) descriptions the timeline interns; arrays
/// with a new description after that carry no site, type or shape on the timeline (snapshots
/// still have them). The bound is the room an event has for the index (15 bits, see
/// `DESC_SHIFT`), one less for "none".
pub const MAX_TIMELINE_SITES: usize = (1 << 15) - 1;

/// One recorded event: when, what, and the arena's counters just after it (for an event that
/// is not an allocation, a free or a region event, the counters at its time: after the arena's
/// latest event before it, as replaying the allocations and frees in time order gives).
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
        /// Its label when it was made (explicit or from a [`label_scope`](crate::profile::label_scope)).
        label: Option<String>,
        /// The user's call that made the array (`src/main.rs:12:5`); `None` for allocations
        /// of a bare arena and past [`MAX_TIMELINE_SITES`] distinct descriptions. This and the
        /// other optional fields read as `None` from JSON written before they existed (serde
        /// reads a missing `Option` as `None`).
        site: Option<String>,
        /// The array's element type (`f32`), same conditions as `site`.
        dtype: Option<String>,
        /// The array's shape, same conditions as `site`.
        shape: Option<Vec<usize>>,
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
        /// The freed array's latest label, from its allocation (and any later
        /// [`Label`](TimelineEventKind::Label)) when the timeline still holds that event: so a
        /// trace can draw each array's life as one slice. `None` otherwise, and in JSON
        /// written before frees carried it; so are the three fields below.
        label: Option<String>,
        /// The user's call that made the freed array, from its allocation event.
        site: Option<String>,
        /// The freed array's element type, from its allocation event.
        dtype: Option<String>,
        /// The freed array's shape, from its allocation event.
        shape: Option<Vec<usize>>,
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
        /// The operation (`"raw_submit"` for [`Context::raw_submit`](crate::Context::raw_submit), a kernel's name for launches).
        name: String,
        /// Its queue position.
        submission: u64,
    },
    /// A dispatch ran on the GPU: `time_ns` is its GPU begin, mapped onto the timeline's clock
    /// (see [`Context::kernel_times`](crate::Context::kernel_times) for how), and
    /// `duration_ns` the GPU time between its begin and end timestamps. Recorded only where the
    /// device has timestamp queries, once the work has completed and its timestamps are read
    /// (so it may come after later events; copies of the timeline are sorted by time).
    Kernel {
        /// The kernel's name, as in [`Dispatch`](TimelineEventKind::Dispatch).
        name: String,
        /// The submission it ran in.
        submission: u64,
        /// GPU nanoseconds from its begin to its end.
        duration_ns: u64,
    },
}

impl TimelineEventKind {
    /// True for the arena's own events (allocations, frees, regions): those that change the
    /// counters (any other event carries them, see [`TimelineEvent`]).
    pub(crate) fn changes_counters(&self) -> bool {
        matches!(
            self,
            TimelineEventKind::Alloc { .. }
                | TimelineEventKind::Free { .. }
                | TimelineEventKind::RegionReserve { .. }
                | TimelineEventKind::RegionRelease { .. }
        )
    }
}

impl TimelineEvent {
    /// The counters (bytes in use, reserved) just before this event when it is one of the
    /// arena's: its own less what it changed.
    fn counters_before(&self) -> Option<(u64, u64)> {
        let (in_use, reserved) = (self.bytes_in_use, self.bytes_reserved);
        match self.kind {
            TimelineEventKind::Alloc { size, .. } => Some((in_use.saturating_sub(size), reserved)),
            TimelineEventKind::Free { size, .. } => Some((in_use.saturating_add(size), reserved)),
            TimelineEventKind::RegionReserve { size, .. } => {
                Some((in_use, reserved.saturating_sub(size)))
            }
            TimelineEventKind::RegionRelease { size, .. } => {
                Some((in_use, reserved.saturating_add(size)))
            }
            _ => None,
        }
    }
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
        name: &'a str,
        submission: SubmissionId,
    },
    /// A label given to a live allocation.
    Label {
        allocation: AllocationId,
        label: &'a str,
    },
    /// A dispatch that ran on the GPU from `begin_ns` (on the timeline's clock) for
    /// `duration_ns`.
    Kernel {
        name: &'a str,
        submission: SubmissionId,
        /// When its dispatch was recorded (on the timeline's clock).
        recorded_ns: u64,
        begin_ns: u64,
        duration_ns: u64,
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

/// Words of one arena event in the lock-free ring: time, bytes in use, bytes reserved, a tag
/// word (kind, pending flag, rounding slack, label index) and four fields. Eight words are one
/// 64-byte cache line, so recording an event touches exactly one line of the ring.
const ARENA_WORDS: usize = 8;
/// Kinds of arena records (low byte of the tag word).
const TAG_ALLOC: u64 = 0;
const TAG_FREE: u64 = 1;
const TAG_RESERVE: u64 = 2;
const TAG_RELEASE: u64 = 3;
/// Tag bit of a pending free.
const PENDING_BIT: u64 = 1 << 8;
/// Where an allocation's rounding slack (size − requested) sits in the tag word, and its width.
const SLACK_SHIFT: u32 = 9;
const SLACK_MASK: u64 = (1 << 23) - 1;
/// Where the label index sits in the tag word, and its width: 17 bits hold every index up
/// to [`MAX_TIMELINE_LABELS`] (the "table full" label included) and "no label".
const LABEL_SHIFT: u32 = 32;
const LABEL_MASK: u64 = (1 << 17) - 1;
/// Where the description index (site, element type, shape) sits in the tag word: the top
/// 15 bits.
const DESC_SHIFT: u32 = 49;
const DESC_MASK: u64 = (1 << 15) - 1;

/// The arena's sink reads the clock itself on every this many events at most, and between
/// readings stamps events with the latest one. A clock read (`Instant::now`, a vDSO
/// `clock_gettime`) costs 20–40 ns, as much as an allocation, so reading it per event would
/// double the arena's cost in tight loops; the context keeps stamps exact by calling
/// [`Timeline::refresh_clock`] each time it takes the arena's lock, so the first event under
/// the lock reads the clock.
pub const CLOCK_STRIDE: u64 = 128;

/// An interned label index meaning "no label" (all ones in its 17 bits).
const NO_LABEL: u32 = LABEL_MASK as u32;
/// A description index meaning "none" (all ones in its 15 bits).
const NO_DESC: u32 = DESC_MASK as u32;

/// An event from the context (not the arena), kept under a lock: these are rare next to
/// allocations and cost microseconds themselves.
#[derive(Clone, Copy, Debug)]
struct ContextEvent {
    time_ns: u64,
    bytes_in_use: u64,
    bytes_reserved: u64,
    kind: ContextKind,
}

#[derive(Clone, Copy, Debug)]
enum ContextKind {
    Transfer {
        direction: TransferDirection,
        explicit: bool,
        arrays: u64,
        bytes: u64,
        duration_ns: u64,
    },
    Dispatch {
        /// Interned like labels (kernels of users have names made at run time).
        name: u32,
        submission: u64,
    },
    Label {
        allocation: AllocationId,
        label: u32,
    },
    Kernel {
        /// Interned like dispatches' names.
        name: u32,
        submission: u64,
        duration_ns: u64,
    },
}

#[derive(Default)]
struct ContextRing {
    events: VecDeque<ContextEvent>,
    dropped: u64,
}

/// A description by identity: the addresses of its site and type name (both `'static`, one
/// per call site and type) with the shape. Hashing addresses rather than the file name and type
/// name keeps interning, which runs on every allocation with the timeline on, to a few
/// multiplications; a site the compiler happens to place twice only gets two equal entries.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct DescriptionKey {
    site: usize,
    dtype: usize,
    rank: u8,
    dims: [usize; MAX_RANK],
}

impl DescriptionKey {
    fn of(d: &ArrayInfo) -> DescriptionKey {
        DescriptionKey {
            site: std::ptr::from_ref(d.site) as usize,
            dtype: d.dtype.as_ptr() as usize,
            rank: d.rank,
            dims: d.dims,
        }
    }
}

/// The multiply-rotate hash of rustc's `FxHasher`: the keys are addresses and small integers
/// made by this process, so no adversary chooses them and SipHash's defence is not needed.
#[derive(Default)]
struct AddressHasher(u64);

impl std::hash::Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // A word at a time (the shape's dimensions arrive here as one slice of bytes).
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            self.write_u64(u64::from_le_bytes(word.try_into().expect("8 bytes")));
        }
        for &b in words.remainder() {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, word: u64) {
        // The constant of rustc's FxHasher (a 64-bit odd number with well-spread bits).
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_usize(&mut self, word: usize) {
        self.write_u64(word as u64);
    }
}

/// Interned array descriptions (where an array was made, its element type and its shape; the
/// birth time is not part of the key), at most [`MAX_TIMELINE_SITES`], so an allocation event
/// carries an index.
#[derive(Default)]
struct Descriptions {
    list: Vec<ArrayInfo>,
    index: HashMap<DescriptionKey, u32, std::hash::BuildHasherDefault<AddressHasher>>,
}

impl Descriptions {
    fn intern(&mut self, description: ArrayInfo) -> u32 {
        let key = DescriptionKey::of(&description);
        if let Some(&index) = self.index.get(&key) {
            return index;
        }
        if self.list.len() >= MAX_TIMELINE_SITES {
            return NO_DESC;
        }
        let index = self.list.len() as u32;
        self.list.push(description);
        self.index.insert(key, index);
        index
    }
}

/// Interned labels, so events carry a `u32` instead of a string.
#[derive(Default)]
struct Labels {
    names: Vec<Arc<str>>,
    index: HashMap<Arc<str>, u32>,
}

impl Labels {
    fn intern(&mut self, label: &str) -> u32 {
        if let Some(&index) = self.index.get(label) {
            return index;
        }
        let label: Arc<str> = if self.names.len() < MAX_TIMELINE_LABELS {
            Arc::from(label)
        } else {
            Arc::from(LABEL_TABLE_FULL)
        };
        if let Some(&index) = self.index.get(&label) {
            return index;
        }
        let index = self.names.len() as u32;
        self.names.push(Arc::clone(&label));
        self.index.insert(label, index);
        index
    }
}

/// A bounded record of [`TimelineEvent`]s, fed by an arena's event sink and the context's
/// hooks, keeping the newest `capacity` events and counting the ones it dropped.
///
/// Arena events go to a lock-free ring with one writer (the arena calls its sink under `&mut`),
/// so recording one costs a few word stores; transfers, dispatches and labels, which are rare
/// and slow anyway, go to a second ring under a lock. A context makes a timeline when
/// `ArenaConfig::timeline_capacity` is above 0 (env `GPU_ARENA_TIMELINE`). It also works with a
/// bare [`Arena`](crate::arena::Arena):
///
/// ```
/// use gpu_arena::arena::{Arena, ArenaOptions, RegionId, RegionRefusal, RegionSource};
/// use gpu_arena::profile::Timeline;
/// # struct Heap;
/// # impl RegionSource for Heap {
/// #     fn create_region(&mut self, _: u64) -> Result<RegionId, RegionRefusal> { Ok(RegionId(0)) }
/// #     fn release_region(&mut self, _: RegionId) {}
/// # }
/// let timeline = std::sync::Arc::new(Timeline::new(1024)?);
/// let mut arena = Arena::new(ArenaOptions::preallocated(1 << 20));
/// arena.set_event_sink(timeline.event_sink());
/// timeline.refresh_clock(); // the next event reads the clock
/// let a = arena.allocate(1000, 0, Some("weights"), &mut Heap)?;
/// arena.free(a.id, None, &mut Heap)?;
/// // A region reserve, the allocation and the free.
/// assert_eq!(timeline.snapshot().events.len(), 3);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Timeline {
    origin: Instant,
    capacity: usize,
    arena: WordRing<ARENA_WORDS>,
    /// Arena records before this index were cleared.
    arena_cleared: AtomicU64,
    /// True while an arena sink exists: the lock-free ring takes one writer.
    sink_taken: AtomicBool,
    context: Mutex<ContextRing>,
    labels: Mutex<Labels>,
    descriptions: Mutex<Descriptions>,
    /// The description of the next allocation, set by the context under the arena's lock
    /// just before it allocates ([`Timeline::describe_next_alloc`]); taken by the sink.
    next_description: AtomicU32,
    /// The latest clock reading, in ns since `origin`; only grows.
    latest_ns: AtomicU64,
    /// The next arena event reads the clock ([`Timeline::refresh_clock`]).
    stale: AtomicBool,
    /// Kernel times by interned name, over every [`Record::Kernel`] since the last clear (the
    /// ring may have dropped their events).
    kernels: Mutex<HashMap<u32, KernelTime>>,
    /// When the timeline was last cleared (ns since `origin`): times of work submitted before
    /// it, read later, are dropped.
    cleared_ns: AtomicU64,
}

impl std::fmt::Debug for Timeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Timeline")
            .field("events", &self.len())
            .field("capacity", &self.capacity)
            .finish()
    }
}

/// Lets another sink be made once the arena drops this one.
struct SinkClaim(Arc<Timeline>);

impl Drop for SinkClaim {
    fn drop(&mut self) {
        self.0.sink_taken.store(false, Ordering::Release);
    }
}

/// Locks a mutex, carrying on after a panic elsewhere: the data are plain events.
#[cfg_attr(debug_assertions, track_caller)]
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl Timeline {
    /// A timeline keeping the newest `capacity` events; time 0 is now. The arena ring's memory
    /// (`capacity + 1` rounded up to a power of two, 64 bytes each) is allocated here, once.
    /// A capacity of 0 is a timeline that keeps no event (a context's `timeline_capacity` of 0
    /// makes none at all).
    ///
    /// Errors: [`Error::InvalidArgument`] for a capacity above [`MAX_TIMELINE_CAPACITY`], and
    /// [`Error::HostAllocation`] when the host cannot give the ring's memory.
    pub fn new(capacity: usize) -> Result<Timeline> {
        if capacity > MAX_TIMELINE_CAPACITY {
            return Err(Error::InvalidArgument {
                operation: "Timeline::new",
                reason: format!(
                    "a capacity of {capacity} events is above the largest, {MAX_TIMELINE_CAPACITY}"
                ),
            });
        }
        let arena = WordRing::new(capacity).map_err(|_| Error::HostAllocation {
            purpose: format!("a memory timeline of {capacity} events"),
            bytes: WordRing::<ARENA_WORDS>::bytes_for(capacity),
        })?;
        Ok(Timeline {
            origin: Instant::now(),
            capacity,
            arena,
            arena_cleared: AtomicU64::new(0),
            cleared_ns: AtomicU64::new(0),
            sink_taken: AtomicBool::new(false),
            context: Mutex::new(rank::TIMELINE_CONTEXT, ContextRing::default()),
            labels: Mutex::new(rank::TIMELINE_LABELS, Labels::default()),
            descriptions: Mutex::new(rank::TIMELINE_DESCRIPTIONS, Descriptions::default()),
            next_description: AtomicU32::new(NO_DESC),
            latest_ns: AtomicU64::new(0),
            stale: AtomicBool::new(true),
            kernels: Mutex::new(rank::TIMELINE_KERNELS, HashMap::new()),
        })
    }

    /// The number of events kept.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Nanoseconds since the timeline started.
    pub fn now_ns(&self) -> u64 {
        self.ns_since_origin(Instant::now())
    }

    fn ns_since_origin(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.origin).as_nanos() as u64
    }

    /// The latest clock reading (by an arena event, a context event or [`Timeline::tick`]), in
    /// ns since the timeline started; costs a load, not a clock read.
    pub fn last_reading_ns(&self) -> u64 {
        self.latest_ns.load(Ordering::Relaxed)
    }

    /// Makes the next arena event read the clock (costs one store). The context calls it
    /// whenever it takes the arena's lock, so every arena call's events carry their own time.
    #[inline]
    pub fn refresh_clock(&self) {
        self.stale.store(true, Ordering::Relaxed);
    }

    /// Reads the clock now: arena events recorded from now on carry this time until the next
    /// reading (see [`CLOCK_STRIDE`]). Returns the reading, in ns since the timeline started.
    pub fn tick(&self) -> u64 {
        let now = self.now_ns();
        self.latest_ns.fetch_max(now, Ordering::Relaxed).max(now)
    }

    /// Gives the next allocation event the site, element type and shape of `info`. The
    /// context calls it under the arena's lock, just before the arena allocates, so the
    /// description reaches the one event it belongs to.
    pub(crate) fn describe_next_alloc(&self, info: &ArrayInfo) {
        let index = lock(&self.descriptions).intern(*info);
        self.next_description.store(index, Ordering::Relaxed);
    }

    /// A sink for [`Arena::set_event_sink`](crate::arena::Arena::set_event_sink) that records
    /// the arena's events here; `None` while another sink of this timeline exists (its ring
    /// takes one writer, so a timeline serves one arena at a time).
    pub fn event_sink(self: &Arc<Self>) -> Option<EventSink> {
        if self.sink_taken.swap(true, Ordering::AcqRel) {
            return None;
        }
        let claim = SinkClaim(Arc::clone(self));
        Some(Box::new(move |event| claim.0.record_arena(event)))
    }

    /// Records one arena event: a clock read every [`CLOCK_STRIDE`] events or after
    /// [`Timeline::refresh_clock`], a few
    /// atomic stores, and for a labelled allocation a lookup in the label table.
    fn record_arena(&self, event: &ArenaEvent<'_>) {
        let written = self.arena.written();
        // Only this sink clears the flag, and a refresh racing with it is seen next time.
        let time_ns = if written.is_multiple_of(CLOCK_STRIDE) || self.stale.load(Ordering::Relaxed)
        {
            self.stale.store(false, Ordering::Relaxed);
            // Plain load and store rather than `fetch_max`: a locked instruction would cost
            // as much as the rest of the event. A racing context event may move the reading
            // back by nanoseconds, which the snapshot's sort absorbs.
            let now = self.now_ns().max(self.latest_ns.load(Ordering::Relaxed));
            self.latest_ns.store(now, Ordering::Relaxed);
            now
        } else {
            self.latest_ns.load(Ordering::Relaxed)
        };
        let (tag, fields, bytes_in_use, bytes_reserved) = match *event {
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
            } => {
                let label = label.map_or(NO_LABEL, |l| lock(&self.labels).intern(l));
                // A load and, when set, a store rather than a swap: the sink is the one writer
                // that clears it (under the arena's lock, as the context sets it), and a locked
                // instruction would cost as much as the rest of the event.
                let description = self.next_description.load(Ordering::Relaxed);
                if description != NO_DESC {
                    self.next_description.store(NO_DESC, Ordering::Relaxed);
                }
                let slack = (size - requested.min(size)).min(SLACK_MASK);
                (
                    TAG_ALLOC
                        | (slack << SLACK_SHIFT)
                        | ((u64::from(label) & LABEL_MASK) << LABEL_SHIFT)
                        | ((u64::from(description) & DESC_MASK) << DESC_SHIFT),
                    [region.0, id.0, offset, size],
                    bytes_in_use,
                    bytes_reserved,
                )
            }
            ArenaEvent::Free {
                id,
                region,
                offset,
                size,
                pending,
                bytes_in_use,
                bytes_reserved,
            } => (
                TAG_FREE | if pending { PENDING_BIT } else { 0 },
                [region.0, id.0, offset, size],
                bytes_in_use,
                bytes_reserved,
            ),
            ArenaEvent::RegionCreated {
                region,
                size,
                bytes_in_use,
                bytes_reserved,
            } => (
                TAG_RESERVE,
                [region.0, size, 0, 0],
                bytes_in_use,
                bytes_reserved,
            ),
            ArenaEvent::RegionReleased {
                region,
                size,
                bytes_in_use,
                bytes_reserved,
            } => (
                TAG_RELEASE,
                [region.0, size, 0, 0],
                bytes_in_use,
                bytes_reserved,
            ),
        };
        let [a, b, c, d] = fields;
        self.arena
            .push([time_ns, bytes_in_use, bytes_reserved, tag, a, b, c, d]);
    }

    /// Records a transfer, a dispatch or a label, with the counters of the latest arena event.
    pub(crate) fn record(&self, record: Record<'_>) {
        match record {
            Record::Kernel { recorded_ns, .. }
                if recorded_ns < self.cleared_ns.load(Ordering::Acquire) =>
            {
                return
            }
            // A transfer of no array (an empty batch or read) moved nothing: no event, as
            // `transfer_stats` counts none.
            Record::Transfer { arrays: 0, .. } => return,
            _ => {}
        }
        let now = Instant::now();
        self.latest_ns
            .fetch_max(self.ns_since_origin(now), Ordering::Relaxed);
        let (time_ns, kind) = match record {
            Record::Transfer {
                direction,
                explicit,
                arrays,
                bytes,
                started,
            } => (
                self.ns_since_origin(started),
                ContextKind::Transfer {
                    direction,
                    explicit,
                    arrays,
                    bytes,
                    duration_ns: now.saturating_duration_since(started).as_nanos() as u64,
                },
            ),
            Record::Dispatch { name, submission } => (
                self.ns_since_origin(now),
                ContextKind::Dispatch {
                    name: lock(&self.labels).intern(name),
                    submission: submission.0,
                },
            ),
            Record::Label { allocation, label } => (
                self.ns_since_origin(now),
                ContextKind::Label {
                    allocation,
                    label: lock(&self.labels).intern(label),
                },
            ),
            Record::Kernel {
                name,
                submission,
                begin_ns,
                duration_ns,
                ..
            } => {
                let name = lock(&self.labels).intern(name);
                lock(&self.kernels)
                    .entry(name)
                    .or_default()
                    .add(duration_ns);
                (
                    begin_ns,
                    ContextKind::Kernel {
                        name,
                        submission: submission.0,
                        duration_ns,
                    },
                )
            }
        };
        // The counters of the latest arena event (zero before the first).
        let [bytes_in_use, bytes_reserved] = self
            .arena
            .read_from(self.arena.written().saturating_sub(1))
            .records
            .last()
            .map_or([0, 0], |(_, r)| [r[1], r[2]]);
        let event = ContextEvent {
            time_ns,
            bytes_in_use,
            bytes_reserved,
            kind,
        };
        let mut ring = lock(&self.context);
        if self.capacity == 0 {
            ring.dropped += 1;
            return;
        }
        if ring.events.len() == self.capacity {
            ring.events.pop_front();
            ring.dropped += 1;
        }
        ring.events.push_back(event);
    }

    /// Number of events held now (at most the capacity).
    pub fn len(&self) -> usize {
        // `cleared` first: it only ever takes values `written` had, so `written` read after it
        // is at least as large (a `clear` racing this call cannot make the difference wrap).
        let cleared = self.arena_cleared.load(Ordering::Acquire);
        let arena =
            (self.arena.written().saturating_sub(cleared)).min(self.capacity as u64) as usize;
        (arena + lock(&self.context).events.len()).min(self.capacity)
    }

    /// True when no event is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets every event (and the count of dropped ones); time keeps running from the same
    /// origin. Kernel times of dispatches whose events it forgot, read after it, are not
    /// recorded: a single op's launch is on the timeline once called (gathered, before its
    /// submission), a sequence's and a captured run's dispatches at their submit.
    pub fn clear(&self) {
        // Kernel times are read once their work completes: those of work recorded before now
        // are not since the clear.
        self.cleared_ns.store(self.now_ns(), Ordering::Release);
        self.arena_cleared
            .store(self.arena.written(), Ordering::Release);
        let mut ring = lock(&self.context);
        ring.events.clear();
        ring.dropped = 0;
        drop(ring);
        lock(&self.kernels).clear();
    }

    /// The per-kernel table of every kernel time recorded since the timeline started or was
    /// last cleared (events the ring dropped included).
    pub fn kernel_times(&self) -> KernelTimes {
        let rows: Vec<(u32, KernelTime)> = lock(&self.kernels)
            .iter()
            .map(|(&name, row)| (name, row.clone()))
            .collect();
        let names = lock(&self.labels);
        KernelTimes::from_rows(rows.into_iter().map(|(name, row)| {
            KernelTime {
                name: names
                    .names
                    .get(name as usize)
                    .map(|n| n.to_string())
                    .unwrap_or_default(),
                ..row
            }
        }))
    }

    /// A copy of the newest `capacity` events, oldest first. Transfers are recorded when they
    /// end but stamped with their start, so the copy is sorted by time (stably: events with
    /// the same stamp keep their order).
    pub fn snapshot(&self) -> MemoryTimeline {
        let cleared = self.arena_cleared.load(Ordering::Acquire);
        // One read of the ring: its `end` and its records agree however far the writer gets
        // meanwhile (reading the count separately let a racing writer make `dropped` wrap).
        let read = self.arena.read_from(cleared);
        let arena = read.records;
        let (context, context_dropped) = {
            let ring = lock(&self.context);
            (
                ring.events.iter().copied().collect::<Vec<_>>(),
                ring.dropped,
            )
        };
        // One lock at a time: each table is copied under its own lock, released before the next.
        let names = lock(&self.labels).names.clone();
        let descriptions = lock(&self.descriptions).list.clone();
        let interned = InternedCopy {
            names,
            descriptions,
        };

        // Records `cleared..end` the ring no longer holds; `read_from` returns only records of
        // that range, so this cannot go below zero (saturating all the same).
        let arena_dropped = read
            .end
            .saturating_sub(cleared)
            .saturating_sub(arena.len() as u64);
        let mut dropped = arena_dropped.saturating_add(context_dropped);
        let mut events: Vec<TimelineEvent> = Vec::with_capacity(arena.len() + context.len());
        events.extend(
            arena
                .into_iter()
                .map(|(_, record)| interned.arena_event(record)),
        );
        events.extend(context.into_iter().map(|e| interned.context_event(e)));
        events.sort_by_key(|e| e.time_ns);
        // The counters change at the arena's events; any other event was recorded with the
        // counters of its moment of recording (a transfer's, after its call, while it is dated
        // at its start): it takes those of its time, after the arena's latest event before it,
        // or those the first arena event started from.
        let first = events.iter().find_map(TimelineEvent::counters_before);
        let mut counters = first.unwrap_or_default();
        for e in &mut events {
            if e.kind.changes_counters() {
                counters = (e.bytes_in_use, e.bytes_reserved);
            } else if first.is_some() {
                (e.bytes_in_use, e.bytes_reserved) = counters;
            }
        }
        if events.len() > self.capacity {
            let excess = events.len() - self.capacity;
            events.drain(..excess);
            dropped = dropped.saturating_add(excess as u64);
        }
        name_frees(&mut events);
        MemoryTimeline {
            events,
            dropped,
            capacity: self.capacity,
        }
    }
}

/// The timeline's interned tables, copied out of their locks for [`Timeline::snapshot`]: what
/// turns the indices the rings hold back into names, sites, types and shapes, so the records
/// decode into events without a lock held.
struct InternedCopy {
    /// Labels and kernel names, by index.
    names: Vec<Arc<str>>,
    /// Array descriptions, by index.
    descriptions: Vec<ArrayInfo>,
}

impl InternedCopy {
    /// The label or name at `index`; `None` for an index the table does not hold (as
    /// `NO_LABEL`, which an event without a label carries).
    fn label(&self, index: u32) -> Option<String> {
        self.names.get(index as usize).map(|l| l.to_string())
    }

    /// The site, element type and shape of description `index`, each `None` for an index the
    /// table does not hold.
    fn describe(&self, index: u64) -> (Option<String>, Option<String>, Option<Vec<usize>>) {
        match self.descriptions.get(index as usize) {
            Some(d) => (
                Some(d.site.to_string()),
                Some(d.dtype.to_string()),
                Some(d.shape().to_vec()),
            ),
            None => (None, None, None),
        }
    }

    /// The event of one arena record: time, bytes in use, bytes reserved, the tag word and
    /// four fields whose meaning the tag's kind gives.
    fn arena_event(&self, record: [u64; ARENA_WORDS]) -> TimelineEvent {
        let [time_ns, bytes_in_use, bytes_reserved, tag, a, b, c, d] = record;
        let kind = match tag & 0xff {
            TAG_ALLOC => {
                let (site, dtype, shape) = self.describe((tag >> DESC_SHIFT) & DESC_MASK);
                TimelineEventKind::Alloc {
                    allocation: AllocationId(b),
                    region: RegionId(a),
                    offset: c,
                    size: d,
                    requested: d - ((tag >> SLACK_SHIFT) & SLACK_MASK),
                    label: self.label(((tag >> LABEL_SHIFT) & LABEL_MASK) as u32),
                    site,
                    dtype,
                    shape,
                }
            }
            TAG_FREE => TimelineEventKind::Free {
                allocation: AllocationId(b),
                region: RegionId(a),
                offset: c,
                size: d,
                pending: tag & PENDING_BIT != 0,
                label: None,
                site: None,
                dtype: None,
                shape: None,
            },
            TAG_RESERVE => TimelineEventKind::RegionReserve {
                region: RegionId(a),
                size: b,
            },
            _ => TimelineEventKind::RegionRelease {
                region: RegionId(a),
                size: b,
            },
        };
        TimelineEvent {
            time_ns,
            bytes_in_use,
            bytes_reserved,
            kind,
        }
    }

    /// The event of one context event, its interned names given back as text.
    fn context_event(&self, e: ContextEvent) -> TimelineEvent {
        let kind = match e.kind {
            ContextKind::Transfer {
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
            ContextKind::Dispatch { name, submission } => TimelineEventKind::Dispatch {
                name: self.label(name).unwrap_or_default(),
                submission,
            },
            ContextKind::Label {
                allocation,
                label: index,
            } => TimelineEventKind::Label {
                allocation,
                label: self.label(index).unwrap_or_default(),
            },
            ContextKind::Kernel {
                name,
                submission,
                duration_ns,
            } => TimelineEventKind::Kernel {
                name: self.label(name).unwrap_or_default(),
                submission,
                duration_ns,
            },
        };
        TimelineEvent {
            time_ns: e.time_ns,
            bytes_in_use: e.bytes_in_use,
            bytes_reserved: e.bytes_reserved,
            kind,
        }
    }
}

/// Gives each free the label, site, element type and shape of its allocation (the latest
/// label, when the array was named after it was made), where the events hold the allocation.
fn name_frees(events: &mut [TimelineEvent]) {
    type Known = (
        Option<String>,
        Option<String>,
        Option<String>,
        Option<Vec<usize>>,
    );
    let mut live: HashMap<AllocationId, Known> = HashMap::new();
    for event in events {
        let freed = matches!(event.kind, TimelineEventKind::Free { .. });
        match &mut event.kind {
            TimelineEventKind::Label { allocation, label } => {
                if let Some(known) = live.get_mut(allocation) {
                    known.0 = Some(label.clone());
                }
            }
            TimelineEventKind::Alloc {
                allocation,
                label,
                site,
                dtype,
                shape,
                ..
            }
            | TimelineEventKind::Free {
                allocation,
                label,
                site,
                dtype,
                shape,
                ..
            } => {
                if !freed {
                    let known = (label.clone(), site.clone(), dtype.clone(), shape.clone());
                    live.insert(*allocation, known);
                } else if let Some(known) = live.remove(allocation) {
                    (*label, *site, *dtype, *shape) = known;
                }
            }
            _ => {}
        }
    }
}

/// The context's timeline: `None` when `config.timeline_capacity` is 0 (nothing is installed
/// and the hooks cost a branch), else a new ring wired to `arena` as its event sink.
///
/// Errors: as [`Timeline::new`] (the configuration's bound is the same).
pub(crate) fn attach(
    config: &crate::config::ArenaConfig,
    arena: &mut crate::arena::Arena,
) -> Result<Option<Arc<Timeline>>> {
    if config.timeline_capacity == 0 {
        return Ok(None);
    }
    let timeline = Arc::new(Timeline::new(config.timeline_capacity)?);
    arena.set_event_sink(timeline.event_sink());
    Ok(Some(timeline))
}

impl MemoryTimeline {
    /// The per-kernel table of the [`Kernel`](TimelineEventKind::Kernel) events this copy of
    /// the timeline holds (older ones the ring dropped are not in it;
    /// [`Context::kernel_times`](crate::Context::kernel_times) counts every one).
    pub fn kernel_times(&self) -> KernelTimes {
        KernelTimes::from_durations(self.events.iter().filter_map(|e| match &e.kind {
            TimelineEventKind::Kernel {
                name, duration_ns, ..
            } => Some((name.as_str(), *duration_ns)),
            _ => None,
        }))
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

    /// Records an upload of 100 bytes that started at `started`.
    fn upload(timeline: &Timeline, started: Instant) {
        timeline.record(Record::Transfer {
            direction: TransferDirection::HostToDevice,
            explicit: true,
            arrays: 1,
            bytes: 100,
            started,
        });
    }

    #[test]
    fn a_full_ring_keeps_the_newest_events_and_counts_the_rest() {
        let timeline = Timeline::new(3).unwrap();
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
        let timeline = Timeline::new(8).unwrap();
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
        assert_eq!(lock(&timeline.labels).names.len(), 1);
    }

    #[test]
    fn transfers_carry_their_start_time_and_the_counters_then() {
        let timeline = Timeline::new(8).unwrap();
        let started = Instant::now();
        timeline.record_arena(&alloc(2, None));
        upload(&timeline, started);
        let events = timeline.snapshot().events;
        assert!(matches!(
            events[0].kind,
            TimelineEventKind::Transfer { bytes: 100, .. }
        ));
        // Dated before the allocation (256 bytes, 512 in use after it): what it started from.
        assert_eq!(events[0].bytes_in_use, 256);
        assert!(events[0].time_ns <= events[1].time_ns);
    }

    #[test]
    fn a_transfer_dated_before_an_allocation_of_its_call_carries_the_counters_of_its_start() {
        let timeline = Timeline::new(8).unwrap();
        timeline.record_arena(&alloc(1, None));
        let started = Instant::now();
        std::thread::sleep(std::time::Duration::from_millis(1));
        // As the context does before each arena call: the next event reads the clock.
        timeline.refresh_clock();
        timeline.record_arena(&alloc(2, None));
        upload(&timeline, started);
        let counters: Vec<u64> = timeline
            .snapshot()
            .events
            .iter()
            .map(|e| e.bytes_in_use)
            .collect();
        assert_eq!(counters, [256, 256, 512], "alloc, transfer, alloc");
    }

    #[test]
    fn a_zero_capacity_ring_holds_nothing() {
        let timeline = Timeline::new(0).unwrap();
        timeline.record_arena(&alloc(1, None));
        assert!(timeline.is_empty());
        assert_eq!(timeline.snapshot().dropped, 1);
    }

    #[test]
    fn allocs_and_frees_written_without_their_optional_fields_read_them_as_none() {
        let described = |kind: &str| {
            let optional = (
                Some("weights".to_string()),
                Some("src/main.rs:3:5".to_string()),
                Some("f32".to_string()),
                Some(vec![2, 3]),
            );
            let (label, site, dtype, shape) = optional;
            let (allocation, region, offset, size) = (AllocationId(7), RegionId(2), 512, 256);
            match kind {
                "alloc" => TimelineEventKind::Alloc {
                    allocation,
                    region,
                    offset,
                    size,
                    requested: 24,
                    label,
                    site,
                    dtype,
                    shape,
                },
                _ => TimelineEventKind::Free {
                    allocation,
                    region,
                    offset,
                    size,
                    pending: true,
                    label,
                    site,
                    dtype,
                    shape,
                },
            }
        };
        for kind in ["alloc", "free"] {
            let full = described(kind);
            let mut json = serde_json::to_value(&full).unwrap();
            assert_eq!(json["type"], kind);
            assert_eq!(
                serde_json::from_value::<TimelineEventKind>(json.clone()).unwrap(),
                full
            );
            for key in ["label", "site", "dtype", "shape"] {
                json.as_object_mut().unwrap().remove(key);
            }
            let old = serde_json::from_value::<TimelineEventKind>(json).unwrap();
            let bare = match (old, full) {
                (
                    TimelineEventKind::Alloc {
                        label,
                        site,
                        dtype,
                        shape,
                        ..
                    },
                    TimelineEventKind::Alloc { .. },
                )
                | (
                    TimelineEventKind::Free {
                        label,
                        site,
                        dtype,
                        shape,
                        ..
                    },
                    TimelineEventKind::Free { .. },
                ) => (label, site, dtype, shape),
                (old, _) => panic!("{kind} read back as {old:?}"),
            };
            assert_eq!(bare, (None, None, None, None), "{kind}");
        }
    }
}
