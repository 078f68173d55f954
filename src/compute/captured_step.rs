//! `CapturedStep`: a finished [`Capture`], planned once and replayed: its temporaries placed in
//! one block by liveness (XLA's buffer assignment; several blocks where the device's largest
//! array is smaller than one would be), its bind groups and parameter, upload and
//! readback buffers made once, and each run one submission that writes what the run changes
//! (parameters, host data, start indices) and re-encodes the same commands (what a CUDA graph
//! replay is on CUDA; wgpu command buffers are used once, so the commands are recorded again,
//! over the same pipelines and bind groups).

use super::array_slots::ArraySlots;
use super::capture::Capture;
use super::capture_tables::{CaptureId, CaptureTables, CapturedIo, EmptyMoving, MovingCopy};
use super::step_staging::{InPlaceInputs, InPlaceReads, RunBuffers, StepStaging};
use super::temporaries::TemporaryIndex;
use crate::arena::{assign_buffers, Temporary, ALLOCATION_ALIGNMENT};
use crate::array::{check_context, check_not_pending, Access, ArrayStorage, DeviceArray};
use crate::backend::MappedRange;
use crate::context::{Context, ContextInner};
use crate::error::{Error, Result, RunRefusal, SlotKind};
use crate::memory_kind::MemoryKind;
use crate::pipelines::{ErrorScopes, ParamsKind};
use crate::shape::start_index;
use crate::step::{encode_bound_steps, BufferCopy, Step};
use crate::submission::SubmissionId;
use crate::transfer::TransferDirection::{self, DeviceToHost, HostToDevice};
use std::sync::Arc;

/// The operation a run's refusals name.
const RUN: &str = "CapturedStep::run";

/// One temporary of a [`StepPlan`]: its bytes (the arena's 256-byte rounding), its block and
/// offset in it, and the steps it is live over (inclusive).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedTemporary {
    /// Bytes the temporary takes in its block.
    pub bytes: u64,
    /// Its block: 0, or where the temporaries take several blocks
    /// ([`StepPlan::blocks`]), which one.
    pub block: usize,
    /// Its offset from its block's first byte.
    pub offset: u64,
    /// The first step that touches it; 0 for an input's host data where the arena is
    /// host-visible (UMA with zero-copy on), which a run may write before its first command.
    pub first_step: usize,
    /// The last step that touches it.
    pub last_step: usize,
}

/// The memory plan of a [`CapturedStep`], known before its first run: every temporary's place
/// and live range, the blocks that hold them, the least any plan could use, and what the step
/// keeps in the arena while it lives. Its `Display` is a summary line, a line on arrays the step
/// alone holds where there are any, and a table of the temporaries (bytes, their block where
/// there are several, offset, live steps `first to last`) where there are any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepPlan {
    /// Steps (dispatches, copies and clears) of one run.
    pub steps: usize,
    /// The temporaries, largest first as they were placed.
    pub temporaries: Vec<PlannedTemporary>,
    /// The reservations that hold the temporaries, their bytes together (0 without
    /// temporaries).
    pub block_bytes: u64,
    /// How many blocks hold the temporaries: one (none without temporaries), or where one
    /// block would be larger than the largest array the device allows
    /// ([`Context::max_array_bytes`](crate::Context::max_array_bytes)), several of at most
    /// that each. Temporaries live at the same time never share a byte either way; the blocks
    /// may take a little more than one would.
    pub blocks: usize,
    /// The most temporary bytes live at any one step: no plan's block can be smaller.
    pub lower_bound_bytes: u64,
    /// Device arena bytes of the step's other arrays (its inputs and outputs), held while it
    /// lives.
    pub array_bytes: u64,
    /// Device arena bytes the step holds while it lives, block included: since a run allocates
    /// nothing, with nothing else allocated this is the device arena's `peak_bytes_in_use`
    /// over any number of runs, to the byte, counted from `finish` (while a capture records,
    /// its temporaries are arrays of their own, which can peak higher: call
    /// [`crate::Context::reset_peak_stats`] after `finish` to see the runs alone).
    pub bytes_in_use: u64,
    /// Bytes of the step's inputs and outputs in pinned host memory (the pinned-host arena's,
    /// [`crate::MemoryKind::PinnedHost`], not counted above): what a captured `offload` makes,
    /// or an array of that kind the step uses.
    pub pinned_host_bytes: u64,
    /// Inputs and outputs you have dropped and the step still uses, as
    /// [`CapturedStep::plan`] is called: the step holds them (every run reads or writes
    /// them), so their memory comes back only when the step is dropped.
    pub arrays_held_by_the_step_alone: usize,
    /// Their bytes in both arenas: the device arena's and the pinned-host arena's together
    /// (each array counted in the kind it lives in, as `allocated_bytes` counts it).
    pub bytes_held_by_the_step_alone: u64,
}

impl std::fmt::Display for StepPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use crate::count::count;
        writeln!(
            f,
            "captured step: {}, {}, {} of inputs and outputs, {} in use{}",
            count(self.steps, "step"),
            match self.blocks {
                0 => "no temporaries".to_string(),
                blocks => format!(
                    "{} in {} {} bytes (lower bound {})",
                    count(self.temporaries.len(), "temporary").plural("temporaries"),
                    match blocks {
                        1 => "a block of".to_string(),
                        blocks => format!("{blocks} blocks, together"),
                    },
                    self.block_bytes,
                    self.lower_bound_bytes
                ),
            },
            count(self.array_bytes, "byte"),
            count(self.bytes_in_use, "byte"),
            match self.pinned_host_bytes {
                0 => String::new(),
                bytes => format!(" (and {} of pinned host memory)", count(bytes, "byte")),
            }
        )?;
        match self.arrays_held_by_the_step_alone {
            0 => {}
            1 => writeln!(
                f,
                "1 of its arrays ({}) is held by the step alone: you dropped it and every run still uses it; its memory comes back when the step is dropped",
                count(self.bytes_held_by_the_step_alone, "byte")
            )?,
            n => writeln!(
                f,
                "{n} of its arrays ({}) are held by the step alone: you dropped them and every run still uses them; their memory comes back when the step is dropped",
                count(self.bytes_held_by_the_step_alone, "byte")
            )?,
        }
        if self.temporaries.is_empty() {
            return Ok(());
        }
        let several = self.blocks > 1;
        let block = |b: String| {
            if several {
                format!(" {b:>6}")
            } else {
                String::new()
            }
        };
        let head = block("block".into());
        writeln!(f, "{:>12}{head} {:>12} {:>8}", "bytes", "offset", "steps")?;
        for t in &self.temporaries {
            writeln!(
                f,
                "{:>12}{} {:>12} {:>8}",
                t.bytes,
                block(t.block.to_string()),
                t.offset,
                format!("{} to {}", t.first_step, t.last_step)
            )?;
        }
        Ok(())
    }
}

