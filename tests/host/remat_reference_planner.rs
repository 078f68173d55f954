//! The checkpoint planner's budget search against a model of it written here from its
//! documentation, on the public API alone: every candidate built as a full [`Schedule`] with
//! [`Chain::plan_keeping`], all of them held, sorted by rank and searched, and "fits an arena"
//! answered by replaying the schedule through one. Slow and memory hungry on long chains, but
//! simple; the planner's bounded search (candidates summarised without their schedules,
//! replays skipped where the answer is certain) must return what it returns, plan for plan
//! and error for error.
//!
//! The search, as `CheckpointPolicy::Budget` documents it: keeping everything, every k-th
//! activation and the balanced cut into k segments for each count k (all counts up to 1024,
//! then steps of 2% up to n); the cheapest that fits (least recomputation, then lowest peak,
//! then the earlier candidate); then, up to 2048 layers, each activation it recomputes kept
//! instead, most costly first, wherever the plan still fits and ranks higher. When nothing
//! fits, the error names the smallest budget that holds one of the candidates; for a peak
//! budget, the plan that search returns at the candidates' smallest peak is the answer where it
//! fits (refined, it can peak lower than every candidate), and the error names its peak.

use std::cmp::Ordering;
use std::collections::HashSet;

use gpu_arena::arena::{
    Arena, ArenaOptions, VirtualRegions, ALLOCATION_ALIGNMENT, DEFAULT_LIMIT_BYTES,
};
use gpu_arena::remat::{
    BackwardReads, Buffer, Chain, CheckpointPolicy, Layer, RematError, Schedule, ScheduleStep,
};
use proptest::prelude::*;

/// Counts past which the search spreads its counts out.
const EXHAUSTIVE_COUNTS: usize = 1024;
/// Chains longer than this skip the greedy refinement.
const GREEDY_LAYER_LIMIT: usize = 2048;

/// What fitting a budget means: the plan replays in an arena preallocating this many bytes
/// (`Budget`), or its peak is at most this many bytes (`PeakBudget`).
#[derive(Clone, Copy, Debug)]
enum Fit {
    Arena(u64),
    Peak(u64),
}

impl Fit {
    fn budget(self) -> u64 {
        match self {
            Fit::Arena(budget) | Fit::Peak(budget) => budget,
        }
    }

    fn with_budget(self, budget: u64) -> Fit {
        match self {
            Fit::Arena(_) => Fit::Arena(budget),
            Fit::Peak(_) => Fit::Peak(budget),
        }
    }

    fn policy(self) -> CheckpointPolicy {
        match self {
            Fit::Arena(budget) => CheckpointPolicy::Budget(budget),
            Fit::Peak(budget) => CheckpointPolicy::PeakBudget(budget),
        }
    }

    fn holds(self, schedule: &Schedule) -> bool {
        schedule.peak_bytes() <= self.budget()
            && match self {
                Fit::Arena(budget) => replays_in(schedule, budget),
                Fit::Peak(_) => true,
            }
    }
}

/// Whether `schedule` replays in an arena preallocating `bytes`, with no device.
fn replays_in(schedule: &Schedule, bytes: u64) -> bool {
    let mut arena = Arena::new(ArenaOptions::preallocated(bytes));
    schedule
        .replay(&mut arena, &mut VirtualRegions::default())
        .is_ok()
}

/// `bytes` as the arena takes them: whole granules of 256 bytes, at least one.
fn rounded(bytes: u64) -> u64 {
    bytes.div_ceil(ALLOCATION_ALIGNMENT).max(1) * ALLOCATION_ALIGNMENT
}

fn activation_bytes(chain: &Chain, activation: usize) -> u64 {
    match activation {
        0 => chain.input_bytes(),
        i => chain.layers()[i - 1].activation_bytes,
    }
}

/// Everything the plan allocates, the input included, rounded: one region this large holds it.
fn allocated_bytes(schedule: &Schedule) -> u64 {
    let taken = |buffer: Buffer| rounded(schedule.bytes(buffer).unwrap());
    schedule
        .steps()
        .iter()
        .filter_map(ScheduleStep::allocates)
        .map(taken)
        .fold(taken(Buffer::Activation(0)), u64::saturating_add)
}

/// Least recomputation first, then lowest peak.
fn by_rank(a: &Schedule, b: &Schedule) -> Ordering {
    (a.recompute_cost().total_cmp(&b.recompute_cost())).then(a.peak_bytes().cmp(&b.peak_bytes()))
}

