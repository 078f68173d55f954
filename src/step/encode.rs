//! Steps into one command buffer: the one encoder of every recorded dispatch, copy and clear,
//! for a user's [`Sequence`](crate::Sequence) and for the single ops a context gathers alike
//! (so a guarantee proven for one holds for the other).

use super::step::{BoundRange, Step};
use super::timestamps::DispatchTimer;
use crate::pipelines::{
    Compiled, DeviceRefusal, ErrorScopes, ParamsBlock, ParamsBuffer, ParamsKind,
};

/// A command buffer of encoded steps, and the parameter bytes to write into their parameter
/// buffer before it is submitted (`None` when no step needs a slot of it).
pub(crate) type EncodedSteps = (wgpu::CommandBuffer, Option<(wgpu::Buffer, Vec<u8>)>);

/// The bind group of one dispatch: its bound ranges, and its uniform parameter block at
/// `(buffer, offset)` when the kernel has one.
pub(crate) fn bind_group(
    device: &wgpu::Device,
    kernel: &Compiled,
    ranges: &[BoundRange],
    uniform: Option<(&wgpu::Buffer, u64, u64)>,
) -> wgpu::BindGroup {
    let mut entries: Vec<wgpu::BindGroupEntry<'_>> = ranges
        .iter()
        .map(|r| wgpu::BindGroupEntry {
            binding: r.binding,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: &r.buffer,
                offset: r.offset,
                size: wgpu::BufferSize::new(r.size),
            }),
        })
        .collect();
    if let (
        Some(ParamsBlock {
            kind: ParamsKind::Uniform { binding },
            ..
        }),
        Some((buffer, offset, size)),
    ) = (&kernel.signature.params, uniform)
    {
        entries.push(wgpu::BindGroupEntry {
            binding: *binding,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer,
                offset,
                size: wgpu::BufferSize::new(size),
            }),
        });
    }
    device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some(&kernel.name),
        layout: &kernel.layout,
        entries: &entries,
    })
}

impl Step {
    /// Makes a dispatch's bind group now, for a step whose uniform parameters already sit in
    /// their slot: `slot` gives that slot's buffer and offset, and is asked only when the
    /// kernel reads a `var<uniform>` block. Returns whether a bind group was made: none for a
    /// step that is not a dispatch.
    pub(crate) fn make_bind_group<'b>(
        &mut self,
        device: &wgpu::Device,
        slot: impl FnOnce() -> Option<(&'b wgpu::Buffer, u64)>,
    ) -> bool {
        let uniform_len = self.uniform_params().map(|p| p.len() as u64);
        let Step::Dispatch {
            kernel,
            ranges,
            bind_group: group,
            ..
        } = self
        else {
            return false;
        };
        let uniform = uniform_len.and_then(|len| slot().map(|(buffer, at)| (buffer, at, len)));
        *group = Some(bind_group(device, kernel, ranges, uniform));
        true
    }
}

/// The uniform parameter bytes of a dispatch that still needs a slot (its bind group is made
/// here, not when it was recorded).
fn unplaced_uniform_params(step: &Step) -> Option<&[u8]> {
    match step {
        Step::Dispatch {
            bind_group: None, ..
        } => step.uniform_params(),
        _ => None,
    }
}

/// Encodes `steps` into one command buffer inside error scopes, with the uniform parameters of
/// dispatches recorded without a bind group in aligned slots of `params` (grown when too small;
/// `uniform_alignment` is the device's `min_uniform_buffer_offset_alignment`). Returns the
/// command buffer and the parameter bytes to write before submitting it; the device's refusal
/// as wgpu's text (nothing of the steps may then be submitted). With a `timer`, each dispatch
/// (up to its capacity) is stamped at its GPU begin and end, and the command buffer ends by
/// resolving the stamps ([`DispatchTimer`]).
pub(crate) fn encode_steps(
    device: &wgpu::Device,
    uniform_alignment: u64,
    params: &mut ParamsBuffer,
    steps: &[Step],
    timer: Option<&mut DispatchTimer>,
) -> Result<EncodedSteps, DeviceRefusal> {
    let align = uniform_alignment.max(4);
    // Slots: each uniform parameter block at an aligned offset of one buffer.
    let mut offsets = Vec::with_capacity(steps.len());
    let mut bytes = 0u64;
    for step in steps {
        offsets.push(unplaced_uniform_params(step).map(|p| {
            let at = bytes;
            bytes += (p.len() as u64).next_multiple_of(align);
            at
        }));
    }
    let mut params_write = None;
    let params_buffer = if bytes > 0 {
        if params.as_ref().is_none_or(|(_, size)| *size < bytes) {
            let size = bytes.next_power_of_two().max(16 * align);
            let buffer = device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("gpu-arena kernel parameters"),
                size,
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            *params = Some((buffer, size));
        }
        let buffer = params.as_ref().map(|(b, _)| b.clone());
        let mut data = vec![0u8; bytes as usize];
        for (step, slot) in steps.iter().zip(&offsets) {
            if let (Some(p), Some(at)) = (unplaced_uniform_params(step), slot) {
                data[*at as usize..*at as usize + p.len()].copy_from_slice(p);
            }
        }
        params_write = buffer.clone().map(|b| (b, data));
        buffer
    } else {
        None
    };

    // The steps' commands: dispatches without a bind group get one here, over their slot of
    // the parameters buffer; `finish` too runs inside the error scope.
    let scopes = ErrorScopes::push(device);
    let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
        label: Some("gpu-arena steps"),
    });
    let recorded = record_into(
        &mut encoder,
        device,
        steps,
        &offsets,
        &[],
        params_buffer.as_ref(),
        timer,
    );
    let commands = recorded.map(|()| encoder.finish());
    let popped = scopes.pop();
    let commands = commands?;
    popped?;
    Ok((commands, params_write))
}

