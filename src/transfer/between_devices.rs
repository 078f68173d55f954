//! Device-to-device transfers between two contexts: [`Context::device_put_from`] and
//! [`DeviceArray::copy_to`].
//!
//! Two devices share no memory wgpu can bind, so the bytes go through the host, in chunks of
//! the staging size, pipelined: the source device copies chunk k+1 (and k+2) into its readback
//! staging while the host moves chunk k from that staging into the destination's upload staging
//! and the destination device copies it into the new array. Each side takes what it has:
//! - a **mapped** array (zero-copy, UMA: lavapipe, APUs) is read or written in place, so two UMA
//!   devices copy with one `memcpy` between the two mappings, after waiting for the source
//!   device's work on the array;
//! - a Vulkan device without a mapping uses its own staging pool;
//! - other backends use wgpu's readback and `write_buffer`, a chunk at a time.

use super::guard::effective_level;
use super::TransferDirection;
use crate::array::DeviceArray;
use crate::backend::MappedRange;
use crate::context::{Context, ContextInner};
use crate::error::Result;
use crate::host_link::staged_copy::{ReadbackItem, UploadItem};
use crate::host_link::staging::{StagingBuffer, StagingKind, COPY_ALIGNMENT};
use crate::host_link::HostLink;
use crate::submission::SubmissionId;
use std::collections::VecDeque;
use std::sync::Arc;

/// The name transfers between devices give the guard and error messages (`copy_to` too: it is
/// `device_put_from` from the array's side).
const OPERATION: &str = "device_put_from";

/// Source chunks in flight at once: one being moved by the host, the next ones being copied
/// into staging by the source device (one less than the pool's buffers, so the pool never
/// waits on itself).
const CHUNKS_IN_FLIGHT: usize = crate::host_link::staging::STAGING_BUFFERS - 1;

