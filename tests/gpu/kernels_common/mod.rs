//! Contexts for the kernel tests. On a CPU adapter (lavapipe in CI) the ops copy on the host,
//! so each test runs twice: once forcing the WGSL kernels, once on the adapter's own choice.

use crate::harness::{context, context_with, test_config};
use gpu_arena::{ArenaConfig, Context};

/// A test context whose ops run the WGSL kernels even on a CPU adapter.
pub fn kernel_context() -> Context {
    context_with(ArenaConfig {
        force_device_kernels: true,
        ..test_config()
    })
}

/// Both paths, named for messages: the kernels, and the adapter's choice.
pub fn both_paths() -> [(&'static str, Context); 2] {
    [("kernels", kernel_context()), ("default", context())]
}
