//! The arena: a best-fit-with-coalescing sub-allocator over byte ranges (pure CPU, no GPU types).
//!
//! It follows XLA's BFC allocator, the one behind JAX's `memory_stats()`: every allocation is
//! rounded to [`ALLOCATION_ALIGNMENT`] (256 bytes) and placed in the smallest free chunk that
//! fits, lowest address first; a free merges with both free neighbours. Regions (GPU buffers
//! or memory blocks) come from a [`RegionSource`] that the backend implements, either reserved
//! up front, grown on demand up to a limit, or both ([`ArenaOptions`]); platform mode skips
//! caching and gives each allocation its own region.
//!
//! Frees can wait for the GPU: a free that carries a queue frontier keeps its chunk out of
//! circulation until [`Arena::advance_frontier`] reports that position as done. Out of memory
//! is an [`ArenaError`] whose [`OutOfMemory`] report says why and what to change.
//!
//! Files, one concept each: `allocation` (ids and rounding), `region` (regions and
//! their source), `options`, `chunk` (the chunk slab), `btree` and `bins` (the free-chunk
//! index), `frontier` (pending frees), `arena` (the allocator itself), `stats`, `snapshot`,
//! `events`, `oom`, `bytes` (byte counts as people read them) and `error`; and `assignment`, the buffer assignment of a captured step's
//! temporaries (offsets in one block by liveness: the same kind of problem, solved ahead of
//! time).
#![deny(unsafe_code)]

mod allocation;
#[allow(clippy::module_inception)]
mod arena;
mod assignment;
mod bins;
mod btree;
mod bytes;
mod chunk;
mod error;
mod events;
mod frontier;
mod oom;
mod options;
mod region;
mod snapshot;
mod stats;

pub(crate) use allocation::rounded_size;
pub use allocation::{Allocation, AllocationId, ALLOCATION_ALIGNMENT};
pub use arena::Arena;
pub use assignment::{assign_buffers, BufferAssignment, SplitAssignment, Temporary};
pub use bytes::Bytes;
pub use error::ArenaError;
pub use events::{ArenaEvent, EventSink};
pub use oom::{OomCause, OutOfMemory};
pub use options::{
    ArenaMode, ArenaOptions, DEFAULT_INITIAL_GROWTH_REGION_BYTES, DEFAULT_LIMIT_BYTES,
    DEFAULT_MAX_REGION_BYTES, MAX_RESERVED_REGIONS,
};
pub use region::{RegionId, RegionRefusal, RegionSource, VirtualRegions};
pub use snapshot::{ArenaSnapshot, ChunkRecord, ChunkSnapshot, ChunkState, RegionSnapshot};
pub use stats::MemoryStats;
