//! The started calls of [`Collectives`]: `start_all_reduce_many`, `start_all_reduce_mean_many`
//! and `start_broadcast_many` check their arrays, queue the agreement and the data phase on
//! the group's progress thread (`progress.rs`) and return a [`PendingCollective`]; and the
//! wait of blocking calls for the collectives started before them. Apart from the thread
//! itself so that the thread, which `Collectives` holds, does not name `Collectives`.

use super::donated_list::DonatedList;
use super::element::{CollectiveElement, MeanElement};
use super::fused::{Link, ListCall};
use super::header::agree_waiting;
use super::progress::{Job, PendingCollective, Progress};
use super::reduce_op::ReduceOp;
use super::Collectives;
use crate::array::DeviceArray;
use crate::error::{CollectiveFailure, Error, Result};
use mpi::environment::Threading;
use std::sync::mpsc;

const START_ALL_REDUCE: &str = "start_all_reduce_many";
const START_ALL_REDUCE_MEAN: &str = "start_all_reduce_mean_many";
const START_BROADCAST: &str = "start_broadcast_many";

impl Collectives {
    /// Starts [`Collectives::all_reduce_many`] and returns at once with a handle; the
    /// reduction runs on the group's progress thread while this thread goes on (e.g.
    /// recording the backward pass of earlier layers, as DDP overlaps gradient buckets).
    /// A single array is passed as a list of one (`vec![x]`): a list call still, which the
    /// other ranks meet with the same list call, not with [`Collectives::all_reduce`].
    /// Dropping the handle without waiting does not cancel the collective: it still runs (every
    /// rank started it), then its arrays are freed ([`PendingCollective`]).
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
    /// the same collectives in the same order, counted with the blocking ones: a start on one
    /// rank against the blocking call ([`Collectives::all_reduce_many`]) on another is a
    /// mismatch, refused on both with [`Error::Collective`] and the arrays intact.
    ///
    /// The ranks agree on the progress thread, so this returns without waiting for them.
    /// Errors, every array intact:
    /// - here, this rank's own refusals: those of [`Collectives::all_reduce_many`]'s local
    ///   checks (an array of another context or used by an unsubmitted sequence, the transfer
    ///   guard), and [`Error::Collective`] with [`CollectiveFailure::ThreadSupport`] when MPI
    ///   runs below `MPI_THREAD_MULTIPLE` here;
    /// - from [`PendingCollective::wait`], what the agreement finds: another rank's refusal
    ///   ([`CollectiveFailure::Refused`]) or a call that differs
    ///   ([`CollectiveFailure::Mismatch`]).
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
    /// the broadcast still runs (every rank started it), then its arrays are freed. Errors, as
    /// for [`Collectives::start_all_reduce_many`], every array intact: here, this rank's own
    /// refusals (a root that is not a rank, the local checks, MPI below
    /// `MPI_THREAD_MULTIPLE`); from [`PendingCollective::wait`], lists or roots that differ
    /// between ranks and other ranks' refusals.
    pub fn start_broadcast_many<T: CollectiveElement>(
        &self,
        arrays: Vec<DeviceArray<T>>,
        root: usize,
    ) -> std::result::Result<PendingCollective<T>, DonatedList<T>> {
        self.start_list(arrays, ListCall::broadcast(root, START_BROADCAST))
    }

    /// A started fused collective: the checks here, then the agreement and the data phase
    /// queued on the progress thread. A rank that refuses its part agrees here instead (after
    /// the collectives queued before it, so that every rank's calls still meet in order) and
    /// gives its arrays back at once; the other ranks learn of it in their agreement.
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
        let poll = self.peer_wait.poll();
        let (header, prepared) = self.prepare_list(&arrays, &call, threads, true);
        let local = prepared.and_then(|bytes| Ok((self.progress()?, bytes)));
        let (progress, bytes) = match local {
            Ok(ready) => ready,
            Err(refusal) => {
                self.quiet();
                // An agreement on a refusal ends in an error: this rank's own.
                let refused = Err::<std::convert::Infallible, _>(refusal);
                let error = match agree_waiting(self.comm(), operation, &header, refused, poll) {
                    Ok(never) => match never {},
                    Err(error) => error,
                };
                return Err(DonatedList { error, arrays });
            }
        };
        let number = self
            .started
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (answer, done) = mpsc::sync_channel(1);
        let job: Job = Box::new(move |link: &Link<'_>| {
            let result = agree_waiting(link.comm, operation, &header, Ok(bytes), poll).and_then(
                |(read, written)| {
                    let started = std::time::Instant::now();
                    (call.data)(link, &arrays)?;
                    super::count_transfers(link.ctx, arrays.len(), read, written, started);
                    Ok(())
                },
            );
            // A dropped handle: the arrays are freed here.
            let _ = answer.send(match result {
                Ok(()) => Ok(arrays),
                Err(error) => Err(DonatedList { error, arrays }),
            });
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

    /// Returns once every collective started on this group so far has run, so that a
    /// collective called on this thread next meets the other ranks' calls in program order.
    pub(super) fn quiet(&self) {
        if let Some(progress) = self.progress.get() {
            progress.quiet();
        }
    }

    /// The progress thread, started on first use, on the group's communicator.
    fn progress(&self) -> Result<&Progress> {
        if let Some(progress) = self.progress.get() {
            return Ok(progress);
        }
        let spawned = Progress::spawn(
            self.comm.clone(),
            self.ctx.inner.clone(),
            self.scratch.clone(),
            self.host_bytes_peak.clone(),
        )?;
        Ok(self.progress.get_or_init(|| spawned))
    }
}
