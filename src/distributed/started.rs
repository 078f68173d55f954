//! The started calls of [`Collectives`]: `start_all_reduce_many`, `start_all_reduce_mean_many`
//! and `start_broadcast_many` agree on the caller's thread, queue the data phase on the
//! group's progress thread (`progress.rs`) and return a [`PendingCollective`]. Apart from the
//! thread itself so that the thread, which `Collectives` holds, does not name `Collectives`.

use super::donated_list::DonatedList;
use super::element::{CollectiveElement, MeanElement};
use super::fused::{Link, ListCall};
use super::progress::{arrive_together, Job, PendingCollective, Progress};
use super::reduce_op::ReduceOp;
use super::Collectives;
use crate::array::DeviceArray;
use crate::backend::ThreadComm;
use crate::error::{CollectiveFailure, Error, Result};
use mpi::environment::Threading;
use mpi::traits::*;
use std::sync::mpsc;

const START_ALL_REDUCE: &str = "start_all_reduce_many";
const START_ALL_REDUCE_MEAN: &str = "start_all_reduce_mean_many";
const START_BROADCAST: &str = "start_broadcast_many";

impl Collectives {
    /// Starts [`Collectives::all_reduce_many`] and returns at once with a handle; the
    /// reduction runs on the group's progress thread while this thread goes on (e.g.
    /// recording the backward pass of earlier layers, as DDP overlaps gradient buckets).
    /// A single array is a list of one.
    ///
    /// ```no_run
    /// # use gpu_arena::distributed::{Collectives, ReduceOp};
    /// # fn f(group: &Collectives, ctx: &gpu_arena::Context) -> gpu_arena::Result<()> {
    /// let last_layer = vec![ctx.zeros::<f32>(&[64, 64])?, ctx.zeros::<f32>(&[64])?];
    /// let pending = group.start_all_reduce_many(last_layer, ReduceOp::Sum)?;
    /// // ... record and submit the backward pass of the earlier layers ...
    /// let last_layer = pending.wait()?;
    /// # Ok(()) }
    /// ```
    ///
    /// Needs MPI at `MPI_THREAD_MULTIPLE` ([`super::init`] asks for it). Every rank must start
    /// the same collectives in the same order (as with blocking ones): a start on one rank
    /// against the blocking call ([`Collectives::all_reduce_many`]) on another is a mismatch,
    /// refused on every rank with [`Error::Collective`] and the arrays intact. The agreement happens
    /// here, so errors before any data moves are returned here, on every rank, with every
    /// array intact: those of [`Collectives::all_reduce_many`], and [`Error::Collective`] when
    /// MPI runs below `MPI_THREAD_MULTIPLE` on any rank.
    pub fn start_all_reduce_many<T: CollectiveElement>(
        &self,
        arrays: Vec<DeviceArray<T>>,
        op: ReduceOp,
    ) -> std::result::Result<PendingCollective<T>, DonatedList<T>> {
        self.start_list(arrays, ListCall::all_reduce(op, START_ALL_REDUCE))
    }

    /// Starts [`Collectives::all_reduce_mean_many`]: as
    /// [`Collectives::start_all_reduce_many`] otherwise.
    pub fn start_all_reduce_mean_many<T: MeanElement>(
        &self,
        arrays: Vec<DeviceArray<T>>,
    ) -> std::result::Result<PendingCollective<T>, DonatedList<T>> {
        self.start_list(arrays, ListCall::mean(self.size(), START_ALL_REDUCE_MEAN))
    }

