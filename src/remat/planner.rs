//! Choosing which activations the forward pass keeps.

use super::chain::Chain;
use super::error::RematError;
use super::policy::CheckpointPolicy;
use super::schedule::Schedule;

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
        CheckpointPolicy::Budget(budget) => return within_budget(chain, budget),
    };
    Ok(Schedule::build(chain, &keep))
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

/// Of keeping everything, every n-th and the balanced plans, the one with the least
/// recomputation (then the lowest peak) whose peak fits `budget`; then, most costly layer
/// first, every activation it recomputes is kept instead where the peak still fits.
fn within_budget(chain: &Chain, budget: u64) -> Result<Schedule, RematError> {
    let n = chain.layer_count();
    let candidates = std::iter::once(keep_all(n))
        .chain(search_counts(n).map(|every| every_nth(n, every)))
        .chain(search_counts(n).map(|segments| balanced(chain, segments)));
    let mut best: Option<(Schedule, Vec<bool>)> = None;
    let mut smallest: Option<Schedule> = None;
    for keep in candidates {
        let schedule = Schedule::build(chain, &keep);
        let order = |s: &Schedule| (s.recompute_cost(), s.peak_bytes());
        if schedule.peak_bytes() <= budget {
            if best
                .as_ref()
                .is_none_or(|(b, _)| order(&schedule) < order(b))
            {
                best = Some((schedule, keep));
            }
        } else if smallest
            .as_ref()
            .is_none_or(|s| schedule.peak_bytes() < s.peak_bytes())
        {
            smallest = Some(schedule);
        }
    }
    let Some((mut schedule, mut keep)) = best else {
        let smallest = smallest.expect("a plan that does not fit was recorded");
        return Err(RematError::BudgetTooSmall {
            budget,
            smallest_peak: smallest.peak_bytes(),
            checkpoints: smallest.checkpoints().len(),
        });
    };
    if n <= GREEDY_LAYER_LIMIT {
        let mut recomputed: Vec<usize> = (1..n).filter(|&i| !keep[i]).collect();
        let cost = |i: usize| chain.layers()[i - 1].forward_cost;
        recomputed.sort_by(|&a, &b| cost(b).total_cmp(&cost(a)));
        for i in recomputed {
            keep[i] = true;
            let more = Schedule::build(chain, &keep);
            if more.peak_bytes() <= budget && more.recompute_cost() <= schedule.recompute_cost() {
                schedule = more;
            } else {
                keep[i] = false;
            }
        }
    }
    Ok(schedule)
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
