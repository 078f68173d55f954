//! `dynamic_slice`: XLA's `DynamicSlice`, a box of an array copied into a new one.

use super::geometry::BoxCopy;
use super::slice_indices::clamp_start;
use crate::array::{Access, DeviceArray};
use crate::compute::Sequence;
use crate::context::Context;
use crate::error::Result;

impl Context {
    /// A new array of shape `sizes` holding `operand[start .. start + sizes]`: XLA's
    /// `DynamicSlice`. Each start index is clamped into `[0, operand_dim - size]`, so negative
    /// and too-large starts are not errors (unless
    /// [`ArenaConfig::strict_starts`](crate::ArenaConfig::strict_starts) asks for them). The
    /// result is device memory whatever the operand's memory kind (a pinned-host operand is
    /// read where it lies).
    ///
    /// Errors: [`crate::Error::Shape`] when `sizes` has another rank than the operand or exceeds
    /// it, [`crate::Error::Index`] when `start` does not have one index per dimension
    /// ([`IndexRefusal::StartCount`](crate::error::IndexRefusal::StartCount)) or, with strict
    /// starts, lies outside the operand
    /// ([`IndexRefusal::StartOutOfRange`](crate::error::IndexRefusal::StartOutOfRange)),
    /// out-of-memory for the result.
    ///
    /// ```no_run
    /// # let ctx = gpu_arena::Context::new(gpu_arena::ArenaConfig::default())?;
    /// let x = ctx.device_put(&(0..100).collect::<Vec<u32>>(), &[10, 10])?;
    /// let block = ctx.dynamic_slice(&x, &[8, -3], &[4, 2])?; // rows 6..10, columns 0..2
    /// # Ok::<(), gpu_arena::Error>(())
    /// ```
    #[track_caller]
    pub fn dynamic_slice<T: bytemuck::Pod>(
        &self,
        operand: &DeviceArray<T>,
        start: &[i64],
        sizes: &[usize],
    ) -> Result<DeviceArray<T>> {
        self.check_eager_array(
            &operand.storage,
            Access::Read,
            "dynamic_slice",
            "the operand",
        )?;
        let mut sequence = self.single_op();
        let result = sequence.dynamic_slice(operand, start, sizes)?;
        sequence.submit()?;
        Ok(result)
    }
}

impl Sequence {
    /// [`Context::dynamic_slice`], recorded: the new array exists at once and holds the slice
    /// once the sequence has run.
    #[track_caller]
    pub fn dynamic_slice<T: bytemuck::Pod>(
        &mut self,
        operand: &DeviceArray<T>,
        start: &[i64],
        sizes: &[usize],
    ) -> Result<DeviceArray<T>> {
        const OPERATION: &str = "dynamic_slice";
        operand.check_same_context(&self.ctx.inner, OPERATION)?;
        let strict = operand.storage.ctx.config().strict_starts;
        let start = clamp_start(operand.shape(), sizes, start, strict, OPERATION)?;
        let result = self.new_array::<T>(sizes, None, OPERATION)?;
        let copy = slice_box::<T>(operand, &start, sizes);
        let uses = [
            (operand, Access::Read, "the operand"),
            (&result, Access::Write, "the result"),
        ];
        match self.host_path_now(&uses, OPERATION)? {
            Some(host) => host.copy(0, 1, &copy),
            None => self.record_copies(
                &[(operand, &result, copy)],
                ("the operand", "the result"),
                OPERATION,
            )?,
        }
        Ok(result)
    }
}

/// `operand[start .. start + sizes]` into a new array of shape `sizes`.
pub(super) fn slice_box<T: bytemuck::Pod>(
    operand: &DeviceArray<T>,
    start: &[u64],
    sizes: &[usize],
) -> BoxCopy {
    let to_u64 = |s: &[usize]| s.iter().map(|&d| d as u64).collect::<Vec<_>>();
    let box_sizes = to_u64(sizes);
    let zero = vec![0; sizes.len()];
    BoxCopy::between(
        std::mem::size_of::<T>() as u64,
        &box_sizes,
        (&to_u64(operand.shape()), start),
        (&box_sizes, &zero),
    )
}
