//! The host link: how a context's host bytes reach its arrays and come back, and what it
//! counts of them. The context holds it (below the context, naming nothing above); transfers,
//! sequences, captured runs and collectives go through it.
//!
//! - [`HostLink`] (here): the way bytes travel, chosen once when the context opens from where
//!   its memory comes from, and asked by every upload, readback and staging path instead of
//!   each asking the backend.
//! - `staging.rs`: the staging pool, host-visible buffers retired by submission; the rule by
//!   which every ring of staging buffers takes its turns ([`staging::next_turn`]: the pool's,
//!   the gathered batch's and each captured step's); and the [`staging::StagingMemory`] the
//!   context provides to make and wait for them.
//! - `port.rs`: [`HostPort`], what the link asks of the context it serves (device, submissions,
//!   waits), so that the link names nothing above it.
//! - `staged_copy.rs`: the copy engine that moves arrays through the staging pool.
//! - `wgpu_copy.rs`: the link where staging is wgpu's own.
//! - `chunks.rs`: an array moved a chunk at a time (copies between two contexts).
//! - `recorded.rs`: the uploads a sequence or capture makes while it records.
//! - `gathered_staging.rs`: the staging the context's gathered batch fills with small uploads.
//! - `stats.rs`: transfer statistics, per direction, explicit and implicit apart.

pub(crate) mod chunks;
pub(crate) mod gathered_staging;
mod port;
pub(crate) mod recorded;
pub(crate) mod staged_copy;
pub(crate) mod staging;
pub(crate) mod stats;
pub(crate) mod wgpu_copy;

use crate::error::Result;
use crate::submission::SubmissionId;
pub(crate) use port::HostPort;
use staged_copy::{ReadbackItem, UploadItem};

/// The way host bytes travel on one context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HostLink {
    /// Vulkan, memory from gpu-allocator: staging buffers of the memory plan that the crate
    /// maps and writes or reads itself (the staging pool, the gathered batch's staging, a
    /// captured step's), and, where zero-copy applies, the arena's own mapped memory.
    Mapped,
    /// Other backends (GL, Metal, DX12): wgpu's own staging, `queue.write_buffer` on the way
    /// in and a mappable buffer (`map_async`) on the way out.
    Wgpu,
}

impl HostLink {
    /// Uploads every item: through the staging pool (one submission per staging buffer
    /// filled), or with `queue.write_buffer` and one submission that carries the writes.
    /// Returns the last submission.
    pub(crate) fn upload(
        self,
        port: &impl HostPort,
        items: &[UploadItem<'_>],
    ) -> Result<SubmissionId> {
        match self {
            HostLink::Mapped => staged_copy::upload(port, items),
            HostLink::Wgpu => port.submit_writes("uploading through wgpu's staging", || {
                wgpu_copy::queue_writes(port, items)
            }),
        }
    }

    /// Reads every item back: through the staging pool, pipelined, or with one copy each into
    /// one mappable buffer.
    pub(crate) fn readback(
        self,
        port: &impl HostPort,
        items: &mut [ReadbackItem<'_>],
    ) -> Result<()> {
        match self {
            HostLink::Mapped => staged_copy::readback(port, items),
            HostLink::Wgpu => wgpu_copy::readback_at_once(port, items),
        }
    }
}
