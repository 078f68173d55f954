//! How a collective reads and writes an array's elements in host memory: straight through
//! the array's mapping when the arena is zero-copy (UMA), else through the context's staging
//! pool, one chunk at a time. Also the chunk size, which bounds the host memory a collective
//! uses whatever the array's size.

use crate::array::ArrayStorage;
use crate::array::DeviceArray;
use crate::backend::{MappedElements, MappedRange};
use crate::context::ContextInner;
use crate::error::{Error, Result};
use crate::host_link::staged_copy::{ReadbackItem, UploadItem};
use std::marker::PhantomData;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The most bytes one pipeline step moves on each rank: large
/// enough that MPI runs at its full bandwidth on a message (its eager/rendezvous switch is at
/// tens of KiB, and its bandwidth curve is flat past a few MiB), small enough that reading
/// chunk k+1 and writing chunk k-1 overlap MPI's work on chunk k, and that a collective's host
/// buffers stay at a few of these whatever the array's size.
pub const PIPELINE_CHUNK_BYTES: u64 = 16 << 20;

/// The most elements one MPI call may carry: MPI counts are C `int`s.
const MPI_MAX_COUNT: usize = i32::MAX as usize;

/// Elements of `T` per pipeline chunk, for a collective whose host buffer holds `parts`
/// chunks side by side (all_gather receives one per rank): at least one. Every rank must cut
/// an array into the same chunks (MPI matches each chunk's counts), so this depends on
/// nothing a rank configures for itself.
pub(crate) fn chunk_elements<T>(parts: usize) -> usize {
    (PIPELINE_CHUNK_BYTES as usize / std::mem::size_of::<T>() / parts.max(1))
        .clamp(1, MPI_MAX_COUNT / parts.max(1))
}

/// A zeroed host buffer of `len` elements, allocated fallibly (its size follows the array's
/// and the chunk size, so running out of host memory is an error, not an abort).
pub(crate) fn host_buffer<T: bytemuck::Pod>(len: usize, operation: &'static str) -> Result<Vec<T>> {
    bytemuck::allocation::try_zeroed_vec(len).map_err(|()| Error::HostAllocation {
        purpose: format!("the host buffers of {operation}"),
        bytes: (len as u64).saturating_mul(std::mem::size_of::<T>() as u64),
    })
}

/// Host buffers kept between collectives (as MPI programs keep theirs): a large all-reduce
/// would otherwise fault in and zero fresh pages for every call. At most
/// [`SCRATCH_BUFFERS`] buffers of at most one chunk each are kept.
pub(crate) struct Scratch {
    free: crate::lock::Mutex<Vec<Vec<u64>>>,
}

/// Buffers [`Scratch`] keeps: the three an all-reduce uses.
const SCRATCH_BUFFERS: usize = 3;

impl Default for Scratch {
    fn default() -> Self {
        Scratch {
            free: crate::lock::Mutex::new(crate::lock::rank::COLLECTIVE_SCRATCH, Vec::new()),
        }
    }
}

impl Scratch {
    /// A buffer of at least `bytes` bytes (8-aligned, contents unspecified), reused when one
    /// is free, else allocated fallibly.
    pub(crate) fn take(&self, bytes: usize, operation: &'static str) -> Result<Vec<u64>> {
        let words = bytes.div_ceil(8);
        let reused = {
            let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
            free.iter()
                .position(|b| b.len() >= words)
                .map(|i| free.swap_remove(i))
        };
        match reused {
            Some(buffer) => Ok(buffer),
            None => host_buffer::<u64>(words, operation),
        }
    }

    /// Keeps `buffer` for the next collective: while fewer than [`SCRATCH_BUFFERS`] are
    /// kept, or in place of the smallest kept one when it is larger (so that buffers of a
    /// few small calls do not make every later large call allocate and fault in its own).
    pub(crate) fn give_back(&self, buffer: Vec<u64>) {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        if free.len() < SCRATCH_BUFFERS {
            free.push(buffer);
        } else if let Some(smallest) = free
            .iter_mut()
            .min_by_key(|b| b.len())
            .filter(|b| b.len() < buffer.len())
        {
            *smallest = buffer;
        }
    }
}

