//! `Capture`: a step recorded once, to be replayed many times as a [`CapturedStep`] (what
//! `jax.jit` makes of a traced function, and what a CUDA graph is on CUDA).
//!
//! A capture is a [`Sequence`] (it dereferences to one: launches, uploads and the library's ops
//! are recorded the same way, checked the same way, and make their arrays pending the same
//! way) with three differences: nothing runs while it records (host paths and zero-copy writes
//! are recorded as steps too, so that every run repeats them), what may change between runs is
//! named by *slots* (a launch's parameters, an upload's host data, the start of a
//! `dynamic_update_slice` or `dynamic_slice`, a read into host memory), and it ends with
//! [`Capture::finish`] instead of `submit`, which plans the step's memory
//! (`compute/captured_step.rs`).

use super::capture_mode::{CaptureMode, OpenCapture};
use super::capture_tables::{CaptureId, CaptureTables, CapturedIo};
use super::sequence::{recorder_replaced, Sequence};
use crate::array::{Access, DeviceArray};
use crate::context::Context;
use crate::error::{CaptureRefusal, Error, Result, SlotKind};
use crate::step::{BufferCopy, Step};
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Arc;

/// A launch's parameter block that each run of a [`CapturedStep`](super::CapturedStep) may set:
/// made by [`Capture::params_slot`], given to launches with [`crate::Launch::params_slot`] (any
/// number of them: a position every layer reads), set with [`crate::StepRun::params`].
pub struct ParamsSlot<P> {
    pub(crate) capture: CaptureId,
    pub(crate) index: u32,
    pub(crate) initial: Vec<u8>,
    _block: PhantomData<fn() -> P>,
}

/// The host data of an upload that each run of a [`CapturedStep`](super::CapturedStep) may replace:
/// made with its array by [`Capture::input`], set with [`crate::StepRun::input`] (a run that does
/// not set it uploads the data of the last run that did, or the data captured).
pub struct InputSlot<T> {
    pub(crate) capture: CaptureId,
    /// `None` for an empty upload (nothing to copy).
    pub(crate) index: Option<u32>,
    pub(crate) len: usize,
    _element: PhantomData<fn() -> T>,
}

/// An array that each run of a [`CapturedStep`](super::CapturedStep) may replace with another
/// of the same element type, shape and memory kind: made by [`Capture::array_slot`] from an array the
/// capture's ops use, set with [`crate::StepRun::array`] (a run that does not set it uses the
/// array the slot was made from).
pub struct ArraySlot<T> {
    pub(crate) capture: CaptureId,
    pub(crate) index: u32,
    pub(crate) shape: Vec<usize>,
    pub(crate) memory_kind: crate::memory_kind::MemoryKind,
    _element: PhantomData<fn() -> T>,
}

/// Start indices that each run of a [`CapturedStep`](super::CapturedStep) may set, for
/// [`Capture::dynamic_update_slice_at`] and [`Capture::dynamic_slice_at`] (any number of ops:
/// one position for every layer's KV cache). Clamped at each run as XLA clamps.
pub struct IndexSlot {
    pub(crate) capture: CaptureId,
    pub(crate) index: u32,
    pub(crate) rank: usize,
}

/// An array's bytes copied to host memory at each run of a [`CapturedStep`](super::CapturedStep):
/// made by [`Capture::read`], read with [`crate::StepRun::read_into`].
pub struct ReadSlot<T> {
    pub(crate) capture: CaptureId,
    pub(crate) index: Option<u32>,
    pub(crate) len: usize,
    _element: PhantomData<fn() -> T>,
}

macro_rules! slot_debug {
    ($($slot:ident),*) => {$(
        impl<T> std::fmt::Debug for $slot<T> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($slot))
                    .field("capture", &self.capture)
                    .field("index", &self.index)
                    .finish()
            }
        }
    )*};
}
slot_debug!(ParamsSlot, InputSlot, ReadSlot, ArraySlot);

