//! The library's own kernels as sequence steps: which kernel variant, which byte ranges of
//! which arrays, which parameters, and grids cut to the device's limits.

use super::geometry::{
    grid, plan_copy, BindRange, BoxCopy, CopyParams, CopyUnit, FillParams, PlanError, PlanLimits,
    MAX_ADDRESSABLE_BINDING_BYTES, MAX_ITEMS,
};
use crate::array::{Access, ArrayStorage, DeviceArray};
use crate::compute::Sequence;
use crate::context::ContextInner;
use crate::error::{CaptureRefusal, Error, Result};
use crate::kernel_tuning::KernelShape;
use crate::pipelines::{Builtin, KernelState};
use crate::step::{BoundRange, Step};

/// An array and the byte range of it a dispatch binds, relative to the array's first byte.
pub(crate) struct Binding<'a> {
    pub(crate) storage: &'a std::sync::Arc<ArrayStorage>,
    pub(crate) range: BindRange,
}

impl<'a> Binding<'a> {
    /// `range` of `array`.
    pub(crate) fn of<T: bytemuck::Pod>(array: &'a DeviceArray<T>, range: BindRange) -> Self {
        Binding {
            storage: &array.storage,
            range,
        }
    }
}

/// An array an op uses, how, and the op's name for it (in a refusal).
pub(crate) type OpArray<'a> = (&'a std::sync::Arc<ArrayStorage>, Access, &'static str);

/// A kernel's parameters (binding 0).
#[derive(Clone, Copy)]
pub(crate) enum Params {
    Copy(CopyParams),
    Fill(FillParams),
}

impl Params {
    fn items(&self) -> u64 {
        u64::from(match self {
            Params::Copy(p) => p.items,
            Params::Fill(p) => p.items,
        })
    }

    /// The parameters' bytes for a dispatch that starts at item `first_item` (below
    /// [`Params::items`], a `u32`).
    fn bytes_from(&self, first_item: u32) -> Vec<u8> {
        match *self {
            Params::Copy(mut p) => {
                p.first_item = first_item;
                bytemuck::bytes_of(&p).to_vec()
            }
            Params::Fill(mut p) => {
                p.first_item = first_item;
                bytemuck::bytes_of(&p).to_vec()
            }
        }
    }
}

/// One dispatch: a kernel in a shape, its storage bindings (binding 1, 2, ...) and its
/// parameters (binding 0).
pub(crate) struct Dispatch<'a> {
    pub(crate) kernel: Builtin,
    pub(crate) shape: KernelShape,
    pub(crate) bindings: Vec<Binding<'a>>,
    pub(crate) params: Params,
}

impl ContextInner {
    /// The most workgroups per grid dimension the library's kernels launch: the device's
    /// limit, or [`ArenaConfig::max_workgroups_per_dimension`](crate::ArenaConfig) when lower.
    pub(crate) fn max_workgroups_per_dimension(&self) -> u64 {
        let device = self.limits().max_compute_workgroups_per_dimension;
        u64::from(
            self.config()
                .max_workgroups_per_dimension
                .map_or(device, |groups| groups.min(device)),
        )
    }
}

