//! A context on a device the app opened: a renderer's (Bevy, eframe/egui, a game on wgpu) or an
//! ML stack's (CubeCL, Burn), so that the arena and the app share one device and one queue
//! instead of splitting the GPU's memory between two devices that cannot see each other's.
//!
//! What changes against [`Context::new`](crate::Context::new), and why:
//! - **Nothing is requested**: the device is the app's, with the features and limits the app
//!   asked for. The context checks them against [`DeviceRequirements`] and refuses a device
//!   that falls short ([`Error::DeviceRequirements`](crate::Error::DeviceRequirements), naming
//!   each shortfall), and reads the device's own limits (`device.limits()`), never the
//!   adapter's.
//! - **The app's handlers stay the app's**: wgpu keeps one uncaptured-error handler and one
//!   device-lost callback per device, so installing ours would silently take them from the
//!   app. The context installs neither. Its own work runs inside error scopes (per thread, so
//!   they catch only its errors). The device's loss reaches it through a
//!   [`DeviceLostNotifier`] the app calls from its own callback (with wgpu's reason), and
//!   without one through a probe before every host read ([`LossProbe`]: a buffer map fails on
//!   a lost device).
//! - **Memory**: on Vulkan the arena allocates through gpu-allocator on the device's raw
//!   handles exactly as on a device of its own (`backend/vulkan.rs`); elsewhere plain wgpu
//!   buffers. Dropping the context frees only what the arena allocated.

use crate::config::ArenaConfig;
use crate::shortfall::DeviceShortfall;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

/// The app's wgpu objects a context opens on: the adapter (for the memory table and the
/// downlevel capabilities), the device and its queue. wgpu's handles are reference-counted,
/// so these are cheap clones of the app's own.
///
/// ```no_run
/// # fn app() -> gpu_arena::Result<()> {
/// # let (adapter, device, queue): (gpu_arena::wgpu::Adapter, gpu_arena::wgpu::Device, gpu_arena::wgpu::Queue) = todo!();
/// use gpu_arena::{AppDevice, ArenaConfig, Context};
/// let ctx = Context::from_wgpu(AppDevice::new(&adapter, &device, &queue), ArenaConfig::default())?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct AppDevice {
    /// The adapter the device was requested from.
    pub adapter: wgpu::Adapter,
    /// The app's device.
    pub device: wgpu::Device,
    /// The device's queue: the arena's work goes on it, in order with the app's.
    pub queue: wgpu::Queue,
    /// The instance that enumerated the adapter, when the app hands it over: the context only
    /// passes it on ([`Context::instance`](crate::Context::instance)) to libraries that start
    /// on an existing device and want all of it (CubeCL's `WgpuSetup`). `None` by default.
    pub instance: Option<wgpu::Instance>,
}

impl AppDevice {
    /// The app's adapter, device and queue, cloned (wgpu handles are reference-counted).
    pub fn new(adapter: &wgpu::Adapter, device: &wgpu::Device, queue: &wgpu::Queue) -> Self {
        Self {
            adapter: adapter.clone(),
            device: device.clone(),
            queue: queue.clone(),
            instance: None,
        }
    }

    /// The same, with the instance that enumerated the adapter (see [`AppDevice::instance`]).
    pub fn with_instance(mut self, instance: &wgpu::Instance) -> Self {
        self.instance = Some(instance.clone());
        self
    }
}

/// What gpu-arena needs of a device, to put in the `wgpu::DeviceDescriptor` an app opens its
/// device with (or to check one it already has).
///
/// - `features`: none today; the arena uses `PIPELINE_CACHE` (driver pipeline cache on disk)
///   and `IMMEDIATES` (kernel parameters as push constants) when the device has them
///   (`optional_features`: request them too where the adapter offers them). Immediates also
///   take room: `limits` asks for none (`max_immediate_size` 0, the WebGL2 floor), so request
///   the adapter's `max_immediate_size` with them, as the example does; a kernel's
///   `var<immediate>` larger than the device's room is refused at
///   [`Context::kernel`](crate::Context::kernel).
/// - `limits`: the compute limits of wgpu's `Limits::downlevel_defaults()` (4 storage buffers
///   per stage, 128 MiB storage bindings, 256 invocations, workgroups up to 256×256×64) over
///   the WebGL2 floor for everything else, and a `max_buffer_size` of at least the larger of
///   WebGL2's floor (256 MiB) and [`ArenaConfig::staging_bytes`] rounded up to whole 4-byte
///   words (staging buffers are whole words; a device with 8 MiB is refused whatever the
///   staging size). A device with the adapter's own limits (the usual request) has all of
///   them.
/// - `downlevel`: compute shaders (any Vulkan, Metal or DX12 device; GL from 4.3 / GLES 3.1).
/// - Vulkan: no device extension. gpu-allocator runs on core Vulkan (no buffer device
///   address), and `VK_EXT_memory_budget` is read when the physical device offers it (heap
///   budgets in the memory plan and [`Context::heap_budgets`](crate::Context::heap_budgets));
///   without it the plan falls back to the heap sizes.
///
/// ```no_run
/// # let adapter: gpu_arena::wgpu::Adapter = todo!();
/// let needs = gpu_arena::DeviceRequirements::for_config(&gpu_arena::ArenaConfig::default());
/// let (device, queue) = pollster::block_on(adapter.request_device(&gpu_arena::wgpu::DeviceDescriptor {
///     required_features: needs.features | (adapter.features() & needs.optional_features),
///     required_limits: gpu_arena::wgpu::Limits {
///         max_immediate_size: adapter.limits().max_immediate_size,
///         ..needs.limits.clone()
///     },
///     ..Default::default()
/// }))?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceRequirements {
    /// Features the arena cannot work without (none today).
    pub features: wgpu::Features,
    /// Features the arena uses when the device has them: the pipeline cache and immediates,
    /// and with the timeline and kernel times on, timestamp queries (without them
    /// [`crate::Context::kernel_times`] is `None`).
    pub optional_features: wgpu::Features,
    /// The least limits the arena works with.
    pub limits: wgpu::Limits,
    /// Capabilities of the adapter the arena needs (not requested: the adapter has them or not).
    pub downlevel: wgpu::DownlevelFlags,
}

