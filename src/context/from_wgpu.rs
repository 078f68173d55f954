//! [`Context::from_wgpu`]: a context on a device the app opened, checked against what the arena
//! needs ([`DeviceRequirements`]) before anything is made on it, and the notifier the app's
//! device-lost callback forwards to. A file of its own, above `context.rs`, because the context
//! holds the parts of `app_device.rs` it opens with, while this call makes a context.

use super::app_device::{AppDevice, DeviceLostNotifier, DeviceRequirements, OpenedDevice};
use super::Context;
use crate::config::ArenaConfig;
use crate::error::{Error, Result};
use std::sync::{Arc, OnceLock};

impl Context {
    /// Opens a context on a device the app already has (a renderer's, CubeCL's, Burn's): the
    /// arena allocates on that device and submits on its queue, in order with the app's work,
    /// so arrays can be drawn or handed to the app's passes with no copy
    /// ([`Context::app_work`]). `config` sets everything but the choice of adapter
    /// (`adapter`, `backend` and `validation` are the app's: its instance and device decide).
    ///
    /// What it leaves alone: the device's uncaptured-error handler and device-lost callback stay
    /// the app's (the context's own work runs inside error scopes; a loss is found by the next wait
    /// or host read, and forwarding it with [`Context::device_lost_notifier`] gives wgpu's reason
    /// at once; a device already lost when it is handed over opens a context all the same, whose
    /// first wait or host read refuses with [`Error::DeviceLost`]), and dropping the context frees
    /// only the arena's memory. Several contexts may share one device.
    ///
    /// Errors: what [`ArenaConfig::validate`] refuses; [`Error::InvalidArgument`] when the
    /// device was not made from `adapter`, or (on Vulkan, where the driver's handles tell) the
    /// queue is not the device's own; [`Error::DeviceRequirements`] naming each feature,
    /// limit or capability the device lacks against [`DeviceRequirements::for_config`];
    /// [`Error::MemPlan`] when the memory table cannot be planned.
    ///
    /// ```no_run
    /// # let (adapter, device, queue): (gpu_arena::wgpu::Adapter, gpu_arena::wgpu::Device, gpu_arena::wgpu::Queue) = todo!();
    /// use gpu_arena::{AppDevice, ArenaConfig, Context};
    /// let ctx = Context::from_wgpu(AppDevice::new(&adapter, &device, &queue), ArenaConfig::default())?;
    /// let x = ctx.device_put(&[1.0f32, 2.0, 3.0], &[3])?;
    /// # Ok::<(), gpu_arena::Error>(())
    /// ```
    pub fn from_wgpu(app: AppDevice, config: ArenaConfig) -> Result<Self> {
        config.validate_but_the_adapter()?;
        let AppDevice {
            adapter,
            device,
            queue,
            instance,
        } = app;
        let adapter_info = adapter.get_info();
        let device_info = device.adapter_info();
        // The driver's handles where the backend has them (two identical GPUs, or one GPU
        // seen by two instances, report the same); what the two report elsewhere.
        let same = crate::backend::device_made_from(&adapter, &device).unwrap_or_else(|| {
            (adapter_info.vendor, adapter_info.device, &adapter_info.name)
                == (device_info.vendor, device_info.device, &device_info.name)
        });
        // The queue must be the device's own too, where the driver's handles tell.
        let mismatch = if !same {
            Some(format!(
                "the device was not made from the adapter given (the device's is {:?} on {:?}, the adapter is {:?} on {:?}; an adapter of another `wgpu::Instance` or another GPU of the same model is another adapter): pass the adapter the device was requested from",
                device_info.name, device_info.backend, adapter_info.name, adapter_info.backend
            ))
        } else if crate::backend::queue_of_device(&device, &queue) == Some(false) {
            Some("the queue is not the device's own (it came with another device): pass the queue `request_device` returned with this device".into())
        } else {
            None
        };
        if let Some(reason) = mismatch {
            return Err(Error::InvalidArgument {
                operation: "Context::from_wgpu",
                reason,
            });
        }
        let needs = DeviceRequirements::for_config(&config);
        let missing = needs.shortfalls(
            device.features(),
            &device.limits(),
            adapter.get_downlevel_capabilities().flags,
        );
        if !missing.is_empty() {
            return Err(Error::DeviceRequirements { missing });
        }
        let kernels = crate::pipelines::KernelCache::from_env(config.kernel_tuning)?;
        Self::on_opened_device(
            OpenedDevice {
                instance,
                adapter,
                device,
                queue,
                adapter_info,
                device_lost: Arc::new(OnceLock::new()),
                app_device: true,
            },
            config,
            kernels,
        )
    }

    /// What the app's device-lost callback calls so that this context learns of the loss
    /// ([`DeviceLostNotifier`]). A context that opened its own device hears of a loss by
    /// itself; forwarding that loss too is harmless. A notification is believed as it comes:
    /// after one, every call of the context that would reach the device (allocating,
    /// transferring, recording, compiling, tuning, submitting, waiting) refuses with
    /// [`Error::DeviceLost`] whether or not the device is lost, so notify only from the
    /// device-lost callback. Settings and statistics still answer.
    pub fn device_lost_notifier(&self) -> DeviceLostNotifier {
        DeviceLostNotifier {
            lost: Arc::clone(&self.inner.device_lost),
        }
    }
}
