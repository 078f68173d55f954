//! Fused collectives over lists of arrays (`all_reduce_many`, `all_reduce_mean_many`,
//! `broadcast_many`), as Horovod's tensor fusion and PyTorch DDP's gradient buckets do: one
//! agreement round for the whole list, and the arrays packed into fusion chunks of at most
//! [`super::PIPELINE_CHUNK_BYTES`] so that MPI makes one call per chunk instead of one (and
//! one agreement, and on staging one submission and wait) per array.
//!
//! A chunk is filled with pieces of the arrays in list order (an array larger than what is
//! left of a chunk continues in the next one), and MPI makes one call per chunk on every rank.
//! How a rank feeds that call is its own: a chunk whose pieces lie back to back in one mapping
//! (zero-copy arrays allocated one after another, as a model's layers mostly are) is reduced
//! in place there, with no host copy, as [`Collectives::all_reduce`] reduces one array; a
//! chunk of staged arrays is copied by the device into a staging buffer and reduced in the
//! staging pool's memory (`staged.rs`: one readback and one upload for all its pieces, no host
//! chunk); any other chunk's pieces (the mean's, whose division needs them on the host) come
//! off the device together (on staging: one readback for all of them; on zero-copy: copies
//! from the mappings), MPI reduces the packed chunk in place, and the pieces go back together
//! (one upload; or copies into the mappings). The data phase
//! takes a [`Link`], so the same code runs on the caller's thread (blocking calls) and on the
//! progress thread (started ones, see `progress.rs`). Each fused call is a [`ListCall`]: what
//! the agreement describes (kind, reduction, root), the name its errors carry, and its data
//! phase, built by the same constructor for the blocking call (`many.rs`) and the started one
//! (`started.rs`).

use super::array_io::{
    chunk_elements, elements_of, mapped_run, read_pieces, write_pieces, ArrayIo, Scratch,
};
use super::element::{CollectiveElement, MeanElement};
use super::header::Kind;
use super::reduce_op::ReduceOp;
use super::staged::{
    in_place_unknown, misaligned_mapping, reduce_staged_chunks, reducible_in_staging, Segment,
};
use crate::array::DeviceArray;
use crate::backend::{all_reduce_in_place, in_place_sentinel, MappedElements};
use crate::context::ContextInner;
use crate::error::Result;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What a collective's data phase works with, on whichever thread runs it.
pub(crate) struct Link<'a> {
    pub(crate) ctx: &'a Arc<ContextInner>,
    pub(crate) comm: &'a SimpleCommunicator,
    pub(crate) scratch: &'a Scratch,
    pub(crate) host_bytes_peak: &'a AtomicU64,
}

/// A fused collective's data phase, run once every rank agreed: on the caller's thread for a
/// blocking call, on the progress thread for a started one.
pub(crate) type ListData<T> = Box<dyn FnOnce(&Link<'_>, &[DeviceArray<T>]) -> Result<()> + Send>;

/// One fused collective over a list, as every rank describes it in the agreement (its kind,
/// reduction and root), with the name its errors carry and its data phase: what a blocking
/// call and a started one share.
pub(crate) struct ListCall<T: bytemuck::Pod> {
    pub(crate) kind: Kind,
    pub(crate) op: ReduceOp,
    pub(crate) root: usize,
    pub(crate) operation: &'static str,
    pub(crate) data: ListData<T>,
}

impl<T: bytemuck::Pod> ListCall<T> {
    /// The same call on a list of one array, under the single-array collective's kind
    /// (`all_reduce`, `all_reduce_mean`, `broadcast`): its header carries the array's shape,
    /// so a refusal describes the array rather than a list.
    pub(crate) fn single(mut self) -> Self {
        self.kind = self.kind.single();
        self
    }
}

impl<T: CollectiveElement> ListCall<T> {
    /// Every array reduced with `op` across ranks, in place.
    pub(crate) fn all_reduce(op: ReduceOp, operation: &'static str) -> Self {
        Self {
            kind: Kind::AllReduceMany,
            op,
            root: 0,
            operation,
            data: Box::new(move |link, arrays| {
                reduce_list(link, arrays, op, &|v| v, true, operation)
            }),
        }
    }

    /// Every array of rank `root`'s list copied into every other rank's, in place.
    pub(crate) fn broadcast(root: usize, operation: &'static str) -> Self {
        Self {
            kind: Kind::BroadcastMany,
            op: ReduceOp::Sum,
            root,
            operation,
            data: Box::new(move |link, arrays| broadcast_list(link, arrays, root)),
        }
    }
}

impl<T: MeanElement> ListCall<T> {
    /// The sum over `ranks` ranks of every array, divided by `ranks` on the way back.
    pub(crate) fn mean(ranks: usize, operation: &'static str) -> Self {
        Self {
            kind: Kind::AllReduceMeanMany,
            op: ReduceOp::Sum,
            root: 0,
            operation,
            data: Box::new(move |link, arrays| {
                reduce_list(
                    link,
                    arrays,
                    ReduceOp::Sum,
                    &|v| T::divide(v, ranks),
                    false,
                    operation,
                )
            }),
        }
    }
}

/// Elements `[first, first + len)` of array `array` of the list, in a fusion chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Piece {
    pub(crate) array: usize,
    pub(crate) first: usize,
    pub(crate) len: usize,
}

