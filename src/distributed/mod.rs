//! Collectives over device arrays across processes and machines, on MPI (cargo feature `mpi`).
//!
//! JAX runs one process per host and joins them with `jax.distributed`; NCCL and RCCL cannot
//! see Vulkan memory, and MPI is what every cluster (and every laptop) already runs. So
//! [`Collectives`] works on the user's own MPI communicator (`MPI_COMM_WORLD` from [`init`],
//! or any split of it) and moves [`DeviceArray`]s with MPI's own collectives:
//!
//! - [`Collectives::all_reduce`] (sum, min, max, product) and
//!   [`Collectives::all_reduce_mean`], in place on a donated array (`jax.lax.psum`/`pmean`);
//! - [`Collectives::broadcast`] from a root, in place;
//! - [`Collectives::all_reduce_many`], [`Collectives::all_reduce_mean_many`] and
//!   [`Collectives::broadcast_many`]: one fused collective over a list of arrays (a model's
//!   gradients or parameters), one agreement round and one MPI call per fusion chunk instead
//!   of one per array (Horovod's tensor fusion);
//! - [`Collectives::start_all_reduce_many`], [`Collectives::start_all_reduce_mean_many`] and
//!   [`Collectives::start_broadcast_many`]: started on a progress thread, waited through a
//!   [`PendingCollective`], so that gradient buckets are reduced while the backward pass goes
//!   on (DDP's overlap), and parameters sent while the first batch is prepared;
//! - [`Collectives::all_gather`] (`[ranks, ...shape]`) and [`Collectives::reduce_scatter`]
//!   (the first dimension split across ranks);
//! - [`Collectives::send`] / [`Collectives::recv`] for pipeline parallelism;
//! - [`Collectives::barrier`].
//!
//! **What goes through host memory, and why.** MPI reads and writes host memory (Vulkan
//! memory cannot be registered with the network), so every byte leaves the device and comes
//! back. On UMA devices with zero-copy (integrated GPUs, lavapipe) MPI reads the array's
//! mapping directly and results are written back into it; elsewhere chunks go through the
//! context's staging pool. Either way a collective works in chunks of
//! [`PIPELINE_CHUNK_BYTES`]. An all-reduce (of one array or of a fused list: the single-array
//! calls are list calls of one) reduces each chunk in place (`MPI_IN_PLACE`, on Open MPI and
//! MPICH-based libraries): on the array's mapping itself when zero-copy, with no host copy;
//! else in the staging pool's own upload buffers, chunk k+1 coming off the device while MPI
//! reduces chunk k (`staged.rs`), or on one host chunk between the staging copies for the mean
//! and for chunks larger than a staging buffer. On other MPI libraries each chunk is reduced
//! into a second host buffer and copied back. Host buffers stay at three chunks or fewer per
//! collective (all_gather and reduce_scatter: one chunk split across the ranks, plus one)
//! whatever the array's size;
//! [`Collectives::host_bytes_peak`] reports the most used so far.
//!
//! **Every rank agrees or none proceeds.** Before any data moves, ranks compare a small
//! header (operation, reduction, element type, shape, root, and whether the rank refused its
//! part, e.g. its transfer guard said no), in one tiny all-reduce of fixed size (see
//! `header.rs`). A difference makes every rank return [`Error::Collective`] naming it, with
//! the rank that differs in its `failure` ([`CollectiveFailure::Mismatch`]); a rank that
//! refused returns its own error and the others [`Error::Collective`] with that rank and what
//! it refused for ([`CollectiveFailure::Refused`]). Nothing moved, so a donated array comes
//! back intact in [`Donated`](crate::Donated). A started collective agrees on the progress
//! thread, so its refusal comes from [`PendingCollective::wait`] (a refusal of this rank's own
//! comes from the start itself), with every array intact.
//!
//! **Collectives are explicit transfers**: each is checked by the transfer guard (the
//! device-to-host direction for what it reads, host-to-device for what it writes) and counted
//! in [`crate::Context::transfer_stats`] and on the timeline. An array used by an unsubmitted
//! [`crate::Sequence`] is refused as single ops refuse it: one the sequence writes always,
//! one it only reads where the collective writes it (`all_reduce*`, `broadcast*` on ranks
//! other than the root, `recv`; `all_gather`, `reduce_scatter`, `send` and the root only
//! read).
//!
//! **Threads.** [`init`] asks MPI for `MPI_THREAD_MULTIPLE`: started collectives agree and
//! move their data on the group's progress thread (see `progress.rs` for why a thread rather
//! than MPI's non-blocking collectives) while the caller's thread may call MPI too; a blocking
//! collective waits until the collectives started before it have run, so that every rank's
//! calls meet in program order. Blocking collectives need only `MPI_THREAD_SINGLE` (from the
//! thread that made the group); a start on an MPI below `MPI_THREAD_MULTIPLE` is refused: on
//! that rank by the start, on the others at `wait()`.
//!
//! **What a call costs.** Every call pays one agreement round: one all-reduce of twice the
//! header's words (a few microseconds on shared memory), whatever the number of ranks; a
//! fused call pays it once for its whole list. Then, on zero-copy, only MPI's own work on the
//! mappings; on staging, per chunk, a device copy into readback staging (a
//! submission and a wait) before MPI, one host copy into upload staging, and a device copy
//! back after it (submitted, not waited for). Measured with `bench_collectives --json` (f32
//! sum, 2 ranks on 2 cores shared with other builds at load average about 9, Open MPI 4.1,
//! lavapipe; medians of three runs, BENCHMARKS.md has every figure):
//!
//! | bytes  | zero-copy       | MPI on host vectors | staging         | MPI on host vectors |
//! |--------|-----------------|---------------------|-----------------|---------------------|
//! | 4 KiB  | 0.005–0.009 ms  | 0.003–0.006 ms      | 0.21–0.29 ms    | 0.003–0.005 ms      |
//! | 1 MiB  | 0.24–0.65 ms    | 0.35–0.76 ms        | 0.79–0.86 ms    | 0.26–0.53 ms        |
//! | 64 MiB | 190–280 ms      | 329–396 ms          | 360–460 ms      | 308–370 ms          |
//!
//! So on zero-copy a call costs MPI's own time or less (in place, MPI has no copy to make);
//! on staging a small call costs the device round trip (as much as `device_get` plus
//! `device_put` of the same bytes), and a large one MPI's time plus the copies. Many small
//! arrays cost about one array of their total size when fused, where separate calls pay the
//! fixed costs once per array (64 arrays of 64 KiB, best runs: fused 1.8–2.9 ms zero-copy and
//! 4.3–11.9 ms staging; 64 separate calls 2.7–3.3 ms and 15.1–17.6 ms; one 4 MiB array
//! 1.6–2.5 ms and 4.6–5.3 ms).
//!
//! **Failures.** rsmpi does not return MPI's error codes, so MPI keeps its default handler
//! (`MPI_ERRORS_ARE_FATAL`): an MPI failure (a peer that died, a network error) ends the
//! whole job rather than returning a wrong result. A rank that fails in *your* code (or in a
//! device error after the header agreed) must not leave the others waiting in the next
//! collective: wrap results in [`abort_on_error`], which calls `MPI_Abort` so that `mpirun`
//! ends every rank with a non-zero status, as JAX's multi-process runtime does.
//!
//! A send must meet a recv, and a collective the same collective, on every rank: a rank that
//! calls a send while its peer calls a collective waits, as with MPI itself.
//!
//! Files:
//! - `mod.rs`: [`Collectives`], [`init`], and the checks every collective makes first.
//! - `element.rs`: [`CollectiveElement`], the element types and their MPI datatypes.
//! - `reduce_op.rs`: [`ReduceOp`].
//! - `header.rs`: the header exchange that makes every rank agree before data moves.
//! - `array_io.rs`: reading and writing an array's chunks (mapping or staging), chunk size.
//! - `many.rs`: the blocking calls over lists (`all_reduce_many`, `all_reduce_mean_many`,
//!   `broadcast_many`) and the agreement they share with the started calls.
//! - `fused.rs`: the fused data phases over lists, their fusion chunks, and the call
//!   (`ListCall`) that a blocking and a started fused collective share.
//! - `staged.rs`: an all-reduce of one chunk through the staging pool's buffers, with no host
//!   chunk (arrays the host cannot map).
//! - `started.rs`: the started calls (`start_*_many`), which queue on the progress thread,
//!   and the wait of blocking calls for them.
//! - `progress.rs`: [`PendingCollective`] and the progress thread.
//! - `peer_wait.rs`: how the progress thread waits for the other ranks ([`ARRIVAL_POLL`]).
//! - `donated_list.rs`: [`DonatedList`], a list of donated arrays given back with an error.
//! - `single.rs`: the single-array calls (`all_reduce`, `all_reduce_mean`, `broadcast`), list
//!   calls of one array.
//! - `all_gather.rs`, `reduce_scatter.rs`, `point_to_point.rs`, `barrier.rs`: one collective
//!   each.
//! - `failure.rs`: [`abort_on_error`], the failure policy.

