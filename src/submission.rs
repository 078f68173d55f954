//! Submission tracking: which queue position each piece of GPU work has, and which have finished.
//!
//! Arrays record the submission that last used them; when an array is dropped its memory is
//! handed out again only after that submission completes (XLA's "safe frontier").
//!
//! Holds [`SubmissionId`] and `Submissions`, the context's record of what it submitted and
//! what the device has finished. A file of its own because everything that submits or waits
//! (the context, transfers, sequences, captured steps) numbers its work here, below them all.

use crate::lock::{rank, Mutex};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// How many recent submissions keep their wgpu index, so that waiting for one of them waits
/// for it alone rather than for the whole queue (pipelined transfers wait for the oldest of
/// two or three submissions in flight while the newer ones keep running).
const RECENT_SUBMISSIONS: usize = 16;

/// The position of one submission on the context's queue (1, 2, 3, ...; 0 means "none").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SubmissionId(pub u64);

/// Numbers submissions and learns when they complete.
pub(crate) struct Submissions {
    /// Held across `queue.submit` so ids are in queue order.
    last_submitted: Mutex<u64>,
    completed: Arc<AtomicU64>,
    /// The wgpu indices of the last [`RECENT_SUBMISSIONS`] submissions, oldest first.
    recent: Mutex<VecDeque<(u64, wgpu::SubmissionIndex)>>,
    /// The last submission that ends with the memory dependency to host reads (on Vulkan; on
    /// other backends every submission counts): the device's writes of every submission up to
    /// it are visible to the host once it has completed.
    host_visible_through: AtomicU64,
}

impl Default for Submissions {
    fn default() -> Self {
        Submissions {
            last_submitted: Mutex::new(rank::LAST_SUBMITTED, 0),
            completed: Arc::default(),
            recent: Mutex::new(rank::RECENT_SUBMISSIONS, VecDeque::new()),
            host_visible_through: AtomicU64::new(0),
        }
    }
}

impl Submissions {
    /// Submits and returns the new submission's id; its completion is recorded by a callback
    /// that wgpu runs during a later `device.poll`. `before` runs with the id just before the
    /// work is handed to the queue (under the lock that keeps ids in queue order): arrays
    /// record the use there, so that no host read or reuse of their memory can slip in between
    /// the submission and its record. It must not submit work itself.
    pub(crate) fn submit(
        &self,
        queue: &wgpu::Queue,
        command_buffers: impl IntoIterator<Item = wgpu::CommandBuffer>,
        before: impl FnOnce(SubmissionId),
    ) -> SubmissionId {
        let mut last = self
            .last_submitted
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        *last += 1;
        let id = *last;
        before(SubmissionId(id));
        let index = queue.submit(command_buffers);
        {
            let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
            if recent.len() == RECENT_SUBMISSIONS {
                recent.pop_front();
            }
            recent.push_back((id, index));
        }
        let completed = Arc::clone(&self.completed);
        queue.on_submitted_work_done(move || {
            completed.fetch_max(id, Ordering::AcqRel);
        });
        SubmissionId(id)
    }

    /// Hands work that takes no id to the queue (the library's own measurements, on buffers no
    /// array shares): under the lock that keeps ids in queue order, so that it never lands
    /// between a numbered submission's record and its handing over. wgpu's index, to wait for
    /// it.
    pub(crate) fn submit_unnumbered(
        &self,
        queue: &wgpu::Queue,
        command_buffers: impl IntoIterator<Item = wgpu::CommandBuffer>,
    ) -> wgpu::SubmissionIndex {
        let _last = self
            .last_submitted
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        queue.submit(command_buffers)
    }

    /// wgpu's index of submission `id`, while it is among the recent ones. A submission whose
    /// arrays already carry its id may still be on its way to the queue (uses are recorded just
    /// before): this first waits for the submission in progress, if any, to be handed over,
    /// so that waiting for `id` afterwards waits for its work.
    pub(crate) fn wgpu_index(&self, id: SubmissionId) -> Option<wgpu::SubmissionIndex> {
        drop(
            self.last_submitted
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        let recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        recent
            .iter()
            .find(|(recent_id, _)| *recent_id == id.0)
            .map(|(_, index)| index.clone())
    }

    /// The id the next submission will get. The caller keeps other submissions out until that
    /// one is made: the context's gathered single ops reserve it under the lock every
    /// submission of the context takes first.
    pub(crate) fn next_id(&self) -> SubmissionId {
        let last = self
            .last_submitted
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        SubmissionId(*last + 1)
    }

    /// Notes that submission `id` ends with the memory dependency to host reads.
    pub(crate) fn mark_host_visible(&self, id: SubmissionId) {
        self.host_visible_through.fetch_max(id.0, Ordering::AcqRel);
    }

    /// The last submission that ends with the memory dependency to host reads (0: none yet).
    pub(crate) fn host_visible_through(&self) -> SubmissionId {
        SubmissionId(self.host_visible_through.load(Ordering::Acquire))
    }

    /// The highest submission known to have completed.
    pub(crate) fn completed(&self) -> u64 {
        self.completed.load(Ordering::Acquire)
    }
}