impl Context {
    /// A copy of `array`, which may belong to any context, as a new array on this context: an
    /// **explicit device-to-device transfer**, checked by the transfer guard's device-to-device
    /// level of both contexts and counted in both contexts' [`Context::transfer_stats`]
    /// (`device_to_device.explicit`) and timelines. What `jax.device_put(x, device)` does.
    ///
    /// The bytes travel through the host in chunks of the staging size, pipelined through the
    /// two contexts' staging pools (the source device reads chunk k+1 back while chunk k
    /// uploads to this one); on UMA devices the arrays' own mappings are used, so the copy is
    /// one `memcpy`. Returns once the source array has been read (the upload to this device
    /// may still run; later work on the new array is ordered after it). An array of this
    /// context is copied on the device, as [`Context::copy`].
    ///
    /// Errors: the guard's refusal (`disallow_explicit` for device-to-device, in either
    /// context), out-of-memory on this device, an array still used by an unsubmitted
    /// [`crate::Sequence`] of its context, [`crate::Error::Device`] when either device fails.
    ///
    /// ```no_run
    /// # use gpu_arena::{ArenaConfig, Context};
    /// let a = Context::new(ArenaConfig::default())?;
    /// let b = Context::new(ArenaConfig::default())?;
    /// let x = a.device_put(&[1.0f32, 2.0, 3.0], &[3])?;
    /// let y = b.device_put_from(&x)?;
    /// assert_eq!(b.device_get(&y)?, [1.0, 2.0, 3.0]);
    /// # Ok::<(), gpu_arena::Error>(())
    /// ```
    #[track_caller]
    pub fn device_put_from<T: bytemuck::Pod>(
        &self,
        array: &DeviceArray<T>,
    ) -> Result<DeviceArray<T>> {
        let source = Arc::clone(&array.storage.ctx);
        if Arc::ptr_eq(&source, &self.inner) {
            return self.copy_as(array, OPERATION);
        }
        array.storage.check_ready_for(
            &source,
            crate::array::Access::Read,
            OPERATION,
            "the array",
        )?;
        let started = std::time::Instant::now();
        let bytes = array.size_in_bytes();
        let direction = TransferDirection::DeviceToDevice;
        source.guard(direction, bytes, OPERATION, true)?;
        // Ask the destination too when its level differs (a scoped guard applies to both).
        if effective_level(&self.inner.guard_defaults(), direction)
            != effective_level(&source.guard_defaults(), direction)
        {
            self.inner.guard(direction, bytes, OPERATION, true)?;
        }
        let copy = self.alloc_bytes::<T>(
            crate::memory_kind::MemoryKind::Device,
            array.shape(),
            bytes,
            None,
            std::panic::Location::caller(),
        )?;
        if bytes > 0 {
            let from = End::of(&source, array, true);
            let to = End::of(&self.inner, &copy, false);
            // A source the host may write in place is read under its kernel lock, as every
            // read of such an array is (a read again included).
            let mapped = array.storage.host_range().is_some();
            let kernels = mapped.then(|| source.kernels().lock());
            let (read, written) = transfer(&from, &to, bytes);
            // Looked at before this read's own staging copies are recorded on the source.
            let overlapped = array.storage.used_since(from.last_use);
            array.storage.record_use(read.last);
            copy.storage.record_use(written.last);
            read.result.and(written.result)?;
            drop(kernels);
            if overlapped {
                // Another thread's run used the source while it was read (in place, or over
                // several staging submissions): read it again in one submission, which sees
                // it between two runs.
                let mut host =
                    bytemuck::allocation::try_zeroed_vec(bytes as usize).map_err(|()| {
                        crate::error::Error::HostAllocation {
                            purpose: "a device-to-device copy read again".into(),
                            bytes,
                        }
                    })?;
                super::read_staged(&source, &array.storage, 0, &mut host, true)?;
                self.write_new(&copy.storage, &host)?;
            }
        }
        source.count_transfer(TransferDirection::DeviceToDevice, true, 1, bytes, started);
        self.inner
            .count_transfer(TransferDirection::DeviceToDevice, true, 1, bytes, started);
        Ok(copy)
    }
}

impl<T: bytemuck::Pod> DeviceArray<T> {
    /// A copy of this array on `ctx` (another device, or this one): the same as
    /// [`Context::device_put_from`], written from the array's side.
    ///
    /// ```no_run
    /// # let (a, b) = (gpu_arena::Context::new(Default::default())?, gpu_arena::Context::new(Default::default())?);
    /// let x = a.zeros::<u32>(&[1024])?;
    /// let on_b = x.copy_to(&b)?;
    /// # Ok::<(), gpu_arena::Error>(())
    /// ```
    #[track_caller]
    pub fn copy_to(&self, ctx: &Context) -> Result<DeviceArray<T>> {
        ctx.device_put_from(self)
    }
}

/// One side of a transfer: its context, where the array lies, and how to reach it.
struct End<'a> {
    ctx: &'a ContextInner,
    buffer: &'a wgpu::Buffer,
    offset: u64,
    /// The submission that last used the array (work the host must wait for before reading a
    /// mapped source).
    last_use: SubmissionId,
    access: Access,
}

/// How the host reaches one side's bytes.
enum Access {
    /// The array's own mapping (zero-copy).
    Mapped(MappedRange),
    /// The context's staging pool (Vulkan).
    Staged,
    /// wgpu's readback buffers and `write_buffer` (other backends).
    Wgpu,
}

impl<'a> End<'a> {
    /// The source or destination (`reading`) of a transfer. A mapped source is read in place
    /// only where the host reads the arena fast (UMA); VRAM behind a BAR is read through
    /// staging, as readbacks are.
    fn of<T: bytemuck::Pod>(
        ctx: &'a ContextInner,
        array: &'a DeviceArray<T>,
        reading: bool,
    ) -> Self {
        let mapped = match reading {
            true => array.storage.host_read_range(),
            false => array.storage.host_range(),
        };
        let access = match mapped {
            Some(range) => Access::Mapped(range),
            None if ctx.host_link() == HostLink::Mapped => Access::Staged,
            None => Access::Wgpu,
        };
        End {
            ctx,
            buffer: array.buffer(),
            offset: array.byte_offset(),
            last_use: array.last_use(),
            access,
        }
    }

