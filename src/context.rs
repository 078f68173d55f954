//! `Context`: one GPU, its queue, its memory plan and the arena that hands out its memory.
//!
//! **May import** what is below it: `arena`, `backend`, `config`, `memplan`, `devices` (which
//! adapter to open), `submission`, `pipelines` (the context owns its compile cache and submits
//! inside error scopes), `profile`'s records, and `transfer`'s staging pool and counters. Never
//! an array, a view, a sequence or an op: they know their context, not the reverse
//! (`tests/module_flow.rs` checks this). [`GpuUse`], the contract of
//! [`Context::raw_submit`]'s `uses`, lives here so that the context names no array type.
//!
//! Files: `context.rs` (the context and its parts), `context/memory_state.rs` (the content of
//! its memory lock: the arena, its regions and the live arrays' descriptions, reached through
//! its methods), `context/open.rs` (opening it:
//! the adapter, the memory plan, the arena's options), `context/submit.rs` (submitting work and
//! waiting for it, with the lost-device checks), `context/gathered.rs`
//! (single ops gathered into the context's own submission) over `context/gathered_batch.rs`
//! (the batch they gather into), `context/app_device.rs` (what the arena needs of a device the
//! app opened, and how it hears of the device's loss) and `context/from_wgpu.rs` (opening a
//! context on such a device), `context/kernel_timing.rs` (each kernel's GPU time, read from
//! the timeline's query sets).
//!
//! The files a context holds parts from name nothing above them, so no file imports the
//! context back (`tests/module_flow.rs` rejects any cycle between files): the parts' state
//! lives in one file and what the context does with them in another above it. The context owns
//! its staging pool (`transfer/staging.rs`, which reaches the context only through
//! [`StagingMemory`], implemented here) and its transfer counters; what a transfer does with
//! them lives in `transfer/`. The parts are private to these files: the rest of the crate
//! reaches them through `ContextInner`'s methods.

use crate::arena::{Allocation, MemoryStats};
use crate::backend::{DeviceBuffer, Purpose};
use crate::config::{ArenaConfig, TransferGuardLevels};
use crate::error::{Error, Result};
use crate::host_link::staging::{StagingBuffer, StagingKind, StagingMemory, StagingPool};
use crate::host_link::stats::TransferCounters;
use crate::lock::{Mutex, MutexGuard};
use crate::memory_kind::MemoryKind;
use crate::memplan::{DeviceDescription, HeapBudget, MemoryPlan, MemoryTypeFlags};
use crate::submission::{SubmissionId, Submissions};
use std::sync::Arc;
use std::time::Duration;

mod app_device;
mod from_wgpu;
mod gathered;
mod gathered_batch;
mod kernel_timing;
mod memory_state;
mod open;
mod submit;

pub(crate) use memory_state::{DeviceLimits, KindMemory, MemoryState};

pub use crate::shortfall::DeviceShortfall;
pub(crate) use app_device::OpenedDevice;
pub use app_device::{AppDevice, DeviceLostNotifier, DeviceRequirements};

/// Pending frees (memory of dropped arrays that in-flight GPU work may still use) are
/// reclaimed by polling the device once they add up to this much, rather than on every
/// allocation: a poll costs more than an allocation, and smaller amounts are reclaimed anyway
/// when an allocation would otherwise fail.
const RETIRE_PENDING_BYTES: u64 = 64 << 20;

/// How many times an allocation that fails while memory is freed but still used by queued
/// work waits for the queue and retries. Once is enough for one thread; threads sharing the
/// context can free more behind newly queued work while it waits (their gathered single ops are
/// not submitted until someone flushes), so it waits again, boundedly, before reporting
/// out-of-memory. Each wait retires what completed under the lock the retry then allocates
/// under; a machine whose cores are all busy can still deschedule the waiting thread while
/// another takes the retired memory and refills the arena with frees of its own (32 waits
/// were lost in a row under CI's synchronization validation). A wait follows another only
/// while some other thread keeps freeing behind new work, that is while the context makes
/// progress, so the bound is high: it only stops a thread from waiting forever.
const MAX_OOM_WAITS: u32 = 1024;

/// A context as messages name it: `context 2 (llvmpipe (LLVM 15.0.6, 256 bits))`.
pub(crate) fn describe_context(ctx: &ContextInner) -> String {
    format!("context {} ({})", ctx.id, ctx.adapter_info.name)
}