/// A step captured once ([`Context::capture`]) and run again and again: each run is **one
/// submission** over the same pipelines and bind groups, allocates no arena memory, makes no
/// bind group and repeats no reflection check; it writes what the run changes and records the
/// commands again. Only what differs per run is checked: slot ownership, parameter sizes, host
/// slice lengths and index ranks (starts are clamped as XLA clamps), and, as every submission,
/// that no user recorder has pending work the run would overtake.
///
/// A run is a user submission in the recording model ([`crate::kernels`]): it goes after the
/// single ops called before it and before those called after. Its arrays are held by the step
/// (their memory is never handed out while it lives, even if you drop them) and are not
/// pending between runs: read its outputs with [`Context::device_get`] between runs, update an
/// input with single ops, as you would any array. Threads may run different steps on one
/// context; one step runs from one thread at a time (`run` takes `&mut self`). A read of one of
/// its arrays on another thread while runs are submitted (`device_get`, `device_get_into`,
/// `device_get_many`, `device_put_from`, single ops, a sequence's ops) gives the array as it
/// was between two runs, never part of one, and single ops that write an input on another
/// thread never write it during a run: a read that a run overlapped is read again in one
/// submission, which the queue orders between two runs, and host copies, reads in place and
/// runs exclude each other.
///
/// Dropping the step frees its block and releases its arrays once the GPU work of its runs has
/// completed (the arena's frontier, as for any array).
pub struct CapturedStep {
    ctx: Context,
    id: CaptureId,
    steps: Vec<Step>,
    arrays: Vec<(Arc<ArrayStorage>, Access)>,
    uniform: Option<(wgpu::Buffer, Vec<u8>)>,
    uniform_at: Vec<Option<usize>>,
    /// The launches whose parameters come from each parameter slot, by slot.
    slot_steps: Vec<Vec<usize>>,
    slot_sizes: Vec<usize>,
    staging: StepStaging,
    inputs: Vec<CapturedIo>,
    reads: Vec<CapturedIo>,
    moving: Vec<MovingCopy>,
    empty_moving: Vec<EmptyMoving>,
    array_slots: ArraySlots,
    plan: StepPlan,
    runs: u64,
    bind_groups: u64,
    /// Each moving copy's offset now (the moving side's first byte in its array).
    moving_at: Vec<u64>,
    /// Moving copies made on the host so far ([`CapturedStep::host_copies`]).
    host_copies: u64,
    /// The explicit transfers between arrays each run makes: (direction, ops, bytes).
    transfers: Vec<(TransferDirection, u64, u64)>,
}

impl CapturedStep {
    /// [`Capture::finish`].
    #[track_caller]
    pub(crate) fn from_capture(capture: Capture) -> Result<CapturedStep> {
        // The capture stops being open when `finish` returns, whatever it returns.
        let Capture { mut sequence, .. } = capture;
        let ctx = sequence.ctx.clone();
        let inner = Arc::clone(&ctx.inner);
        let (mut steps, touched, tables) = sequence.take_capture();
        let tables: Box<CaptureTables> =
            tables.ok_or_else(|| super::sequence::recorder_replaced("Capture::finish"))?;
        inner.check_device("planning a captured step")?;
        // Temporaries: made by the capture and held by nothing but it.
        let (temporaries, mut arrays): (Vec<_>, Vec<_>) =
            touched.into_iter().partition(|(storage, _)| {
                tables
                    .created
                    .contains_key(&(Arc::as_ptr(storage) as usize))
                    && Arc::strong_count(storage) == 1
            });
        let placed = place_temporaries(&ctx, &mut steps, temporaries, &tables)?;
        let block_bytes = placed.blocks.iter().map(|b| b.allocation.size).sum();
        let blocks = placed.blocks.len();
        let bytes_of = |kind: MemoryKind| -> u64 {
            let of_kind = arrays.iter().filter(|(s, _)| s.kind == kind);
            of_kind.map(|(s, _)| s.allocation.size).sum()
        };
        let (array_bytes, pinned_host_bytes) = (
            bytes_of(MemoryKind::Device),
            bytes_of(MemoryKind::PinnedHost),
        );
        let block_arrays = placed.blocks.clone();
        arrays.extend(
            placed
                .blocks
                .into_iter()
                .map(|block| (block, Access::Write)),
        );
        let device = inner.device();
        let shared = shared_dispatches(&steps, &tables);
        let alignment =
            u64::from(inner.limits().min_uniform_buffer_offset_alignment).max(4) as usize;
        let (uniform_bytes, uniform_at) = lay_out_uniforms(&steps, &shared, alignment);
        let scopes = ErrorScopes::push(device);
        let uniform = (!uniform_bytes.is_empty()).then(|| {
            let buffer = device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("gpu-arena captured step parameters"),
                size: uniform_bytes.len().next_multiple_of(16) as u64,
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            (buffer, uniform_bytes)
        });
        let uniform_buffer = uniform.as_ref().map(|(buffer, _)| buffer);
        let bind_groups = bind(device, &mut steps, &shared, uniform_buffer, &uniform_at);
        inner.count_bind_groups(bind_groups);
        scopes
            .pop()
            .map_err(|reason| inner.device_error("making a captured step's bind groups", reason))?;
        let staging = attach_staging(
            &inner,
            &mut steps,
            &arrays,
            &block_arrays,
            &tables,
            &uniform,
        )?;
        // Encoded once now, as every run encodes it (reads taken in place left out), inside
        // error scopes, so the device's refusal is `finish`'s error.
        let scopes = ErrorScopes::push(device);
        let encoded = encode_bound_steps(device, &[], &steps, staging.omitted(false), None);
        let popped = scopes.pop();
        encoded.and(popped).map_err(|reason| {
            inner.device_error("encoding a captured step (nothing was submitted)", reason)
        })?;
        if let Some((buffer, bytes)) = &uniform {
            inner.write_buffer(buffer, 0, bytes);
        }
        let array_slots = ArraySlots::new(&tables.array_slots, &steps, &arrays);
        let plan = StepPlan {
            steps: steps.len(),
            temporaries: placed.planned,
            block_bytes,
            blocks,
            lower_bound_bytes: placed.lower_bound_bytes,
            array_bytes,
            bytes_in_use: array_bytes + block_bytes,
            pinned_host_bytes,
            arrays_held_by_the_step_alone: 0,
            bytes_held_by_the_step_alone: 0,
        };
        Ok(CapturedStep {
            ctx,
            id: tables.id,
            slot_sizes: tables.param_slots.iter().map(Vec::len).collect(),
            slot_steps: tables.slotted_params.iter().fold(
                vec![Vec::new(); tables.param_slots.len()],
                |mut by_slot, &(step, slot)| {
                    by_slot[slot as usize].push(step);
                    by_slot
                },
            ),
            steps,
            arrays,
            uniform,
            uniform_at,
            staging,
            inputs: tables.inputs.clone(),
            reads: tables.reads.clone(),
            moving_at: tables.moving.iter().map(|m| m.initial_offset).collect(),
            moving: tables.moving.clone(),
            empty_moving: tables.empty_moving.clone(),
            array_slots,
            plan,
            runs: 0,
            bind_groups,
            host_copies: 0,
            transfers: by_direction(&tables.transfers),
        })
    }

