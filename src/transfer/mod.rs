//! Host<->device transfers: explicit `device_put` / `device_get`, batches, zero-copy on UMA,
//! the transfer guard and transfer statistics.
//!
//! Three paths, chosen per array:
//! - **zero-copy** when the array's memory is host-visible (UMA: APUs, integrated GPUs,
//!   lavapipe) and `zero_copy` is on: a memcpy into or out of the mapped arena, after waiting
//!   for GPU work that still uses the array, flushed or invalidated when the memory is not
//!   coherent. On a discrete GPU with direct BAR writes on (`GPU_ARENA_BAR_WRITES`) uploads
//!   take this path too, but readbacks never do: reading VRAM through the BAR is slow;
//! - **staging** on Vulkan otherwise: gpu-allocator host-visible buffers of the plan's
//!   upload / readback types, pooled and reused, with merged copy commands;
//! - **wgpu's own** `write_buffer` / `map_async` on non-Vulkan backends.
//!
//! Small uploads on the staging path (a single `device_put`, a single op's host operand, up to
//! [`MAX_GATHERED_UPLOAD_BYTES`]) go with the context's gathered single ops: copied into
//! staging the batch owns and copied to their arrays by commands recorded in the batch, so a
//! loop of them makes no submission of its own (`host_link/gathered_staging.rs`).
//!
//! The staging buffers, the gathered batch's staging and the transfer statistics are the
//! context's host link (`crate::host_link`, below the context), which also moves the bytes.
//! Files here: `batch.rs` (upload batches),
//! `between_devices.rs` (arrays from one context to another), `guard.rs`.

mod batch;
mod between_devices;
mod guard;

pub use crate::host_link::gathered_staging::{
    GATHERED_STAGING_BUFFERS, GATHERED_STAGING_BYTES, MAX_GATHERED_UPLOAD_BYTES,
};
pub use batch::{FinishedUpload, PendingArray, UploadBatch};
pub use guard::TransferGuard;
// The guard's levels are configuration (`crate::config`); re-exported where they were first.
pub use crate::config::{TransferDirection, TransferGuardLevel, TransferGuardLevels};
pub use crate::host_link::stats::{DirectionStats, TransferCounter, TransferStats};

pub(crate) use guard::{check as check_guard, check_ahead as check_guard_ahead};

use crate::array::{Access, ArrayStorage, DeviceArray};
use crate::context::{Context, ContextInner};
use crate::error::{Error, Result};
use crate::host_link::staged_copy::{ReadbackItem, UploadItem};
use crate::host_link::staging::COPY_ALIGNMENT;
use crate::memory_kind::MemoryKind;
use crate::shape::check_shape;
use crate::submission::SubmissionId;

impl Context {
    /// Copies host data to a new device array of the given shape (an explicit transfer).
    ///
    /// The shape must hold exactly `data.len()` elements (rank at most 6); zero-size arrays
    /// are fine. Returns once the data is copied out of `data`; the GPU copy may still run, and
    /// later GPU work on the array is ordered after it. Where the arena is not host-visible (a
    /// discrete GPU; GL, Metal, DX12), an upload of at most [`MAX_GATHERED_UPLOAD_BYTES`] goes
    /// with the context's gathered single ops, so a loop of small puts and ops makes no
    /// submission per put: on Vulkan staged in their batch's staging and copied by a command of
    /// that batch, elsewhere held by the batch and written with wgpu's `write_buffer` when it
    /// is submitted. Larger ones go through the host link with submissions of their own.
    #[track_caller]
    pub fn device_put<T: bytemuck::Pod>(
        &self,
        data: &[T],
        shape: &[usize],
    ) -> Result<DeviceArray<T>> {
        self.put(MemoryKind::Device, data, shape, true, "device_put")
    }

