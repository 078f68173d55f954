//! `copy`: an explicit device-to-device transfer into a new array.

use super::geometry::BoxCopy;
use super::launch::copy_dispatches;
use crate::array::DeviceArray;
use crate::context::Context;
use crate::error::Result;
use crate::transfer::TransferDirection;

impl Context {
    /// A new array with the same shape and contents as `array`: an **explicit**
    /// device-to-device transfer, checked by the transfer guard and counted in
    /// [`Context::transfer_stats`]. The copy runs as a `vec4` kernel, which moves several times
    /// the bytes per second of `copy_buffer_to_buffer` on some Vulkan drivers.
    ///
    /// Errors: the guard's refusal (`disallow_explicit` for device-to-device), out-of-memory.
    ///
    /// ```no_run
    /// # let ctx = gpu_arena::Context::new(gpu_arena::ArenaConfig::default())?;
    /// let a = ctx.device_put(&[1u8, 2, 3], &[3])?;
    /// let b = ctx.copy(&a)?;
    /// assert_eq!(ctx.device_get(&b)?, [1, 2, 3]);
    /// # Ok::<(), gpu_arena::Error>(())
    /// ```
    pub fn copy<T: bytemuck::Pod>(&self, array: &DeviceArray<T>) -> Result<DeviceArray<T>> {
        const OPERATION: &str = "copy";
        array.check_same_context(&self.inner, OPERATION)?;
        let bytes = array.size_in_bytes();
        let started = std::time::Instant::now();
        self.inner
            .guard(TransferDirection::DeviceToDevice, bytes, OPERATION, true)?;
        let result = self.alloc::<T>(array.shape())?;
        // Rounded up to 16 bytes: the arena rounds allocations to 256, so the padding copied is
        // each array's own.
        let whole = BoxCopy::contiguous(bytes.next_multiple_of(16), 0, 0);
        let mut kernels = self.inner.kernels.lock();
        if let Some(host) = self.inner.host_path(&kernels, &[array, &result])? {
            drop(kernels);
            host.copy(0, 1, &whole);
        } else {
            let limits = self.inner.plan_limits(&kernels);
            let mut dispatches = Vec::new();
            copy_dispatches(array, &result, &whole, &limits, &mut dispatches);
            self.inner
                .launch(&mut kernels, &dispatches, &[array, &result])?;
        }
        self.inner
            .transfer_counters
            .record(TransferDirection::DeviceToDevice, true, 1, bytes);
        self.inner.record(crate::profile::Record::Transfer {
            direction: TransferDirection::DeviceToDevice,
            explicit: true,
            arrays: 1,
            bytes,
            started,
        });
        Ok(result)
    }
}
