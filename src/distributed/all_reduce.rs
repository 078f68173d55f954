//! `all_reduce` and `all_reduce_mean`: every rank ends with the reduction of every rank's
//! array, in place on the donated array (see the module docs).
//!
//! Where the MPI library's `MPI_IN_PLACE` is known (Open MPI, MPICH and its derivatives:
//! [`Collectives::reduces_in_place`]) each chunk is reduced in place by a blocking
//! `MPI_Allreduce`: on zero-copy arenas on the array's own mapping (no host copy at all), else
//! in an upload staging buffer after one host copy out of readback staging (`staged.rs`; the
//! mean, whose division needs the elements, and chunks larger than a staging buffer go
//! through one host chunk between the staging copies instead). Elsewhere rsmpi's immediate
//! all-reduce reduces each chunk into a second buffer, pipelined with the copies back. Every rank of a
//! job runs the same library, so every rank makes the same calls whichever path its own
//! arena takes.

use super::array_io::{chunk_elements, chunks, elements_of, ArrayIo};
use super::header::{agree, Header, Kind};
use super::staged::misaligned_mapping;
use super::staged::{fits_staging, reduce_staged_chunks, Segment};
use super::{CollectiveElement, Collectives, MeanElement, ReduceOp};
use crate::array::DeviceArray;
use crate::backend::{all_reduce_in_place, in_place_sentinel};
use crate::donated::{Donated, DonatedResult};
use crate::error::Result;
use mpi::collective::SystemOperation;
use mpi::traits::*;

