//! How the planner chooses which activations the forward pass keeps.

/// Which activations the forward pass keeps for the backward pass. Kept activations are the
/// checkpoints; the backward pass recomputes the others from the checkpoint below them, one
/// segment at a time. The last activation is always kept (the loss needs it), and so is the
/// input (it is the caller's). An activation that no backward step reads and no recomputation
/// starts from is freed during the forward pass even where a policy names it (a linear
/// layer's output under a ReLU, see [`BackwardReads`](crate::remat::BackwardReads)), and
/// only activations a backward step reads are recomputed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CheckpointPolicy {
    /// Keep every activation: no recomputation and the most memory, what training does without
    /// checkpointing.
    SaveAll,
    /// Keep the output of every `n`-th layer (`n` ≥ 1; 1 is [`SaveAll`](Self::SaveAll)).
    EveryNth(usize),
    /// About √n segments of equal activation bytes, so activation memory grows with √n rather
    /// than n for one extra forward pass (Chen et al. 2016, "Training Deep Nets with Sublinear
    /// Memory Cost").
    Sqrt,
    /// As little recomputation as the planner finds for a plan that runs in an arena of this
    /// many bytes: one made by [`ArenaOptions::preallocated`](crate::arena::ArenaOptions)
    /// with this budget (best fit with coalescing, regions of at most
    /// [`DEFAULT_MAX_REGION_BYTES`](crate::arena::DEFAULT_MAX_REGION_BYTES)). Each candidate
    /// is checked by [replaying](crate::remat::Schedule::replay) it through such an arena, so
    /// the holes freed activations leave count: a plan's peak alone can be a few percent below
    /// the arena it needs. The arena holds the plan alone (subtract what else lives in yours)
    /// and reuses freed memory at once (on a device, memory freed while GPU work still reads
    /// it waits for that work; the context waits for it before it reports out of memory).
    ///
    /// The search tries keeping everything, every n-th activation for each n, and the √n
    /// style cut into each number of segments of even bytes; takes the cheapest that fits;
    /// then keeps each activation that plan recomputes, most costly first, wherever the plan
    /// still fits and ranks higher (recomputes less, or as much at a lower peak). A search,
    /// not an optimum over all subsets (Griewank's Revolve finds that for multi-level
    /// schedules); the peak it reports is exact. When no candidate fits,
    /// [`RematError::BudgetTooSmall`](crate::remat::RematError) names the smallest budget found
    /// that one does fit (the arena rounds its size down to 256 bytes, so a budget fits what the
    /// multiple of 256 below it fits). Refinement can lower a plan below every candidate, so the
    /// plan returned for a larger budget may fit a smaller arena than that one, and, being a
    /// search, it is not monotone in the budget: a larger budget may plan more recomputation (the
    /// candidate it starts from changes with the budget).
    Budget(u64),
    /// As [`Budget`](Self::Budget), but "fits" only asks that the plan's
    /// [peak](crate::remat::Schedule::peak_bytes) be at most this many bytes, not where the
    /// buffers go: for allocators that give each buffer its own memory (the arena's platform
    /// mode), or for a bound to compare with. Faster to plan (no replay). Peaks are
    /// monotone, so a budget no candidate fits gets the plan the search returns at the
    /// candidates' smallest peak where that plan (refined, it can peak lower than every
    /// candidate) fits: every budget from the `smallest_budget` a refusal names up is
    /// accepted, and none below it. The recomputation it plans is not monotone in the budget,
    /// as for [`Budget`](Self::Budget).
    PeakBudget(u64),
    /// Fit an arena of this many bytes (as [`Budget`](Self::Budget) fits one) by offloading
    /// rather than recomputing: every activation is kept, and as few as the search finds are
    /// kept in pinned host memory between the passes
    /// ([`Placement::Offload`](crate::remat::Placement): offloaded after their last forward
    /// use, prefetched before their first backward use), so the plan recomputes nothing and
    /// moves [`offloaded_bytes`](crate::remat::Schedule::offloaded_bytes) over the host link.
    /// It fits budgets recomputation cannot reach: with every activation offloaded, the device
    /// holds little more than the layers in flight and their gradients. The search starts
    /// from every activation offloaded and brings them back to the device, the largest first:
    /// the longest run of that order that fits (by bisection), then, up to 2,048 layers, each
    /// later one wherever the plan still fits. When neither keeping every activation on the
    /// device nor offloading every one fits,
    /// [`RematError::BudgetTooSmall`](crate::remat::RematError) names the smaller of the
    /// smallest arenas found that hold these two plans (a plan's peak when an arena of that
    /// size holds it, else found by bisection): planning again with it succeeds. Its host memory is [`host_peak_bytes`](crate::remat::Schedule::host_peak_bytes)
    /// (the context's pinned-host kind must hold that much).
    OffloadBudget(u64),
}