impl std::fmt::Debug for IndexSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexSlot")
            .field("capture", &self.capture)
            .field("index", &self.index)
            .field("rank", &self.rank)
            .finish()
    }
}

/// A step being captured: record it as a [`Sequence`] (this dereferences to one), name what changes
/// between runs with slots, then [`Capture::finish`] it into a
/// [`CapturedStep`](super::CapturedStep) that runs it again and again as one submission, with no
/// allocation and no bind group made.
///
/// - **Arrays.** The step is captured over real arrays. Arrays made before the capture are its
///   inputs (and, when it writes them, its in-place outputs: a donated KV cache stays the same
///   array across runs). Arrays made by the capture's ops and still held when it finishes are
///   its outputs, fixed arrays that every run rewrites (as CUDA-graph outputs are). Arrays made
///   by the capture and dropped before it finishes are its temporaries: `finish` gives them
///   offsets in one block by liveness ([`crate::arena::assign_buffers`]; several blocks where
///   the device's largest array is smaller than that block) and their own memory goes back to
///   the arena.
/// - **Nothing runs while capturing.** Uploads, zero fills and the library's ops are recorded
///   as steps on every path (also where a single op would write host memory at once), and the
///   first run is the first time any of it runs: outputs hold unspecified data until then.
/// - **Pending.** The arrays a capture records on are pending, by access, until it finishes
///   or is dropped, exactly as a sequence's (the recording model in [`crate::kernels`]).
///
/// ```no_run
/// # let ctx = gpu_arena::Context::new(Default::default())?;
/// # let k = ctx.kernel("@group(0) @binding(0) var<uniform> p: u32;
/// #   @group(0) @binding(1) var<storage, read_write> a: array<u32>;
/// #   @compute @workgroup_size(64) fn main(@builtin(global_invocation_id) i: vec3<u32>) {
/// #   if (i.x < arrayLength(&a)) { a[i.x] = a[i.x] + p; } }", "main")?;
/// let cache = ctx.zeros::<u32>(&[16, 64])?;
/// let mut cap = ctx.capture();
/// let (mut row, new_row) = cap.input(&[0u32; 64], &[1, 64])?; // host data set per run
/// let add = cap.params_slot(&0u32);                           // parameters set per run
/// cap.launch(&k).arg_mut(&mut row).params_slot(&add).grid_for(64).run()?;
/// let at = cap.index_slot(&[0, 0]);                           // start set per run
/// let cache = cap.dynamic_update_slice_at(cache, &row, &at)?; // in place, donated
/// drop(row);                                                  // a temporary
/// let mut step = cap.finish()?;
/// println!("{}", step.plan());
/// for t in 0..16u32 {
///     step.run().input(&new_row, &[t; 64]).params(&add, &1).start(&at, &[t as i64, 0]).submit()?;
/// }
/// assert_eq!(ctx.device_get(&cache)?[64 * 3], 4);
/// # Ok::<(), gpu_arena::Error>(())
/// ```
pub struct Capture {
    pub(crate) sequence: Sequence,
    /// Its entry among the open captures, for the capture mode ([`CaptureMode`]).
    pub(crate) open: OpenCapture,
}