/// The fusion chunks of arrays of `lens` elements, each at most `capacity` elements, filled in
/// list order (an array continues in the next chunk where one is full). Empty arrays take no
/// piece. Every rank computes the same chunks from the same (agreed) shapes, so MPI's counts
/// match.
pub(crate) fn fusion_chunks(lens: &[usize], capacity: usize) -> Vec<Vec<Piece>> {
    let capacity = capacity.max(1);
    let mut chunks: Vec<Vec<Piece>> = Vec::new();
    let mut room = 0;
    for (array, &len) in lens.iter().enumerate() {
        let mut first = 0;
        while first < len {
            if room == 0 {
                chunks.push(Vec::new());
                room = capacity;
            }
            let take = room.min(len - first);
            if let Some(chunk) = chunks.last_mut() {
                chunk.push(Piece {
                    array,
                    first,
                    len: take,
                });
            }
            first += take;
            room -= take;
        }
    }
    chunks
}

/// Each piece of `chunk` with its array and its slice of `host`, in order: a packed chunk
/// holds its pieces back to back, so reading it off the device and writing it back walk the
/// same pairs.
fn pieces_over_host<'i, 'a, 'h, T>(
    ios: &'i [ArrayIo<'a, T>],
    chunk: &[Piece],
    host: &'h mut [T],
) -> Vec<(&'i ArrayIo<'a, T>, usize, &'h mut [T])> {
    let mut rest = host;
    let mut pieces = Vec::with_capacity(chunk.len());
    for piece in chunk {
        let (head, tail) = std::mem::take(&mut rest).split_at_mut(piece.len);
        pieces.push((&ios[piece.array], piece.first, head));
        rest = tail;
    }
    pieces
}