    /// [`Context::device_put`] into the memory of `kind` (JAX's
    /// `jax.device_put(x, sharding.with_memory_kind("pinned_host"))`). A pinned-host array
    /// is written in place through its mapping where its memory is host-visible (on Vulkan,
    /// with [`ArenaConfig::zero_copy`](crate::ArenaConfig) on); elsewhere it takes the path
    /// `device_put` takes. Guarded and counted as a host-to-device
    /// transfer, as every put.
    ///
    /// Errors: as [`Context::device_put`]; out-of-memory of the kind (naming its limit),
    /// [`Error::MemoryKindUnavailable`] where the device has no memory of that kind.
    ///
    /// ```no_run
    /// use gpu_arena::{Context, MemoryKind};
    /// # let ctx = Context::new(Default::default())?;
    /// let moments = ctx.device_put_in(MemoryKind::PinnedHost, &[0.0f32; 1024], &[1024])?;
    /// assert_eq!(moments.memory_kind(), MemoryKind::PinnedHost);
    /// # Ok::<(), gpu_arena::Error>(())
    /// ```
    #[track_caller]
    pub fn device_put_in<T: bytemuck::Pod>(
        &self,
        kind: MemoryKind,
        data: &[T],
        shape: &[usize],
    ) -> Result<DeviceArray<T>> {
        self.put(kind, data, shape, true, "device_put_in")
    }

    /// Copies a device array back to the host (an explicit transfer). Waits for GPU work that
    /// writes the array.
    pub fn device_get<T: bytemuck::Pod>(&self, array: &DeviceArray<T>) -> Result<Vec<T>> {
        self.get_one(array, true, "device_get")
    }