    /// Starts [`Collectives::broadcast_many`] from `root` and returns at once with a handle;
    /// the copies run on the group's progress thread (e.g. a model's parameters sent at
    /// start-up while the first batch is prepared). Waiting gives the arrays back, holding
    /// the root's values on every rank.
    ///
    /// ```no_run
    /// # use gpu_arena::distributed::Collectives;
    /// # fn f(group: &Collectives, ctx: &gpu_arena::Context) -> gpu_arena::Result<()> {
    /// let params = vec![ctx.zeros::<f32>(&[64, 64])?, ctx.zeros::<f32>(&[64])?];
    /// let pending = group.start_broadcast_many(params, 0)?;
    /// // ... prepare the first batch ...
    /// let params = pending.wait()?; // rank 0's parameters, on every rank
    /// # Ok(()) }
    /// ```
    ///
    /// Dropping the handle without waiting is as for [`Collectives::start_all_reduce_many`]:
    /// the broadcast still runs (every rank started it), then its arrays are freed. Errors at
    /// the start, on every rank with every array intact: those of
    /// [`Collectives::broadcast_many`] (lists that differ, a root that differs or is not a
    /// rank), and [`Error::Collective`] when MPI runs below `MPI_THREAD_MULTIPLE`.
    pub fn start_broadcast_many<T: CollectiveElement>(
        &self,
        arrays: Vec<DeviceArray<T>>,
        root: usize,
    ) -> std::result::Result<PendingCollective<T>, DonatedList<T>> {
        self.start_list(arrays, ListCall::broadcast(root, START_BROADCAST))
    }

    /// A started fused collective: the checks and the agreement here, then the call's data
    /// phase queued on the progress thread.
    fn start_list<T: CollectiveElement>(
        &self,
        arrays: Vec<DeviceArray<T>>,
        call: ListCall<T>,
    ) -> std::result::Result<PendingCollective<T>, DonatedList<T>> {
        let operation = call.operation;
        let threads = if mpi::environment::threading_support() == Threading::Multiple {
            Ok(())
        } else {
            Err(Error::Collective {
                operation,
                failure: CollectiveFailure::ThreadSupport,
                reason: "started collectives run MPI on a progress thread, which needs MPI_THREAD_MULTIPLE; start MPI with gpu_arena::distributed::init() (which asks for it) or MPI_Init_thread(MPI_THREAD_MULTIPLE)".into(),
            })
        };
        let wait = self.peer_wait;
        let (read, written) = match self.agree_list(&arrays, &call, threads, Some(wait)) {
            Ok(bytes) => bytes,
            Err(error) => return Err(DonatedList { error, arrays }),
        };
        // Every rank agreed, so every rank gets here: the first start duplicates the
        // communicator for the progress thread (a collective call) on every rank.
        let progress = match self.progress() {
            Ok(progress) => progress,
            Err(error) => return Err(DonatedList { error, arrays }),
        };
        let number = self
            .started
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (answer, done) = mpsc::sync_channel(1);
        let job: Job = Box::new(move |link: &Link<'_>| {
            arrive_together(link.comm, wait);
            let started = std::time::Instant::now();
            let result = match (call.data)(link, &arrays) {
                Ok(()) => {
                    super::count_transfers(link.ctx, read, written, started);
                    Ok(arrays)
                }
                Err(error) => Err(DonatedList { error, arrays }),
            };
            // A dropped handle: the arrays are freed here.
            let _ = answer.send(result);
        });
        if progress.submit(job).is_err() {
            // The thread is gone (it cannot be: it ends only when the group is dropped); the
            // job, and so its arrays, went with the refused send.
            return Err(DonatedList {
                error: Error::Collective {
                    operation,
                    failure: CollectiveFailure::ProgressThreadEnded,
                    reason: "the collectives' progress thread has ended".into(),
                },
                arrays: Vec::new(),
            });
        }
        Ok(PendingCollective {
            operation,
            number,
            done,
        })
    }

    /// The progress thread, started on first use with its own duplicate of the communicator.
    fn progress(&self) -> Result<&Progress> {
        if let Some(progress) = self.progress.get() {
            return Ok(progress);
        }
        let spawned = Progress::spawn(
            ThreadComm::new(self.comm.duplicate()),
            self.ctx.inner.clone(),
            self.scratch.clone(),
            self.host_bytes_peak.clone(),
        )?;
        Ok(self.progress.get_or_init(|| spawned))
    }
}
