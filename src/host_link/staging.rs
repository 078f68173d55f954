//! The staging pool: a few reusable host-visible buffers per direction, made on first use and
//! kept. It holds [`STAGING_BUFFERS`] buffers per direction so that the CPU fills piece k+1 of
//! a transfer while the GPU copies piece k.
//!
//! The pool is part of its context (`ContextInner::staging`), which makes its buffers and tells
//! it which submissions have completed ([`StagingMemory`]); the copies through it are
//! `staged_copy.rs`. It is a file of its own because puts, gets, batches, sequences and
//! collectives all take their staging buffers from it when arena memory is not mapped, and the
//! context holds it, so it names nothing above it.

use crate::backend::MappedRange;
use crate::error::Result;
use crate::lock::{rank, Mutex};
use crate::submission::SubmissionId;

/// Buffers per direction: one being filled or drained by the CPU, one being copied by the GPU,
/// one spare so neither waits for the other.
pub(crate) const STAGING_BUFFERS: usize = 3;
/// WGSL words and `copy_buffer_to_buffer` sizes are multiples of 4 bytes.
pub(crate) const COPY_ALIGNMENT: u64 = wgpu::COPY_BUFFER_ALIGNMENT;

/// Which way a staging buffer serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StagingKind {
    Upload,
    Readback,
}

/// One host-visible staging buffer and the submission that last used it.
pub(crate) struct StagingBuffer {
    pub(crate) buffer: wgpu::Buffer,
    pub(crate) mapped: MappedRange,
    pub(crate) size: u64,
    pub(crate) busy_until: SubmissionId,
}

/// What a staging pool (and the gathered batch's staging) needs of the context it serves: which
/// submissions have completed, new buffers of the plan's upload or readback memory, and waiting
/// for a submission. The context implements it (`context.rs`); through it the pool names
/// nothing above itself.
pub(crate) trait StagingMemory {
    /// The newest submission known to have completed.
    fn completed(&self) -> u64;
    /// A staging buffer of `bytes` (rounded up to a word) of the plan's upload or readback
    /// memory.
    fn create_staging(&self, kind: StagingKind, bytes: u64) -> Result<StagingBuffer>;
    /// Waits until submission `id` has completed (no host read of its writes follows), then
    /// lets wgpu see what else has.
    fn wait_for_staging(&self, id: SubmissionId) -> Result<()>;
    /// The size of the pool's buffers (`ArenaConfig::staging_bytes`).
    fn staging_bytes(&self) -> u64;
}

/// What a ring of staging buffers does next to hand out a buffer: the rule every ring of the
/// crate follows (the pool's per direction, the gathered batch's, each captured step's), so
/// that they share it rather than each writing it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Turn {
    /// Take the buffer at this position: no GPU work uses it any more.
    Free(usize),
    /// Make a buffer: fewer than the ring's most exist, or none is there to wait for.
    Make,
    /// Wait for this submission, then take the buffer at this position (the first to free).
    Wait(usize, SubmissionId),
}

/// The turn of a ring whose buffers on hand are busy until `busy` (in order), of which
/// `created` exist in all and at most `most` are wanted, when submission `completed` is the
/// newest known to have completed.
pub(crate) fn next_turn(
    busy: impl Iterator<Item = SubmissionId>,
    completed: u64,
    created: usize,
    most: usize,
) -> Turn {
    let mut oldest: Option<(usize, SubmissionId)> = None;
    for (i, until) in busy.enumerate() {
        if until.0 <= completed {
            return Turn::Free(i);
        }
        if oldest.is_none_or(|(_, o)| until < o) {
            oldest = Some((i, until));
        }
    }
    match oldest {
        Some((i, until)) if created >= most => Turn::Wait(i, until),
        _ => Turn::Make,
    }
}

/// The pool: a few staging buffers per direction, made on first use and kept.
pub(crate) struct StagingPool {
    upload: Mutex<Vec<StagingBuffer>>,
    readback: Mutex<Vec<StagingBuffer>>,
    /// How many buffers exist per direction (free ones are in the vectors above).
    created: Mutex<[usize; 2]>,
}

impl Default for StagingPool {
    fn default() -> Self {
        StagingPool {
            upload: Mutex::new(rank::STAGING_FREE, Vec::new()),
            readback: Mutex::new(rank::STAGING_FREE, Vec::new()),
            created: Mutex::new(rank::STAGING_CREATED, [0; 2]),
        }
    }
}

impl StagingPool {
    fn free_list(&self, kind: StagingKind) -> &Mutex<Vec<StagingBuffer>> {
        match kind {
            StagingKind::Upload => &self.upload,
            StagingKind::Readback => &self.readback,
        }
    }