/// The counts tried for `n` layers, as intervals and as numbers of segments.
fn search_counts(n: usize) -> Vec<usize> {
    let mut counts: Vec<usize> = (1..=n.min(EXHAUSTIVE_COUNTS)).collect();
    let mut count = EXHAUSTIVE_COUNTS;
    while count < n {
        count = (count + count / 50).min(n);
        counts.push(count);
    }
    counts
}

/// Selections (indexed by activation, 1 to n − 1 read) in the search's order.
fn candidate_selections(chain: &Chain) -> Vec<Vec<bool>> {
    let n = chain.layer_count();
    let counts = search_counts(n);
    let every_nth = counts
        .iter()
        .map(|&every| (0..n).map(|i| i % every == 0).collect());
    let balanced = counts.iter().map(|&segments| balanced(chain, segments));
    std::iter::once(vec![true; n])
        .chain(every_nth)
        .chain(balanced)
        .collect()
}

/// The cut into `segments` (clamped to 1..=n) segments of about equal rounded bytes over
/// activations 1 to n − 1: cut c (1 ≤ c < segments) falls on the first activation whose bytes
/// from 1 up to it reach c / segments of the total.
fn balanced(chain: &Chain, segments: usize) -> Vec<bool> {
    let n = chain.layer_count();
    let segments = segments.clamp(1, n) as u128;
    let bytes = |i: usize| u128::from(rounded(activation_bytes(chain, i)));
    let total: u128 = (1..n).map(bytes).sum();
    let mut keep = vec![false; n];
    for cut in 1..segments {
        let mut reached = 0u128;
        let first = (1..n).find(|&i| {
            reached += bytes(i);
            reached * segments >= cut * total
        });
        if let Some(i) = first {
            keep[i] = true;
        }
    }
    keep
}

/// Every candidate's schedule, the first of equal selections only, sorted by rank (stably).
fn candidates(chain: &Chain) -> Vec<Schedule> {
    let mut seen = HashSet::new();
    let mut schedules: Vec<Schedule> = candidate_selections(chain)
        .into_iter()
        .filter(|keep| seen.insert(keep[1..].to_vec()))
        .map(|keep| chain.plan_keeping(|i| keep[i]))
        .collect();
    schedules.sort_by(by_rank);
    schedules
}

/// What the budget search returns for `chain` and `fit`, built the simple way.
fn reference_plan(chain: &Chain, fit: Fit) -> Result<Schedule, RematError> {
    let n = chain.layer_count();
    if let Fit::Arena(_) = fit {
        let max_region_bytes = ArenaOptions::default().max_region_bytes;
        let too_large = (0..=n).find(|&i| rounded(activation_bytes(chain, i)) > max_region_bytes);
        if let Some(activation) = too_large {
            return Err(RematError::ActivationTooLarge {
                activation,
                bytes: activation_bytes(chain, activation),
                max_region_bytes,
            });
        }
    }
    let refused = match (fit, search(chain, fit)) {
        (
            Fit::Peak(_),
            Err(RematError::BudgetTooSmall {
                smallest_budget, ..
            }),
        ) => smallest_budget,
        (_, found) => return found,
    };
    let at_smallest = search(chain, Fit::Peak(refused)).unwrap();
    if fit.holds(&at_smallest) {
        return Ok(at_smallest);
    }
    Err(RematError::BudgetTooSmall {
        budget: fit.budget(),
        smallest_budget: at_smallest.peak_bytes(),
        smallest_peak: at_smallest.peak_bytes(),
        checkpoints: at_smallest.checkpoints().len(),
    })
}

/// The search proper: the first candidate that fits, refined; or the error naming the smallest
/// budget that holds one of the candidates.
fn search(chain: &Chain, fit: Fit) -> Result<Schedule, RematError> {
    let n = chain.layer_count();
    let candidates = candidates(chain);
    let Some(mut schedule) = candidates.iter().find(|s| fit.holds(s)).cloned() else {
        return Err(smallest_budget(fit, &candidates));
    };
    if n <= GREEDY_LAYER_LIMIT {
        let mut keep = vec![false; n];
        for &i in schedule.checkpoints() {
            keep[i] = true;
        }
        let mut recomputed: Vec<usize> = schedule
            .steps()
            .iter()
            .filter_map(|step| match *step {
                ScheduleStep::Recompute { layer } => Some(layer),
                _ => None,
            })
            .collect();
        let cost = |i: usize| chain.layers()[i - 1].forward_cost;
        recomputed.sort_by(|&a, &b| cost(b).total_cmp(&cost(a)));
        for i in recomputed {
            keep[i] = true;
            let more = chain.plan_keeping(|j| keep[j]);
            if by_rank(&more, &schedule).is_lt() && fit.holds(&more) {
                schedule = more;
            } else {
                keep[i] = false;
            }
        }
    }
    Ok(schedule)
}

