//! What a [`Context`] says about its kernels: the compile cache's statistics and what kernel
//! tuning chose. (The limits that make small arrays take large arrays' paths, and running the
//! WGSL kernels where ops would copy on the host, are [`ArenaConfig`](crate::ArenaConfig)
//! fields.)

use crate::context::Context;
use crate::pipelines::{KernelCacheStats, KernelTuningReport};

impl Context {
    /// How this context's kernels were compiled: pipelines compiled, cache hits, compile times,
    /// the driver pipeline-cache file (`GPU_ARENA_CACHE_DIR`). Shapes compiled only to be timed
    /// by kernel tuning are not counted; the one an op then uses is, once; those still held are
    /// `tuning_pipelines_held`.
    pub fn kernel_cache_stats(&self) -> KernelCacheStats {
        self.inner.kernels().lock().stats()
    }

    /// What kernel tuning ([`ArenaConfig::kernel_tuning`](crate::ArenaConfig)) chose on this
    /// context's device so far (tuned at the first op of each kernel and size class, or all
    /// at once by [`Context::tune_kernels`]), in this process or read from the tuning file: per library
    /// kernel and [`SizeClass`](crate::kernels::SizeClass), the shape, its bandwidth against
    /// the fixed shape's and the device's own copy, and what the tuning jobs cost. Every
    /// context on the same device and driver shares these choices.
    ///
    /// ```no_run
    /// # let ctx = gpu_arena::Context::new(gpu_arena::ArenaConfig::default())?;
    /// for k in ctx.kernel_tuning().kernels {
    ///     println!("{} {}: {} ({:.2}x fixed)", k.kernel, k.size_class.name(), k.shape,
    ///         k.bytes_per_second / k.fixed_bytes_per_second);
    /// }
    /// # Ok::<(), gpu_arena::Error>(())
    /// ```
    pub fn kernel_tuning(&self) -> KernelTuningReport {
        let dir: Option<std::path::PathBuf> =
            self.inner.kernels().lock().cache_dir().map(Into::into);
        let clock = crate::pipelines::tuning_clock(self.inner.device());
        crate::pipelines::report(self.inner.adapter_info(), dir.as_deref(), clock)
    }
}