/// Something GPU work can use: records the submission that last used it, so that its memory is
/// not handed out again before that work completes. Only [`Context::raw_submit`] needs it: every
/// other way to run GPU work records its arrays itself.
pub trait GpuUse {
    /// Notes that submission `id` uses this memory. Called just before the work is handed to
    /// the queue, while the context keeps its submission order: an implementation should
    /// only note the id (submitting work on the same context from here would deadlock).
    fn record_use(&self, id: SubmissionId);

    /// The context whose memory this is, when known: [`Context::raw_submit`] refuses memory
    /// of another context with [`Error::ForeignArray`]. The default, `None`, is not checked.
    fn owning_context(&self) -> Option<Context> {
        None
    }

    /// Errors when work submitted now must not use this memory yet: for a
    /// [`DeviceArray`](crate::DeviceArray),
    /// when it is pending in an unsubmitted [`crate::Sequence`] (the work would run before
    /// what the sequence recorded; see the recording model in [`crate::kernels`]).
    /// [`Context::raw_submit`] checks every use with it before submitting anything. The
    /// default accepts.
    fn check_ready(&self, operation: &'static str) -> Result<()> {
        let _ = operation;
        Ok(())
    }
}

/// A GPU opened for compute, with gpu-arena managing its memory.
///
/// Opening a context is cheap: like JAX, the arena reserves its memory at the **first
/// allocation** (or at [`Context::reserve`]). Cloning a `Context` is cheap and shares everything;
/// arrays keep their context alive.
///
/// ```no_run
/// let ctx = gpu_arena::Context::new(gpu_arena::ArenaConfig::default())?;
/// println!("{} — arena memory type {}", ctx.adapter_info().name, ctx.memory_plan().arena_type);
/// # Ok::<(), gpu_arena::Error>(())
/// ```
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

impl std::fmt::Debug for Context {
    /// The context as error messages name it: `context 2 (llvmpipe (LLVM 15.0.6, 256 bits))`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&describe_context(&self.inner))
    }
}

/// What a [`Context`] shares between its clones: the device, its queue, the arena's memory and
/// the parts every transfer, kernel and submission uses. Its parts are private: the rest of the
/// crate reaches them through its methods (a getter for each fixed handle or value,
/// [`ContextInner::lock_memory`] for the arena, `submit*` and `wait_for*` for the queue), so that
/// each part has one owner.
pub(crate) struct ContextInner {
    /// This context's number in the process (1, 2, ...), for messages that name two contexts.
    id: u64,
    /// The instance and adapter the device was opened from, for [`Context::instance`] and
    /// [`Context::adapter`] (the context itself reads neither after opening; an app's device
    /// comes with its instance only when the app hands it over).
    instance: Option<wgpu::Instance>,
    adapter: wgpu::Adapter,
    device: wgpu::Device,
    queue: wgpu::Queue,
    adapter_info: wgpu::AdapterInfo,
    limits: wgpu::Limits,
    config: ArenaConfig,
    plan: MemoryPlan,
    description: DeviceDescription,
    memory: Mutex<MemoryState>,
    submissions: Submissions,
    /// Largest region (and so largest array) the device allows.
    max_region_bytes: u64,
    /// How host bytes reach the arrays and come back, chosen when the context opened.
    host_link: crate::host_link::HostLink,
    staging: StagingPool,
    transfer_counters: TransferCounters,
    guard_defaults: TransferGuardLevels,
    /// The event timeline; `None` (the default) records nothing.
    timeline: Option<Arc<crate::trace::timeline::Timeline>>,
    /// GPU timestamps of dispatches; `None` unless the timeline is on and the device has
    /// timestamp queries.
    kernel_timing: Option<kernel_timing::KernelTiming>,
    /// Compiled kernels and their parameter buffer.
    kernels: crate::pipelines::KernelCache,
    /// Whether the arena asks for the BAR type first, so uploads write device memory directly.
    bar_writes: bool,
    /// Why the device was lost, once wgpu has said so (a lost device, or `Device::destroy`
    /// seen by a later poll); set by wgpu's device-lost callback.
    device_lost: Arc<std::sync::OnceLock<String>>,
    /// On an app's device (no device-lost callback of ours): how waits learn of a loss the
    /// app did not forward.
    loss_probe: Option<app_device::LossProbe>,
    /// Single ops gathered and not yet submitted (`context/gathered.rs`): every submission
    /// takes this lock and submits them first.
    gathered: Mutex<gathered_batch::GatheredBatch>,
    /// Bind groups made so far, by every recorder ([`Context::bind_groups_made`]).
    bind_groups_made: std::sync::atomic::AtomicU64,
}

