//! Started collectives: [`Collectives::start_all_reduce_many`],
//! [`Collectives::start_all_reduce_mean_many`] and [`Collectives::start_broadcast_many`] check
//! their arrays on the caller's thread and return a [`PendingCollective`] at once; the
//! agreement of every rank and the data phase run on the group's progress thread, while the
//! caller records and submits more GPU work (PyTorch's `async_op=True` work handles, Horovod's
//! `allreduce_async`).
//!
//! **Why a progress thread, not MPI's non-blocking collectives.** Open MPI (without its
//! optional asynchronous progress) advances a non-blocking collective only inside MPI calls,
//! so an `MPI_Iallreduce` left alone while the caller records kernels does not move, and
//! waiting on one handle while another rank waits on a different one deadlocks unless every
//! wait also polls the others. A thread that runs the started collectives one after another,
//! in the order they were started, needs nothing from the caller, and blocking MPI calls (with
//! Open MPI's tuned algorithms) do the work. The price is MPI's `MPI_THREAD_MULTIPLE`: the
//! progress thread calls MPI while the caller's thread may too. [`super::init`] asks for it; a
//! start on an MPI started at a lower level is refused.
//!
//! **One order for every collective of a group.** The progress thread works on the group's
//! own communicator, as the blocking calls do, and a blocking collective first waits until
//! every collective started before it has run ([`Progress::quiet`]), as a blocking call after
//! `async_op=True` ones runs after them on PyTorch's process group. So every rank's collectives
//! meet in program order, started or not, and each one's agreement compares the same call on
//! every rank: a start on one rank against a blocking call on another is refused on both, the
//! blocking call at once and the start at [`PendingCollective::wait`]. Point-to-point calls
//! (`send`, `recv`) do not wait: they match by rank, not by order.
//!
//! **Why the agreement is on the progress thread.** A start that agreed on the caller's thread
//! waited there for the slowest rank, once per bucket, where one blocking call after the
//! backward pass waits once per step: with three ranks on two cores that wait was the whole
//! cost of the overlap (1.1–1.5 ms per start, BENCHMARKS.md). Agreeing on the progress thread
//! moves that wait off the caller; the price is that a start that other ranks do not match
//! returns its refusal from `wait()` (with its arrays intact), as Horovod's and PyTorch's
//! asynchronous handles report their errors. A refusal of this rank's own (an array not
//! ready, the transfer guard, MPI below `MPI_THREAD_MULTIPLE`) still comes back from the start
//! itself, after the agreement that tells the other ranks.
//!
//! **Waiting: in MPI where cores allow, sleeping where they are short.** The progress thread
//! waits for the other ranks in each agreement, which is also where every rank arrives before
//! MPI's blocking data calls start. How it waits is chosen once per group
//! ([`PeerWait`](super::peer_wait::PeerWait)): where this machine has a core for every rank of
//! the group on it, in MPI's own wait, as blocking collectives wait (the latency of a rank's
//! arrival is then a few microseconds); where it has fewer cores than ranks (Open MPI's
//! `mpirun` says so; elsewhere the ranks on the machine are counted against the cores), or
//! where the context runs with [`ArenaConfig::validation`](crate::ArenaConfig::validation), by
//! testing a non-blocking call every [`ARRIVAL_POLL`](super::ARRIVAL_POLL) and sleeping in
//! between (as Horovod's background thread sleeps its cycle time between rounds), because a
//! rank that busy-polls there takes the core that its own host work or a late peer needs.

use super::array_io::Scratch;
use super::donated_list::{DonatedList, DonatedListResult};
use super::fused::Link;
use crate::backend::SharedComm;
use crate::context::ContextInner;
use crate::error::{CollectiveFailure, Error, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};