/// The first `len` elements of `T` in a scratch buffer (8-aligned, so any element type fits).
pub(crate) fn elements_of<T: bytemuck::Pod>(buffer: &mut [u64], len: usize) -> &mut [T] {
    &mut bytemuck::cast_slice_mut::<u64, T>(buffer)[..len]
}

/// One array's elements as a collective reaches them.
pub(crate) struct ArrayIo<'a, T> {
    ctx: &'a Arc<ContextInner>,
    storage: &'a ArrayStorage,
    /// The array's mapping when reads and writes go straight through it (zero-copy).
    mapped: Option<MappedRange>,
    _element: PhantomData<T>,
}

impl<'a, T: bytemuck::Pod> ArrayIo<'a, T> {
    /// Access to `array`, after the GPU work that uses it has completed when access is
    /// direct (staged copies are ordered after that work by the queue). Direct access counts
    /// itself among the array's host users until dropped, under the kernel lock, under which a
    /// captured run writes its inputs in place and makes its moving copies on the host: a run
    /// either did so before (and its work is waited for here) or sees the count and leaves
    /// those copies to the GPU.
    pub(crate) fn new(ctx: &'a Arc<ContextInner>, array: &'a DeviceArray<T>) -> Result<Self> {
        let io = Self {
            ctx,
            storage: &array.storage,
            mapped: array.storage.host_read_range(),
            _element: PhantomData,
        };
        if io.mapped.is_some() {
            let kernels = ctx.kernels().lock();
            io.storage.host_users.fetch_add(1, Ordering::AcqRel);
            drop(kernels);
            ctx.wait_for(array.storage.last_use())?;
        }
        Ok(io)
    }

    /// Whether MPI can work straight on the array's mapping.
    pub(crate) fn is_zero_copy(&self) -> bool {
        self.mapped.is_some()
    }

    fn byte_range(first: usize, len: usize) -> (u64, u64) {
        let size = std::mem::size_of::<T>() as u64;
        (first as u64 * size, len as u64 * size)
    }

    /// Reads elements `[first, first + out.len())` into `out`.
    pub(crate) fn read(&self, first: usize, out: &mut [T]) -> Result<()> {
        if out.is_empty() {
            return Ok(());
        }
        let (offset, len) = Self::byte_range(first, out.len());
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(out);
        if let Some(mapped) = &self.mapped {
            mapped.sub(offset, len).read(bytes);
            return Ok(());
        }
        self.ctx.readback(&mut [ReadbackItem {
            out: bytes,
            buffer: &self.storage.buffer,
            offset: self.storage.allocation.offset + offset,
            span: len,
        }])
    }

    /// Writes `data` at element `first` (staged writes are submitted, not waited for: the
    /// queue orders them before any later use of the array).
    pub(crate) fn write(&self, first: usize, data: &[T]) -> Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let (offset, len) = Self::byte_range(first, data.len());
        let bytes: &[u8] = bytemuck::cast_slice(data);
        if let Some(mapped) = &self.mapped {
            mapped.sub(offset, len).write(bytes);
            return Ok(());
        }
        let id = self.ctx.upload(&[UploadItem {
            data: bytes,
            buffer: &self.storage.buffer,
            offset: self.storage.allocation.offset + offset,
            span: len,
        }])?;
        self.storage.record_use(id);
        Ok(())
    }

    /// Gives `f` elements `[first, first + len)` of the mapping as an MPI buffer to read
    /// (zero-copy only; `None` otherwise).
    pub(crate) fn with_slice<R>(
        &self,
        first: usize,
        len: usize,
        f: impl FnOnce(&MappedElements<T>) -> R,
    ) -> Option<R>
    where
        T: mpi::datatype::Equivalence,
    {
        let (offset, bytes) = Self::byte_range(first, len);
        let elements = MappedElements::<T>::new(self.mapped.as_ref()?.sub(offset, bytes))?;
        Some(elements.read_with(f))
    }

    /// Gives `f` elements `[first, first + len)` of the mapping as an MPI buffer to write
    /// (zero-copy only; `None` otherwise).
    pub(crate) fn with_slice_mut<R>(
        &self,
        first: usize,
        len: usize,
        f: impl FnOnce(&mut MappedElements<T>) -> R,
    ) -> Option<R>
    where
        T: mpi::datatype::Equivalence,
    {
        let (offset, bytes) = Self::byte_range(first, len);
        let mut elements = MappedElements::<T>::new(self.mapped.as_ref()?.sub(offset, bytes))?;
        Some(elements.write_with(f))
    }
}