    /// Copies a device array, or a view of one, into `out`, memory the caller owns: no
    /// allocation, and when `out` is reused its pages are already in memory, which is most of
    /// the cost of a large read into fresh memory (an explicit transfer, like
    /// [`Context::device_get`]: guarded, counted in [`Context::transfer_stats`] and on the
    /// timeline). Waits for GPU work that writes the array. On UMA it is one copy from the
    /// array's mapping; elsewhere it goes through the same pipelined staging as `device_get`.
    ///
    /// `source` is `&array`, a view (`array.view(&[l])?`, `array.reshaped(..)?`) or `&view`.
    /// Two threads may read one array into buffers of their own at the same time.
    ///
    /// ```no_run
    /// # let ctx = gpu_arena::Context::new(Default::default())?;
    /// let cache = ctx.zeros::<f32>(&[4, 1024])?;
    /// let mut row = vec![0.0f32; 1024];
    /// for layer in 0..4 {
    ///     ctx.device_get_into(cache.view(&[layer])?, &mut row)?; // the same memory each time
    /// }
    /// let mut all = vec![0.0f32; 4 * 1024];
    /// ctx.device_get_into(&cache, &mut all)?;
    /// # Ok::<(), gpu_arena::Error>(())
    /// ```
    ///
    /// Errors: [`Error::Shape`] when `out.len()` differs from the source's element count
    /// (nothing is read); [`Error::PendingInRecorder`] for an array a [`crate::Sequence`] not
    /// submitted yet writes (one it only reads is read); [`Error::ForeignArray`] for an array of another context; the guard's
    /// refusal; [`Error::Device`] when the device fails.
    pub fn device_get_into<'a, T: bytemuck::Pod>(
        &self,
        source: impl Into<crate::view::ArrayView<'a, T>>,
        out: &mut [T],
    ) -> Result<()> {
        self.get_into(&source.into(), out, true, "device_get_into")
    }

    /// Copies many device arrays back at once: one staging area, one submission per staging
    /// buffer filled (one in all on other backends than Vulkan, where wgpu stages), one wait
    /// (an explicit transfer each).
    pub fn device_get_many<T: bytemuck::Pod>(
        &self,
        arrays: &[&DeviceArray<T>],
    ) -> Result<Vec<Vec<T>>> {
        self.get_many(arrays, true, "device_get_many")
    }

    /// Starts a batch of uploads carried out together by [`UploadBatch::finish`].
    pub fn upload_batch(&self) -> UploadBatch<'_> {
        UploadBatch::new(self)
    }

    /// Transfers so far, per direction, explicit and implicit apart.
    pub fn transfer_stats(&self) -> TransferStats {
        self.inner.transfer_counters().snapshot()
    }

    /// The transfer-guard levels this context started with (from the environment); scoped
    /// [`TransferGuard`]s override them per thread.
    pub fn transfer_guard_defaults(&self) -> TransferGuardLevels {
        self.inner.guard_defaults()
    }

    /// Bytes of staging this context holds for small uploads gathered with its single ops (see
    /// [`MAX_GATHERED_UPLOAD_BYTES`]): at most [`GATHERED_STAGING_BUFFERS`] buffers of
    /// [`GATHERED_STAGING_BYTES`] (or of `staging_bytes`, when smaller), made on first use.
    /// Zero where uploads do not take staging (zero-copy, non-Vulkan backends).
    pub fn gathered_staging_bytes(&self) -> u64 {
        self.inner.gathered_staging_bytes()
    }

    /// Number of staging buffers the pool holds now, (upload, readback): at most 3 each once
    /// the work that used them is released, whatever was recorded (a [`crate::Sequence`] of
    /// many `put`s takes more while it is recorded and gives the extra ones back when it is
    /// submitted or dropped); the pool does not grow with the number of transfers.
    pub fn staging_buffers_created(&self) -> (usize, usize) {
        let [up, down] = self.inner.staging().created();
        (up, down)
    }

    #[track_caller]
    pub(crate) fn put<T: bytemuck::Pod>(
        &self,
        kind: MemoryKind,
        data: &[T],
        shape: &[usize],
        explicit: bool,
        operation: &'static str,
    ) -> Result<DeviceArray<T>> {
        // A lost device refuses before anything else is looked at.
        self.inner.check_device(operation)?;
        let (bytes, started) = self.inner.start_put(data, shape, explicit, operation)?;
        let array = self.alloc_bytes::<T>(
            kind,
            shape,
            bytes.len() as u64,
            None,
            operation,
            std::panic::Location::caller(),
        )?;
        self.write_new(&array.storage, bytes)?;
        self.inner.count_put(explicit, bytes, started);
        Ok(array)
    }

    /// Writes `bytes` into `storage`, an array of this context no other thread has yet: in
    /// place where zero-copy applies, with the gathered ops when small, else through an upload
    /// of its own (after any work already submitted on it, in queue order).
    pub(crate) fn write_new(&self, storage: &ArrayStorage, bytes: &[u8]) -> Result<()> {
        if storage.write_zero_copy(bytes) || bytes.is_empty() {
            // Written in place, or nothing to write.
        } else if let Some(step) = self.inner.gathered_upload(storage, bytes) {
            // Small: staged with the gathered ops, copied by a command of their batch.
            self.inner.gather(vec![step], |id| storage.record_use(id))?;
        } else {
            let id = self.inner.upload(&[UploadItem {
                data: bytes,
                buffer: &storage.buffer,
                offset: storage.allocation.offset,
                span: storage.allocation.size,
            }])?;
            storage.record_use(id);
        }
        Ok(())
    }

    /// [`Context::get_many`] of one array.
    fn get_one<T: bytemuck::Pod>(
        &self,
        array: &DeviceArray<T>,
        explicit: bool,
        operation: &'static str,
    ) -> Result<Vec<T>> {
        Ok(self
            .get_many(&[array], explicit, operation)?
            .pop()
            .unwrap_or_default())
    }

    pub(crate) fn get_many<T: bytemuck::Pod>(
        &self,
        arrays: &[&DeviceArray<T>],
        explicit: bool,
        operation: &'static str,
    ) -> Result<Vec<Vec<T>>> {
        self.inner.check_device(operation)?;
        for a in arrays {
            a.storage
                .check_ready_for(&self.inner, Access::Read, operation, "the array")?;
        }
        let started = std::time::Instant::now();
        // The same array may be named many times: the sum is the caller's to choose.
        let total = arrays
            .iter()
            .try_fold(0u64, |sum, a| sum.checked_add(a.size_in_bytes()))
            .ok_or_else(|| Error::HostAllocation {
                purpose: format!(
                    "{operation} of {}",
                    crate::count::count(arrays.len(), "array")
                ),
                bytes: u64::MAX,
            })?;
        self.inner
            .guard(TransferDirection::DeviceToHost, total, operation, explicit)?;
        let mut outputs = host_outputs(arrays, total, operation)?;
        let before: Vec<SubmissionId> = arrays.iter().map(|a| a.last_use()).collect();
        let mut staged = Vec::new();
        for ((array, out), &before) in arrays.iter().zip(outputs.iter_mut()).zip(&before) {
            let out: &mut [u8] = bytemuck::cast_slice_mut(out.as_mut_slice());
            let direct = array.storage.host_read_range();
            if let Some(range) = direct {
                // UMA: wait for GPU work that may still write the array, then read it directly.
                self.inner.wait_for(before)?;
                read_in_place(&self.inner, &range, out);
            } else if !out.is_empty() {
                staged.push(ReadbackItem {
                    out,
                    buffer: &array.storage.buffer,
                    offset: array.storage.allocation.offset,
                    span: array.storage.allocation.size,
                });
            }
        }
        if !staged.is_empty() {
            // Arrays the host may write in place are read under the kernel lock, as reads in
            // place are.
            let mapped = arrays.iter().any(|a| a.storage.host_range().is_some());
            let _kernels = mapped.then(|| self.inner.kernels().lock());
            self.inner.readback(&mut staged)?;
        }
        for ((array, out), &before) in arrays.iter().zip(outputs.iter_mut()).zip(&before) {
            let out: &mut [u8] = bytemuck::cast_slice_mut(out.as_mut_slice());
            reread_if_overlapped(&self.inner, &array.storage, before, 0, out)?;
        }
        self.inner.count_transfer(
            TransferDirection::DeviceToHost,
            explicit,
            arrays.len() as u64,
            total,
            started,
        );
        Ok(outputs)
    }
}

