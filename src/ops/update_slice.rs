//! `dynamic_update_slice`: XLA's `DynamicUpdateSlice`, in place when the operand is donated.

use super::geometry::BoxCopy;
use super::slice_indices::clamp_start;
use crate::array::{Access, DeviceArray};
use crate::compute::Sequence;
use crate::context::Context;
use crate::donated::{give_back, Donated, DonatedResult};
use crate::error::Result;
use crate::transfer::Operand;

/// The operations' names in errors, the same whether the op runs alone or is recorded.
const UPDATE_SLICE: &str = "dynamic_update_slice";
const UPDATE_SLICE_COPY: &str = "dynamic_update_slice_copy";

impl Context {
    /// Writes `update` into `operand` at `start` and returns the operand: XLA's
    /// `DynamicUpdateSlice` with the operand **donated**.
    ///
    /// Taking `operand` by value is the donation: the result is the same memory (same buffer,
    /// same [`DeviceArray::byte_offset`]), no array is allocated for it, and only the update's
    /// bytes are written, which is what JAX does for `jax.jit(..., donate_argnums=0)`. Use
    /// [`Context::dynamic_update_slice_copy`] when the old value is still needed. A host
    /// `update` is first uploaded into a temporary array of its own size (as JAX transfers a
    /// NumPy argument before the computation runs): one arena allocation, counted in
    /// `num_allocs` and the peak, that leaves `bytes_in_use` when this call returns (its memory
    /// is reused once the op has run); a device `update` allocates nothing.
    ///
    /// XLA's semantics exactly: `update` has the operand's rank and no dimension larger than
    /// the operand's; each start index is clamped into `[0, operand_dim - update_dim]`, so
    /// negative and too-large starts are not errors. `update` may be a device array or host
    /// data (an implicit upload, watched by the transfer guard). Any `Pod` element type works;
    /// elements whose size is a multiple of 4 bytes take the word and `vec4` fast paths, and 1-
    /// and 2-byte elements do too when the update's rows start and end on 4-byte boundaries.
    ///
    /// Returns when the work is recorded (a single op, gathered into the context's next
    /// submission); later GPU work and reads are ordered after it.
    ///
    /// Errors: [`crate::Error::Shape`] for a rank mismatch or a too-large update,
    /// [`crate::Error::Index`] when `start` does not have one index per dimension or, with
    /// [`ArenaConfig::strict_starts`](crate::ArenaConfig::strict_starts), lies outside the
    /// operand,
    /// [`crate::Error::ForeignArray`] for an array of another context, the guard's refusal
    /// of a host update, out-of-memory for a host update's upload, a device error. **On error
    /// the donated operand comes back intact** in [`Donated::array`] (`?` turns the error into
    /// [`crate::Error`] and drops it): a mistake does not cost a KV cache.
    ///
    /// ```no_run
    /// # let ctx = gpu_arena::Context::new(gpu_arena::ArenaConfig::default())?;
    /// let cache = ctx.zeros::<f32>(&[1024, 128])?;
    /// let row = ctx.device_put(&[1.0f32; 128], &[1, 128])?;
    /// let cache = ctx.dynamic_update_slice(cache, &row, &[7, 0])?; // row 7, in place
    /// # Ok::<(), gpu_arena::Error>(())
    /// ```
    #[track_caller]
    pub fn dynamic_update_slice<'u, T: bytemuck::Pod>(
        &self,
        operand: DeviceArray<T>,
        update: impl Into<Operand<'u, T>>,
        start: &[i64],
    ) -> DonatedResult<T> {
        let update = update.into();
        let checked = self
            .check_eager_array(&operand.storage, Access::Write, UPDATE_SLICE, "the operand")
            .and_then(|()| check_operand_ready(&update, &self.inner, UPDATE_SLICE))
            .and_then(|()| update_start(&operand, &update, start, UPDATE_SLICE));
        let start = match checked {
            Ok(start) => start,
            Err(error) => {
                return Err(Donated {
                    error,
                    array: operand,
                })
            }
        };
        let mut sequence = self.single_op();
        let operand = sequence.dynamic_update_slice(operand, update, &start_i64(&start))?;
        give_back(operand, sequence.submit().map(drop))
    }

    /// [`Context::dynamic_update_slice`] out of place: a new array holding `operand` with
    /// `update` written at `start`; `operand` is left as it was. Costs an allocation and a copy
    /// of the whole operand, which is what donation avoids. The new array is device memory
    /// whatever the operand's memory kind.
    ///
    /// Errors: as [`Context::dynamic_update_slice`], and out-of-memory for the new array (a
    /// host update is checked first and uploaded only once the new array has its memory, so
    /// this refusal has uploaded and counted nothing). When the new array fits and a host
    /// update's temporary then does not, the new array is freed and the refusal uploaded
    /// nothing, but its allocation stays counted (`num_allocs`, the peak and the timeline
    /// count allocations made, as XLA's counters do).
    #[track_caller]
    pub fn dynamic_update_slice_copy<'u, T: bytemuck::Pod>(
        &self,
        operand: &DeviceArray<T>,
        update: impl Into<Operand<'u, T>>,
        start: &[i64],
    ) -> Result<DeviceArray<T>> {
        let (storage, read) = (&operand.storage, Access::Read);
        self.check_eager_array(storage, read, UPDATE_SLICE_COPY, "the operand")?;
        let update = update.into();
        check_operand_ready(&update, &self.inner, UPDATE_SLICE_COPY)?;
        let start = update_start(operand, &update, start, UPDATE_SLICE_COPY)?;
        let mut sequence = self.single_op();
        let result = sequence.dynamic_update_slice_copy(operand, update, &start_i64(&start))?;
        sequence.submit()?;
        Ok(result)
    }
}

