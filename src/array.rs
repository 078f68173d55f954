//! `DeviceArray<T>`: a typed, shaped range of arena memory.
//!
//! Holds the array and its storage (the arena allocation, the submission that last used it,
//! the marks of recorders that have pending work on it), the checks every op makes of its
//! arrays (same context, not pending, shapes and spans in range), and the constructors that
//! only allocate (`Context::alloc`, `Context::zeros`). An array knows its context: its memory
//! goes back to that context's arena when it is dropped. It is a file of its own because views,
//! transfers, users' compute and the library's ops are all built on it, and the context is
//! below it.

use crate::arena::Allocation;
use crate::backend::{AliasableMemory, ArrayRegion, MappedRange};
use crate::context::{Context, ContextInner, GpuUse};
use crate::error::{ElementRefusal, Error, Result};
use crate::memory_kind::MemoryKind;
pub(crate) use crate::recorder::{Access, ArrayDescription, Recorder, APP_WORK_RECORDER_BIT};
use crate::shape::{check_shape, check_span};
use crate::submission::SubmissionId;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// An array in device memory, allocated from the context's arena.
///
/// Dropping it returns its memory to the arena, but that memory is handed out again only after
/// every submission that used the array has completed. Passing an array **by value** to an
/// operation donates it (XLA's buffer donation): the operation may reuse its memory in place.
///
/// Contents of [`Context::alloc`] arrays are unspecified (earlier data of this process may
/// remain); use [`Context::zeros`] for zeroed memory.
pub struct DeviceArray<T: bytemuck::Pod> {
    /// Shared with the [`crate::Sequence`]s that recorded work on the array, so its memory
    /// stays the array's until that work is submitted (and, through `last_use`, completed).
    pub(crate) storage: Arc<ArrayStorage>,
    pub(crate) shape: Vec<usize>,
    pub(crate) _element: PhantomData<T>,
}

/// The untyped part of an array: its arena allocation, the buffer it lies in, and the
/// submission that last used it. Dropping it gives the allocation back to the arena, to be
/// reused once that submission has completed.
pub(crate) struct ArrayStorage {
    pub(crate) ctx: Arc<ContextInner>,
    /// The memory kind whose arena holds the allocation.
    pub(crate) kind: MemoryKind,
    pub(crate) allocation: Allocation,
    pub(crate) buffer: wgpu::Buffer,
    /// The host mapping of the region when zero-copy access is allowed (UMA, coherent).
    pub(crate) mapped: Option<MappedRange>,
    /// The region's memory, from which the app's own passes get a buffer of the array's own
    /// (Vulkan only; [`ArrayStorage::app_buffer`]).
    aliases: Option<Arc<AliasableMemory>>,
    /// That buffer, made at the first hand-out and kept with the array (`None`: the device
    /// refused it, and the app's passes get the region's buffer).
    own_buffer: OnceLock<Option<wgpu::Buffer>>,
    pub(crate) last_use: AtomicU64,
    /// How many collectives reach the array's bytes through its mapping right now (zero-copy
    /// MPI, which reads and writes them over several calls): while any does, a captured run
    /// copies its inputs into the array on the GPU instead of writing them on the host, where
    /// the two would write or read the same host bytes at once.
    pub(crate) host_users: AtomicU32,
    /// What unsubmitted user recorders do to the array (the recording model:
    /// [`crate::kernels`]): the library's own single ops never mark it.
    pub(crate) pending: PendingMarks,
}

/// The marks unsubmitted user recorders leave on an array: how many record a write to it, how
/// many only read it, and which recorders they are (for the refusal). A single op that reads
/// the array is refused while a recorder writes it (it would read the values from before that
/// write); one that writes it is refused while any recorder uses it (it would overtake a
/// recorded read or write). Readers never refuse readers.
#[derive(Default)]
pub(crate) struct PendingMarks {
    writers: AtomicU32,
    readers: AtomicU32,
    /// Each marking recorder's number and its use, oldest first: only the refusals read it
    /// (the counts above decide), so it sits behind a lock of its own, a leaf.
    marks: std::sync::Mutex<Vec<(u64, Access)>>,
}

