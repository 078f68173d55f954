//! `reduce_scatter`: the reduction over ranks, split along the first dimension, rank `r`
//! keeping block `r`.

use super::array_io::{chunk_elements, chunks, host_buffer, ArrayIo};
use super::header::{agree, Header, Kind};
use super::{CollectiveElement, Collectives, ReduceOp};
use crate::array::DeviceArray;
use crate::error::{Error, Result};
use crate::recorder::Access;
use mpi::traits::*;

const OPERATION: &str = "reduce_scatter";

impl Collectives {
    /// Reduces every rank's array with `op` and gives rank `r` block `r` of the result, split
    /// along the first dimension: an array of shape `[d0 / ranks, ...rest]`
    /// (`jax.lax.psum_scatter`; MPI's `MPI_Reduce_scatter_block`). Every rank passes the
    /// same shape. The new array is in device memory ([`crate::MemoryKind::Device`])
    /// whatever the input's kind: [`crate::Context::offload`] moves it to pinned host.
    ///
    /// Errors as [`Collectives::all_reduce`]; besides, [`crate::Error::Shape`] unless the
    /// array has at least one dimension and its first is a multiple of the number of ranks,
    /// and out-of-memory for the result.
    pub fn reduce_scatter<T: CollectiveElement>(
        &self,
        array: &DeviceArray<T>,
        op: ReduceOp,
    ) -> Result<DeviceArray<T>> {
        let started = std::time::Instant::now();
        let ranks = self.size();
        let header = Header::of(Kind::ReduceScatter, op.code(), T::CODE, array.shape(), 0);
        let block = array.len() / ranks;
        let chunk = chunk_elements::<T>(ranks).min(block);
        let bytes = array.size_in_bytes();
        let prepared = (|| {
            let out_bytes = bytes / ranks as u64;
            self.check_local(array, Access::Read, OPERATION, Some(bytes), Some(out_bytes))?;
            let shape = match array.shape() {
                [first, rest @ ..] if first % ranks == 0 => {
                    let mut shape = vec![first / ranks];
                    shape.extend_from_slice(rest);
                    shape
                }
                [first, ..] => {
                    return Err(Error::Shape {
                        operation: OPERATION,
                        reason: format!(
                            "the first dimension, {first}, is not a multiple of the {ranks} \
                             ranks, so it cannot be split into one block per rank: pad it to a \
                             multiple of {ranks}"
                        ),
                    })
                }
                [] => {
                    return Err(Error::Shape {
                        operation: OPERATION,
                        reason: "a scalar has no first dimension to split into one block per \
                                 rank: give the array at least one dimension"
                            .to_string(),
                    })
                }
            };
            let out = (self.ctx).alloc_as::<T>(crate::MemoryKind::Device, &shape, OPERATION)?;
            let send = host_buffer::<T>(chunk * ranks, OPERATION)?;
            let recv = host_buffer::<T>(chunk, OPERATION)?;
            Ok((out, send, recv))
        })();
        self.quiet();
        let (out, mut send, mut recv) = agree(self.comm(), OPERATION, &header, prepared)?;
        let input = ArrayIo::new(&self.ctx.inner, array)?;
        let output = ArrayIo::new(&self.ctx.inner, &out)?;
        self.note_host_bytes(
            (chunk * ranks + if output.is_zero_copy() { 0 } else { chunk })
                * std::mem::size_of::<T>(),
        );
        let op = op.system();
        for (start, n) in chunks(block, chunk) {
            // Piece `start..start + n` of every rank's block, side by side.
            for rank in 0..ranks {
                input.read(rank * block + start, &mut send[rank * n..(rank + 1) * n])?;
            }
            let sent = &send[..n * ranks];
            // Zero-copy: MPI writes the reduced piece straight into the result's mapping.
            let direct = output.with_slice_mut(start, n, |dst| {
                self.comm.reduce_scatter_block_into(sent, dst, op)
            });
            if direct.is_none() {
                self.comm
                    .reduce_scatter_block_into(sent, &mut recv[..n], op);
                output.write(start, &recv[..n])?;
            }
        }
        self.count(bytes, bytes / ranks as u64, started);
        drop(output);
        Ok(out)
    }
}
