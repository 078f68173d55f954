//! Opening a context: on the best adapter ([`Context::new`]), on one that
//! [`devices`](crate::devices) lists ([`Context::on_device`], [`Context::open_all`]), and the
//! steps every way of opening shares once a device is open (its memory plan, the arena's memory
//! types and options, the parts the context holds). A file of its own because opening is done
//! once per context and reads the configuration, the plan and the device's limits, which
//! nothing after it reads again in that way.

use super::{
    app_device, gathered_batch, kernel_timing, Context, ContextInner, DeviceLimits,
    DeviceLostNotifier, KindMemory, MemoryState, OpenedDevice,
};
use crate::arena::{Arena, ArenaMode, ArenaOptions};
use crate::backend::{self, Regions};
use crate::config::{AllocatorKind, ArenaConfig, BarWrites, DEFAULT_PINNED_HOST_PERCENT};
use crate::devices::{devices, DeviceInfo};
use crate::error::{Error, Result};
use crate::host_link::staging::StagingPool;
use crate::host_link::stats::TransferCounters;
use crate::lock::{rank, Mutex};
use crate::memplan::{plan_memory, BarClass, MemoryPlan};
use crate::submission::Submissions;
use std::sync::Arc;

/// Source of context numbers (see `ContextInner::id`).
static NEXT_CONTEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Context {
    /// Opens the best GPU (discrete > integrated > CPU; Vulkan first, other wgpu backends where
    /// no Vulkan adapter exists). Blocks while the device opens.
    ///
    /// Errors: a configuration value [`ArenaConfig::validate`] refuses (checked before any
    /// device call), no adapter (the message says what to install), the chosen adapter refused
    /// a device, a staging size above the device's `max_buffer_size`, a memory fraction whose
    /// limit rounds to no byte of the device's heap (under 256 bytes), or the memory plan could
    /// not be made.
    ///
    /// The list it chooses from, and contexts on the other adapters: [`crate::devices`],
    /// [`Context::on_device`], [`Context::open_all`].
    pub fn new(config: ArenaConfig) -> Result<Self> {
        config.validate()?;
        let (instance, adapter) = crate::devices::choose_adapter(&config)?;
        Self::open(&instance, &adapter, config)
    }

    /// Opens a device on `adapter` (enumerated by `instance`) under `config`, already
    /// validated (the adapter fields of `config` are not read: the adapter is chosen).
    pub(crate) fn open(
        instance: &wgpu::Instance,
        adapter: &wgpu::Adapter,
        config: ArenaConfig,
    ) -> Result<Self> {
        // Before any device call: a bad GPU_ARENA_CACHE_DIR is the caller's to fix.
        let kernels = crate::pipelines::KernelCache::from_env(config.kernel_tuning)?;
        let adapter_info = adapter.get_info();
        let limits = adapter.limits();
        crate::config::check_staging_fits_device(config.staging_bytes, limits.max_buffer_size)?;
        // What an app's device is told to ask for too (the pipeline cache, immediates, and
        // with the timeline on timestamp queries), where the adapter has it.
        let wanted = app_device::DeviceRequirements::for_config(&config).optional_features;
        let required_features = adapter.features() & wanted;
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("gpu-arena"),
            required_features,
            required_limits: limits,
            ..Default::default()
        }))
        .map_err(|e| Error::RequestDevice {
            adapter: adapter_info.name.clone(),
            reason: e.to_string(),
        })?;
        // wgpu's default handler panics; a library must not. Errors we can act on are caught
        // with error scopes where they happen; anything else is logged. (The device is ours:
        // on an app's device, `from_wgpu` leaves the app's handlers alone.)
        device.on_uncaptured_error(Arc::new(|error: wgpu::Error| {
            log::error!(
                "gpu-arena: uncaptured wgpu error: {}",
                crate::pipelines::describe_wgpu_error(&error)
            );
        }));

        // Every later call checks this before touching the device (see `check_device`). The
        // callback holds only the flag, not the context, so it keeps nothing else alive.
        let device_lost = Arc::new(std::sync::OnceLock::new());
        let notifier = DeviceLostNotifier {
            lost: Arc::clone(&device_lost),
        };
        device.set_device_lost_callback(move |reason, message| notifier.notify(reason, &message));

        Self::on_opened_device(
            OpenedDevice {
                instance: Some(instance.clone()),
                adapter: adapter.clone(),
                device,
                queue,
                adapter_info,
                device_lost,
                app_device: false,
            },
            config,
            kernels,
        )
    }

    /// The context on an open device (its own, or the app's): reads the adapter's memory table,
    /// plans its memory and makes its arena, reserving nothing yet. The limits are the device's own (`device.limits()`), which
    /// for an app's device are what the app requested, not what the adapter could give.
    pub(crate) fn on_opened_device(
        opened: OpenedDevice,
        config: ArenaConfig,
        kernels: crate::pipelines::KernelCache,
    ) -> Result<Self> {
        let OpenedDevice {
            instance,
            adapter,
            device,
            queue,
            adapter_info,
            device_lost,
            app_device,
        } = opened;
        let description = backend::describe_adapter(&adapter, config.fallback_device_memory_bytes);
        let loss_probe = app_device.then(|| app_device::LossProbe::new(&device));
        let limits = device.limits();
        crate::config::check_staging_fits_device(config.staging_bytes, limits.max_buffer_size)?;
        let plan = plan_memory(&description)?;
        check_fraction_fits_device(&config, &plan)?;
        let bar_candidates = bar_write_candidates(&config, &plan)?;
        let bar_writes = bar_candidates.is_some();
        let arena_types = bar_candidates.unwrap_or_else(|| plan.arena_candidates.clone());
        let regions = Regions::new(
            device.clone(),
            arena_types,
            config.array_usages,
            config.force_non_coherent,
        )?;
        let is_vulkan = regions.is_vulkan();
        let mut max_region_bytes = limits.max_buffer_size;
        if let Some(cap) = config.max_region_bytes {
            max_region_bytes = max_region_bytes.min(cap);
        }
        max_region_bytes -= max_region_bytes % crate::arena::ALLOCATION_ALIGNMENT;
        let mut arena = Arena::new(arena_options(&config, &plan, max_region_bytes));
        let timeline = crate::trace::timeline::attach(&config, &mut arena)?;
        let pinned_host = pinned_host_types(&plan, is_vulkan).map(|types| {
            let options = pinned_host_options(&config, &plan, max_region_bytes);
            KindMemory::new(Arena::new(options), regions.sibling(types))
        });
        let device_limits = DeviceLimits {
            assumed_memory: (!is_vulkan).then_some(config.fallback_device_memory_bytes),
            max_limit_bytes: plan.prealloc_bytes(1.0),
        };
        let kernel_timing =
            kernel_timing::KernelTiming::new(timeline.as_ref(), &config, &device, &queue);
        Ok(Self {
            inner: Arc::new(ContextInner {
                id: NEXT_CONTEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                instance,
                adapter,
                device,
                queue,
                adapter_info,
                limits,
                config: config.clone(),
                plan,
                description,
                memory: Mutex::new(
                    rank::MEMORY,
                    MemoryState::new(KindMemory::new(arena, regions), pinned_host, device_limits),
                ),
                submissions: Submissions::default(),
                max_region_bytes,
                host_link: match is_vulkan {
                    true => crate::host_link::HostLink::Mapped,
                    false => crate::host_link::HostLink::Wgpu,
                },
                staging: StagingPool::default(),
                transfer_counters: TransferCounters::default(),
                guard_defaults: config.transfer_guard,
                timeline,
                kernel_timing,
                kernels,
                bar_writes,
                device_lost,
                loss_probe,
                gathered: Mutex::new(rank::GATHERED, gathered_batch::GatheredBatch::default()),
                bind_groups_made: Default::default(),
            }),
        })
    }

    /// [`Context::new`] with [`ArenaConfig::from_env`].
    pub fn from_env() -> Result<Self> {
        Self::new(ArenaConfig::from_env()?)
    }
}

