//! The crate's lock ranks: one constant per lock, in the order in which they may be taken (the
//! table in [`crate::lock`]'s docs is this file read top to bottom).

/// A lock's place in the order: while a thread holds a lock of some rank, it may take only
/// locks of a higher [`order`](LockRank::order). The name says which lock it is in a violation's
/// message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
// Only the debug-build check reads the fields.
#[cfg_attr(not(debug_assertions), allow(dead_code))]
pub(crate) struct LockRank {
    /// The lock's name, as a violation names it.
    pub(crate) name: &'static str,
    /// Locks are taken in increasing order; equal orders never nest.
    pub(crate) order: u32,
}

/// `backend/host_sync.rs` tests: tests that read the recorded flush and invalidate calls run one
/// at a time, holding it across everything they do.
#[cfg(test)]
pub(crate) const HOST_SYNC_TEST_SERIAL: LockRank = LockRank {
    name: "host_sync tests' SERIAL",
    order: 10,
};

/// `pipelines/cache.rs`: the compiled kernels and the library kernels' parameter buffer.
/// Held while a sequence submits (a user's takes the gathered ops, a single op gathers
/// itself), while a captured run writes and submits, and while an op looks for a host path
/// (which reads the arena).
pub(crate) const KERNEL_CACHE: LockRank = LockRank {
    name: "KernelCache::state",
    order: 20,
};

/// `pipelines/tuned_choices.rs`: one kernel tuning job at a time in the process. Taken under
/// the kernel cache of the context that tunes; the job compiles, submits and waits (which
/// runs wgpu's callbacks, taking the locks below).
pub(crate) const TUNING_JOB: LockRank = LockRank {
    name: "tuned_choices::TUNING_JOB",
    order: 22,
};
/// `pipelines/tuned_choices.rs`: every device's tuned kernel shapes in the process, read and
/// written briefly (and the tuning file with them), never across a tuning job's measuring.
pub(crate) const TUNED_CHOICES: LockRank = LockRank {
    name: "tuned_choices::CHOICES",
    order: 24,
};
/// `context/gathered.rs`: the single ops gathered and not yet submitted, and their staging.
/// Every submission of a context takes it first and submits the gathered ops under it.
pub(crate) const GATHERED: LockRank = LockRank {
    name: "ContextInner::gathered",
    order: 30,
};

/// `submission.rs`: the last submission id, held across `queue.submit` so that ids are in queue
/// order. A submission's `before` runs under it, and with it a user's
/// [`GpuUse::record_use`](crate::GpuUse::record_use) (which may read the timeline and its kernel
/// times).
pub(crate) const LAST_SUBMITTED: LockRank = LockRank {
    name: "Submissions::last_submitted",
    order: 40,
};

/// `submission.rs`: wgpu's indices of the recent submissions.
pub(crate) const RECENT_SUBMISSIONS: LockRank = LockRank {
    name: "Submissions::recent",
    order: 50,
};

/// `context/kernel_timing.rs`: timestamp timers, pooled and waiting for their readback. Taken
/// under the gathered ops when a submission is timed, and under the submission order when a
/// [`GpuUse`](crate::GpuUse) reads kernel times; records kernel times on the timeline.
pub(crate) const KERNEL_TIMING: LockRank = LockRank {
    name: "KernelTiming::state",
    order: 60,
};

/// `context.rs`: the arena, its regions and the live arrays' descriptions. Regions are made
/// and freed under it (which takes the Vulkan allocator); nothing holding it gathers, submits
/// or waits.
pub(crate) const MEMORY: LockRank = LockRank {
    name: "ContextInner::memory",
    order: 70,
};

/// `transfer/staging.rs`: the free staging buffers of one direction (upload or readback; a
/// thread never holds both).
pub(crate) const STAGING_FREE: LockRank = LockRank {
    name: "StagingPool free list",
    order: 80,
};

/// `transfer/staging.rs`: how many staging buffers exist per direction, counted under the free
/// list.
pub(crate) const STAGING_CREATED: LockRank = LockRank {
    name: "StagingPool::created",
    order: 90,
};

/// `distributed/array_io.rs`: host buffers kept between collectives.
#[cfg(feature = "mpi")]
pub(crate) const COLLECTIVE_SCRATCH: LockRank = LockRank {
    name: "Scratch::free",
    order: 100,
};

/// `backend/vulkan.rs`: gpu-allocator's allocator. Taken under the arena when regions are made,
/// and wherever wgpu drops a buffer of ours (a buffer's release frees its memory), which can be
/// under any lock above.
pub(crate) const VULKAN_ALLOCATOR: LockRank = LockRank {
    name: "gpu-allocator Allocator",
    order: 110,
};

/// `profile/timeline.rs`: descriptions of allocations (site, type, shape), interned under the
/// arena just before it allocates.
pub(crate) const TIMELINE_DESCRIPTIONS: LockRank = LockRank {
    name: "Timeline::descriptions",
    order: 120,
};

/// `profile/timeline.rs`: interned labels and kernel names.
pub(crate) const TIMELINE_LABELS: LockRank = LockRank {
    name: "Timeline::labels",
    order: 130,
};

/// `profile/timeline.rs`: kernel times by name since the last clear.
pub(crate) const TIMELINE_KERNELS: LockRank = LockRank {
    name: "Timeline::kernels",
    order: 140,
};

/// `profile/timeline.rs`: the ring of context events (transfers, dispatches, labels, kernels).
pub(crate) const TIMELINE_CONTEXT: LockRank = LockRank {
    name: "Timeline::context",
    order: 150,
};

/// `backend/host_sync.rs` tests: the flush and invalidate calls the fake driver saw, recorded
/// wherever mapped memory is flushed or invalidated.
#[cfg(test)]
pub(crate) const HOST_SYNC_TEST_CALLS: LockRank = LockRank {
    name: "host_sync tests' CALLS",
    order: 160,
};
