//! The driver: a schedule's steps run with the caller's [`ChainModel`].

use serde::Serialize;

use super::model::{BackwardArrays, ChainModel};
use crate::array::DeviceArray;
use crate::context::Context;
use crate::count::count;
use crate::error::Error;
use crate::memory_kind::MemoryKind;
use crate::profile::label_scope;
use crate::remat::{Buffer, Schedule, ScheduleStep};
use crate::submission::SubmissionId;

/// The operation named in the driver's errors.
const OPERATION: &str = "Schedule::run";

/// What [`Schedule::run`] measured. Its peak splits into the schedule's part and the caller's:
/// `peak_bytes_in_use = resident_bytes + schedule_peak_bytes + temporary_bytes()` (while the
/// caller's arrays live before the run stay live through it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct RunReport {
    /// The context's `peak_bytes_in_use` over the run (the run starts a new peak window, so
    /// [`Context::memory_stats`] reports the same right after it): everything in use at the
    /// worst moment, the caller's arrays included.
    pub peak_bytes_in_use: u64,
    /// Device bytes in use when the run began, apart from the input: the caller's parameters
    /// and other arrays (of this context, from any thread).
    pub resident_bytes: u64,
    /// The most device bytes the input and the run's own activations and gradients held at
    /// once, counted from the arrays the driver allocated (rounded as the arena rounds them):
    /// the schedule's [`peak_bytes`](Schedule::peak_bytes), less the input's bytes when the
    /// input lies in pinned host memory.
    pub schedule_peak_bytes: u64,
    /// The most bytes the run's offloaded activations held in pinned host memory at once
    /// (rounded as the arena rounds them): the schedule's
    /// [`host_peak_bytes`](Schedule::host_peak_bytes); 0 for a plan that offloads nothing.
    pub host_peak_bytes: u64,
}

impl RunReport {
    /// How much the callbacks' own allocations (temporaries, parameter gradients made during
    /// the run) raised the peak above the resident arrays and the schedule's buffers: 0 when
    /// they allocate nothing that is live at the peak.
    pub fn temporary_bytes(&self) -> u64 {
        self.peak_bytes_in_use
            .saturating_sub(self.resident_bytes)
            .saturating_sub(self.schedule_peak_bytes)
    }
}

impl Schedule {
    /// Runs the schedule on `ctx` with `model`'s kernels: every forward, recompute, loss
    /// gradient and backward step in order, starting from `input` (activation 0, the
    /// caller's, which must have the chain's input bytes). Each activation and gradient is
    /// allocated with [`Context::alloc`] right before the step that writes it and dropped
    /// right after the step that last reads it, so the context holds exactly the buffers the
    /// schedule names; [`RunReport`] gives the peak and how it splits.
    ///
    /// The run resets the context's peak statistics at its start (as
    /// [`Context::reset_peak_stats`]), so measure other work before it. Memory of a dropped
    /// buffer is reused once the work that read it completes, as for any array; so that each
    /// buffer goes where the plan's [replay](Schedule::replay) put it (and a plan made for a
    /// [budget](crate::remat::CheckpointPolicy::Budget) runs in an arena of that budget), the
    /// run waits for that work before it allocates or prefetches while the arena holds such
    /// memory (`pending_free_bytes` above 0): where the plan frees a buffer, the host waits
    /// for the GPU before the next step's buffer is allocated.
    ///
    /// # Errors
    /// Before anything runs: [`Error::ForeignArray`] for an input of another context;
    /// [`Error::Shape`] when the input's bytes, or a shape from
    /// [`ChainModel::activation_shape`], do not match the chain; [`Error::InvalidArgument`]
    /// when an activation is not a whole number of elements. During the run: out of memory
    /// from an allocation, [`Error::InvalidArgument`] when a method returns an array other
    /// than the one it was given (or `backward` returns an input gradient it was not given, or
    /// none where it was), and any error of the model's methods, unchanged. On error
    /// the run stops and every buffer it allocated is freed; the model keeps what it made.
    pub fn run<M: ChainModel>(
        &self,
        ctx: &Context,
        model: &mut M,
        input: &DeviceArray<M::Element>,
    ) -> Result<RunReport, M::Error> {
        input.check_same_context(&ctx.inner, OPERATION)?;
        let shapes = self.activation_shapes(model, input)?;
        // The input's device bytes: none for an input in pinned host memory.
        let input_bytes = match input.memory_kind() {
            MemoryKind::Device => input.allocated_bytes(),
            MemoryKind::PinnedHost => 0,
        };
        let resident_bytes = ctx.memory_stats().bytes_in_use.saturating_sub(input_bytes);
        ctx.reset_peak_stats();
        let mut run = Run {
            schedule: self,
            ctx,
            input,
            shapes,
            live: (0..self.slot_count()).map(|_| None).collect(),
            held_bytes: input_bytes,
            peak_bytes: input_bytes,
            host_bytes: 0,
            host_peak_bytes: 0,
        };
        for &step in self.steps() {
            run.step(model, step)?;
        }
        Ok(RunReport {
            peak_bytes_in_use: ctx.memory_stats().peak_bytes_in_use,
            resident_bytes,
            schedule_peak_bytes: run.peak_bytes,
            host_peak_bytes: run.host_peak_bytes,
        })
    }

