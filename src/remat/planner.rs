//! Choosing which activations the forward pass keeps.

use std::cmp::Ordering;
use std::collections::HashSet;

use super::chain::Chain;
use super::error::RematError;
use super::evaluate::Evaluator;
use super::policy::CheckpointPolicy;
use super::schedule::{Placement, Schedule, ScheduleStep};
use crate::arena::{ArenaOptions, ALLOCATION_ALIGNMENT, DEFAULT_LIMIT_BYTES};

/// The planner as a method of the chain it plans (written here so that `chain.rs`, which the
/// planner builds on, does not import it back).
impl Chain {
    /// Plans the forward and backward passes under `policy`.
    ///
    /// # Errors
    /// [`RematError::ZeroInterval`] for `EveryNth(0)`; [`RematError::BudgetTooSmall`] when no
    /// plan the planner considers fits the budget (the error gives the smallest peak found).
    pub fn plan(&self, policy: CheckpointPolicy) -> Result<Schedule, RematError> {
        plan(self, policy)
    }

    /// The schedule that keeps the activations `keep` selects: checkpoints placed by hand, as
    /// `jax.checkpoint` around chosen blocks places them. `keep` is asked once for each
    /// activation from 1 to n − 1, in order; the input and the last activation are always
    /// kept. As under every policy, a selected activation that no backward step reads and no
    /// recomputation starts from is freed during the forward pass, so
    /// [`Schedule::checkpoints`] can list fewer than were selected. Every selection is a plan,
    /// so this cannot fail.
    ///
    /// ```
    /// use gpu_arena::remat::{Chain, CheckpointPolicy, Layer};
    ///
    /// // A checkpoint at each block boundary of 4 layers: what EveryNth(4) keeps.
    /// let chain = Chain::new(1 << 20, vec![Layer::new(1 << 20, 1.0); 16])?;
    /// let by_hand = chain.plan_keeping(|activation| activation % 4 == 0);
    /// assert_eq!(by_hand.checkpoints(), [4, 8, 12]);
    /// assert_eq!(by_hand, chain.plan(CheckpointPolicy::EveryNth(4))?);
    /// # Ok::<(), gpu_arena::remat::RematError>(())
    /// ```
    pub fn plan_keeping(&self, mut keep: impl FnMut(usize) -> bool) -> Schedule {
        self.plan_placing(|activation| match keep(activation) {
            true => Placement::Keep,
            false => Placement::Recompute,
        })
    }

    /// The schedule that places each activation as `place` says: kept on the device, kept in
    /// pinned host memory between the passes ([`Placement::Offload`]: an
    /// [`Offload`](ScheduleStep::Offload) after its last forward use and a
    /// [`Prefetch`](ScheduleStep::Prefetch) before its first backward use), or recomputed.
    /// The manual form of JAX's offloading checkpoint policies
    /// (`save_and_offload_only_these_names`). `place` is asked once for each activation from
    /// 1 to n − 1, in order; the input and the last activation stay on the device. As in
    /// [`Chain::plan_keeping`], an activation no backward step reads is freed during the
    /// forward pass, offloaded or not. Every placement is a plan, so this cannot fail.
    ///
    /// ```
    /// use gpu_arena::remat::{Chain, CheckpointPolicy, Layer, Placement, ScheduleStep};
    ///
    /// let chain = Chain::new(1 << 20, vec![Layer::new(1 << 20, 1.0); 8])?;
    /// // Every activation kept, the first four in pinned host memory.
    /// let plan = chain.plan_placing(|i| if i <= 4 { Placement::Offload } else { Placement::Keep });
    /// assert_eq!(plan.offloaded(), [1, 2, 3, 4]);
    /// assert_eq!(plan.recompute_cost(), 0.0);
    /// assert_eq!(plan.host_peak_bytes(), 4 << 20);
    /// let save_all = chain.plan(CheckpointPolicy::SaveAll)?;
    /// assert_eq!(plan.peak_bytes(), save_all.peak_bytes() - (4 << 20));
    /// assert!(plan.steps().contains(&ScheduleStep::Offload { activation: 1 }));
    /// # Ok::<(), gpu_arena::remat::RematError>(())
    /// ```
    pub fn plan_placing(&self, mut place: impl FnMut(usize) -> Placement) -> Schedule {
        let n = self.layer_count();
        let placed: Vec<Placement> = std::iter::once(Placement::Keep)
            .chain((1..n).map(&mut place))
            .collect();
        let keep: Vec<bool> = placed.iter().map(|&p| p != Placement::Recompute).collect();
        let offload: Vec<bool> = placed.iter().map(|&p| p == Placement::Offload).collect();
        Schedule::build_offloading(self, &keep, &offload)
    }
}