impl DeviceRequirements {
    /// What a context with `config` needs (its staging buffers decide `max_buffer_size`).
    pub fn for_config(config: &ArenaConfig) -> Self {
        let compute = wgpu::Limits::downlevel_defaults();
        let floor = wgpu::Limits::downlevel_webgl2_defaults();
        let mut optional_features = wgpu::Features::PIPELINE_CACHE | wgpu::Features::IMMEDIATES;
        if config.timeline_capacity > 0 && config.kernel_times {
            optional_features |=
                wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES;
        }
        Self {
            features: wgpu::Features::empty(),
            optional_features,
            limits: wgpu::Limits {
                max_storage_buffers_per_shader_stage: compute.max_storage_buffers_per_shader_stage,
                max_dynamic_storage_buffers_per_pipeline_layout: compute
                    .max_dynamic_storage_buffers_per_pipeline_layout,
                max_storage_buffer_binding_size: compute.max_storage_buffer_binding_size,
                max_compute_workgroup_storage_size: compute.max_compute_workgroup_storage_size,
                max_compute_invocations_per_workgroup: compute
                    .max_compute_invocations_per_workgroup,
                max_compute_workgroup_size_x: compute.max_compute_workgroup_size_x,
                max_compute_workgroup_size_y: compute.max_compute_workgroup_size_y,
                max_compute_workgroup_size_z: compute.max_compute_workgroup_size_z,
                max_compute_workgroups_per_dimension: compute.max_compute_workgroups_per_dimension,
                max_buffer_size: floor.max_buffer_size.max(
                    config
                        .staging_bytes
                        .next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT),
                ),
                ..floor
            },
            downlevel: wgpu::DownlevelFlags::COMPUTE_SHADERS,
        }
    }

    /// Every shortfall of a device with `features`, `limits` and `downlevel` against these
    /// requirements, in the order of wgpu's limits (empty: the device will do).
    pub fn shortfalls(
        &self,
        features: wgpu::Features,
        limits: &wgpu::Limits,
        downlevel: wgpu::DownlevelFlags,
    ) -> Vec<DeviceShortfall> {
        let mut missing = Vec::new();
        let absent = self.features - features;
        if !absent.is_empty() {
            missing.push(DeviceShortfall {
                name: format!("features {}", crate::error::flag_names(absent.iter_names())),
                has: "not requested".into(),
                needs: "requested in required_features".into(),
            });
        }
        let absent = self.downlevel - downlevel;
        if !absent.is_empty() {
            missing.push(DeviceShortfall {
                name: format!("downlevel capability {absent:?}"),
                has: "absent on this adapter".into(),
                needs: "an adapter with compute shaders (Vulkan, Metal, DX12, GL 4.3)".into(),
            });
        }
        // wgpu's check asks whether `self` fits within `allowed`: the requirements within
        // what the device has.
        self.limits
            .check_limits_with_fail_fn(limits, false, |name, needs, has| {
                missing.push(DeviceShortfall {
                    name: format!("limit {name}"),
                    has: has.to_string(),
                    needs: needs.to_string(),
                });
            });
        missing
    }
}

