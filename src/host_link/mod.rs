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
//! - [`HostPort`] (here): what the link asks of the context it serves (device, submissions,
//!   waits), so that the link names nothing above it.
//! - `staged_copy.rs`: the copy engine that moves arrays through the staging pool.
//! - `wgpu_copy.rs`: the link where staging is wgpu's own.
//! - `gathered_staging.rs`: the staging the context's gathered batch fills with small uploads.
//! - `stats.rs`: transfer statistics, per direction, explicit and implicit apart.

pub(crate) mod gathered_staging;
pub(crate) mod staged_copy;
pub(crate) mod staging;
pub(crate) mod stats;
pub(crate) mod wgpu_copy;

use crate::error::Result;
use crate::submission::SubmissionId;
use staged_copy::{ReadbackItem, UploadItem};
use staging::{StagingMemory, StagingPool};

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
    /// The link for a context whose arena memory comes from gpu-allocator (`mapped_memory`) or
    /// from plain wgpu buffers.
    pub(crate) fn for_memory(mapped_memory: bool) -> Self {
        match mapped_memory {
            true => HostLink::Mapped,
            false => HostLink::Wgpu,
        }
    }
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

/// What the host link asks of the context it serves: its device, its staging pool, and
/// submissions and waits that keep the context's record (submission ids, error scopes, a lost
/// device). The context implements it; the link names nothing above it.
pub(crate) trait HostPort: StagingMemory {
    /// The device buffers and encoders are made on.
    fn device(&self) -> &wgpu::Device;
    /// The pool of staging buffers.
    fn staging(&self) -> &StagingPool;
    /// How this context's host bytes travel.
    fn host_link(&self) -> HostLink;
    /// Submits the gathered single ops, reporting a refusal of theirs: a host read does this
    /// first, so that its own copies do not leave that error for a later call.
    fn flush_gathered(&self) -> Result<()>;
    /// Submits the copies of `encoder` as one submission in error scopes, `during` saying what
    /// for; with `host_read`, ending with the memory dependency to host reads.
    fn submit_copies(
        &self,
        encoder: wgpu::CommandEncoder,
        during: &str,
        host_read: bool,
    ) -> Result<SubmissionId>;
    /// Runs `writes` (`queue.write_buffer` calls) inside a submission's error scopes and
    /// submits it: the submission that carries them.
    fn submit_writes(&self, during: &str, writes: impl FnOnce()) -> Result<SubmissionId>;
    /// `queue.write_buffer`: the bytes land before the next submission's commands.
    fn write_buffer(&self, buffer: &wgpu::Buffer, offset: u64, bytes: &[u8]);
    /// Waits until submission `id` has completed, with its writes visible to the host.
    fn wait_for_copies(&self, id: SubmissionId) -> Result<()>;
    /// Maps `buffer` (`MAP_READ`, its copies submitted) once the queue is idle, hands its
    /// bytes to `read` and unmaps it.
    fn read_mapped(
        &self,
        buffer: &wgpu::Buffer,
        during: &str,
        read: impl FnOnce(&[u8]),
    ) -> Result<()>;
}