/// The error for a budget no candidate fits (`candidates` in rank order).
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

/// The smallest arena (in granules) found to hold a candidate: the lowest-peak candidate's,
/// found by doubling from what it allocates and then bisecting from its peak (the peak itself
/// first), then lowered
/// while another candidate fits one granule below the best so far.
fn smallest_arena(candidates: &[Schedule]) -> Option<(u64, &Schedule)> {
    let mut by_peak: Vec<&Schedule> = candidates.iter().collect();
    by_peak.sort_by_key(|s| s.peak_bytes());
    let first = *by_peak.first()?;
    let mut bound = allocated_bytes(first);
    while !replays_in(first, bound) {
        bound = bound.checked_mul(2).filter(|&b| b <= DEFAULT_LIMIT_BYTES)?;
    }
    let mut best = (bisect(first, bound), first);
    loop {
        let below = best.0.saturating_sub(ALLOCATION_ALIGNMENT);
        let Some(&better) = by_peak
            .iter()
            .take_while(|s| s.peak_bytes() <= below)
            .find(|s| replays_in(s, below))
        else {
            return Some(best);
        };
        best = (bisect(better, below), better);
    }
}

/// The plan's peak when an arena of that size holds it (none below its peak does), else
/// bisection in granules between the peak less one granule and `fits`, which holds it.
fn bisect(schedule: &Schedule, fits: u64) -> u64 {
    let peak = rounded(schedule.peak_bytes());
    if peak <= fits && replays_in(schedule, peak) {
        return peak;
    }
    let (mut low, mut high) = (
        schedule.peak_bytes().saturating_sub(ALLOCATION_ALIGNMENT),
        fits,
    );
    while high - low > ALLOCATION_ALIGNMENT {
        let mid = low + (high - low) / 2 / ALLOCATION_ALIGNMENT * ALLOCATION_ALIGNMENT;
        if replays_in(schedule, mid) {
            high = mid;
        } else {
            low = mid;
        }
    }
    high
}

