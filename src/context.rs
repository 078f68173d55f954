//! `Context`: one GPU, its queue, its memory plan and the arena that hands out its memory.

use crate::arena::{Allocation, Arena, ArenaMode, ArenaOptions, MemoryStats};
use crate::backend::{self, MappedRange, Regions};
use crate::config::{AllocatorKind, ArenaConfig};
use crate::error::{Error, Result};
use crate::memplan::{plan_memory, DeviceDescription, MemoryPlan, MemoryTypeFlags};
use crate::submission::{SubmissionId, Submissions};
use crate::transfer::staging::StagingPool;
use crate::transfer::{TransferCounters, TransferGuardLevels};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Pending frees (memory of dropped arrays that in-flight GPU work may still use) are
/// reclaimed by polling the device once they add up to this much, rather than on every
/// allocation: a poll costs more than an allocation, and smaller amounts are reclaimed anyway
/// when an allocation would otherwise fail.
const RETIRE_PENDING_BYTES: u64 = 64 << 20;

/// Source of context numbers (see `ContextInner::id`).
static NEXT_CONTEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A context as messages name it: `context 2 (llvmpipe (LLVM 15.0.6, 256 bits))`.
pub(crate) fn describe_context(ctx: &ContextInner) -> String {
    format!("context {} ({})", ctx.id, ctx.adapter_info.name)
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

/// The arena and the buffers behind its regions, under one lock: every allocation and free
/// touches both.
pub(crate) struct MemoryState {
    pub(crate) arena: Arena,
    pub(crate) regions: Regions,
    /// How long the first-allocation reservation took, once it has happened.
    pub(crate) reserve_duration: Option<Duration>,
    /// Element type, shape and age of every live array, for memory snapshots.
    pub(crate) arrays: crate::profile::ArrayRegistry,
}

pub(crate) struct ContextInner {
    /// This context's number in the process (1, 2, ...), for messages that name two contexts.
    pub(crate) id: u64,
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) adapter_info: wgpu::AdapterInfo,
    pub(crate) limits: wgpu::Limits,
    pub(crate) config: ArenaConfig,
    pub(crate) plan: MemoryPlan,
    pub(crate) description: DeviceDescription,
    pub(crate) memory: Mutex<MemoryState>,
    pub(crate) submissions: Submissions,
    /// Largest region (and so largest array) the device allows.
    pub(crate) max_region_bytes: u64,
    pub(crate) staging: StagingPool,
    pub(crate) transfer_counters: TransferCounters,
    pub(crate) guard_defaults: TransferGuardLevels,
    /// The event timeline; `None` (the default) records nothing.
    pub(crate) timeline: Option<Arc<crate::profile::Timeline>>,
    /// Compiled kernels and their parameter buffer.
    pub(crate) kernels: crate::kernels::KernelCache,
}

impl Context {
    /// Opens the best GPU (discrete > integrated > CPU; Vulkan first, other wgpu backends where
    /// no Vulkan adapter exists). Blocks while the device opens.
    ///
    /// Errors: no adapter (the message says what to install), the chosen adapter refused a
    /// device, or the memory plan could not be made.
    ///
    /// The list it chooses from, and contexts on the other adapters: [`crate::devices`],
    /// [`Context::on_device`], [`Context::open_all`].
    pub fn new(config: ArenaConfig) -> Result<Self> {
        Self::open(&crate::devices::choose_adapter(&config)?, config)
    }

