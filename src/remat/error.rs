//! Why a chain could not be made or planned.

use crate::arena::Bytes;
use crate::count::count;

/// What can go wrong describing or planning a chain. Nothing here panics on user input.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RematError {
    /// The chain has no layers.
    #[error("a chain needs at least one layer")]
    NoLayers,
    /// A layer's forward cost is negative, infinite or NaN, or the sum of the costs up to it
    /// overflows to infinity.
    #[error("{}", invalid_cost(*layer, *cost))]
    InvalidCost {
        /// The layer, counted from 1.
        layer: usize,
        /// The cost given.
        cost: f64,
    },
    /// A [`StepCosts`](super::StepCosts) figure a step time cannot be predicted from: its base
    /// step or its seconds per unit of cost negative, infinite or NaN.
    #[error(
        "StepCosts::{field} is {value}: it must be finite and at least 0 (seconds measured on \
         the device)"
    )]
    InvalidStepCosts {
        /// The field: `base_seconds` or `seconds_per_cost`.
        field: &'static str,
        /// The value given.
        value: f64,
    },
    /// The activations and their gradients add up to more than 64 bits can count.
    #[error("the chain's activations and gradients add up to more than 2^64 bytes")]
    TooLarge,
    /// `EveryNth(0)`.
    #[error("EveryNth(0) names no layer to keep: use EveryNth(1) to keep every activation")]
    ZeroInterval,
    /// No plan fits the budget.
    #[error(
        "no checkpointing of this chain fits in {} ({}): the smallest budget found that holds \
         a plan is {} ({}, for a plan keeping {} whose peak is {}). Plan with that budget, \
         split the layers with the largest activations, or, under CheckpointPolicy::Budget or \
         PeakBudget, offload activations to pinned host memory instead \
         (CheckpointPolicy::OffloadBudget, Chain::plan_fastest), which reaches smaller budgets \
         (best fit places buffers differently in arenas of different sizes, so that budget can \
         even be below this one)",
        Bytes(*.budget),
        count(*.budget, "byte"),
        Bytes(*.smallest_budget),
        count(*.smallest_budget, "byte"),
        count(*.checkpoints, "activation"),
        count(*.smallest_peak, "byte")
    )]
    BudgetTooSmall {
        /// The budget asked for.
        budget: u64,
        /// The smallest budget the same policy accepts: planning again with it succeeds. For
        /// [`Budget`](super::CheckpointPolicy::Budget), the smallest arena found that holds
        /// one of the candidates the search starts from (256 bytes less holds none of them).
        /// Best fit places buffers by the sizes of the holes, and the last hole's size depends
        /// on the arena's, so which sizes hold a plan is not one interval: this can be *below*
        /// the budget asked for (which then held none of the plans). For
        /// [`PeakBudget`](super::CheckpointPolicy::PeakBudget), the peak of the plan it
        /// returns at the candidates' smallest peak (at most that peak): no smaller budget is
        /// accepted, every larger one is. For
        /// [`OffloadBudget`](super::CheckpointPolicy::OffloadBudget), the smaller of the
        /// smallest arenas found that hold every activation kept on the device and every one
        /// offloaded (each plan's peak when an arena of that size holds it).
        smallest_budget: u64,
        /// The peak bytes in use of that plan.
        smallest_peak: u64,
        /// How many activations that plan keeps.
        checkpoints: usize,
    },
    /// An activation (and so its gradient) is larger than any region of an arena, so no
    /// arena budget can hold it.
    #[error(
        "activation {activation} has {} ({}), more than the largest region of an \
         arena ({}): no arena of any budget can hold it. Split the layer into smaller \
         activations, or plan with CheckpointPolicy::PeakBudget for an allocator without \
         regions",
        Bytes(*.bytes),
        count(*.bytes, "byte"),
        Bytes(*.max_region_bytes)
    )]
    ActivationTooLarge {
        /// The activation, 0 for the input.
        activation: usize,
        /// Its bytes.
        bytes: u64,
        /// The largest region an arena of any budget asks for.
        max_region_bytes: u64,
    },
}

/// [`RematError::InvalidCost`]'s message: a cost that is fine alone is refused for the sum it
/// makes, and a huge one is written in exponent form rather than in its 309 digits.
fn invalid_cost(layer: usize, cost: f64) -> String {
    let rule = "costs must be finite and at least 0, and so must their sum (any unit: FLOPs, \
                microseconds, or 1 per layer)";
    if cost.is_finite() && cost >= 0.0 {
        format!(
            "the forward costs up to layer {layer} (forward_cost {cost:e}) add up past the \
             largest f64: {rule}; give them in a larger unit"
        )
    } else if cost.is_finite() && cost.abs() >= 1e15 {
        format!("layer {layer} has forward_cost {cost:e}: {rule}")
    } else {
        format!("layer {layer} has forward_cost {cost}: {rule}")
    }
}