/// Contexts on the adapters [`devices`] lists (see `devices.rs`).
impl Context {
    /// Opens a context on `device` (one entry of [`devices`]), with its own arena, memory
    /// plan, staging pool and statistics. Like [`Context::new`] it reserves nothing until the
    /// first allocation, and then only on this device. Several contexts may be opened on one
    /// adapter (each is a device of its own).
    ///
    /// `config` sets everything but the choice of adapter: `config.adapter` and
    /// `config.backend` are ignored here (the device is given), and validation is on when
    /// it was on in the configuration given to [`devices`] (it is a setting of the wgpu
    /// instance that enumerated the adapter).
    ///
    /// Errors: as [`Context::new`] once the adapter is chosen ([`ArenaConfig::validate`]'s
    /// refusals, [`Error::RequestDevice`], [`Error::MemPlan`], a `staging_bytes` above the
    /// device's `max_buffer_size`).
    ///
    /// ```no_run
    /// use gpu_arena::{devices, ArenaConfig, Context};
    /// let config = ArenaConfig::from_env()?;
    /// let list = devices(&config)?;
    /// let a = Context::on_device(&list[0], config.clone())?;
    /// let b = Context::on_device(&list[0], config)?; // a second device on the same adapter
    /// let x = a.device_put(&[1.0f32, 2.0], &[2])?;
    /// let y = b.device_put_from(&x)?; // device to device
    /// # Ok::<(), gpu_arena::Error>(())
    /// ```
    pub fn on_device(device: &DeviceInfo, config: ArenaConfig) -> Result<Self> {
        config.validate_but_the_adapter()?;
        Self::open(&device.instance, &device.adapter, config)
    }