/// Up to this many layers, a budget search tries every number of segments and every interval;
/// above, a spread of them (every count up to this, then steps of 2%), so planning stays
/// within milliseconds.
const EXHAUSTIVE_SEGMENT_COUNTS: usize = 1024;

/// Up to this many layers, a budget search then tries to keep each activation it recomputes
/// (one plan per layer, O(n²) in all); above, it stops at the best candidate.
const GREEDY_LAYER_LIMIT: usize = 2048;

/// Up to this many layers, [`Chain::plan_fastest`] then improves its plan one activation's
/// placement at a time (two plans per layer and pass, each O(n)); above, it stops at the
/// fastest of its families.
const LOCAL_SEARCH_LAYER_LIMIT: usize = 512;

/// The most passes of that local search (each accepted change makes the plan faster, so it
/// ends anyway; this bounds its time). A pass without a change ends it.
const LOCAL_SEARCH_PASSES: usize = 256;

/// The most keep sets [`Chain::plan_fastest`] offloads into a budget (spread over the budget
/// search's candidates), so that planning stays within seconds at thousands of layers.
const FASTEST_KEEP_SETS: usize = 64;

/// The schedule `policy` gives for `chain`.
pub(crate) fn plan(chain: &Chain, policy: CheckpointPolicy) -> Result<Schedule, RematError> {
    let n = chain.layer_count();
    let candidate = match policy {
        CheckpointPolicy::SaveAll => Candidate::All,
        CheckpointPolicy::EveryNth(0) => return Err(RematError::ZeroInterval),
        CheckpointPolicy::EveryNth(every) => Candidate::EveryNth(every),
        CheckpointPolicy::Sqrt => Candidate::Balanced((n as f64).sqrt().round() as usize),
        CheckpointPolicy::Budget(budget) => return within_budget(chain, Fit::Arena(budget)),
        CheckpointPolicy::PeakBudget(budget) => return within_budget(chain, Fit::Peak(budget)),
        CheckpointPolicy::OffloadBudget(budget) => return offload_within_budget(chain, budget),
    };
    Ok(Schedule::build(chain, &candidate.keep(chain)))
}

/// What fitting a budget means.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Fit {
    /// The plan replays in an arena preallocating this many bytes.
    Arena(u64),
    /// The plan's peak is at most this many bytes.
    Peak(u64),
}

impl Fit {
    pub(crate) fn budget(self) -> u64 {
        match self {
            Fit::Arena(budget) | Fit::Peak(budget) => budget,
        }
    }

    /// The schedule of a plan whose peak is `peak_bytes`, built by `build`, when it fits. The
    /// peak is checked first: it is exact and cheap, and no arena holds more than its size;
    /// only an arena budget builds the schedule to replay it.
    fn schedule_if_fits(
        self,
        peak_bytes: u64,
        build: impl FnOnce() -> Schedule,
    ) -> Option<Schedule> {
        if peak_bytes > self.budget() {
            return None;
        }
        let schedule = build();
        match self {
            Fit::Arena(budget) => schedule.fits_in_arena(budget).then_some(schedule),
            Fit::Peak(_) => Some(schedule),
        }
    }
}