impl Context {
    /// The adapter this context opened.
    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.inner.adapter_info
    }

    /// **Escape hatch**: the wgpu instance that enumerated this context's adapter, for
    /// libraries that start on an existing device and ask for all of it (CubeCL's
    /// `WgpuSetup`, Burn's `WgpuDevice::Existing`). Creating surfaces or devices on it leaves
    /// the context alone. `None` for a context on an app's device opened without it
    /// ([`AppDevice::with_instance`] hands it over).
    pub fn instance(&self) -> Option<&wgpu::Instance> {
        self.inner.instance.as_ref()
    }

    /// **Escape hatch**: the wgpu adapter [`Context::device`] was opened on, for the same
    /// libraries as [`Context::instance`]. Its `features()` and `limits()` are the adapter's:
    /// the device has the adapter's limits but only the features gpu-arena asked for
    /// (`PIPELINE_CACHE` and `IMMEDIATES` where offered); read
    /// `ctx.device().features()` for those.
    ///
    /// ```no_run
    /// let ctx = gpu_arena::Context::new(Default::default())?;
    /// assert_eq!(ctx.adapter().get_info().name, ctx.adapter_info().name);
    /// # Ok::<(), gpu_arena::Error>(())
    /// ```
    pub fn adapter(&self) -> &wgpu::Adapter {
        &self.inner.adapter
    }

    /// Which memory types back the arena and staging, and why.
    pub fn memory_plan(&self) -> &MemoryPlan {
        &self.inner.plan
    }

    /// The memory table the plan was made from (on non-Vulkan backends, a synthetic one).
    pub fn device_description(&self) -> &DeviceDescription {
        &self.inner.description
    }

    /// The configuration this context was opened with.
    pub fn config(&self) -> &ArenaConfig {
        &self.inner.config
    }

    /// **Escape hatch**: the wgpu device, for what gpu-arena does not do (textures, render
    /// work, features and limits it does not expose). Run your own kernels with
    /// [`Context::kernel`] and [`Context::launch`], which compile through the shared cache and
    /// check and track every array.
    ///
    /// Buffers made here are not arena memory (they do not show in [`Context::memory_stats`]).
    /// Passes that use arena arrays get them from [`Context::app_work`] and are submitted with
    /// [`crate::AppWork::submit`]; command buffers that touch arena arrays by hand
    /// ([`crate::DeviceArray::buffer`], [`crate::DeviceArray::raw_binding`]) must go through
    /// [`Context::raw_submit`] with those arrays in `uses`. Errors of work made here reach the
    /// device's uncaptured-error handler: on a device the context opened, gpu-arena's, which
    /// logs them (`log` crate); on an app's device ([`Context::from_wgpu`]), the app's.
    pub fn device(&self) -> &wgpu::Device {
        &self.inner.device
    }

    /// **Escape hatch**: the wgpu queue. Prefer [`Context::launch`], [`Context::sequence`],
    /// [`Context::device_put`] and, for command buffers built by hand, [`Context::raw_submit`].
    ///
    /// What is submitted or written here is not tracked: no array is recorded as used, so the
    /// caller must not touch arena arrays through it (`queue.submit` of work on
    /// [`crate::DeviceArray::buffer`], `queue.write_buffer` into it), or must keep every such array
    /// alive until [`Context::synchronize`] returns. An array dropped earlier has its memory
    /// handed to the next allocation while the GPU still uses it (silent corruption).
    /// Submissions made here do not count in the [`SubmissionId`]s gpu-arena hands out.
    ///
    /// The queue handed out is never behind the context's own work: taking it submits the
    /// single ops the context has gathered (as [`Context::flush`] does, without waiting), so
    /// work submitted on it right away comes after every launch and op called before
    /// `queue()`. Take the queue again for each submission: ops called after you took it are
    /// gathered for the context's next submission, and a queue reference kept from before them
    /// would submit ahead of them. A refusal of the gathered ops by the device is reported by
    /// the next wait or [`Context::flush`], as always.
    ///
    /// ```no_run
    /// # let ctx = gpu_arena::Context::new(Default::default())?;
    /// let commands = ctx.device().create_command_encoder(&Default::default()).finish();
    /// // Runs after every launch and op called so far on `ctx`.
    /// ctx.queue().submit([commands]);
    /// # Ok::<(), gpu_arena::Error>(())
    /// ```
    pub fn queue(&self) -> &wgpu::Queue {
        self.inner.submit_gathered_now();
        &self.inner.queue
    }

    /// The device's limits (`device.limits()`): on a device the context opened, the
    /// adapter's own; on an app's device ([`Context::from_wgpu`]), what the app requested.
    /// Every limit check of the crate reads these.
    pub fn limits(&self) -> &wgpu::Limits {
        &self.inner.limits
    }

    /// The largest single array, in bytes (one region: the device's `max_buffer_size` or the
    /// configured cap).
    pub fn max_array_bytes(&self) -> u64 {
        self.inner.max_region_bytes
    }

    /// True when regions are gpu-allocator memory on Vulkan under our memory plan.
    pub fn is_vulkan(&self) -> bool {
        self.inner.host_link() == crate::host_link::HostLink::Mapped
    }

    /// True when the arena asks for the device-local host-visible type first so that uploads
    /// are a memcpy into device memory ([`BarWrites`](crate::config::BarWrites)): `on` on a device with a full BAR.
    pub fn bar_writes(&self) -> bool {
        self.inner.bar_writes
    }

    /// How many flushes and invalidates of mapped memory this context has asked the driver
    /// for: none on coherent memory; one per host access to non-coherent memory (Intel non-LLC,
    /// ARM, Apple's managed memory), or everywhere with
    /// [`ArenaConfig::force_non_coherent`](crate::ArenaConfig::force_non_coherent).
    pub fn host_sync_counts(&self) -> crate::backend::HostSyncCounts {
        self.inner.lock_memory().regions().host_sync_counts()
    }

    /// The Vulkan limits wgpu's [`wgpu::Limits`] leave out (`nonCoherentAtomSize`,
    /// `maxMemoryAllocationSize`, ...); `None` on other backends.
    pub fn vulkan_limits(&self) -> Option<crate::backend::VulkanLimits> {
        crate::backend::vulkan_limits(&self.inner.device)
    }

    /// Each heap's budget and this process's usage now, from `VK_EXT_memory_budget`, in heap
    /// order; `None` when the device lacks the extension or is not Vulkan. The budget is what
    /// the driver will really give (other processes and the desktop take their share).
    pub fn heap_budgets(&self) -> Option<Vec<HeapBudget>> {
        crate::backend::heap_budgets(&self.inner.device)
    }

    /// Reserves the arena's memory now rather than at the first allocation. Idempotent.
    ///
    /// Errors: [`Error::DeviceLost`] once the device is lost (nothing is reserved); the
    /// arena's refusals ([`Error::Arena`]: the device refused a region, or the reservation
    /// would take more regions than one may have), which leave nothing reserved.
    pub fn reserve(&self) -> Result<()> {
        self.inner.check_device("reserve")?;
        Ok(self.inner.lock_memory().reserve()?)
    }

    /// How long the reservation took (the first allocation's extra latency), once it happened.
    pub fn reserve_duration(&self) -> Option<Duration> {
        self.inner.lock_memory().reserve_duration()
    }

    /// XLA's memory statistics (`num_allocs`, `bytes_in_use`, `peak_bytes_in_use`, ...) of
    /// device memory ([`MemoryKind::Device`]).
    pub fn memory_stats(&self) -> MemoryStats {
        self.inner.lock_memory().arena().stats()
    }

    /// [`Context::memory_stats`] of the arena of `kind`, under XLA's keys (`bytes_limit` is
    /// the kind's limit: for the pinned-host kind
    /// [`ArenaConfig::pinned_host_bytes`](crate::ArenaConfig)); `None` where the device has no
    /// memory of that kind.
    ///
    /// ```no_run
    /// use gpu_arena::MemoryKind;
    /// # let ctx = gpu_arena::Context::new(Default::default())?;
    /// let host = ctx.memory_stats_of(MemoryKind::PinnedHost);
    /// println!("pinned host: {:?} B in use", host.map(|s| s.bytes_in_use));
    /// # Ok::<(), gpu_arena::Error>(())
    /// ```
    pub fn memory_stats_of(&self, kind: MemoryKind) -> Option<MemoryStats> {
        Some(self.inner.lock_memory().arena_of(kind)?.stats())
    }

    /// Resets the peak figures of every kind's statistics ([`Context::memory_stats`],
    /// [`Context::memory_stats_of`]) to the current values: the peaks to what is in use and
    /// reserved now, `largest_alloc_size` to the largest array live now.
    pub fn reset_peak_stats(&self) {
        self.inner.lock_memory().reset_peaks();
    }

    /// gpu-allocator's own count of live device-memory allocations and their bytes (Vulkan
    /// only): what the arenas of every memory kind and the staging buffers really hold from
    /// the driver (one gpu-allocator serves them all).
    pub fn allocator_report(&self) -> Option<(usize, u64)> {
        self.inner.lock_memory().regions().allocator_report()
    }

    /// Gives wholly free regions above the reserved base back to the device (in every memory
    /// kind: the pinned-host kind reserves nothing, so all of its free regions); returns the
    /// bytes released.
    pub fn release_free_regions(&self) -> u64 {
        self.inner.retire_completed();
        self.inner.lock_memory().release_free_regions()
    }

    /// **Escape hatch** for command buffers built by hand over [`crate::DeviceArray::raw_binding`]s:
    /// submits them and records that they use the arrays in `uses`, so that their memory is not
    /// handed out again before this work has finished. Prefer [`Context::launch`] and
    /// [`Context::sequence`], which bind, check and track every array themselves.
    ///
    /// **An array the work touches but `uses` leaves out is not protected**: dropped while the
    /// GPU still reads or writes it, its memory goes to the next allocation at once, and both
    /// see each other's data (silent corruption; no validation layer notices).
    ///
    /// Errors: [`Error::ForeignArray`] for an array of another context in `uses`,
    /// [`Error::PendingInRecorder`] for an array pending in an unsubmitted [`crate::Sequence`],
    /// one the sequence only reads included (work built by hand may write any array it names;
    /// submit the sequence first; both checked for every use before anything is submitted);
    /// [`Error::Device`] when wgpu refuses the submission (for instance a command buffer that
    /// failed validation while it was encoded); [`Error::DeviceLost`] once the device is lost
    /// (nothing is submitted). The uses are recorded before the queue gets the
    /// work, so another thread's read of one of these arrays waits for it.
    pub fn raw_submit(
        &self,
        command_buffers: impl IntoIterator<Item = wgpu::CommandBuffer>,
        uses: &[&dyn GpuUse],
    ) -> Result<SubmissionId> {
        self.inner.check_device("raw_submit")?;
        for array in uses {
            if let Some(owner) = array.owning_context() {
                if !Arc::ptr_eq(&owner.inner, &self.inner) {
                    return Err(Error::ForeignArray {
                        operation: "raw_submit",
                        array_device: describe_context(&owner.inner),
                        context_device: describe_context(&self.inner),
                    });
                }
            }
            array.check_ready("raw_submit")?;
        }
        // The uses are recorded before the queue gets the work, as sequences do: another
        // thread's host read of one of these arrays then waits for it.
        let record = |id| {
            for array in uses {
                array.record_use(id);
            }
        };
        self.inner
            .submission("submitting command buffers (raw_submit)")?
            .submit(command_buffers, record, ["raw_submit"])
    }

    /// Bind groups this context has made so far: one per dispatch of a single op or a
    /// sequence (made when it is recorded or submitted), and those of a
    /// [`crate::CapturedStep`], made when it is captured and, for an array bound to an array
    /// slot, the first time that array is bound: a run that binds nothing new makes none,
    /// which this count shows.
    pub fn bind_groups_made(&self) -> u64 {
        self.inner
            .bind_groups_made
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Submits the single ops this context has gathered (launches and library ops, up to 32 go
    /// out together: see [the recording model](crate::kernels#the-recording-model)) without
    /// waiting for them. Every wait, host read and submission does this first on its own; call
    /// it when the GPU should start on them now (before long host work of yours), and before
    /// submitting to [`Context::queue`] directly.
    ///
    /// Errors: [`Error::Device`] when the device refused gathered ops as they were submitted
    /// (none of that batch ran), [`Error::DeviceLost`] once the device is lost; each refusal is
    /// reported once, by this call or the next wait.
    pub fn flush(&self) -> Result<()> {
        self.inner.flush()?;
        self.inner.check_device("flushing gathered single ops")
    }

    /// Blocks until all submitted GPU work has finished, then makes the memory of arrays
    /// dropped while that work was in flight reusable (it leaves `pending_free_bytes` and the
    /// snapshots' pending chunks at once rather than at a later allocation; a dropped array
    /// left `bytes_in_use` when it was dropped, or, handed out to an [`crate::AppWork`] or
    /// used by an unsubmitted [`crate::Sequence`], when that recorder let it go: at its submit
    /// or drop).
    pub fn synchronize(&self) -> Result<()> {
        self.inner.wait_idle()?;
        self.inner.retire_completed();
        Ok(())
    }
}

impl ContextInner {
    /// The device the context opened (or was handed).
    pub(crate) fn device(&self) -> &wgpu::Device {
        &self.device
    }

    /// Nanoseconds per tick of the device's timestamps.
    pub(crate) fn timestamp_period_ns(&self) -> f64 {
        f64::from(self.queue.get_timestamp_period())
    }

    /// Writes `bytes` into `buffer` at `offset` through wgpu's own staging: they land before
    /// the next submission's commands (unlike [`Context::queue`], this submits nothing).
    pub(crate) fn write_buffer(&self, buffer: &wgpu::Buffer, offset: u64, bytes: &[u8]) {
        self.queue.write_buffer(buffer, offset, bytes);
    }

    /// What the adapter says of itself: name, vendor, backend, driver.
    pub(crate) fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.adapter_info
    }

    /// The limits the device was opened with.
    pub(crate) fn limits(&self) -> &wgpu::Limits {
        &self.limits
    }

    /// The configuration the context was opened under.
    pub(crate) fn config(&self) -> &ArenaConfig {
        &self.config
    }

    /// Which memory types the arena, staging and readbacks use on this device.
    pub(crate) fn plan(&self) -> &MemoryPlan {
        &self.plan
    }

    /// The device's memory heaps and types, as the memory plan read them.
    pub(crate) fn description(&self) -> &DeviceDescription {
        &self.description
    }

    /// The record of submissions made and completed.
    pub(crate) fn submissions(&self) -> &Submissions {
        &self.submissions
    }

    /// Largest region (and so largest array) the device allows, in bytes.
    pub(crate) fn max_region_bytes(&self) -> u64 {
        self.max_region_bytes
    }

    /// How host bytes reach the arrays and come back on this context.
    pub(crate) fn host_link(&self) -> crate::host_link::HostLink {
        self.host_link
    }

    /// The staging pool transfers go through.
    pub(crate) fn staging(&self) -> &StagingPool {
        &self.staging
    }

    /// Counts of transfers and their bytes, by path.
    pub(crate) fn transfer_counters(&self) -> &TransferCounters {
        &self.transfer_counters
    }

    /// The transfer guard's levels that hold where no scope sets others.
    pub(crate) fn guard_defaults(&self) -> TransferGuardLevels {
        self.guard_defaults
    }

    /// The event timeline; `None` (the default) when it records nothing.
    pub(crate) fn timeline(&self) -> Option<&Arc<crate::trace::timeline::Timeline>> {
        self.timeline.as_ref()
    }

    /// Compiled kernels and their parameter buffer.
    pub(crate) fn kernels(&self) -> &crate::pipelines::KernelCache {
        &self.kernels
    }

    /// Zero-copy host access to arena memory is allowed when configured and the memory type is
    /// host-visible, coherent or not: on non-coherent memory the mapped range flushes after
    /// host writes and invalidates before host reads.
    pub(crate) fn zero_copy_allowed(&self, memory_type: Option<u32>) -> bool {
        self.config.zero_copy
            && memory_type
                .and_then(|t| self.description.memory.types.get(t as usize))
                .is_some_and(|t| t.flags.contains(MemoryTypeFlags::HOST_VISIBLE))
    }

    /// Whether host reads of mapped arena memory are fast enough to read arrays directly: on
    /// UMA the arena is host memory. On a discrete GPU a mapped arena is VRAM behind the BAR,
    /// which the CPU reads a word at a time over PCIe, so readbacks take cached staging.
    pub(crate) fn host_reads_arena(&self) -> bool {
        self.plan.uma
    }

    /// Whether the host reads mapped memory of `kind` fast enough to read arrays directly:
    /// the device kind as [`ContextInner::host_reads_arena`] says; the pinned-host kind where
    /// its memory is host-cached (system memory the CPU caches) or on UMA.
    pub(crate) fn host_reads(&self, kind: MemoryKind) -> bool {
        match kind {
            MemoryKind::Device => self.host_reads_arena(),
            MemoryKind::PinnedHost => {
                self.plan.uma || self.plan.pinned_host.as_ref().is_some_and(|h| h.cached)
            }
        }
    }

    #[cfg_attr(debug_assertions, track_caller)]
    pub(crate) fn lock_memory(&self) -> MutexGuard<'_, MemoryState> {
        // A panic while holding the lock cannot leave the arena half-updated in a way that
        // matters more than refusing all further work, so carry on with the inner value.
        let memory = self.memory.lock().unwrap_or_else(|p| p.into_inner());
        // The first arena event under this lock reads the clock (the timeline's sink reads
        // it only now and then otherwise, to stay cheap in tight loops).
        if let Some(timeline) = &self.timeline {
            timeline.refresh_clock();
        }
        memory
    }

    /// Takes `bytes` from the arena of `kind`; reserves the device arena at the first call;
    /// waits for in-flight GPU work to retire pending frees before giving up with
    /// out-of-memory. Returns the allocation with what it needs of its region.
    pub(crate) fn allocate(
        &self,
        kind: MemoryKind,
        bytes: u64,
        label: Option<&str>,
        info: crate::trace::array_info::ArrayInfo,
    ) -> Result<(Allocation, crate::backend::ArrayRegion)> {
        // A lost device's memory may still be mapped (UMA), but nothing made on it can be
        // used: every allocation refuses, as every other call does.
        self.check_device("allocating an array")?;
        let mut memory = self.lock_memory();
        // Learning which submissions completed costs a device poll; do it once pending frees
        // are worth reclaiming (or below, when the allocation would fail without them).
        if memory.pending_free_bytes() >= RETIRE_PENDING_BYTES {
            drop(memory);
            // Frees behind gathered single ops come back only once those are submitted: a
            // growing arena would otherwise grow by a whole batch of temporaries.
            self.submit_gathered_now();
            self.retire_completed();
            memory = self.lock_memory();
        }
        memory.reserve_for(kind, bytes, label)?;
        let mut waits = 0;
        let allocation = loop {
            // The timeline follows the device arena (its events are that arena's).
            if let (Some(timeline), MemoryKind::Device) = (&self.timeline, kind) {
                timeline.describe_next_alloc(&info);
            }
            let outcome = memory.allocate(kind, bytes, label).ok_or_else(|| {
                Error::MemoryKindUnavailable {
                    kind,
                    device: self.adapter_info.name.clone(),
                }
            })?;
            match outcome {
                Ok(allocation) => break allocation,
                // Memory freed by arrays that queued work still uses: wait, then retry. Other
                // threads may have freed more behind work queued meanwhile (behind their
                // gathered single ops, not even submitted): wait again then, a few times.
                Err(_) if memory.pending_free_bytes() > 0 && waits < MAX_OOM_WAITS => {
                    waits += 1;
                    drop(memory);
                    self.wait_idle()?;
                    // Retired under the lock this allocation then tries again under, so the
                    // memory it waited for is not taken by another thread in between.
                    let completed = self.submissions.completed();
                    memory = self.lock_memory();
                    memory.retire_completed(completed);
                }
                Err(e) => return Err(e.into()),
            }
        };
        self.register_array(&mut memory, kind, allocation.id, info);
        let region = memory
            .regions_of(kind)
            .get(allocation.region)
            .expect("the arena only hands out ranges of regions the backend holds");
        let mapped = region
            .mapped
            .clone()
            .filter(|_| self.zero_copy_allowed(region.memory_type));
        let region = crate::backend::ArrayRegion {
            buffer: region.buffer.clone(),
            mapped,
            aliases: region.aliases.clone(),
        };
        Ok((allocation, region))
    }

    /// A timer for the dispatches of `steps` when the context times kernels (see
    /// `context/kernel_timing.rs`); `None` (the work runs untimed) otherwise.
    pub(crate) fn dispatch_timer(
        &self,
        steps: &[crate::step::Step],
    ) -> Option<crate::step::DispatchTimer> {
        self.kernel_timing.as_ref()?.dispatch_timer(steps)
    }

    /// Hands back the timer of submission `id` (`submitted`: the device accepted it).
    pub(crate) fn timed_submission(
        &self,
        timer: Option<crate::step::DispatchTimer>,
        id: SubmissionId,
        submitted: bool,
    ) {
        if let Some(timing) = &self.kernel_timing {
            timing.timed_submission(timer, id, submitted);
        }
    }

    /// Puts the times of every completed timed submission on the timeline, without waiting.
    pub(crate) fn collect_kernel_times(&self) {
        if let Some(timing) = &self.kernel_timing {
            timing.collect();
        }
    }

    /// The context's kernel timing, when it times kernels.
    pub(crate) fn kernel_timing(&self) -> Option<&kernel_timing::KernelTiming> {
        self.kernel_timing.as_ref()
    }

    /// Records a new array under the arena's lock, dated on the timeline's clock when it is on
    /// (the arena event of its allocation has just read it).
    fn register_array(
        &self,
        memory: &mut MemoryState,
        kind: MemoryKind,
        id: crate::arena::AllocationId,
        mut info: crate::trace::array_info::ArrayInfo,
    ) {
        info.born_ns = self.timeline.as_ref().map(|t| t.last_reading_ns());
        memory.register_array(kind, id, info);
    }

    /// Returns an allocation to the arena of `kind`; it becomes reusable once `last_use` has
    /// completed.
    pub(crate) fn free(&self, kind: MemoryKind, allocation: &Allocation, last_use: SubmissionId) {
        let frontier = (last_use.0 > self.submissions.completed()).then_some(last_use.0);
        let mut memory = self.lock_memory();
        if let Err(e) = memory.free(kind, allocation.id, frontier) {
            log::error!("gpu-arena: freeing {:?} failed: {e}", allocation.id);
        }
    }

    /// Records a transfer, a dispatch or a label on the timeline; one branch when it is off.
    pub(crate) fn record(&self, record: crate::trace::timeline::Record<'_>) {
        if let Some(timeline) = &self.timeline {
            timeline.record(record);
        }
    }

    /// Counts `n` bind groups made ([`Context::bind_groups_made`]).
    pub(crate) fn count_bind_groups(&self, n: u64) {
        self.bind_groups_made
            .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }
}

