//! The blocking calls of [`Collectives`] over lists of arrays: `all_reduce_many`,
//! `all_reduce_mean_many` and `broadcast_many`, with the agreement and the data phase they
//! share with the started calls. The fused data phases themselves, and the `ListCall` that
//! describes each call to both, are `fused.rs`, below both these calls and the progress
//! thread that runs started ones.

use super::donated_list::{DonatedList, DonatedListResult};
use super::element::{CollectiveElement, MeanElement};
use super::fused::{ListCall, BROADCAST};
use super::header::{agree, Header};
use super::reduce_op::ReduceOp;
use super::Collectives;
use crate::array::DeviceArray;
use crate::config::TransferDirection;
use crate::error::{Error, IndexRefusal, Result};
use crate::recorder::Access;

const ALL_REDUCE: &str = "all_reduce_many";
const ALL_REDUCE_MEAN: &str = "all_reduce_mean_many";

impl Collectives {
    /// Reduces every array of `arrays` across ranks with `op`, in place, as one fused
    /// collective: what [`Collectives::all_reduce`] does to each, with one agreement round for
    /// the whole list and the arrays packed into [`super::PIPELINE_CHUNK_BYTES`] chunks, so
    /// that many small arrays (a model's gradients) cost about what one array of their total
    /// size costs (Horovod's tensor fusion). Arrays may have any shapes, zero-size included,
    /// and any memory kind (each keeps its own); one element type per call (call once per
    /// type for mixed lists). An empty list on every rank is an agreement round and nothing
    /// else (`Ok` of an empty list).
    ///
    /// ```no_run
    /// # use gpu_arena::distributed::{Collectives, ReduceOp};
    /// # fn f(group: &Collectives, ctx: &gpu_arena::Context) -> gpu_arena::Result<()> {
    /// let weights = ctx.device_put(&[1.0f32; 64], &[8, 8])?;
    /// let bias = ctx.device_put(&[1.0f32; 8], &[8])?;
    /// let reduced = group.all_reduce_many(vec![weights, bias], ReduceOp::Sum)?;
    /// let [weights, bias]: [_; 2] = reduced.try_into().expect("as many as were passed");
    /// # Ok(()) }
    /// ```
    ///
    /// Errors (every rank returns one, and no data moves; every array comes back intact in
    /// [`DonatedList`], in the order passed): the ranks passed lists that differ in length,
    /// element type, reduction or any array's shape ([`Error::Collective`], naming the first
    /// difference: e.g. which array's shape); this rank refused (an array of another context
    /// or pending in an unsubmitted Sequence, the transfer guard, host memory: this rank
    /// returns that error, the others [`Error::Collective`] naming it). A device error after
    /// the agreement gives the arrays back partly reduced: end the job with
    /// [`super::abort_on_error`].
    pub fn all_reduce_many<T: CollectiveElement>(
        &self,
        arrays: Vec<DeviceArray<T>>,
        op: ReduceOp,
    ) -> DonatedListResult<T> {
        self.run_list(arrays, ListCall::all_reduce(op, ALL_REDUCE))
    }

    /// The mean over ranks of every array of `arrays` (`jax.lax.pmean` over a list; DDP's
    /// gradient averaging): [`Collectives::all_reduce_many`]'s sum divided by
    /// [`Collectives::size`] on the way back to the device. Errors as `all_reduce_many`.
    pub fn all_reduce_mean_many<T: MeanElement>(
        &self,
        arrays: Vec<DeviceArray<T>>,
    ) -> DonatedListResult<T> {
        self.run_list(arrays, ListCall::mean(self.size(), ALL_REDUCE_MEAN))
    }

    /// Copies every array of rank `root`'s list into the arrays of every other rank's list,
    /// in place, as one fused collective (e.g. a model's parameters at start-up, as DDP does
    /// when it wraps a module). Errors as [`Collectives::all_reduce_many`]; besides, `root`
    /// must be a rank of the group ([`Error::Index`], [`IndexRefusal::Root`]) and the same on every rank
    /// ([`Error::Collective`]).
    pub fn broadcast_many<T: CollectiveElement>(
        &self,
        arrays: Vec<DeviceArray<T>>,
        root: usize,
    ) -> DonatedListResult<T> {
        self.run_list(arrays, ListCall::broadcast(root, BROADCAST))
    }

    /// A blocking fused collective: the checks, the agreement, then the call's data phase on
    /// this thread.
    pub(super) fn run_list<T: CollectiveElement>(
        &self,
        arrays: Vec<DeviceArray<T>>,
        call: ListCall<T>,
    ) -> DonatedListResult<T> {
        let started = std::time::Instant::now();
        let (header, prepared) = self.prepare_list(&arrays, &call, Ok(()), false);
        self.quiet();
        let (read, written) = match agree(self.comm(), call.operation, &header, prepared) {
            Ok(bytes) => bytes,
            Err(error) => return Err(DonatedList { error, arrays }),
        };
        let link = self.link(self.comm());
        match (call.data)(&link, &arrays) {
            Ok(()) => {
                super::count_transfers(&self.ctx.inner, arrays.len(), read, written, started);
                Ok(arrays)
            }
            Err(error) => Err(DonatedList { error, arrays }),
        }
    }

    /// A fused call's header for the agreement of every rank, and its local checks (every
    /// array ready and this context's, the transfer guard for the whole list's bytes, `extra`):
    /// the bytes it reads from and writes to the device on this rank, or this rank's refusal.
    /// `started`: a start, whose header says so (a blocking call on another rank then differs).
    pub(crate) fn prepare_list<T: CollectiveElement>(
        &self,
        arrays: &[DeviceArray<T>],
        call: &ListCall<T>,
        extra: Result<()>,
        started: bool,
    ) -> (Header, Result<(u64, u64)>) {
        let ListCall {
            kind,
            op,
            root,
            operation,
            ..
        } = *call;
        let bytes: u64 = arrays.iter().map(|a| a.size_in_bytes()).sum();
        let broadcast = kind.has_root();
        let (read, written) = match (broadcast, root == self.rank()) {
            (false, _) => (bytes, bytes),
            (true, true) => (bytes, 0),
            (true, false) => (0, bytes),
        };
        // A start's header says it was started, so that a blocking call on another rank is a
        // mismatch.
        let (op, root_word) = match broadcast {
            true => (0, root as u64),
            false => (op.code(), 0),
        };
        let header = match (kind.is_list(), arrays) {
            // A single-array call: the array's own shape.
            (false, [array]) => Header::of(kind, op, T::CODE, array.shape(), root_word),
            _ => Header::list(
                if started { kind.started() } else { kind },
                op,
                T::CODE,
                arrays.iter().map(|a| a.shape().to_vec()).collect(),
                root_word,
            ),
        };
        let prepared = extra
            .and_then(|()| {
                if broadcast && root >= self.size() {
                    return Err(Error::Index {
                        operation,
                        refusal: IndexRefusal::Root {
                            root,
                            ranks: self.size(),
                        },
                    });
                }
                Ok(())
            })
            .and_then(|()| {
                // A broadcast's root only reads its arrays; every other rank writes them.
                let access = match broadcast && root == self.rank() {
                    true => Access::Read,
                    false => Access::Write,
                };
                for array in arrays {
                    array.check_ready(&self.ctx.inner, access, operation)?;
                }
                for (direction, bytes) in [
                    (TransferDirection::DeviceToHost, read),
                    (TransferDirection::HostToDevice, written),
                ] {
                    if bytes > 0 {
                        self.ctx.inner.guard(direction, bytes, operation, true)?;
                    }
                }
                Ok((read, written))
            });
        (header, prepared)
    }
}