impl Sequence {
    /// [`Context::dynamic_update_slice`], recorded: the donated `operand` is given back at once
    /// (same memory) and holds the update once the sequence has run. A host `update` is
    /// uploaded within the sequence.
    ///
    /// Errors: as [`Context::dynamic_update_slice`] (the operand comes back in the error).
    #[track_caller]
    pub fn dynamic_update_slice<'u, T: bytemuck::Pod>(
        &mut self,
        operand: DeviceArray<T>,
        update: impl Into<Operand<'u, T>>,
        start: &[i64],
    ) -> DonatedResult<T> {
        let site = std::panic::Location::caller();
        let update = update.into();
        let recorded = operand
            .check_same_context(&self.ctx.inner, UPDATE_SLICE)
            .and_then(|()| update_start(&operand, &update, start, UPDATE_SLICE))
            .and_then(|start| {
                let update = self.resolve(update, UPDATE_SLICE, site)?;
                let copy = update_box::<T>(&operand, &update, &start);
                let uses = [
                    (&*update, Access::Read, "the update"),
                    (&operand, Access::Write, "the operand"),
                ];
                if let Some(host) = self.host_path_now(&uses, UPDATE_SLICE)? {
                    host.copy(0, 1, &copy);
                    return Ok(());
                }
                self.record_copies(
                    &[(&update, &operand, copy)],
                    ("the update", "the operand"),
                    UPDATE_SLICE,
                )
            });
        give_back(operand, recorded)
    }

    /// [`Context::dynamic_update_slice_copy`], recorded.
    #[track_caller]
    pub fn dynamic_update_slice_copy<'u, T: bytemuck::Pod>(
        &mut self,
        operand: &DeviceArray<T>,
        update: impl Into<Operand<'u, T>>,
        start: &[i64],
    ) -> Result<DeviceArray<T>> {
        operand.check_same_context(&self.ctx.inner, UPDATE_SLICE_COPY)?;
        let update = update.into();
        let start = update_start(operand, &update, start, UPDATE_SLICE_COPY)?;
        // The result, the larger allocation, before a host update's upload (checked first):
        // a result that does not fit has then uploaded and counted nothing.
        update.check_upload_ahead(&self.ctx.inner, UPDATE_SLICE_COPY)?;
        let result = self.new_array::<T>(operand.shape(), None, UPDATE_SLICE_COPY)?;
        let update = self.resolve(update, UPDATE_SLICE_COPY, std::panic::Location::caller())?;
        // The whole operand (rounded up to 16 bytes: the arena's 256-byte rounding makes the
        // padding each array's own), then the update over it; wgpu orders the two dispatches.
        let copy = update_box::<T>(operand, &update, &start);
        let uses = [
            (operand, Access::Read, "the operand"),
            (&*update, Access::Read, "the update"),
            (&result, Access::Write, "the result"),
        ];
        if let Some(host) = self.host_path_now(&uses, UPDATE_SLICE_COPY)? {
            host.copy(0, 2, &whole_array(operand));
            host.copy(1, 2, &copy);
            return Ok(result);
        }
        self.record_copies(
            &[
                (operand, &result, whole_array(operand)),
                (&update, &result, copy),
            ],
            ("the operand or update", "the result"),
            UPDATE_SLICE_COPY,
        )?;
        Ok(result)
    }
}

/// Start indices already clamped, back as XLA's signed indices (clamping again is a no-op).
fn start_i64(start: &[u64]) -> Vec<i64> {
    start.iter().map(|&s| s as i64).collect()
}

/// Every byte of `array`, rounded up to 16 (within its own 256-byte-rounded allocation).
pub(crate) fn whole_array<T: bytemuck::Pod>(array: &DeviceArray<T>) -> BoxCopy {
    BoxCopy::contiguous(array.size_in_bytes().next_multiple_of(16), 0, 0)
}

/// A device update must be readable now (same context, no unsubmitted sequence writing it).
fn check_operand_ready<T: bytemuck::Pod>(
    update: &Operand<'_, T>,
    ctx: &std::sync::Arc<crate::context::ContextInner>,
    operation: &'static str,
) -> Result<()> {
    match update {
        Operand::Device(a) => a
            .storage
            .check_ready_for(ctx, Access::Read, operation, "the update"),
        _ => Ok(()),
    }
}

/// Where `update` goes in `operand`: `start` clamped as XLA clamps it, so that the update
/// fits (see [`clamp_start`]).
fn update_start<T: bytemuck::Pod>(
    operand: &DeviceArray<T>,
    update: &Operand<'_, T>,
    start: &[i64],
    operation: &'static str,
) -> Result<Vec<u64>> {
    let strict = operand.storage.ctx.config().strict_starts;
    clamp_start(
        operand.shape(),
        &operand_shape(update),
        start,
        strict,
        operation,
    )
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
pub(super) fn update_box<T: bytemuck::Pod>(
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