/// Reads the arrays' pieces of `chunk` into `host`, one after another.
fn read_chunk<T: bytemuck::Pod>(
    ctx: &ContextInner,
    ios: &[ArrayIo<'_, T>],
    chunk: &[Piece],
    host: &mut [T],
) -> Result<()> {
    read_pieces(ctx, pieces_over_host(ios, chunk, host))
}

/// Writes `host`, one piece after another, into the arrays' pieces of `chunk`.
fn write_chunk<T: bytemuck::Pod>(
    ctx: &ContextInner,
    ios: &[ArrayIo<'_, T>],
    chunk: &[Piece],
    host: &mut [T],
) -> Result<()> {
    let pieces = pieces_over_host(ios, chunk, host);
    write_pieces(
        ctx,
        pieces
            .into_iter()
            .map(|(io, first, data)| (io, first, &*data))
            .collect(),
    )
}

fn elements(chunk: &[Piece]) -> usize {
    chunk.iter().map(|p| p.len).sum()
}

/// A list's arrays opened for host access and cut into fusion chunks: what both fused data
/// phases start from.
struct ChunkedList<'a, T> {
    ios: Vec<ArrayIo<'a, T>>,
    chunks: Vec<Vec<Piece>>,
    /// The elements of the largest chunk: the host buffer a packed chunk needs.
    widest: usize,
}

impl<'a, T: bytemuck::Pod> ChunkedList<'a, T> {
    /// `None` when every array is empty (no chunk, nothing to move).
    fn new(ctx: &'a Arc<ContextInner>, arrays: &'a [DeviceArray<T>]) -> Result<Option<Self>> {
        let ios = arrays
            .iter()
            .map(|a| ArrayIo::new(ctx, a))
            .collect::<Result<Vec<_>>>()?;
        let lens: Vec<usize> = arrays.iter().map(|a| a.len()).collect();
        let chunks = fusion_chunks(&lens, chunk_elements::<T>(1));
        let widest = chunks.iter().map(|c| elements(c)).max().unwrap_or(0);
        Ok((widest > 0).then_some(Self {
            ios,
            chunks,
            widest,
        }))
    }
}

/// The data phase of a fused all-reduce (after every rank agreed): every chunk off the
/// device, reduced in place by MPI, and back.
pub(crate) fn reduce_list<T: CollectiveElement>(
    link: &Link<'_>,
    arrays: &[DeviceArray<T>],
    op: ReduceOp,
    finish: &(impl Fn(T) -> T + ?Sized),
    keep: bool,
    operation: &'static str,
) -> Result<()> {
    let Some(list) = ChunkedList::new(link.ctx, arrays)? else {
        return Ok(());
    };
    let in_place = in_place_sentinel().is_some();
    let size = std::mem::size_of::<T>();
    // One host buffer, kept between calls, for chunks that are not reduced where they lie;
    // a second one for MPI's result only where the library's MPI_IN_PLACE is unknown.
    let mut packed = link.scratch.take(list.widest * size, operation)?;
    let mut reduced = if in_place {
        Vec::new()
    } else {
        match link.scratch.take(list.widest * size, operation) {
            Ok(b) => b,
            Err(error) => {
                link.scratch.give_back(packed);
                return Err(error);
            }
        }
    };
    let mut used = 0;
    let system = op.system();
    // A chunk of staged arrays only, reduced in the staging pool's buffers.
    let staged = |chunk: &[Piece]| {
        in_place
            && keep
            && reducible_in_staging(link.ctx, (elements(chunk) * size) as u64)
            && chunk.iter().all(|p| !list.ios[p.array].is_zero_copy())
    };
    let segments = |chunk: &[Piece]| -> Vec<Segment<'_>> {
        chunk
            .iter()
            .map(|p| Segment {
                storage: &arrays[p.array].storage,
                offset: (p.first * size) as u64,
                bytes: (p.len * size) as u64,
            })
            .collect()
    };
    // One MPI call per fusion chunk, whatever each rank's arrays are like: every rank cuts the
    // same chunks from the same (agreed) sizes, so the calls match. How a rank feeds its call
    // is its own affair: a chunk whose pieces lie back to back on one mapping (zero-copy
    // arrays allocated in order) is reduced in place there, with no host copy; a chunk of
    // staged arrays in the staging pool's buffers; any other chunk is packed into the host
    // buffer, reduced there and copied back.
    let ran = (|| {
        if list.chunks.iter().all(|c| staged(c)) {
            // Every chunk staged: chunk k+1 comes off the device while MPI reduces chunk k.
            let all: Vec<Vec<Segment<'_>>> = list.chunks.iter().map(|c| segments(c)).collect();
            return reduce_staged_chunks::<T>(link.ctx, link.comm, &all, system, operation);
        }
        for chunk in &list.chunks {
            let n = elements(chunk);
            if in_place && keep {
                let run = mapped_run(chunk.iter().map(|p| (&list.ios[p.array], p.first, p.len)));
                if let Some(run) = run {
                    MappedElements::<T>::new(run)
                        .ok_or_else(|| misaligned_mapping(operation))?
                        .write_with(|e| all_reduce_in_place(link.comm, e, system))
                        .ok_or_else(|| in_place_unknown(operation))?;
                    continue;
                }
            }
            if staged(chunk) {
                reduce_staged_chunks::<T>(
                    link.ctx,
                    link.comm,
                    &[segments(chunk)],
                    system,
                    operation,
                )?;
                continue;
            }
            used = used.max(n * size * if in_place { 1 } else { 2 });
            let host: &mut [T] = elements_of(&mut packed, n);
            read_chunk(link.ctx, &list.ios, chunk, host)?;
            let result: &mut [T] = if in_place {
                all_reduce_in_place(link.comm, &mut host[..], system)
                    .ok_or_else(|| in_place_unknown(operation))?;
                host
            } else {
                let result: &mut [T] = elements_of(&mut reduced, n);
                link.comm
                    .all_reduce_into(&host[..], &mut result[..], system);
                result
            };
            if !keep {
                result.iter_mut().for_each(|v| *v = finish(*v));
            }
            write_chunk(link.ctx, &list.ios, chunk, result)?;
        }
        Ok(())
    })();
    link.host_bytes_peak
        .fetch_max(used as u64, Ordering::Relaxed);
    link.scratch.give_back(packed);
    if !reduced.is_empty() {
        link.scratch.give_back(reduced);
    }
    ran
}