mod all_gather;
mod array_io;
mod barrier;
mod donated_list;
mod element;
mod failure;
mod fused;
mod header;
mod many;
mod peer_wait;
mod point_to_point;
mod progress;
mod reduce_op;
mod reduce_scatter;
mod single;
mod staged;
mod started;

pub use array_io::PIPELINE_CHUNK_BYTES;
pub use donated_list::{DonatedList, DonatedListResult};
pub use element::{CollectiveElement, MeanElement};
pub use failure::{abort_on_error, ABORT_STATUS};
pub use mpi;
pub use peer_wait::ARRIVAL_POLL;
pub use progress::PendingCollective;
pub use reduce_op::ReduceOp;

use crate::array::DeviceArray;
use crate::config::TransferDirection;
use crate::context::Context;
use crate::error::{CollectiveFailure, Error, Result};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// Starts MPI (`MPI_Init_thread`, asking for `MPI_THREAD_MULTIPLE`, which started
/// collectives need) for a program that has no MPI setup of its own: one line, and the world
/// communicator is `universe.world()`. Keep the universe alive until the end of `main`
/// (dropping it calls `MPI_Finalize`). An MPI library that grants less still runs every
/// blocking collective; starts are then refused ([`Collectives::start_all_reduce_many`]).
///
/// ```no_run
/// use gpu_arena::distributed::{self, Collectives, ReduceOp};
/// let universe = distributed::init()?;
/// let ctx = gpu_arena::Context::from_env()?;
/// let group = Collectives::new(&ctx, &universe.world());
/// let grads = ctx.device_put(&[1.0f32, 2.0], &[2])?;
/// let grads = group.all_reduce(grads, ReduceOp::Sum)?;
/// # Ok::<(), gpu_arena::Error>(())
/// ```
///
/// Errors: [`Error::Collective`] when MPI was already started in this process (use the
/// communicator you have: pass it to [`Collectives::new`]).
pub fn init() -> Result<mpi::environment::Universe> {
    mpi::initialize_with_threading(mpi::environment::Threading::Multiple)
        .map(|(universe, _granted)| universe)
        .ok_or_else(|| Error::Collective {
        operation: "init",
        failure: CollectiveFailure::AlreadyInitialized,
        reason: "MPI is already initialized in this process; pass your communicator (e.g. universe.world()) to Collectives::new instead".into(),
    })
}

