//! `dynamic_update_slice` and `dynamic_slice` in a [`Capture`] whose start each run of the
//! captured step sets ([`Capture::index_slot`]): the copy is planned once as one dispatch over
//! both arrays bound whole, in the unit every start allows
//! ([`plan_movable_copy`](super::geometry::plan_movable_copy)), so its bind group is made once
//! and a run only rewrites the parameters' bases (a KV cache's write position, XLA's dynamic
//! offsets).

use super::builtin::{copy_kernel, planning_error, Binding, Dispatch, Params};
use super::dynamic_slice::slice_box;
use super::geometry::{plan_movable_copy, row_major_strides, BoxCopy, CopyParams, MAX_ITEMS};
use super::host::HostArrays;
use super::slice_indices::clamp_start;
use super::update_slice::update_box;
use crate::array::{Access, DeviceArray};
use crate::backend::MappedRange;
use crate::compute::{
    BaseOverflow, Capture, CaptureId, EmptyMoving, HostBox, IndexSlot, MovingCopy,
};
use crate::donated::{give_back, DonatedResult};
use crate::error::{CaptureRefusal, Error, Result, SlotKind};

impl Capture {
    /// [`Sequence::dynamic_update_slice`](crate::Sequence::dynamic_update_slice) whose start each run sets with
    /// [`crate::StepRun::start`] (from `start`'s initial value now): `update` is written into the
    /// donated `operand` in place at the clamped start, at this point of every run. The operand
    /// comes back at once (the same array: a KV cache stays one array across runs).
    ///
    /// Errors (the operand given back intact): as [`Sequence::dynamic_update_slice`](crate::Sequence::dynamic_update_slice);
    /// [`Error::Capture`] for a slot of another capture or of another rank than the operand
    /// ([`CaptureRefusal::ForeignSlot`], [`CaptureRefusal::SlotRank`]), or when one dispatch
    /// over the whole arrays cannot copy the box on this device
    /// ([`CaptureRefusal::BoxTooLarge`]) or an array is larger than one binding may be
    /// ([`CaptureRefusal::BindingTooLarge`]): record the op per run in a
    /// [`Sequence`](crate::Sequence) instead.
    pub fn dynamic_update_slice_at<T: bytemuck::Pod>(
        &mut self,
        operand: DeviceArray<T>,
        update: &DeviceArray<T>,
        start: &IndexSlot,
    ) -> DonatedResult<T> {
        const OPERATION: &str = "Capture::dynamic_update_slice_at";
        let recorded = (|| {
            operand.check_same_context(&self.ctx.inner, OPERATION)?;
            update.check_same_context(&self.ctx.inner, OPERATION)?;
            let initial = self.slot_start(start, operand.shape().len(), OPERATION)?;
            let strict = operand.storage.ctx.config().strict_starts;
            let at = clamp_start(operand.shape(), update.shape(), &initial, strict, OPERATION)?;
            let copy = update_box::<T>(&operand, update, &at);
            self.record_moving(
                (update, Access::Read, "the update"),
                (&operand, Access::Write, "the operand"),
                &copy,
                start,
                (operand.shape(), update.shape()),
                false,
                OPERATION,
            )
        })();
        give_back(operand, recorded)
    }

    /// [`Sequence::dynamic_slice`](crate::Sequence::dynamic_slice) whose start each run sets with [`crate::StepRun::start`]
    /// (from `start`'s initial value now): a new array of shape `sizes` that every run fills
    /// with `operand` at the clamped start.
    ///
    /// Errors: as [`Sequence::dynamic_slice`](crate::Sequence::dynamic_slice); [`Error::Capture`]
    /// for a slot of another capture or of another rank than the operand, or when one dispatch
    /// over the whole arrays cannot copy the box on this device (as
    /// [`Capture::dynamic_update_slice_at`]).
    #[track_caller]
    pub fn dynamic_slice_at<T: bytemuck::Pod>(
        &mut self,
        operand: &DeviceArray<T>,
        start: &IndexSlot,
        sizes: &[usize],
    ) -> Result<DeviceArray<T>> {
        const OPERATION: &str = "Capture::dynamic_slice_at";
        operand.check_same_context(&self.ctx.inner, OPERATION)?;
        let initial = self.slot_start(start, operand.shape().len(), OPERATION)?;
        let strict = operand.storage.ctx.config().strict_starts;
        let at = clamp_start(operand.shape(), sizes, &initial, strict, OPERATION)?;
        let result = self.new_array::<T>(sizes, None, OPERATION)?;
        let copy = slice_box::<T>(operand, &at, sizes);
        self.record_moving(
            (operand, Access::Read, "the operand"),
            (&result, Access::Write, "the result"),
            &copy,
            start,
            (operand.shape(), sizes),
            true,
            OPERATION,
        )?;
        Ok(result)
    }

    /// The slot's initial start, after checking that it is this capture's and has `rank`
    /// indices.
    fn slot_start(
        &mut self,
        slot: &IndexSlot,
        rank: usize,
        operation: &'static str,
    ) -> Result<Vec<i64>> {
        let Some(tables) = self.sequence.capture.as_ref() else {
            return Err(crate::compute::recorder_replaced(operation));
        };
        let initial = tables
            .index_slots
            .get(slot.index as usize)
            .filter(|_| slot.capture == tables.id);
        match initial {
            Some(initial) if initial.len() == rank => Ok(initial.clone()),
            Some(initial) => Err(Error::Capture {
                operation,
                refusal: CaptureRefusal::SlotRank {
                    slot_rank: initial.len(),
                    array_rank: rank,
                },
            }),
            None if slot.capture == CaptureId::NONE => {
                Err(crate::compute::recorder_replaced(operation))
            }
            None => Err(Error::Capture {
                operation,
                refusal: CaptureRefusal::ForeignSlot {
                    slot: SlotKind::Index,
                    slot_capture: slot.capture.number(),
                    capture: Some(tables.id.number()),
                },
            }),
        }
    }