/// The data phase of a fused broadcast from `root` (after every rank agreed).
pub(crate) fn broadcast_list<T: CollectiveElement>(
    link: &Link<'_>,
    arrays: &[DeviceArray<T>],
    root: usize,
) -> Result<()> {
    let Some(list) = ChunkedList::new(link.ctx, arrays)? else {
        return Ok(());
    };
    let is_root = root == link.comm.rank() as usize;
    let process = link.comm.process_at_rank(root as i32);
    let size = std::mem::size_of::<T>();
    let mut buffer = link.scratch.take(list.widest * size, BROADCAST)?;
    let mut used = 0;
    let ran = (|| {
        for chunk in &list.chunks {
            let n = elements(chunk);
            if let [piece] = chunk.as_slice() {
                let io = &list.ios[piece.array];
                if io.is_zero_copy() {
                    io.with_slice_mut(piece.first, piece.len, |e| process.broadcast_into(e))
                        .ok_or_else(|| misaligned_mapping(BROADCAST))?;
                    continue;
                }
            }
            used = used.max(n * size);
            let host: &mut [T] = elements_of(&mut buffer, n);
            if is_root {
                read_chunk(link.ctx, &list.ios, chunk, host)?;
            }
            process.broadcast_into(&mut host[..]);
            if !is_root {
                write_chunk(link.ctx, &list.ios, chunk, host)?;
            }
        }
        Ok(())
    })();
    link.host_bytes_peak
        .fetch_max(used as u64, Ordering::Relaxed);
    link.scratch.give_back(buffer);
    ran
}

/// The name of `broadcast_many` in its errors (the list phase here refuses with it too).
pub(super) const BROADCAST: &str = "broadcast_many";

#[cfg(test)]
mod tests {
    use super::{fusion_chunks, Piece};

    fn piece(array: usize, first: usize, len: usize) -> Piece {
        Piece { array, first, len }
    }

    #[test]
    fn small_arrays_share_a_chunk_and_a_large_one_continues_in_the_next() {
        let chunks = fusion_chunks(&[3, 0, 4, 10, 1], 8);
        assert_eq!(
            chunks,
            vec![
                vec![piece(0, 0, 3), piece(2, 0, 4), piece(3, 0, 1)],
                vec![piece(3, 1, 8)],
                vec![piece(3, 9, 1), piece(4, 0, 1)],
            ]
        );
    }

    #[test]
    fn an_empty_list_or_only_empty_arrays_make_no_chunk() {
        assert!(fusion_chunks(&[], 8).is_empty());
        assert!(fusion_chunks(&[0, 0], 8).is_empty());
    }

    #[test]
    fn every_element_lands_in_exactly_one_piece_in_list_order() {
        let lens = [5usize, 17, 0, 1, 64, 3, 9];
        for capacity in [1, 2, 7, 16, 64, 1000] {
            let chunks = fusion_chunks(&lens, capacity);
            let mut seen: Vec<(usize, usize)> = Vec::new();
            for chunk in &chunks {
                let n: usize = chunk.iter().map(|p| p.len).sum();
                assert!(n <= capacity && n > 0, "capacity {capacity}: {chunk:?}");
                for p in chunk {
                    seen.extend((p.first..p.first + p.len).map(|i| (p.array, i)));
                }
            }
            let expected: Vec<(usize, usize)> = lens
                .iter()
                .enumerate()
                .flat_map(|(a, &n)| (0..n).map(move |i| (a, i)))
                .collect();
            assert_eq!(seen, expected, "capacity {capacity}");
        }
    }
}