/// Encodes `prelude` then `steps`, whose every dispatch has its bind group (a captured step's
/// copies of the run's parameters, then its commands), into one command buffer, without error
/// scopes of its own: the caller's scope, around this and the submission, catches a refusal.
/// The steps at `omitted` (sorted positions: copies a run took in place, moving copies it made
/// on the host) are left out. `timer` times the dispatches of `steps` as for [`encode_steps`].
pub(crate) fn encode_bound_steps(
    device: &wgpu::Device,
    prelude: &[Step],
    steps: &[Step],
    omitted: &[usize],
    timer: Option<&mut DispatchTimer>,
) -> Result<wgpu::CommandBuffer, DeviceRefusal> {
    let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
        label: Some("gpu-arena captured run"),
    });
    let none = vec![None; prelude.len().max(steps.len())];
    record_into(&mut encoder, device, prelude, &none, &[], None, None)?;
    record_into(&mut encoder, device, steps, &none, omitted, None, timer)?;
    Ok(encoder.finish())
}

/// Records `steps` into `encoder`, but the steps at the positions in `omitted` (sorted: see
/// [`encode_bound_steps`]), the timer's stamps resolved at the end.
fn record_into(
    encoder: &mut wgpu::CommandEncoder,
    device: &wgpu::Device,
    steps: &[Step],
    offsets: &[Option<u64>],
    omitted: &[usize],
    params_buffer: Option<&wgpu::Buffer>,
    mut timer: Option<&mut DispatchTimer>,
) -> Result<(), DeviceRefusal> {
    let left_out = |i: usize| omitted.binary_search(&i).is_ok();
    let mut i = 0;
    while i < steps.len() {
        if left_out(i) {
            i += 1;
            continue;
        }
        match &steps[i] {
            Step::Dispatch { kernel, .. } => {
                // Consecutive dispatches share one compute pass (wgpu orders them), except
                // dispatches timed by their pass's own timestamps: a pass each.
                let inside = timer.as_ref().is_some_and(|t| t.inside_passes);
                let pass_per_dispatch = timer.is_some() && !inside;
                let writes = match timer.as_deref_mut() {
                    Some(t) if pass_per_dispatch => t.pass_writes(kernel),
                    _ => None,
                };
                let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some("gpu-arena kernels"),
                    timestamp_writes: writes,
                });
                // Inside-pass timing: the stamp the next dispatch begins at.
                let mut begin = match timer.as_deref_mut() {
                    Some(t) if inside => t.stamp(&mut pass),
                    _ => None,
                };
                while let Some(Step::Dispatch {
                    kernel,
                    ranges,
                    params: step_params,
                    grid,
                    bind_group: recorded,
                }) = steps.get(i)
                {
                    if left_out(i) {
                        i += 1;
                        continue;
                    }
                    let made;
                    let group = match recorded {
                        Some(group) => group,
                        None => {
                            let uniform = match (params_buffer, offsets[i], step_params) {
                                (Some(buffer), Some(at), Some(p)) => {
                                    Some((buffer, at, p.len() as u64))
                                }
                                _ => None,
                            };
                            made = bind_group(device, kernel, ranges, uniform);
                            &made
                        }
                    };
                    pass.set_pipeline(&kernel.pipeline);
                    pass.set_bind_group(0, group, &[]);
                    if let (
                        Some(ParamsBlock {
                            kind: ParamsKind::Immediate,
                            ..
                        }),
                        Some(p),
                    ) = (&kernel.signature.params, step_params)
                    {
                        let mut padded = p.clone();
                        padded.resize(p.len().next_multiple_of(4), 0);
                        pass.set_immediates(0, &padded);
                    }
                    let [x, y, z] = *grid;
                    pass.dispatch_workgroups(x, y, z);
                    i += 1;
                    if pass_per_dispatch {
                        break;
                    }
                    if let (Some(t), Some(at)) = (timer.as_deref_mut(), begin) {
                        begin = t.stamp(&mut pass);
                        if let Some(end) = begin {
                            t.timed(kernel, at, end);
                        }
                    }
                }
            }
            Step::Copy(copy) => {
                copy.encode(encoder);
                i += 1;
            }
            Step::Clear {
                buffer,
                offset,
                size,
            } => {
                encoder.clear_buffer(buffer, *offset, Some(*size));
                i += 1;
            }
            Step::Upload { .. } => {
                // Only the gathered batch takes these, and it stages each one first.
                return Err(DeviceRefusal::encoding(
                    "an upload step reached the encoder without being staged",
                ));
            }
        }
    }
    if let Some(timer) = timer {
        timer.resolve(encoder);
    }
    Ok(())
}