/// Keep flags (indexed by activation, into `keep`) that cut the chain whose rounded activation
/// bytes (0 to n, as the arena rounds them) are `rounded` into `segments` segments of about
/// equal bytes: activation `i` is kept where the bytes of activations 1 to `i` first reach
/// another `1/segments` of the total. One segment keeps nothing; with equal activations, `n`
/// keep all.
fn balanced_into(rounded: &[u64], segments: usize, keep: &mut Vec<bool>) {
    let n = rounded.len() - 1;
    let segments = segments.clamp(1, n) as u128;
    let bytes_of = |i: usize| u128::from(rounded[i]);
    // Only activations 1 to n − 1 can be checkpoints (the input and the last are kept anyway).
    let total: u128 = (1..n).map(bytes_of).sum();
    keep.clear();
    keep.resize(n, false);
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
}

/// A plan a budget search starts from, by the rule that makes its keep flags: small enough to
/// hold thousands of, unlike their schedules.
#[derive(Clone, Copy, Debug)]
enum Candidate {
    /// Keep every activation.
    All,
    /// Keep every n-th activation.
    EveryNth(usize),
    /// The balanced cut into this many segments.
    Balanced(usize),
}

impl Candidate {
    /// Every candidate for `n` layers, in the search's order (which breaks ties in rank):
    /// keeping everything, every n-th activation and the balanced cuts, for the counts
    /// [`search_counts`] gives.
    fn all(n: usize) -> impl Iterator<Item = Candidate> {
        std::iter::once(Candidate::All)
            .chain(search_counts(n).map(Candidate::EveryNth))
            .chain(search_counts(n).map(Candidate::Balanced))
    }

    /// The candidate's keep flags (indexed by activation) for `chain`.
    fn keep(self, chain: &Chain) -> Vec<bool> {
        let rounded: Vec<u64> = (0..=chain.layer_count())
            .map(|i| chain.rounded_activation_bytes(i))
            .collect();
        let mut keep = Vec::new();
        self.keep_into(&rounded, &mut keep);
        keep
    }

    /// Writes the candidate's keep flags into `keep`, from the rounded activation bytes.
    fn keep_into(self, rounded: &[u64], keep: &mut Vec<bool>) {
        let n = rounded.len() - 1;
        match self {
            Candidate::All => {
                keep.clear();
                keep.resize(n, true);
            }
            Candidate::EveryNth(every) => {
                keep.clear();
                keep.extend((0..n).map(|i| i % every == 0));
            }
            Candidate::Balanced(segments) => balanced_into(rounded, segments, keep),
        }
    }
}

/// A candidate with the figures that rank it, without its schedule.
#[derive(Clone, Copy, Debug)]
struct Summary {
    candidate: Candidate,
    peak_bytes: u64,
    recompute_cost: f64,
    checkpoints: usize,
}

impl Summary {
    fn schedule(&self, chain: &Chain, rounded: &[u64]) -> Schedule {
        let mut keep = Vec::new();
        self.candidate.keep_into(rounded, &mut keep);
        Schedule::build(chain, &keep)
    }
}

/// A key for a candidate's keep flags: two hashes of them (a collision in both would drop a
/// candidate; 128 bits make that as unlikely as a hardware fault).
fn keep_key(keep: &[bool]) -> (u64, u64) {
    use std::hash::{Hash, Hasher};
    let mut first = std::collections::hash_map::DefaultHasher::new();
    let mut second = std::collections::hash_map::DefaultHasher::new();
    second.write_u8(0x5a);
    keep.hash(&mut first);
    keep.hash(&mut second);
    (first.finish(), second.finish())
}

/// How a budget search ranks plans that fit: least recomputation first, then lowest peak.
fn by_rank(recompute_cost: f64, peak_bytes: u64, other: (f64, u64)) -> Ordering {
    recompute_cost
        .total_cmp(&other.0)
        .then(peak_bytes.cmp(&other.1))
}

