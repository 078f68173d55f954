//! The staging that the context's gathered batch owns: where small host data (a single
//! `device_put`, a single op's host operand) is copied when the op joins the batch, so that a
//! command recorded in the batch copies it to its array. Such an upload costs no submission
//! and no staging buffer of its own, and keeps program order with the ops around it: what
//! wgpu's `queue.write_buffer` does with its staging, and CubeCL with the writes it stages
//! beside its launches.
//!
//! Bounded: one batch stages at most [`GATHERED_STAGING_BYTES`] (reaching it submits the
//! batch), only uploads of at most [`MAX_GATHERED_UPLOAD_BYTES`] take this path (larger ones
//! keep the pipelined staging of `staging.rs`), and the context keeps at most
//! [`GATHERED_STAGING_BUFFERS`] such buffers: the batch being gathered fills one while the GPU
//! copies out of the batches submitted before it. The buffers are the plan's upload memory,
//! made on first use and kept. Where staging is wgpu's own (GL, Metal, DX12) the batch holds
//! the bytes instead, under the same cap, and writes them with `queue.write_buffer` when it is
//! submitted: they land at the start of that submission.

use super::staging::{next_turn, StagingBuffer, StagingKind, StagingMemory, Turn, COPY_ALIGNMENT};
use crate::error::Result;
use crate::submission::SubmissionId;

/// The most host bytes one gathered batch stages (the cap of its staging buffer, or the
/// context's `staging_bytes` when that is smaller): 4 MiB holds a thousand 4 KiB uploads, so
/// a loop of small uploads makes one submission per thousand, while what the batch keeps from
/// the host stays small beside the 64 MiB staging buffers of the pool.
pub const GATHERED_STAGING_BYTES: u64 = 4 << 20;

/// The largest upload that goes with the gathered ops (its bytes, rounded up to the array's
/// 256-byte allocation; a quarter of a smaller `staging_bytes` at most). Larger uploads go
/// through the pool's pipelined staging with submissions of their own, as before: the copy
/// into the batch's staging is a second copy of the data, cheap for rows and parameters and
/// wasteful for bulk data, which fills the batch's staging at once anyway.
pub const MAX_GATHERED_UPLOAD_BYTES: u64 = 64 << 10;

/// Staging buffers of gathered batches a context keeps: one being filled, two being copied out
/// of by submitted batches (as the pool's `STAGING_BUFFERS`).
pub const GATHERED_STAGING_BUFFERS: usize = 3;

/// The batch's staging: the buffer being filled and those of batches already submitted.
#[derive(Default)]
pub(crate) struct GatheredStaging {
    /// The buffer of the batch being gathered and the bytes it holds so far.
    current: Option<(StagingBuffer, u64)>,
    /// Buffers of submitted batches, each busy until its batch completes.
    retired: Vec<StagingBuffer>,
    /// Buffers made so far (at most [`GATHERED_STAGING_BUFFERS`]).
    created: usize,
    /// Bytes the batch being gathered holds for `queue.write_buffer` (wgpu's staging).
    held: u64,
}

impl GatheredStaging {
    /// The bytes one batch may stage with `memory`'s staging size (see
    /// [`GATHERED_STAGING_BYTES`]).
    pub(crate) fn capacity(memory: &impl StagingMemory) -> u64 {
        // Rounded down to whole words: never above `staging_bytes` (at least 4 KiB).
        GATHERED_STAGING_BYTES.min(memory.staging_bytes()) / COPY_ALIGNMENT * COPY_ALIGNMENT
    }

    /// Whether an upload of `bytes` (its allocation's size) takes this path: a small one.
    pub(crate) fn takes(memory: &impl StagingMemory, bytes: u64) -> bool {
        bytes <= MAX_GATHERED_UPLOAD_BYTES.min(Self::capacity(memory) / 4)
    }

    /// Bytes the batch being gathered has staged (or holds for wgpu's staging).
    pub(crate) fn staged(&self) -> u64 {
        self.current.as_ref().map_or(0, |(_, cursor)| *cursor) + self.held
    }

