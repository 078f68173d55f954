//! An all-reduce of chunks through the staging pool's own buffers, for arrays the host
//! cannot map (discrete GPUs, or `GPU_ARENA_ZERO_COPY=0`): the chunk's pieces are copied by
//! the device into a readback staging buffer (one submission, one wait), copied once on the
//! host into an upload staging buffer, reduced there in place by MPI, and copied back by the
//! device (one submission, not waited for: the queue orders it before any later use of the
//! arrays).
//!
//! It is separate from `array_io.rs` because it skips that file's host chunk: a readback into
//! a host buffer and an upload out of it cost two host copies of the chunk and a buffer of its
//! size; here there is one copy (from readback memory, which the device writes, to upload
//! memory, which it reads: a plain wgpu readback buffer cannot be a copy's source) and no host
//! buffer. MPI still reduces in place (`MPI_IN_PLACE`), the call every other rank makes.

use super::element::CollectiveElement;
use crate::array::ArrayStorage;
use crate::backend::{all_reduce_in_place, MappedElements};
use crate::context::ContextInner;
use crate::error::{CollectiveFailure, Error, Result};
use crate::host_link::staging::{StagingBuffer, StagingKind};
use mpi::collective::SystemOperation;
use mpi::topology::SimpleCommunicator;

/// Bytes `[offset, offset + bytes)` of one array, a piece of a staged chunk.
pub(crate) struct Segment<'a> {
    pub(crate) storage: &'a ArrayStorage,
    pub(crate) offset: u64,
    pub(crate) bytes: u64,
}

/// Whether a chunk of `bytes` can be reduced in one staging buffer of `ctx`: the host link
/// maps its staging (wgpu's own staging elsewhere cannot be mapped) and the chunk fits one
/// buffer. Else the caller reduces it on a host chunk, through `array_io.rs`.
pub(crate) fn reducible_in_staging(ctx: &ContextInner, bytes: u64) -> bool {
    ctx.host_link() == crate::host_link::HostLink::Mapped && bytes <= ctx.config().staging_bytes
}