impl PendingMarks {
    fn counter(&self, access: Access) -> &AtomicU32 {
        match access {
            Access::Read => &self.readers,
            Access::Write => &self.writers,
        }
    }

    fn marks(&self) -> std::sync::MutexGuard<'_, Vec<(u64, Access)>> {
        self.marks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Recorder `sequence` uses the array with `access`, where it used it with `before`
    /// (`None`: not at all); a use is only ever raised from a read to a write.
    pub(crate) fn mark(&self, sequence: u64, access: Access, before: Option<Access>) {
        if before >= Some(access) {
            return;
        }
        let mut marks = self.marks();
        match marks.iter_mut().find(|(number, _)| *number == sequence) {
            Some(mark) => mark.1 = access,
            None => marks.push((sequence, access)),
        }
        self.counter(access).fetch_add(1, Ordering::AcqRel);
        if let Some(before) = before {
            self.counter(before).fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Recorder `sequence`'s mark of `access` is gone (it was submitted or dropped).
    pub(crate) fn unmark(&self, sequence: u64, access: Access) {
        self.marks().retain(|(number, _)| *number != sequence);
        self.counter(access).fetch_sub(1, Ordering::AcqRel);
    }

    /// How many recorders use the array with `access`, less the caller's own use (`own`).
    pub(crate) fn others(&self, access: Access, own: Option<Access>) -> u32 {
        let count = self.counter(access).load(Ordering::Acquire);
        count.saturating_sub(u32::from(own == Some(access)))
    }

    /// The recorder a use with `access` would overtake, and what it does to the array: the
    /// latest to record a write, for any use; else for a write the latest to record a read.
    /// Recorder `besides` (the caller's own) aside.
    pub(crate) fn conflict(&self, access: Access, besides: Option<u64>) -> Option<(u64, Access)> {
        let writers = self.writers.load(Ordering::Acquire) > 0;
        if !writers && (access == Access::Read || self.readers.load(Ordering::Acquire) == 0) {
            return None;
        }
        let marks = self.marks();
        let latest = |wanted: Access| {
            let mut others = marks.iter().rev().filter(|(n, _)| Some(*n) != besides);
            others.find(|(_, recorded)| *recorded == wanted).copied()
        };
        latest(Access::Write).or_else(|| match access {
            Access::Write => latest(Access::Read),
            Access::Read => None,
        })
    }
}

impl ArrayStorage {
    pub(crate) fn new(
        ctx: Arc<ContextInner>,
        kind: MemoryKind,
        allocation: Allocation,
        region: ArrayRegion,
    ) -> Self {
        Self {
            ctx,
            kind,
            allocation,
            buffer: region.buffer,
            mapped: region.mapped,
            aliases: region.aliases,
            own_buffer: OnceLock::new(),
            last_use: AtomicU64::new(0),
            host_users: AtomicU32::new(0),
            pending: PendingMarks::default(),
        }
    }

    /// The buffer the app's own passes ([`crate::AppWork`]) use for the array, the array's
    /// offset in it, and whether it is the array's own. On Vulkan it is a buffer of its own over
    /// the array's memory (no copy), made at the first call: a pass may then use arrays of one
    /// region in different ways, as it may buffers of the app's own. Elsewhere, or when the
    /// device refuses such a buffer, it is the region's buffer.
    pub(crate) fn app_buffer(&self) -> (&wgpu::Buffer, u64, bool) {
        let own = self.own_buffer.get_or_init(|| {
            let aliases = self.aliases.as_ref()?;
            let label = format!("gpu-arena array at {}", self.allocation.offset);
            let (offset, size) = (self.allocation.offset, self.allocation.size);
            aliases
                .alias(self.ctx.device(), offset, size, &label)
                .inspect_err(|refusal| {
                    log::debug!("gpu-arena: {refusal}; the region's buffer is used instead")
                })
                .ok()
        });
        match own {
            Some(buffer) => (buffer, 0, true),
            None => (&self.buffer, self.allocation.offset, false),
        }
    }

    /// Whether the host may write or read the array's mapping for a captured run now: no GPU
    /// work after submission `completed` uses the array, and no collective reaches its mapping
    /// ([`ArrayStorage::host_users`]). Asked under the kernel lock, under which that count
    /// rises.
    pub(crate) fn idle_for_host(&self, completed: u64) -> bool {
        self.last_use().0 <= completed && self.host_users.load(Ordering::Acquire) == 0
    }

    pub(crate) fn last_use(&self) -> SubmissionId {
        SubmissionId(self.last_use.load(Ordering::Acquire))
    }

    /// Errors unless the array belongs to `ctx` and may be used with `access` now (the
    /// recording model: [`crate::kernels`]): what every single op and host access checks first,
    /// on the memory of the array or of the view it was given.
    pub(crate) fn check_ready_for(
        &self,
        ctx: &Arc<ContextInner>,
        access: Access,
        operation: &'static str,
        argument: &str,
    ) -> Result<()> {
        check_context(self, ctx, operation)?;
        check_not_pending(self, access, operation, argument)
    }

    /// The array's element type, shape and label, for an error's fields.
    pub(crate) fn description(&self) -> ArrayDescription {
        let memory = self.ctx.lock_memory();
        let arena = memory.arena_of(self.kind);
        let label = arena.and_then(|a| a.label(self.allocation.id).map(str::to_owned));
        let arrays = memory.arrays_of(self.kind);
        let info = arrays.and_then(|a| a.get(self.allocation.id).copied());
        drop(memory);
        ArrayDescription {
            dtype: info.map(|info| info.dtype),
            shape: info.map(|info| info.shape().to_vec()),
            label,
        }
    }

    pub(crate) fn record_use(&self, id: SubmissionId) {
        self.last_use.fetch_max(id.0, Ordering::AcqRel);
    }

    /// The allocation's bytes in host memory, when zero-copy access is allowed.
    pub(crate) fn host_range(&self) -> Option<MappedRange> {
        self.mapped
            .as_ref()
            .map(|m| m.sub(self.allocation.offset, self.allocation.size))
    }

    /// The allocation's bytes in host memory when the host reads them at memory speed, so a
    /// read takes them in place rather than through readback staging: device memory on UMA,
    /// pinned-host memory where it is host-cached (see [`ContextInner::host_reads`]).
    pub(crate) fn host_read_range(&self) -> Option<MappedRange> {
        self.host_range().filter(|_| self.ctx.host_reads(self.kind))
    }

    /// Whether a submission used the array since its last use was `before`: after a read of
    /// its bytes (in place, or over several submissions), whether another thread's work may
    /// have written them during the read. Every submission records its use before it reaches
    /// the queue, so one that could overlap the read is seen here.
    pub(crate) fn used_since(&self, before: SubmissionId) -> bool {
        // The bytes are read before the use is looked at again.
        std::sync::atomic::fence(Ordering::SeqCst);
        self.last_use() != before
    }

    /// Writes `bytes` straight into the allocation's mapped memory when zero-copy applies
    /// (`false`: it does not, nothing was written). For an array fresh from the arena, which
    /// no GPU work uses yet: both uploads and upload batches make their arrays this way.
    pub(crate) fn write_zero_copy(&self, bytes: &[u8]) -> bool {
        let Some(range) = self.host_range() else {
            return false;
        };
        range.write(bytes);
        true
    }
}

impl Drop for ArrayStorage {
    fn drop(&mut self) {
        self.ctx.free(self.kind, &self.allocation, self.last_use());
    }
}

/// The accessors of a shaped handle on an array's memory, alike for the array and its views
/// (`view.rs`): its shape, its number of elements, whether it has none, and their size in
/// bytes. `$what` names the handle in their docs; the impl block that invokes it has the
/// element type `T` and a `shape: Vec<usize>` field.
macro_rules! shape_accessors {
    ($what:literal) => {
        #[doc = concat!("The ", $what, "'s shape (rank 0 to [`MAX_RANK`](crate::MAX_RANK)).")]
        pub fn shape(&self) -> &[usize] {
            &self.shape
        }

        /// Number of elements (the product of the shape; 1 for rank 0).
        pub fn len(&self) -> usize {
            self.shape.iter().product()
        }

        #[doc = concat!("True when the ", $what, " has no elements.")]
        pub fn is_empty(&self) -> bool {
            self.len() == 0
        }

        /// Size of the elements in bytes (without the arena's rounding).
        pub fn size_in_bytes(&self) -> u64 {
            self.len() as u64 * std::mem::size_of::<T>() as u64
        }
    };
}
pub(crate) use shape_accessors;

impl<T: bytemuck::Pod> DeviceArray<T> {
    shape_accessors!("array");

    /// **Escape hatch**: the wgpu buffer of the region that holds the array (shared with the
    /// region's other arrays), at [`DeviceArray::byte_offset`]. Prefer [`Context::launch`],
    /// [`Context::sequence`] and the ops, which bind, check and track arrays for you.
    ///
    /// Work that reaches this buffer outside gpu-arena is not tracked. The caller must:
    /// - submit it with [`Context::raw_submit`], naming the array in `uses` (or keep the array
    ///   alive and call [`Context::synchronize`] before dropping it): otherwise the array can
    ///   be dropped while the GPU still uses it and its memory handed to the next allocation,
    ///   and both see each other's data (silent corruption, which no validation layer sees);
    /// - stay within `[byte_offset(), byte_offset() + allocated_bytes())`: the rest of the
    ///   buffer is other arrays;
    /// - not call it while the array is recorded in a [`crate::Sequence`] not yet submitted.
    ///
    /// Comparing buffers and offsets (is this the same memory?) is always fine.
    pub fn buffer(&self) -> &wgpu::Buffer {
        &self.storage.buffer
    }

    /// The array's byte offset inside [`DeviceArray::buffer`] (a multiple of 256): with
    /// [`DeviceArray::allocated_bytes`], where the array lies in the region. Reading it is
    /// harmless; using it to reach the memory is the escape hatch of [`DeviceArray::buffer`].
    pub fn byte_offset(&self) -> u64 {
        self.storage.allocation.offset
    }

    /// The bytes the arena set aside for the array: its size rounded up to 256, and 256 for an
    /// empty array (every array has an allocation of its own, as its id and offset say).
    pub fn allocated_bytes(&self) -> u64 {
        self.storage.allocation.size
    }

    /// The arena's id of this array's allocation (as in [`crate::arena::ArenaSnapshot`]):
    /// unique within its memory kind's arena (arrays of two kinds may share an id).
    pub fn allocation_id(&self) -> crate::arena::AllocationId {
        self.storage.allocation.id
    }

    /// The memory space the array lives in (JAX's `array.sharding.memory_kind`): chosen when it
    /// was made ([`Context::device_put_in`], [`Context::alloc_in`]) and kept for life; the
    /// arrays of ops and kernels are of [`MemoryKind::Device`] unless said otherwise.
    pub fn memory_kind(&self) -> MemoryKind {
        self.storage.kind
    }

    /// **Escape hatch**: a wgpu binding of the array's range, for command buffers built by
    /// hand and submitted with [`Context::raw_submit`]. Prefer [`Context::kernel`] and
    /// [`Context::launch`], which bind, check and track arrays for you, and for the app's own
    /// render or compute passes [`Context::app_work`], which tracks the array itself and, on
    /// Vulkan, binds it as a buffer of its own (no usage conflicts with its region's other
    /// arrays).
    ///
    /// ```ignore
    /// wgpu::BindGroupEntry { binding: 0, resource: wgpu::BindingResource::Buffer(a.raw_binding()) }
    /// ```
    /// Name the array in `raw_submit`'s `uses`: **an array left out there can be dropped while
    /// the GPU still reads or writes it, and its memory handed to the next allocation: silent
    /// corruption**. The binding covers the data rounded up to 4 bytes (WGSL's word).
    ///
    /// Declare such bindings `var<storage, read_write>`, inputs too: arrays share region
    /// buffers, and wgpu tracks usage per buffer, so a `read` binding next to a `read_write`
    /// binding of another array in the same region is a usage conflict within one dispatch
    /// (kernels made with [`Context::kernel`] are rewritten so that `read` works).
    pub fn raw_binding(&self) -> wgpu::BufferBinding<'_> {
        wgpu::BufferBinding {
            buffer: &self.storage.buffer,
            offset: self.storage.allocation.offset,
            size: wgpu::BufferSize::new(self.size_in_bytes().next_multiple_of(4).max(4)),
        }
    }

    /// The context that owns this array.
    pub fn context(&self) -> Context {
        Context {
            inner: Arc::clone(&self.storage.ctx),
        }
    }

    /// The submission that last used the array (0 if none). After a single op it may be the
    /// submission the context's gathered ops will make, not made yet: waiting for it (any host
    /// read, [`Context::synchronize`]) or [`Context::flush`] makes it.
    pub fn last_use(&self) -> SubmissionId {
        self.storage.last_use()
    }

    /// Describes the array as elements of `U` in `shape` from now on, in snapshots and the
    /// errors that name it (a reshape, a bitcast).
    pub(crate) fn describe_as<U>(&self, shape: &[usize]) {
        let (kind, id) = (self.storage.kind, self.storage.allocation.id);
        (self.storage.ctx.lock_memory()).retype_array::<U>(kind, id, shape);
    }

    /// Names the array in memory snapshots and OOM reports.
    pub fn with_label(self, label: &str) -> Self {
        let mut memory = self.storage.ctx.lock_memory();
        // The array is live, so its allocation is too.
        let _ = memory.set_label(self.storage.kind, self.storage.allocation.id, Some(label));
        drop(memory);
        // The timeline follows the device arena, whose allocation ids its events carry.
        if self.storage.kind == MemoryKind::Device {
            let allocation = self.storage.allocation.id;
            (self.storage.ctx).record(crate::trace::timeline::Record::Label { allocation, label });
        }
        self
    }

    /// Errors unless the context `ctx` may use the array: [`Error::DeviceLost`] once its device
    /// is lost, [`Error::ForeignArray`] for an array of another context.
    pub(crate) fn check_same_context(
        &self,
        ctx: &Arc<ContextInner>,
        operation: &'static str,
    ) -> Result<()> {
        check_context(&self.storage, ctx, operation)
    }

    /// Errors unless the array belongs to `ctx` and may be used now with `access`, by the
    /// single-op rule: no unsubmitted user recorder writes it, nor reads it when `access`
    /// writes. What collectives check first (those that only read their arrays, `Read`).
    #[cfg(feature = "mpi")]
    pub(crate) fn check_ready(
        &self,
        ctx: &Arc<ContextInner>,
        access: Access,
        operation: &'static str,
    ) -> Result<()> {
        self.storage
            .check_ready_for(ctx, access, operation, "the array")
    }
}

/// Errors unless `storage` belongs to the context `ctx`, naming both devices.
pub(crate) fn check_context(
    storage: &ArrayStorage,
    ctx: &Arc<ContextInner>,
    operation: &'static str,
) -> Result<()> {
    // A lost device refuses first, before anything about the array.
    ctx.check_device(operation)?;
    if Arc::ptr_eq(&storage.ctx, ctx) {
        Ok(())
    } else {
        Err(Error::ForeignArray {
            operation,
            array_device: crate::context::describe_context(&storage.ctx),
            context_device: crate::context::describe_context(ctx),
        })
    }
}

/// Errors when a single op's `access` to `storage` (its `argument`) would overtake work an
/// unsubmitted user [`crate::Sequence`] recorded on it: any use of an array the sequence writes,
/// a write of an array it reads. The error names the argument, the array and the sequence, and
/// says how to order the two.
pub(crate) fn check_not_pending(
    storage: &ArrayStorage,
    access: Access,
    operation: &'static str,
    argument: &str,
) -> Result<()> {
    check_not_pending_besides(storage, access, None, operation, argument)
}

/// [`check_not_pending`] for a recorder (`besides`) that may have marked the array itself: its
/// own mark refuses nothing, and a refusal names another recorder.
pub(crate) fn check_not_pending_besides(
    storage: &ArrayStorage,
    access: Access,
    besides: Option<u64>,
    operation: &'static str,
    argument: &str,
) -> Result<()> {
    let Some((sequence, recorded)) = storage.pending.conflict(access, besides) else {
        return Ok(());
    };
    // Once the device is lost, that is what every call says: no order of the two helps.
    storage.ctx.check_device(operation)?;
    Err(Error::PendingInRecorder {
        operation,
        argument: argument.to_string(),
        array: Box::new(storage.description()),
        recorder: Recorder::from_mark(sequence),
        recorded,
        access,
    })
}

impl<T: bytemuck::Pod> GpuUse for DeviceArray<T> {
    fn record_use(&self, id: SubmissionId) {
        self.storage.record_use(id);
    }

