//! `Sequence`: GPU work recorded step by step and submitted once — and the one way any work
//! reaches the queue. The library's ops and users' kernels alike become steps here; a single op
//! is a sequence of one. `submit` writes every step's parameters with one buffer write, encodes
//! the steps into one command encoder inside wgpu error scopes (a refusal is an `Err`, and
//! nothing is submitted), submits, and records the submission on every array a step touched,
//! so no array's memory is handed out again before the work completes.

use crate::array::{check_context, ArrayStorage, DeviceArray};
use crate::context::{Context, ContextInner};
use crate::error::{Error, Result};
use crate::pipelines::ErrorScopes;
use crate::pipelines::{ParamsBuffer, ParamsKind};
use crate::step::Step;
use crate::submission::SubmissionId;
use crate::transfer::staging::{StagingBuffer, StagingKind};
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Most dispatches whose parameters one submission writes; a longer sequence is submitted in
/// pieces of this many (in order). Bounds the parameter buffer at 4096 slots (1 MiB at 256-byte
/// slots) however long a sequence grows.
const MAX_DISPATCHES_PER_SUBMIT: usize = 4096;

/// GPU work recorded now and submitted together by [`Sequence::submit`]: kernel launches
/// ([`Sequence::launch`]), the library's ops (`dynamic_update_slice`, `dynamic_slice`, `fill`,
/// `copy`, ...) and uploads ([`Sequence::put`]), in the order recorded, as **one submission**
/// (what `jax.jit` makes of a traced function: one program instead of one launch per op).
///
/// Arrays made by a step exist at once and can be used by later steps. Every array a step
/// touches is kept until the sequence is submitted and its work has completed, even if it is
/// dropped before. Until `submit`, those arrays cannot be read back or used by a single op
/// (that would run before the recorded work): such calls return an error saying so. Dropping a
/// sequence without submitting discards its steps (arrays it made then hold unspecified data;
/// what ran when it was recorded, a zero-copy upload or a host copy on a CPU adapter (below),
/// stays done: arrays a dropped sequence updated hold unspecified data too).
///
/// **Submissions**: `submit` makes one (one per 4096 dispatches), none for a sequence with no
/// steps, and a sequence never costs more submissions than its ops one by one: recorded
/// uploads ride in it (zero-copy writes and wgpu's queued writes need none of their own; only
/// an upload larger than a staging buffer goes out on its own, as `device_put` would), and on
/// a CPU adapter with a mapped arena (lavapipe), where single updates and fills are host copies
/// that submit nothing, a recorded one whose arrays no earlier step touches is a host copy too.
/// Its arrays are pending until `submit` on every path alike.
///
/// ```no_run
/// # let ctx = gpu_arena::Context::new(Default::default())?;
/// let k = ctx.kernel("@group(0) @binding(0) var<storage, read_write> a: array<f32>;
///     @compute @workgroup_size(64) fn main(@builtin(global_invocation_id) i: vec3<u32>) {
///         if (i.x < arrayLength(&a)) { a[i.x] = a[i.x] * 2.0; } }", "main")?;
/// let mut s = ctx.sequence();
/// let mut x = s.put(&[1.0f32; 1000], &[1000])?;        // an upload, recorded
/// s.launch(&k).arg_mut(&mut x).grid_for(1000).run()?;   // a kernel, recorded
/// let head = s.dynamic_slice(&x, &[0], &[10])?;         // an op, recorded
/// s.submit()?;                                          // one submission for all three
/// assert_eq!(ctx.device_get(&head)?, [2.0; 10]);
/// # Ok::<(), gpu_arena::Error>(())
/// ```
pub struct Sequence {
    pub(crate) ctx: Context,
    pub(crate) steps: Vec<Step>,
    /// Every array a step touches, once each (kept alive until the work is submitted).
    touched: Vec<Arc<ArrayStorage>>,
    touched_set: HashSet<usize>,
    /// Upload staging buffers this sequence filled; released when it is submitted.
    pub(crate) staging: Vec<(StagingBuffer, u64)>,
    /// Names of the timeline's dispatch records (one per dispatch).
    dispatches: usize,
    /// Uploads were queued with `queue.write_buffer` (non-Vulkan backends): `submit` submits
    /// even without a step, so that they land.
    pub(crate) queued_writes: bool,
}

impl Context {
    /// Starts a [`Sequence`]: record many launches and ops, submit them once.
    pub fn sequence(&self) -> Sequence {
        Sequence {
            ctx: self.clone(),
            steps: Vec::new(),
            touched: Vec::new(),
            touched_set: HashSet::new(),
            staging: Vec::new(),
            dispatches: 0,
            queued_writes: false,
        }
    }
}