/// Reduces every chunk of `chunks` (each made of `segments`, in order, packed) with `op`
/// across the ranks of `comm`, in place in the arrays, through the staging pool: chunk k+1's
/// device copy into readback staging is submitted before MPI reduces chunk k, so the device
/// copies while MPI works (two readback buffers in flight; the pool holds three). Every chunk
/// must be [`reducible_in_staging`]; every element type of a collective is 4 or 8 bytes, so
/// packed pieces keep the device's 4-byte copy alignment.
pub(crate) fn reduce_staged_chunks<T: CollectiveElement>(
    ctx: &ContextInner,
    comm: &SimpleCommunicator,
    chunks: &[Vec<Segment<'_>>],
    op: SystemOperation,
    operation: &'static str,
) -> Result<()> {
    // Gathered single ops not yet submitted may write these arrays: they go first.
    ctx.flush()?;
    let pool = ctx.staging();
    let mut next: Option<StagingBuffer> = None;
    let ran = (|| {
        for (k, chunk) in chunks.iter().enumerate() {
            let current = match next.take() {
                Some(buffer) => buffer,
                None => start_readback(ctx, chunk)?,
            };
            if let Some(following) = chunks.get(k + 1) {
                match start_readback(ctx, following) {
                    Ok(buffer) => next = Some(buffer),
                    Err(error) => {
                        pool.release(StagingKind::Readback, current);
                        return Err(error);
                    }
                }
            }
            let reduced = finish_chunk::<T>(ctx, comm, &current, chunk, op, operation);
            pool.release(StagingKind::Readback, current);
            reduced?;
        }
        Ok(())
    })();
    if let Some(buffer) = next {
        pool.release(StagingKind::Readback, buffer);
    }
    ran
}

/// Takes a readback staging buffer and submits the device's copies of `segments` into it,
/// packed; the buffer is busy until they complete.
fn start_readback(ctx: &ContextInner, segments: &[Segment<'_>]) -> Result<StagingBuffer> {
    let mut readback = ctx.staging().acquire(ctx, StagingKind::Readback)?;
    let mut encoder = ctx.device().create_command_encoder(&Default::default());
    let mut at = 0;
    for s in segments {
        encoder.copy_buffer_to_buffer(
            &s.storage.buffer,
            s.storage.allocation.offset + s.offset,
            &readback.buffer,
            at,
            s.bytes,
        );
        at += s.bytes;
    }
    match ctx.submit_encoder(encoder, "copying a collective's chunk to staging", true) {
        Ok(id) => {
            readback.busy_until = id;
            Ok(readback)
        }
        Err(error) => {
            ctx.staging().release(StagingKind::Readback, readback);
            Err(error)
        }
    }
}

/// Waits for `readback`'s copies, then reduces the chunk in an upload buffer and submits the
/// copies back into the arrays.
fn finish_chunk<T: CollectiveElement>(
    ctx: &ContextInner,
    comm: &SimpleCommunicator,
    readback: &StagingBuffer,
    segments: &[Segment<'_>],
    op: SystemOperation,
    operation: &'static str,
) -> Result<()> {
    let total: u64 = segments.iter().map(|s| s.bytes).sum();
    if total == 0 {
        return Ok(());
    }
    ctx.wait_for(readback.busy_until)?;
    let mut upload = ctx.staging().acquire(ctx, StagingKind::Upload)?;
    let reduced = reduce_into_upload::<T>(
        ctx,
        comm,
        readback,
        &mut upload,
        segments,
        total,
        op,
        operation,
    );
    ctx.staging().release(StagingKind::Upload, upload);
    reduced
}

/// The host half of [`finish_chunk`]: the chunk from `readback` into `upload`, reduced
/// there, and the device's copies back into the arrays submitted (`upload` is busy until then).
#[allow(clippy::too_many_arguments)] // one chunk's two buffers, its pieces and its reduction
fn reduce_into_upload<T: CollectiveElement>(
    ctx: &ContextInner,
    comm: &SimpleCommunicator,
    readback: &StagingBuffer,
    upload: &mut StagingBuffer,
    segments: &[Segment<'_>],
    total: u64,
    op: SystemOperation,
    operation: &'static str,
) -> Result<()> {
    let chunk = upload.mapped.sub(0, total);
    readback.mapped.sub(0, total).copy_to(chunk.clone());
    MappedElements::<T>::new(chunk)
        .ok_or_else(|| misaligned_mapping(operation))?
        .write_with(|e| all_reduce_in_place(comm, e, op))
        .ok_or_else(|| in_place_unknown(operation))?;
    let mut encoder = ctx.device().create_command_encoder(&Default::default());
    let mut at = 0;
    for s in segments {
        encoder.copy_buffer_to_buffer(
            &upload.buffer,
            at,
            &s.storage.buffer,
            s.storage.allocation.offset + s.offset,
            s.bytes,
        );
        at += s.bytes;
    }
    let id = ctx.submit_encoder(
        encoder,
        "copying a collective's chunk back from staging",
        false,
    )?;
    upload.busy_until = id;
    for s in segments {
        s.storage.record_use(id);
    }
    Ok(())
}

/// The error of an in-place reduction on a library whose `MPI_IN_PLACE` is unknown (the
/// in-place paths run only where it is known), typed rather than a panic.
pub(super) fn in_place_unknown(operation: &'static str) -> Error {
    Error::Collective {
        operation,
        failure: CollectiveFailure::InPlaceUnknown,
        reason: "the MPI bindings do not know this MPI library's MPI_IN_PLACE; build the `mpi` \
                 crate against the MPI library mpirun runs"
            .into(),
    }
}

/// The error of a mapping that could not be lent as elements (it cannot happen: mappings are
/// page-aligned and arrays 256-aligned), kept typed rather than a panic.
pub(super) fn misaligned_mapping(operation: &'static str) -> Error {
    Error::Backend {
        during: operation.to_string(),
        reason: "an array's host mapping is not aligned to its element type".into(),
    }
}