impl crate::host_link::HostPort for ContextInner {
    fn device(&self) -> &wgpu::Device {
        &self.device
    }

    fn staging(&self) -> &StagingPool {
        &self.staging
    }

    fn flush_gathered(&self) -> Result<()> {
        self.flush()
    }

    fn submit_copies(
        &self,
        encoder: wgpu::CommandEncoder,
        during: &str,
        host_read: bool,
    ) -> Result<SubmissionId> {
        self.submit_encoder(encoder, during, host_read)
    }

    fn submit_writes(&self, during: &str, writes: impl FnOnce()) -> Result<SubmissionId> {
        // The writes are inside the submission's error scopes: one into a buffer destroyed
        // through the escape hatch is an `Error::Device`.
        // wgpu lands queued writes before the next submission's commands: queued once the
        // gathered batch has gone out (`before` runs then, under its lock), they come after the
        // ops called before them and its small puts, as they were called.
        self.submission(during)?.submit([], |_| writes(), [])
    }

    fn write_buffer(&self, buffer: &wgpu::Buffer, offset: u64, bytes: &[u8]) {
        self.queue.write_buffer(buffer, offset, bytes);
    }

    fn wait_for_copies(&self, id: SubmissionId) -> Result<()> {
        self.wait_for(id)
    }

