//! `Step`: one piece of recorded GPU work (a dispatch, a copy or a clear), as a
//! [`Sequence`](crate::Sequence) or the context's gathered single ops hold it until it is
//! encoded. Users' launches (`compute/launch.rs`), the library's ops (`ops/builtin.rs`),
//! recorded uploads (`compute/recorded_upload.rs`) and `Context::zeros` (`array.rs`) all make
//! steps; `compute/sequence.rs` submits a user's sequence and `context/gathered.rs` the single
//! ops: so the step lives on the floor below all of them, beside `submission.rs`, which numbers
//! what is submitted.
//!
//! Files: `mod.rs` (this list and the re-exports), `step.rs` (the step and the byte ranges
//! a dispatch binds), `encode.rs` (steps into one command buffer, the one encoder of
//! every recorded dispatch), `gathered_steps.rs` (the batch of single ops a context has
//! gathered and not yet submitted, with their parameter slots), `timestamps.rs` (the query sets
//! that time each dispatch on the GPU when the context's timeline is on).
//!
//! **May import**: `pipelines` (a dispatch holds its compiled kernel; encoding happens inside
//! error scopes) and wgpu; nothing above (`context`, `array`, `compute`, `ops`, `transfer`,
//! `submission`). A step knows buffers and byte ranges, not arrays. `tests/module_flow.rs`
//! checks this.

mod encode;
mod gathered_steps;
#[allow(clippy::module_inception)]
mod step;
mod timestamps;

pub(crate) use encode::{bind_group, encode_bound_steps, encode_steps};
pub(crate) use gathered_steps::GatheredSteps;
pub use gathered_steps::MAX_GATHERED_OPS;
pub(crate) use step::{dispatch_names, BoundRange, BufferCopy, Step};
pub(crate) use timestamps::{timestamp_buffers, DispatchTimer};