    /// Opens one context on every adapter [`devices`] lists, in its order. Each has its own
    /// arena, and memory is reserved on each only at its own first allocation.
    ///
    /// Errors: as [`devices`], and the first adapter that fails to open (contexts opened
    /// before it are closed again).
    pub fn open_all(config: ArenaConfig) -> Result<Vec<Self>> {
        devices(&config)?
            .iter()
            .map(|device| Self::on_device(device, config.clone()))
            .collect()
    }
}

/// Refuses a memory fraction whose limit is no byte of this device's heap (a fraction in
/// `(0, 1]` so small that it rounds to nothing): an arena that could hold nothing would refuse
/// every array with an out-of-memory error.
///
/// # Errors
/// [`Error::Config`] naming `ArenaConfig::mem_fraction`, with the smallest limit this device
/// takes.
fn check_fraction_fits_device(config: &ArenaConfig, plan: &MemoryPlan) -> Result<()> {
    if plan.prealloc_bytes(config.mem_fraction.limit) > 0 {
        return Ok(());
    }
    let align = crate::memplan::PREALLOC_ALIGN;
    let expected = match plan.prealloc_bytes(1.0) {
        0 => format!("none: {} has no memory the arena may take", plan.device),
        _ => format!(
            "a limit of at least {align} bytes of this device's {}-byte heap (a fraction of at \
             least {:e})",
            plan.heap_bytes,
            align as f64 / plan.heap_bytes as f64
        ),
    };
    Err(Error::Config {
        variable: "ArenaConfig::mem_fraction".into(),
        value: config.mem_fraction.to_string(),
        expected: format!("{expected} (env GPU_ARENA_MEM_FRACTION)"),
    })
}