impl Context {
    /// Starts a [`Capture`]: a step recorded once and replayed by the
    /// [`CapturedStep`](super::CapturedStep) that [`Capture::finish`] makes.
    pub fn capture(&self) -> Capture {
        let mut sequence = self.sequence();
        let id = CaptureId::of_sequence(sequence.number());
        sequence.set_number(id.mark());
        let placeholder = self.inner.device().create_buffer(&wgpu::BufferDescriptor {
            label: Some("gpu-arena capture placeholder"),
            size: 4,
            usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        sequence.capture = Some(Box::new(CaptureTables {
            id,
            created: HashMap::new(),
            slotted_params: Vec::new(),
            param_slots: Vec::new(),
            inputs: Vec::new(),
            upload_bytes: Vec::new(),
            reads: Vec::new(),
            readback_bytes: 0,
            moving: Vec::new(),
            empty_moving: Vec::new(),
            index_slots: Vec::new(),
            array_slots: Vec::new(),
            placeholder,
            transfers: Vec::new(),
        }));
        let open = OpenCapture::open(self, id.number());
        Capture { sequence, open }
    }
}

impl std::ops::Deref for Capture {
    type Target = Sequence;
    fn deref(&self) -> &Sequence {
        &self.sequence
    }
}

impl std::ops::DerefMut for Capture {
    fn deref_mut(&mut self) -> &mut Sequence {
        &mut self.sequence
    }
}

impl Capture {
    /// The capture's tables, or the refusal of `operation` when the recorder was moved out of
    /// the capture (`std::mem::replace` through `DerefMut`): it records for no capture then.
    pub(crate) fn tables(&mut self, operation: &'static str) -> Result<&mut CaptureTables> {
        self.sequence
            .capture
            .as_deref_mut()
            .ok_or_else(|| recorder_replaced(operation))
    }

    /// The capture's number, as refusals name it (`Capture #N`).
    pub fn number(&self) -> u64 {
        CaptureId::of_sequence(self.sequence.number()).number()
    }

    /// What eager work on the context from the thread that opened this capture does while it
    /// is open: refused by default ([`CaptureMode::ThreadLocal`]: a `ctx.launch(..)` meant as
    /// `cap.launch(..)` would run at once and not be part of the step), or let through on
    /// purpose ([`CaptureMode::Relaxed`]). Other threads are never refused.
    ///
    /// ```no_run
    /// # let ctx = gpu_arena::Context::new(Default::default())?;
    /// use gpu_arena::CaptureMode;
    /// let mut cap = ctx.capture();
    /// assert!(ctx.fill(&[4], 1u32).is_err()); // eager, on the capturing thread: refused
    /// cap.set_mode(CaptureMode::Relaxed);
    /// let ones = ctx.fill(&[4], 1u32)?;       // runs now, not part of the step
    /// # Ok::<(), gpu_arena::Error>(())
    /// ```
    pub fn set_mode(&mut self, mode: CaptureMode) {
        self.open.set_mode(mode);
    }

    /// A parameter block that runs may set, starting as `initial`: give it to launches with
    /// [`crate::Launch::params_slot`]. Made after the capture's recorder was moved out of it,
    /// the slot belongs to no capture, and every use of it is refused.
    pub fn params_slot<P: bytemuck::Pod>(&mut self, initial: &P) -> ParamsSlot<P> {
        let (capture, index) = match self.tables("Capture::params_slot") {
            Ok(tables) => {
                tables
                    .param_slots
                    .push(bytemuck::bytes_of(initial).to_vec());
                (tables.id, tables.param_slots.len() as u32 - 1)
            }
            Err(_) => (CaptureId::NONE, 0),
        };
        ParamsSlot {
            capture,
            index,
            initial: bytemuck::bytes_of(initial).to_vec(),
            _block: PhantomData,
        }
    }

    /// An upload whose host data runs may replace: a new array of `shape` holding `data` (as
    /// [`Sequence::put`]), and the slot that sets its data at each run (the same number of
    /// elements). The copy runs at this point of the step, after what was recorded before it.
    ///
    /// Guarded as [`Sequence::put`] is, but counted by no transfer statistic now (nothing
    /// moves while capturing): a run that sets the slot counts its data as an explicit
    /// transfer ([`crate::StepRun::input`]); the data captured here, or set by an earlier run,
    /// goes into the array from the step's own staging and is not counted again.
    ///
    /// Errors: as [`Sequence::put`]; [`Error::Capture`] with
    /// [`CaptureRefusal::RecorderReplaced`] when the capture's recorder was moved out of it
    /// (nothing is recorded).
    #[track_caller]
    pub fn input<T: bytemuck::Pod>(
        &mut self,
        data: &[T],
        shape: &[usize],
    ) -> Result<(DeviceArray<T>, InputSlot<T>)> {
        const OPERATION: &str = "Capture::input";
        let before = self.tables(OPERATION)?.inputs.len();
        let array = self.sequence.put_guarded(data, shape, true, OPERATION)?;
        let tables = self.tables(OPERATION)?;
        let index = (tables.inputs.len() > before).then_some(before as u32);
        Ok((
            array,
            InputSlot {
                capture: tables.id,
                index,
                len: data.len(),
                _element: PhantomData,
            },
        ))
    }

    /// Makes `array` (one made outside the capture: a KV cache, weights, an output) a slot that
    /// each run may bind another array to: every op of the step that uses `array` uses, in a
    /// run that sets the slot ([`crate::StepRun::array`]), the run's array instead, in place,
    /// as a CUDA graph's replay with updated kernel arguments does. A server decoding for
    /// several requests, each with its own cache, captures the step once. Make the slot before
    /// or after the ops that use the array; a run that does not set it uses `array`.
    ///
    /// ```no_run
    /// # let ctx = gpu_arena::Context::new(Default::default())?;
    /// # let k = ctx.kernel("@group(0) @binding(0) var<storage, read_write> a: array<u32>; @compute @workgroup_size(64) fn main(@builtin(global_invocation_id) i: vec3<u32>) { if (i.x < arrayLength(&a)) { a[i.x] += 1u; } }", "main")?;
    /// let mut first = ctx.zeros::<u32>(&[64])?;
    /// let mut second = ctx.zeros::<u32>(&[64])?;
    /// let mut cap = ctx.capture();
    /// let cache = cap.array_slot(&first)?;
    /// cap.launch(&k).arg_mut(&mut first).grid_for(64).run()?;
    /// let mut step = cap.finish()?;
    /// step.run().submit()?;                          // on `first`
    /// step.run().array(&cache, &mut second).submit()?; // the same step on `second`
    /// # Ok::<(), gpu_arena::Error>(())
    /// ```
    ///
    /// Errors: [`Error::ForeignArray`] for an array of another context; [`Error::Capture`]
    /// with [`CaptureRefusal::ArrayMadeByCapture`] for an array made by this capture (its
    /// memory is the step's own) and [`CaptureRefusal::RecorderReplaced`] as for every op.
    pub fn array_slot<T: bytemuck::Pod>(&mut self, array: &DeviceArray<T>) -> Result<ArraySlot<T>> {
        const OPERATION: &str = "Capture::array_slot";
        self.ctx.inner.check_device(OPERATION)?;
        array.check_same_context(&self.ctx.inner, OPERATION)?;
        let tables = self.tables(OPERATION)?;
        if tables
            .created
            .contains_key(&(Arc::as_ptr(&array.storage) as usize))
        {
            return Err(Error::Capture {
                operation: OPERATION,
                refusal: CaptureRefusal::ArrayMadeByCapture,
            });
        }
        let index = match tables
            .array_slots
            .iter()
            .position(|s| Arc::ptr_eq(s, &array.storage))
        {
            Some(index) => index,
            None => {
                tables.array_slots.push(Arc::clone(&array.storage));
                tables.array_slots.len() - 1
            }
        };
        Ok(ArraySlot {
            capture: tables.id,
            index: index as u32,
            shape: array.shape().to_vec(),
            memory_kind: array.memory_kind(),
            _element: PhantomData,
        })
    }

    /// Start indices that runs may set, starting as `initial` (one per dimension of the arrays
    /// they will index): for [`Capture::dynamic_update_slice_at`] and
    /// [`Capture::dynamic_slice_at`]. Made after the capture's recorder was moved out of it,
    /// the slot belongs to no capture, and every use of it is refused.
    pub fn index_slot(&mut self, initial: &[i64]) -> IndexSlot {
        let (capture, index) = match self.tables("Capture::index_slot") {
            Ok(tables) => {
                tables.index_slots.push(initial.to_vec());
                (tables.id, tables.index_slots.len() as u32 - 1)
            }
            Err(_) => (CaptureId::NONE, 0),
        };
        IndexSlot {
            capture,
            index,
            rank: initial.len(),
        }
    }

    /// Copies `array` to host memory at this point of every run: read it with
    /// [`crate::StepRun::read_into`] (the run then waits for the step).
    ///
    /// An array another recorder's unsubmitted work writes is accepted, as in every recorded
    /// op: the two run in the order they are submitted (see the recording model).
    ///
    /// Errors: [`Error::ForeignArray`] for an array of another context; [`Error::Capture`] with
    /// [`CaptureRefusal::RecorderReplaced`] when the capture's recorder was moved out of it
    /// (nothing is recorded).
    pub fn read<T: bytemuck::Pod>(&mut self, array: &DeviceArray<T>) -> Result<ReadSlot<T>> {
        const OPERATION: &str = "Capture::read";
        self.tables(OPERATION)?;
        self.sequence
            .touch_array(array, Access::Read, OPERATION, "the array")?;
        let bytes = array.size_in_bytes();
        let tables = self.tables(OPERATION)?;
        let id = tables.id;
        if bytes == 0 {
            return Ok(ReadSlot {
                capture: id,
                index: None,
                len: 0,
                _element: PhantomData,
            });
        }
        let padded = bytes.next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT);
        let offset = tables.readback_bytes;
        tables.readback_bytes += padded;
        let index = tables.reads.len() as u32;
        let step = self.sequence.steps.len();
        let tables = self.tables(OPERATION)?;
        tables.reads.push(CapturedIo {
            step,
            offset,
            bytes,
        });
        let placeholder = tables.placeholder.clone();
        self.sequence.steps.push(Step::Copy(BufferCopy {
            src: array.storage.buffer.clone(),
            src_offset: array.storage.allocation.offset,
            dst: placeholder,
            dst_offset: offset,
            size: padded,
        }));
        Ok(ReadSlot {
            capture: id,
            index: Some(index),
            len: array.len(),
            _element: PhantomData,
        })
    }
}

impl std::fmt::Debug for Capture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capture")
            .field("number", &self.number())
            .field("steps", &self.sequence.steps.len())
            .finish()
    }
}

