//! Choosing which activations the forward pass keeps.

use std::cmp::Ordering;
use std::collections::HashSet;

use super::chain::Chain;
use super::error::RematError;
use super::policy::CheckpointPolicy;
use super::schedule::{Schedule, Step};
use crate::arena::{ArenaOptions, ALLOCATION_ALIGNMENT, DEFAULT_LIMIT_BYTES};

/// Up to this many layers, a budget search tries every number of segments and every interval;
/// above, a spread of them (every count up to this, then steps of 2%), so planning stays
/// within milliseconds.
const EXHAUSTIVE_SEGMENT_COUNTS: usize = 1024;

/// Up to this many layers, a budget search then tries to keep each activation it recomputes
/// (one plan per layer, O(n²) in all); above, it stops at the best candidate.
const GREEDY_LAYER_LIMIT: usize = 2048;

/// The schedule `policy` gives for `chain`.
pub(crate) fn plan(chain: &Chain, policy: CheckpointPolicy) -> Result<Schedule, RematError> {
    let n = chain.layer_count();
    let keep = match policy {
        CheckpointPolicy::SaveAll => keep_all(n),
        CheckpointPolicy::EveryNth(0) => return Err(RematError::ZeroInterval),
        CheckpointPolicy::EveryNth(every) => every_nth(n, every),
        CheckpointPolicy::Sqrt => balanced(chain, (n as f64).sqrt().round() as usize),
        CheckpointPolicy::Budget(budget) => return within_budget(chain, Fit::Arena(budget)),
        CheckpointPolicy::PeakBudget(budget) => return within_budget(chain, Fit::Peak(budget)),
    };
    Ok(Schedule::build(chain, &keep))
}

/// What fitting a budget means.
#[derive(Clone, Copy, Debug)]
enum Fit {
    /// The plan replays in an arena preallocating this many bytes.
    Arena(u64),
    /// The plan's peak is at most this many bytes.
    Peak(u64),
}

impl Fit {
    fn budget(self) -> u64 {
        match self {
            Fit::Arena(budget) | Fit::Peak(budget) => budget,
        }
    }

    /// Whether `schedule` fits. The peak is checked first: it is exact and cheap, and no
    /// arena holds more than its size.
    fn holds(self, schedule: &Schedule) -> bool {
        schedule.peak_bytes() <= self.budget()
            && match self {
                Fit::Arena(budget) => schedule.fits_in_arena(budget),
                Fit::Peak(_) => true,
            }
    }
}

/// Keep flags (indexed by activation) that keep every activation.
fn keep_all(n: usize) -> Vec<bool> {
    vec![true; n]
}

/// Keep flags (indexed by activation) that cut the chain into `segments` segments of about
/// equal activation bytes (as the arena rounds them): activation `i` is kept where the bytes of
/// activations 1 to `i` first reach another `1/segments` of the total. One segment keeps
/// nothing; with equal activations, `n` keep all.
fn balanced(chain: &Chain, segments: usize) -> Vec<bool> {
    let n = chain.layer_count();
    let segments = segments.clamp(1, n) as u128;
    let bytes_of = |i| u128::from(chain.rounded_activation_bytes(i));
    // Only activations 1 to n − 1 can be checkpoints (the input and the last are kept anyway).
    let total: u128 = (1..n).map(bytes_of).sum();
    let mut keep = vec![false; n];
    let (mut bytes, mut cuts) = (0u128, 1u128);
    for (i, kept) in keep.iter_mut().enumerate().skip(1) {
        bytes += bytes_of(i);
        if cuts < segments && bytes * segments >= cuts * total {
            *kept = true;
            // One large activation may cross several cuts at once.
            while cuts < segments && bytes * segments >= cuts * total {
                cuts += 1;
            }
        }
    }
    keep
}

/// How a budget search ranks plans that fit: least recomputation first, then lowest peak.
fn by_rank(a: &Schedule, b: &Schedule) -> Ordering {
    (a.recompute_cost().total_cmp(&b.recompute_cost())).then(a.peak_bytes().cmp(&b.peak_bytes()))
}

/// Of keeping everything, every n-th and the balanced plans, the one with the least
/// recomputation (then the lowest peak) that fits; then, most costly layer first, every
/// activation it recomputes is kept instead where the plan still fits and recomputes less.
fn within_budget(chain: &Chain, fit: Fit) -> Result<Schedule, RematError> {
    if let Fit::Arena(_) = fit {
        check_regions_hold_activations(chain)?;
    }
    // With every layer costing something, a plan that recomputes nothing has the same steps
    // as keeping everything: when that fits, nothing ranks higher, and the search is skipped.
    let n = chain.layer_count();
    let all = Schedule::build(chain, &keep_all(n));
    if chain.layers().iter().all(|l| l.forward_cost > 0.0) && fit.holds(&all) {
        return Ok(all);
    }
    let mut candidates = candidates(chain);
    candidates.sort_by(by_rank);
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
                Step::Recompute { layer } => Some(layer),
                _ => None,
            })
            .collect();
        let cost = |i: usize| chain.layers()[i - 1].forward_cost;
        recomputed.sort_by(|&a, &b| cost(b).total_cmp(&cost(a)));
        for i in recomputed {
            keep[i] = true;
            let more = Schedule::build(chain, &keep);
            if by_rank(&more, &schedule).is_lt() && fit.holds(&more) {
                schedule = more;
            } else {
                keep[i] = false;
            }
        }
    }
    Ok(schedule)
}

