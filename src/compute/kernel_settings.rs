//! What a [`Context`] says and lets tests change about its kernels: the compile cache's
//! statistics, test-only limits that make small arrays take large arrays' paths, and running
//! the WGSL kernels where ops would copy on the host.

use crate::context::Context;
use crate::error::{Error, Result};
use crate::pipelines::KernelCacheStats;

/// The smallest binding [`Context::limit_kernel_resources`] accepts: a piece of 256 bytes plus
/// the slack of rounding its binding out to the 256-byte offset alignment and to 16 bytes.
const MIN_TEST_BINDING_BYTES: u64 = 1024;

impl Context {
    /// How this context's kernels were compiled: pipelines compiled, cache hits, compile times,
    /// the driver pipeline-cache file (`GPU_ARENA_CACHE_DIR`).
    pub fn kernel_cache_stats(&self) -> KernelCacheStats {
        self.inner.kernels.lock().stats()
    }

    /// Makes kernels act as if bindings held at most `max_binding_bytes` and grids had at most
    /// `max_workgroups_per_dimension` workgroups per dimension, so that tests on small arrays
    /// take the paths that large arrays take on a real GPU (chunked bindings, 2-D/3-D grids and
    /// dispatches split past the grid's size). Not for production use.
    ///
    /// Errors: [`Error::InvalidArgument`] for a binding under 1024 bytes or zero workgroups.
    #[doc(hidden)]
    pub fn limit_kernel_resources(
        &self,
        max_binding_bytes: u64,
        max_workgroups_per_dimension: u32,
    ) -> Result<()> {
        if max_binding_bytes < MIN_TEST_BINDING_BYTES || max_workgroups_per_dimension == 0 {
            return Err(Error::InvalidArgument {
                operation: "limit_kernel_resources",
                reason: format!(
                    "bindings of at least {MIN_TEST_BINDING_BYTES} bytes and one workgroup are needed"
                ),
            });
        }
        self.inner.kernels.lock().limits_override = Some((
            max_binding_bytes.min(self.inner.limits.max_storage_buffer_binding_size),
            max_workgroups_per_dimension
                .min(self.inner.limits.max_compute_workgroups_per_dimension),
        ));
        Ok(())
    }

    /// Runs the WGSL kernels even on CPU adapters, where ops otherwise copy on the host
    /// (faster there), so that tests on lavapipe exercise the kernels. Not for production use.
    #[doc(hidden)]
    pub fn force_device_kernels(&self, force: bool) {
        self.inner.kernels.lock().force_device_kernels = force;
    }
}
