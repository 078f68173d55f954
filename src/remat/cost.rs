//! A plan's step time predicted from costs measured on the device: what chooses between
//! recomputing and offloading when both fit a budget.

use serde::Serialize;

use super::chain::Chain;
use super::error::RematError;
use super::planner::fastest_within_budget;
#[cfg(doc)]
use super::policy::CheckpointPolicy;
use super::schedule::Schedule;

/// What one training step costs on a device, measured there: the figures a plan's step time is
/// predicted from ([`Schedule::predicted_step`]).
///
/// `base_seconds` is a step that recomputes and moves nothing (a
/// [`SaveAll`](CheckpointPolicy::SaveAll) run, forward, backward and update); each unit of
/// [`Layer::forward_cost`](super::Layer) run again costs `seconds_per_cost` (measure a plan that
/// recomputes: its extra time over `base_seconds` divided by its
/// [`recompute_cost`](Schedule::recompute_cost)); each byte moved between device and pinned
/// host memory costs `1 / host_link_bytes_per_second` (measure `Context::offload` and
/// `prefetch` of an array; `bench_transfers` prints it). Moves are counted in full, not
/// overlapped with compute: one queue runs them in order.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct StepCosts {
    /// Seconds of a step that recomputes and moves nothing.
    pub base_seconds: f64,
    /// Seconds per unit of forward cost recomputed.
    pub seconds_per_cost: f64,
    /// Bytes per second of a move between device and pinned host memory, each way.
    pub host_link_bytes_per_second: f64,
}

/// A plan's predicted step time and its parts, in seconds ([`Schedule::predicted_step`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct PredictedStep {
    /// The step without recomputation or moves.
    pub base_seconds: f64,
    /// The forward passes run again.
    pub recompute_seconds: f64,
    /// The offloads and prefetches.
    pub transfer_seconds: f64,
    /// The sum of the parts.
    pub total_seconds: f64,
}

impl Schedule {
    /// The step time this plan is predicted to take under `costs`: the base step, plus its
    /// recomputation, plus its moves ([`offloaded_bytes`](Schedule::offloaded_bytes) over the
    /// host link). A bandwidth that is 0, negative or NaN makes moves infinitely slow.
    ///
    /// ```
    /// use gpu_arena::remat::{Chain, Layer, Placement, StepCosts};
    /// let chain = Chain::new(1 << 20, vec![Layer::new(1 << 20, 1.0); 8])?;
    /// let costs = StepCosts { base_seconds: 0.010, seconds_per_cost: 0.001, host_link_bytes_per_second: 1e9 };
    /// let offload = chain.plan_placing(|i| if i < 4 { Placement::Offload } else { Placement::Keep });
    /// let step = offload.predicted_step(&costs);
    /// assert_eq!(step.recompute_seconds, 0.0);
    /// assert!((step.transfer_seconds - 6.0 * 1048576.0 / 1e9).abs() < 1e-12);
    /// # Ok::<(), gpu_arena::remat::RematError>(())
    /// ```
    pub fn predicted_step(&self, costs: &StepCosts) -> PredictedStep {
        let recompute_seconds = self.recompute_cost() * costs.seconds_per_cost;
        let moved = self.offloaded_bytes() as f64;
        let transfer_seconds = match moved {
            0.0 => 0.0,
            _ if costs.host_link_bytes_per_second > 0.0 => moved / costs.host_link_bytes_per_second,
            _ => f64::INFINITY,
        };
        PredictedStep {
            base_seconds: costs.base_seconds,
            recompute_seconds,
            transfer_seconds,
            total_seconds: costs.base_seconds + recompute_seconds + transfer_seconds,
        }
    }
}