/// Chains of 1 to 60 layers, with zero costs and equal sizes common (ties in rank), and
/// every kind of backward step.
fn chains() -> impl Strategy<Value = Chain> {
    let bytes = prop_oneof![Just(1024u64), 0u64..70_000];
    let cost = prop_oneof![Just(1.0f64), Just(0.0), 0.0f64..10.0];
    let reads = prop_oneof![
        Just(BackwardReads::Input),
        Just(BackwardReads::Output),
        Just(BackwardReads::InputAndOutput)
    ];
    let layer = (bytes, cost, reads)
        .prop_map(|(bytes, cost, reads)| Layer::new(bytes, cost).with_backward_reads(reads));
    (0u64..70_000, prop::collection::vec(layer, 1..60))
        .prop_map(|(input, layers)| Chain::new(input, layers).unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn the_budget_search_returns_what_building_every_candidate_returns(
        chain in chains(),
        per_mille in 0u64..1100,
    ) {
        let all = chain.plan(CheckpointPolicy::SaveAll).unwrap();
        let budget = all.peak_bytes() / 1000 * per_mille;
        for fit in [Fit::Peak(budget), Fit::Arena(budget)] {
            prop_assert_eq!(
                chain.plan(fit.policy()),
                reference_plan(&chain, fit),
                "{:?}", fit
            );
        }
    }

    #[test]
    fn a_budget_search_accepts_the_smallest_budget_it_names_and_a_peak_budget_every_one_above(
        chain in chains(),
        per_mille in 0u64..1100,
        above in 0u64..4096,
    ) {
        let all = chain.plan(CheckpointPolicy::SaveAll).unwrap();
        let budget = all.peak_bytes() / 1000 * per_mille;
        for fit in [Fit::Peak(budget), Fit::Arena(budget)] {
            match chain.plan(fit.policy()) {
                Ok(_) => {}
                Err(RematError::BudgetTooSmall { smallest_budget, .. }) => {
                    let smallest = fit.with_budget(smallest_budget).policy();
                    prop_assert!(chain.plan(smallest).is_ok(), "{:?}: {:?} refused", fit, smallest);
                    if let Fit::Peak(_) = fit {
                        let more = CheckpointPolicy::PeakBudget(smallest_budget + above);
                        prop_assert!(chain.plan(more).is_ok(), "{:?}: {:?} refused", fit, more);
                    }
                }
                Err(other) => prop_assert!(false, "{:?}: {}", fit, other),
            }
        }
    }

    #[test]
    fn a_selection_by_hand_keeps_what_it_selects_that_the_backward_pass_reads(
        chain in chains(),
        seed in any::<u64>(),
    ) {
        let n = chain.layer_count();
        let selected = |i: usize| (seed >> (i % 64)) & 1 == 1;
        let mut asked = Vec::new();
        let schedule = chain.plan_keeping(|i| {
            asked.push(i);
            selected(i)
        });
        prop_assert_eq!(asked, (1..n).collect::<Vec<_>>());
        // Only selected activations are checkpoints, and every selected one a backward step
        // reads (as input, or as output) is one.
        let reads = |i: usize| {
            let below = chain.layers()[i].backward_reads.input();
            let own = chain.layers()[i - 1].backward_reads.output();
            below || own
        };
        for &kept in schedule.checkpoints() {
            prop_assert!(selected(kept), "activation {} kept unselected", kept);
        }
        for i in (1..n).filter(|&i| selected(i) && reads(i)) {
            prop_assert!(schedule.checkpoints().contains(&i), "activation {} dropped", i);
        }
        // Selecting everything is saving everything.
        prop_assert_eq!(chain.plan_keeping(|_| true), chain.plan(CheckpointPolicy::SaveAll).unwrap());
    }
}

/// A chain whose layers cost nothing to recompute: at equal recomputation, refinement keeps
/// activations that lower the peak, so the plan the search returns at the candidates' smallest
/// peak peaks lower than every candidate, and a peak budget accepts that peak.
#[test]
fn a_peak_budget_below_every_candidate_that_the_refined_plan_peaks_within_is_accepted() {
    use BackwardReads::{Input, InputAndOutput};
    let spec = [
        (1281, Input),
        (0, Input),
        (2561, Input),
        (0, InputAndOutput),
        (1793, Input),
        (2817, Input),
        (1537, Input),
        (3329, Input),
        (769, InputAndOutput),
    ];
    let layers = spec.map(|(bytes, reads)| Layer::new(bytes, 0.0).with_backward_reads(reads));
    let chain = Chain::new(0, layers.to_vec()).unwrap();
    let at_candidates = chain.plan(CheckpointPolicy::PeakBudget(12800)).unwrap();
    assert!(
        at_candidates.peak_bytes() < 12800,
        "{}",
        at_candidates.peak_bytes()
    );
    assert_eq!(
        chain.plan(CheckpointPolicy::PeakBudget(at_candidates.peak_bytes())),
        Ok(at_candidates.clone())
    );
    match chain.plan(CheckpointPolicy::PeakBudget(at_candidates.peak_bytes() - 1)) {
        Err(RematError::BudgetTooSmall {
            smallest_budget,
            smallest_peak,
            ..
        }) => {
            assert_eq!(smallest_budget, at_candidates.peak_bytes());
            assert_eq!(smallest_peak, at_candidates.peak_bytes());
        }
        other => panic!("{other:?}"),
    }
    let Err(RematError::BudgetTooSmall {
        smallest_budget, ..
    }) = chain.plan(CheckpointPolicy::Budget(0))
    else {
        panic!("an empty arena holds no plan");
    };
    let plan = chain
        .plan(CheckpointPolicy::Budget(smallest_budget))
        .unwrap();
    assert!(replays_in(&plan, smallest_budget));
    for fit in [
        Fit::Peak(11000),
        Fit::Arena(12288),
        Fit::Arena(smallest_budget - 256),
    ] {
        assert_eq!(
            chain.plan(fit.policy()),
            reference_plan(&chain, fit),
            "{fit:?}"
        );
    }
}

#[test]
fn a_peak_budget_just_below_save_all_on_3000_layers_plans_as_the_full_search_does() {
    // Past the greedy step's limit and the exhaustive counts: the spread-out search.
    let chain = Chain::new(1024, vec![Layer::new(1024, 1.0); 3000]).unwrap();
    let all = chain.plan(CheckpointPolicy::SaveAll).unwrap();
    let fit = Fit::Peak(all.peak_bytes() - 256);
    let plan = chain.plan(fit.policy());
    assert!(plan.as_ref().is_ok_and(|p| p.recompute_cost() > 0.0));
    assert_eq!(plan, reference_plan(&chain, fit));
}

#[test]
fn an_arena_budget_for_an_activation_larger_than_any_region_is_refused_as_the_model_refuses() {
    let huge = ArenaOptions::default().max_region_bytes + 1;
    let chain = Chain::new(1024, vec![Layer::new(1024, 1.0), Layer::new(huge, 1.0)]).unwrap();
    let fit = Fit::Arena(u64::MAX / 4);
    let refused = chain.plan(fit.policy());
    assert!(matches!(
        refused,
        Err(RematError::ActivationTooLarge { activation: 2, bytes, .. }) if bytes == huge
    ));
    assert_eq!(refused, reference_plan(&chain, fit));
}
