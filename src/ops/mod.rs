//! The library's own ops over arrays, each recorded as steps of a [`Sequence`](crate::Sequence)
//! and compiled through the same path as users' kernels: `dynamic_update_slice` (in place when
//! the operand is donated), `dynamic_update_slice_copy`, `dynamic_slice`, `fill`,
//! `fill_in_place` and `copy`, as methods of [`Context`](crate::Context) and of `Sequence`.
//!
//! - one file per op: `update_slice`, `dynamic_slice`, `fill`, `copy`.
//! - `slice_indices`: XLA's index semantics (rank checks, clamped starts).
//! - `geometry`: which bytes move where, split to fit one binding and one dispatch (pure).
//! - `builtin`: the library's kernels as sequence steps (grids cut to the device's limits).
//! - `host`: on CPU adapters with zero-copy memory, the same ops as host `memcpy`s.
//! - `host_link_bandwidth`: `Context::host_link_bandwidth`, offload and prefetch timed once
//!   per device and kept with the tuned kernel choices.
//! - `tuner`: kernel tuning's measuring: every shape of a library kernel timed on the device,
//!   the fastest kept (`pipelines::tuned_choices` keeps the choices).
//! - `stopwatch`: how the tuner times a submission (device timestamps, else the wall clock).
//! - `moving_copy`: `dynamic_update_slice` and `dynamic_slice` in a [`Capture`](crate::Capture)
//!   whose start each run sets (one dispatch over whole bindings, its bases rewritten per run).
//!
//! The kernels themselves are `shaders/*.wgsl`, one per file, built into the crate; the
//! kernels are `pipelines::Builtin`, each in any [`KernelShape`](crate::KernelShape).
//!
//! **May import**: `compute` (to record into a `Sequence`), `pipelines`, `step`, `context`,
//! `array`, `donated`, `transfer`, `error`, `arena`, `backend`; nothing imports it but the
//! crate root: an op is a leaf, never a floor for another module. `tests/module_flow.rs`
//! checks this.
#![deny(unsafe_code)]

mod builtin;
mod copy;
mod dynamic_slice;
mod fill;
mod geometry;
mod host;
mod host_link_bandwidth;
mod moving_copy;
mod slice_indices;
mod stopwatch;
mod tuner;
mod update_slice;