/// A started collective's agreement and data phase, run on the progress thread.
pub(super) type Job = Box<dyn FnOnce(&Link<'_>) + Send>;

/// The progress thread of one [`Collectives`], on the group's communicator.
pub(crate) struct Progress {
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Jobs queued and not yet run to their end.
    outstanding: Arc<AtomicU64>,
}

impl Progress {
    pub(super) fn spawn(
        comm: Arc<SharedComm>,
        ctx: Arc<ContextInner>,
        scratch: Arc<Scratch>,
        host_bytes_peak: Arc<AtomicU64>,
    ) -> Result<Self> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let outstanding = Arc::new(AtomicU64::new(0));
        let finished = outstanding.clone();
        let thread = std::thread::Builder::new()
            .name("gpu-arena-collectives".into())
            .spawn(move || {
                let link = Link {
                    ctx: &ctx,
                    comm: &comm,
                    scratch: &scratch,
                    host_bytes_peak: &host_bytes_peak,
                };
                for job in queue {
                    // A job that panicked dropped its answer (its handle's `wait` says the
                    // thread ended); the thread goes on, so that `quiet` never waits forever.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&link)));
                    finished.fetch_sub(1, Ordering::Release);
                }
            })
            .map_err(|error| Error::Backend {
                during: "starting the collectives' progress thread".into(),
                reason: error.to_string(),
            })?;
        Ok(Self {
            jobs: Some(jobs),
            thread: Some(thread),
            outstanding,
        })
    }

    pub(super) fn submit(&self, job: Job) -> std::result::Result<(), Job> {
        let Some(jobs) = &self.jobs else {
            return Err(job);
        };
        self.outstanding.fetch_add(1, Ordering::Relaxed);
        jobs.send(job).map_err(|mpsc::SendError(job)| {
            self.outstanding.fetch_sub(1, Ordering::Relaxed);
            job
        })
    }

    /// Returns once every job queued so far has run to its end, so that the calling thread
    /// may call a collective on the group's communicator next: at once when none is queued,
    /// else after an empty job queued behind them has run.
    pub(super) fn quiet(&self) {
        if self.outstanding.load(Ordering::Acquire) == 0 {
            return;
        }
        let (ran, done) = mpsc::sync_channel(1);
        // A refused send or a dropped answer: the thread has ended, nothing runs any more.
        if self
            .submit(Box::new(move |_: &Link<'_>| {
                let _ = ran.send(());
            }))
            .is_ok()
        {
            let _ = done.recv();
        }
    }
}

impl Drop for Progress {
    /// Runs the collectives still queued to their end (every rank started them, so every rank
    /// runs them), then ends the thread.
    fn drop(&mut self) {
        self.jobs.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A collective that was started and has not been waited for: it owns the arrays it moves,
/// so nothing else can read or write them until [`PendingCollective::wait`] gives them back.
///
/// Dropping it without waiting does not cancel the collective (the other ranks run it): it
/// runs to its end on the progress thread, which then frees its arrays; nothing waits for it
/// and nothing leaks. Handles may be waited in any order; the collectives themselves run in
/// the order they were started.
#[must_use = "a started collective gives its arrays back only through wait()"]
pub struct PendingCollective<T: bytemuck::Pod> {
    pub(super) operation: &'static str,
    /// The how-manieth start on this group it is (from 0), for messages.
    pub(super) number: u64,
    pub(super) done: mpsc::Receiver<DonatedListResult<T>>,
}

impl<T: bytemuck::Pod> PendingCollective<T> {
    /// Waits until the collective has run on this rank and gives its arrays back, reduced, in
    /// the order they were passed. On staging, writes back to the device are submitted and
    /// ordered before any later use of the arrays, as with the blocking calls.
    ///
    /// Errors, with every array given back in [`DonatedList`]:
    /// - [`Error::Collective`] when the ranks did not agree, the arrays intact (nothing moved):
    ///   another rank called another collective at this point, with another list, reduction
    ///   or root ([`CollectiveFailure::Mismatch`]), or refused its part
    ///   ([`CollectiveFailure::Refused`]). Every rank that started this collective gets the
    ///   refusal here; a rank that called a blocking collective against it gets it from that
    ///   call.
    /// - A device error during the data phase, the arrays partly reduced: end the job with
    ///   [`super::abort_on_error`].
    ///
    /// [`Error::Collective`] ([`CollectiveFailure::ProgressThreadEnded`]) with no arrays if the
    /// collective ended without an answer (a panic on the progress thread).
    pub fn wait(self) -> DonatedListResult<T> {
        self.done.recv().unwrap_or_else(|_| {
            Err(DonatedList {
                error: Error::Collective {
                    operation: self.operation,
                    failure: CollectiveFailure::ProgressThreadEnded,
                    reason: format!(
                        "started collective #{} ended without an answer (it panicked on the progress thread); its arrays are lost",
                        self.number
                    ),
                },
                arrays: Vec::new(),
            })
        })
    }

    /// Which start on this group this is (0 for the first), as messages name it.
    pub fn number(&self) -> u64 {
        self.number
    }
}

impl<T: bytemuck::Pod> std::fmt::Debug for PendingCollective<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingCollective")
            .field("operation", &self.operation)
            .field("number", &self.number)
            .finish()
    }
}