impl Context {
    /// [`Context::device_get_into`]'s body: one array or view into the caller's slice, through
    /// the mapping on UMA and through [`ContextInner::readback`] otherwise.
    pub(crate) fn get_into<T: bytemuck::Pod>(
        &self,
        source: &crate::view::ArrayView<'_, T>,
        out: &mut [T],
        explicit: bool,
        operation: &'static str,
    ) -> Result<()> {
        let (storage, view_offset) = source.parts();
        storage.check_ready_for(&self.inner, Access::Read, operation, "the source")?;
        if out.len() != source.len() {
            return Err(Error::Shape {
                operation,
                reason: format!(
                    "the source has {} (shape {:?}) but the output slice holds {}; pass a slice of exactly {}",
                    crate::count::count(source.len(), "element"),
                    source.shape(),
                    out.len(),
                    crate::count::count(source.len(), "element")
                ),
            });
        }
        let started = std::time::Instant::now();
        let bytes = source.size_in_bytes();
        self.inner
            .guard(TransferDirection::DeviceToHost, bytes, operation, explicit)?;
        let out: &mut [u8] = bytemuck::cast_slice_mut(out);
        let before = storage.last_use();
        let direct = storage.host_read_range();
        if let Some(range) = direct {
            // UMA: wait for GPU work that may still write the array, then copy from the mapping.
            self.inner.wait_for(before)?;
            read_in_place(&self.inner, &range.sub(view_offset, bytes), out);
        } else if !out.is_empty() {
            read_staged(&self.inner, storage, view_offset, out, false)?;
        }
        reread_if_overlapped(&self.inner, storage, before, view_offset, out)?;
        self.inner
            .count_transfer(TransferDirection::DeviceToHost, explicit, 1, bytes, started);
        Ok(())
    }
}

/// Copies `range`, an array's mapping, into `out` under the kernel lock: the host writes
/// arrays in place only under it (a captured run's inputs, single ops' host copies on a CPU
/// adapter), so none writes these bytes during the copy. GPU work that writes them is seen
/// by [`reread_if_overlapped`]. Readbacks of arrays the host may write take the lock too
/// ([`read_staged`]), for as long as their copies run.
fn read_in_place(inner: &ContextInner, range: &crate::backend::MappedRange, out: &mut [u8]) {
    let _kernels = inner.kernels().lock();
    range.read(out);
}