    /// The most bytes one chunk may have on this side: a staging buffer's worth (rounded down
    /// to the copy alignment), or everything for a mapped array.
    fn chunk_limit(&self) -> u64 {
        match self.access {
            Access::Mapped(_) => u64::MAX,
            Access::Staged | Access::Wgpu => (self.ctx.config().staging_bytes / COPY_ALIGNMENT
                * COPY_ALIGNMENT)
                .max(COPY_ALIGNMENT),
        }
    }
}

/// What one side of a transfer did: its last submission (recorded on its array whatever
/// happened, so memory a copy may still touch is not handed out early) and whether it
/// succeeded.
struct SideOutcome {
    last: SubmissionId,
    result: Result<()>,
}

impl SideOutcome {
    fn new() -> Self {
        SideOutcome {
            last: SubmissionId(0),
            result: Ok(()),
        }
    }
}

/// `len` bytes of the source at byte `offset` of the array, read or being read.
struct Chunk {
    offset: u64,
    len: u64,
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

/// Moves `bytes` (> 0) from `from` to `to` chunk by chunk, keeping up to [`CHUNKS_IN_FLIGHT`]
/// source chunks in flight, and says what each side did.
fn transfer(from: &End<'_>, to: &End<'_>, bytes: u64) -> (SideOutcome, SideOutcome) {
    // Chunks are whole words (or the whole array), so every copy but the last is aligned and
    // the last one's rounding stays inside both allocations (multiples of 256 bytes).
    let chunk = from.chunk_limit().min(to.chunk_limit()).min(bytes);
    let (mut read, mut written) = (SideOutcome::new(), SideOutcome::new());
    if let Access::Mapped(_) = from.access {
        // The host reads the array itself: wait for the source device's work on it.
        read.result = from.ctx.wait_for(from.last_use);
    }
    let mut in_flight: VecDeque<Chunk> = VecDeque::new();
    let mut next = 0u64;
    while read.result.is_ok() && written.result.is_ok() {
        while next < bytes && in_flight.len() < CHUNKS_IN_FLIGHT {
            let len = chunk.min(bytes - next);
            match start_read(from, next, len) {
                Ok(started) => {
                    if let ChunkBytes::Staged(staging) = &started.bytes {
                        read.last = read.last.max(staging.busy_until);
                    }
                    in_flight.push_back(started);
                    next += len;
                }
                Err(error) => {
                    read.result = Err(error);
                    break;
                }
            }
        }
        let Some(done) = in_flight.pop_front() else {
            break;
        };
        match finish_read(from, &done) {
            Ok(()) => match write_chunk(to, &done) {
                Ok(id) => written.last = written.last.max(id),
                Err(error) => written.result = Err(error),
            },
            Err(error) => read.result = Err(error),
        }
        release(from, done);
    }
    // After an error: give back the staging buffers still in flight (the pool reuses each
    // once its copy has completed).
    for chunk in in_flight {
        release(from, chunk);
    }
    (read, written)
}

/// The copy's length on the device: whole words.
fn padded(len: u64) -> u64 {
    len.next_multiple_of(COPY_ALIGNMENT)
}

/// Starts reading `len` bytes at `offset` of the source: a piece of its mapping, a copy into
/// a readback staging buffer submitted on the source device, or (other backends) a readback
/// done at once.
fn start_read(from: &End<'_>, offset: u64, len: u64) -> Result<Chunk> {
    let bytes = match &from.access {
        Access::Mapped(range) => ChunkBytes::Mapped(range.sub(offset, len)),
        Access::Staged => {
            let pool = from.ctx.staging();
            let mut staging = pool.acquire(from.ctx, StagingKind::Readback)?;
            let mut encoder = from
                .ctx
                .device()
                .create_command_encoder(&Default::default());
            encoder.copy_buffer_to_buffer(
                from.buffer,
                from.offset + offset,
                &staging.buffer,
                0,
                padded(len),
            );
            match from.ctx.submit_encoder_for_host_read(
                encoder,
                "copying an array to staging for another device",
            ) {
                Ok(id) => staging.busy_until = id,
                Err(error) => {
                    pool.release(StagingKind::Readback, staging);
                    return Err(error);
                }
            }
            ChunkBytes::Staged(staging)
        }
        Access::Wgpu => {
            let mut out = vec![0u8; len as usize];
            from.ctx.readback(&mut [ReadbackItem {
                out: &mut out,
                buffer: from.buffer,
                offset: from.offset + offset,
                span: padded(len),
            }])?;
            ChunkBytes::Host(out)
        }
    };
    Ok(Chunk { offset, len, bytes })
}

/// Waits until the chunk's bytes can be read by the host.
fn finish_read(from: &End<'_>, chunk: &Chunk) -> Result<()> {
    match &chunk.bytes {
        ChunkBytes::Staged(staging) => from.ctx.wait_for(staging.busy_until),
        ChunkBytes::Mapped(_) | ChunkBytes::Host(_) => Ok(()),
    }
}

/// Copies a chunk's bytes into mapped memory of the same length.
fn copy_into(chunk: &Chunk, dst: MappedRange) {
    // The chunk's copy into staging has completed (`finish_read`); the ranges invalidate
    // before they read and flush after they write where the memory is not coherent.
    match &chunk.bytes {
        ChunkBytes::Mapped(range) => range.copy_to(dst),
        ChunkBytes::Staged(staging) => staging.mapped.sub(0, chunk.len).copy_to(dst),
        ChunkBytes::Host(bytes) => dst.write(bytes),
    }
}

/// Writes a read chunk into the destination array: into its mapping, through an upload
/// staging buffer and a copy submitted on the destination device, or with `write_buffer`.
/// Returns the destination's submission (0 when none was needed).
fn write_chunk(to: &End<'_>, chunk: &Chunk) -> Result<SubmissionId> {
    let (offset, len) = (chunk.offset, chunk.len);
    match &to.access {
        Access::Mapped(range) => {
            // The array is new: no GPU work uses it.
            copy_into(chunk, range.sub(offset, len));
            Ok(SubmissionId(0))
        }
        Access::Staged => {
            let pool = to.ctx.staging();
            let mut staging = pool.acquire(to.ctx, StagingKind::Upload)?;
            let words = staging.mapped.sub(0, padded(len));
            copy_into(chunk, words.sub(0, len));
            // No stale staging bytes in the array's last word.
            words.sub(len, padded(len) - len).zero();
            let mut encoder = to.ctx.device().create_command_encoder(&Default::default());
            encoder.copy_buffer_to_buffer(
                &staging.buffer,
                0,
                to.buffer,
                to.offset + offset,
                padded(len),
            );
            let submitted = to.ctx.submit_encoder(
                encoder,
                "copying an array from another device out of staging",
            );
            if let Ok(id) = submitted {
                staging.busy_until = id;
            }
            pool.release(StagingKind::Upload, staging);
            submitted
        }
        Access::Wgpu => {
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
            to.ctx.upload(&[UploadItem {
                data,
                buffer: to.buffer,
                offset: to.offset + offset,
                span: padded(len),
            }])
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
fn release(from: &End<'_>, chunk: Chunk) {
    if let ChunkBytes::Staged(staging) = chunk.bytes {
        from.ctx.staging().release(StagingKind::Readback, staging);
    }
}