impl Sequence {
    /// Records the library's `dispatches` in order (each sees the previous one's writes: wgpu
    /// puts a barrier between dispatches that use a buffer read_write). Grids past max³
    /// workgroups (never at 65535 per dimension, but at the test limits) become several
    /// dispatches, each from its own first item.
    pub(crate) fn record_builtin(
        &mut self,
        kernels: &mut KernelState,
        dispatches: &[Dispatch<'_>],
        arrays: &[OpArray<'_>],
        operation: &'static str,
    ) -> Result<()> {
        let inner = std::sync::Arc::clone(&self.ctx.inner);
        let max = inner.max_workgroups_per_dimension();
        // Everything that can fail comes first (compiling, then the checks of every array of
        // the op, bound by a dispatch or not: an op of no bytes has no dispatch), so a refused
        // op records and marks nothing, and an op of no bytes refuses and marks as any other.
        let compiled = dispatches
            .iter()
            .map(|d| kernels.builtin(inner.device(), inner.adapter_info(), d.kernel, d.shape))
            .collect::<Result<Vec<_>>>()?;
        let uses: Vec<_> = arrays
            .iter()
            .map(|&(storage, access, _)| (storage, access))
            .collect();
        self.touch_all(&uses, operation, |i| arrays[i].2.to_string())?;
        for (d, compiled) in dispatches.iter().zip(compiled) {
            let items = d.params.items();
            let per_group = d.shape.per_group();
            let per_dispatch = max.saturating_pow(3).min(MAX_ITEMS) * per_group;
            // Dispatches start below `items`, itself a `u32`.
            let mut first: u32 = 0;
            loop {
                let groups = (items - u64::from(first))
                    .min(per_dispatch)
                    .div_ceil(per_group);
                let grid = grid(groups, max).expect("at most max³ workgroups");
                let ranges = d
                    .bindings
                    .iter()
                    .zip(1u32..)
                    .map(|(binding, index)| BoundRange {
                        binding: index,
                        buffer: binding.storage.buffer.clone(),
                        offset: binding.storage.allocation.offset + binding.range.offset,
                        size: binding.range.size,
                    })
                    .collect();
                self.steps.push(Step::Dispatch {
                    kernel: std::sync::Arc::clone(&compiled),
                    ranges,
                    params: Some(d.params.bytes_from(first)),
                    grid,
                    bind_group: None,
                });
                match u32::try_from(u64::from(first) + per_dispatch) {
                    Ok(next) if u64::from(next) < items => first = next,
                    _ => break,
                }
            }
        }
        Ok(())
    }
}

/// The kernel that copies in `unit`, for one contiguous row or for rows.
pub(crate) fn copy_kernel(unit: CopyUnit, contiguous: bool) -> Builtin {
    match unit {
        CopyUnit::Vec4 => Builtin::CopyRowsVec4 { contiguous },
        CopyUnit::Word => Builtin::CopyRowsWord { contiguous },
        CopyUnit::Byte => Builtin::CopyBytes,
    }
}

/// A plan refused, as the error of the op that asked for it: a moving copy past the device's
/// limits is the capture's refusal; a value that does not fit is a planning bug.
pub(crate) fn planning_error(operation: &'static str, refused: PlanError) -> Error {
    match refused {
        PlanError::MovingBindingTooLarge { bytes, limit } => Error::Capture {
            operation,
            refusal: CaptureRefusal::BindingTooLarge { bytes, limit },
        },
        PlanError::MovingBoxTooManyItems { items, limit } => Error::Capture {
            operation,
            refusal: CaptureRefusal::BoxTooLarge {
                items,
                per_dispatch: limit,
            },
        },
        PlanError::ParameterOverflow { .. } => Error::Internal {
            operation,
            reason: refused.to_string(),
        },
    }
}

impl Sequence {
    /// Records box copies between arrays (`(src, dst, box)` each, in order) as copy kernels;
    /// `names` are the op's names for the source and the destination.
    ///
    /// Errors: [`Error::Internal`] if a planned parameter did not fit the kernels' `u32`s (a
    /// planning bug: refused rather than truncated into a copy of the wrong bytes).
    pub(crate) fn record_copies<T: bytemuck::Pod>(
        &mut self,
        copies: &[(&DeviceArray<T>, &DeviceArray<T>, BoxCopy)],
        names: (&'static str, &'static str),
        operation: &'static str,
    ) -> Result<()> {
        let inner = std::sync::Arc::clone(&self.ctx.inner);
        let mut kernels = inner.kernels().lock();
        let limits = inner.plan_limits();
        let mut dispatches = Vec::new();
        for (src, dst, copy) in copies {
            let planned =
                plan_copy(copy, &limits).map_err(|reason| planning_error(operation, reason))?;
            for d in planned {
                let kernel = copy_kernel(d.unit, d.params.outer_rank == 0);
                dispatches.push(Dispatch {
                    kernel,
                    shape: self.kernel_shape(&mut kernels, kernel, u64::from(d.params.items)),
                    bindings: vec![Binding::of(src, d.src), Binding::of(dst, d.dst)],
                    params: Params::Copy(d.params),
                });
            }
        }
        let arrays: Vec<OpArray<'_>> = (copies.iter())
            .flat_map(|(src, dst, _)| {
                [
                    (&src.storage, Access::Read, names.0),
                    (&dst.storage, Access::Write, names.1),
                ]
            })
            .collect();
        self.record_builtin(&mut kernels, &dispatches, &arrays, operation)
    }
}

impl ContextInner {
    /// What one binding and one dispatch may take on this device (and under
    /// [`ArenaConfig::max_binding_bytes`](crate::ArenaConfig) when it is lower).
    pub(crate) fn plan_limits(&self) -> PlanLimits {
        // Clamped to what the kernels' u32 offsets and strides address: some backends allow
        // bindings past 4 GiB (wgpu's Metal backend reports `max_buffer_size`).
        let max_binding_bytes = self
            .config()
            .max_binding_bytes
            .unwrap_or(u64::MAX)
            .min(self.limits().max_storage_buffer_binding_size)
            .min(MAX_ADDRESSABLE_BINDING_BYTES);
        PlanLimits {
            max_binding_bytes,
            // At least 16 so that vec4 indexing of a binding is exact. WebGPU caps this limit at
            // 256, the arena's alignment, so a rounded-down offset stays inside the array.
            binding_alignment: u64::from(self.limits().min_storage_buffer_offset_alignment)
                .clamp(16, crate::arena::ALLOCATION_ALIGNMENT),
            max_items: MAX_ITEMS,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_plan_is_the_capture_s_refusal_or_an_internal_error() {
        let binding = planning_error(
            "t",
            PlanError::MovingBindingTooLarge {
                bytes: 8192,
                limit: 4096,
            },
        );
        assert!(matches!(
            binding,
            Error::Capture {
                operation: "t",
                refusal: CaptureRefusal::BindingTooLarge {
                    bytes: 8192,
                    limit: 4096
                }
            }
        ));
        let items = planning_error("t", PlanError::MovingBoxTooManyItems { items: 9, limit: 8 });
        assert!(matches!(
            items,
            Error::Capture {
                refusal: CaptureRefusal::BoxTooLarge {
                    items: 9,
                    per_dispatch: 8
                },
                ..
            }
        ));
        let overflow = planning_error(
            "t",
            PlanError::ParameterOverflow {
                what: "source stride",
                value: 5_000_000_000,
            },
        );
        assert!(matches!(overflow, Error::Internal { operation: "t", .. }));
        let text = overflow.to_string();
        assert!(
            text.contains("source stride (5000000000)") && text.contains("gpu-arena bug"),
            "{text}"
        );
    }
}
