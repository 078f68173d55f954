//! [`HostPort`]: what the host link asks of the context it serves.

use super::staging::{StagingMemory, StagingPool};
use crate::error::Result;
use crate::submission::SubmissionId;

/// What the host link asks of the context it serves: its device, its staging pool, and
/// submissions and waits that keep the context's record (submission ids, error scopes, a lost
/// device). The context implements it; the link names nothing above it.
pub(crate) trait HostPort: StagingMemory {
    /// The device buffers and encoders are made on.
    fn device(&self) -> &wgpu::Device;
    /// The pool of staging buffers.
    fn staging(&self) -> &StagingPool;
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
