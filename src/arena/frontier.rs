//! Pending frees: chunks the caller has freed but queued GPU work may still read or write.
//!
//! A free may carry the queue position (the submission index) after which the GPU no longer
//! touches the chunk. The chunk waits here, neither in use nor free, until the device layer
//! reports that position as completed.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Chunks waiting for their frontier, earliest first.
#[derive(Debug, Default)]
pub(crate) struct PendingFrees {
    /// `(frontier, slot)`, smallest frontier on top.
    queue: BinaryHeap<Reverse<(u64, u32)>>,
    /// Bytes in pending chunks.
    bytes: u64,
    /// The highest position reported completed so far.
    completed: Option<u64>,
    /// The latest frontier a chunk was parked for.
    latest: u64,
}

impl PendingFrees {
    /// True when work up to `frontier` is known to be done, so a free can take effect now.
    pub fn is_complete(&self, frontier: u64) -> bool {
        self.completed.is_some_and(|done| done >= frontier)
    }

    /// Parks chunk `slot` of `size` bytes until `frontier` completes.
    pub fn push(&mut self, frontier: u64, slot: u32, size: u64) {
        self.queue.push(Reverse((frontier, slot)));
        self.bytes += size;
        self.latest = self.latest.max(frontier);
    }

    /// Records that work up to `completed` is done.
    pub fn complete(&mut self, completed: u64) {
        self.completed = Some(self.completed.map_or(completed, |done| done.max(completed)));
    }

    /// The next parked chunk whose frontier has completed, if any.
    pub fn pop_ready(&mut self) -> Option<u32> {
        let Reverse((frontier, slot)) = *self.queue.peek()?;
        if !self.is_complete(frontier) {
            return None;
        }
        self.queue.pop();
        Some(slot)
    }

    /// Accounts for `size` bytes leaving the pending state.
    pub fn released(&mut self, size: u64) {
        self.bytes -= size;
    }

    /// Bytes in pending chunks.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The position after which every pending chunk is free, while any is pending.
    pub fn latest(&self) -> Option<u64> {
        (!self.queue.is_empty()).then_some(self.latest)
    }

    /// Forgets every pending chunk (teardown), and so the frontier they waited for. The
    /// completed position is kept: the queue did not go back in time.
    pub fn clear(&mut self) {
        self.queue.clear();
        self.bytes = 0;
        self.latest = 0;
    }
}
