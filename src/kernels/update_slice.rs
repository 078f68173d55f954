//! `dynamic_update_slice`: XLA's `DynamicUpdateSlice`, in place when the operand is donated.

use super::geometry::BoxCopy;
use super::launch::copy_dispatches;
use super::slicing::clamp_start;
use crate::array::DeviceArray;
use crate::context::Context;
use crate::error::Result;
use crate::transfer::Operand;

impl Context {
    /// Writes `update` into `operand` at `start` and returns the operand: XLA's
    /// `DynamicUpdateSlice` with the operand **donated**.
    ///
    /// Taking `operand` by value is the donation: the result is the same memory (same buffer,
    /// same [`DeviceArray::byte_offset`]), nothing is allocated, and only the update's bytes are
    /// written, which is what JAX does for `jax.jit(..., donate_argnums=0)`. Use
    /// [`Context::dynamic_update_slice_copy`] when the old value is still needed.
    ///
    /// XLA's semantics exactly: `update` has the operand's rank and no dimension larger than
    /// the operand's; each start index is clamped into `[0, operand_dim - update_dim]`, so
    /// negative and too-large starts are not errors. `update` may be a device array or host
    /// data (an implicit upload, watched by the transfer guard). Any `Pod` element type works;
    /// elements whose size is a multiple of 4 bytes take the word and `vec4` fast paths, and 1-
    /// and 2-byte elements do too when the update's rows start and end on 4-byte boundaries.
    ///
    /// Returns when the work is submitted; later GPU work and reads are ordered after it.
    ///
    /// Errors: [`crate::Error::Shape`] for a rank mismatch or a too-large update,
    /// [`crate::Error::InvalidArgument`] when `start` does not have one index per dimension,
    /// [`crate::Error::ForeignArray`] for an array of another context, and the guard's refusal
    /// of a host update. On error the donated operand is dropped (its memory returns to the
    /// arena), as a donated buffer is consumed in JAX.
    ///
    /// ```no_run
    /// # let ctx = gpu_arena::Context::new(gpu_arena::ArenaConfig::default())?;
    /// let cache = ctx.zeros::<f32>(&[1024, 128])?;
    /// let row = ctx.device_put(&[1.0f32; 128], &[1, 128])?;
    /// let cache = ctx.dynamic_update_slice(cache, &row, &[7, 0])?; // row 7, in place
    /// # Ok::<(), gpu_arena::Error>(())
    /// ```
    pub fn dynamic_update_slice<'u, T: bytemuck::Pod>(
        &self,
        operand: DeviceArray<T>,
        update: impl Into<Operand<'u, T>>,
        start: &[i64],
    ) -> Result<DeviceArray<T>> {
        const OPERATION: &str = "dynamic_update_slice";
        operand.check_same_context(&self.inner, OPERATION)?;
        let update = update.into();
        let start = clamp_start(operand.shape(), &operand_shape(&update), start, OPERATION)?;
        let update = self.resolve(update, OPERATION)?;
        let copy = update_box::<T>(&operand, &update, &start);
        let mut kernels = self.inner.kernels.lock();
        if let Some(host) = self.inner.host_path(&kernels, &[&update, &operand])? {
            drop(kernels);
            host.copy(0, 1, &copy);
            return Ok(operand);
        }
        let limits = self.inner.plan_limits(&kernels);
        let mut dispatches = Vec::new();
        copy_dispatches(&update, &operand, &copy, &limits, &mut dispatches);
        self.inner
            .launch(&mut kernels, &dispatches, &[&operand, &*update])?;
        Ok(operand)
    }

    /// [`Context::dynamic_update_slice`] out of place: a new array holding `operand` with
    /// `update` written at `start`; `operand` is left as it was. Costs an allocation and a copy
    /// of the whole operand, which is what donation avoids.
    ///
    /// Errors: as [`Context::dynamic_update_slice`], and out-of-memory for the new array.
    pub fn dynamic_update_slice_copy<'u, T: bytemuck::Pod>(
        &self,
        operand: &DeviceArray<T>,
        update: impl Into<Operand<'u, T>>,
        start: &[i64],
    ) -> Result<DeviceArray<T>> {
        const OPERATION: &str = "dynamic_update_slice_copy";
        operand.check_same_context(&self.inner, OPERATION)?;
        let update = update.into();
        let start = clamp_start(operand.shape(), &operand_shape(&update), start, OPERATION)?;
        let update = self.resolve(update, OPERATION)?;
        let result = self.alloc::<T>(operand.shape())?;
        // The whole operand (rounded up to 16 bytes: the arena's 256-byte rounding makes the
        // padding each array's own), then the update over it; wgpu orders the two dispatches.
        let whole = BoxCopy::contiguous(operand.size_in_bytes().next_multiple_of(16), 0, 0);
        let copy = update_box::<T>(operand, &update, &start);
        let mut kernels = self.inner.kernels.lock();
        if let Some(host) = self
            .inner
            .host_path(&kernels, &[operand, &update, &result])?
        {
            drop(kernels);
            host.copy(0, 2, &whole);
            host.copy(1, 2, &copy);
            return Ok(result);
        }
        let limits = self.inner.plan_limits(&kernels);
        let mut dispatches = Vec::new();
        copy_dispatches(operand, &result, &whole, &limits, &mut dispatches);
        copy_dispatches(&update, &result, &copy, &limits, &mut dispatches);
        self.inner
            .launch(&mut kernels, &dispatches, &[operand, &*update, &result])?;
        Ok(result)
    }
}

/// The shape an operand will have on the device, known before any upload.
pub(crate) fn operand_shape<T: bytemuck::Pod>(operand: &Operand<'_, T>) -> Vec<usize> {
    match operand {
        Operand::Device(a) => a.shape().to_vec(),
        Operand::Host(_, shape) => shape.to_vec(),
        Operand::HostVector(data) => vec![data.len()],
    }
}

/// The whole `update` into `operand` at `start` (already clamped).
fn update_box<T: bytemuck::Pod>(
    operand: &DeviceArray<T>,
    update: &DeviceArray<T>,
    start: &[u64],
) -> BoxCopy {
    let to_u64 = |s: &[usize]| s.iter().map(|&d| d as u64).collect::<Vec<_>>();
    let sizes = to_u64(update.shape());
    let zero = vec![0; sizes.len()];
    BoxCopy::between(
        std::mem::size_of::<T>() as u64,
        &sizes,
        (&sizes, &zero),
        (&to_u64(operand.shape()), start),
    )
}