    fn owning_context(&self) -> Option<Context> {
        Some(self.context())
    }

    fn check_ready(&self, operation: &'static str) -> Result<()> {
        // Work submitted by hand may write any array it names.
        check_not_pending(
            &self.storage,
            Access::Write,
            operation,
            "an array in `uses`",
        )
    }
}

impl<T: bytemuck::Pod> std::fmt::Debug for DeviceArray<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceArray")
            .field("dtype", &std::any::type_name::<T>())
            .field("shape", &self.shape)
            .field("region", &self.storage.allocation.region)
            .field("offset", &self.storage.allocation.offset)
            .finish()
    }
}

impl Context {
    /// Allocates an array without initialising it (contents unspecified: earlier data of this
    /// process may remain). Use [`Context::zeros`] when the contents matter.
    ///
    /// Errors: [`Error::Shape`] for a rank above [`MAX_RANK`](crate::MAX_RANK) or a shape whose
    /// index space spans more than [`MAX_ARRAY_SPAN_BYTES`](crate::MAX_ARRAY_SPAN_BYTES)
    /// (zero-size dimensions counted as one, so `[0, usize::MAX]` is refused too);
    /// out-of-memory; [`Error::DeviceLost`] once the device is lost, before the shape is looked
    /// at (as by `zeros`, `fill` and `device_put`).
    #[track_caller]
    pub fn alloc<T: bytemuck::Pod>(&self, shape: &[usize]) -> Result<DeviceArray<T>> {
        self.alloc_as(MemoryKind::Device, shape, "alloc")
    }

