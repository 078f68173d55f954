//! `send` and `recv`: one array from one rank to another (pipeline parallelism), after a
//! handshake in which both sides check that they agree.

use super::array_io::{chunk_elements, chunks, host_buffer, ArrayIo};
use super::header::{agree_pair, Header, Kind, DATA_TAG};
use super::{CollectiveElement, Collectives};
use crate::array::DeviceArray;
use crate::donated::{Donated, DonatedResult};
use crate::error::{Error, IndexRefusal, Result};
use crate::recorder::Access;
use mpi::traits::*;

impl Collectives {
    /// Errors unless `peer` is another rank of the group: checked before any message, since
    /// there is no peer to tell.
    fn check_peer(&self, peer: usize, operation: &'static str) -> Result<()> {
        if peer >= self.size() || peer == self.rank() {
            return Err(Error::Index {
                operation,
                refusal: IndexRefusal::Peer {
                    peer,
                    rank: self.rank(),
                    ranks: self.size(),
                },
            });
        }
        Ok(())
    }

    /// Sends the array to rank `dest`, which must call [`Collectives::recv`] with an array of
    /// the same element type and shape (`MPI_Send`, in chunks). Returns once the data has
    /// left this rank.
    ///
    /// Errors: [`crate::Error::Index`] ([`IndexRefusal::Peer`]) when `dest` is this rank or not a rank of
    /// the group (nothing is sent); a refusal on either side or a different element type or
    /// shape ([`crate::Error::Collective`] on both, no data moves); the checks of
    /// [`Collectives::all_reduce`].
    pub fn send<T: CollectiveElement>(&self, array: &DeviceArray<T>, dest: usize) -> Result<()> {
        const OPERATION: &str = "send";
        self.check_peer(dest, OPERATION)?;
        let started = std::time::Instant::now();
        let bytes = array.size_in_bytes();
        let header = Header::of(Kind::Send, 0, T::CODE, array.shape(), dest as u64);
        let chunk = chunk_elements::<T>(1).min(array.len());
        let prepared = self
            .check_local(array, Access::Read, OPERATION, Some(bytes), None)
            .and_then(|()| host_buffer::<T>(chunk, OPERATION));
        let mut buffer = agree_pair(self.comm(), OPERATION, &header, prepared, dest, true)?;
        let io = ArrayIo::new(&self.ctx.inner, array)?;
        let process = self.comm.process_at_rank(dest as i32);
        if !io.is_zero_copy() {
            self.note_host_bytes(chunk * std::mem::size_of::<T>());
        }
        for (start, n) in chunks(array.len(), chunk) {
            let direct = io.with_slice(start, n, |src| process.send_with_tag(src, DATA_TAG));
            if direct.is_none() {
                io.read(start, &mut buffer[..n])?;
                process.send_with_tag(&buffer[..n], DATA_TAG);
            }
        }
        self.count(bytes, 0, started);
        Ok(())
    }

    /// Receives into the donated array what rank `source` sends with [`Collectives::send`]
    /// (same element type and shape), and gives it back.
    ///
    /// Errors as [`Collectives::send`]; the array comes back intact in [`Donated`] when no
    /// data moved.
    pub fn recv<T: CollectiveElement>(
        &self,
        array: DeviceArray<T>,
        source: usize,
    ) -> DonatedResult<T> {
        const OPERATION: &str = "recv";
        if let Err(error) = self.check_peer(source, OPERATION) {
            return Err(Donated { error, array });
        }
        let started = std::time::Instant::now();
        let bytes = array.size_in_bytes();
        let header = Header::of(Kind::Recv, 0, T::CODE, array.shape(), source as u64);
        let chunk = chunk_elements::<T>(1).min(array.len());
        let prepared = self
            .check_local(&array, Access::Write, OPERATION, None, Some(bytes))
            .and_then(|()| host_buffer::<T>(chunk, OPERATION));
        let buffer = match agree_pair(self.comm(), OPERATION, &header, prepared, source, false) {
            Ok(buffer) => buffer,
            Err(error) => return Err(Donated { error, array }),
        };
        match self.run_recv(&array, source, chunk, buffer) {
            Ok(()) => {
                self.count(0, bytes, started);
                Ok(array)
            }
            Err(error) => Err(Donated { error, array }),
        }
    }

    fn run_recv<T: CollectiveElement>(
        &self,
        array: &DeviceArray<T>,
        source: usize,
        chunk: usize,
        mut buffer: Vec<T>,
    ) -> Result<()> {
        let io = ArrayIo::new(&self.ctx.inner, array)?;
        let process = self.comm.process_at_rank(source as i32);
        if !io.is_zero_copy() {
            self.note_host_bytes(chunk * std::mem::size_of::<T>());
        }
        for (start, n) in chunks(array.len(), chunk) {
            let direct = io.with_slice_mut(start, n, |dst| {
                process.receive_into_with_tag(dst, DATA_TAG);
            });
            if direct.is_none() {
                process.receive_into_with_tag(&mut buffer[..n], DATA_TAG);
                io.write(start, &buffer[..n])?;
            }
        }
        Ok(())
    }
}