/// Collectives of one context's arrays over a group of MPI ranks.
///
/// Made from any rsmpi communicator (the world, or a split of it); it keeps a private
/// duplicate (`MPI_Comm_dup`), so its messages never mix with the program's own MPI traffic.
/// Every rank of the communicator must make it (duplicating is collective), and then call the
/// same collectives in the same order, as with MPI: started and blocking ones count alike, in
/// the order this thread calls them (a blocking collective waits until those started before
/// it have run).
///
/// Used by one thread, as its communicator is (neither `Send` nor `Sync`); the group's
/// progress thread, which runs started collectives, is its own.
pub struct Collectives {
    /// The progress thread of started collectives, made on the first start (first field:
    /// dropped first, so the collectives still queued finish before anything else goes).
    progress: OnceLock<progress::Progress>,
    ctx: Context,
    /// The group's communicator, shared with the progress thread.
    comm: Arc<crate::backend::SharedComm>,
    /// Keeps `Collectives` on the thread that made it (the communicator's rule; the shared
    /// wrapper is `Send` and `Sync` only for the progress thread).
    _one_thread: std::marker::PhantomData<*const ()>,
    /// The most host-buffer bytes one collective has used (shared with the progress thread).
    host_bytes_peak: Arc<AtomicU64>,
    /// All-reduce's chunk buffers, kept between calls (shared with the progress thread).
    scratch: Arc<array_io::Scratch>,
    /// Collectives started so far (numbers the handles).
    started: AtomicU64,
    /// How started collectives wait for the other ranks on this machine.
    peer_wait: peer_wait::PeerWait,
}