impl Sequence {
    /// The context the sequence records for.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Number of steps recorded so far (dispatches, copies and clears).
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    /// True when nothing has been recorded.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// Notes that the recorded work uses `storage`: kept alive until submitted, refused to host
    /// access and single ops meanwhile. Errors for an array of another context.
    pub(crate) fn touch(
        &mut self,
        storage: &Arc<ArrayStorage>,
        operation: &'static str,
    ) -> Result<()> {
        check_context(storage, &self.ctx.inner, operation)?;
        if self.touched_set.insert(Arc::as_ptr(storage) as usize) {
            storage.unsubmitted.fetch_add(1, Ordering::AcqRel);
            self.touched.push(Arc::clone(storage));
        }
        Ok(())
    }

    /// [`Sequence::touch`] for a typed array.
    pub(crate) fn touch_array<T: bytemuck::Pod>(
        &mut self,
        array: &DeviceArray<T>,
        operation: &'static str,
    ) -> Result<()> {
        self.touch(&array.storage, operation)
    }

    /// Whether an op on `storage` may run now instead of in order after the recorded steps
    /// (the host path of `ops/host.rs`): no step recorded so far reads or writes it, and no
    /// other unsubmitted sequence uses it.
    pub(crate) fn may_run_now(&self, storage: &Arc<ArrayStorage>) -> bool {
        let ours = u32::from(self.touched_set.contains(&(Arc::as_ptr(storage) as usize)));
        storage.unsubmitted.load(Ordering::Acquire) as u64 == u64::from(ours)
            && !self.steps.iter().any(|step| {
                step.touches(
                    &storage.buffer,
                    storage.allocation.offset,
                    storage.allocation.size,
                )
            })
    }

    pub(crate) fn push_dispatch(&mut self, step: Step) {
        if matches!(step, Step::Dispatch { .. }) {
            self.dispatches += 1;
        }
        self.steps.push(step);
    }

    /// Submits every recorded step, in order, as one submission (a sequence of more than 4096
    /// dispatches as several, in order). Returns the (last) submission; an empty sequence
    /// submits nothing and returns `SubmissionId(0)`.
    ///
    /// Errors: [`Error::Device`] with wgpu's message when the device refuses the work (nothing
    /// of the refused piece runs); [`Error::DeviceLost`] once the device is lost or destroyed.
    pub fn submit(mut self) -> Result<SubmissionId> {
        let inner = Arc::clone(&self.ctx.inner);
        let steps = std::mem::take(&mut self.steps);
        let mut last = SubmissionId(0);
        let result = (|| {
            if steps.is_empty() && std::mem::take(&mut self.queued_writes) {
                // Only queued uploads: one (empty) submission carries them.
                last = inner.submit([]);
            }
            let mut kernels = inner.kernels.lock();
            let mut rest = &steps[..];
            while !rest.is_empty() {
                let mut dispatches = 0;
                let take = rest
                    .iter()
                    .position(|s| {
                        if matches!(s, Step::Dispatch { .. }) {
                            dispatches += 1;
                        }
                        dispatches > MAX_DISPATCHES_PER_SUBMIT
                    })
                    .unwrap_or(rest.len());
                let (piece, tail) = rest.split_at(take);
                rest = tail;
                last = inner.submit_steps(&mut kernels.params, piece)?;
            }
            Ok::<_, Error>(())
        })();
        self.finish(last);
        result.map(|()| last)
    }

    /// Records `last` on every touched array and releases the staging buffers and arrays.
    fn finish(&mut self, last: SubmissionId) {
        for storage in self.touched.drain(..) {
            if last.0 > 0 {
                storage.record_use(last);
            }
            storage.unsubmitted.fetch_sub(1, Ordering::AcqRel);
        }
        self.touched_set.clear();
        for (mut staging, _) in self.staging.drain(..) {
            staging.busy_until = staging.busy_until.max(last);
            self.ctx.inner.staging.release(StagingKind::Upload, staging);
        }
    }
}

impl Drop for Sequence {
    fn drop(&mut self) {
        if !self.steps.is_empty() {
            log::warn!(
                "gpu-arena: a Sequence of {} steps was dropped without submit(); its work was discarded",
                self.steps.len()
            );
        }
        self.finish(SubmissionId(0));
    }
}

impl std::fmt::Debug for Sequence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sequence")
            .field("steps", &self.steps.len())
            .field("dispatches", &self.dispatches)
            .field("arrays", &self.touched.len())
            .finish()
    }
}