    /// Opens a device on `adapter` under `config` (the adapter fields of `config` are not
    /// read: the adapter is chosen).
    pub(crate) fn open(adapter: &wgpu::Adapter, config: ArenaConfig) -> Result<Self> {
        let adapter_info = adapter.get_info();
        let limits = adapter.limits();
        // Staging buffers are this size; zero would make no progress, and more than one
        // buffer may hold cannot be made.
        if config.staging_bytes == 0 || config.staging_bytes > limits.max_buffer_size {
            return Err(Error::Config {
                variable: "staging_bytes (GPU_ARENA_STAGING_MB)".into(),
                value: config.staging_bytes.to_string(),
                expected: format!(
                    "a size in bytes from 1 to the device's max_buffer_size ({})",
                    limits.max_buffer_size
                ),
            });
        }
        // The pipeline cache persists compiled kernels; immediates let kernels take their
        // parameters as push constants.
        let required_features =
            adapter.features() & (wgpu::Features::PIPELINE_CACHE | wgpu::Features::IMMEDIATES);
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("gpu-arena"),
            required_features,
            required_limits: limits.clone(),
            ..Default::default()
        }))
        .map_err(|e| Error::RequestDevice {
            adapter: adapter_info.name.clone(),
            reason: e.to_string(),
        })?;
        // wgpu's default handler panics; a library must not. Errors we can act on are caught
        // with error scopes where they happen; anything else is logged.
        device.on_uncaptured_error(Arc::new(|error: wgpu::Error| {
            log::error!(
                "gpu-arena: uncaptured wgpu error: {}",
                crate::kernels::describe_wgpu_error(&error)
            );
        }));

        let description = backend::describe_adapter(adapter, config.fallback_device_memory_bytes);
        let plan = plan_memory(&description)?;
        let regions = Regions::new(device.clone(), plan.arena_candidates.clone())?;
        let mut max_region_bytes = limits.max_buffer_size;
        if let Some(cap) = config.max_region_bytes {
            max_region_bytes = max_region_bytes.min(cap);
        }
        max_region_bytes -= max_region_bytes % crate::arena::ALLOCATION_ALIGNMENT;
        let mut arena = Arena::new(arena_options(&config, &plan, max_region_bytes));
        let timeline = crate::profile::attach_timeline(&config, &mut arena);
        Ok(Self {
            inner: Arc::new(ContextInner {
                id: NEXT_CONTEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                device,
                queue,
                adapter_info,
                limits,
                config: config.clone(),
                plan,
                description,
                memory: Mutex::new(MemoryState {
                    arena,
                    regions,
                    reserve_duration: None,
                    arrays: Default::default(),
                }),
                submissions: Submissions::default(),
                max_region_bytes,
                staging: StagingPool::default(),
                transfer_counters: TransferCounters::default(),
                guard_defaults: config.transfer_guard,
                timeline,
                kernels: crate::kernels::KernelCache::from_env(),
            }),
        })
    }

    /// [`Context::new`] with [`ArenaConfig::from_env`].
    pub fn from_env() -> Result<Self> {
        Self::new(ArenaConfig::from_env()?)
    }

    /// The adapter this context opened.
    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.inner.adapter_info
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

    /// The wgpu device. Run your own kernels with [`Context::kernel`] and [`Context::launch`];
    /// command buffers built by hand go through [`Context::raw_submit`].
    pub fn device(&self) -> &wgpu::Device {
        &self.inner.device
    }

    /// The wgpu queue. Submitting here bypasses gpu-arena's tracking of which arrays GPU work
    /// uses: prefer [`Context::launch`], [`Context::sequence`] or [`Context::raw_submit`].
    pub fn queue(&self) -> &wgpu::Queue {
        &self.inner.queue
    }

    /// The device limits the context opened with (the adapter's own limits).
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
        self.inner.lock_memory().regions.is_vulkan()
    }

    /// Reserves the arena's memory now rather than at the first allocation. Idempotent.
    pub fn reserve(&self) -> Result<()> {
        let mut memory = self.inner.lock_memory();
        self.inner.reserve_locked(&mut memory)
    }

    /// How long the reservation took (the first allocation's extra latency), once it happened.
    pub fn reserve_duration(&self) -> Option<Duration> {
        self.inner.lock_memory().reserve_duration
    }

    /// XLA's memory statistics (`num_allocs`, `bytes_in_use`, `peak_bytes_in_use`, ...).
    pub fn memory_stats(&self) -> MemoryStats {
        self.inner.lock_memory().arena.stats()
    }

    /// Resets the peak figures of [`Context::memory_stats`] to the current values.
    pub fn reset_peak_stats(&self) {
        self.inner.lock_memory().arena.reset_peaks();
    }

    /// gpu-allocator's own count of live device-memory allocations and their bytes (Vulkan
    /// only): what the arena really holds from the driver.
    pub fn allocator_report(&self) -> Option<(usize, u64)> {
        self.inner.lock_memory().regions.allocator_report()
    }

    /// Gives wholly free regions above the reserved base back to the device; returns the bytes
    /// released.
    pub fn release_free_regions(&self) -> u64 {
        self.inner.retire_completed();
        let mut memory = self.inner.lock_memory();
        let MemoryState { arena, regions, .. } = &mut *memory;
        arena.release_free_regions(regions)
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
    /// Errors: [`Error::ForeignArray`] for an array of another context in `uses` (nothing is
    /// submitted); [`Error::Device`] when wgpu refuses the submission (for instance a command
    /// buffer that failed validation while it was encoded).
    pub fn raw_submit(
        &self,
        command_buffers: impl IntoIterator<Item = wgpu::CommandBuffer>,
        uses: &[&dyn crate::array::GpuUse],
    ) -> Result<SubmissionId> {
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
        }
        let scopes = crate::kernels::ErrorScopes::push(&self.inner.device);
        let id = self.inner.submit(command_buffers);
        scopes.pop().map_err(|reason| Error::Device {
            during: "submitting command buffers (raw_submit)".into(),
            reason,
        })?;
        self.inner.record(crate::profile::Record::Dispatch {
            name: "raw_submit",
            submission: id,
        });
        for array in uses {
            array.record_use(id);
        }
        Ok(id)
    }

    /// Blocks until all submitted GPU work has finished, then makes the memory of arrays
    /// dropped while that work was in flight reusable (it leaves `memory_stats` and snapshots
    /// at once rather than at a later allocation).
    pub fn synchronize(&self) -> Result<()> {
        self.inner.wait_idle()?;
        self.inner.retire_completed();
        Ok(())
    }
}

