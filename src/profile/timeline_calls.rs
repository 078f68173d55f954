//! The context's calls that read its timeline and its kernel times: a file of its own because
//! the timeline (`timeline.rs`) and the kernel timing (`context/kernel_timing.rs`) are parts the
//! context holds, below it, while these calls are on the context, above both.

use crate::context::Context;
use crate::error::Result;
use crate::trace::kernel_times::KernelTimes;
use crate::trace::timeline::{MemoryTimeline, Timeline};

impl Context {
    /// The events recorded so far (allocations, frees, region changes, transfers, dispatches),
    /// or `None` when the timeline is off (`ArenaConfig::timeline_capacity` 0, the default;
    /// env `GPU_ARENA_TIMELINE`).
    /// Kernel times of work that has completed are read first (without waiting for any).
    pub fn memory_timeline(&self) -> Option<MemoryTimeline> {
        let timeline = self.inner.timeline()?;
        self.inner.collect_kernel_times();
        Some(timeline.snapshot())
    }

    /// The live timeline, to clear it or read its length; `None` when off.
    pub fn timeline(&self) -> Option<&Timeline> {
        self.inner.timeline().map(std::sync::Arc::as_ref)
    }

    /// GPU time per kernel (calls, total, mean, max), over every dispatch since the timeline
    /// started or was last [cleared](crate::trace::timeline::Timeline::clear): `Some` when the timeline
    /// is on (`ArenaConfig::timeline_capacity`, env `GPU_ARENA_TIMELINE`) and the device has
    /// timestamp queries (wgpu's `TIMESTAMP_QUERY`; lavapipe has them, wgpu's GL backend
    /// may not), `None` otherwise — never an error for a device without them. Waits for the
    /// work submitted so far (as [`Context::synchronize`](crate::Context::synchronize) does),
    /// so every dispatch called before is in the table. Print it for a table:
    ///
    /// ```no_run
    /// # fn main() -> gpu_arena::Result<()> {
    /// let ctx = gpu_arena::Context::new(gpu_arena::ArenaConfig {
    ///     timeline_capacity: gpu_arena::profile::DEFAULT_TIMELINE_CAPACITY,
    ///     ..Default::default()
    /// })?;
    /// // ... launch kernels ...
    /// if let Some(times) = ctx.kernel_times()? {
    ///     println!("{times}");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// Rows are by kernel name: a kernel's label, else its entry point and a short hash of its
    /// source (`main#1a2b3c4d`), so unlabelled kernels whose entry points are all `main` are
    /// rows of their own; one WGSL source made into two kernels under two labels is compiled
    /// once and is two rows. Work
    /// submitted while 256 earlier command buffers' timestamps are still unread (the GPU far
    /// behind a loop that never waits) runs untimed, which bounds what timing holds.
    ///
    /// Each dispatch's begin and duration are also on the timeline
    /// ([`TimelineEventKind::Kernel`](crate::profile::TimelineEventKind::Kernel)) and slices on
    /// the `GPU` track of its Perfetto trace. Timing puts each dispatch in a compute pass of its
    /// own and adds a resolve and a copy at the end of each command buffer; with the timeline
    /// off none of it happens.
    ///
    /// Errors: as [`Context::synchronize`](crate::Context::synchronize) (a refusal of gathered
    /// work, a lost device), with the timeline on, whether or not the device has timestamps;
    /// with the timeline off it returns `None` at once, asking nothing of the device.
    pub fn kernel_times(&self) -> Result<Option<KernelTimes>> {
        let Some(timeline) = self.inner.timeline() else {
            return Ok(None);
        };
        self.synchronize()?;
        if self.inner.kernel_timing().is_none() {
            return Ok(None);
        }
        self.inner.collect_kernel_times();
        Ok(Some(timeline.kernel_times()))
    }

    /// Whether this context times kernels on the GPU: its timeline is on and its device has
    /// timestamp queries (see [`Context::kernel_times`](crate::Context::kernel_times)).
    pub fn times_kernels(&self) -> bool {
        self.inner.kernel_timing().is_some()
    }
}