    /// Whether `bytes` more fit beside what the batch has staged.
    pub(crate) fn has_room(&self, memory: &impl StagingMemory, bytes: u64) -> bool {
        self.staged() + bytes <= Self::capacity(memory)
    }

    /// Bytes of staging the context holds for gathered batches (every buffer made).
    pub(crate) fn bytes_held(&self, memory: &impl StagingMemory) -> u64 {
        self.created as u64 * Self::capacity(memory)
    }

    /// Copies `data` into the batch's staging, zeroed up to `size` bytes (the destination's
    /// allocation), and returns the buffer and offset the batch's copy reads. Takes a buffer
    /// when the batch has none: a free one, a new one while fewer than
    /// [`GATHERED_STAGING_BUFFERS`] exist, else the one whose batch completes first, after
    /// `wait` for that (already submitted) batch. The caller checked [`Self::has_room`].
    /// Where staging is wgpu's own (`link`), the batch only counts the bytes, which it holds
    /// and writes when submitted: `None`.
    pub(crate) fn stage(
        &mut self,
        memory: &impl StagingMemory,
        link: super::HostLink,
        data: &[u8],
        size: u64,
        wait: impl FnOnce(SubmissionId) -> Result<()>,
    ) -> Result<Option<(wgpu::Buffer, u64)>> {
        if link == super::HostLink::Wgpu {
            self.held += size;
            return Ok(None);
        }
        if self.current.is_none() {
            let buffer = self.take_buffer(memory, wait)?;
            self.current = Some((buffer, 0));
        }
        let (buffer, cursor) = self.current.as_mut().expect("taken above");
        let at = *cursor;
        let target = buffer.mapped.sub(at, size);
        target.write(data);
        if size > data.len() as u64 {
            target
                .sub(data.len() as u64, size - data.len() as u64)
                .zero();
        }
        *cursor += size;
        Ok(Some((buffer.buffer.clone(), at)))
    }

    fn take_buffer(
        &mut self,
        memory: &impl StagingMemory,
        wait: impl FnOnce(SubmissionId) -> Result<()>,
    ) -> Result<StagingBuffer> {
        let busy = self.retired.iter().map(|b| b.busy_until);
        match next_turn(
            busy,
            memory.completed(),
            self.created,
            GATHERED_STAGING_BUFFERS,
        ) {
            Turn::Free(i) => Ok(self.retired.swap_remove(i)),
            Turn::Make => {
                let buffer = memory.create_staging(StagingKind::Upload, Self::capacity(memory))?;
                self.created += 1;
                Ok(buffer)
            }
            Turn::Wait(i, oldest) => {
                wait(oldest)?;
                Ok(self.retired.swap_remove(i))
            }
        }
    }

    /// The batch was submitted as `id`: its buffer is busy until that completes.
    pub(crate) fn retire(&mut self, id: SubmissionId) {
        self.held = 0;
        if let Some((mut buffer, _)) = self.current.take() {
            buffer.busy_until = id;
            self.retired.push(buffer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    /// Memory of a given staging size that makes no buffer.
    struct Sized(u64);

    impl StagingMemory for Sized {
        fn completed(&self) -> u64 {
            0
        }
        fn create_staging(&self, _: StagingKind, bytes: u64) -> Result<StagingBuffer> {
            Err(Error::HostAllocation {
                purpose: "a staging buffer".into(),
                bytes,
            })
        }
        fn wait_for_staging(&self, _: SubmissionId) -> Result<()> {
            Ok(())
        }
        fn staging_bytes(&self) -> u64 {
            self.0
        }
    }

    #[test]
    fn a_batch_stages_whole_words_and_never_more_than_a_staging_buffer() {
        for (staging, capacity) in [
            (4096, 4096),
            (65_537, 65_536),
            (65_539, 65_536),
            (1 << 30, GATHERED_STAGING_BYTES),
        ] {
            assert_eq!(
                GatheredStaging::capacity(&Sized(staging)),
                capacity,
                "{staging}"
            );
        }
    }
}