    /// Records the one dispatch of a copy from `src` to `dst` whose moving side (the source for
    /// a slice, the destination for an update) starts where each run says.
    #[allow(clippy::too_many_arguments)]
    fn record_moving<T: bytemuck::Pod>(
        &mut self,
        src: (&DeviceArray<T>, Access, &'static str),
        dst: (&DeviceArray<T>, Access, &'static str),
        copy: &BoxCopy,
        slot: &IndexSlot,
        (moving_shape, sizes): (&[usize], &[usize]),
        source_moves: bool,
        operation: &'static str,
    ) -> Result<()> {
        let element = std::mem::size_of::<T>() as u64;
        let shape: Vec<u64> = moving_shape.iter().map(|&d| d as u64).collect();
        let strides: Vec<u64> = row_major_strides(&shape)
            .into_iter()
            .map(|s| s * element)
            .collect();
        let inner = std::sync::Arc::clone(&self.ctx.inner);
        let mut kernels = inner.kernels().lock();
        let limits = inner.plan_limits();
        let planned = plan_movable_copy(
            copy,
            &strides,
            src.0.size_in_bytes(),
            dst.0.size_in_bytes(),
            &limits,
        )
        .map_err(|refused| planning_error(operation, refused))?;
        let arrays = [
            (&src.0.storage, src.1, src.2),
            (&dst.0.storage, dst.1, dst.2),
        ];
        let Some(planned) = planned else {
            // An empty box moves nothing: no dispatch, only its starts to check; its arrays
            // are the step's as any op's are.
            self.tables(operation)?;
            let uses = arrays.map(|(storage, access, _)| (storage, access));
            (self.sequence).touch_all(&uses, operation, |i| arrays[i].2.to_string())?;
            self.tables(operation)?.empty_moving.push(EmptyMoving {
                slot: slot.index,
                shape,
                sizes: sizes.iter().map(|&d| d as u64).collect(),
            });
            return Ok(());
        };
        let kernel = copy_kernel(planned.unit, planned.params.outer_rank == 0);
        let kernel_shape =
            (self.sequence).kernel_shape(&mut kernels, kernel, planned.params.items.into());
        let per_group = kernel_shape.per_group();
        let max = inner.max_workgroups_per_dimension();
        let per_dispatch = max.saturating_pow(3).min(MAX_ITEMS) * per_group;
        if u64::from(planned.params.items) > per_dispatch {
            return Err(Error::Capture {
                operation,
                refusal: CaptureRefusal::BoxTooLarge {
                    items: u64::from(planned.params.items),
                    per_dispatch,
                },
            });
        }
        let dispatch = Dispatch {
            kernel,
            shape: kernel_shape,
            bindings: vec![
                Binding::of(src.0, planned.src),
                Binding::of(dst.0, planned.dst),
            ],
            params: Params::Copy(planned.params),
        };
        // The tables are there (or the op is refused) before anything is recorded.
        self.tables(operation)?;
        let step = self.sequence.steps.len();
        self.sequence.record_builtin(
            &mut kernels,
            std::slice::from_ref(&dispatch),
            &arrays,
            operation,
        )?;
        let tables = self.tables(operation)?;
        let moving_box = MovingBox {
            copy: copy.clone(),
            source_moves,
        };
        tables.moving.push(MovingCopy {
            step,
            slot: slot.index,
            shape,
            sizes: sizes.iter().map(|&d| d as u64).collect(),
            strides,
            source_moves,
            unit_bytes: planned.unit.bytes(),
            params: bytemuck::bytes_of(&planned.params).to_vec(),
            rebase: rebase_copy,
            initial_offset: moving_box.moving_offset(),
            host: std::sync::Arc::new(moving_box),
        });
        Ok(())
    }
}

/// A moving copy's box on the host ([`HostBox`]): the box as captured, its moving side's offset
/// replaced by each run's.
#[derive(Debug)]
struct MovingBox {
    copy: BoxCopy,
    source_moves: bool,
}

impl MovingBox {
    /// The box with its moving side at `offset`.
    fn at(&self, offset: u64) -> BoxCopy {
        let mut copy = self.copy.clone();
        match self.source_moves {
            true => copy.src_offset = offset,
            false => copy.dst_offset = offset,
        }
        copy
    }

    /// The moving side's offset as captured.
    fn moving_offset(&self) -> u64 {
        match self.source_moves {
            true => self.copy.src_offset,
            false => self.copy.dst_offset,
        }
    }
}

impl HostBox for MovingBox {
    fn spans(&self, offset: u64) -> [(u64, u64); 2] {
        self.at(offset).spans()
    }

    fn copy(&self, offset: u64, src: &MappedRange, dst: &MappedRange) {
        HostArrays::of(vec![src.clone(), dst.clone()]).copy(0, 1, &self.at(offset));
    }
}

/// Sets the source and destination bases (in units) of a copy kernel's parameter bytes.
/// Errors when a base passes the kernel's `u32` (the planner bound both arrays in one binding
/// that a `u32` addresses, so a clamped start cannot: refused rather than truncated).
fn rebase_copy(params: &mut [u8], src_base: u64, dst_base: u64) -> Result<(), BaseOverflow> {
    let mut planned: CopyParams = bytemuck::pod_read_unaligned(params);
    let base = |value: u64| u32::try_from(value).map_err(|_| BaseOverflow { base: value });
    planned.src_base = base(src_base)?;
    planned.dst_base = base(dst_base)?;
    params.copy_from_slice(bytemuck::bytes_of(&planned));
    Ok(())
}
