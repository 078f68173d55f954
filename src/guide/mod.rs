//! The guide: one chapter per topic, each a page of Markdown under `src/guide/` (the README is
//! the front page: what the crate is, the two commands, a first program and a map of these
//! chapters). Every code block of a chapter is compiled and tested as a doctest.
//!
//! - [`kernels`]: your own kernels, checked launches, views, sequences, gathered single ops,
//!   in-place updates on donated arrays.
//! - [`capture`]: steps compiled once, slots, the memory plan, capture modes.
//! - [`coming_from`]: JAX, wgpu and CubeCL words mapped to gpu-arena's.
//! - [`app_device`]: the arena on your app's own wgpu device.
//! - [`configuration`]: the variables and the vendor-aware memory policy.
//! - [`device_report`]: a report of your GPU.
//! - [`memory`]: statistics, snapshots, leaks, kernel times, the timeline and the report.
//! - [`memory_spaces`]: memory kinds (device and pinned host), offload and prefetch.
//! - [`checkpointing`]: gradient checkpointing under a memory budget.
//! - [`devices`]: several devices per process.
//! - [`mpi`]: collectives across machines (feature `mpi`).
//! - [`changes`]: what changed since the last release, and how to move.

#[doc = include_str!("kernels.md")]
pub mod kernels {}

#[doc = include_str!("capture.md")]
pub mod capture {}

#[doc = include_str!("coming_from.md")]
pub mod coming_from {}

#[doc = include_str!("app_device.md")]
pub mod app_device {}

#[doc = include_str!("configuration.md")]
pub mod configuration {}

#[doc = include_str!("device_report.md")]
pub mod device_report {}

#[doc = include_str!("memory.md")]
pub mod memory {}

#[doc = include_str!("memory_spaces.md")]
pub mod memory_spaces {}

#[doc = include_str!("checkpointing.md")]
pub mod checkpointing {}

#[doc = include_str!("devices.md")]
pub mod devices {}

#[doc = include_str!("mpi.md")]
pub mod mpi {}

#[doc = include_str!("changes.md")]
pub mod changes {}