    fn read_mapped(
        &self,
        buffer: &wgpu::Buffer,
        during: &str,
        read: impl FnOnce(&[u8]),
    ) -> Result<()> {
        ContextInner::read_mapped(self, buffer, during, read)
    }
}

impl StagingMemory for ContextInner {
    fn completed(&self) -> u64 {
        self.submissions.completed()
    }

    fn create_staging(&self, kind: StagingKind, bytes: u64) -> Result<StagingBuffer> {
        let (candidates, purpose, label) = match kind {
            StagingKind::Upload => (
                &self.plan.upload_candidates,
                Purpose::Upload,
                "gpu-arena upload staging",
            ),
            StagingKind::Readback => (
                &self.plan.readback_candidates,
                Purpose::Readback,
                "gpu-arena readback staging",
            ),
        };
        let size = bytes.next_multiple_of(crate::host_link::staging::COPY_ALIGNMENT);
        let memory = self.lock_memory();
        let DeviceBuffer { buffer, mapped, .. } = memory
            .regions()
            .create_buffer(size, candidates, purpose, label)?;
        drop(memory);
        let mapped = mapped.ok_or_else(|| Error::Backend {
            during: format!("creating {label}"),
            reason: "the staging memory type is not host-visible".into(),
        })?;
        Ok(StagingBuffer {
            buffer,
            mapped,
            size,
            busy_until: SubmissionId(0),
        })
    }

    fn wait_for_staging(&self, id: SubmissionId) -> Result<()> {
        self.wait_for_work(id)?;
        let _ = self.device.poll(wgpu::PollType::Poll);
        Ok(())
    }

    fn staging_bytes(&self) -> u64 {
        self.config.staging_bytes
    }
}

impl Drop for ContextInner {
    fn drop(&mut self) {
        // Every array is gone (they hold the context); give all regions back, then wait so that
        // wgpu runs the buffers' release callbacks before the device goes away. Gathered single
        // ops are submitted first, as a wait would have (nothing can read their results now).
        let gathered = self.gathered.get_mut().unwrap_or_else(|p| p.into_inner());
        let mut gathered = std::mem::take(gathered);
        self.submit_gathered(&mut gathered);
        let memory = self.memory.get_mut().unwrap_or_else(|p| p.into_inner());
        memory.release_all();
        let _ = self.device.poll(wgpu::PollType::wait_indefinitely());
    }
}