/// Reads `out.len()` bytes of an array from `view_offset` again, in one submission, when a
/// submission used the array while they were read ([`ArrayStorage::used_since`] `before`, its
/// last use when the read began): a captured run writes its arrays at every run, with no
/// borrow to keep another thread's read out, and a read in place or through several staging
/// submissions may then hold parts of two states. One copy in one submission sees the array
/// as the queue leaves it between two submissions.
fn reread_if_overlapped(
    inner: &ContextInner,
    storage: &ArrayStorage,
    before: SubmissionId,
    view_offset: u64,
    out: &mut [u8],
) -> Result<()> {
    if !storage.used_since(before) || out.is_empty() {
        return Ok(());
    }
    read_staged(inner, storage, view_offset, out, true)
}

/// Reads `out.len()` bytes of an array from `view_offset` through [`ContextInner::readback`]
/// (`at_once`: [`crate::host_link::wgpu_copy::readback_at_once`]). Buffer copies start on
/// [`COPY_ALIGNMENT`]: a view of 1- or 2-byte elements that starts between two words is read
/// from the word before it into a small host buffer (its own bytes plus at most 3), then
/// copied into `out`.
pub(super) fn read_staged(
    inner: &ContextInner,
    storage: &ArrayStorage,
    view_offset: u64,
    out: &mut [u8],
    at_once: bool,
) -> Result<()> {
    // Under the kernel lock where the host may write the array in place, so that no such write
    // lands while the copy runs (and a read again comes between two whole runs).
    let _kernels = (at_once || storage.host_range().is_some()).then(|| inner.kernels().lock());
    let skip = view_offset % COPY_ALIGNMENT;
    let start = view_offset - skip;
    // The copy rounds the bytes up to a word, which the arena's 256-byte allocations hold.
    let span = |len: u64| len.next_multiple_of(COPY_ALIGNMENT);
    let readback = |items: &mut [ReadbackItem<'_>]| match at_once {
        true => crate::host_link::wgpu_copy::readback_at_once(inner, items),
        false => inner.readback(items),
    };
    if skip == 0 {
        return readback(&mut [ReadbackItem {
            span: span(out.len() as u64),
            out,
            buffer: &storage.buffer,
            offset: storage.allocation.offset + start,
        }]);
    }
    let len = skip as usize + out.len();
    let mut words = Vec::new();
    words
        .try_reserve_exact(len)
        .map_err(|_| Error::HostAllocation {
            purpose: "an unaligned view's readback".into(),
            bytes: len as u64,
        })?;
    words.resize(len, 0u8);
    readback(&mut [ReadbackItem {
        span: span(len as u64),
        out: &mut words,
        buffer: &storage.buffer,
        offset: storage.allocation.offset + start,
    }])?;
    out.copy_from_slice(&words[skip as usize..]);
    Ok(())
}

/// Zeroed host vectors for a readback of `arrays` (`total` bytes in all), allocated fallibly:
/// the caller chose their sizes, so running out of host memory is an error, not an abort.
/// calloc-backed, so large outputs are not written twice (the copy threads fault the pages in).
fn host_outputs<T: bytemuck::Pod>(
    arrays: &[&DeviceArray<T>],
    total: u64,
    operation: &'static str,
) -> Result<Vec<Vec<T>>> {
    let refuse = || Error::HostAllocation {
        purpose: format!("the result of {operation}"),
        bytes: total,
    };
    let mut outputs = Vec::new();
    outputs
        .try_reserve_exact(arrays.len())
        .map_err(|_| refuse())?;
    for array in arrays {
        outputs.push(bytemuck::allocation::try_zeroed_vec(array.len()).map_err(|()| refuse())?);
    }
    Ok(outputs)
}

impl ContextInner {
    /// The step that uploads `bytes` into the fresh array `storage` with the gathered single
    /// ops, when that path applies: at most [`MAX_GATHERED_UPLOAD_BYTES`] (its allocation's
    /// size). `None`: upload it another way.
    pub(crate) fn gathered_upload(
        &self,
        storage: &ArrayStorage,
        bytes: &[u8],
    ) -> Option<crate::step::Step> {
        let size = storage.allocation.size;
        let fits = size >= (bytes.len() as u64).next_multiple_of(COPY_ALIGNMENT)
            && crate::host_link::gathered_staging::GatheredStaging::takes(self, size);
        (fits && !bytes.is_empty()).then(|| crate::step::Step::Upload {
            data: bytes.to_vec(),
            dst: storage.buffer.clone(),
            dst_offset: storage.allocation.offset,
            size,
        })
    }