const OPERATION: &str = "all_reduce";

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
        self.reduce_in_place(array, op, Kind::AllReduce, |v| v)
    }

    /// The mean over ranks (`jax.lax.pmean`): the sum, divided by [`Collectives::size`] on
    /// the way back to the device. As [`Collectives::all_reduce`] otherwise.
    pub fn all_reduce_mean<T: MeanElement>(&self, array: DeviceArray<T>) -> DonatedResult<T> {
        let ranks = self.size();
        self.reduce_in_place(array, ReduceOp::Sum, Kind::AllReduceMean, move |v| {
            T::divide(v, ranks)
        })
    }

    /// Whether [`Collectives::all_reduce`] reduces each chunk in place (`MPI_IN_PLACE`): on
    /// the array's own mapping when the arena is zero-copy, else on the host chunk between
    /// the staging copies. True on Open MPI, MPICH and the libraries built on MPICH (their
    /// `MPI_IN_PLACE` is known); on any other MPI library each chunk is reduced into a
    /// separate host buffer and copied back, which gives the same results a little slower.
    pub fn reduces_in_place(&self) -> bool {
        in_place_sentinel().is_some()
    }

    fn reduce_in_place<T: CollectiveElement>(
        &self,
        array: DeviceArray<T>,
        op: ReduceOp,
        kind: Kind,
        finish: impl Fn(T) -> T,
    ) -> DonatedResult<T> {
        let started = std::time::Instant::now();
        let bytes = array.size_in_bytes();
        let header = Header {
            kind,
            op: op.code(),
            dtype: T::CODE,
            shape: array.shape().to_vec(),
            root: 0,
            list: Vec::new(),
        };
        let chunk = chunk_elements::<T>(1).min(array.len());
        let prepared = self
            .check_local(&array, OPERATION, Some(bytes), Some(bytes))
            .and_then(|()| {
                // Three chunk buffers: two that MPI and the device take turns on, one result.
                let bytes = chunk * std::mem::size_of::<T>();
                let buffers = [
                    self.scratch.take(bytes, OPERATION)?,
                    self.scratch.take(bytes, OPERATION)?,
                    self.scratch.take(bytes, OPERATION)?,
                ];
                Ok(buffers)
            });
        let mut buffers = match agree(&self.comm, OPERATION, &header, prepared) {
            Ok(buffers) => buffers,
            Err(error) => return Err(Donated { error, array }),
        };
        let ran = self.run_all_reduce(&array, op, kind, chunk, &mut buffers, &finish);
        for buffer in buffers {
            self.scratch.give_back(buffer);
        }
        match ran {
            Ok(()) => {
                self.count(bytes, bytes, started);
                Ok(array)
            }
            Err(error) => Err(Donated { error, array }),
        }
    }

    fn run_all_reduce<T: CollectiveElement>(
        &self,
        array: &DeviceArray<T>,
        op: ReduceOp,
        kind: Kind,
        chunk: usize,
        buffers: &mut [Vec<u64>; 3],
        finish: &impl Fn(T) -> T,
    ) -> Result<()> {
        let io = ArrayIo::new(&self.ctx.inner, array)?;
        let [first, second, result] = buffers;
        let first: &mut [T] = elements_of(first, chunk);
        let second: &mut [T] = elements_of(second, chunk);
        let result: &mut [T] = elements_of(result, chunk);
        let path = self.all_reduce_path::<T>(&io, kind, chunk);
        self.note_host_bytes(path.host_chunks(kind) * chunk * std::mem::size_of::<T>());
        let op = op.system();
        let pieces: Vec<(usize, usize)> = chunks(array.len(), chunk).collect();
        match path {
            Path::MappedInPlace => {
                self.reduce_mapped_in_place(&io, &pieces, op, kind, first, finish)
            }
            Path::StagingInPlace => {
                let size = std::mem::size_of::<T>();
                // Staged, in place in an upload staging buffer: no host chunk at all, and chunk
                // k+1 comes off the device while MPI reduces chunk k (see `staged.rs`).
                let chunks: Vec<Vec<Segment<'_>>> = pieces
                    .iter()
                    .map(|&(start, len)| {
                        vec![Segment {
                            storage: &array.storage,
                            offset: (start * size) as u64,
                            bytes: (len * size) as u64,
                        }]
                    })
                    .collect();
                reduce_staged_chunks::<T>(&self.ctx.inner, &self.comm, &chunks, op, OPERATION)
            }
            Path::HostChunkInPlace => {
                self.reduce_host_chunk_in_place(&io, &pieces, op, first, finish)
            }
            Path::MappedPipelined => {
                self.reduce_mapped_pipelined(&io, &pieces, op, [first, second], finish)
            }
            Path::StagedPipelined => {
                self.reduce_staged_pipelined(&io, &pieces, op, [first, second, result], finish)
            }
        }
    }

    /// How this rank reduces an array reached through `io`, `chunk` elements at a time.
    fn all_reduce_path<T: CollectiveElement>(
        &self,
        io: &ArrayIo<'_, T>,
        kind: Kind,
        chunk: usize,
    ) -> Path {
        let in_place = self.reduces_in_place();
        // Staged chunks go through the staging pool's buffers, with no host chunk, where MPI
        // reduces in place, the chunk fits a staging buffer and no division follows.
        let staged = in_place
            && !io.is_zero_copy()
            && kind != Kind::AllReduceMean
            && fits_staging(&self.ctx.inner, (chunk * std::mem::size_of::<T>()) as u64);
        match (in_place, io.is_zero_copy()) {
            (true, true) => Path::MappedInPlace,
            (true, false) if staged => Path::StagingInPlace,
            (true, false) => Path::HostChunkInPlace,
            (false, true) => Path::MappedPipelined,
            (false, false) => Path::StagedPipelined,
        }
    }

    /// MPI reduces each chunk where it lies in the mapping: no host copy at all, but for the
    /// mean's division, which goes through `scratch`.
    fn reduce_mapped_in_place<T: CollectiveElement>(
        &self,
        io: &ArrayIo<'_, T>,
        pieces: &[(usize, usize)],
        op: SystemOperation,
        kind: Kind,
        scratch: &mut [T],
        finish: &impl Fn(T) -> T,
    ) -> Result<()> {
        for &(start, len) in pieces {
            io.with_slice_mut(start, len, |elements| {
                all_reduce_in_place(&self.comm, elements, op)
            })
            .ok_or_else(|| misaligned_mapping(OPERATION))?
            .ok_or_else(in_place_unknown)?;
            if kind == Kind::AllReduceMean {
                io.read(start, &mut scratch[..len])?;
                scratch[..len].iter_mut().for_each(|v| *v = finish(*v));
                io.write(start, &scratch[..len])?;
            }
        }
        Ok(())
    }

    /// Staged, in place on one host chunk: off the device, reduced where it lies, back
    /// through the staging pool (which copies it before `write` returns). The blocking
    /// MPI_Allreduce leaves nothing to overlap the read with, but it is the call the
    /// zero-copy ranks make (blocking and immediate collectives do not match), and it
    /// runs Open MPI's tuned algorithms, well ahead of the immediate form's.
    fn reduce_host_chunk_in_place<T: CollectiveElement>(
        &self,
        io: &ArrayIo<'_, T>,
        pieces: &[(usize, usize)],
        op: SystemOperation,
        host: &mut [T],
        finish: &impl Fn(T) -> T,
    ) -> Result<()> {
        for &(start, len) in pieces {
            io.read(start, &mut host[..len])?;
            all_reduce_in_place(&self.comm, &mut host[..len], op).ok_or_else(in_place_unknown)?;
            host[..len].iter_mut().for_each(|v| *v = finish(*v));
            io.write(start, &host[..len])?;
        }
        Ok(())
    }

    /// MPI reads chunk k straight from the mapping into one buffer while the result of
    /// chunk k−1, in the other, is written back into the mapping.
    fn reduce_mapped_pipelined<T: CollectiveElement>(
        &self,
        io: &ArrayIo<'_, T>,
        pieces: &[(usize, usize)],
        op: SystemOperation,
        [first, second]: [&mut [T]; 2],
        finish: &impl Fn(T) -> T,
    ) -> Result<()> {
        let mut pending: Option<(usize, usize)> = None;
        for (k, &(start, len)) in pieces.iter().enumerate() {
            let (current, previous) = if k % 2 == 0 {
                (&mut *first, &*second)
            } else {
                (&mut *second, &*first)
            };
            let written = io
                .with_slice(start, len, |src| {
                    mpi::request::scope(|scope| {
                        let request = self.comm.immediate_all_reduce_into(
                            scope,
                            src,
                            &mut current[..len],
                            op,
                        );
                        let written = match pending {
                            Some((at, n)) => io.write(at, &previous[..n]),
                            None => Ok(()),
                        };
                        request.wait();
                        written
                    })
                })
                .ok_or_else(|| misaligned_mapping(OPERATION))?;
            written?;
            current[..len].iter_mut().for_each(|v| *v = finish(*v));
            pending = Some((start, len));
        }
        if let Some((at, n)) = pending {
            let last = if pieces.len() % 2 == 1 {
                &*first
            } else {
                &*second
            };
            io.write(at, &last[..n])?;
        }
        Ok(())
    }

    /// Staged: chunk k+1 comes off the device while MPI reduces chunk k into `result`; the
    /// result of chunk k goes back through the staging pool without waiting for the copy.
    fn reduce_staged_pipelined<T: CollectiveElement>(
        &self,
        io: &ArrayIo<'_, T>,
        pieces: &[(usize, usize)],
        op: SystemOperation,
        [first, second, result]: [&mut [T]; 3],
        finish: &impl Fn(T) -> T,
    ) -> Result<()> {
        if let Some(&(start, len)) = pieces.first() {
            io.read(start, &mut first[..len])?;
        }
        for (k, &(start, len)) in pieces.iter().enumerate() {
            let (current, next) = if k % 2 == 0 {
                (&*first, &mut *second)
            } else {
                (&*second, &mut *first)
            };
            let read = mpi::request::scope(|scope| {
                let request = self.comm.immediate_all_reduce_into(
                    scope,
                    &current[..len],
                    &mut result[..len],
                    op,
                );
                let read = match pieces.get(k + 1) {
                    Some(&(at, n)) => io.read(at, &mut next[..n]),
                    None => Ok(()),
                };
                request.wait();
                read
            });
            read?;
            result[..len].iter_mut().for_each(|v| *v = finish(*v));
            io.write(start, &result[..len])?;
        }
        Ok(())
    }
}