impl Chain {
    /// The plan for an arena of `budget` bytes with the least predicted step time under
    /// `costs`, choosing for each activation to keep it on the device, recompute it or keep it
    /// in pinned host memory: among [`Budget`](CheckpointPolicy::Budget)'s plan (recomputing),
    /// and, for each set of checkpoints the budget search tries (everything, every n-th, the
    /// √n-style cuts), the plan that offloads as few of them as fit (keeping everything so is
    /// [`OffloadBudget`](CheckpointPolicy::OffloadBudget)'s plan), the one predicted fastest
    /// ([`Schedule::predicted_step`]); then, on chains of up to 512 layers, that plan improved
    /// one activation at a time: an activation's placement changes wherever the plan still fits
    /// and is predicted faster, until no single change helps. A search over those families (at
    /// most 64 keep sets, spread over the budget search's) and a local optimum beside them over
    /// the placements the plan reports ([`Schedule::checkpoints`] kept, those of them in
    /// [`Schedule::offloaded`] offloaded, any other recomputed), not a proven optimum over
    /// every placement.
    ///
    /// # Errors
    /// [`RematError::InvalidStepCosts`] when `base_seconds` or `seconds_per_cost` is negative,
    /// infinite or NaN (a bandwidth that is not above 0 makes moves infinitely slow, as
    /// [`Schedule::predicted_step`] says); [`RematError::BudgetTooSmall`] when no plan it tries
    /// fits (another placement may: [`Chain::plan_placing`] builds any),
    /// naming the smaller of the smallest budgets of [`Budget`](CheckpointPolicy::Budget) and
    /// [`OffloadBudget`](CheckpointPolicy::OffloadBudget) (planning again with it succeeds);
    /// the errors of [`Chain::plan`] otherwise.
    pub fn plan_fastest(&self, budget: u64, costs: &StepCosts) -> Result<Schedule, RematError> {
        for (field, value) in [
            ("base_seconds", costs.base_seconds),
            ("seconds_per_cost", costs.seconds_per_cost),
        ] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(RematError::InvalidStepCosts { field, value });
            }
        }
        fastest_within_budget(self, budget, |plan| {
            plan.predicted_step(costs).total_seconds
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remat::chain::Layer;
    use crate::remat::policy::CheckpointPolicy;
    use crate::remat::schedule::Placement;

    fn costs(seconds_per_cost: f64, host_link_bytes_per_second: f64) -> StepCosts {
        StepCosts {
            base_seconds: 1.0,
            seconds_per_cost,
            host_link_bytes_per_second,
        }
    }

    #[test]
    fn costs_a_step_time_cannot_be_predicted_from_are_refused_and_a_slow_link_is_not() {
        let chain = Chain::new(1 << 20, vec![Layer::new(1 << 20, 1.0); 8]).unwrap();
        let budget = chain.plan(CheckpointPolicy::SaveAll).unwrap().peak_bytes();
        for bad in [-1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let refused = chain.plan_fastest(budget, &costs(bad, 1e9)).unwrap_err();
            assert!(matches!(
                refused,
                RematError::InvalidStepCosts { field: "seconds_per_cost", value }
                    if value.to_bits() == bad.to_bits()
            ));
            let mut base = costs(1e-3, 1e9);
            base.base_seconds = bad;
            let refused = chain.plan_fastest(budget, &base).unwrap_err();
            assert!(matches!(
                refused,
                RematError::InvalidStepCosts {
                    field: "base_seconds",
                    ..
                }
            ));
        }
        // A bandwidth that is not above 0: moves are infinitely slow, so where recomputing
        // fits nothing is offloaded.
        let recomputing = chain.plan(CheckpointPolicy::Sqrt).unwrap().peak_bytes();
        assert!(recomputing < budget);
        for slow in [0.0, -1.0, f64::NAN, f64::NEG_INFINITY] {
            let plan = chain.plan_fastest(recomputing, &costs(1e-3, slow)).unwrap();
            assert!(plan.offloaded().is_empty() && plan.recompute_cost() > 0.0);
        }
        // An activation larger than any region: no budget holds it, as for the policies.
        let huge = Chain::new(1024, vec![Layer::new(5 << 30, 1.0); 4]).unwrap();
        for budget in [100 << 30, u64::MAX] {
            assert!(matches!(
                huge.plan_fastest(budget, &costs(1e-3, 1e10)),
                Err(RematError::ActivationTooLarge { activation: 1, .. })
            ));
        }
    }

    #[test]
    fn the_fastest_plan_recomputes_or_offloads_by_the_measured_costs() {
        let chain = Chain::new(1 << 20, vec![Layer::new(1 << 20, 1.0); 32]).unwrap();
        let all = chain.plan(CheckpointPolicy::SaveAll).unwrap();
        let budget = all.peak_bytes() / 2;
        // Recomputation cheap, the host link slow: recompute.
        let plan = chain.plan_fastest(budget, &costs(1e-6, 1e3)).unwrap();
        assert!(plan.recompute_cost() > 0.0 && plan.offloaded().is_empty());
        // Recomputation costly, the host link fast: offload.
        let plan = chain.plan_fastest(budget, &costs(1.0, 1e12)).unwrap();
        assert!(plan.recompute_cost() == 0.0 && !plan.offloaded().is_empty());
        let step = plan.predicted_step(&costs(1.0, 1e12));
        let moved = plan.offloaded_bytes() as f64 / 1e12;
        assert_eq!(step.transfer_seconds, moved);
        assert_eq!(step.total_seconds, 1.0 + moved);
        // A budget only offloading meets: offload, whatever the costs.
        let offload_only = chain.plan_placing(|_| Placement::Offload).peak_bytes();
        let plan = chain
            .plan_fastest(offload_only + 4096, &costs(1e-9, 1.0))
            .unwrap();
        assert!(!plan.offloaded().is_empty());
        // Nothing fits: the smaller of the two smallest budgets.
        let refused = chain.plan_fastest(1024, &costs(1.0, 1.0)).unwrap_err();
        let RematError::BudgetTooSmall {
            smallest_budget, ..
        } = refused
        else {
            panic!("{refused}");
        };
        assert!(chain
            .plan_fastest(smallest_budget, &costs(1.0, 1.0))
            .is_ok());
        // No bandwidth: moves never pay.
        assert_eq!(
            plan.predicted_step(&costs(1.0, 0.0)).total_seconds,
            f64::INFINITY
        );
    }
}