impl Sequence {
    /// [`Context::alloc`] for this recorder: a new array whose contents are unspecified until
    /// a recorded op writes them, made now and recording nothing. In a capture, one dropped
    /// before `finish` is a temporary like any other, and no run spends a command clearing it:
    /// use it for an output that a kernel writes in full, where [`Sequence::fill`] would add a
    /// clear to every run.
    ///
    /// Errors: as [`Context::alloc`] (shape errors, out-of-memory).
    ///
    /// ```no_run
    /// # let ctx = gpu_arena::Context::new(gpu_arena::ArenaConfig::default())?;
    /// let mut cap = ctx.capture();
    /// let scratch = cap.alloc::<f32>(&[64, 256])?; // written in full by a kernel of the step
    /// # Ok::<(), gpu_arena::Error>(())
    /// ```
    #[track_caller]
    pub fn alloc<T: bytemuck::Pod>(&mut self, shape: &[usize]) -> Result<DeviceArray<T>> {
        self.new_array(shape, None, "alloc")
    }

    /// Makes an array of device memory for one of this recorder's ops, `operation` (a
    /// result, an upload).
    #[track_caller]
    pub(crate) fn new_array<T: bytemuck::Pod>(
        &mut self,
        shape: &[usize],
        bytes: Option<u64>,
        operation: &'static str,
    ) -> Result<DeviceArray<T>> {
        self.new_array_in(
            crate::memory_kind::MemoryKind::Device,
            shape,
            bytes,
            operation,
        )
    }

