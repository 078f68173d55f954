//! Why a collective over MPI ranks did not run, as values a program can act on:
//! [`CollectiveFailure`] (the `failure` of [`Error::Collective`](crate::Error::Collective)) and
//! [`PeerRefusal`] (what another rank refused for). A file of its own, outside the
//! `distributed` module, because the error type holds it whether or not the `mpi` feature is
//! on; `distributed/header.rs` decides which one a collective gets.

/// Why a collective did not run on this rank. Which rank to look at is a field, so a program
/// can tell a bug in its own calls ([`CollectiveFailure::Mismatch`]) from another rank's
/// refusal ([`CollectiveFailure::Refused`], whose own error on that rank says more) or from how
/// MPI was started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CollectiveFailure {
    /// The ranks did not make the same call: another collective, element type, reduction,
    /// shape, root or list. `rank` is the first rank whose call differs from rank 0's (for a
    /// send or recv: the other side).
    Mismatch {
        /// The rank whose call differs.
        rank: usize,
    },
    /// `rank` refused its part before any data moved, for `refusal`; its own error, on that
    /// rank, says more.
    Refused {
        /// The rank that refused.
        rank: usize,
        /// What it refused for.
        refusal: PeerRefusal,
    },
    /// `rank` sent a header this build cannot read: every rank must run the same gpu-arena
    /// build.
    UnreadableHeader {
        /// The rank whose header could not be read.
        rank: usize,
    },
    /// MPI was already initialized in this process when `distributed::init` was called.
    AlreadyInitialized,
    /// MPI runs below `MPI_THREAD_MULTIPLE`, which started collectives need (their progress
    /// thread calls MPI).
    ThreadSupport,
    /// A started collective ended without an answer: it panicked on the collectives' progress
    /// thread (which goes on with the collectives queued after it), or the thread was gone.
    ProgressThreadEnded,
    /// The MPI library's `MPI_IN_PLACE` is unknown to the MPI bindings, so an in-place
    /// reduction cannot be asked for (gpu-arena takes the in-place paths only where it is
    /// known; the bindings' build decides).
    InPlaceUnknown,
}

/// What another rank refused a collective for, as it reported it in its header (the numbers
/// are the codes the header carries).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PeerRefusal {
    /// Its array belongs to another context or is pending in an unsubmitted recorder.
    #[error("its array belongs to another context or is used by an unsubmitted Sequence")]
    NotReady = 1,
    /// Its transfer guard refused the transfer.
    #[error("its transfer guard refused the transfer")]
    TransferGuard = 2,
    /// Its array's shape does not fit the operation.
    #[error("its shape does not fit the operation")]
    Shape = 3,
    /// It could not allocate memory for the result or the pipeline.
    #[error("it could not allocate memory for the result or the pipeline")]
    HostMemory = 4,
    /// One of its arguments is not valid.
    #[error("an argument is not valid")]
    InvalidArgument = 5,
    /// Anything else that failed before data moved (a device error, for one).
    #[error("it failed before moving any data")]
    Other = 6,
    /// Its MPI was not initialized with `MPI_THREAD_MULTIPLE`.
    #[error("its MPI was not initialized with MPI_THREAD_MULTIPLE")]
    ThreadSupport = 7,
}
