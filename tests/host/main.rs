//! The tests that need no GPU, one binary: the allocator, the memory policy on real tables,
//! the profile readers and the crate's manifest, on the CPU alone.
//!
//! Apart, by need: `tests/config_env.rs` (it changes the process's variables),
//! `tests/module_flow.rs` (the crate's import rules, read from the sources) and `tests/gpu/`
//! (every test that opens a context, under the GPU harness).
//!
//! Below: one module per behaviour, each with a doc that says which.

mod adversary_config;
mod arena_behaviour;
mod arena_errors;
mod arena_model;
mod config_variables;
mod crate_manifest;
mod hostile_host_inputs;
mod memplan_tables;
mod remat_reference_planner;
mod report_any_numbers;
mod thread_safety;
mod timeline_readers;
