//! What a [`Context`] says about its kernels: the compile cache's statistics. (The limits that
//! make small arrays take large arrays' paths, and running the WGSL kernels where ops would
//! copy on the host, are [`ArenaConfig`](crate::ArenaConfig) fields.)

use crate::context::Context;
use crate::pipelines::KernelCacheStats;

impl Context {
    /// How this context's kernels were compiled: pipelines compiled, cache hits, compile times,
    /// the driver pipeline-cache file (`GPU_ARENA_CACHE_DIR`).
    pub fn kernel_cache_stats(&self) -> KernelCacheStats {
        self.inner.kernels().lock().stats()
    }
}
