//! `Sequence`: GPU work recorded step by step and submitted once — and the one way any work
//! is recorded. The library's ops and users' kernels alike become steps here; a single op is a
//! library sequence of one, which `submit` hands to the context's gathered ops
//! (`context/gathered.rs`: its bind groups made now, submitted with up to 31 other single ops).
//! A user's sequence is submitted at once: `submit` encodes every step into command buffers
//! inside wgpu error scopes (`step/encode.rs`, the encoder both share; a refusal is an `Err`,
//! and nothing is submitted), writes the parameters, records the submission on every array a
//! step touched (before the work is submitted, so no array's memory is handed out again, and
//! no host read overtakes it), then submits after the gathered ops. Which recorder makes an
//! array pending: the recording model in [`crate::kernels`].

use crate::array::{check_context, check_not_pending, Access, ArrayStorage, DeviceArray};
use crate::context::{Context, ContextInner};
use crate::error::{CaptureRefusal, Error, Result};
use crate::host_link::recorded::RecordedUploads;
use crate::pipelines::ParamsBuffer;
use crate::step::{encode_steps, Step};
use crate::submission::SubmissionId;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Most dispatches whose parameters one command buffer carries; a longer sequence is encoded
/// as several command buffers of this many (in order), all validated before any is submitted,
/// then submitted together. Bounds the context's reused parameter buffer at 4096 slots (1 MiB
/// at 256-byte slots); the pieces after the first take parameter buffers of their own, freed
/// when their work completes.
const MAX_DISPATCHES_PER_SUBMIT: usize = 4096;

/// What a capture recorded, taken out of its sequence: the steps, every array they touch with
/// the strongest use, and the capture's tables.
pub(crate) type TakenCapture = (
    Vec<Step>,
    Vec<(Arc<ArrayStorage>, Access)>,
    Option<Box<super::capture_tables::CaptureTables>>,
);

/// Source of user sequences' numbers (1, 2, ...), which errors about pending arrays name.
static NEXT_SEQUENCE: AtomicU64 = AtomicU64::new(1);

/// Who records a sequence, which decides whether its arrays are pending (the recording model
/// in [`crate::kernels`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Recorder {
    /// A [`Sequence`] the user made with [`Context::sequence`] (numbered for errors): its
    /// arrays are pending until it is submitted or dropped.
    User(u64),
    /// One of the library's single ops, checked and recorded within the call and gathered
    /// into the context's own submission (`context/gathered.rs`): it marks no array pending,
    /// and refuses arrays pending in a user's sequence.
    Library,
}

/// GPU work recorded now and submitted together by [`Sequence::submit`]: kernel launches
/// ([`Sequence::launch`]), the library's ops (`dynamic_update_slice`, `dynamic_slice`, `fill`,
/// `copy`, ...) and uploads ([`Sequence::put`]), in the order recorded, as **one submission**
/// (what `jax.jit` makes of a traced function: one program instead of one launch per op).
///
/// Arrays made by a step exist at once and can be used by later steps. Every array a step
/// touches is kept until the sequence is submitted and its work has completed, even if it is
/// dropped before. Until `submit`, those arrays are *pending* for what would overtake the
/// recorded work ([the recording model](crate::kernels#the-recording-model)): an array the
/// sequence writes cannot be read back or used by a single op, launches included; one it only
/// reads cannot be written by a single op (reading it is fine); such calls return an error
/// naming the sequence. `submit` runs all of the recorded GPU work or none of
/// it. Dropping a sequence without submitting discards its steps and host copies (arrays it
/// made then hold unspecified data; what ran when it was recorded, a zero-copy upload, stays
/// done).
/// The rules: [the recording model](crate::kernels#the-recording-model).
///
/// **Submissions**: `submit` makes one (its command buffers, one per 4096 dispatches, all
/// validated before any is submitted), none for a sequence with no steps (on GL, Metal and
/// DX12 one carries its puts' queued writes even then), and a sequence never
/// costs more submissions than its ops one by one: recorded uploads ride in it (zero-copy
/// writes and wgpu's queued writes need none of their own; only an upload larger than a
/// staging buffer goes out on its own, as `device_put` would), and on a CPU adapter with a
/// mapped arena (lavapipe), where single updates and fills are host copies that submit
/// nothing, a recorded one whose arrays no earlier step touches is a host copy too, made by
/// `submit` (ahead of the steps, once the GPU is done with its arrays). So it runs in submit
/// order, as every step: two sequences that share an array run in the order they are
/// submitted on every adapter. Its arrays are pending until `submit` on every path alike.
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
    /// Every array a step touches, once each, with the strongest use recorded (kept alive
    /// until the work is submitted).
    touched: Vec<(Arc<ArrayStorage>, Access)>,
    /// Index into `touched` by the storage's address.
    touched_index: HashMap<usize, usize>,
    /// The uploads recorded (their staging; whether writes were queued): released when the
    /// sequence is submitted.
    pub(crate) uploads: RecordedUploads,
    recorder: Recorder,
    /// What a [`crate::Capture`] records beside the steps (`compute/capture.rs`); `None` for a
    /// sequence.
    pub(crate) capture: Option<Box<super::capture_tables::CaptureTables>>,
    /// A user's sequence's host copies (the host path of a CPU adapter, `ops/host.rs`), run at
    /// `submit` before its steps, once the GPU work on their arrays is done: so that they
    /// happen in submit order, as the steps do.
    pub(crate) host_work: HostWork,
}

