//! What users call to run their own kernels over arena arrays: [`Kernel`] (compiled once per
//! context and reflected), [`Launch`] (every argument checked against the kernel's signature
//! before anything is recorded) and [`Sequence`] (launches, uploads and the library's ops
//! recorded, then submitted as one submission). The library's ops (`ops/`) record their steps
//! in a sequence too.
//!
//! - `user_kernel`: [`Kernel`], `Context::kernel` and `Context::kernel_with` (its
//!   [`KernelDesc`](crate::kernels::KernelDesc) is `pipelines/source.rs`: what the cache compiles).
//! - `launch`: [`Launch`], the checked launch of a user's kernel.
//! - `sequence`: [`Sequence`] and its submission (through the context's one submission path,
//!   `context/submit.rs`).
//! - `capture`: [`Capture`], a sequence recorded once to be replayed, and its slots (what a
//!   run may change).
//! - `capture_tables`: what a capture records beside its steps (arrays made, where slots act),
//!   read by the sequence that carries them, the capture and the captured step.
//! - `captured_step`: [`CapturedStep`], a finished capture: its memory plan ([`StepPlan`]) and
//!   its runs ([`StepRun`]).
//! - `recorded_upload`: uploads recorded in a [`Sequence`] (`Sequence::put`, host operands).
//! - `step_staging`: a captured step's host data path (mapped staging on Vulkan, wgpu's
//!   buffers elsewhere; inputs written in place on UMA).
//! - `array_slots`: a captured step's array slots: the steps each slot's array is used in, and
//!   the bind groups made for the arrays runs bind in its place.
//! - `capture_mode`: [`CaptureMode`], what an open capture does to eager single ops and
//!   launches from the thread that opened it.
//! - `temporaries`: a captured step's temporaries by buffer and offset: their lives and their
//!   move into the block, in one pass over the steps.
//! - `kernel_settings`: `Context::kernel_cache_stats` and `Context::kernel_tuning`, what the
//!   context says of its kernels.
//! - `tuned_kernel`: `Context::tune_kernel`, a user's kernel tuned over the values of one of
//!   its override constants.
//!
//! Compilation, reflection, device limits and source bounds are `pipelines/` (below this
//! module, shared with the library's ops); the recorded steps are `step/`.
//!
//! **May import**: `pipelines`, `step`, `context`, `array`, `view`, `transfer`, `host_link`,
//! `trace`, `submission`, `error`, `backend`; never `ops` (the library's ops are built on this module, not
//! under it) nor the `kernels` facade. `tests/module_flow.rs` checks this.
#![deny(unsafe_code)]

mod array_slots;
mod capture;
mod capture_mode;
mod capture_tables;
mod captured_step;
mod kernel_settings;
mod launch;
mod recorded_upload;
mod sequence;
mod step_staging;
mod temporaries;
mod tuned_kernel;
mod user_kernel;

pub use capture::{ArraySlot, Capture, IndexSlot, InputSlot, ParamsSlot, ReadSlot};
pub use capture_mode::CaptureMode;
pub(crate) use capture_tables::{BaseOverflow, CaptureId, EmptyMoving, HostBox, MovingCopy};
pub use captured_step::{CapturedStep, PlannedTemporary, StepPlan, StepRun};
pub use launch::{ItemCount, Launch};
pub use sequence::Sequence;
pub(crate) use sequence::{recorder_replaced, HostCopy, HostWork};
pub(crate) use tuned_kernel::{measuring_job, Measure};
pub use user_kernel::Kernel;