    /// The memory plan, known before the first run, with the step's arrays you have dropped
    /// so far ([`StepPlan::arrays_held_by_the_step_alone`]).
    pub fn plan(&self) -> StepPlan {
        // The blocks are the last arrays and always the step's alone.
        let arrays = &self.arrays[..self.arrays.len() - self.plan.blocks];
        let alone: Vec<&Arc<ArrayStorage>> = arrays
            .iter()
            .map(|(storage, _)| storage)
            // The step's own references: its list of arrays, and each slot made from it.
            .filter(|storage| Arc::strong_count(storage) == 1 + self.array_slots.made_from(storage))
            .collect();
        StepPlan {
            arrays_held_by_the_step_alone: alone.len(),
            bytes_held_by_the_step_alone: alone.iter().map(|s| s.allocation.size).sum(),
            ..self.plan.clone()
        }
    }

    /// The number of the capture the step came from, as refusals name it (`Capture #N`, and
    /// [`RunRefusal::ForeignSlot`]'s fields).
    pub fn number(&self) -> u64 {
        self.id.number()
    }

    /// Runs made so far (submitted).
    pub fn runs(&self) -> u64 {
        self.runs
    }

    /// Bind groups the step made: at capture, and, for arrays bound to array slots, the first
    /// time each array is bound (a run that binds nothing new makes none;
    /// [`Context::bind_groups_made`] counts every bind group of the context).
    pub fn bind_groups(&self) -> u64 {
        self.bind_groups
    }

    /// Moving copies (`dynamic_update_slice_at`, `dynamic_slice_at`) that runs made on the
    /// host so far. On a CPU adapter (lavapipe, SwiftShader, WARP) with zero-copy, where a
    /// `memcpy` beats the copy kernel as for single ops, a run copies a moving box itself,
    /// before it submits, when both arrays are mapped, no GPU work uses them any more, and no
    /// earlier step of the run touches the box's bytes; the rest of the run is unchanged, and
    /// so are its results. Never on a GPU, in a run that binds arrays to slots, while kernels
    /// are timed, or with
    /// [`ArenaConfig::force_device_kernels`](crate::ArenaConfig::force_device_kernels). The
    /// copies come after every check of the run; a run that the device then refuses (a lost
    /// device) may have made them.
    pub fn host_copies(&self) -> u64 {
        self.host_copies
    }

    /// The context the step runs on.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Describes one run: set what changes with [`StepRun::params`], [`StepRun::input`],
    /// [`StepRun::start`] and [`StepRun::read_into`], then [`StepRun::submit`]. A slot not set
    /// keeps the value of the last run that set it (or the captured one).
    pub fn run<'r>(&mut self) -> StepRun<'_, 'r> {
        StepRun {
            step: self,
            error: None,
            params: Vec::new(),
            inputs: Vec::new(),
            starts: Vec::new(),
            reads: Vec::new(),
            bound: Vec::new(),
        }
    }
}

/// `finish` lives with the step it makes, so that the capture's file does not name it.
impl Capture {
    /// Plans the step's memory and makes it replayable (see [`CapturedStep`]): the
    /// temporaries (arrays the capture made and no longer held) get offsets in one block by
    /// liveness and their own memory goes back to the arena; that block is allocated for them
    /// (cut into blocks of at most [`Context::max_array_bytes`] where it is larger);
    /// every bind group and the step's parameter, upload and readback buffers are made; the
    /// whole step is encoded once inside error scopes. Nothing is submitted; the capture's
    /// arrays stop being pending.
    ///
    /// Errors (the capture is gone, and every array it made and you dropped is freed):
    /// out-of-memory for the block ([`Error::OutOfMemory`]: the arena holds what it held before
    /// the capture and the outputs you kept, nothing else), [`Error::Device`] when the device
    /// refuses the step's bindings or commands, [`Error::DeviceLost`].
    #[track_caller]
    pub fn finish(self) -> Result<CapturedStep> {
        CapturedStep::from_capture(self)
    }
}

impl std::fmt::Debug for CapturedStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CapturedStep")
            .field("capture", &self.id.number())
            .field("steps", &self.steps.len())
            .field("arrays", &self.arrays.len())
            .field("runs", &self.runs)
            .finish()
    }
}