/// The plans a budget search starts from (each once): keeping everything, every n-th
/// activation and the balanced cuts, for the counts [`search_counts`] gives.
fn candidates(chain: &Chain) -> Vec<Schedule> {
    let n = chain.layer_count();
    let keeps = std::iter::once(keep_all(n))
        .chain(search_counts(n).map(|every| every_nth(n, every)))
        .chain(search_counts(n).map(|segments| balanced(chain, segments)));
    let mut seen = HashSet::new();
    keeps
        .map(|keep| Schedule::build(chain, &keep))
        .filter(|schedule| seen.insert(schedule.checkpoints().to_vec()))
        .collect()
}

/// Refuses an arena budget for a chain with an activation larger than any arena region.
fn check_regions_hold_activations(chain: &Chain) -> Result<(), RematError> {
    let max_region_bytes = ArenaOptions::default().max_region_bytes;
    let too_large =
        (0..=chain.layer_count()).find(|&i| chain.rounded_activation_bytes(i) > max_region_bytes);
    match too_large {
        Some(activation) => Err(RematError::ActivationTooLarge {
            activation,
            bytes: chain.activation_bytes(activation),
            max_region_bytes,
        }),
        None => Ok(()),
    }
}

/// The error for a budget no candidate fits, naming the smallest budget that one does.
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
        // Only when no arena short of 2^63 bytes holds any plan.
        None => RematError::TooLarge,
    }
}

/// The smallest arena (a multiple of 256 bytes) that holds one of `candidates`, with that
/// candidate: no candidate fits in 256 bytes less. `None` when none fits below
/// [`DEFAULT_LIMIT_BYTES`].
fn smallest_arena(candidates: &[Schedule]) -> Option<(u64, &Schedule)> {
    let mut by_peak: Vec<&Schedule> = candidates.iter().collect();
    by_peak.sort_by_key(|s| s.peak_bytes());
    let first = *by_peak.first()?;
    // Arena sizes double from the bytes the plan ever allocates: in one region that always
    // fits (each buffer fits past the highest one placed so far); with several regions, more
    // does (once there are more regions than buffers live at once, one is empty).
    let mut bound = first.allocated_bytes();
    while !first.fits_in_arena(bound) {
        bound = bound.checked_mul(2).filter(|&b| b <= DEFAULT_LIMIT_BYTES)?;
    }
    let mut best = (smallest_fitting_arena(first, bound), first);
    // Another candidate may fit below the best so far; the sizes a plan fits in need not be
    // one interval, so look again until none fits 256 bytes lower.
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

/// The smallest arena size at or below `fits` (a multiple of 256 that holds `schedule`) found
/// by bisection from the plan's peak, below which no arena can hold it.
fn smallest_fitting_arena(schedule: &Schedule, fits: u64) -> u64 {
    let (mut low, mut high) = (
        schedule.peak_bytes().saturating_sub(ALLOCATION_ALIGNMENT),
        fits,
    );
    while high - low > ALLOCATION_ALIGNMENT {
        let mid = low + (high - low) / 2 / ALLOCATION_ALIGNMENT * ALLOCATION_ALIGNMENT;
        if schedule.fits_in_arena(mid) {
            high = mid;
        } else {
            low = mid;
        }
    }
    high
}

/// Keep flags that keep the output of every `every`-th layer.
fn every_nth(n: usize, every: usize) -> Vec<bool> {
    (0..n).map(|i| i % every == 0).collect()
}

/// The counts a budget search tries for `n` layers, as numbers of segments and as intervals
/// between kept activations.
fn search_counts(n: usize) -> impl Iterator<Item = usize> {
    let mut next = 1;
    std::iter::from_fn(move || {
        if next > n {
            return None;
        }
        let count = next;
        next = if count < EXHAUSTIVE_SEGMENT_COUNTS {
            count + 1
        } else if count < n {
            (count + count / 50).min(n)
        } else {
            n + 1
        };
        Some(count)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remat::Layer;

    #[test]
    fn balanced_cuts_a_uniform_chain_evenly_and_the_extremes_keep_nothing_or_everything() {
        let chain = Chain::new(1024, vec![Layer::new(1024, 1.0); 12]).unwrap();
        let kept = |keep: Vec<bool>| -> Vec<usize> { (1..12).filter(|&i| keep[i]).collect() };
        assert_eq!(kept(balanced(&chain, 4)), [3, 6, 9]);
        assert_eq!(kept(balanced(&chain, 1)), Vec::<usize>::new());
        assert_eq!(kept(balanced(&chain, 12)), (1..12).collect::<Vec<_>>());
        assert_eq!(kept(balanced(&chain, 100)), (1..12).collect::<Vec<_>>());
    }

    #[test]
    fn search_counts_cover_small_chains_fully_and_large_ones_sparsely_up_to_n() {
        assert_eq!(search_counts(5).collect::<Vec<_>>(), [1, 2, 3, 4, 5]);
        let large: Vec<usize> = search_counts(100_000).collect();
        assert_eq!(large[..3], [1, 2, 3]);
        assert_eq!(*large.last().unwrap(), 100_000);
        assert!(large.len() < 1500, "{} counts", large.len());
        assert!(large.windows(2).all(|w| w[0] < w[1]));
    }
}
