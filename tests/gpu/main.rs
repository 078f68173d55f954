//! The GPU tests, one binary: every test that opens a context runs here, under one harness
//! (`harness/`). Each test carries `#[gpu_test]` instead of `#[test]`, and the harness fails it
//! if the Vulkan validation layer logged an error, so no test checks by hand. The tests run
//! one at a time (Debian's validation layer races when one thread opens a device while
//! another calls Vulkan: `harness::AfterTest`); a test's own threads still run together. One
//! binary also links wgpu once instead of once per file.
//!
//! Apart, by need: `tests/kernels_pipeline_disk_cache.rs` (it sets the process's
//! `GPU_ARENA_CACHE_DIR`, which every context of a shared process would read),
//! `tests/distributed.rs` (MPI, under `mpirun`), `tests/module_flow.rs` (it reads the
//! sources), and the tests with no GPU at all (`tests/host/`, `tests/config_env.rs`).
//!
//! Below: one module per behaviour, each with a doc that says which.
#[macro_use]
extern crate gpu_arena_test_macro;

/// The training example's data, at the crate root where its `mlp.rs` (a module of `train`)
/// finds it, as in the example.
#[path = "../../examples/train/data.rs"]
mod data;
mod harness;
mod kernels_common;

mod app_device;
mod backprop;
mod bar_writes;
mod captured_steps;
mod captured_steps_adversary;
mod device_layer;
mod device_report_table;
mod gathered_ops;
mod gathered_ops_adversary;
mod gathered_uploads;
mod harness_checks;
mod hostile_inputs;
mod kernel_checks;
mod kernel_tuning;
mod kernels_dus;
mod kernels_fill_copy;
mod kernels_limits;
mod kernels_pipelines;
mod kernels_slice;
mod memory_kinds;
mod memory_ownership;
mod multi_device;
mod noncoherent;
mod profile_kernel_times;
mod profile_report;
mod profile_sites;
mod profile_snapshot;
mod profile_timeline;
mod public_ops_model;
mod public_ops_threads;
mod recording_model;
mod reexports;
mod refusal_texts;
mod remat;
mod submission_counts;
mod sync_validation;
mod train;
mod transfers;
mod transfers_adversary;
mod user_kernels;