/// Of keeping everything, every n-th and the balanced plans, the one with the least
/// recomputation (then the lowest peak) that fits; then, most costly layer first, every
/// activation it recomputes is kept instead where the plan still fits and ranks higher
/// (recomputes less, or as much at a lower peak). When no candidate fits a peak budget, the
/// plan this search returns at the candidates' smallest peak, if that plan (refined, it may
/// peak lower than every candidate) fits; else the error naming the smallest budget accepted.
/// (Which arenas hold a plan is not one interval, so an arena budget's error names the
/// smallest arena found for the candidates alone.)
///
/// In bounded memory: each candidate is evaluated from its keep flags (an [`Evaluator`]
/// walks its steps without storing them) and kept as a [`Summary`] of a few numbers; only the
/// plan returned, and the plans an arena budget replays, are built as schedules. The result
/// is the one building every candidate gives (`tests/host/remat_reference_planner.rs` checks
/// it against that search).
pub(super) fn within_budget(chain: &Chain, fit: Fit) -> Result<Schedule, RematError> {
    if let Fit::Arena(_) = fit {
        check_regions_hold_activations(chain)?;
    }
    let refused = match (fit, search_budget(chain, fit)) {
        (
            Fit::Peak(_),
            Err(RematError::BudgetTooSmall {
                smallest_budget, ..
            }),
        ) => smallest_budget,
        (_, found) => return found,
    };
    // A candidate peaks at the smallest budget, so this search finds a plan; refined, its
    // peak may be lower still, and every budget from that peak up holds it.
    let at_smallest = search_budget(chain, Fit::Peak(refused))?;
    if at_smallest.peak_bytes() <= fit.budget() {
        return Ok(at_smallest);
    }
    Err(RematError::BudgetTooSmall {
        budget: fit.budget(),
        smallest_budget: at_smallest.peak_bytes(),
        smallest_peak: at_smallest.peak_bytes(),
        checkpoints: at_smallest.checkpoints().len(),
    })
}

/// [`within_budget`]'s search proper: the candidates, the first that fits, refined; or the
/// error naming the smallest budget one of the candidates fits.
fn search_budget(chain: &Chain, fit: Fit) -> Result<Schedule, RematError> {
    let n = chain.layer_count();
    let mut evaluator = Evaluator::new(chain);
    let rounded = evaluator.rounded_activation_bytes().to_vec();
    let mut keep = vec![true; n];
    // With every layer costing something, a plan that recomputes nothing has the same steps
    // as keeping everything: when that fits, nothing ranks higher, and the search is skipped.
    if chain.layers().iter().all(|l| l.forward_cost > 0.0) {
        let all = evaluator.evaluate(&keep, None);
        if let Some(all) = fit.schedule_if_fits(all.peak_bytes, || Schedule::build(chain, &keep)) {
            return Ok(all);
        }
    }
    // Each candidate once, by its keep flags (the first of equal ones stays). Not by its
    // checkpoints: two candidates that leave the backward pass the same activations may still
    // cut their recomputation segments differently (a kept activation no backward step reads),
    // and so order their allocations differently, and only one of them may fit an arena.
    let mut seen = HashSet::new();
    let mut summaries: Vec<Summary> = Vec::new();
    for candidate in Candidate::all(n) {
        candidate.keep_into(&rounded, &mut keep);
        let evaluation = evaluator.evaluate(&keep, None);
        if seen.insert(keep_key(&keep)) {
            summaries.push(Summary {
                candidate,
                peak_bytes: evaluation.peak_bytes,
                recompute_cost: evaluation.recompute_cost,
                checkpoints: evaluation.checkpoints,
            });
        }
    }
    // A stable sort: among equals, the earlier candidate comes first.
    summaries.sort_by(|a, b| {
        by_rank(
            a.recompute_cost,
            a.peak_bytes,
            (b.recompute_cost, b.peak_bytes),
        )
    });
    let found = summaries.iter().find_map(|summary| {
        fit.schedule_if_fits(summary.peak_bytes, || summary.schedule(chain, &rounded))
    });
    let Some(mut schedule) = found else {
        return Err(smallest_budget(fit, chain, &rounded, &summaries));
    };
    if n <= GREEDY_LAYER_LIMIT {
        for i in greedy_refinement_start(chain, &schedule, &mut keep) {
            keep[i] = true;
            let more = evaluator.evaluate(&keep, None);
            let ranks_higher = by_rank(
                more.recompute_cost,
                more.peak_bytes,
                (schedule.recompute_cost(), schedule.peak_bytes()),
            )
            .is_lt();
            let fits = ranks_higher
                .then(|| fit.schedule_if_fits(more.peak_bytes, || Schedule::build(chain, &keep)))
                .flatten();
            match fits {
                Some(more) => schedule = more,
                None => keep[i] = false,
            }
        }
    }
    Ok(schedule)
}

