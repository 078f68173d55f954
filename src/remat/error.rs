//! Why a chain could not be made or planned.

use crate::arena::Bytes;

/// What can go wrong describing or planning a chain. Nothing here panics on user input.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RematError {
    /// The chain has no layers.
    #[error("a chain needs at least one layer")]
    NoLayers,
    /// A layer's forward cost is negative, infinite or NaN.
    #[error(
        "layer {layer} has forward_cost {cost}: costs must be finite and at least 0 \
         (any unit: FLOPs, microseconds, or 1 per layer)"
    )]
    InvalidCost {
        /// The layer, counted from 1.
        layer: usize,
        /// The cost given.
        cost: f64,
    },
    /// The activations and their gradients add up to more than 64 bits can count.
    #[error("the chain's activations and gradients add up to more than 2^64 bytes")]
    TooLarge,
    /// `EveryNth(0)`.
    #[error("EveryNth(0) names no layer to keep: use EveryNth(1) to keep every activation")]
    ZeroInterval,
    /// No plan fits the budget.
    #[error(
        "no checkpointing of this chain fits in {} ({budget} bytes): the smallest peak found is \
         {} ({smallest_peak} bytes, keeping {checkpoints} activations). Raise the budget to at \
         least that, or split the layers with the largest activations",
        Bytes(*.budget),
        Bytes(*.smallest_peak)
    )]
    BudgetTooSmall {
        /// The budget asked for.
        budget: u64,
        /// The smallest peak of any plan tried.
        smallest_peak: u64,
        /// How many activations that plan keeps.
        checkpoints: usize,
    },
}