impl<T> Drop for ArrayIo<'_, T> {
    fn drop(&mut self) {
        if self.mapped.is_some() {
            self.storage.host_users.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// The mapping under pieces `(array, first element, elements)` that lie back to back, in
/// order, in one mapped buffer (arrays allocated one after another mostly do): one range that
/// MPI can reduce in place, with no host copy. `None` when any piece is staged, the pieces
/// leave a gap (another array may live there) or they lie in different buffers.
pub(crate) fn mapped_run<'b, T: 'b>(
    pieces: impl IntoIterator<Item = (&'b ArrayIo<'b, T>, usize, usize)>,
) -> Option<MappedRange> {
    let size = std::mem::size_of::<T>() as u64;
    let mut run: Option<(&ArrayIo<'b, T>, u64, u64)> = None;
    for (io, first, len) in pieces {
        io.mapped.as_ref()?;
        let start = io.storage.allocation.offset + first as u64 * size;
        let bytes = len as u64 * size;
        run = match run {
            None => Some((io, start, bytes)),
            Some((head, at, total))
                if head.storage.buffer == io.storage.buffer && at + total == start =>
            {
                Some((head, at, total + bytes))
            }
            Some(_) => return None,
        };
    }
    let (head, at, total) = run?;
    Some(head.storage.mapped.as_ref()?.sub(at, total))
}

/// The chunks `[start, start + len)` that cover `total` elements, `chunk` at a time.
pub(crate) fn chunks(total: usize, chunk: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..total)
        .step_by(chunk.max(1))
        .map(move |start| (start, chunk.min(total - start)))
}

/// Reads pieces of several arrays into host memory: `(array, first element, out)`, each piece
/// filling its `out`. Pieces on mappings are copied straight away; staged pieces go in one
/// readback (one submission and one wait for all of them, not one per array).
pub(crate) fn read_pieces<T: bytemuck::Pod>(
    ctx: &ContextInner,
    pieces: Vec<(&ArrayIo<'_, T>, usize, &mut [T])>,
) -> Result<()> {
    let mut staged = Vec::new();
    for (io, first, out) in pieces {
        if out.is_empty() {
            continue;
        }
        let (offset, len) = ArrayIo::<T>::byte_range(first, out.len());
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(out);
        match &io.mapped {
            Some(mapped) => mapped.sub(offset, len).read(bytes),
            None => staged.push(ReadbackItem {
                out: bytes,
                buffer: &io.storage.buffer,
                offset: io.storage.allocation.offset + offset,
                span: len,
            }),
        }
    }
    if staged.is_empty() {
        return Ok(());
    }
    ctx.readback(&mut staged)
}

/// Writes pieces of host memory into several arrays: `(array, first element, data)`. Pieces
/// on mappings are copied straight away; staged pieces go in one upload (submitted, not
/// waited for: the queue orders it before any later use of the arrays).
pub(crate) fn write_pieces<T: bytemuck::Pod>(
    ctx: &ContextInner,
    pieces: Vec<(&ArrayIo<'_, T>, usize, &[T])>,
) -> Result<()> {
    let mut staged = Vec::new();
    let mut storages = Vec::new();
    for (io, first, data) in pieces {
        if data.is_empty() {
            continue;
        }
        let (offset, len) = ArrayIo::<T>::byte_range(first, data.len());
        let bytes: &[u8] = bytemuck::cast_slice(data);
        match &io.mapped {
            Some(mapped) => mapped.sub(offset, len).write(bytes),
            None => {
                staged.push(UploadItem {
                    data: bytes,
                    buffer: &io.storage.buffer,
                    offset: io.storage.allocation.offset + offset,
                    span: len,
                });
                storages.push(io.storage);
            }
        }
    }
    if staged.is_empty() {
        return Ok(());
    }
    let id = ctx.upload(&staged)?;
    for storage in storages {
        storage.record_use(id);
    }
    Ok(())
}