    /// Counts a transfer of `arrays` arrays and `bytes` bytes that began at `started`, in the
    /// transfer statistics and on the timeline.
    pub(crate) fn count_transfer(
        &self,
        direction: TransferDirection,
        explicit: bool,
        arrays: u64,
        bytes: u64,
        started: std::time::Instant,
    ) {
        self.transfer_counters()
            .record(direction, explicit, arrays, bytes);
        self.record(crate::trace::timeline::Record::Transfer {
            direction,
            explicit,
            arrays,
            bytes,
            started,
        });
    }

    /// Checks the guard for one transfer (see [`TransferGuard`]).
    pub(crate) fn guard(
        &self,
        direction: TransferDirection,
        bytes: u64,
        operation: &'static str,
        explicit: bool,
    ) -> Result<()> {
        check_guard(
            &self.guard_defaults(),
            direction,
            bytes,
            operation,
            explicit,
        )
    }

    /// Starts a put of one array of host `data` in `shape`, as a single `device_put` and a
    /// sequence's recorded `put` both do: the shape must hold the data and the transfer guard
    /// must allow the upload. Returns the bytes to write and when the transfer started, for
    /// [`ContextInner::count_put`] once the array is written.
    pub(crate) fn start_put<'a, T: bytemuck::Pod>(
        &self,
        data: &'a [T],
        shape: &[usize],
        explicit: bool,
        operation: &'static str,
    ) -> Result<(&'a [u8], std::time::Instant)> {
        check_shape(shape, Some(data.len()), std::mem::size_of::<T>(), operation)?;
        let started = std::time::Instant::now();
        let bytes: &[u8] = bytemuck::cast_slice(data);
        self.guard(
            TransferDirection::HostToDevice,
            bytes.len() as u64,
            operation,
            explicit,
        )?;
        Ok((bytes, started))
    }

    /// Counts a put of `bytes` that [`ContextInner::start_put`] started at `started` and that
    /// wrote its array.
    pub(crate) fn count_put(&self, explicit: bool, bytes: &[u8], started: std::time::Instant) {
        self.count_transfer(
            TransferDirection::HostToDevice,
            explicit,
            1,
            bytes.len() as u64,
            started,
        );
    }

    /// Uploads `items` through the host link ([`crate::host_link::HostLink::upload`]).
    pub(crate) fn upload(&self, items: &[UploadItem<'_>]) -> Result<SubmissionId> {
        self.host_link().upload(self, items)
    }

    /// Reads `items` back through the host link ([`crate::host_link::HostLink::readback`]).
    pub(crate) fn readback(&self, items: &mut [ReadbackItem<'_>]) -> Result<()> {
        self.host_link().readback(self, items)
    }
}

impl<T: bytemuck::Pod> DeviceArray<T> {
    /// Copies the array to the host: an **implicit** transfer, watched by the transfer guard
    /// (use [`Context::device_get`] for an explicit one).
    pub fn to_vec(&self) -> Result<Vec<T>> {
        self.context().get_one(self, false, "DeviceArray::to_vec")
    }

    /// Compares the array with host values (an implicit device-to-host transfer).
    pub fn equals_host(&self, values: &[T]) -> Result<bool>
    where
        T: PartialEq,
    {
        let host = self
            .context()
            .get_one(self, false, "DeviceArray comparison")?;
        Ok(host == values)
    }
}

impl<T: bytemuck::Pod + PartialEq> PartialEq<[T]> for DeviceArray<T> {
    /// An implicit transfer; when the guard refuses it the comparison is `false` and the
    /// refusal is logged (use [`DeviceArray::equals_host`] to see the error).
    fn eq(&self, other: &[T]) -> bool {
        self.equals_host(other).unwrap_or_else(|e| {
            log::error!("{e}");
            false
        })
    }
}

impl<T: bytemuck::Pod + PartialEq> PartialEq<Vec<T>> for DeviceArray<T> {
    fn eq(&self, other: &Vec<T>) -> bool {
        *self == other[..]
    }
}

impl<T: bytemuck::Pod + std::fmt::Debug> std::fmt::Display for DeviceArray<T> {
    /// Prints the values (an implicit transfer); if the guard refuses, prints the refusal.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.context().get_one(self, false, "DeviceArray Display") {
            Ok(values) => write!(f, "DeviceArray{:?}{:?}", self.shape(), values),
            Err(e) => write!(f, "DeviceArray{:?}<{e}>", self.shape()),
        }
    }
}

