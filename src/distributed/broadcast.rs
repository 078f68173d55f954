//! `broadcast`: the root's array, copied into the arrays of every other rank, in place.

use super::array_io::{chunk_elements, chunks, host_buffer, ArrayIo};
use super::header::{agree, Header, Kind};
use super::staged::misaligned_mapping;
use super::{CollectiveElement, Collectives};
use crate::array::DeviceArray;
use crate::donated::{Donated, DonatedResult};
use crate::error::{Error, Result};
use mpi::traits::*;

const OPERATION: &str = "broadcast";

impl Collectives {
    /// Copies the array of rank `root` into the donated array of every other rank (the root's
    /// is given back unchanged): MPI's `MPI_Bcast`, e.g. initial parameters from rank 0.
    ///
    /// Errors as [`Collectives::all_reduce`]; besides, `root` must be a rank of the group
    /// ([`crate::Error::InvalidArgument`] on every rank that passed a wrong one) and the same
    /// on every rank ([`crate::Error::Collective`]).
    pub fn broadcast<T: CollectiveElement>(
        &self,
        array: DeviceArray<T>,
        root: usize,
    ) -> DonatedResult<T> {
        let started = std::time::Instant::now();
        let bytes = array.size_in_bytes();
        let is_root = root == self.rank();
        let header = Header {
            kind: Kind::Broadcast,
            op: 0,
            dtype: T::CODE,
            shape: array.shape().to_vec(),
            root: root as u64,
            list: Vec::new(),
        };
        let chunk = chunk_elements::<T>(1).min(array.len());
        let (read, written) = if is_root {
            (Some(bytes), None)
        } else {
            (None, Some(bytes))
        };
        let prepared = self
            .check_local(&array, OPERATION, read, written)
            .and_then(|()| {
                if root >= self.size() {
                    return Err(Error::InvalidArgument {
                        operation: OPERATION,
                        reason: format!(
                            "root {root} is not a rank of this group of {} ranks",
                            self.size()
                        ),
                    });
                }
                host_buffer::<T>(chunk, OPERATION)
            });
        let buffer = match agree(&self.comm, OPERATION, &header, prepared) {
            Ok(buffer) => buffer,
            Err(error) => return Err(Donated { error, array }),
        };
        match self.run_broadcast(&array, root, chunk, buffer) {
            Ok(()) => {
                self.count(read.unwrap_or(0), written.unwrap_or(0), started);
                Ok(array)
            }
            Err(error) => Err(Donated { error, array }),
        }
    }

    fn run_broadcast<T: CollectiveElement>(
        &self,
        array: &DeviceArray<T>,
        root: usize,
        chunk: usize,
        mut buffer: Vec<T>,
    ) -> Result<()> {
        let io = ArrayIo::new(&self.ctx.inner, array)?;
        let is_root = root == self.rank();
        let process = self.comm.process_at_rank(root as i32);
        if io.is_zero_copy() {
            // Straight from the root's mapping into the others' mappings: no host buffer.
            for (start, len) in chunks(array.len(), chunk) {
                io.with_slice_mut(start, len, |data| process.broadcast_into(data))
                    .ok_or_else(|| misaligned_mapping(OPERATION))?;
            }
            return Ok(());
        }
        self.note_host_bytes(chunk * std::mem::size_of::<T>());
        for (start, len) in chunks(array.len(), chunk) {
            let data = &mut buffer[..len];
            if is_root {
                io.read(start, data)?;
            }
            process.broadcast_into(data);
            if !is_root {
                io.write(start, data)?;
            }
        }
        Ok(())
    }
}
