//! Started collectives: [`Collectives::start_all_reduce_many`],
//! [`Collectives::start_all_reduce_mean_many`] and [`Collectives::start_broadcast_many`] agree on the caller's thread and return a
//! [`PendingCollective`]; the data moves on the group's progress thread, while the caller
//! records and submits more GPU work (PyTorch's `async_op=True` work handles, Horovod's
//! `allreduce_async`).
//!
//! **Why a progress thread, not MPI's non-blocking collectives.** Open MPI (without its
//! optional asynchronous progress) advances a non-blocking collective only inside MPI calls,
//! so an `MPI_Iallreduce` left alone while the caller records kernels does not move, and
//! waiting on one handle while another rank waits on a different one deadlocks unless every
//! wait also polls the others. A thread that runs the started collectives one after another,
//! in the order they were started, needs nothing from the caller: every rank starts the same
//! collectives in the same order (the agreement checks each), so every rank's thread runs
//! them in the same order on its own duplicate of the communicator, and blocking MPI calls
//! (with Open MPI's tuned algorithms) do the work. The price is MPI's
//! `MPI_THREAD_MULTIPLE`: the progress thread calls MPI while the caller's thread may too.
//! [`super::init`] asks for it; a start on an MPI started at a lower level is refused on
//! every rank.
//!
//! **Waiting without spinning.** MPI's blocking calls busy-poll while a peer has not arrived,
//! which on a started collective means a core taken from the caller's work (the rest of the
//! backward pass; on a CPU device, the device itself) for as long as the slowest rank takes to
//! start the same collective. So the progress thread first waits for every rank at a
//! non-blocking barrier, testing it every [`ARRIVAL_POLL`] and sleeping in between (as
//! Horovod's background thread sleeps its cycle time between rounds), and only then makes the
//! blocking calls, with every rank there.
//!
//! **Agreement stays synchronous.** A start exchanges its header on the group's communicator,
//! on the caller's thread, in program order with the blocking collectives (waiting for the
//! other ranks' headers in the same sleeping way), so a list that differs between ranks is
//! refused at the start, on every rank, with every array given back; nothing is queued then.

use super::array_io::Scratch;
use super::donated_list::{DonatedList, DonatedListResult};
use super::fused::Link;
use super::header::wait_sleeping;
use crate::backend::ThreadComm;
use crate::context::ContextInner;
use crate::error::{CollectiveFailure, Error, Result};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use std::sync::atomic::AtomicU64;
use std::sync::{mpsc, Arc};

/// How long the progress thread sleeps between tests of its arrival barrier: short beside a
/// collective worth starting (tens of microseconds on shared memory and more over a network),
/// long enough that waiting for a late rank costs the other work almost no CPU. Horovod's
/// background thread sleeps 1 ms between rounds (`HOROVOD_CYCLE_TIME`).
pub const ARRIVAL_POLL: std::time::Duration = std::time::Duration::from_micros(50);

/// Returns when every rank of `comm` has called it, sleeping [`ARRIVAL_POLL`] between tests
/// rather than spinning in MPI.
pub(super) fn arrive_together(comm: &SimpleCommunicator) {
    wait_sleeping(comm.immediate_barrier(), ARRIVAL_POLL);
}

/// A started collective's data phase, run on the progress thread.
pub(super) type Job = Box<dyn FnOnce(&Link<'_>) + Send>;

/// The progress thread of one [`Collectives`], with its own duplicate of the communicator.
pub(crate) struct Progress {
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    pub(super) fn spawn(
        comm: ThreadComm,
        ctx: Arc<ContextInner>,
        scratch: Arc<Scratch>,
        host_bytes_peak: Arc<AtomicU64>,
    ) -> Result<Self> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("gpu-arena-collectives".into())
            .spawn(move || {
                let comm = comm.into_inner();
                let link = Link {
                    ctx: &ctx,
                    comm: &comm,
                    scratch: &scratch,
                    host_bytes_peak: &host_bytes_peak,
                };
                for job in queue {
                    job(&link);
                }
            })
            .map_err(|error| Error::Backend {
                during: "starting the collectives' progress thread".into(),
                reason: error.to_string(),
            })?;
        Ok(Self {
            jobs: Some(jobs),
            thread: Some(thread),
        })
    }

    pub(super) fn submit(&self, job: Job) -> std::result::Result<(), Job> {
        match &self.jobs {
            Some(jobs) => jobs.send(job).map_err(|mpsc::SendError(job)| job),
            None => Err(job),
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
    /// Errors: a device error during the data phase ([`DonatedList`] with the arrays, partly
    /// reduced: end the job with [`super::abort_on_error`]); [`Error::Collective`] with no
    /// arrays if the progress thread ended without an answer (it panicked).
    pub fn wait(self) -> DonatedListResult<T> {
        self.done.recv().unwrap_or_else(|_| {
            Err(DonatedList {
                error: Error::Collective {
                    operation: self.operation,
                    failure: CollectiveFailure::ProgressThreadEnded,
                    reason: format!(
                        "the progress thread ended before started collective #{} finished; its arrays are lost",
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