/// The arena's memory types when direct BAR writes are on ([`BarWrites`]); `None` when they are
/// off, or `on` changes nothing (UMA: the arena is host-visible already).
///
/// # Errors
/// [`Error::Config`] naming `ArenaConfig::bar_writes` when it is `on` and the device has no full
/// BAR on a discrete GPU (`on` with zero-copy off is refused earlier, by
/// [`ArenaConfig::validate`]).
pub(crate) fn bar_write_candidates(
    config: &ArenaConfig,
    plan: &MemoryPlan,
) -> Result<Option<Vec<u32>>> {
    if !config.bar_writes.enabled() {
        return Ok(None);
    }
    let refuse = |why: String| Error::Config {
        variable: "ArenaConfig::bar_writes".into(),
        value: BarWrites::On.to_string(),
        expected: format!("auto or off (env GPU_ARENA_BAR_WRITES): {why}"),
    };
    // `on` with zero-copy off is refused by `ArenaConfig::validate`, before any device call.
    if plan.uma {
        return Ok(None);
    }
    match plan.bar_write_candidates() {
        Some(candidates) => Ok(Some(candidates)),
        None => {
            let bar = match plan.bar {
                BarClass::Small => "only a small BAR window of its VRAM is host-visible",
                BarClass::None => "none of its VRAM is host-visible",
                BarClass::Full => "its host-visible VRAM is not on the heap the arena uses",
            };
            Err(refuse(format!(
                "{} has no full Resizable BAR ({bar}); enable Resizable BAR (Smart Access \
                 Memory) in the firmware, or leave direct writes off",
                plan.device
            )))
        }
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

/// The memory types of the pinned-host kind's regions: the plan's on Vulkan (`None` where the
/// device has no host-visible system memory), none to choose elsewhere (plain wgpu buffers,
/// placed by the driver).
fn pinned_host_types(plan: &MemoryPlan, is_vulkan: bool) -> Option<Vec<u32>> {
    match is_vulkan {
        true => plan
            .pinned_host
            .as_ref()
            .map(|host| host.candidates.clone()),
        false => Some(Vec::new()),
    }
}

/// The pinned-host kind's arena: nothing reserved, growing up to
/// `ArenaConfig::pinned_host_bytes`, else [`DEFAULT_PINNED_HOST_PERCENT`]% of the heap the plan
/// places the kind on (the arena's heap where the plan names none: plain wgpu buffers).
fn pinned_host_options(
    config: &ArenaConfig,
    plan: &MemoryPlan,
    max_region_bytes: u64,
) -> ArenaOptions {
    let heap_bytes = plan
        .pinned_host
        .as_ref()
        .map_or(plan.heap_bytes, |host| host.heap_bytes);
    let share = u128::from(heap_bytes) * u128::from(DEFAULT_PINNED_HOST_PERCENT) / 100;
    let limit_bytes = (config.pinned_host_bytes).unwrap_or(share as u64);
    ArenaOptions {
        mode: match config.allocator {
            AllocatorKind::Bfc => ArenaMode::Bfc,
            AllocatorKind::Platform => ArenaMode::Platform,
        },
        limit_bytes,
        max_region_bytes,
        ..ArenaOptions::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memplan::DeviceDescription;

    fn plan_of(file: &str) -> MemoryPlan {
        let path = format!("{}/tests/data/memprops/{file}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(path).unwrap();
        plan_memory(&DeviceDescription::from_json(&text).unwrap()).unwrap()
    }

    fn config(bar_writes: BarWrites, zero_copy: bool) -> ArenaConfig {
        ArenaConfig {
            bar_writes,
            zero_copy,
            ..ArenaConfig::default()
        }
    }

    #[test]
    fn the_pinned_host_kind_takes_the_plan_s_types_and_a_quarter_of_its_heap() {
        let mut h200 = plan_of("nvidia-h200-linux-580.json");
        let host = h200.pinned_host.clone().unwrap();
        assert_eq!(
            pinned_host_types(&h200, true),
            Some(host.candidates.clone())
        );
        // Plain wgpu buffers choose no type; a Vulkan device without the kind has none.
        assert_eq!(pinned_host_types(&h200, false), Some(Vec::new()));
        let options = pinned_host_options(&ArenaConfig::default(), &h200, 1 << 32);
        assert_eq!(
            options.limit_bytes,
            host.heap_bytes * DEFAULT_PINNED_HOST_PERCENT / 100
        );
        assert_eq!((options.reserve_bytes, options.mode), (0, ArenaMode::Bfc));
        let set = ArenaConfig {
            pinned_host_bytes: Some(5 << 20),
            allocator: AllocatorKind::Platform,
            ..ArenaConfig::default()
        };
        let options = pinned_host_options(&set, &h200, 1 << 32);
        assert_eq!(
            (options.limit_bytes, options.mode),
            (5 << 20, ArenaMode::Platform)
        );
        h200.pinned_host = None;
        assert_eq!(pinned_host_types(&h200, true), None);
        // Without a placement the limit is a share of the arena's heap.
        let options = pinned_host_options(&ArenaConfig::default(), &h200, 1 << 32);
        assert_eq!(
            options.limit_bytes,
            h200.heap_bytes * DEFAULT_PINNED_HOST_PERCENT / 100
        );
    }

    #[test]
    fn bar_writes_on_a_full_bar_gpu_put_the_bar_type_first() {
        let h200 = plan_of("nvidia-h200-linux-580.json");
        let on = bar_write_candidates(&config(BarWrites::On, true), &h200).unwrap();
        assert_eq!(on, Some(vec![4, 1]));
        for off in [BarWrites::Auto, BarWrites::Off] {
            assert_eq!(
                bar_write_candidates(&config(off, true), &h200).unwrap(),
                None
            );
        }
    }

    #[test]
    fn bar_writes_on_a_small_bar_gpu_are_refused_with_the_reason() {
        let small = plan_of("nvidia-rtx3090-linux-smallbar.json");
        let message = bar_write_candidates(&config(BarWrites::On, true), &small)
            .unwrap_err()
            .to_string();
        assert!(
            message.starts_with("ArenaConfig::bar_writes=\"on\" is not valid"),
            "{message}"
        );
        assert!(message.contains("GPU_ARENA_BAR_WRITES"), "{message}");
        assert!(message.contains("no full Resizable BAR"), "{message}");
        assert!(message.contains("small BAR window"), "{message}");
        assert!(message.contains(&small.device), "{message}");
        // auto never refuses.
        assert_eq!(
            bar_write_candidates(&config(BarWrites::Auto, true), &small).unwrap(),
            None
        );
    }

    #[test]
    fn bar_writes_on_uma_change_nothing() {
        for file in ["llvmpipe-mesa26.json", "apple-m1-moltenvk.json"] {
            let uma = plan_of(file);
            assert_eq!(
                bar_write_candidates(&config(BarWrites::On, true), &uma).unwrap(),
                None,
                "{file}"
            );
        }
    }

    #[test]
    fn bar_writes_on_with_zero_copy_off_is_refused_naming_both_settings() {
        let message = config(BarWrites::On, false)
            .validate()
            .unwrap_err()
            .to_string();
        assert!(message.contains("GPU_ARENA_BAR_WRITES"), "{message}");
        assert!(message.contains("GPU_ARENA_ZERO_COPY=off"), "{message}");
    }
}