/// The ways [`Collectives::all_reduce`] reduces a chunk, one per kind of MPI library (known
/// `MPI_IN_PLACE` or not) and arena (zero-copy or staged).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Path {
    /// In place on the array's own mapping.
    MappedInPlace,
    /// In place in an upload staging buffer (`staged.rs`).
    StagingInPlace,
    /// In place on one host chunk between the staging copies (the mean, or chunks larger
    /// than a staging buffer).
    HostChunkInPlace,
    /// Immediate all-reduce from the mapping into a host buffer, pipelined with the writes back.
    MappedPipelined,
    /// Immediate all-reduce of host chunks, pipelined with the staging copies.
    StagedPipelined,
}

impl Path {
    /// Host chunk buffers the path uses (for the host-memory count).
    fn host_chunks(self, kind: Kind) -> usize {
        match self {
            Path::MappedInPlace => usize::from(kind == Kind::AllReduceMean),
            Path::StagingInPlace => 0,
            Path::HostChunkInPlace => 1,
            Path::MappedPipelined => 2,
            Path::StagedPipelined => 3,
        }
    }
}

/// The error of an in-place reduction on a library whose `MPI_IN_PLACE` is unknown.
fn in_place_unknown() -> crate::error::Error {
    super::staged::in_place_unknown(OPERATION)
}