    /// Makes an array of `kind` for one of this recorder's ops: a capture notes one of device
    /// memory, so that it becomes a temporary in the step's block if the user drops it before
    /// `finish`; one of another kind stays an array of its own that every run writes.
    #[track_caller]
    pub(crate) fn new_array_in<T: bytemuck::Pod>(
        &mut self,
        kind: crate::memory_kind::MemoryKind,
        shape: &[usize],
        bytes: Option<u64>,
        operation: &'static str,
    ) -> Result<DeviceArray<T>> {
        self.new_array_at(
            kind,
            shape,
            bytes,
            operation,
            std::panic::Location::caller(),
        )
    }

    /// [`Sequence::new_array_in`] for the user's call at `site`.
    pub(crate) fn new_array_at<T: bytemuck::Pod>(
        &mut self,
        kind: crate::memory_kind::MemoryKind,
        shape: &[usize],
        bytes: Option<u64>,
        operation: &'static str,
        site: &'static std::panic::Location<'static>,
    ) -> Result<DeviceArray<T>> {
        let array = match bytes {
            Some(bytes) => {
                (self.ctx).alloc_bytes::<T>(kind, shape, bytes, None, operation, site)?
            }
            None => self.ctx.alloc_as_at::<T>(kind, shape, operation, site)?,
        };
        if let (Some(tables), crate::memory_kind::MemoryKind::Device) = (&mut self.capture, kind) {
            tables.created.insert(
                Arc::as_ptr(&array.storage) as usize,
                Arc::downgrade(&array.storage),
            );
        }
        Ok(array)
    }