impl ContextInner {
    /// Encodes and submits `steps` (at most [`MAX_DISPATCHES_PER_SUBMIT`] dispatches). The
    /// caller holds the kernel lock, which keeps other threads from writing the parameter
    /// slots between this write and this submit.
    fn submit_steps(&self, params: &mut ParamsBuffer, steps: &[Step]) -> Result<SubmissionId> {
        // Nothing of a lost device is touched, the parameter buffer included.
        self.check_device("submitting recorded GPU work")?;
        let align = u64::from(self.limits.min_uniform_buffer_offset_alignment).max(4);
        // Slots: each uniform parameter block at an aligned offset of one buffer.
        let mut offsets = Vec::with_capacity(steps.len());
        let mut bytes = 0u64;
        for step in steps {
            let slot = match step {
                Step::Dispatch {
                    kernel,
                    params: Some(p),
                    ..
                } if matches!(
                    kernel.signature.params.as_ref().map(|b| b.kind),
                    Some(ParamsKind::Uniform { .. })
                ) =>
                {
                    let at = bytes;
                    bytes += (p.len() as u64).next_multiple_of(align);
                    Some(at)
                }
                _ => None,
            };
            offsets.push(slot);
        }
        let params_buffer = if bytes > 0 {
            let grow = params.as_ref().is_none_or(|(_, size)| *size < bytes);
            if grow {
                let size = bytes.next_power_of_two().max(16 * align);
                let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("gpu-arena kernel parameters"),
                    size,
                    usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                });
                *params = Some((buffer, size));
            }
            let buffer = params.as_ref().map(|(b, _)| b.clone()).expect("made above");
            let mut data = vec![0u8; bytes as usize];
            for (step, slot) in steps.iter().zip(&offsets) {
                if let (
                    Step::Dispatch {
                        params: Some(p), ..
                    },
                    Some(at),
                ) = (step, slot)
                {
                    data[*at as usize..*at as usize + p.len()].copy_from_slice(p);
                }
            }
            // Lands before this submission's commands and after every earlier submission's.
            self.queue.write_buffer(&buffer, 0, &data);
            Some(buffer)
        } else {
            None
        };

        let scopes = ErrorScopes::push(&self.device);
        let mut encoder = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("gpu-arena sequence"),
            });
        let mut i = 0;
        while i < steps.len() {
            match &steps[i] {
                Step::Dispatch { .. } => {
                    // Consecutive dispatches share one compute pass (wgpu orders them).
                    let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: Some("gpu-arena kernels"),
                        timestamp_writes: None,
                    });
                    while let Some(Step::Dispatch {
                        kernel,
                        ranges,
                        params,
                        grid,
                    }) = steps.get(i)
                    {
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
                        if let (Some(block), Some(at), Some(buffer), Some(p)) =
                            (&kernel.signature.params, offsets[i], &params_buffer, params)
                        {
                            if let ParamsKind::Uniform { binding } = block.kind {
                                entries.push(wgpu::BindGroupEntry {
                                    binding,
                                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                                        buffer,
                                        offset: at,
                                        size: wgpu::BufferSize::new(p.len() as u64),
                                    }),
                                });
                            }
                        }
                        let group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
                            label: Some(&kernel.name),
                            layout: &kernel.layout,
                            entries: &entries,
                        });
                        pass.set_pipeline(&kernel.pipeline);
                        pass.set_bind_group(0, &group, &[]);
                        if let (
                            Some(crate::pipelines::ParamsBlock {
                                kind: ParamsKind::Immediate,
                                ..
                            }),
                            Some(p),
                        ) = (&kernel.signature.params, params)
                        {
                            let mut padded = p.clone();
                            padded.resize(p.len().next_multiple_of(4), 0);
                            pass.set_immediates(0, &padded);
                        }
                        let [x, y, z] = *grid;
                        pass.dispatch_workgroups(x, y, z);
                        i += 1;
                    }
                }
                Step::Copy {
                    src,
                    src_offset,
                    dst,
                    dst_offset,
                    size,
                } => {
                    encoder.copy_buffer_to_buffer(src, *src_offset, dst, *dst_offset, *size);
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
            }
        }
        let commands = encoder.finish();
        scopes.pop().map_err(|reason| Error::Device {
            during: "encoding a gpu-arena sequence".into(),
            reason,
        })?;
        // Errors of the submission itself (a buffer destroyed meanwhile) are caught too.
        let scopes = ErrorScopes::push(&self.device);
        let id = self.submit([commands]);
        scopes.pop().map_err(|reason| Error::Device {
            during: "submitting a gpu-arena sequence".into(),
            reason,
        })?;
        for step in steps {
            if let Step::Dispatch { kernel, .. } = step {
                self.record(crate::profile::Record::Dispatch {
                    name: &kernel.name,
                    submission: id,
                });
            }
        }
        Ok(id)
    }
}