/// Host copies waiting for their sequence's `submit`: each with the arrays whose GPU work it
/// waits for first.
pub(crate) type HostWork = Arc<std::sync::Mutex<Vec<(Vec<Arc<ArrayStorage>>, HostCopy)>>>;

/// One host copy or fill, ready to run.
pub(crate) type HostCopy = Box<dyn FnOnce() + Send>;

impl Context {
    /// Starts a [`Sequence`]: record many launches and ops, submit them once. Until it is
    /// submitted (or dropped), the arrays it records work on are **pending**: single ops and
    /// host reads of an array it writes, and writes of an array it reads, are refused with an
    /// error naming this sequence; reads of an array it only reads go on (see the recording
    /// model in [`crate::kernels`]).
    pub fn sequence(&self) -> Sequence {
        self.recorder(Recorder::User(
            NEXT_SEQUENCE.fetch_add(1, Ordering::Relaxed),
        ))
    }

    /// A sequence for one of the library's single ops: it marks nothing pending and refuses
    /// arrays pending in a user's sequence.
    pub(crate) fn single_op(&self) -> Sequence {
        self.recorder(Recorder::Library)
    }

    fn recorder(&self, recorder: Recorder) -> Sequence {
        Sequence {
            ctx: self.clone(),
            steps: Vec::new(),
            touched: Vec::new(),
            touched_index: HashMap::new(),
            uploads: RecordedUploads::default(),
            recorder,
            capture: None,
            host_work: HostWork::default(),
        }
    }
}

impl Sequence {
    /// The context the sequence records for.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The sequence's number, as refusals name it: `Sequence #N`, the `number` of the
    /// [`Recorder`](crate::error::Recorder) in an [`Error::PendingInRecorder`] (0 for the
    /// library's own single ops, which no caller holds).
    pub fn number(&self) -> u64 {
        match self.recorder {
            Recorder::User(id) => id,
            Recorder::Library => 0,
        }
    }

    /// Renumbers a user recorder before it records anything (a capture marks its number).
    pub(crate) fn set_number(&mut self, id: u64) {
        if let Recorder::User(_) = self.recorder {
            self.recorder = Recorder::User(id);
        }
    }

    /// Ends a capture's recording: its steps, every array they touch with the strongest use,
    /// and its tables. Its arrays stop being pending (the capture becomes a step that submits
    /// them itself, run by run).
    pub(crate) fn take_capture(&mut self) -> TakenCapture {
        let steps = std::mem::take(&mut self.steps);
        let touched = std::mem::take(&mut self.touched);
        for (storage, access) in &touched {
            if let Recorder::User(id) = self.recorder {
                storage.pending.unmark(id, *access);
            }
        }
        self.touched_index.clear();
        (steps, touched, self.capture.take())
    }

    /// Number of steps recorded so far (dispatches, copies and clears, host copies of a CPU
    /// adapter included). It depends on the path as the steps do: an upload (`put`, a host
    /// operand) is a copy out of staging on the staging path and no step where it is written
    /// in place (zero-copy) or rides in wgpu's queue (other backends).
    pub fn len(&self) -> usize {
        let host_copies = self
            .host_work
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len();
        self.steps.len() + host_copies
    }

    /// True when nothing has been recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Notes that the recorded work uses every array of `uses` with its access: each is kept
    /// alive until the work is submitted and, in a user's sequence, pending meanwhile (for
    /// writers only when the sequence only reads it). Checks all of them before marking any, so
    /// a refusal marks nothing: an array of another context ([`Error::ForeignArray`]), and for
    /// a single op a use that would overtake work pending in a user's sequence
    /// (`argument(i)` names the `i`th use in that error).
    pub(crate) fn touch_all(
        &mut self,
        uses: &[(&Arc<ArrayStorage>, Access)],
        operation: &'static str,
        argument: impl Fn(usize) -> String,
    ) -> Result<()> {
        // `check_context` refuses first once the device is lost: recording refuses as
        // submitting does.
        for (i, (storage, access)) in uses.iter().enumerate() {
            check_context(storage, &self.ctx.inner, operation)?;
            if self.recorder == Recorder::Library {
                // The argument's name is only worked out for the refusal.
                if storage.pending.conflict(*access, None).is_some() {
                    check_not_pending(storage, *access, operation, &argument(i))?;
                }
            }
        }
        for (storage, access) in uses {
            let key = Arc::as_ptr(storage) as usize;
            let before = match self.touched_index.get(&key) {
                Some(&index) => {
                    let recorded = &mut self.touched[index].1;
                    let before = *recorded;
                    *recorded = before.max(*access);
                    Some(before)
                }
                None => {
                    self.touched_index.insert(key, self.touched.len());
                    self.touched.push((Arc::clone(*storage), *access));
                    None
                }
            };
            if let Recorder::User(id) = self.recorder {
                storage.pending.mark(id, *access, before);
            }
        }
        Ok(())
    }