    /// [`Context::alloc`] in the memory of `kind` (see [`MemoryKind`]).
    ///
    /// Errors: as [`Context::alloc`]; an out-of-memory of the pinned-host kind names it and its
    /// limit ([`ArenaConfig::pinned_host_bytes`](crate::ArenaConfig)); and
    /// [`Error::MemoryKindUnavailable`] where the device has no memory of that kind.
    #[track_caller]
    pub fn alloc_in<T: bytemuck::Pod>(
        &self,
        kind: MemoryKind,
        shape: &[usize],
    ) -> Result<DeviceArray<T>> {
        self.alloc_as(kind, shape, "alloc_in")
    }

    /// [`Context::alloc_in`] for the user's call `operation`, which its shape errors name.
    #[track_caller]
    pub(crate) fn alloc_as<T: bytemuck::Pod>(
        &self,
        kind: MemoryKind,
        shape: &[usize],
        operation: &'static str,
    ) -> Result<DeviceArray<T>> {
        self.alloc_as_at(kind, shape, operation, std::panic::Location::caller())
    }

    /// [`Context::alloc_as`] for the user's call at `site`.
    pub(crate) fn alloc_as_at<T: bytemuck::Pod>(
        &self,
        kind: MemoryKind,
        shape: &[usize],
        operation: &'static str,
        site: &'static std::panic::Location<'static>,
    ) -> Result<DeviceArray<T>> {
        // A lost device refuses before anything else is looked at, as `device_put` does.
        self.inner.check_device(operation)?;
        let elements = check_shape(shape, None, std::mem::size_of::<T>(), operation)?;
        let bytes = (elements as u64)
            .checked_mul(std::mem::size_of::<T>() as u64)
            .ok_or_else(|| Error::Shape {
                operation,
                reason: format!("shape {shape:?} is too large to address"),
            })?;
        self.alloc_bytes(kind, shape, bytes, None, operation, site)
    }

