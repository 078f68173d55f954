//! Launching kernels over arena arrays: parameters into a reused uniform buffer, one bind group
//! per dispatch, one compute pass, one submission that records every array it touches.

use super::geometry::{
    grid, plan_copy, BindRange, BoxCopy, CopyParams, CopyUnit, FillParams, PlanLimits, MAX_ITEMS,
    PER_INVOCATION, WORKGROUP,
};
use super::pipelines::{Kernel, KernelState};
use crate::array::{DeviceArray, GpuUse};
use crate::context::ContextInner;
use crate::error::{Error, Result};
use crate::submission::SubmissionId;

/// Bytes per parameter slot in the uniform buffer: WebGPU's largest
/// `min_uniform_buffer_offset_alignment` (256), and more than any kernel's parameters need.
const PARAM_SLOT_BYTES: u64 = 256;

/// Most dispatches per submission; more are submitted in batches. Bounds the uniform buffer at
/// 1 MiB however many pieces a huge or awkward copy needs.
const MAX_DISPATCHES_PER_SUBMIT: usize = 4096;

/// An array's buffer and a byte range of it, relative to the array's first byte.
pub(crate) struct Binding<'a> {
    pub(crate) buffer: &'a wgpu::Buffer,
    /// The array's offset in the buffer.
    pub(crate) array_offset: u64,
    pub(crate) range: BindRange,
}

impl<'a> Binding<'a> {
    pub(crate) fn of<T: bytemuck::Pod>(array: &'a DeviceArray<T>, range: BindRange) -> Self {
        Binding {
            buffer: array.buffer(),
            array_offset: array.byte_offset(),
            range,
        }
    }
}

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

    /// The parameters' bytes for a dispatch that starts at item `first_item`.
    fn bytes_from(&self, first_item: u64) -> Vec<u8> {
        match *self {
            Params::Copy(mut p) => {
                p.first_item = first_item as u32;
                bytemuck::bytes_of(&p).to_vec()
            }
            Params::Fill(mut p) => {
                p.first_item = first_item as u32;
                bytemuck::bytes_of(&p).to_vec()
            }
        }
    }
}

/// One dispatch: a kernel, its storage bindings (binding 1, 2, ...), its parameters (binding 0),
/// and how many items one workgroup takes.
pub(crate) struct Dispatch<'a> {
    pub(crate) kernel: Kernel,
    pub(crate) bindings: Vec<Binding<'a>>,
    pub(crate) params: Params,
    pub(crate) per_group: u64,
}

/// A dispatch as recorded: one grid and the parameters of its items.
struct Recorded<'d, 'a> {
    dispatch: &'d Dispatch<'a>,
    params: Vec<u8>,
    grid: [u32; 3],
}

impl ContextInner {
    /// The most workgroups per grid dimension kernels may launch (the device's limit, or the
    /// test override).
    pub(crate) fn max_workgroups_per_dimension(&self, kernels: &KernelState) -> u64 {
        kernels.limits_override.map_or(
            u64::from(self.limits.max_compute_workgroups_per_dimension),
            |(_, groups)| u64::from(groups),
        )
    }