    /// Whether this recorder is a capture (nothing may run while it records).
    pub(crate) fn is_capture(&self) -> bool {
        self.capture.is_some()
    }

    /// Counts an explicit transfer of `bytes` between arrays that began at `started`: now, or,
    /// in a capture, at every run (which guards it again), since recording moves nothing.
    pub(crate) fn count_array_transfer(
        &mut self,
        direction: crate::guard_levels::TransferDirection,
        bytes: u64,
        started: std::time::Instant,
    ) {
        match &mut self.capture {
            Some(tables) => tables.transfers.push((direction, bytes)),
            None => (self.ctx.inner).count_transfer(direction, true, 1, bytes, started),
        }
    }

    /// Records an upload of `bytes` into `array` as a copy from the capture's upload buffer
    /// (which holds the data from `finish` on), or `None` when this is not a capture.
    pub(crate) fn record_captured_upload<T: bytemuck::Pod>(
        &mut self,
        array: &DeviceArray<T>,
        bytes: &[u8],
    ) -> Option<()> {
        let step = self.steps.len();
        let tables = self.capture.as_mut()?;
        let offset = tables.upload_bytes.len() as u64;
        let padded = (bytes.len() as u64).next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT);
        tables.upload_bytes.extend_from_slice(bytes);
        tables.upload_bytes.resize((offset + padded) as usize, 0);
        tables.inputs.push(CapturedIo {
            step,
            offset,
            bytes: bytes.len() as u64,
        });
        let placeholder = tables.placeholder.clone();
        self.steps.push(Step::Copy(BufferCopy {
            src: placeholder,
            src_offset: offset,
            dst: array.storage.buffer.clone(),
            dst_offset: array.storage.allocation.offset,
            size: padded,
        }));
        Some(())
    }

    /// Errors unless this recorder is capture `capture`, whose parameter slot a launch names
    /// ([`Error::Capture`], before anything is recorded).
    pub(crate) fn check_params_slot(&self, capture: CaptureId) -> Result<()> {
        match &self.capture {
            Some(tables) if tables.id == capture => Ok(()),
            _ if capture == CaptureId::NONE => Err(recorder_replaced("launch")),
            recorded_in => Err(Error::Capture {
                operation: "launch",
                refusal: CaptureRefusal::ForeignSlot {
                    slot: SlotKind::Params,
                    slot_capture: capture.number(),
                    capture: recorded_in.as_ref().map(|tables| tables.id.number()),
                },
            }),
        }
    }

    /// Notes that the launch just recorded (the last step) takes its parameters from slot
    /// `index` (checked by [`Sequence::check_params_slot`]).
    pub(crate) fn note_params_slot(&mut self, index: u32) {
        let step = self.steps.len().wrapping_sub(1);
        if let Some(tables) = &mut self.capture {
            tables.slotted_params.push((step, index));
        }
    }
}
