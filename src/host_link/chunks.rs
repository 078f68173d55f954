//! An array moved through the host link a chunk at a time, for copies between two contexts:
//! each side reads or writes its array in place when the host reaches it (a mapped array), else
//! through its context's staging pool, else through wgpu's own staging. The caller keeps the
//! chunks in flight and pipelines them; this file says how one chunk leaves and arrives.

use super::port::HostPort;
use super::staged_copy::{ReadbackItem, UploadItem};
use super::staging::{StagingBuffer, StagingKind, COPY_ALIGNMENT};
use super::HostLink;
use crate::backend::MappedRange;
use crate::error::Result;
use crate::submission::SubmissionId;

/// One side of a chunked transfer: where its array lies and how the host reaches it.
pub(crate) struct ChunkSide<'a> {
    pub(crate) buffer: &'a wgpu::Buffer,
    pub(crate) offset: u64,
    /// The array's own mapping where the host reads or writes it in place.
    pub(crate) mapped: Option<MappedRange>,
    /// The context's link, for an array the host does not reach in place.
    pub(crate) link: HostLink,
}

/// `len` bytes of the source at byte `offset` of the array, read or being read.
pub(crate) struct Chunk {
    pub(crate) offset: u64,
    pub(crate) len: u64,
    bytes: ChunkBytes,
}

/// Where a chunk's bytes are.
enum ChunkBytes {
    /// A piece of the source array's own mapping.
    Mapped(MappedRange),
    /// The start of a source readback staging buffer, filled by its `busy_until` submission.
    Staged(StagingBuffer),
    /// On the host already.
    Host(Vec<u8>),
}

impl Chunk {
    /// The submission that fills the chunk's staging buffer, if it has one.
    pub(crate) fn staged_by(&self) -> Option<SubmissionId> {
        match &self.bytes {
            ChunkBytes::Staged(staging) => Some(staging.busy_until),
            ChunkBytes::Mapped(_) | ChunkBytes::Host(_) => None,
        }
    }

    /// Copies the chunk's bytes into mapped memory of the same length (the chunk's copy into
    /// staging has completed; the ranges invalidate before they read and flush after they
    /// write where the memory is not coherent).
    fn copy_into(&self, dst: MappedRange) {
        match &self.bytes {
            ChunkBytes::Mapped(range) => range.copy_to(dst),
            ChunkBytes::Staged(staging) => staging.mapped.sub(0, self.len).copy_to(dst),
            ChunkBytes::Host(bytes) => dst.write(bytes),
        }
    }
}

/// The copy's length on the device: whole words.
fn padded(len: u64) -> u64 {
    len.next_multiple_of(COPY_ALIGNMENT)
}

impl ChunkSide<'_> {
    /// The most bytes one chunk may have on this side: a staging buffer's worth (rounded down
    /// to the copy alignment), or everything for a mapped array.
    pub(crate) fn chunk_limit(&self, staging_bytes: u64) -> u64 {
        match self.mapped {
            Some(_) => u64::MAX,
            None => (staging_bytes / COPY_ALIGNMENT * COPY_ALIGNMENT).max(COPY_ALIGNMENT),
        }
    }

    /// Starts reading `len` bytes at `offset` of the source: a piece of its mapping, a copy
    /// into a readback staging buffer submitted on the source device, or (wgpu's staging) a
    /// readback done at once.
    pub(crate) fn start_read(&self, port: &impl HostPort, offset: u64, len: u64) -> Result<Chunk> {
        let bytes = match (&self.mapped, self.link) {
            (Some(range), _) => ChunkBytes::Mapped(range.sub(offset, len)),
            (None, HostLink::Mapped) => {
                let pool = port.staging();
                let mut staging = pool.acquire(port, StagingKind::Readback)?;
                let mut encoder = port.device().create_command_encoder(&Default::default());
                encoder.copy_buffer_to_buffer(
                    self.buffer,
                    self.offset + offset,
                    &staging.buffer,
                    0,
                    padded(len),
                );
                let during = "copying an array to staging for another device";
                match port.submit_copies(encoder, during, true) {
                    Ok(id) => staging.busy_until = id,
                    Err(error) => {
                        pool.release(StagingKind::Readback, staging);
                        return Err(error);
                    }
                }
                ChunkBytes::Staged(staging)
            }
            (None, HostLink::Wgpu) => {
                let mut out = vec![0u8; len as usize];
                self.link.readback(
                    port,
                    &mut [ReadbackItem {
                        out: &mut out,
                        buffer: self.buffer,
                        offset: self.offset + offset,
                        span: padded(len),
                    }],
                )?;
                ChunkBytes::Host(out)
            }
        };
        Ok(Chunk { offset, len, bytes })
    }

    /// Waits until the chunk's bytes can be read by the host.
    pub(crate) fn finish_read(&self, port: &impl HostPort, chunk: &Chunk) -> Result<()> {
        match chunk.staged_by() {
            Some(id) => port.wait_for_copies(id),
            None => Ok(()),
        }
    }

    /// Writes a read chunk into the destination array: into its mapping, through an upload
    /// staging buffer and a copy submitted on the destination device, or with `write_buffer`.
    /// Returns the destination's submission (0 when none was needed).
    pub(crate) fn write(&self, port: &impl HostPort, chunk: &Chunk) -> Result<SubmissionId> {
        let (offset, len) = (chunk.offset, chunk.len);
        match (&self.mapped, self.link) {
            (Some(range), _) => {
                // The array is new: no GPU work uses it.
                chunk.copy_into(range.sub(offset, len));
                Ok(SubmissionId(0))
            }
            (None, HostLink::Mapped) => {
                let pool = port.staging();
                let mut staging = pool.acquire(port, StagingKind::Upload)?;
                let words = staging.mapped.sub(0, padded(len));
                chunk.copy_into(words.sub(0, len));
                // No stale staging bytes in the array's last word.
                words.sub(len, padded(len) - len).zero();
                let mut encoder = port.device().create_command_encoder(&Default::default());
                encoder.copy_buffer_to_buffer(
                    &staging.buffer,
                    0,
                    self.buffer,
                    self.offset + offset,
                    padded(len),
                );
                let during = "copying an array from another device out of staging";
                let submitted = port.submit_copies(encoder, during, false);
                if let Ok(id) = submitted {
                    staging.busy_until = id;
                }
                pool.release(StagingKind::Upload, staging);
                submitted
            }
            (None, HostLink::Wgpu) => {
                let copied;
                let data: &[u8] = match &chunk.bytes {
                    ChunkBytes::Host(bytes) => bytes,
                    ChunkBytes::Mapped(range) => {
                        copied = read_to_host(range, len);
                        &copied
                    }
                    ChunkBytes::Staged(staging) => {
                        copied = read_to_host(&staging.mapped, len);
                        &copied
                    }
                };
                self.link.upload(
                    port,
                    &[UploadItem {
                        data,
                        buffer: self.buffer,
                        offset: self.offset + offset,
                        span: padded(len),
                    }],
                )
            }
        }
    }
}

/// The first `len` bytes of mapped memory, copied to the host.
fn read_to_host(range: &MappedRange, len: u64) -> Vec<u8> {
    let mut out = vec![0u8; len as usize];
    range.read(&mut out);
    out
}

/// Gives a chunk's staging buffer back to the source's pool.
pub(crate) fn release(port: &impl HostPort, chunk: Chunk) {
    if let ChunkBytes::Staged(staging) = chunk.bytes {
        port.staging().release(StagingKind::Readback, staging);
    }
}