    /// Notes that the recorded work uses `array` with `access` ([`Sequence::touch_all`] of
    /// one; `argument` names it in a refusal).
    pub(crate) fn touch_array<T: bytemuck::Pod>(
        &mut self,
        array: &DeviceArray<T>,
        access: Access,
        operation: &'static str,
        argument: &str,
    ) -> Result<()> {
        self.touch_all(&[(&array.storage, access)], operation, |_| {
            argument.to_string()
        })
    }

    /// Whether an op that uses `storage` with `access` may run now instead of in order after
    /// the recorded steps (the host path of `ops/host.rs`): no step recorded so far reads or
    /// writes it, and no other user sequence has recorded work the op would overtake (a write
    /// of it; for a write, any use), this one's own mark aside.
    pub(crate) fn may_run_now(&self, storage: &Arc<ArrayStorage>, access: Access) -> bool {
        let own = if self.recorder == Recorder::Library {
            None
        } else {
            self.touched_index
                .get(&(Arc::as_ptr(storage) as usize))
                .map(|&index| self.touched[index].1)
        };
        let writers = storage.pending.others(Access::Write, own);
        let readers = storage.pending.others(Access::Read, own);
        let free = writers == 0 && (access == Access::Read || readers == 0);
        free && !self.steps.iter().any(|step| {
            step.touches(
                &storage.buffer,
                storage.allocation.offset,
                storage.allocation.size,
            )
        })
    }

    /// Whether this is one of the library's single ops (gathered into the context's batch).
    pub(crate) fn is_single_op(&self) -> bool {
        self.recorder == Recorder::Library
    }

    /// Submits every recorded step, in order, as one submission. A sequence of more than 4096
    /// dispatches is encoded as several command buffers, **every one validated before any is
    /// submitted**, then submitted together: a sequence runs all or nothing. Returns the
    /// submission; a sequence with nothing for the GPU submits nothing and returns
    /// `SubmissionId(0)`: an empty one, or one whose work is all host copies (made here, on a
    /// CPU adapter) and zero-copy uploads (made when recorded). Either way its arrays stop
    /// being pending.
    ///
    /// Errors: [`Error::Device`] with wgpu's message when the device refuses any part of the
    /// work (then no part of it runs); [`Error::DeviceLost`] once the context knows the device
    /// is lost or destroyed (see [`Error::DeviceLost`] for when that is), an empty sequence's
    /// submit included.
    pub fn submit(mut self) -> Result<SubmissionId> {
        if self.capture.is_some() {
            // Only reachable by moving a capture's recorder out of it.
            return Err(recorder_replaced("Sequence::submit"));
        }
        let inner = Arc::clone(&self.ctx.inner);
        if let Err(lost) = inner.check_device("submitting a sequence") {
            // An empty sequence too: the caller learns of the loss here, not at a later read.
            self.finish(SubmissionId(0));
            return Err(lost);
        }
        // The host copies are made, and the steps gathered or submitted, under one hold of the
        // kernel lock, which every thread's work on arrays takes: nothing (another thread's
        // captured run among them) starts on the arrays during a copy or between the two, and
        // a captured run that found an array idle makes its host copies before any op
        // gathered here can use the array.
        let mut kernels = inner.kernels().lock();
        if let Err(error) = self.run_host_work(&inner) {
            drop(kernels);
            self.finish(SubmissionId(0));
            return Err(error);
        }
        let steps = std::mem::take(&mut self.steps);
        let touched = std::mem::take(&mut self.touched);
        let record = |id| {
            for (storage, _) in &touched {
                storage.record_use(id);
            }
        };
        let result = match self.recorder {
            _ if steps.is_empty() => match self.uploads.take_queued_writes() {
                // Only queued uploads: one (empty) submission carries them.
                true => inner
                    .submission("submitting a sequence's uploads")
                    .and_then(|submission| submission.submit([], record, [])),
                false => Ok(SubmissionId(0)),
            },
            // A single op joins the context's gathered ops (`context/gathered.rs`).
            Recorder::Library => inner.gather(steps, record),
            Recorder::User(_) => inner.submit_steps(&mut kernels.params, &steps, record),
        };
        drop(kernels);
        self.touched = touched;
        let last = *result.as_ref().unwrap_or(&SubmissionId(0));
        self.finish(last);
        result
    }