/// How a context learns that its device is lost when the device-lost callback is not its own
/// (a context on an app's device: wgpu keeps one callback per device, and it is the app's).
/// Call [`DeviceLostNotifier::notify`] from the app's callback; from then on every call of the
/// context refuses with [`Error::DeviceLost`](crate::Error::DeviceLost), with wgpu's reason.
/// Without it the context finds the loss itself at its next wait or host read (a probe: a
/// buffer map fails on a lost device), without wgpu's reason.
/// It holds only a flag (not the context), so a callback that keeps it keeps nothing alive.
///
/// ```no_run
/// # let (device, ctx): (gpu_arena::wgpu::Device, gpu_arena::Context) = todo!();
/// let lost = ctx.device_lost_notifier();
/// device.set_device_lost_callback(move |reason, message| {
///     lost.notify(reason, &message);
///     // ... the app's own handling
/// });
/// ```
#[derive(Clone, Debug)]
pub struct DeviceLostNotifier {
    pub(super) lost: Arc<OnceLock<String>>,
}

impl DeviceLostNotifier {
    /// Marks the device lost for `reason` (as wgpu's callback gives it). The first call wins.
    pub fn notify(&self, reason: wgpu::DeviceLostReason, message: &str) {
        let reason = match reason {
            wgpu::DeviceLostReason::Destroyed => "destroyed by wgpu::Device::destroy",
            wgpu::DeviceLostReason::Unknown => "lost for a reason wgpu does not know",
        };
        let reason = match message.is_empty() {
            true => reason.to_string(),
            false => format!("{reason}: {message}"),
        };
        let _ = self.lost.set(reason);
    }
}

/// A device opened (by the context or the app) and what the context learned of it.
pub(crate) struct OpenedDevice {
    pub(crate) instance: Option<wgpu::Instance>,
    pub(crate) adapter: wgpu::Adapter,
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) adapter_info: wgpu::AdapterInfo,
    pub(crate) device_lost: Arc<OnceLock<String>>,
    /// The app's device (its device-lost callback is the app's): waits probe for a loss.
    pub(crate) app_device: bool,
}

/// How a context on an app's device learns of a loss the app did not forward. wgpu drops
/// errors of a lost device's operations (they would go to the device-lost callback, which is
/// the app's), so failing operations say nothing; but a buffer map on an invalid device calls
/// its callback at once with an error. Each probe maps a 4-byte buffer of the context's own:
/// an error marks the device lost; success leaves it mapped until the next probe unmaps it.
/// One probe at a time (an atomic state), so a probe never fails for being already pending.
pub(crate) struct LossProbe {
    buffer: wgpu::Buffer,
    state: Arc<AtomicU8>,
}

/// [`LossProbe`] states: no map requested, a map requested and not yet resolved, mapped.
const PROBE_IDLE: u8 = 0;
const PROBE_PENDING: u8 = 1;
const PROBE_MAPPED: u8 = 2;
/// The size of the probe's buffer: the smallest mappable range (wgpu maps whole words).
const PROBE_BYTES: u64 = wgpu::COPY_BUFFER_ALIGNMENT;

impl LossProbe {
    pub(crate) fn new(device: &wgpu::Device) -> Self {
        Self {
            buffer: device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("gpu-arena device-loss probe"),
                size: PROBE_BYTES,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }),
            state: Arc::new(AtomicU8::new(PROBE_IDLE)),
        }
    }

    /// Asks wgpu whether the device is still valid; sets `lost` when it is not. Called after a
    /// wait, so an earlier probe's map has usually resolved; one still pending is left alone.
    pub(crate) fn probe(&self, device: &wgpu::Device, lost: &Arc<OnceLock<String>>) {
        if self.state.load(Ordering::Acquire) == PROBE_PENDING {
            // The last probe's map resolves (or fails, on a lost device) at a poll.
            let _ = device.poll(wgpu::PollType::Poll);
        }
        let claimed = [PROBE_MAPPED, PROBE_IDLE].into_iter().find(|&from| {
            self.state
                .compare_exchange(from, PROBE_PENDING, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        });
        let Some(from) = claimed else {
            return;
        };
        const LOST: &str = "the device is lost or was destroyed (found by a failing buffer map; forward the app's device-lost callback to Context::device_lost_notifier for wgpu's reason)";
        // In error scopes of our own: on an invalid device the unmap is a validation error,
        // which must not reach the app's handler; it says the device is gone, as a map does.
        let scopes = crate::pipelines::ErrorScopes::push(device);
        if from == PROBE_MAPPED {
            self.buffer.unmap();
        }
        let state = Arc::clone(&self.state);
        let on_map_lost = Arc::clone(lost);
        self.buffer
            .slice(..)
            .map_async(wgpu::MapMode::Read, move |result| match result {
                Ok(()) => state.store(PROBE_MAPPED, Ordering::Release),
                Err(_) => {
                    let _ = on_map_lost.set(LOST.to_string());
                    state.store(PROBE_IDLE, Ordering::Release);
                }
            });
        if scopes.pop().is_err() {
            let _ = lost.set(LOST.to_string());
        }
    }
}
