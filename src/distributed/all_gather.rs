//! `all_gather`: every rank's array, stacked along a new first dimension, on every rank.

use super::array_io::{chunk_elements, chunks, host_buffer, ArrayIo};
use super::header::{agree, Header, Kind};
use super::{CollectiveElement, Collectives};
use crate::array::DeviceArray;
use crate::error::{Error, Result};
use crate::recorder::Access;
use crate::shape::MAX_RANK;
use mpi::traits::*;

const OPERATION: &str = "all_gather";

impl Collectives {
    /// A new array of shape `[ranks, ...shape]` whose row `r` is rank `r`'s array, on every
    /// rank (`jax.lax.all_gather`; MPI's `MPI_Allgather`). Every rank passes the same shape.
    /// The new array is in device memory ([`crate::MemoryKind::Device`]) whatever the input's
    /// kind: [`crate::Context::offload`] moves it to pinned host.
    ///
    /// Errors as [`Collectives::all_reduce`]; besides, [`crate::Error::Shape`] for an array
    /// of rank [`MAX_RANK`] (the result would have one more dimension) and out-of-memory for
    /// the result.
    pub fn all_gather<T: CollectiveElement>(
        &self,
        array: &DeviceArray<T>,
    ) -> Result<DeviceArray<T>> {
        let started = std::time::Instant::now();
        let ranks = self.size();
        let header = Header::of(Kind::AllGather, 0, T::CODE, array.shape(), 0);
        let chunk = chunk_elements::<T>(ranks).min(array.len());
        let bytes = array.size_in_bytes();
        let prepared = (|| {
            let total = bytes
                .checked_mul(ranks as u64)
                .ok_or_else(|| Error::Shape {
                    operation: OPERATION,
                    reason: format!("{ranks} copies of shape {:?} overflow", array.shape()),
                })?;
            self.check_local(array, Access::Read, OPERATION, Some(bytes), Some(total))?;
            if array.shape().len() >= MAX_RANK {
                return Err(Error::Shape {
                    operation: OPERATION,
                    reason: format!(
                        "the result has one more dimension than the array's {}, above the maximum rank of {MAX_RANK}; reshape the array first",
                        array.shape().len()
                    ),
                });
            }
            let mut shape = vec![ranks];
            shape.extend_from_slice(array.shape());
            let out = (self.ctx).alloc_as::<T>(crate::MemoryKind::Device, &shape, OPERATION)?;
            let send = host_buffer::<T>(chunk, OPERATION)?;
            let recv = host_buffer::<T>(chunk * ranks, OPERATION)?;
            Ok((out, send, recv))
        })();
        self.quiet();
        let (out, mut send, mut recv) = agree(self.comm(), OPERATION, &header, prepared)?;
        let input = ArrayIo::new(&self.ctx.inner, array)?;
        let output = ArrayIo::new(&self.ctx.inner, &out)?;
        self.note_host_bytes(
            (if input.is_zero_copy() { 0 } else { chunk } + chunk * ranks)
                * std::mem::size_of::<T>(),
        );
        let len = array.len();
        for (start, n) in chunks(len, chunk) {
            let received = &mut recv[..n * ranks];
            // Zero-copy: MPI reads this rank's chunk straight from the mapping.
            let direct = input.with_slice(start, n, |src| {
                self.comm.all_gather_into(src, &mut *received)
            });
            if direct.is_none() {
                input.read(start, &mut send[..n])?;
                self.comm.all_gather_into(&send[..n], &mut *received);
            }
            for (rank, row) in received.chunks(n).enumerate() {
                output.write(rank * len + start, row)?;
            }
        }
        self.count(bytes, bytes * ranks as u64, started);
        drop(output);
        Ok(out)
    }
}