    /// Runs `dispatches` in order (each sees the previous one's writes: wgpu puts a barrier
    /// between dispatches that use a buffer read_write) and records the submission on every
    /// array in `uses`. Returns the last submission (none when there is nothing to do).
    pub(crate) fn launch(
        &self,
        kernels: &mut KernelState,
        dispatches: &[Dispatch<'_>],
        uses: &[&dyn GpuUse],
    ) -> Result<Option<SubmissionId>> {
        // Grids past max³ workgroups (never at 65535 per dimension, but at the test limits)
        // become several dispatches, each from its own first item.
        let max = self.max_workgroups_per_dimension(kernels);
        let mut recorded = Vec::with_capacity(dispatches.len());
        for d in dispatches {
            let items = d.params.items();
            let per_dispatch = max.pow(3).min(MAX_ITEMS) * d.per_group;
            let mut first = 0;
            loop {
                let groups = (items - first).min(per_dispatch).div_ceil(d.per_group);
                let grid = grid(groups, max).expect("at most max³ workgroups");
                recorded.push(Recorded {
                    dispatch: d,
                    params: d.params.bytes_from(first),
                    grid,
                });
                first += per_dispatch;
                if first >= items {
                    break;
                }
            }
        }
        let mut last = None;
        for batch in recorded.chunks(MAX_DISPATCHES_PER_SUBMIT) {
            last = Some(self.launch_batch(kernels, batch, uses)?);
        }
        Ok(last)
    }

    fn launch_batch(
        &self,
        kernels: &mut KernelState,
        dispatches: &[Recorded<'_, '_>],
        uses: &[&dyn GpuUse],
    ) -> Result<SubmissionId> {
        let slot = PARAM_SLOT_BYTES.max(u64::from(self.limits.min_uniform_buffer_offset_alignment));
        let needed = dispatches.len() as u64;
        let grow = kernels
            .params
            .as_ref()
            .is_none_or(|(_, slots)| *slots < needed);
        if grow {
            let slots = needed.next_power_of_two().max(16);
            let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("gpu-arena kernel parameters"),
                size: slots * slot,
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            kernels.params = Some((buffer, slots));
        }
        let params = kernels
            .params
            .as_ref()
            .map(|(b, _)| b.clone())
            .expect("made above");
        let mut bytes = vec![0u8; (needed * slot) as usize];
        for (i, d) in dispatches.iter().enumerate() {
            let at = i * slot as usize;
            bytes[at..at + d.params.len()].copy_from_slice(&d.params);
        }
        // The write lands before this submission's commands and after every earlier
        // submission's (queue order), so reusing the slots of earlier launches is safe. The
        // kernel lock, held by our caller until after the submit, keeps other threads' launches
        // from writing the slots in between.
        self.queue.write_buffer(&params, 0, &bytes);

        let pipelines = dispatches
            .iter()
            .map(|d| kernels.pipeline(&self.device, &self.adapter_info, d.dispatch.kernel))
            .collect::<Result<Vec<_>>>()?;
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let mut encoder = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("gpu-arena kernels"),
            });
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("gpu-arena kernels"),
                timestamp_writes: None,
            });
            for (i, (d, compiled)) in dispatches.iter().zip(&pipelines).enumerate() {
                let mut entries = vec![wgpu::BindGroupEntry {
                    binding: 0,
                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: &params,
                        offset: i as u64 * slot,
                        size: wgpu::BufferSize::new(d.params.len() as u64),
                    }),
                }];
                for (b, binding) in d.dispatch.bindings.iter().enumerate() {
                    entries.push(wgpu::BindGroupEntry {
                        binding: b as u32 + 1,
                        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                            buffer: binding.buffer,
                            offset: binding.array_offset + binding.range.offset,
                            size: wgpu::BufferSize::new(binding.range.size),
                        }),
                    });
                }
                let group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: Some(d.dispatch.kernel.name()),
                    layout: &compiled.layout,
                    entries: &entries,
                });
                let [x, y, z] = d.grid;
                pass.set_pipeline(&compiled.pipeline);
                pass.set_bind_group(0, &group, &[]);
                pass.dispatch_workgroups(x, y, z);
            }
        }
        let commands = encoder.finish();
        if let Some(error) = pollster::block_on(scope.pop()) {
            return Err(Error::Device {
                during: "encoding gpu-arena kernels".into(),
                reason: error.to_string(),
            });
        }
        let id = self.submit([commands]);
        for d in dispatches {
            let name = d.dispatch.kernel.name();
            self.record(crate::profile::Record::Dispatch {
                name,
                submission: id,
            });
        }
        for array in uses {
            array.record_use(id);
        }
        Ok(id)
    }
}

/// The dispatches of one box copy from `src` to `dst`, appended to `out`.
pub(crate) fn copy_dispatches<'a, T: bytemuck::Pod>(
    src: &'a DeviceArray<T>,
    dst: &'a DeviceArray<T>,
    copy: &BoxCopy,
    limits: &PlanLimits,
    out: &mut Vec<Dispatch<'a>>,
) {
    for d in plan_copy(copy, limits) {
        let contiguous = d.params.outer_rank == 0;
        let (kernel, per_invocation) = match d.unit {
            CopyUnit::Vec4 => (Kernel::CopyRowsVec4 { contiguous }, PER_INVOCATION),
            CopyUnit::Word => (Kernel::CopyRowsWord { contiguous }, PER_INVOCATION),
            CopyUnit::Byte => (Kernel::CopyBytes, 1),
        };
        out.push(Dispatch {
            kernel,
            bindings: vec![Binding::of(src, d.src), Binding::of(dst, d.dst)],
            params: Params::Copy(d.params),
            per_group: WORKGROUP * per_invocation,
        });
    }
}

impl ContextInner {
    /// What one binding and one dispatch may take on this device (or under the test override).
    pub(crate) fn plan_limits(&self, kernels: &KernelState) -> PlanLimits {
        let max_binding_bytes = kernels
            .limits_override
            .map_or(self.limits.max_storage_buffer_binding_size, |(b, _)| b);
        PlanLimits {
            max_binding_bytes,
            // At least 16 so that vec4 indexing of a binding is exact. WebGPU caps this limit at
            // 256, the arena's alignment, so a rounded-down offset stays inside the array.
            binding_alignment: u64::from(self.limits.min_storage_buffer_offset_alignment)
                .clamp(16, crate::arena::ALLOCATION_ALIGNMENT),
            max_items: MAX_ITEMS,
        }
    }
}