    /// The shape of every activation, 0 (the input's own) to n, checked against the chain.
    fn activation_shapes<M: ChainModel>(
        &self,
        model: &M,
        input: &DeviceArray<M::Element>,
    ) -> crate::error::Result<Vec<Vec<usize>>> {
        let element = std::mem::size_of::<M::Element>() as u64;
        let bytes_of = |i| {
            self.bytes(Buffer::Activation(i))
                .expect("activations 0 to n are the chain's")
        };
        if input.size_in_bytes() != bytes_of(0) {
            return Err(Error::Shape {
                operation: OPERATION,
                reason: format!(
                    "the input has {} (shape {:?}) but the chain's input has {}: pass \
                     the array the chain was planned for",
                    count(input.size_in_bytes(), "byte"),
                    input.shape(),
                    bytes_of(0)
                ),
            });
        }
        let mut shapes = vec![input.shape().to_vec()];
        for i in 1..=self.layer_count() {
            let bytes = bytes_of(i);
            let shape = match model.activation_shape(i) {
                Some(shape) => {
                    // A shape no array takes (a rank above MAX_RANK) is refused here, before
                    // anything runs, not by the allocation mid-run.
                    let checked =
                        crate::shape::check_shape(&shape, None, element as usize, OPERATION);
                    if let Err(Error::Shape { reason, .. }) = checked {
                        return Err(Error::Shape {
                            operation: OPERATION,
                            reason: format!("activation_shape({i}) is {shape:?}: {reason}"),
                        });
                    }
                    let shape_bytes = shape
                        .iter()
                        .try_fold(element, |product, &d| product.checked_mul(d as u64));
                    if shape_bytes != Some(bytes) {
                        return Err(Error::Shape {
                            operation: OPERATION,
                            reason: format!(
                                "activation_shape({i}) is {shape:?}, which does not hold the \
                                 chain's {} for activation {i} in elements of {}",
                                count(bytes, "byte"),
                                count(element, "byte")
                            ),
                        });
                    }
                    shape
                }
                None if element == 0 || bytes % element != 0 => {
                    return Err(Error::InvalidArgument {
                        operation: OPERATION,
                        reason: format!(
                            "activation {i} has {}, not a whole number of {}-byte \
                             elements: size the chain's layers in whole elements or use \
                             another element type",
                            count(bytes, "byte"),
                            element
                        ),
                    });
                }
                None => vec![usize::try_from(bytes / element).map_err(|_| Error::Shape {
                    operation: OPERATION,
                    reason: format!("activation {i} has more elements than this machine can count"),
                })?],
            };
            shapes.push(shape);
        }
        Ok(shapes)
    }
}

