//! Gradient checkpointing (rematerialization) for a chain of layers, planned against the
//! arena's own accounting: which activations the forward pass keeps, which the backward pass
//! recomputes, and the exact peak of bytes in use that costs.
//!
//! Training keeps every layer's activation from the forward pass for the backward pass, so
//! activation memory grows with depth. `jax.checkpoint` trades compute for memory: activations
//! it does not save are recomputed from the nearest saved one when the backward pass needs them.
//! gpu-arena has no tracer, so the trade is made explicit: a [`Chain`] lists the layers (the
//! bytes of each activation and what recomputing it costs), a [`CheckpointPolicy`] says how to
//! choose, and [`Chain::plan`] returns a [`Schedule`]: the steps in order (forward, recompute,
//! backward, free), the activations it keeps, the recomputation it costs and its peak bytes in
//! use, counted as the arena counts them (each buffer rounded up to 256 bytes). The caller runs
//! the steps with its own kernels, by hand or through [`Schedule::run`] (in
//! [`crate::backprop`]; this module itself is pure CPU); [`Schedule::replay`] runs them
//! through an [`Arena`](crate::arena::Arena) to confirm the peak and to see what the
//! allocator reserves.
//!
//! The model: activation 0 is the chain's input (the caller's, live throughout); layer `i`
//! (1 to n) reads activation `i − 1` and writes activation `i`. Its backward step reads the
//! gradient of activation `i` and, as the layer's [`BackwardReads`] says, activation `i − 1`
//! (its input: linear layers), activation `i` (its output: ReLU, softmax) or both, and writes
//! the gradient of activation `i − 1` (of the same size; none for the input). Every buffer is
//! freed right after the last step that reads it. Parameters and their gradients are the
//! caller's and do not change with the plan, so they are left out.
//!
//! ```
//! use gpu_arena::remat::{BackwardReads, Chain, CheckpointPolicy, Layer};
//!
//! // 64 layers of 16 MiB activations, each as costly to recompute as the others.
//! let chain = Chain::new(16 << 20, vec![Layer::new(16 << 20, 1.0); 64])?;
//! let all = chain.plan(CheckpointPolicy::SaveAll)?;
//! let sqrt = chain.plan(CheckpointPolicy::Sqrt)?;
//! assert_eq!(all.recompute_cost(), 0.0);
//! assert!(sqrt.peak_bytes() < all.peak_bytes() / 3);
//! // The least recomputation that runs in an arena of 400 MiB.
//! let fit = chain.plan(CheckpointPolicy::Budget(400 << 20))?;
//! assert!(fit.peak_bytes() <= 400 << 20);
//! // A ReLU's backward reads its output rather than its input.
//! let relu = Layer::new(16 << 20, 1.0).with_backward_reads(BackwardReads::Output);
//! let pairs = Chain::new(16 << 20, [Layer::new(16 << 20, 1.0), relu].repeat(32))?;
//! assert!(pairs.plan(CheckpointPolicy::SaveAll)?.peak_bytes() < all.peak_bytes() * 3 / 4);
//! # Ok::<(), gpu_arena::remat::RematError>(())
//! ```
//!
//! Files, one concept each: `chain` (the layers), `policy`, `schedule` (steps and their
//! memory), `planner` (choosing what to keep), `cost` (a plan's predicted step time), `evaluate` (a candidate plan's figures without
//! its steps, so that a search holds no schedules), `replay` (through an arena) and `error`.
//! The budget search is checked against a model that builds every candidate, written on the
//! public API in `tests/host/remat_reference_planner.rs`.
#![deny(unsafe_code)]

mod chain;
mod cost;
mod error;
mod evaluate;
mod planner;
mod policy;
mod replay;
mod schedule;

pub use chain::{BackwardReads, Chain, Layer};
pub use cost::{PredictedStep, StepCosts};
pub use error::RematError;
pub use policy::CheckpointPolicy;
pub use replay::ReplayReport;
pub use schedule::{Buffer, Placement, Schedule, ScheduleStep};

/// The old name of [`ScheduleStep`], kept so code written against it still compiles.
#[deprecated(note = "renamed to `ScheduleStep` (one step of a `Schedule`)")]
pub type Step = ScheduleStep;
