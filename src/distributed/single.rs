//! The single-array collectives `all_reduce`, `all_reduce_mean` and `broadcast`: the fused
//! list calls of `many.rs` on a list of one, under their own names and headers (a refusal
//! describes the array's shape, and a rank that calls `all_reduce` against one that calls
//! `broadcast` is told so by name), so that one data path serves both.

use super::donated_list::{DonatedList, DonatedListResult};
use super::fused::ListCall;
use super::{CollectiveElement, Collectives, MeanElement, ReduceOp};
use crate::array::DeviceArray;
use crate::backend::in_place_sentinel;
use crate::donated::{Donated, DonatedResult};

impl Collectives {
    /// Reduces the arrays of every rank element by element with `op`, leaving the result in
    /// the donated array on every rank (`jax.lax.psum` and friends; MPI's `MPI_Allreduce`).
    ///
    /// ```no_run
    /// # use gpu_arena::distributed::{Collectives, ReduceOp};
    /// # fn f(group: &Collectives, ctx: &gpu_arena::Context) -> gpu_arena::Result<()> {
    /// let grads = ctx.device_put(&[1.0f32, 2.0, 3.0], &[3])?;
    /// let grads = group.all_reduce(grads, ReduceOp::Sum)?; // the sum over ranks
    /// # Ok(()) }
    /// ```
    ///
    /// Errors (every rank returns one, and no data moves): the ranks called different
    /// collectives, element types or shapes ([`crate::error::Error::Collective`], naming the rank and
    /// the difference); this rank's array is another context's or pending in an unsubmitted
    /// Sequence, or the transfer guard refuses (this rank returns that error, the others
    /// [`crate::error::Error::Collective`]); host memory for the pipeline's buffers. The array comes
    /// back intact in [`Donated`] then. A device error after the agreement (device lost)
    /// gives the array back partly reduced: end the job with [`super::abort_on_error`].
    pub fn all_reduce<T: CollectiveElement>(
        &self,
        array: DeviceArray<T>,
        op: ReduceOp,
    ) -> DonatedResult<T> {
        one(self.run_list(vec![array], ListCall::all_reduce(op, "all_reduce").single()))
    }

    /// The mean over ranks (`jax.lax.pmean`): the sum, divided by [`Collectives::size`] on
    /// the way back to the device. As [`Collectives::all_reduce`] otherwise.
    pub fn all_reduce_mean<T: MeanElement>(&self, array: DeviceArray<T>) -> DonatedResult<T> {
        let call = ListCall::mean(self.size(), "all_reduce_mean").single();
        one(self.run_list(vec![array], call))
    }

    /// Copies the array of rank `root` into the donated array of every other rank (the root's
    /// is given back unchanged): MPI's `MPI_Bcast`, e.g. initial parameters from rank 0.
    ///
    /// Errors as [`Collectives::all_reduce`]; besides, `root` must be a rank of the group
    /// ([`crate::Error::Index`] with [`crate::error::IndexRefusal::Root`] on every rank that
    /// passed a wrong one) and the same
    /// on every rank ([`crate::Error::Collective`]).
    pub fn broadcast<T: CollectiveElement>(
        &self,
        array: DeviceArray<T>,
        root: usize,
    ) -> DonatedResult<T> {
        one(self.run_list(vec![array], ListCall::broadcast(root, "broadcast").single()))
    }

    /// Whether [`Collectives::all_reduce`] reduces each chunk in place (`MPI_IN_PLACE`): on
    /// the array's own mapping when the arena is zero-copy, else in staging or on a host chunk
    /// between the staging copies. True on Open MPI, MPICH and the libraries built on MPICH
    /// (their `MPI_IN_PLACE` is known); on any other MPI library each chunk is reduced into a
    /// separate host buffer and copied back, which gives the same results a little slower.
    pub fn reduces_in_place(&self) -> bool {
        in_place_sentinel().is_some()
    }
}

/// The one array of a list call's result (the list call gives back the list it was given).
fn one<T: bytemuck::Pod>(result: DonatedListResult<T>) -> DonatedResult<T> {
    let single = |mut arrays: Vec<DeviceArray<T>>| {
        arrays
            .pop()
            .expect("a list call gives back the list of one it was given")
    };
    match result {
        Ok(arrays) => Ok(single(arrays)),
        Err(DonatedList { error, arrays }) => Err(Donated {
            error,
            array: single(arrays),
        }),
    }
}