    /// Runs the host copies recorded for this `submit`, in order, each once the GPU work on
    /// its arrays is done; the caller holds the kernel lock (no other thread submits work on
    /// them meanwhile). A host copy was recorded only where no earlier step of the sequence
    /// touches its arrays, so running them ahead of the steps keeps the recorded order.
    fn run_host_work(&self, inner: &ContextInner) -> Result<()> {
        let work = std::mem::take(&mut *self.host_work.lock().unwrap_or_else(|p| p.into_inner()));
        for (arrays, copy) in work {
            for array in &arrays {
                inner.wait_for(array.last_use())?;
            }
            copy();
        }
        Ok(())
    }

    /// Releases the staging buffers and arrays: in a user's sequence its arrays stop being
    /// pending (their last use was recorded before the work was submitted).
    fn finish(&mut self, last: SubmissionId) {
        for (storage, access) in self.touched.drain(..) {
            if let Recorder::User(id) = self.recorder {
                storage.pending.unmark(id, access);
            }
        }
        self.touched_index.clear();
        self.uploads.release(self.ctx.inner.as_ref(), last);
    }
}

impl Drop for Sequence {
    fn drop(&mut self) {
        if !self.is_empty() {
            let (kind, end) = if self.capture.is_some() {
                ("Capture", "finish()")
            } else {
                ("Sequence", "submit()")
            };
            log::warn!(
                "gpu-arena: a {kind} of {} was dropped without {end}; its work was discarded",
                crate::count::count(self.len(), "step")
            );
        }
        self.finish(SubmissionId(0));
    }
}

impl std::fmt::Debug for Sequence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sequence")
            .field("steps", &self.steps.len())
            .field("recorder", &self.recorder)
            .field(
                "dispatches",
                &self
                    .steps
                    .iter()
                    .filter(|s| matches!(s, Step::Dispatch { .. }))
                    .count(),
            )
            .field("arrays", &self.touched.len())
            .finish()
    }
}

impl ContextInner {
    /// Encodes `steps` as command buffers of at most [`MAX_DISPATCHES_PER_SUBMIT`] dispatches
    /// each, every one inside error scopes; only when all are valid, writes their parameters,
    /// calls `record` with the submission (before anything of it can complete) and submits
    /// them together. The
    /// caller holds the kernel lock, which keeps other threads from writing the parameter
    /// slots of `params` between this write and this submit.
    fn submit_steps(
        &self,
        params: &mut ParamsBuffer,
        steps: &[Step],
        record: impl FnOnce(SubmissionId),
    ) -> Result<SubmissionId> {
        // Nothing of a lost device is touched, the parameter buffer included. A user's
        // sequence is what a host read of its results usually follows: it carries the memory
        // dependency to host reads, so that read needs no submission of its own.
        let mut submission = self
            .submission("submitting a gpu-arena sequence")?
            .for_host_read();
        let mut pieces = Vec::new();
        let mut rest = steps;
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
            // The first piece reuses the context's parameter buffer; later ones (only
            // sequences of more than 4096 dispatches) take their own, so no piece's
            // parameters overwrite another's before it runs.
            let mut own = None;
            let buffer = if pieces.is_empty() {
                &mut *params
            } else {
                &mut own
            };
            let alignment = u64::from(self.limits().min_uniform_buffer_offset_alignment);
            let unbound = piece
                .iter()
                .filter(|s| {
                    matches!(
                        s,
                        Step::Dispatch {
                            bind_group: None,
                            ..
                        }
                    )
                })
                .count();
            self.count_bind_groups(unbound as u64);
            let mut timer = self.dispatch_timer(piece);
            let encoded = encode_steps(self.device(), alignment, buffer, piece, timer.as_mut());
            submission.timed(timer);
            match encoded {
                Ok(piece) => pieces.push(piece),
                Err(refusal) => {
                    let during = "encoding a gpu-arena sequence (nothing of it was submitted)";
                    return Err(submission.abandon(during, refusal));
                }
            }
        }
        let mut commands = Vec::with_capacity(pieces.len());
        for (command_buffer, params) in pieces {
            if let Some((buffer, data)) = params {
                // Lands before this submission's commands and after every earlier one's.
                self.write_buffer(&buffer, 0, &data);
            }
            commands.push(command_buffer);
        }
        submission.submit(commands, record, crate::step::dispatch_names(steps, &[]))
    }
}

/// The refusal of a capture's op after its recorder was moved out of it.
pub(crate) fn recorder_replaced(operation: &'static str) -> Error {
    Error::Capture {
        operation,
        refusal: CaptureRefusal::RecorderReplaced,
    }
}