/// Where the greedy refinement of a found `schedule` starts: `keep` set to its checkpoints,
/// and the layers it recomputes in the order the refinement tries keeping them instead, the
/// most costly forward pass first.
fn greedy_refinement_start(chain: &Chain, schedule: &Schedule, keep: &mut Vec<bool>) -> Vec<usize> {
    keep.clear();
    keep.resize(chain.layer_count(), false);
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
    recomputed
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

/// The error for a budget no candidate fits, naming the smallest budget that one does
/// (`summaries` in rank order: the first of equals is named).
fn smallest_budget(fit: Fit, chain: &Chain, rounded: &[u64], summaries: &[Summary]) -> RematError {
    let found = match fit {
        Fit::Peak(_) => summaries
            .iter()
            .min_by_key(|s| s.peak_bytes)
            .map(|s| (s.peak_bytes, s)),
        Fit::Arena(_) => smallest_arena(chain, rounded, summaries),
    };
    match found {
        Some((smallest_budget, summary)) => RematError::BudgetTooSmall {
            budget: fit.budget(),
            smallest_budget,
            smallest_peak: summary.peak_bytes,
            checkpoints: summary.checkpoints,
        },
        // Only when no arena short of 2^63 bytes holds any plan.
        None => RematError::TooLarge,
    }
}

/// The smallest arena (a multiple of 256 bytes) that holds one of the candidates, with that
/// candidate: no candidate fits in 256 bytes less. `None` when none fits below
/// [`DEFAULT_LIMIT_BYTES`]. Each candidate replayed is built for it, one at a time.
fn smallest_arena<'s>(
    chain: &Chain,
    rounded: &[u64],
    summaries: &'s [Summary],
) -> Option<(u64, &'s Summary)> {
    let mut by_peak: Vec<&Summary> = summaries.iter().collect();
    by_peak.sort_by_key(|s| s.peak_bytes);
    let first = *by_peak.first()?;
    let first_schedule = first.schedule(chain, rounded);
    let mut best = (smallest_arena_of(&first_schedule)?, first);
    // Another candidate may fit below the best so far; the sizes a plan fits in need not be
    // one interval, so look again until none fits 256 bytes lower.
    loop {
        let below = best.0.saturating_sub(ALLOCATION_ALIGNMENT);
        let Some((better, schedule)) = by_peak
            .iter()
            .take_while(|s| s.peak_bytes <= below)
            .find_map(|s| {
                let schedule = s.schedule(chain, rounded);
                schedule.fits_in_arena(below).then_some((*s, schedule))
            })
        else {
            return Some(best);
        };
        best = (smallest_fitting_arena(&schedule, below), better);
    }
}

