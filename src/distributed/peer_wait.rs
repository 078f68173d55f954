//! How a group's started collectives wait for the other ranks: in MPI's own wait where every
//! rank on the machine has a core, sleeping between tests where ranks outnumber cores (the
//! progress thread's docs, in `progress.rs`, say why and what it cost).

use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

/// How long a started collective sleeps between tests when it waits for the other ranks on a
/// machine with fewer cores than ranks (elsewhere it waits in MPI): short beside a collective worth
/// starting (tens of microseconds on shared memory and more over a network), long enough that
/// waiting for a late rank costs the other work almost no CPU. Horovod's background thread
/// sleeps 1 ms between rounds (`HOROVOD_CYCLE_TIME`).
pub const ARRIVAL_POLL: std::time::Duration = std::time::Duration::from_micros(50);

/// The variable in which Open MPI's `mpirun` tells its ranks whether it placed more ranks on
/// a machine than it has cores ("1") or not ("0").
const OPEN_MPI_OVERSUBSCRIBED: &str = "OMPI_MCA_mpi_oversubscribe";

/// How a group's started collectives wait for the other ranks (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PeerWait {
    /// In MPI's own wait: every rank on this machine has a core.
    InMpi,
    /// Testing every [`ARRIVAL_POLL`], sleeping in between: cores are short.
    Sleeping,
}

impl PeerWait {
    /// The wait for a group whose ranks on this machine are `local_ranks`, on `cores` cores,
    /// with this rank's context under the validation layer or not.
    pub(super) fn for_cores(local_ranks: usize, cores: usize, validation: bool) -> Self {
        match local_ranks <= cores && !validation {
            true => PeerWait::InMpi,
            false => PeerWait::Sleeping,
        }
    }

    /// The wait for `comm`'s ranks on this machine (collective: every rank of `comm` calls
    /// it). Open MPI's own verdict when it gives one (`OMPI_MCA_mpi_oversubscribe`, set by
    /// `mpirun`: it binds each rank to a core when there are enough, so a rank alone cannot
    /// count the machine's cores); else the ranks on this machine against the cores this
    /// process may use. Sleeping under the validation layer either way.
    pub(super) fn for_group(comm: &SimpleCommunicator, validation: bool) -> Self {
        let local_ranks = comm.split_shared(0).size().max(1) as usize;
        let cores = match std::env::var(OPEN_MPI_OVERSUBSCRIBED).as_deref() {
            Ok("1") => 0,
            Ok("0") => local_ranks,
            _ => std::thread::available_parallelism().map_or(1, usize::from),
        };
        Self::for_cores(local_ranks, cores, validation)
    }

    /// How often to test a non-blocking call while waiting; `None`: wait in MPI.
    pub(super) fn poll(self) -> Option<std::time::Duration> {
        match self {
            PeerWait::InMpi => None,
            PeerWait::Sleeping => Some(ARRIVAL_POLL),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_with_a_core_each_wait_in_mpi_and_more_ranks_than_cores_or_validation_sleep() {
        assert_eq!(PeerWait::for_cores(2, 2, false), PeerWait::InMpi);
        assert_eq!(PeerWait::for_cores(1, 16, false), PeerWait::InMpi);
        assert_eq!(PeerWait::for_cores(3, 2, false), PeerWait::Sleeping);
        assert_eq!(PeerWait::for_cores(1, 16, true), PeerWait::Sleeping);
        assert_eq!(PeerWait::InMpi.poll(), None);
        assert_eq!(PeerWait::Sleeping.poll(), Some(ARRIVAL_POLL));
    }
}
