//! Profiling: see the memory rather than read numbers.
//!
//! - [`Context::memory_stats_with_transfers`](crate::Context::memory_stats_with_transfers):
//!   XLA's statistics plus pending frees and transfers ([`ContextMemoryStats`]);
//! - [`Context::memory_snapshot`](crate::Context::memory_snapshot): every region and chunk with
//!   label, element type, shape and age, the stats, the memory plan and each heap's budget
//!   ([`MemorySnapshot`], serde JSON);
//! - [`label_scope`]: name every array allocated while a guard lives;
//! - the [`Timeline`] (`GPU_ARENA_TIMELINE=on`): allocations, frees and region changes of device
//!   memory, transfers (moves to and from pinned host memory included) and dispatches with
//!   timestamps in a bounded ring, exported as a Chrome trace / Perfetto JSON by
//!   [`MemoryTimeline::to_chrome_trace`] (the pinned-host kind's arrays are in snapshots, the
//!   report and pprof, not on the timeline);
//! - allocation sites: every public call that makes an array records the user's line
//!   (`#[track_caller]`), shown in snapshots, the report, the timeline and the trace;
//!   [`MemorySnapshot::diff`] groups the arrays born between two snapshots by site and label
//!   (leak suspects), and [`MemorySnapshot::to_pprof`] writes the live arrays as a pprof
//!   profile, as JAX's device memory profile is;
//! - kernel times: with the timeline on, where the device has timestamp queries, each
//!   dispatch's GPU begin and end ([`TimelineEventKind::Kernel`], slices on the trace's `GPU`
//!   track) and a per-kernel table, [`KernelTimes`]
//!   ([`Context::kernel_times`](crate::Context::kernel_times), also in the report);
//! - [`report`]: a self-contained HTML page with an SVG map of every region, the memory curves,
//!   the largest allocations, fragmentation and the memory plan;
//! - `GPU_ARENA_DUMP_ON_OOM=<dir>`: on out-of-memory, the snapshot and the report are written
//!   there and named in the error ([`Context::write_memory_profile`](crate::Context::write_memory_profile)
//!   does the same on demand). The directory must be the user's alone (created 0700; one that
//!   others may write gets no dump), and dump files are created new with mode 0600: no file is
//!   ever written through a planted link.
//!
//! Files, one concept each: `stats`, `snapshot`, `timeline_calls` (the context's calls that
//! read the timeline and the kernel times), `diff` (snapshot diffs and growing sites),
//! `perfetto`, `pprof`, `report` (HTML and SVG) and `dump` (writing all of it to a directory,
//! on demand or on out-of-memory). What they read is recorded below the context, in
//! `crate::trace` (the timeline, array info, labels and the per-kernel table).
#![deny(unsafe_code)]

mod diff;
mod dump;
mod perfetto;
mod pprof;
pub mod report;
pub(crate) mod snapshot;
mod stats;
mod timeline_calls;

pub use crate::trace::kernel_times::{KernelTime, KernelTimes};
pub use crate::trace::labels::{current_label_scope, label_scope, LabelScope, SCOPE_SEPARATOR};
pub use crate::trace::timeline::{
    MemoryTimeline, Timeline, TimelineEvent, TimelineEventKind, CLOCK_STRIDE,
    DEFAULT_TIMELINE_CAPACITY, LABEL_TABLE_FULL, MAX_TIMELINE_CAPACITY, MAX_TIMELINE_LABELS,
    MAX_TIMELINE_SITES,
};
pub use diff::{SiteGrowth, SnapshotDiff};
pub use dump::{ProfileFiles, OOM_DUMP_STEM};
pub use pprof::UNKNOWN_SITE;
pub use snapshot::{
    MemorySnapshot, SnapshotChunk, SnapshotHeap, SnapshotRegion, SnapshotSettings, SNAPSHOT_FORMAT,
};
pub use stats::ContextMemoryStats;
