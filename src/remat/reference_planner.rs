//! The budget search done the simple way (test only): every candidate built as a full
//! [`Schedule`], all of them held, sorted, then searched. Slow and memory hungry on long chains
//! (gigabytes at 20,000 layers), but simple: the bounded search in `planner` is checked
//! against it, plan for plan and error for error.

use std::cmp::Ordering;
use std::collections::HashSet;

use super::chain::Chain;
use super::error::RematError;
use super::planner::{
    balanced, check_regions_hold_activations, every_nth, greedy_refinement_start, keep_all,
    search_counts, smallest_fitting_arena, Fit, GREEDY_LAYER_LIMIT,
};
use super::schedule::Schedule;
use crate::arena::{ALLOCATION_ALIGNMENT, DEFAULT_LIMIT_BYTES};

fn by_rank(a: &Schedule, b: &Schedule) -> Ordering {
    (a.recompute_cost().total_cmp(&b.recompute_cost())).then(a.peak_bytes().cmp(&b.peak_bytes()))
}

fn holds(fit: Fit, schedule: &Schedule) -> bool {
    schedule.peak_bytes() <= fit.budget()
        && match fit {
            Fit::Arena(budget) => schedule.fits_in_arena(budget),
            Fit::Peak(_) => true,
        }
}

pub(crate) fn within_budget(chain: &Chain, fit: Fit) -> Result<Schedule, RematError> {
    if let Fit::Arena(_) = fit {
        check_regions_hold_activations(chain)?;
    }
    let n = chain.layer_count();
    let all = Schedule::build(chain, &keep_all(n));
    if chain.layers().iter().all(|l| l.forward_cost > 0.0) && holds(fit, &all) {
        return Ok(all);
    }
    let mut candidates = candidates(chain);
    candidates.sort_by(by_rank);
    let Some(mut schedule) = candidates.iter().find(|s| holds(fit, s)).cloned() else {
        return Err(smallest_budget(fit, &candidates));
    };
    if n <= GREEDY_LAYER_LIMIT {
        let mut keep = Vec::new();
        for i in greedy_refinement_start(chain, &schedule, &mut keep) {
            keep[i] = true;
            let more = Schedule::build(chain, &keep);
            if by_rank(&more, &schedule).is_lt() && holds(fit, &more) {
                schedule = more;
            } else {
                keep[i] = false;
            }
        }
    }
    Ok(schedule)
}

fn candidates(chain: &Chain) -> Vec<Schedule> {
    let n = chain.layer_count();
    let keeps = std::iter::once(keep_all(n))
        .chain(search_counts(n).map(|every| every_nth(n, every)))
        .chain(search_counts(n).map(|segments| balanced(chain, segments)));
    let mut seen = HashSet::new();
    keeps
        .filter(|keep| seen.insert(keep.clone()))
        .map(|keep| Schedule::build(chain, &keep))
        .collect()
}

fn smallest_budget(fit: Fit, candidates: &[Schedule]) -> RematError {
    let found = match fit {
        Fit::Peak(_) => candidates
            .iter()
            .min_by_key(|s| s.peak_bytes())
            .map(|s| (s.peak_bytes(), s)),
        Fit::Arena(_) => smallest_arena(candidates),
    };
    match found {
        Some((smallest_budget, schedule)) => RematError::BudgetTooSmall {
            budget: fit.budget(),
            smallest_budget,
            smallest_peak: schedule.peak_bytes(),
            checkpoints: schedule.checkpoints().len(),
        },
        None => RematError::TooLarge,
    }
}

fn smallest_arena(candidates: &[Schedule]) -> Option<(u64, &Schedule)> {
    let mut by_peak: Vec<&Schedule> = candidates.iter().collect();
    by_peak.sort_by_key(|s| s.peak_bytes());
    let first = *by_peak.first()?;
    let mut bound = first.allocated_bytes();
    while !first.fits_in_arena(bound) {
        bound = bound.checked_mul(2).filter(|&b| b <= DEFAULT_LIMIT_BYTES)?;
    }
    let mut best = (smallest_fitting_arena(first, bound), first);
    loop {
        let below = best.0.saturating_sub(ALLOCATION_ALIGNMENT);
        let Some(&better) = by_peak
            .iter()
            .take_while(|s| s.peak_bytes() <= below)
            .find(|s| s.fits_in_arena(below))
        else {
            return Some(best);
        };
        best = (smallest_fitting_arena(better, below), better);
    }
}

/// The bounded search in `planner` checked against this one: the tests live with the model
/// they compare to, so the planner's file does not name its test-only reference.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::remat::chain::strategies;
    use crate::remat::planner;
    use crate::remat::Layer;
    use proptest::prelude::*;

    /// Chains of 1 to 60 layers, with zero costs and equal sizes common (ties in rank), and
    /// every kind of backward step.
    fn chains() -> impl Strategy<Value = Chain> {
        let bytes = prop_oneof![Just(1024u64), 0u64..70_000];
        let cost = prop_oneof![Just(1.0f64), Just(0.0), 0.0f64..10.0];
        strategies::chains(0u64..70_000, bytes, cost, 1..60)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn the_bounded_search_returns_what_building_every_candidate_returned(
            chain in chains(),
            per_mille in 0u64..1100,
        ) {
            let all = Schedule::build(&chain, &keep_all(chain.layer_count()));
            let budget = all.peak_bytes() / 1000 * per_mille;
            for fit in [Fit::Peak(budget), Fit::Arena(budget)] {
                prop_assert_eq!(
                    planner::within_budget(&chain, fit),
                    within_budget(&chain, fit),
                    "{:?}", fit
                );
            }
        }
    }

    #[test]
    fn a_peak_budget_just_below_save_all_on_3000_layers_plans_as_the_full_search_did() {
        // Past the greedy step's limit and the exhaustive counts: the sparse search.
        let chain = Chain::new(1024, vec![Layer::new(1024, 1.0); 3000]).unwrap();
        let all = Schedule::build(&chain, &keep_all(3000));
        let fit = Fit::Peak(all.peak_bytes() - 256);
        assert_eq!(
            planner::within_budget(&chain, fit),
            within_budget(&chain, fit)
        );
    }
}