/// A run in progress: the buffers it holds, by slot, and their bytes.
struct Run<'s, T: bytemuck::Pod> {
    schedule: &'s Schedule,
    ctx: &'s Context,
    input: &'s DeviceArray<T>,
    shapes: Vec<Vec<usize>>,
    live: Vec<Option<DeviceArray<T>>>,
    /// Arena bytes of the input and the live buffers in device memory.
    held_bytes: u64,
    peak_bytes: u64,
    /// Bytes of the activations offloaded to pinned host memory now, and at most.
    host_bytes: u64,
    host_peak_bytes: u64,
}

impl<T: bytemuck::Pod> Run<'_, T> {
    /// Runs one step of the schedule.
    fn step<M: ChainModel<Element = T>>(
        &mut self,
        model: &mut M,
        step: ScheduleStep,
    ) -> Result<(), M::Error> {
        let ctx = self.ctx;
        match step {
            ScheduleStep::Forward { layer } | ScheduleStep::Recompute { layer } => {
                let output = self.allocate(Buffer::Activation(layer))?;
                let given = output.allocation_id();
                let input = self.get(Buffer::Activation(layer - 1))?;
                let (output, method) = match step {
                    ScheduleStep::Recompute { .. } => {
                        (model.recompute(ctx, layer, input, output)?, "recompute")
                    }
                    _ => (model.forward(ctx, layer, input, output)?, "forward"),
                };
                self.keep(Buffer::Activation(layer), output, given, method, layer)?;
            }
            ScheduleStep::LossGradient { layer } => {
                let gradient = self.allocate(Buffer::Gradient(layer))?;
                let given = gradient.allocation_id();
                let output = self.get(Buffer::Activation(layer))?;
                let gradient = model.loss_gradient(ctx, output, gradient)?;
                self.keep(
                    Buffer::Gradient(layer),
                    gradient,
                    given,
                    "loss_gradient",
                    layer,
                )?;
            }
            ScheduleStep::Backward { layer } => {
                let input_gradient = match layer {
                    1 => None,
                    _ => Some(self.allocate(Buffer::Gradient(layer - 1))?),
                };
                let given = input_gradient.as_ref().map(DeviceArray::allocation_id);
                let reads = self
                    .schedule
                    .backward_reads(layer)
                    .expect("the schedule's layers are the chain's");
                let arrays = BackwardArrays {
                    input: self.get_if(reads.input(), Buffer::Activation(layer - 1))?,
                    output: self.get_if(reads.output(), Buffer::Activation(layer))?,
                    output_gradient: self.get(Buffer::Gradient(layer))?,
                    input_gradient,
                };
                let returned = model.backward(ctx, layer, arrays)?;
                match (returned, given) {
                    (Some(gradient), Some(given)) => {
                        self.keep(
                            Buffer::Gradient(layer - 1),
                            gradient,
                            given,
                            "backward",
                            layer,
                        )?;
                    }
                    (None, None) => {}
                    (Some(_), None) => {
                        return Err(returned_other(
                            "backward",
                            layer,
                            "an array, but layer 1 writes no input gradient: return None",
                        )
                        .into())
                    }
                    (None, Some(_)) => {
                        return Err(returned_other(
                            "backward",
                            layer,
                            "None: return the input_gradient it was given, written",
                        )
                        .into())
                    }
                }
            }
            ScheduleStep::Free(buffer) => {
                let slot = self.schedule.slot(buffer);
                if let Some(array) = self.live[slot].take() {
                    self.held_bytes -= array.allocated_bytes();
                }
            }
            ScheduleStep::Offload { activation } | ScheduleStep::Prefetch { activation } => {
                self.move_activation(activation, matches!(step, ScheduleStep::Offload { .. }))?;
            }
        }
        Ok(())
    }

    /// Offloads activation `i` to pinned host memory (`offload`) or prefetches it back,
    /// counting its device bytes; on a refusal the activation stays where it was.
    fn move_activation(&mut self, i: usize, offload: bool) -> crate::error::Result<()> {
        let slot = self.schedule.slot(Buffer::Activation(i));
        self.get(Buffer::Activation(i))?;
        let array = self.live[slot].take().expect("checked live just above");
        let bytes = array.allocated_bytes();
        if !offload {
            if let Err(error) = self.reuse_freed_memory() {
                self.live[slot] = Some(array);
                return Err(error);
            }
        }
        let moved = match offload {
            true => self.ctx.offload(array),
            false => self.ctx.prefetch(array),
        };
        let array = match moved {
            Ok(array) => array,
            Err(donated) => {
                self.live[slot] = Some(donated.array);
                return Err(donated.error);
            }
        };
        match offload {
            true => {
                self.held_bytes -= bytes;
                self.host_bytes += bytes;
                self.host_peak_bytes = self.host_peak_bytes.max(self.host_bytes);
            }
            false => {
                self.host_bytes -= bytes;
                self.held_bytes += bytes;
                self.peak_bytes = self.peak_bytes.max(self.held_bytes);
            }
        }
        self.live[slot] = Some(array);
        Ok(())
    }

    /// Waits for the GPU work that still reads buffers the run (or anyone) dropped, when there
    /// is any, before the run takes device memory: the replay that checked the plan reused
    /// freed memory at once, and a buffer placed elsewhere meanwhile would leave the arena laid
    /// out (and fragmented) unlike the plan, so that a plan made for a budget could run out of
    /// memory in an arena of that budget.
    /// It waits for that work alone: the work other threads submitted after it goes on.
    fn reuse_freed_memory(&self) -> crate::error::Result<()> {
        let inner = &self.ctx.inner;
        let frontier = inner.lock_memory().arena().pending_free_frontier();
        if let Some(frontier) = frontier {
            inner.wait_for_work(SubmissionId(frontier))?;
            inner.retire_completed();
        }
        Ok(())
    }

    /// A new array for `buffer`, counted in the held bytes and labelled after the buffer.
    fn allocate(&mut self, buffer: Buffer) -> crate::error::Result<DeviceArray<T>> {
        self.reuse_freed_memory()?;
        let (name, i) = match buffer {
            Buffer::Activation(i) => ("activation", i),
            Buffer::Gradient(i) => ("gradient", i),
        };
        let array = {
            let _scope = label_scope(&format!("{name} {i}"));
            self.ctx.alloc::<T>(&self.shapes[i])?
        };
        self.held_bytes += array.allocated_bytes();
        self.peak_bytes = self.peak_bytes.max(self.held_bytes);
        Ok(array)
    }

    /// Stores `array` as `buffer` after checking it is the array `given` to the method.
    fn keep(
        &mut self,
        buffer: Buffer,
        array: DeviceArray<T>,
        given: crate::arena::AllocationId,
        method: &str,
        layer: usize,
    ) -> crate::error::Result<()> {
        let same = array.check_same_context(&self.ctx.inner, OPERATION).is_ok()
            && array.memory_kind() == crate::memory_kind::MemoryKind::Device
            && array.allocation_id() == given;
        if !same {
            return Err(returned_other(
                method,
                layer,
                "an array other than the one it was given: write into the given array (or \
                 donate it to an in-place operation) and return it",
            ));
        }
        self.live[self.schedule.slot(buffer)] = Some(array);
        Ok(())
    }

    /// The live array of `buffer` (the input for activation 0).
    fn get(&self, buffer: Buffer) -> crate::error::Result<&DeviceArray<T>> {
        if buffer == Buffer::Activation(0) {
            return Ok(self.input);
        }
        self.live[self.schedule.slot(buffer)]
            .as_ref()
            .ok_or_else(|| Error::Internal {
                operation: OPERATION,
                reason: format!("the schedule reads {buffer:?} while it is not live"),
            })
    }

    /// [`get`](Run::get) when `wanted`, else `None`.
    fn get_if(
        &self,
        wanted: bool,
        buffer: Buffer,
    ) -> crate::error::Result<Option<&DeviceArray<T>>> {
        wanted.then(|| self.get(buffer)).transpose()
    }
}

/// The error for a method that returned `what` instead of the array it was given.
fn returned_other(method: &str, layer: usize, what: &str) -> Error {
    Error::InvalidArgument {
        operation: OPERATION,
        reason: format!("ChainModel::{method} of layer {layer} returned {what}"),
    }
}