/// The smallest arena (a multiple of 256 bytes) found that holds `schedule`; `None` when none
/// below [`DEFAULT_LIMIT_BYTES`] does.
fn smallest_arena_of(schedule: &Schedule) -> Option<u64> {
    // Arena sizes double from the bytes the plan ever allocates: in one region that always
    // fits (each buffer fits past the highest one placed so far); with several regions, more
    // does (once there are more regions than buffers live at once, one is empty).
    let mut bound = schedule.allocated_bytes();
    while !schedule.fits_in_arena(bound) {
        bound = bound.checked_mul(2).filter(|&b| b <= DEFAULT_LIMIT_BYTES)?;
    }
    Some(smallest_fitting_arena(schedule, bound))
}

/// The plan of [`CheckpointPolicy::OffloadBudget`]: every activation kept, as few offloaded
/// as the search finds for a plan that replays in an arena of `budget` bytes. When none does,
/// the refusal names the smaller of the smallest arenas found for the two plans the search
/// accepts first: every activation on the device, and every one offloaded (offloading can
/// need more room than it saves, a prefetched copy beside the buffers it meets).
fn offload_within_budget(chain: &Chain, budget: u64) -> Result<Schedule, RematError> {
    check_regions_hold_activations(chain)?;
    let keep = vec![true; chain.layer_count()];
    offload_to_fit(chain, &keep, Fit::Arena(budget), true).map_err(|all| {
        let smallest = [Schedule::build(chain, &keep), *all]
            .into_iter()
            .filter_map(|plan| Some((smallest_arena_of(&plan)?, plan)))
            .min_by_key(|(bytes, _)| *bytes);
        match smallest {
            Some((smallest_budget, plan)) => RematError::BudgetTooSmall {
                budget,
                smallest_budget,
                smallest_peak: plan.peak_bytes(),
                checkpoints: plan.checkpoints().len(),
            },
            None => RematError::TooLarge,
        }
    })
}

/// The plan keeping `keep` that offloads as few of its checkpoints as the search finds and
/// fits: none when the plan fits as it is; else every one, then back on the device the largest
/// first (the fewest bytes moved), and of equal ones the last (the backward pass needs it
/// first): the longest prefix of that order that fits, found by bisection (more on the device
/// holds more at the forward pass's end), then, with `refine` and up to [`GREEDY_LAYER_LIMIT`]
/// layers, each later one wherever the plan still fits. `Err`: the plan with every checkpoint
/// offloaded, which does not fit either.
fn offload_to_fit(
    chain: &Chain,
    keep: &[bool],
    fit: Fit,
    refine: bool,
) -> Result<Schedule, Box<Schedule>> {
    let n = chain.layer_count();
    let on_device = Schedule::build(chain, keep);
    if let Some(fits) = fit.schedule_if_fits(on_device.peak_bytes(), || on_device) {
        return Ok(fits);
    }
    let all = Schedule::build_offloading(chain, keep, &vec![true; n]);
    let Some(mut schedule) = fit.schedule_if_fits(all.peak_bytes(), || all.clone()) else {
        return Err(Box::new(all));
    };
    let mut order: Vec<usize> = schedule.offloaded();
    order.sort_by_key(|&i| std::cmp::Reverse((chain.rounded_activation_bytes(i), i)));
    let build = |back: &[usize]| {
        let mut offload = vec![true; n];
        back.iter().for_each(|&i| offload[i] = false);
        Schedule::build_offloading(chain, keep, &offload)
    };
    let (mut low, mut high) = (0, order.len());
    while low < high {
        let mid = (low + high).div_ceil(2);
        let candidate = build(&order[..mid]);
        match fit.schedule_if_fits(candidate.peak_bytes(), || candidate) {
            Some(fits) => (low, schedule) = (mid, fits),
            None => high = mid - 1,
        }
    }
    if refine && n <= GREEDY_LAYER_LIMIT {
        let mut back = order[..low].to_vec();
        for &i in &order[low..] {
            back.push(i);
            let candidate = build(&back);
            match fit.schedule_if_fits(candidate.peak_bytes(), || candidate) {
                Some(fits) => schedule = fits,
                None => {
                    back.pop();
                }
            }
        }
    }
    Ok(schedule)
}