impl ContextInner {
    /// Zero-copy host access to arena memory is allowed when configured and the memory type is
    /// host-visible and coherent (no flushes needed).
    pub(crate) fn zero_copy_allowed(&self, memory_type: Option<u32>) -> bool {
        let wanted =
            MemoryTypeFlags(MemoryTypeFlags::HOST_VISIBLE.0 | MemoryTypeFlags::HOST_COHERENT.0);
        self.config.zero_copy
            && memory_type
                .and_then(|t| self.description.memory.types.get(t as usize))
                .is_some_and(|t| t.flags.contains(wanted))
    }

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

    fn reserve_locked(&self, memory: &mut MemoryState) -> Result<()> {
        if memory.arena.is_reserved() {
            return Ok(());
        }
        let start = Instant::now();
        let MemoryState { arena, regions, .. } = memory;
        arena.reserve(regions)?;
        memory.reserve_duration = Some(start.elapsed());
        Ok(())
    }

    /// Takes `bytes` from the arena; reserves at the first call; waits for in-flight GPU work
    /// to retire pending frees before giving up with out-of-memory. Returns the allocation with
    /// its region's buffer and (when zero-copy applies) its host mapping.
    pub(crate) fn allocate(
        &self,
        bytes: u64,
        label: Option<&str>,
        info: crate::profile::ArrayInfo,
    ) -> Result<(Allocation, wgpu::Buffer, Option<MappedRange>)> {
        let mut memory = self.lock_memory();
        // Learning which submissions completed costs a device poll; do it once pending frees
        // are worth reclaiming (or below, when the allocation would fail without them).
        if memory.arena.pending_free_bytes() >= RETIRE_PENDING_BYTES {
            drop(memory);
            self.retire_completed();
            memory = self.lock_memory();
        }
        self.reserve_locked(&mut memory)?;
        let first = {
            let MemoryState { arena, regions, .. } = &mut *memory;
            arena.allocate(bytes, 0, label, regions)
        };
        let allocation = match first {
            Ok(allocation) => allocation,
            Err(_) if memory.arena.pending_free_bytes() > 0 => {
                // Memory freed by arrays that in-flight work still uses: wait, then retry.
                drop(memory);
                self.wait_idle()?;
                self.retire_completed();
                memory = self.lock_memory();
                let MemoryState { arena, regions, .. } = &mut *memory;
                arena.allocate(bytes, 0, label, regions)?
            }
            Err(e) => return Err(e.into()),
        };
        self.register_array(&mut memory, allocation.id, info);
        let region = memory
            .regions
            .get(allocation.region)
            .expect("the arena only hands out ranges of regions the backend holds");
        let mapped = region
            .mapped
            .filter(|_| self.zero_copy_allowed(region.memory_type));
        Ok((allocation, region.buffer.clone(), mapped))
    }