/// An operand that is either a device array or host data with a shape. Host data makes an
/// **implicit** host-to-device transfer, which the transfer guard watches.
pub enum Operand<'a, T: bytemuck::Pod> {
    /// Already on the device.
    Device(&'a DeviceArray<T>),
    /// Host data and its shape, uploaded when the operation runs.
    Host(&'a [T], &'a [usize]),
    /// Host data as a rank-1 array.
    HostVector(&'a [T]),
}

impl<'a, T: bytemuck::Pod> From<&'a DeviceArray<T>> for Operand<'a, T> {
    fn from(array: &'a DeviceArray<T>) -> Self {
        Operand::Device(array)
    }
}

impl<'a, T: bytemuck::Pod> From<(&'a [T], &'a [usize])> for Operand<'a, T> {
    fn from((data, shape): (&'a [T], &'a [usize])) -> Self {
        Operand::Host(data, shape)
    }
}

impl<'a, T: bytemuck::Pod> From<&'a [T]> for Operand<'a, T> {
    /// Host data as a rank-1 operand.
    fn from(data: &'a [T]) -> Self {
        Operand::HostVector(data)
    }
}

/// An operand made ready for the GPU: a borrowed device array or a freshly uploaded one.
pub(crate) enum ResolvedOperand<'a, T: bytemuck::Pod> {
    Borrowed(&'a DeviceArray<T>),
    Uploaded(DeviceArray<T>),
}

impl<T: bytemuck::Pod> std::ops::Deref for ResolvedOperand<'_, T> {
    type Target = DeviceArray<T>;
    fn deref(&self) -> &DeviceArray<T> {
        match self {
            ResolvedOperand::Borrowed(a) => a,
            ResolvedOperand::Uploaded(a) => a,
        }
    }
}

impl<'a, T: bytemuck::Pod> Operand<'a, T> {
    /// Refuses host data now as its upload would (a shape that does not hold it, the guard's
    /// refusal, without the guard's log): for an op that allocates its result before it
    /// uploads its operand, so that a result that does not fit has uploaded and counted
    /// nothing.
    pub(crate) fn check_upload_ahead(
        &self,
        ctx: &ContextInner,
        operation: &'static str,
    ) -> Result<()> {
        let (data, shape) = match *self {
            Operand::Device(_) => return Ok(()),
            Operand::Host(data, shape) => (data, shape.to_vec()),
            Operand::HostVector(data) => (data, vec![data.len()]),
        };
        check_shape(
            &shape,
            Some(data.len()),
            std::mem::size_of::<T>(),
            operation,
        )?;
        check_guard_ahead(
            &ctx.guard_defaults(),
            TransferDirection::HostToDevice,
            std::mem::size_of_val(data) as u64,
            operation,
            false,
        )
    }

    /// Makes the operand usable on the device: a device array of `ctx` as it is, host data
    /// through `upload(data, shape)` (an implicit, guarded transfer made by the caller: at once
    /// for single ops, within the sequence for recorded ones).
    pub(crate) fn resolve_with(
        self,
        ctx: &std::sync::Arc<ContextInner>,
        operation: &'static str,
        upload: impl FnOnce(&'a [T], &[usize]) -> Result<DeviceArray<T>>,
    ) -> Result<ResolvedOperand<'a, T>> {
        match self {
            Operand::Device(a) => {
                a.check_same_context(ctx, operation)?;
                Ok(ResolvedOperand::Borrowed(a))
            }
            Operand::Host(data, shape) => Ok(ResolvedOperand::Uploaded(upload(data, shape)?)),
            Operand::HostVector(data) => {
                Ok(ResolvedOperand::Uploaded(upload(data, &[data.len()])?))
            }
        }
    }
}