/// [`Chain::plan_fastest`]: the least predicted step time among the plans that fit an arena of
/// `budget`: [`Budget`](CheckpointPolicy::Budget)'s, and for each keep set the budget search
/// tries (everything, every n-th, the balanced cuts) the plan that offloads as few of its
/// checkpoints as fit ([`offload_to_fit`]); keeping everything so is
/// [`OffloadBudget`](CheckpointPolicy::OffloadBudget)'s plan; then improved one placement at
/// a time ([`improve_placements`]). `cost` predicts a plan's time.
pub(super) fn fastest_within_budget(
    chain: &Chain,
    budget: u64,
    cost: impl Fn(&Schedule) -> f64,
) -> Result<Schedule, RematError> {
    // An activation no region holds fits no arena, whatever is offloaded or recomputed.
    check_regions_hold_activations(chain)?;
    let recompute = within_budget(chain, Fit::Arena(budget));
    let n = chain.layer_count();
    let rounded: Vec<u64> = (0..=n).map(|i| chain.rounded_activation_bytes(i)).collect();
    let mut best: Option<(f64, Schedule)> = None;
    let mut consider = |plan: Schedule| {
        let seconds = cost(&plan);
        if best.as_ref().is_none_or(|(fastest, _)| seconds < *fastest) {
            best = Some((seconds, plan));
        }
    };
    if let Ok(plan) = &recompute {
        consider(plan.clone());
    }
    // Each keep set costs a bisection of plan builds: a spread of at most
    // FASTEST_KEEP_SETS of them, keeping everything (refined, as OffloadBudget) first.
    let candidates: Vec<Candidate> = Candidate::all(n).collect();
    let every = candidates.len().div_ceil(FASTEST_KEEP_SETS).max(1);
    let (mut keep, mut seen) = (Vec::new(), HashSet::new());
    for (i, candidate) in candidates.into_iter().enumerate().step_by(every) {
        candidate.keep_into(&rounded, &mut keep);
        if seen.insert(keep_key(&keep)) {
            if let Ok(plan) = offload_to_fit(chain, &keep, Fit::Arena(budget), i == 0) {
                consider(plan);
            }
        }
    }
    match best {
        Some(best) => Ok(improve_placements(chain, best, Fit::Arena(budget), cost).1),
        // Nothing fits: the smaller budget of recomputing and of offloading everything.
        None => match (recompute, offload_within_budget(chain, budget)) {
            (
                Err(RematError::BudgetTooSmall {
                    smallest_budget: a, ..
                }),
                Err(
                    other @ RematError::BudgetTooSmall {
                        smallest_budget: b, ..
                    },
                ),
            ) if b < a => Err(other),
            (Err(error), _) => Err(error),
            (Ok(plan), _) => Ok(plan),
        },
    }
}

/// Where `schedule` places each activation below `n`: offloaded, else kept (a checkpoint),
/// else recomputed.
fn placements(schedule: &Schedule, n: usize) -> Vec<Placement> {
    let mut placed = vec![Placement::Recompute; n];
    for &i in schedule.checkpoints().iter().filter(|&&i| i < n) {
        placed[i] = Placement::Keep;
    }
    for i in schedule.offloaded() {
        placed[i] = Placement::Offload;
    }
    placed
}

