//! `barrier`: every rank waits until all have reached it.

use super::header::{agree, Header, Kind};
use super::Collectives;
use crate::error::Result;
use mpi::traits::*;

impl Collectives {
    /// Returns once every rank of the group has called it (`MPI_Barrier`), after the same
    /// header exchange as the other collectives: a rank that calls another collective here
    /// gets [`crate::Error::Collective`] on every rank instead of a hang.
    pub fn barrier(&self) -> Result<()> {
        const OPERATION: &str = "barrier";
        let header = Header::of(Kind::Barrier, 0, 0, &[], 0);
        self.quiet();
        agree(self.comm(), OPERATION, &header, Ok(()))?;
        self.comm.barrier();
        Ok(())
    }
}
