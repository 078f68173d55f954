//! How the planner chooses which activations the forward pass keeps.

/// Which activations the forward pass keeps for the backward pass. Kept activations are the
/// checkpoints; the backward pass recomputes the others from the checkpoint below them, one
/// segment at a time. The last activation is always kept (the loss needs it), and so is the
/// input (it is the caller's).
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
    /// As little recomputation as the planner finds with peak bytes in use at or below this
    /// many bytes. It tries keeping everything, every n-th activation for each n, and the √n
    /// style cut into each number of segments of even bytes; takes the cheapest that fits;
    /// then keeps each activation that plan recomputes, most costly first, wherever the peak
    /// still fits. A search, not an optimum over all subsets (Griewank's Revolve finds that
    /// for multi-level schedules); the peak it reports is exact.
    Budget(u64),
}