    /// Returns an allocation to the arena; it becomes reusable once `last_use` has completed.
    pub(crate) fn free(&self, allocation: &Allocation, last_use: SubmissionId) {
        let frontier = (last_use.0 > self.submissions.completed()).then_some(last_use.0);
        let mut memory = self.lock_memory();
        memory.arrays.remove(allocation.id);
        let MemoryState { arena, regions, .. } = &mut *memory;
        if let Err(e) = arena.free(allocation.id, frontier, regions) {
            log::error!("gpu-arena: freeing {:?} failed: {e}", allocation.id);
        }
    }

    /// Records a transfer, a dispatch or a label on the timeline; one branch when it is off.
    pub(crate) fn record(&self, record: crate::profile::Record<'_>) {
        if let Some(timeline) = &self.timeline {
            timeline.record(record);
        }
    }

    /// Tells the arena which submissions have completed, so their pending frees become free.
    pub(crate) fn retire_completed(&self) {
        // Process wgpu's completion callbacks without blocking.
        let _ = self.device.poll(wgpu::PollType::Poll);
        let completed = self.submissions.completed();
        let mut memory = self.lock_memory();
        if memory.arena.pending_free_bytes() > 0 {
            let MemoryState { arena, regions, .. } = &mut *memory;
            arena.advance_frontier(completed, regions);
        }
    }

    /// Finishes `encoder` and submits it inside wgpu error scopes: a command the device refuses
    /// is an [`Error::Device`] saying what was being `done`, and nothing is submitted.
    pub(crate) fn submit_encoder(
        &self,
        encoder: wgpu::CommandEncoder,
        done: &str,
    ) -> Result<SubmissionId> {
        let scopes = crate::kernels::ErrorScopes::push(&self.device);
        let commands = encoder.finish();
        if let Err(reason) = scopes.pop() {
            return Err(Error::Device {
                during: done.to_string(),
                reason,
            });
        }
        Ok(self.submit([commands]))
    }

    pub(crate) fn submit(
        &self,
        command_buffers: impl IntoIterator<Item = wgpu::CommandBuffer>,
    ) -> SubmissionId {
        self.submissions.submit(&self.queue, command_buffers)
    }

    pub(crate) fn wait_idle(&self) -> Result<()> {
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| Error::Device {
                during: "waiting for submitted work".into(),
                reason: e.to_string(),
            })?;
        Ok(())
    }

    /// Waits until submission `id` (and everything before it) has completed: for that
    /// submission alone when it is recent (later ones keep running), else for the whole queue.
    pub(crate) fn wait_for(&self, id: SubmissionId) -> Result<()> {
        if id.0 <= self.submissions.completed() {
            return Ok(());
        }
        if let Some(index) = self.submissions.wgpu_index(id) {
            self.device
                .poll(wgpu::PollType::Wait {
                    submission_index: Some(index),
                    timeout: None,
                })
                .map_err(|e| Error::Device {
                    during: "waiting for submitted work".into(),
                    reason: e.to_string(),
                })?;
            if id.0 <= self.submissions.completed() {
                return Ok(());
            }
        }
        self.wait_idle()
    }
}

impl Drop for ContextInner {
    fn drop(&mut self) {
        // Every array is gone (they hold the context); give all regions back, then wait so that
        // wgpu runs the buffers' release callbacks before the device goes away.
        let memory = self.memory.get_mut().unwrap_or_else(|p| p.into_inner());
        let MemoryState { arena, regions, .. } = memory;
        arena.release_all(regions);
        let _ = self.device.poll(wgpu::PollType::wait_indefinitely());
    }
}

/// The arena's options from the configuration and the memory plan.
///
/// Preallocation reserves `mem_fraction.reserve` of the plan's heap at the first allocation and
/// may grow to `mem_fraction.limit`; without it the arena starts empty and grows to the limit.
pub(crate) fn arena_options(
    config: &ArenaConfig,
    plan: &MemoryPlan,
    max_region_bytes: u64,
) -> ArenaOptions {
    let limit_bytes = plan.prealloc_bytes(config.mem_fraction.limit);
    let reserve_bytes = match (config.allocator, config.preallocate) {
        (AllocatorKind::Bfc, true) => plan.prealloc_bytes(config.mem_fraction.reserve),
        _ => 0,
    };
    ArenaOptions {
        mode: match config.allocator {
            AllocatorKind::Bfc => ArenaMode::Bfc,
            AllocatorKind::Platform => ArenaMode::Platform,
        },
        reserve_bytes,
        limit_bytes,
        max_region_bytes,
        ..ArenaOptions::default()
    }
}