impl Collectives {
    /// Collectives of `ctx`'s arrays over the ranks of `comm` (collective: every rank of
    /// `comm` calls it).
    pub fn new<C: Communicator>(ctx: &Context, comm: &C) -> Self {
        let comm = comm.duplicate();
        Self {
            peer_wait: peer_wait::PeerWait::for_group(&comm, ctx.config().validation),
            progress: OnceLock::new(),
            ctx: ctx.clone(),
            comm: Arc::new(crate::backend::SharedComm::new(comm)),
            _one_thread: std::marker::PhantomData,
            host_bytes_peak: Default::default(),
            scratch: Default::default(),
            started: AtomicU64::new(0),
        }
    }

    /// The group's communicator.
    fn comm(&self) -> &SimpleCommunicator {
        &self.comm
    }

    /// This process's rank in the group (0 to `size() - 1`).
    pub fn rank(&self) -> usize {
        self.comm.rank() as usize
    }

    /// The number of ranks in the group.
    pub fn size(&self) -> usize {
        self.comm.size() as usize
    }

    /// The context whose arrays these collectives move.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The most bytes of host buffers one collective has used so far: at most three
    /// [`PIPELINE_CHUNK_BYTES`] chunks (all_gather and reduce_scatter: a chunk split across
    /// ranks, plus one), whatever the arrays' sizes. All-reduce keeps its three between calls
    /// (freed with the `Collectives`), as MPI programs keep their buffers, rather than fault
    /// in fresh pages every step. The staging pool's own buffers
    /// ([`crate::ArenaConfig::staging_bytes`] each) are not counted here.
    pub fn host_bytes_peak(&self) -> u64 {
        self.host_bytes_peak.load(Ordering::Relaxed)
    }

    /// Ends the whole MPI job if `result` is an error, after printing it (see
    /// [`abort_on_error`]); gives back the value otherwise.
    pub fn abort_on_error<V, E: std::fmt::Display>(&self, result: std::result::Result<V, E>) -> V {
        abort_on_error(self.comm(), result)
    }

    fn note_host_bytes(&self, bytes: usize) {
        self.host_bytes_peak
            .fetch_max(bytes as u64, Ordering::Relaxed);
    }

    /// The checks a collective makes on this rank before the header exchange: the array is
    /// this context's and no unsubmitted Sequence keeps it from `access` (the collective's
    /// own use of it), and the transfer guard allows the bytes read from (`read`) and written
    /// to (`written`) the device.
    fn check_local<T: bytemuck::Pod>(
        &self,
        array: &DeviceArray<T>,
        access: crate::recorder::Access,
        operation: &'static str,
        read: Option<u64>,
        written: Option<u64>,
    ) -> Result<()> {
        array.check_ready(&self.ctx.inner, access, operation)?;
        if let Some(bytes) = read {
            self.ctx
                .inner
                .guard(TransferDirection::DeviceToHost, bytes, operation, true)?;
        }
        if let Some(bytes) = written {
            self.ctx
                .inner
                .guard(TransferDirection::HostToDevice, bytes, operation, true)?;
        }
        Ok(())
    }

    /// Counts a finished collective of one array in the transfer statistics and on the
    /// timeline.
    fn count(&self, read: u64, written: u64, started: std::time::Instant) {
        count_transfers(&self.ctx.inner, 1, read, written, started);
    }

    /// What a data phase on this thread works with.
    fn link<'a>(&'a self, comm: &'a SimpleCommunicator) -> fused::Link<'a> {
        fused::Link {
            ctx: &self.ctx.inner,
            comm,
            scratch: &self.scratch,
            host_bytes_peak: &self.host_bytes_peak,
        }
    }
}

/// Counts a finished collective of `arrays` arrays in `ctx`'s transfer statistics (one
/// transfer per array, as `device_get_many` counts) and on its timeline.
fn count_transfers(
    ctx: &crate::context::ContextInner,
    arrays: usize,
    read: u64,
    written: u64,
    started: std::time::Instant,
) {
    let arrays = arrays as u64;
    if read > 0 {
        ctx.count_transfer(TransferDirection::DeviceToHost, true, arrays, read, started);
    }
    if written > 0 {
        ctx.count_transfer(
            TransferDirection::HostToDevice,
            true,
            arrays,
            written,
            started,
        );
    }
}
