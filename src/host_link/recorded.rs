//! The uploads a recorder (a [`crate::Sequence`], a capture) makes while it records: their
//! bytes leave the caller's slice at once and reach the arrays when the recorder's work runs.
//! Through mapped staging they are written into the recorder's own staging buffers (taken from
//! the pool, released at its submit), and the recorder copies them with a step of its own;
//! through wgpu's staging they are queued writes, which land at the start of the next
//! submission. More than a staging buffer holds goes out at once, as `device_put`'s would.

use super::port::HostPort;
use super::staged_copy::UploadItem;
use super::staging::{StagingBuffer, StagingKind, COPY_ALIGNMENT};
use super::HostLink;
use crate::error::Result;
use crate::submission::SubmissionId;

/// A recorder's uploads: the staging buffers it filled, and whether it queued writes.
#[derive(Default)]
pub(crate) struct RecordedUploads {
    /// Upload staging buffers filled, with the bytes used of the last.
    staging: Vec<(StagingBuffer, u64)>,
    /// Writes were queued: the recorder's submission must be made, even with no step, so
    /// that they land.
    queued_writes: bool,
}

/// Where one recorded upload's bytes went.
pub(crate) enum Staged {
    /// Queued with `write_buffer`: they land at the start of the next submission.
    Queued,
    /// Submitted at once, as this submission.
    Submitted(SubmissionId),
    /// In a staging buffer of the recorder's, at this offset, `bytes` long (whole words): the
    /// recorder copies them to the array with a step.
    InStaging {
        buffer: wgpu::Buffer,
        offset: u64,
        bytes: u64,
    },
}

impl RecordedUploads {
    /// Takes `item`'s bytes out of the caller's slice now, by `link`.
    pub(crate) fn stage(
        &mut self,
        port: &impl HostPort,
        link: HostLink,
        item: UploadItem<'_>,
    ) -> Result<Staged> {
        let bytes = item.data;
        let padded = (bytes.len() as u64).next_multiple_of(COPY_ALIGNMENT);
        if link == HostLink::Wgpu {
            super::wgpu_copy::queue_writes(port, &[item]);
            self.queued_writes = true;
            return Ok(Staged::Queued);
        }
        if padded > port.staging_bytes() {
            // Submissions of its own now, as many as `device_put` makes, which queue order
            // puts before the recorder's.
            return link.upload(port, &[item]).map(Staged::Submitted);
        }
        let room = |(staging, cursor): &(StagingBuffer, u64)| staging.size - cursor >= padded;
        if !self.staging.last().is_some_and(room) {
            let staging = port.staging().acquire(port, StagingKind::Upload)?;
            self.staging.push((staging, 0));
        }
        let (staging, cursor) = self.staging.last_mut().expect("acquired above");
        let target = staging.mapped.sub(*cursor, padded);
        target.write(bytes);
        target
            .sub(bytes.len() as u64, padded - bytes.len() as u64)
            .zero();
        let offset = *cursor;
        *cursor += padded;
        Ok(Staged::InStaging {
            buffer: staging.buffer.clone(),
            offset,
            bytes: padded,
        })
    }

    /// Whether writes were queued since the last call (the recorder's submission carries
    /// them).
    pub(crate) fn take_queued_writes(&mut self) -> bool {
        std::mem::take(&mut self.queued_writes)
    }

    /// Gives the staging buffers back to the pool, busy until submission `last`.
    pub(crate) fn release(&mut self, port: &impl HostPort, last: SubmissionId) {
        for (mut staging, _) in self.staging.drain(..) {
            staging.busy_until = staging.busy_until.max(last);
            port.staging().release(StagingKind::Upload, staging);
        }
    }
}
