//! The failure policy: a rank that fails must take the job down with it, so that no other
//! rank waits forever in its next collective.

use mpi::traits::*;

/// Exit status `abort_on_error` hands to `MPI_Abort` (and so, with Open MPI, to `mpirun`).
pub const ABORT_STATUS: i32 = 17;

/// Gives back the value of `result`; on an error, prints it (with this rank's number) to
/// standard error and ends **every** rank of the job with `MPI_Abort` (status
/// [`ABORT_STATUS`]), as JAX's multi-process runtime does when one process fails.
///
/// Why: MPI has no way to tell the other ranks that one of them will not come to the next
/// collective; they would wait forever. `mpirun` ends the whole job, with a non-zero status,
/// when one rank aborts (or is killed). Wrap the results of the steps whose failure should end
/// the job; handle the others yourself (a collective that fails *before* moving data returns
/// the same error on every rank, so every rank can carry on in step).
///
/// ```no_run
/// # use gpu_arena::distributed::{self, abort_on_error, Collectives, ReduceOp};
/// let universe = distributed::init()?;
/// let world = universe.world();
/// let ctx = abort_on_error(&world, gpu_arena::Context::from_env());
/// # Ok::<(), gpu_arena::Error>(())
/// ```
pub fn abort_on_error<C: Communicator, V, E: std::fmt::Display>(
    comm: &C,
    result: std::result::Result<V, E>,
) -> V {
    match result {
        Ok(value) => value,
        Err(error) => {
            eprintln!(
                "gpu-arena: rank {} of {} failed: {error}; aborting the MPI job",
                comm.rank(),
                comm.size()
            );
            comm.abort(ABORT_STATUS)
        }
    }
}
