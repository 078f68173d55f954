//! The public names of compute: users' kernels ([`Kernel`], [`KernelDesc`], [`Launch`],
//! [`Sequence`], captured steps: [`Capture`], [`CapturedStep`], [`StepRun`], [`StepPlan`] and the
//! slots), what reflection reads from a kernel ([`KernelSignature`] and its parts), the
//! compiler's bounds and the compile cache ([`KernelCacheStats`], [`DiskCacheLoad`],
//! [`CACHE_DIR_ENV`]), and kernel tuning ([`KernelTuning`], [`KernelShape`], [`SizeClass`],
//! [`KernelTuningReport`], [`TuningClock`]).
//!
//! A facade: the code lives in three private modules by what it is for, `compute/` (what users
//! call), `ops/` (the library's ops over arrays) and `pipelines/` (compilation, caches, error
//! scopes, below both and below `Context`). The public path stays `gpu_arena::kernels::*`
//! because that is where users' code names these items (and the most used are also at the crate
//! root); the rooms behind it stay private, so the next change of layout changes no user's
//! code. Being compute's public page, it also writes down the rules every recorder follows
//! (below); in code it only re-exports, and nothing inside the crate imports it.
//!
//! # The recording model
//!
//! How gpu-arena orders GPU work and host access when work can be recorded now and submitted later,
//! by any number of threads sharing a [`Context`](crate::Context):
//!
//! - **Recorders.** Work the user records and submits later goes into a *user recorder*: a
//!   [`Sequence`] from [`Context::sequence`](crate::Context::sequence) (and an
//!   [`UploadBatch`](crate::UploadBatch), whose arrays cannot be named until
//!   [`finish`](crate::UploadBatch::finish) submits them). Everything else is a *single op*:
//!   [`Context::launch`](crate::Context::launch)`(..).run()`, `device_get`, `device_put_from` /
//!   `copy_to`, `copy`, `dynamic_slice`, `dynamic_update_slice(_copy)`, `fill_in_place`, `zeros`,
//!   [`gather`](crate::gather), ... A single op is checked and recorded within its call and runs
//!   after every op called before it (below: *gathered*).
//! - **Pending, by access.** An array is *pending* while a user's [`Sequence`] has recorded work
//!   on it and has not been submitted or dropped, and what is pending follows what the recorded
//!   work does to it: an array the sequence **writes** (an `arg_mut` of a launch, the destination
//!   of an op, an upload) is pending for everyone; an array it only **reads** (an `arg` of a
//!   launch, the source of a copy, slice or update) is pending for writers only. Two reads
//!   commute, so readers never refuse readers: threads sharing read-only weights launch, copy,
//!   slice and read them back while other threads record sequences that read them. Only user
//!   recorders make an array pending; the library's single ops never do, so two threads using
//!   one array through single ops both succeed, always.
//! - **Single ops refuse what they would overtake.** Every single op, launches included, checks
//!   every array it is given the same way, with what it does to it: reading an array a pending
//!   sequence writes (it would see the values from before that write), or writing an array a
//!   pending sequence reads or writes (it would run before that work), is refused with
//!   [`Error::PendingInRecorder`](crate::Error::PendingInRecorder). The refusal names the argument
//!   (a launch's binding, `@binding(1) x: array<f32> (read)`; an op's operand), the array (its
//!   label when it has one, its element type and shape) and the sequence (`Sequence #7`), and
//!   says how to order the two: submit that sequence first (when another thread records it,
//!   order this call after that thread's `submit()`), or record the op in it.
//!   Inside a sequence, its own arrays are used freely, in the order recorded; an array pending in
//!   *another* user sequence is accepted too: the two sequences run in the order they are
//!   submitted.
//! - **Captures.** A [`Capture`] ([`Context::capture`](crate::Context::capture)) is a user
//!   recorder like a sequence (its arrays are pending, by access, until it finishes or is
//!   dropped; refusals name it `Capture #N`), except that nothing runs while it records: its
//!   uploads, fills and ops are steps on every path. [`Capture::finish`] makes a
//!   [`CapturedStep`], whose every run is a user submission: checked against pending recorders
//!   like any submission, after the single ops called before it, its arrays in flight until it
//!   completes. Between runs its arrays are not pending.
//! - **What fails records and marks nothing.** A launch or op checks all its arguments (context,
//!   sizes, alignment, element types, pending state) and compiles its kernels before it records a
//!   step or marks an array; a refused step leaves a sequence as it was.
//! - **All or nothing.** [`Sequence::submit`] encodes and validates every part of the sequence
//!   (more than 4096 dispatches are several command buffers) before it submits any, then submits
//!   them together: when it returns an error, no part of the sequence ran.
//! - **Marked in flight before the queue sees the work.** Every submission (sequences, single ops,
//!   transfers, [`Context::raw_submit`](crate::Context::raw_submit)) records itself on the arrays
//!   it uses *before* it is handed to the queue, so another thread's host read of such an array, or
//!   the reuse of its memory after a drop, waits for that work. On Vulkan a host read waits for a
//!   submission that ends with a memory dependency to host reads (the one it reads, when that
//!   carries it, or an empty one made at the read), so that in-place reads see the device's
//!   writes while submissions no read waits for skip it.
//! - **Gathered single ops.** The context gathers single ops into a submission of its own, up to
//!   [`MAX_GATHERED_OPS`] (32, as CubeCL) at a time, so a loop of small launches costs about
//!   what one [`Sequence`] of them costs. Program order holds: the batch is always the context's
//!   next submission (its ops record its id on their arrays as they are called), and every host
//!   read, `synchronize`, [`Context::flush`](crate::Context::flush), wait, user
//!   [`Sequence::submit`], transfer and `raw_submit` submits the gathered ops before its own
//!   work; so does the reuse of a dropped array's memory, and so does taking
//!   [`Context::queue`](crate::Context::queue): the escape hatch is never behind the context's
//!   own work.
//!   Small uploads on the staging path (single `device_put`s and host operands of single ops,
//!   up to [`MAX_GATHERED_UPLOAD_BYTES`](crate::transfer::MAX_GATHERED_UPLOAD_BYTES)) join the
//!   batch too: staged in its own staging and copied by its commands, in call order.
//!   What is pending is bounded: 32 ops, their parameter slots, and
//!   [`GATHERED_STAGING_BYTES`](crate::transfer::GATHERED_STAGING_BYTES) of staged uploads
//!   (reaching either submits the batch).
//! - **Which call reports a device refusal.** The call that records the work reports every
//!   refusal the CPU can know: a single op or `run()` of a single launch (its arguments, the
//!   device's limits, pending arrays, and the device's validation of its bindings, which are
//!   made within the call), [`Sequence::submit`] for recorded work (all or nothing),
//!   `raw_submit`. The device can still refuse gathered ops when they are submitted (a lost
//!   device, an internal error): that is reported, once, by the next call that waits or flushes
//!   (`synchronize`, `flush`, a host read of any array), and then none of that batch ran.

pub use crate::compute::{
    ArraySlot, Capture, CaptureMode, CapturedStep, IndexSlot, InputSlot, ItemCount, Kernel, Launch,
    ParamsSlot, PlannedTemporary, ReadSlot, Sequence, StepPlan, StepRun,
};
pub use crate::kernel_tuning::{KernelShape, KernelTuning, TuningClock};
pub use crate::pipelines::{
    DiskCacheLoad, KernelCacheStats, KernelDesc, KernelSignature, KernelSource, KernelTuningReport,
    ParamsBlock, ParamsKind, SizeClass, StorageBinding, TunedKernel, TunedUserKernel, TuningOrigin,
    CACHE_DIR_ENV, KERNEL_BIND_GROUP, MAX_BINDING_NUMBERS, MAX_ENTRY_POINT_BYTES, MAX_SPIRV_WORDS,
    MAX_WGSL_EXPRESSION_DEPTH, MAX_WGSL_SOURCE_BYTES,
};
pub use crate::step::MAX_GATHERED_OPS;
