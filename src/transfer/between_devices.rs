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
//!
//! This file keeps the chunks in flight; how one chunk leaves a side and arrives at the other
//! is the host link's (`host_link/chunks.rs`).

use super::guard::effective_level;
use super::TransferDirection;
use crate::array::DeviceArray;
use crate::context::{Context, ContextInner};
use crate::error::Result;
use crate::host_link::chunks::{release, Chunk, ChunkSide};
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
    /// context), out-of-memory on this device, [`crate::Error::PendingInRecorder`] for an array
    /// an unsubmitted [`crate::Sequence`] of its context writes (the copy only reads it: one the
    /// sequence only reads is copied), [`crate::Error::DeviceLost`] when either device is
    /// lost (before anything is allocated), [`crate::Error::Device`] when either device
    /// refuses the copy's work.
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
        // A lost device on either side is refused first: before the arguments, the guard and
        // the copy's allocation.
        self.inner.check_device(OPERATION)?;
        source.check_device(OPERATION)?;
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
            OPERATION,
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

/// One side of a transfer: its context, and where its array lies and how the host reaches it.
struct End<'a> {
    ctx: &'a ContextInner,
    side: ChunkSide<'a>,
    /// The submission that last used the array (work the host must wait for before reading a
    /// mapped source).
    last_use: SubmissionId,
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
        End {
            ctx,
            side: ChunkSide {
                buffer: array.buffer(),
                offset: array.byte_offset(),
                mapped,
                link: ctx.host_link(),
            },
            last_use: array.last_use(),
        }
    }

    fn chunk_limit(&self) -> u64 {
        self.side.chunk_limit(self.ctx.config().staging_bytes)
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

/// Moves `bytes` (> 0) from `from` to `to` chunk by chunk, keeping up to [`CHUNKS_IN_FLIGHT`]
/// source chunks in flight, and says what each side did.
fn transfer(from: &End<'_>, to: &End<'_>, bytes: u64) -> (SideOutcome, SideOutcome) {
    // Chunks are whole words (or the whole array), so every copy but the last is aligned and
    // the last one's rounding stays inside both allocations (multiples of 256 bytes).
    let chunk = from.chunk_limit().min(to.chunk_limit()).min(bytes);
    let (mut read, mut written) = (SideOutcome::new(), SideOutcome::new());
    if from.side.mapped.is_some() {
        // The host reads the array itself: wait for the source device's work on it.
        read.result = from.ctx.wait_for(from.last_use);
    }
    let mut in_flight: VecDeque<Chunk> = VecDeque::new();
    let mut next = 0u64;
    while read.result.is_ok() && written.result.is_ok() {
        while next < bytes && in_flight.len() < CHUNKS_IN_FLIGHT {
            let len = chunk.min(bytes - next);
            match from.side.start_read(from.ctx, next, len) {
                Ok(started) => {
                    if let Some(id) = started.staged_by() {
                        read.last = read.last.max(id);
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
        match from.side.finish_read(from.ctx, &done) {
            Ok(()) => match to.side.write(to.ctx, &done) {
                Ok(id) => written.last = written.last.max(id),
                Err(error) => written.result = Err(error),
            },
            Err(error) => read.result = Err(error),
        }
        release(from.ctx, done);
    }
    // After an error: give back the staging buffers still in flight (the pool reuses each
    // once its copy has completed).
    for chunk in in_flight {
        release(from.ctx, chunk);
    }
    (read, written)
}