    /// Allocates `bytes` in `kind` for a `T` array of `shape` made by the user's call
    /// `operation` at `site`.
    pub(crate) fn alloc_bytes<T: bytemuck::Pod>(
        &self,
        kind: MemoryKind,
        shape: &[usize],
        bytes: u64,
        label: Option<&str>,
        operation: &'static str,
        site: &'static std::panic::Location<'static>,
    ) -> Result<DeviceArray<T>> {
        // Every array is made here, so no array has a shape ops could overflow on.
        check_span(shape, std::mem::size_of::<T>(), operation)?;
        let info = crate::trace::array_info::ArrayInfo::new::<T>(shape, site);
        let (allocation, region) = crate::trace::labels::with_scoped_label(label, |label| {
            self.inner.allocate(kind, bytes, label, info)
        })
        .map_err(|e| self.inner.dump_on_oom(e))?;
        Ok(DeviceArray {
            storage: Arc::new(ArrayStorage::new(
                Arc::clone(&self.inner),
                kind,
                allocation,
                region,
            )),
            shape: shape.to_vec(),
            _element: PhantomData,
        })
    }

    /// Allocates an array filled with zero bytes.
    #[track_caller]
    pub fn zeros<T: bytemuck::Pod>(&self, shape: &[usize]) -> Result<DeviceArray<T>> {
        self.zeros_as(MemoryKind::Device, shape, "zeros")
    }