    /// Buffers per direction the pool holds now, free or taken (for tests: the pool does not
    /// grow per transfer, and returns to [`STAGING_BUFFERS`] once extra ones are released).
    pub(crate) fn created(&self) -> [usize; 2] {
        *self.created.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a staging buffer that no GPU work uses any more, making one if fewer than
    /// [`STAGING_BUFFERS`] exist, else waiting for the one that frees first.
    pub(crate) fn acquire(
        &self,
        memory: &impl StagingMemory,
        kind: StagingKind,
    ) -> Result<StagingBuffer> {
        loop {
            let completed = memory.completed();
            let mut free = self
                .free_list(kind)
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let mut created = self.created.lock().unwrap_or_else(|p| p.into_inner());
            let busy = free.iter().map(|b| b.busy_until);
            match next_turn(busy, completed, created[kind as usize], STAGING_BUFFERS) {
                Turn::Free(i) => return Ok(free.swap_remove(i)),
                Turn::Make => {
                    // Counted before it is made, so that two threads do not both make the
                    // last one; uncounted again when it cannot be made.
                    created[kind as usize] += 1;
                    drop(created);
                    drop(free);
                    let made = memory.create_staging(kind, memory.staging_bytes());
                    if made.is_err() {
                        let mut created = self.created.lock().unwrap_or_else(|p| p.into_inner());
                        created[kind as usize] = created[kind as usize].saturating_sub(1);
                    }
                    return made;
                }
                Turn::Wait(_, oldest) => {
                    drop(created);
                    drop(free);
                    // The host writes (uploads) or the copy into it waits (readbacks): no
                    // read. Then look again: another thread may have taken it meanwhile.
                    memory.wait_for_staging(oldest)?;
                }
            }
        }
    }

    /// Gives a buffer back; it is reused once `busy_until` has completed. A buffer above the
    /// pool's [`STAGING_BUFFERS`] (made while a sequence held the others) is dropped instead,
    /// so the pool returns to its size: wgpu keeps the buffer's memory until the submissions
    /// that use it complete.
    pub(crate) fn release(&self, kind: StagingKind, buffer: StagingBuffer) {
        let mut free = self
            .free_list(kind)
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let mut created = self.created.lock().unwrap_or_else(|p| p.into_inner());
        if created[kind as usize] > STAGING_BUFFERS {
            created[kind as usize] -= 1;
            drop(created);
            drop(free);
            drop(buffer);
            return;
        }
        free.push(buffer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use std::cell::Cell;

    /// Memory that refuses every staging buffer, and counts the refusals.
    #[derive(Default)]
    struct Refusing {
        refused: Cell<usize>,
    }

    impl StagingMemory for Refusing {
        fn completed(&self) -> u64 {
            0
        }
        fn create_staging(&self, _: StagingKind, bytes: u64) -> Result<StagingBuffer> {
            self.refused.set(self.refused.get() + 1);
            Err(Error::HostAllocation {
                purpose: "a staging buffer".into(),
                bytes,
            })
        }
        fn wait_for_staging(&self, _: SubmissionId) -> Result<()> {
            unreachable!("an empty pool makes a buffer rather than wait")
        }
        fn staging_bytes(&self) -> u64 {
            1 << 20
        }
    }

    #[test]
    fn a_ring_takes_a_free_buffer_else_makes_one_under_its_most_else_waits_for_the_oldest() {
        let ids = |ids: &[u64]| ids.iter().map(|&i| SubmissionId(i)).collect::<Vec<_>>();
        let turn = |busy: &[u64], completed, created, most| {
            next_turn(ids(busy).into_iter(), completed, created, most)
        };
        assert_eq!(turn(&[9, 4, 7], 5, 3, 3), Turn::Free(1));
        assert_eq!(turn(&[9, 8], 5, 2, 3), Turn::Make);
        assert_eq!(turn(&[9, 6, 8], 5, 3, 3), Turn::Wait(1, SubmissionId(6)));
        // All taken elsewhere: nothing to wait for, so one more is made past the most.
        assert_eq!(turn(&[], 5, 3, 3), Turn::Make);
        assert_eq!(turn(&[], 0, 0, 2), Turn::Make);
    }

    #[test]
    fn a_buffer_that_cannot_be_made_is_not_counted() {
        let pool = StagingPool::default();
        let memory = Refusing::default();
        for (kind, tries) in [(StagingKind::Upload, 5), (StagingKind::Readback, 2)] {
            for _ in 0..tries {
                match pool.acquire(&memory, kind) {
                    Err(Error::HostAllocation { bytes, .. }) => assert_eq!(bytes, 1 << 20),
                    other => panic!("{kind:?}: {:?}", other.map(|b| b.size)),
                }
            }
        }
        assert_eq!(memory.refused.get(), 7);
        assert_eq!(pool.created(), [0, 0]);
    }
}