/// One run of a [`CapturedStep`] being described; nothing happens until [`StepRun::submit`].
/// Mistakes (a slot of another step, a wrong size or rank) are reported by `submit`, before
/// anything runs or changes.
#[must_use = "a run does nothing until .submit()"]
pub struct StepRun<'s, 'r> {
    step: &'s mut CapturedStep,
    error: Option<Error>,
    params: Vec<(u32, Vec<u8>)>,
    inputs: Vec<(u32, &'r [u8])>,
    starts: Vec<(u32, Vec<i64>)>,
    reads: Vec<(u32, &'r mut [u8])>,
    bound: Vec<(u32, &'r Arc<ArrayStorage>)>,
}

impl<'s, 'r> StepRun<'s, 'r> {
    fn refuse(&mut self, refusal: RunRefusal) {
        self.error.get_or_insert(Error::CapturedRun { refusal });
    }

    /// Whether `capture` is this step's; else notes the refusal of a foreign slot.
    fn owns(&mut self, capture: CaptureId, slot: SlotKind) -> bool {
        if capture == self.step.id {
            return true;
        }
        self.refuse(RunRefusal::ForeignSlot {
            slot,
            slot_capture: capture.number(),
            step_capture: self.step.id.number(),
        });
        false
    }

    /// Sets a parameter slot ([`crate::Capture::params_slot`]) for this run and later ones.
    pub fn params<P: bytemuck::Pod>(
        mut self,
        slot: &super::capture::ParamsSlot<P>,
        value: &P,
    ) -> Self {
        if self.owns(slot.capture, SlotKind::Params) {
            self.params
                .push((slot.index, bytemuck::bytes_of(value).to_vec()));
        }
        self
    }

    /// Replaces an upload's host data ([`crate::Capture::input`]) for this run and later ones:
    /// exactly as many elements as the captured upload.
    pub fn input<T: bytemuck::Pod>(
        mut self,
        slot: &super::capture::InputSlot<T>,
        data: &'r [T],
    ) -> Self {
        if !self.owns(slot.capture, SlotKind::Input) {
            return self;
        }
        if data.len() != slot.len {
            self.refuse(RunRefusal::InputLength {
                given: data.len(),
                captured: slot.len,
            });
        } else if let Some(index) = slot.index {
            self.inputs.push((index, bytemuck::cast_slice(data)));
        }
        self
    }

    /// Sets start indices ([`crate::Capture::index_slot`]) for this run and later ones: one per
    /// dimension, clamped into range at each op as XLA clamps.
    pub fn start(mut self, slot: &super::capture::IndexSlot, start: &[i64]) -> Self {
        if !self.owns(slot.capture, SlotKind::Index) {
            return self;
        }
        if start.len() != slot.rank {
            self.refuse(RunRefusal::StartRank {
                given: start.len(),
                rank: slot.rank,
            });
        } else {
            self.starts.push((slot.index, start.to_vec()));
        }
        self
    }

    /// Binds `array` to an array slot ([`crate::Capture::array_slot`]) for this run only:
    /// every op of the step that uses the slot's array uses `array` instead, in place (a run
    /// that does not set the slot uses the slot's own array). The same element type, shape and
    /// memory kind; bind groups are made the first time an array is bound and reused while it
    /// lives.
    pub fn array<T: bytemuck::Pod>(
        mut self,
        slot: &super::capture::ArraySlot<T>,
        array: &'r mut DeviceArray<T>,
    ) -> Self {
        if !self.owns(slot.capture, SlotKind::Array) {
            return self;
        }
        let array: &'r DeviceArray<T> = array;
        if array.shape() != slot.shape.as_slice() {
            self.refuse(RunRefusal::ArrayShape {
                given: array.shape().to_vec(),
                captured: slot.shape.clone(),
            });
        } else if array.memory_kind() != slot.memory_kind {
            self.refuse(RunRefusal::ArrayMemoryKind {
                given: array.memory_kind(),
                captured: slot.memory_kind,
            });
        } else {
            self.bound.push((slot.index, &array.storage));
        }
        self
    }

    /// Fills `out` with the array that [`crate::Capture::read`] names, as it was at the read's
    /// point in this run (later steps of the run may change the array after it; `submit` then
    /// waits for the run): exactly as many elements as the array.
    pub fn read_into<T: bytemuck::Pod>(
        mut self,
        slot: &super::capture::ReadSlot<T>,
        out: &'r mut [T],
    ) -> Self {
        if !self.owns(slot.capture, SlotKind::Read) {
            return self;
        }
        if out.len() != slot.len {
            self.refuse(RunRefusal::ReadLength {
                given: out.len(),
                captured: slot.len,
            });
        } else if let Some(index) = slot.index {
            self.reads.push((index, bytemuck::cast_slice_mut(out)));
        }
        self
    }

    /// Runs the step once: checks what this run sets (nothing runs or changes when a check
    /// fails), writes it, and submits the step's commands as one submission, after the single
    /// ops called before. Waits only when the run reads into host memory. Returns the
    /// submission.
    ///
    /// Errors: [`Error::CapturedRun`] for a slot of another step, an input or output slice of
    /// another length than captured, start indices of another rank, or an array bound to an
    /// array slot of another shape or memory kind or that the step uses otherwise (its
    /// [`RunRefusal`](crate::error::RunRefusal) holds the values);
    /// [`Error::TransferGuard`] when the transfer guard refuses this run's host data (an
    /// explicit host-to-device transfer, as `device_put`) or its reads (explicit
    /// device-to-host, as `device_get_into`): nothing runs. Both are counted in
    /// [`Context::transfer_stats`] and on the timeline;
    /// [`Error::PendingInRecorder`] for an array of the step that a user recorder's pending
    /// work would be overtaken on (a [`crate::Sequence`] or capture not yet submitted or
    /// finished, on any thread, a sequence that only reads an array the run writes included:
    /// it names the array and the recorder; submit that work first, or retry);
    /// [`Error::ForeignArray`] for an array of another context bound to an array slot;
    /// with [`ArenaConfig::strict_starts`](crate::ArenaConfig::strict_starts) on,
    /// [`Error::Index`] ([`IndexRefusal::StartOutOfRange`](crate::error::IndexRefusal::StartOutOfRange))
    /// for a start of this run that XLA would clamp;
    /// [`Error::Device`] when the device refuses the submission; [`Error::DeviceLost`]. A run
    /// is not eager work: a thread that holds a capture of this context open may run a step.
    pub fn submit(mut self) -> Result<SubmissionId> {
        let inner = Arc::clone(&self.step.ctx.inner);
        inner.check_device(RUN)?;
        if let Some(error) = self.error.take() {
            return Err(error);
        }
        let started = std::time::Instant::now();
        let Checked {
            offsets,
            input_bytes,
            read_bytes,
        } = self.check(&inner)?;
        let step = &mut *self.step;
        // The run writes its data and submits under the kernel lock, which every thread's GPU
        // work and host copies take: a single op's host copy on another thread never overlaps
        // it, and never finds its arrays idle while it is being submitted.
        let kernels = inner.kernels().lock();
        // Everything is checked: write what this run changes.
        step.apply(&self.params, &offsets)?;
        step.bind_array_slots(&inner, &self.bound);
        let uniform_changed = !self.params.is_empty() || !self.starts.is_empty();
        let buffers = step.staging.write_run(
            &inner,
            &step.inputs,
            &self.inputs,
            step.uniform
                .as_ref()
                .map(|(b, bytes)| (b, bytes.as_slice())),
            uniform_changed,
        )?;
        if let Some(upload) = &buffers.upload {
            for input in &step.inputs {
                if let Some(Step::Copy(BufferCopy { src, .. })) = step.steps.get_mut(input.step) {
                    if src != upload {
                        *src = upload.clone();
                    }
                }
            }
        }
        let bound: Vec<&Arc<ArrayStorage>> = self.bound.iter().map(|&(_, a)| a).collect();
        let id = step.submit_commands(&inner, &buffers, !self.reads.is_empty(), &bound)?;
        drop(kernels);
        for &(direction, ops, bytes) in &step.transfers {
            inner.count_transfer(direction, true, ops, bytes, started);
        }
        if !self.inputs.is_empty() {
            let inputs = self.inputs.len() as u64;
            inner.count_transfer(HostToDevice, true, inputs, input_bytes, started);
        }
        if !self.reads.is_empty() {
            inner.wait_for(id)?;
            let mut outs: Vec<(usize, u64, &mut [u8])> = self
                .reads
                .iter_mut()
                .map(|(index, out)| {
                    let read = *index as usize;
                    (read, step.reads[read].offset, &mut **out)
                })
                .collect();
            step.staging.read_completed(&inner, &mut outs)?;
            let reads = self.reads.len() as u64;
            inner.count_transfer(DeviceToHost, true, reads, read_bytes, started);
        }
        Ok(id)
    }
}

/// The transfers of a capture (direction, bytes), summed per direction: (direction, ops,
/// bytes), in the order each direction first appears.
fn by_direction(transfers: &[(TransferDirection, u64)]) -> Vec<(TransferDirection, u64, u64)> {
    let mut sums: Vec<(TransferDirection, u64, u64)> = Vec::new();
    for &(direction, bytes) in transfers {
        match sums.iter_mut().find(|(d, _, _)| *d == direction) {
            Some((_, ops, sum)) => (*ops, *sum) = (*ops + 1, sum.saturating_add(bytes)),
            None => sums.push((direction, 1, bytes)),
        }
    }
    sums
}

/// What a run's checks found: the byte offset of each moving copy it places, and the bytes of
/// its host data and of its reads (for the transfer statistics).
struct Checked {
    offsets: Vec<(usize, u64)>,
    input_bytes: u64,
    read_bytes: u64,
}

impl StepRun<'_, '_> {
    /// Everything this run sets, checked before anything is written: parameter sizes, the
    /// step's arrays against user recorders' pending work, the transfer guard on the run's host
    /// data and reads (explicit transfers, as `device_put` and `device_get_into`), and every
    /// start (strict starts): what [`Checked`] holds.
    fn check(&self, inner: &Arc<ContextInner>) -> Result<Checked> {
        let step = &*self.step;
        for (index, bytes) in &self.params {
            let expected = step.slot_sizes[*index as usize];
            if bytes.len() != expected {
                return Err(Error::CapturedRun {
                    refusal: RunRefusal::ParamsSize {
                        given: bytes.len(),
                        expected,
                    },
                });
            }
        }
        for (storage, access) in &step.arrays {
            check_not_pending(storage, *access, RUN, "an array of the captured step")?;
        }
        self.check_bound(inner)?;
        let input_bytes = self.inputs.iter().map(|(_, b)| b.len() as u64).sum();
        let read_bytes = self.reads.iter().map(|(_, b)| b.len() as u64).sum();
        if !self.inputs.is_empty() {
            inner.guard(HostToDevice, input_bytes, RUN, true)?;
        }
        if !self.reads.is_empty() {
            inner.guard(DeviceToHost, read_bytes, RUN, true)?;
        }
        for &(direction, _, bytes) in &step.transfers {
            inner.guard(direction, bytes, RUN, true)?;
        }
        let strict = inner.config().strict_starts;
        let offsets = moving_offsets(&step.moving, &step.empty_moving, &self.starts, strict)?;
        Ok(Checked {
            offsets,
            input_bytes,
            read_bytes,
        })
    }

    /// The arrays this run binds to array slots: of this context, each bound once and used by
    /// the step nowhere else (its plan assumed distinct arrays), and not pending in a user
    /// recorder for how the step uses the slot.
    fn check_bound(&self, inner: &Arc<ContextInner>) -> Result<()> {
        // Two slots of one run cannot take one array: each takes it `&mut`.
        for &(slot, array) in &self.bound {
            check_context(array, inner, RUN)?;
            let Some((access, captured)) = self.step.array_slots.slot(slot) else {
                continue;
            };
            if !Arc::ptr_eq(array, captured)
                && self.step.arrays.iter().any(|(s, _)| Arc::ptr_eq(s, array))
            {
                return Err(Error::CapturedRun {
                    refusal: RunRefusal::ArrayUsedByTheStep { slot },
                });
            }
            if let Some(access) = access {
                check_not_pending(array, access, RUN, "an array bound to an array slot")?;
            }
        }
        Ok(())
    }
}

impl CapturedStep {
    /// Writes a checked run's parameter values (into the uniform block or a dispatch's
    /// immediates) and the bases of its moving copies at `offsets` (into their uniform slots).
    fn apply(&mut self, params: &[(u32, Vec<u8>)], offsets: &[(usize, u64)]) -> Result<()> {
        // Taken out while the steps are written (`write_params` borrows the whole step).
        let slot_steps = std::mem::take(&mut self.slot_steps);
        for (index, bytes) in params {
            for &step in &slot_steps[*index as usize] {
                self.write_params(step, bytes);
            }
        }
        self.slot_steps = slot_steps;
        for &(m, offset) in offsets {
            self.moving_at[m] = offset;
            let moving = &self.moving[m];
            let (src, dst) = if moving.source_moves {
                (offset, 0)
            } else {
                (0, offset)
            };
            let mut params = moving.params.clone();
            let unit = moving.unit_bytes.max(1);
            (moving.rebase)(&mut params, src / unit, dst / unit).map_err(|overflow| {
                Error::Internal {
                    operation: RUN,
                    reason: overflow.to_string(),
                }
            })?;
            self.write_params(moving.step, &params);
        }
        Ok(())
    }

    /// Writes `bytes` as the parameters of step `step`: into its slot of the uniform block, or
    /// into its immediates (set when the commands are encoded) for a kernel that takes them so.
    fn write_params(&mut self, step: usize, bytes: &[u8]) {
        match (
            &mut self.uniform,
            self.uniform_at[step],
            &mut self.steps[step],
        ) {
            (Some((_, uniform)), Some(at), _) => {
                uniform[at..at + bytes.len()].copy_from_slice(bytes)
            }
            (_, None, Step::Dispatch { kernel, params, .. })
                if matches!(
                    kernel.signature.params.as_ref().map(|b| b.kind),
                    Some(ParamsKind::Immediate)
                ) =>
            {
                *params = Some(bytes.to_vec());
            }
            _ => {}
        }
    }

    /// Points the steps that use array slots at the arrays this run binds (`bound`), making
    /// the bind groups an array needs the first time it is bound.
    fn bind_array_slots(&mut self, inner: &ContextInner, bound: &[(u32, &Arc<ArrayStorage>)]) {
        let (uniform, uniform_at) = (&self.uniform, &self.uniform_at);
        let made = self
            .array_slots
            .bind(inner.device(), &mut self.steps, bound, |i| {
                uniform
                    .as_ref()
                    .zip(uniform_at[i])
                    .map(|((buffer, _), at)| (buffer, at as u64))
            });
        self.bind_groups += made;
        inner.count_bind_groups(made);
    }

    /// Encodes the run's commands after `buffers`' uniform copy, without the input copies a
    /// run that wrote its inputs in place leaves out, and submits them as one submission (with
    /// the memory dependency to host reads when `for_host_read`), in one error scope: the first
    /// refusal is the one reported. Notes the arrays' use, the staging's, the dispatches on the
    /// timeline and the run.
    fn submit_commands(
        &mut self,
        inner: &ContextInner,
        buffers: &RunBuffers,
        for_host_read: bool,
        bound: &[&Arc<ArrayStorage>],
    ) -> Result<SubmissionId> {
        let mut submission = inner.submission("submitting a captured step's run")?;
        // A run that reads into host memory carries the memory dependency to host reads; one
        // that does not leaves it to the host read that may follow (a loop of runs pays it
        // once, at the read).
        if for_host_read {
            submission = submission.for_host_read();
        }
        let mut timer = inner.dispatch_timer(&self.steps);
        let prelude = buffers.uniform_copy.as_slice();
        let omitted = self.staging.omitted(buffers.in_place);
        // Timed runs keep every dispatch: the timer stamps each one.
        // A run that binds arrays to slots keeps every dispatch too: its dispatches' ranges are
        // the captured arrays' (a bound array changes only their bind groups).
        let on_host = match (&timer, bound.is_empty()) {
            (None, true) => self.copy_on_host(inner, omitted),
            _ => Vec::new(),
        };
        let mut left_out = [omitted, &on_host].concat();
        left_out.sort_unstable();
        self.host_copies += on_host.len() as u64;
        let encoded = encode_bound_steps(
            inner.device(),
            prelude,
            &self.steps,
            &left_out,
            timer.as_mut(),
        );
        submission.timed(timer);
        let commands = match encoded {
            Ok(commands) => commands,
            Err(reason) => return Err(submission.abandon("encoding a captured step's run", reason)),
        };
        let (arrays, staging) = (&self.arrays, &mut self.staging);
        let record = |id| {
            for storage in arrays.iter().map(|(s, _)| s).chain(bound.iter().copied()) {
                storage.record_use(id);
            }
            staging.submitted(buffers, id);
        };
        let names = crate::step::dispatch_names(&self.steps, &on_host);
        let id = submission.submit([commands], record, names)?;
        self.staging.accepted(buffers);
        self.runs += 1;
        Ok(id)
    }

    /// On a CPU adapter with zero-copy, makes on the host the moving copies of this run that
    /// can run before its submission (see [`CapturedStep::host_copies`]); returns their steps'
    /// positions, sorted, for the encoder to leave out. `omitted`: the steps the run leaves
    /// out already (input copies written in place).
    fn copy_on_host(&self, inner: &ContextInner, omitted: &[usize]) -> Vec<usize> {
        // Past this many steps the scans cost more than the kernels they save.
        const MAX_STEPS_SCANNED: usize = 256;
        let mut on_host = Vec::new();
        if self.moving.is_empty()
            || self.steps.len() > MAX_STEPS_SCANNED
            || !inner.host_copies_pay()
        {
            return on_host;
        }
        // The run holds the kernel lock, under which every thread gathers its GPU work: none
        // can start using the arrays between the checks below and the copies.
        let _ = inner.device().poll(wgpu::PollType::Poll);
        let completed = inner.submissions().completed();
        // The array of the step holding bytes `[offset, offset + size)` of `buffer`, mapped and
        // idle ([`ArrayStorage::idle_for_host`]), with those bytes as its own range.
        let idle_array = |buffer: &wgpu::Buffer, offset: u64, size: u64| {
            self.arrays.iter().find_map(|(storage, _)| {
                let start = storage.allocation.offset;
                let inside = storage.buffer == *buffer
                    && offset >= start
                    && offset + size <= start + storage.allocation.size;
                let mapped = storage.mapped.as_ref()?;
                (inside && storage.idle_for_host(completed)).then(|| mapped.sub(offset, size))
            })
        };
        for (moving, &at) in self.moving.iter().zip(&self.moving_at) {
            let Some(Step::Dispatch { ranges, .. }) = self.steps.get(moving.step) else {
                continue;
            };
            let bound = |binding| ranges.iter().find(|r| r.binding == binding);
            // The copy kernel binds the source at 1 and the destination at 2, each whole.
            let (Some(src), Some(dst)) = (bound(1), bound(2)) else {
                continue;
            };
            let [(src_at, src_len), (dst_at, dst_len)] = moving.host.spans(at);
            let kept_before = |buffer: &wgpu::Buffer, offset: u64, len: u64| {
                self.steps[..moving.step]
                    .iter()
                    .enumerate()
                    .any(|(i, step)| {
                        omitted.binary_search(&i).is_err()
                            && on_host.binary_search(&i).is_err()
                            && step.touches(buffer, offset, len)
                    })
            };
            // Arrays that share bytes (one region's buffer holds many) are left to the kernel.
            let overlap = src.buffer == dst.buffer
                && src.offset < dst.offset + dst.size
                && dst.offset < src.offset + src.size;
            if overlap
                || kept_before(&src.buffer, src.offset + src_at, src_len)
                || kept_before(&dst.buffer, dst.offset + dst_at, dst_len)
            {
                continue;
            }
            let (Some(from), Some(to)) = (
                idle_array(&src.buffer, src.offset, src.size),
                idle_array(&dst.buffer, dst.offset, dst.size),
            ) else {
                continue;
            };
            moving.host.copy(at, &from, &to);
            on_host.push(moving.step);
        }
        on_host
    }
}

/// A capture's temporaries placed in blocks: the blocks' memory (none when no temporary needs
/// room), each temporary's place and life, and the lower bound of any placement.
struct PlacedTemporaries {
    blocks: Vec<Arc<ArrayStorage>>,
    planned: Vec<PlannedTemporary>,
    lower_bound_bytes: u64,
}

/// Places the capture's `temporaries` in one block by liveness (XLA's buffer assignment): each
/// one's life in one pass over `steps` (an input's from step 0 where a run may write it in
/// place), their offsets, the block (or its cuts, each at most the device's largest array)
/// allocated once their own memory is back, and every range of `steps` in a temporary moved
/// into its block.
#[track_caller]
fn place_temporaries(
    ctx: &Context,
    steps: &mut [Step],
    temporaries: Vec<(Arc<ArrayStorage>, Access)>,
    tables: &CaptureTables,
) -> Result<PlacedTemporaries> {
    let index = TemporaryIndex::new(temporaries.iter().map(|(storage, _)| {
        (
            &storage.buffer,
            storage.allocation.offset,
            storage.allocation.size,
        )
    }));
    let mut lives = index.lives(steps, temporaries.len());
    inputs_live_from_the_start(&index, &tables.inputs, steps, &temporaries, &mut lives);
    // Those no step touches need no room in the block.
    let mut placed_as = vec![None; temporaries.len()];
    let mut placed = Vec::new();
    for (number, (storage, _)) in temporaries.iter().enumerate() {
        if let Some((first_step, last_step)) = lives[number] {
            placed_as[number] = Some(placed.len());
            placed.push(Temporary {
                size: storage.allocation.size,
                first_step,
                last_step,
            });
        }
    }
    let assignment = assign_buffers(&placed, ALLOCATION_ALIGNMENT);
    // One block where the device allows an array that large, else blocks of at most that.
    let split = assignment.split(&placed, ALLOCATION_ALIGNMENT, ctx.max_array_bytes());
    // Their own memory goes back first (nothing ran on it), so the blocks may take it.
    drop(temporaries);
    let mut blocks = Vec::with_capacity(split.blocks.len());
    for (number, &(_, bytes)) in split.blocks.iter().enumerate() {
        let label = match split.blocks.len() {
            1 => format!("captured step #{} temporaries", tables.id.number()),
            all => format!(
                "captured step #{} temporaries, block {} of {all}",
                tables.id.number(),
                number + 1
            ),
        };
        let block: DeviceArray<u8> = ctx.alloc_bytes(
            crate::memory_kind::MemoryKind::Device,
            &[bytes as usize],
            bytes,
            Some(&label),
            "Capture::finish",
            std::panic::Location::caller(),
        )?;
        blocks.push(Arc::clone(&block.storage));
    }
    // A temporary's place: its block, and its offset from the block's first byte.
    let place = |at: usize| {
        let block = split.block_of[at];
        (
            &blocks[block],
            assignment.offsets[at] - split.blocks[block].0,
        )
    };
    index.relocate(steps, |number| {
        placed_as[number].map(|at: usize| {
            let (block, offset) = place(at);
            (&block.buffer, block.allocation.offset + offset)
        })
    });
    let mut order: Vec<usize> = (0..placed.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(placed[i].size), placed[i].first_step, i));
    let planned = order
        .into_iter()
        .map(|i| PlannedTemporary {
            bytes: placed[i].size,
            block: split.block_of[i],
            offset: place(i).1,
            first_step: placed[i].first_step,
            last_step: placed[i].last_step,
        })
        .collect();
    Ok(PlacedTemporaries {
        blocks,
        planned,
        lower_bound_bytes: assignment.lower_bound_bytes,
    })
}

/// The uniform parameter blocks of `steps`, each at an `alignment`-aligned slot of one
/// buffer's bytes (a dispatch identical to an earlier one, `shared`, takes its slot): the
/// bytes, and each step's slot.
fn lay_out_uniforms(
    steps: &[Step],
    shared: &[Option<usize>],
    alignment: usize,
) -> (Vec<u8>, Vec<Option<usize>>) {
    let mut bytes = Vec::new();
    let mut at = vec![None; steps.len()];
    for (i, step) in steps.iter().enumerate() {
        if let Some(first) = shared[i] {
            at[i] = at[first];
        } else if let Some(block) = step.uniform_params() {
            let slot = bytes.len().next_multiple_of(alignment);
            bytes.resize(slot, 0);
            bytes.extend_from_slice(block);
            at[i] = Some(slot);
        }
    }
    (bytes, at)
}

/// Makes the bind group of every dispatch of `steps`, over its slot of `uniform` (a dispatch
/// identical to an earlier one, `shared`, takes that one's group): how many were made.
fn bind(
    device: &wgpu::Device,
    steps: &mut [Step],
    shared: &[Option<usize>],
    uniform: Option<&wgpu::Buffer>,
    uniform_at: &[Option<usize>],
) -> u64 {
    let mut made = 0;
    for i in 0..steps.len() {
        if let Some(first) = shared[i] {
            let group = match &steps[first] {
                Step::Dispatch { bind_group, .. } => bind_group.clone(),
                _ => None,
            };
            if let Step::Dispatch { bind_group, .. } = &mut steps[i] {
                *bind_group = group;
            }
            continue;
        }
        let slot = || {
            uniform
                .zip(uniform_at[i])
                .map(|(buffer, at)| (buffer, at as u64))
        };
        if steps[i].make_bind_group(device, slot) {
            made += 1;
        }
    }
    made
}

/// The step's own staging ([`StepStaging`]), with the input copies of `steps` pointed at its
/// upload buffer, its read copies at its readback buffer (none when every read is taken in
/// place), and, where every input lies in
/// mapped arena memory of `arrays`, runs allowed to write their inputs in place.
fn attach_staging(
    inner: &ContextInner,
    steps: &mut [Step],
    arrays: &[(Arc<ArrayStorage>, Access)],
    blocks: &[Arc<ArrayStorage>],
    tables: &CaptureTables,
    uniform: &Option<(wgpu::Buffer, Vec<u8>)>,
) -> Result<StepStaging> {
    let reads = match inner.host_reads_arena() {
        true => in_place_reads(&tables.reads, steps, blocks),
        false => None,
    };
    // Reads all taken in place need no readback staging.
    let readback_bytes = match &reads {
        Some(reads) if reads.ranges.iter().all(Option::is_some) => 0,
        _ => tables.readback_bytes,
    };
    let mut staging = StepStaging::new(
        inner,
        &tables.upload_bytes,
        tables.inputs.iter().map(|io| (io.offset, io.bytes)),
        uniform.as_ref().map(|(_, bytes)| bytes.as_slice()),
        readback_bytes,
    )?;
    if let Some(upload) = staging.capture_upload() {
        for input in &tables.inputs {
            if let Some(Step::Copy(BufferCopy { src, .. })) = steps.get_mut(input.step) {
                *src = upload.clone();
            }
        }
    }
    staging.use_arrays_in_place(in_place_inputs(&tables.inputs, steps, arrays), reads);
    if let Some(readback) = staging.readback_buffer() {
        for read in &tables.reads {
            if let Some(Step::Copy(BufferCopy { dst, .. })) = steps.get_mut(read.step) {
                *dst = readback.clone();
            }
        }
    }
    Ok(staging)
}

/// Where a run could write its inputs in place ([`InPlaceInputs`]): when every input's bytes
/// lie in mapped arena memory (UMA, zero-copy on) of one of the step's `arrays` (the block, for
/// a temporary). `None` elsewhere: runs copy their inputs from an upload buffer.
fn in_place_inputs(
    inputs: &[CapturedIo],
    steps: &[Step],
    arrays: &[(Arc<ArrayStorage>, Access)],
) -> Option<InPlaceInputs> {
    // A `wgpu::Buffer` hashes and compares by its id, which never changes: clippy's
    // `mutable_key_type` sees the interior mutability of wgpu's handle, not of the key.
    #![allow(clippy::mutable_key_type)]
    use std::collections::{BTreeMap, HashMap};
    // The step's arrays by buffer and start: the one holding a byte is the last one starting
    // at or before it (allocations never overlap).
    let mut by_buffer: HashMap<&wgpu::Buffer, BTreeMap<u64, &Arc<ArrayStorage>>> = HashMap::new();
    for (storage, _) in arrays {
        by_buffer
            .entry(&storage.buffer)
            .or_default()
            .insert(storage.allocation.offset, storage);
    }
    let mut in_place = InPlaceInputs {
        ranges: Vec::with_capacity(inputs.len()),
        holders: Vec::new(),
        copies: Vec::with_capacity(inputs.len()),
    };
    for input in inputs {
        let Some(Step::Copy(copy)) = steps.get(input.step) else {
            return None;
        };
        let (_, holder) = by_buffer
            .get(&copy.dst)?
            .range(..=copy.dst_offset)
            .next_back()?;
        let end = holder.allocation.offset + holder.allocation.size;
        if copy.dst_offset + input.bytes > end {
            return None;
        }
        in_place
            .ranges
            .push(holder.mapped.as_ref()?.sub(copy.dst_offset, input.bytes));
        if !in_place.holders.iter().any(|h| Arc::ptr_eq(h, holder)) {
            in_place.holders.push(Arc::clone(holder));
        }
        in_place.copies.push(input.step);
    }
    in_place.copies.sort_unstable();
    (!in_place.ranges.is_empty()).then_some(in_place)
}

/// Where runs could take their reads from the step's own memory ([`InPlaceReads`]): each read
/// of a temporary (in one of the step's `blocks`, mapped on UMA with zero-copy on) whose bytes
/// no later step uses; the host reads them once the whole run has completed. Only the blocks:
/// no other work reaches them between the run and the read (runs of one step come one at a
/// time), while an array the user holds may be written by another thread's work the moment the
/// run completes, which the read must not see. The other reads are copied into the readback
/// buffer.
fn in_place_reads(
    reads: &[CapturedIo],
    steps: &[Step],
    blocks: &[Arc<ArrayStorage>],
) -> Option<InPlaceReads> {
    let in_place = |read: &CapturedIo| -> Option<MappedRange> {
        let Some(Step::Copy(copy)) = steps.get(read.step) else {
            return None;
        };
        let block = blocks.iter().find(|block| {
            let (start, end) = (
                block.allocation.offset,
                block.allocation.offset + block.allocation.size,
            );
            copy.src == block.buffer
                && copy.src_offset >= start
                && copy.src_offset + read.bytes <= end
        })?;
        // Exact ranges suffice: a dispatch reaches only the ranges it binds, a copy its own.
        let used_later = steps[read.step + 1..]
            .iter()
            .any(|later| later.touches(&copy.src, copy.src_offset, read.bytes));
        let mapped = block.mapped.as_ref()?;
        (!used_later).then(|| mapped.sub(copy.src_offset, read.bytes))
    };
    let ranges: Vec<Option<MappedRange>> = reads.iter().map(in_place).collect();
    let mut copies: Vec<usize> = reads
        .iter()
        .zip(&ranges)
        .filter_map(|(read, range)| range.as_ref().map(|_| read.step))
        .collect();
    copies.sort_unstable();
    (!copies.is_empty()).then_some(InPlaceReads { ranges, copies })
}

/// Makes every input that is a temporary in mapped memory live from the step's first step: a
/// run that writes its inputs in place writes them before any of its commands run, so no
/// temporary before an input's copy may share its bytes.
fn inputs_live_from_the_start(
    index: &TemporaryIndex,
    inputs: &[CapturedIo],
    steps: &[Step],
    temporaries: &[(Arc<ArrayStorage>, Access)],
    lives: &mut [Option<(usize, usize)>],
) {
    for input in inputs {
        if let Some(Step::Copy(copy)) = steps.get(input.step) {
            index.overlapping(&copy.dst, copy.dst_offset, copy.size, |number| {
                if temporaries[number].0.mapped.is_some() {
                    if let Some(life) = &mut lives[number] {
                        life.0 = 0;
                    }
                }
            });
        }
    }
}

/// The byte offset of each moving copy (by position in `moving`) that `starts` (index slot,
/// start indices) place this run, each start clamped as XLA clamps it or, with `strict`,
/// refused outside the operand ([`start_index`]), as it is for the copies of an empty box
/// (`empty`). A later start of a slot wins, as the later write of it would.
fn moving_offsets(
    moving: &[MovingCopy],
    empty: &[EmptyMoving],
    starts: &[(u32, Vec<i64>)],
    strict: bool,
) -> Result<Vec<(usize, u64)>> {
    let mut offsets = Vec::new();
    for (index, start) in starts {
        // Clamping an empty box's start changes nothing: only a strict run checks it.
        for copy in empty.iter().filter(|c| c.slot == *index && strict) {
            let bounds = start.iter().zip(copy.shape.iter().zip(&copy.sizes));
            for (d, (&s, (&dim, &size))) in bounds.enumerate() {
                start_index(s, dim, size, true, d, RUN)?;
            }
        }
        for (m, copy) in moving.iter().enumerate().filter(|(_, c)| c.slot == *index) {
            let mut offset = 0u64;
            for (d, ((&s, (&dim, &size)), &stride)) in start
                .iter()
                .zip(copy.shape.iter().zip(&copy.sizes))
                .zip(&copy.strides)
                .enumerate()
            {
                offset += start_index(s, dim, size, strict, d, RUN)? * stride;
            }
            offsets.push((m, offset));
        }
    }
    Ok(offsets)
}

/// For each step, the earlier dispatch it is identical to, when it may share that one's bind
/// group and parameter slot: the same kernel, the same bound ranges and the same uniform
/// parameters, neither's parameters set by runs (a parameter slot or a moving start). A step
/// that repeats an op (the same update every layer, a bench's loop) then costs one bind group.
fn shared_dispatches(steps: &[Step], tables: &CaptureTables) -> Vec<Option<usize>> {
    type Key = (usize, Vec<(u32, u64, u64)>, Vec<u8>);
    let mut run_set = vec![false; steps.len()];
    for &(step, _) in &tables.slotted_params {
        run_set[step] = true;
    }
    for moving in &tables.moving {
        run_set[moving.step] = true;
    }
    let mut seen: std::collections::HashMap<Key, Vec<usize>> = Default::default();
    let mut shared = vec![None; steps.len()];
    for (i, step) in steps.iter().enumerate() {
        let Step::Dispatch { kernel, ranges, .. } = step else {
            continue;
        };
        if run_set[i] {
            continue;
        }
        let key = (
            Arc::as_ptr(kernel) as usize,
            ranges
                .iter()
                .map(|r| (r.binding, r.offset, r.size))
                .collect(),
            step.uniform_params()
                .map(<[u8]>::to_vec)
                .unwrap_or_default(),
        );
        let candidates = seen.entry(key).or_default();
        let same_buffers = |&j: &usize| match &steps[j] {
            Step::Dispatch { ranges: theirs, .. } => {
                theirs.iter().zip(ranges).all(|(a, b)| a.buffer == b.buffer)
            }
            _ => false,
        };
        match candidates.iter().find(|j| same_buffers(j)) {
            Some(&first) => shared[i] = Some(first),
            None => candidates.push(i),
        }
    }
    shared
}