/// The local search after [`fastest_within_budget`]'s families, up to
/// [`LOCAL_SEARCH_LAYER_LIMIT`] layers: one activation's placement changed at a time (to either
/// other placement) wherever the plan still fits and is predicted faster, pass after pass until
/// no single change helps (or [`LOCAL_SEARCH_PASSES`] passes). Every plan taken fits and beats
/// the one before, so the result is never slower than `best`.
fn improve_placements(
    chain: &Chain,
    mut best: (f64, Schedule),
    fit: Fit,
    cost: impl Fn(&Schedule) -> f64,
) -> (f64, Schedule) {
    let n = chain.layer_count();
    if n > LOCAL_SEARCH_LAYER_LIMIT {
        return best;
    }
    let mut placed = placements(&best.1, n);
    for _ in 0..LOCAL_SEARCH_PASSES {
        let mut improved = false;
        for i in 1..n {
            for other in [Placement::Keep, Placement::Offload, Placement::Recompute] {
                let was = placed[i];
                if other == was {
                    continue;
                }
                placed[i] = other;
                let candidate = chain.plan_placing(|j| placed[j]);
                let faster = fit
                    .schedule_if_fits(candidate.peak_bytes(), || candidate)
                    .map(|fits| (cost(&fits), fits))
                    .filter(|(seconds, _)| *seconds < best.0);
                match faster {
                    // The plan may place what nothing reads otherwise than asked: go on from
                    // its own placements, so that the result is a local optimum of itself.
                    Some(taken) => {
                        (best, improved) = (taken, true);
                        placed = placements(&best.1, n);
                    }
                    None => placed[i] = was,
                }
            }
        }
        if !improved {
            break;
        }
    }
    best
}

/// The smallest arena size at or below `fits` (a multiple of 256 that holds `schedule`) found:
/// the plan's peak, below which no arena can hold it, when an arena of that size does; else
/// by bisection from there (the sizes that hold a plan need not be one interval).
fn smallest_fitting_arena(schedule: &Schedule, fits: u64) -> u64 {
    let peak =
        (schedule.peak_bytes().next_multiple_of(ALLOCATION_ALIGNMENT)).max(ALLOCATION_ALIGNMENT);
    if peak <= fits && schedule.fits_in_arena(peak) {
        return peak;
    }
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
    use crate::remat::chain::Layer;

    #[test]
    fn a_peak_budget_search_over_20000_layers_builds_one_schedule_not_one_per_candidate() {
        // Before: about 2,300 schedules of 20,000 layers held at once (4.8 GB, ~30 s).
        let chain = Chain::new(1024, vec![Layer::new(1024, 1.0); 20_000]).unwrap();
        let all = Schedule::build(&chain, &vec![true; 20_000]);
        let budget = all.peak_bytes() - 256;
        drop(all);
        crate::remat::schedule::BUILDS.with(|builds| builds.set(0));
        let plan = within_budget(&chain, Fit::Peak(budget)).unwrap();
        assert_eq!(
            crate::remat::schedule::BUILDS.with(|builds| builds.get()),
            1
        );
        assert!(plan.peak_bytes() <= budget);
        assert!(plan.recompute_cost() > 0.0);
        // An arena budget builds only what it replays: here the save-all plan does not fit
        // and the first candidate that fits its peak replays in the arena.
        crate::remat::schedule::BUILDS.with(|builds| builds.set(0));
        let arena_plan = within_budget(&chain, Fit::Arena(budget)).unwrap();
        assert!(crate::remat::schedule::BUILDS.with(|builds| builds.get()) <= 3);
        assert!(arena_plan.peak_bytes() <= budget);
    }

    #[test]
    fn balanced_cuts_a_uniform_chain_evenly_and_the_extremes_keep_nothing_or_everything() {
        let chain = Chain::new(1024, vec![Layer::new(1024, 1.0); 12]).unwrap();
        let kept = |keep: Vec<bool>| -> Vec<usize> { (1..12).filter(|&i| keep[i]).collect() };
        assert_eq!(kept(Candidate::Balanced(4).keep(&chain)), [3, 6, 9]);
        assert_eq!(
            kept(Candidate::Balanced(1).keep(&chain)),
            Vec::<usize>::new()
        );
        assert_eq!(
            kept(Candidate::Balanced(12).keep(&chain)),
            (1..12).collect::<Vec<_>>()
        );
        assert_eq!(
            kept(Candidate::Balanced(100).keep(&chain)),
            (1..12).collect::<Vec<_>>()
        );
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
