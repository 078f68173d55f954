//! `dynamic_slice`: XLA's `DynamicSlice`, a box of an array copied into a new one.

use super::geometry::BoxCopy;
use super::launch::copy_dispatches;
use super::slicing::clamp_start;
use crate::array::DeviceArray;
use crate::context::Context;
use crate::error::Result;

impl Context {
    /// A new array of shape `sizes` holding `operand[start .. start + sizes]`: XLA's
    /// `DynamicSlice`. Each start index is clamped into `[0, operand_dim - size]`, so negative
    /// and too-large starts are not errors.
    ///
    /// Errors: [`crate::Error::Shape`] when `sizes` has another rank than the operand or exceeds
    /// it, [`crate::Error::InvalidArgument`] when `start` does not have one index per dimension,
    /// out-of-memory for the result.
    ///
    /// ```no_run
    /// # let ctx = gpu_arena::Context::new(gpu_arena::ArenaConfig::default())?;
    /// let x = ctx.device_put(&(0..100).collect::<Vec<u32>>(), &[10, 10])?;
    /// let block = ctx.dynamic_slice(&x, &[8, -3], &[4, 2])?; // rows 6..10, columns 0..2
    /// # Ok::<(), gpu_arena::Error>(())
    /// ```
    pub fn dynamic_slice<T: bytemuck::Pod>(
        &self,
        operand: &DeviceArray<T>,
        start: &[i64],
        sizes: &[usize],
    ) -> Result<DeviceArray<T>> {
        const OPERATION: &str = "dynamic_slice";
        operand.check_same_context(&self.inner, OPERATION)?;
        let start = clamp_start(operand.shape(), sizes, start, OPERATION)?;
        let result = self.alloc::<T>(sizes)?;
        let to_u64 = |s: &[usize]| s.iter().map(|&d| d as u64).collect::<Vec<_>>();
        let box_sizes = to_u64(sizes);
        let zero = vec![0; sizes.len()];
        let copy = BoxCopy::between(
            std::mem::size_of::<T>() as u64,
            &box_sizes,
            (&to_u64(operand.shape()), &start),
            (&box_sizes, &zero),
        );
        let mut kernels = self.inner.kernels.lock();
        if let Some(host) = self.inner.host_path(&kernels, &[operand, &result])? {
            drop(kernels);
            host.copy(0, 1, &copy);
            return Ok(result);
        }
        let limits = self.inner.plan_limits(&kernels);
        let mut dispatches = Vec::new();
        copy_dispatches(operand, &result, &copy, &limits, &mut dispatches);
        self.inner
            .launch(&mut kernels, &dispatches, &[operand, &result])?;
        Ok(result)
    }
}