    /// [`Context::zeros`] in the memory of `kind`; errors as [`Context::alloc_in`].
    #[track_caller]
    pub fn zeros_in<T: bytemuck::Pod>(
        &self,
        kind: MemoryKind,
        shape: &[usize],
    ) -> Result<DeviceArray<T>> {
        self.zeros_as(kind, shape, "zeros_in")
    }

    /// [`Context::zeros_in`] for the user's call `operation`, which its errors name.
    #[track_caller]
    fn zeros_as<T: bytemuck::Pod>(
        &self,
        kind: MemoryKind,
        shape: &[usize],
        operation: &'static str,
    ) -> Result<DeviceArray<T>> {
        let array = self.alloc_as::<T>(kind, shape, operation)?;
        let bytes = array.storage.allocation.size;
        if bytes == 0 {
            return Ok(array);
        }
        if let Some(range) = array.storage.host_range() {
            // Mapped (UMA, pinned host): the memory is ours alone (the arena hands out only
            // retired chunks).
            range.zero();
            return Ok(array);
        }
        let mut sequence = self.single_op();
        sequence.touch_array(&array, Access::Write, operation, "the new array")?;
        sequence.steps.push(crate::step::Step::Clear {
            buffer: array.storage.buffer.clone(),
            offset: array.storage.allocation.offset,
            size: bytes,
        });
        sequence.submit()?;
        Ok(array)
    }
}

/// Errors unless `T` and `U` have the same size (what a bitcast without a copy needs: the
/// shape, and so every offset and the byte count, stay the same).
pub(crate) fn check_bitcast<T, U>(operation: &'static str) -> Result<()> {
    let (from, to) = (std::mem::size_of::<T>(), std::mem::size_of::<U>());
    if from == to {
        return Ok(());
    }
    Err(Error::Element {
        operation,
        refusal: ElementRefusal::BitcastSize {
            from: std::any::type_name::<T>(),
            from_bytes: from,
            to: std::any::type_name::<U>(),
            to_bytes: to,
        },
    })
}
