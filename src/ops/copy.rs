//! `copy`: an explicit device-to-device transfer into a new array.

use super::update_slice::whole_array;
use crate::array::{Access, DeviceArray};
use crate::compute::Sequence;
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
    #[track_caller]
    pub fn copy<T: bytemuck::Pod>(&self, array: &DeviceArray<T>) -> Result<DeviceArray<T>> {
        self.check_not_capturing("copy")?;
        array
            .storage
            .check_ready_for(&self.inner, Access::Read, "copy", "the array")?;
        let mut sequence = self.single_op();
        let result = sequence.copy(array)?;
        sequence.submit()?;
        Ok(result)
    }
}

impl Sequence {
    /// [`Context::copy`], recorded (guarded and counted when recorded).
    #[track_caller]
    pub fn copy<T: bytemuck::Pod>(&mut self, array: &DeviceArray<T>) -> Result<DeviceArray<T>> {
        const OPERATION: &str = "copy";
        array.check_same_context(&self.ctx.inner, OPERATION)?;
        let bytes = array.size_in_bytes();
        let started = std::time::Instant::now();
        self.ctx
            .inner
            .guard(TransferDirection::DeviceToDevice, bytes, OPERATION, true)?;
        let result = self.new_array::<T>(array.shape(), None)?;
        let uses = [
            (array, Access::Read, "the array"),
            (&result, Access::Write, "the copy"),
        ];
        match self.host_path_now(&uses, OPERATION)? {
            Some(host) => host.copy(0, 1, &whole_array(array)),
            None => self.record_copies(
                &[(array, &result, whole_array(array))],
                ("the array", "the copy"),
                OPERATION,
            )?,
        }
        self.ctx
            .inner
            .count_transfer(TransferDirection::DeviceToDevice, true, 1, bytes, started);
        Ok(result)
    }
}
