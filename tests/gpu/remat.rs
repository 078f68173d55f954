//! Gradient checkpointing plans: every schedule only touches live buffers and frees all it
//! makes, its predicted peak is what the arena measures (and what a real context measures with
//! device arrays), and the policies trade memory for recomputation as they promise.

use crate::harness;
use std::collections::HashSet;

use gpu_arena::arena::{Arena, ArenaOptions, VirtualRegions, ALLOCATION_ALIGNMENT};
use gpu_arena::remat::{
    BackwardReads, Buffer, Chain, CheckpointPolicy, Layer, Placement, RematError, Schedule,
    ScheduleStep, StepCosts,
};
use proptest::prelude::*;

/// A growing arena with room for any test chain.
fn arena() -> (Arena, VirtualRegions) {
    (
        Arena::new(ArenaOptions::growing(1 << 40)),
        VirtualRegions::default(),
    )
}

/// What the arena takes for `bytes`, spelled out independently of the library.
fn rounded(bytes: u64) -> u64 {
    bytes.max(1).next_multiple_of(ALLOCATION_ALIGNMENT)
}

/// Walks `schedule` with its own live set, checking that every step reads live buffers (a
/// backward step its gradient and the activations its layer says it reads) and allocates
/// fresh ones, that every free comes right after the step that last used the buffer, that the
/// backward pass visits every layer once from the top, that the checkpoints are the
/// activations held through the forward pass, and that each recomputation is of an activation
/// not kept, happens once and is used. Returns the peak of rounded live bytes.
fn check(chain: &Chain, schedule: &Schedule) -> u64 {
    use Buffer::{Activation, Gradient};
    let n = chain.layer_count();
    let bytes = |b: Buffer| match b {
        Activation(0) | Gradient(0) => chain.input_bytes(),
        Activation(i) | Gradient(i) => chain.layers()[i - 1].activation_bytes,
    };
    let kept: HashSet<usize> = schedule.checkpoints().iter().copied().collect();
    let mut live = HashSet::from([Activation(0)]);
    let (mut bytes_live, mut peak) = (rounded(bytes(Activation(0))), 0);
    let (mut forward, mut backward, mut recomputed) = (vec![], vec![], vec![]);
    // Buffers used (read or made) by the last step that was not a free.
    let mut used_by_last_step: Vec<Buffer> = vec![];
    // Recomputed activations nothing has read yet.
    let mut unread_recomputations: HashSet<Buffer> = HashSet::new();
    // Activations in pinned host memory now.
    let mut offloaded: HashSet<usize> = HashSet::new();
    let mut add = |live: &mut HashSet<Buffer>, b: Buffer, bytes_live: &mut u64| {
        assert!(live.insert(b), "{b:?} allocated while live");
        *bytes_live += rounded(bytes(b));
        peak = peak.max(*bytes_live);
    };
    for step in schedule.steps() {
        let reads = match *step {
            ScheduleStep::Forward { layer } | ScheduleStep::Recompute { layer } => {
                vec![Activation(layer - 1)]
            }
            ScheduleStep::LossGradient { layer } => {
                assert_eq!(layer, n);
                let live_activations: HashSet<usize> = (1..n)
                    .filter(|&i| live.contains(&Activation(i)) || offloaded.contains(&i))
                    .collect();
                assert_eq!(
                    live_activations, kept,
                    "checkpoints are what the forward pass held"
                );
                vec![Activation(n)]
            }
            ScheduleStep::Backward { layer } => {
                let what = chain.layers()[layer - 1].backward_reads;
                assert_eq!(schedule.backward_reads(layer), Some(what));
                let mut reads = vec![Gradient(layer)];
                if what.input() {
                    reads.push(Activation(layer - 1));
                }
                if what.output() {
                    reads.push(Activation(layer));
                }
                reads
            }
            ScheduleStep::Free(buffer) => {
                assert_ne!(buffer, Activation(0), "the input is the caller's");
                assert!(live.remove(&buffer), "{buffer:?} freed while not live");
                assert!(
                    used_by_last_step.contains(&buffer),
                    "{buffer:?} freed later than right after its last use"
                );
                assert!(
                    !unread_recomputations.remove(&buffer),
                    "{buffer:?} recomputed for nothing"
                );
                bytes_live -= rounded(bytes(buffer));
                continue;
            }
            ScheduleStep::Offload { activation } => {
                assert!(backward.is_empty(), "{step:?} during the backward pass");
                assert!(
                    kept.contains(&activation),
                    "{step:?} of an activation not kept"
                );
                assert!(
                    live.remove(&Activation(activation)),
                    "{step:?} while not live"
                );
                assert!(
                    used_by_last_step.contains(&Activation(activation)),
                    "{step:?} later than right after its last forward use"
                );
                offloaded.insert(activation);
                bytes_live -= rounded(bytes(Activation(activation)));
                continue;
            }
            ScheduleStep::Prefetch { activation } => {
                assert!(
                    offloaded.remove(&activation),
                    "{step:?} of one not offloaded"
                );
                add(&mut live, Activation(activation), &mut bytes_live);
                continue;
            }
        };
        for b in &reads {
            assert!(live.contains(b), "{step:?} reads {b:?}, which is not live");
            unread_recomputations.remove(b);
        }
        used_by_last_step = reads;
        match *step {
            ScheduleStep::Forward { layer } => {
                assert!(backward.is_empty(), "forward after backward began");
                forward.push(layer);
            }
            ScheduleStep::Recompute { layer } => {
                assert!(!kept.contains(&layer), "{step:?} of a kept activation");
                recomputed.push(layer);
                unread_recomputations.insert(Activation(layer));
            }
            ScheduleStep::Backward { layer } => backward.push(layer),
            _ => {}
        }
        if let Some(b) = step.allocates() {
            add(&mut live, b, &mut bytes_live);
            used_by_last_step.push(b);
        }
    }
    assert_eq!(
        live,
        HashSet::from([Activation(0)]),
        "only the input is left"
    );
    assert_eq!(forward, (1..=n).collect::<Vec<_>>());
    assert_eq!(backward, (1..=n).rev().collect::<Vec<_>>());
    recomputed.sort_unstable();
    let mut once = recomputed.clone();
    once.dedup();
    assert_eq!(
        once, recomputed,
        "each activation is recomputed at most once"
    );
    let reads_input_only = chain
        .layers()
        .iter()
        .all(|l| l.backward_reads == BackwardReads::Input);
    if reads_input_only {
        let not_kept: Vec<usize> = (1..n).filter(|i| !kept.contains(i)).collect();
        assert_eq!(
            recomputed, not_kept,
            "with every backward reading its input, exactly the activations not kept are \
             recomputed"
        );
    }
    let cost: f64 = recomputed
        .iter()
        .map(|&i| chain.layers()[i - 1].forward_cost)
        .sum();
    assert!((schedule.recompute_cost() - cost).abs() <= 1e-9 * cost.max(1.0));
    peak
}

/// What a layer's backward reads: each case about as often.
fn backward_reads() -> impl Strategy<Value = BackwardReads> {
    prop_oneof![
        Just(BackwardReads::Input),
        Just(BackwardReads::Output),
        Just(BackwardReads::InputAndOutput),
    ]
}

/// Chains of 1 to 40 layers with activations from 0 bytes to 64 KiB, costs up to 10 and
/// backward steps that read their input, their output or both; a quarter of them made with
/// `Layer::new` alone (every backward reads its input).
fn chains() -> impl Strategy<Value = Chain> {
    (
        0..65_536u64,
        prop::collection::vec((0..65_536u64, 0.0..10.0f64, backward_reads()), 1..40),
        prop::bool::weighted(0.25),
    )
        .prop_map(|(input, layers, input_only)| {
            let layers = layers
                .into_iter()
                .map(|(bytes, cost, reads)| match input_only {
                    true => Layer::new(bytes, cost),
                    false => Layer::new(bytes, cost).with_backward_reads(reads),
                })
                .collect();
            Chain::new(input, layers).expect("valid chain")
        })
}

/// Whether `schedule` replays in an arena that preallocates `bytes`.
fn replays_in(schedule: &Schedule, bytes: u64) -> bool {
    let mut arena = Arena::new(ArenaOptions::preallocated(bytes));
    schedule
        .replay(&mut arena, &mut VirtualRegions::default())
        .is_ok()
}

/// The plan that keeps everything, and the plans of every simple policy.
fn simple_plans(chain: &Chain) -> (Schedule, Vec<Schedule>) {
    let all = chain.plan(CheckpointPolicy::SaveAll).unwrap();
    let simple = policies(chain.layer_count())
        .into_iter()
        .map(|p| chain.plan(p).unwrap())
        .collect();
    (all, simple)
}

fn policies(n: usize) -> Vec<CheckpointPolicy> {
    let mut policies = vec![CheckpointPolicy::SaveAll, CheckpointPolicy::Sqrt];
    policies.extend((1..=n + 1).map(CheckpointPolicy::EveryNth));
    policies
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn every_plan_touches_only_live_buffers_and_its_peak_is_what_the_arena_measures(
        chain in chains()
    ) {
        let (mut arena, mut regions) = arena();
        for policy in policies(chain.layer_count()) {
            let schedule = chain.plan(policy).unwrap();
            let peak = check(&chain, &schedule);
            prop_assert_eq!(schedule.peak_bytes(), peak, "{:?}", policy);
            let report = schedule.replay(&mut arena, &mut regions).unwrap();
            prop_assert_eq!(report.peak_bytes_in_use, peak, "{:?}", policy);
            prop_assert!(report.peak_bytes_reserved >= peak);
            prop_assert_eq!(arena.stats().bytes_in_use, 0, "the replay frees what it made");
        }
    }

    #[test]
    fn every_placement_with_offloads_is_a_plan_whose_device_and_host_peaks_are_exact(
        chain in chains(), placements in prop::collection::vec(0..3u8, 64)
    ) {
        let (mut arena, mut regions) = arena();
        let place = |i: usize| match placements[i % placements.len()] {
            0 => Placement::Keep,
            1 => Placement::Offload,
            _ => Placement::Recompute,
        };
        let schedule = chain.plan_placing(place);
        let peak = check(&chain, &schedule);
        prop_assert_eq!(schedule.peak_bytes(), peak);
        let report = schedule.replay(&mut arena, &mut regions).unwrap();
        prop_assert_eq!(report.peak_bytes_in_use, peak);
        prop_assert_eq!(arena.stats().bytes_in_use, 0);
        // Offloaded: the checkpoints placed so; all of them on the host at the forward pass's
        // end, the most the host ever holds.
        let offloaded: Vec<usize> = (schedule.checkpoints().iter().copied())
            .filter(|&i| place(i) == Placement::Offload)
            .collect();
        prop_assert_eq!(schedule.offloaded(), offloaded.clone());
        let host: u64 = offloaded
            .iter()
            .map(|&i| rounded(chain.layers()[i - 1].activation_bytes))
            .sum();
        prop_assert_eq!(schedule.host_peak_bytes(), host);
        // The same plan without the offloads: the same compute, more device memory.
        let kept = chain.plan_placing(|i| match place(i) {
            Placement::Offload => Placement::Keep,
            other => other,
        });
        prop_assert_eq!(schedule.recompute_cost(), kept.recompute_cost());
        prop_assert!(schedule.peak_bytes() <= kept.peak_bytes());
    }

    #[test]
    fn an_offload_budget_plan_recomputes_nothing_and_fits_where_it_says(
        chain in chains(), fractions in prop::collection::vec(0.0..1.1f64, 3)
    ) {
        let all = chain.plan(CheckpointPolicy::SaveAll).unwrap();
        for fraction in fractions {
            let budget = (all.peak_bytes() as f64 * fraction) as u64;
            match chain.plan(CheckpointPolicy::OffloadBudget(budget)) {
                Ok(schedule) => {
                    check(&chain, &schedule);
                    prop_assert_eq!(schedule.recompute_cost(), 0.0);
                    prop_assert!(replays_in(&schedule, budget), "the plan runs out of memory");
                    if replays_in(&all, budget) {
                        prop_assert!(schedule.offloaded().is_empty(), "nothing to offload");
                    }
                }
                Err(RematError::BudgetTooSmall { smallest_budget, .. }) => {
                    let fits = chain.plan(CheckpointPolicy::OffloadBudget(smallest_budget));
                    prop_assert!(fits.is_ok(), "{:?}", fits);
                    let everything = chain.plan_placing(|_| Placement::Offload);
                    prop_assert!(!replays_in(&everything, budget));
                    // Neither first plan is named above an arena of its peak that holds it.
                    for plan in [&all, &everything] {
                        let peak = rounded(plan.peak_bytes());
                        if replays_in(plan, peak) {
                            prop_assert!(smallest_budget <= peak, "{} > {}", smallest_budget, peak);
                        }
                    }
                }
                Err(other) => prop_assert!(false, "unexpected error {}", other),
            }
        }
    }

    #[test]
    fn the_fastest_plan_fits_beats_recomputing_or_offloading_alone_and_no_single_placement_change_beats_it(
        chain in chains(),
        fraction in 0.05..1.1f64,
        seconds_per_cost in 0.0..1e-3f64,
        bandwidth in 1e6..1e10f64,
    ) {
        let all = chain.plan(CheckpointPolicy::SaveAll).unwrap();
        let budget = (all.peak_bytes() as f64 * fraction) as u64;
        let costs = StepCosts {
            base_seconds: 0.01,
            seconds_per_cost,
            host_link_bytes_per_second: bandwidth,
        };
        let seconds = |plan: &Schedule| plan.predicted_step(&costs).total_seconds;
        let alone: Vec<Schedule> = [
            CheckpointPolicy::Budget(budget),
            CheckpointPolicy::OffloadBudget(budget),
        ]
        .into_iter()
        .filter_map(|policy| chain.plan(policy).ok())
        .collect();
        match chain.plan_fastest(budget, &costs) {
            Ok(plan) => {
                check(&chain, &plan);
                prop_assert!(replays_in(&plan, budget));
                for other in &alone {
                    prop_assert!(seconds(&plan) <= seconds(other));
                }
                // A local optimum: no activation placed otherwise gives a plan that fits and
                // is predicted faster.
                let n = chain.layer_count();
                let mut placed = vec![Placement::Recompute; n];
                for &i in plan.checkpoints().iter().filter(|&&i| i < n) {
                    placed[i] = Placement::Keep;
                }
                for i in plan.offloaded() {
                    placed[i] = Placement::Offload;
                }
                for i in 1..n {
                    let was = placed[i];
                    for other in [Placement::Keep, Placement::Offload, Placement::Recompute] {
                        placed[i] = other;
                        let neighbour = chain.plan_placing(|j| placed[j]);
                        prop_assert!(
                            !(seconds(&neighbour) < seconds(&plan) && replays_in(&neighbour, budget)),
                            "activation {} {:?} instead of {:?} is faster and fits", i, other, was
                        );
                    }
                    placed[i] = was;
                }
            }
            Err(RematError::BudgetTooSmall { smallest_budget, .. }) => {
                prop_assert!(alone.is_empty(), "a plan fits");
                prop_assert!(chain.plan_fastest(smallest_budget, &costs).is_ok());
            }
            Err(other) => prop_assert!(false, "unexpected error {}", other),
        }
    }

    #[test]
    fn a_budget_plan_replays_in_an_arena_of_the_budget_and_recomputes_no_more_than_a_simple_policy_that_does(
        chain in chains(), fractions in prop::collection::vec(0.0..1.3f64, 3)
    ) {
        let (all, simple) = simple_plans(&chain);
        for fraction in fractions {
            let budget = (all.peak_bytes() as f64 * fraction) as u64;
            match chain.plan(CheckpointPolicy::Budget(budget)) {
                Ok(schedule) => {
                    check(&chain, &schedule);
                    prop_assert!(schedule.peak_bytes() <= budget);
                    prop_assert!(replays_in(&schedule, budget), "the plan runs out of memory");
                    for other in simple.iter().filter(|s| replays_in(s, budget)) {
                        prop_assert!(schedule.recompute_cost() <= other.recompute_cost());
                    }
                }
                Err(RematError::BudgetTooSmall { smallest_budget, smallest_peak, .. }) => {
                    // Arena fit is not monotone in the arena's size (best fit chooses among holes
                    // by size, and the last hole grows with the arena), so the smallest budget
                    // found may lie below the one refused; it is never the refused one.
                    prop_assert!(smallest_budget != budget);
                    prop_assert!(smallest_peak <= smallest_budget);
                    for other in &simple {
                        prop_assert!(!replays_in(other, budget), "a simple policy fits");
                    }
                    // The smallest budget it names is one that fits, and is the smallest.
                    let fits = chain.plan(CheckpointPolicy::Budget(smallest_budget)).unwrap();
                    prop_assert!(replays_in(&fits, smallest_budget));
                    let below = smallest_budget - ALLOCATION_ALIGNMENT;
                    let refused = chain.plan(CheckpointPolicy::Budget(below));
                    prop_assert!(
                        matches!(refused, Err(RematError::BudgetTooSmall { .. })),
                        "{:?}", refused
                    );
                }
                Err(other) => prop_assert!(false, "unexpected error {}", other),
            }
        }
        // An arena as large as all of keeping everything's allocations together holds that
        // plan (each buffer fits past the highest one placed before), so nothing is recomputed.
        let every_allocation = rounded(chain.input_bytes())
            + all
                .steps()
                .iter()
                .filter_map(ScheduleStep::allocates)
                .map(|b| rounded(all.bytes(b).unwrap()))
                .sum::<u64>();
        let roomy = chain.plan(CheckpointPolicy::Budget(every_allocation)).unwrap();
        prop_assert_eq!(roomy.recompute_cost(), 0.0);
    }

    #[test]
    fn a_peak_budget_plan_peaks_within_it_and_recomputes_no_more_than_a_simple_policy_that_does(
        chain in chains(), fractions in prop::collection::vec(0.0..1.2f64, 4)
    ) {
        let (all, simple) = simple_plans(&chain);
        for fraction in fractions {
            let budget = (all.peak_bytes() as f64 * fraction) as u64;
            match chain.plan(CheckpointPolicy::PeakBudget(budget)) {
                Ok(schedule) => {
                    check(&chain, &schedule);
                    prop_assert!(schedule.peak_bytes() <= budget);
                    for other in simple.iter().filter(|s| s.peak_bytes() <= budget) {
                        prop_assert!(schedule.recompute_cost() <= other.recompute_cost());
                    }
                }
                Err(RematError::BudgetTooSmall { smallest_budget, smallest_peak, .. }) => {
                    prop_assert_eq!(smallest_budget, smallest_peak);
                    prop_assert!(smallest_peak > budget);
                    for other in &simple {
                        prop_assert!(other.peak_bytes() > budget, "a simple policy fits");
                    }
                    // The smallest peak it names is itself a budget that fits.
                    let fits = chain.plan(CheckpointPolicy::PeakBudget(smallest_peak)).unwrap();
                    prop_assert!(fits.peak_bytes() <= smallest_peak);
                }
                Err(other) => prop_assert!(false, "unexpected error {}", other),
            }
        }
        // Enough for keeping everything recomputes nothing.
        let roomy = chain.plan(CheckpointPolicy::PeakBudget(all.peak_bytes())).unwrap();
        prop_assert_eq!(roomy.recompute_cost(), 0.0);
    }
}

/// An offload budget too small for every plan names the smallest arena found of keeping
/// every activation on the device and of offloading every one: here keeping fits at its peak,
/// below the arena offloading everything needs; and an arena of a plan's peak that holds it
/// is named, not a larger size a bisection stopped at (which arena sizes hold a plan are not
/// one interval). `plan_fastest` names the same.
#[gpu_test]
fn an_offload_budget_refusal_names_the_smallest_arena_of_its_first_plans() {
    let reads = BackwardReads::InputAndOutput;
    let chain = Chain::new(
        35456,
        vec![
            Layer::new(19483, 1.0).with_backward_reads(reads),
            Layer::new(511, 1.0).with_backward_reads(reads),
        ],
    )
    .unwrap();
    let kept = chain.plan(CheckpointPolicy::SaveAll).unwrap();
    let Err(RematError::BudgetTooSmall {
        smallest_budget, ..
    }) = chain.plan(CheckpointPolicy::OffloadBudget(0))
    else {
        panic!("a budget of 0 fits");
    };
    assert_eq!(smallest_budget, rounded(kept.peak_bytes()));
    assert!(chain
        .plan(CheckpointPolicy::OffloadBudget(smallest_budget))
        .is_ok());

    let widths: [(u64, BackwardReads); 7] = [
        (64530, BackwardReads::Output),
        (0, BackwardReads::InputAndOutput),
        (920874, BackwardReads::Input),
        (143833, BackwardReads::Input),
        (169861, BackwardReads::InputAndOutput),
        (767, BackwardReads::Output),
        (59814, BackwardReads::Output),
    ];
    let layers = widths
        .iter()
        .map(|&(bytes, reads)| Layer::new(bytes, 1.0).with_backward_reads(reads))
        .collect();
    let chain = Chain::new(61768, layers).unwrap();
    let everything = chain.plan_placing(|_| Placement::Offload);
    let peak = rounded(everything.peak_bytes());
    assert!(replays_in(&everything, peak));
    for refusal in [
        chain.plan(CheckpointPolicy::OffloadBudget(0)),
        chain.plan_fastest(
            0,
            &gpu_arena::remat::StepCosts {
                base_seconds: 0.01,
                seconds_per_cost: 0.001,
                host_link_bytes_per_second: 1e9,
            },
        ),
    ] {
        let Err(RematError::BudgetTooSmall {
            smallest_budget, ..
        }) = refusal
        else {
            panic!("a budget of 0 fits: {refusal:?}");
        };
        assert!(smallest_budget <= peak, "{smallest_budget} > {peak}");
        assert!(chain
            .plan(CheckpointPolicy::OffloadBudget(smallest_budget))
            .is_ok());
    }
}

#[gpu_test]
fn sqrt_checkpointing_of_a_uniform_chain_needs_memory_of_order_root_n() {
    const MIB: u64 = 1 << 20;
    let n = 100;
    let chain = Chain::new(MIB, vec![Layer::new(MIB, 1.0); n]).unwrap();
    let all = chain.plan(CheckpointPolicy::SaveAll).unwrap();
    let sqrt = chain.plan(CheckpointPolicy::Sqrt).unwrap();
    // Keeping everything: the input, 100 activations and a gradient or two.
    assert!(all.peak_bytes() >= (n as u64 + 1) * MIB);
    // √n: 9 checkpoints kept, one 10-layer segment recomputed at a time, gradients.
    assert_eq!(sqrt.checkpoints().len(), 9);
    assert!(sqrt.peak_bytes() <= 24 * MIB, "{}", sqrt.peak_bytes());
    // Every activation but the checkpoints and the last is computed twice.
    assert_eq!(sqrt.recompute_cost(), (n - 1 - 9) as f64);
    assert!((sqrt.recompute_fraction() - 0.9).abs() < 1e-12);
    assert_eq!(all.recompute_fraction(), 0.0);
    assert_eq!(sqrt.bytes(Buffer::Gradient(n)), Some(MIB));
    assert_eq!(
        sqrt.bytes(Buffer::Activation(n + 1)),
        None,
        "no layer beyond the last"
    );
}

#[gpu_test]
fn linear_and_relu_pairs_keep_only_what_their_backward_steps_read() {
    const MIB: u64 = 1 << 20;
    let linear = Layer::new(MIB, 1.0);
    let relu = Layer::new(MIB, 1.0).with_backward_reads(BackwardReads::Output);
    let pairs = Chain::new(MIB, [linear, relu].repeat(4)).unwrap();
    let all = pairs.plan(CheckpointPolicy::SaveAll).unwrap();
    // A linear layer's output is read backward by neither the linear layer (its input) nor
    // the ReLU (its output): it goes as soon as the ReLU has run.
    assert_eq!(all.checkpoints(), [2, 4, 6]);
    assert_eq!(all.recompute_cost(), 0.0);
    // Input, activations 2, 4, 6, 8, the gradient of 8 and the one backward 8 makes.
    assert_eq!(all.peak_bytes(), 7 * MIB);
    assert_eq!(check(&pairs, &all), 7 * MIB);
    // The same widths with every backward reading its input keep everything.
    let inputs_only = Chain::new(MIB, vec![Layer::new(MIB, 1.0); 8]).unwrap();
    let all_inputs = inputs_only.plan(CheckpointPolicy::SaveAll).unwrap();
    assert_eq!(all_inputs.checkpoints(), [1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(all_inputs.peak_bytes(), 10 * MIB);
    // Checkpoints that cut the pairs unevenly still recompute only what is read.
    let every_3rd = pairs.plan(CheckpointPolicy::EveryNth(3)).unwrap();
    check(&pairs, &every_3rd);
    assert_eq!(pairs.layers()[0].backward_reads, BackwardReads::Input);
    assert_eq!(every_3rd.backward_reads(2), Some(BackwardReads::Output));
    assert_eq!(every_3rd.backward_reads(0), None);
    assert_eq!(every_3rd.backward_reads(9), None);
}

#[gpu_test]
fn invalid_chains_and_policies_are_refused_with_a_message_that_says_what_to_do() {
    let no_layers = Chain::new(1024, vec![]).unwrap_err();
    assert_eq!(no_layers, RematError::NoLayers);
    assert!(no_layers.to_string().contains("at least one layer"));

    let nan = Chain::new(1024, vec![Layer::new(1, 1.0), Layer::new(1, f64::NAN)]).unwrap_err();
    assert!(matches!(nan, RematError::InvalidCost { layer: 2, .. }));
    assert!(nan.to_string().contains("layer 2"), "{nan}");
    assert!(nan.to_string().contains("finite and at least 0"), "{nan}");
    let negative = Chain::new(0, vec![Layer::new(1, -1.0)]).unwrap_err();
    assert!(matches!(negative, RematError::InvalidCost { layer: 1, .. }));

    let huge = Chain::new(u64::MAX / 2, vec![Layer::new(u64::MAX / 2, 1.0)]).unwrap_err();
    assert_eq!(huge, RematError::TooLarge);
    assert!(huge.to_string().contains("2^64"));

    let chain = Chain::new(1024, vec![Layer::new(1 << 20, 1.0); 8]).unwrap();
    let zero = chain.plan(CheckpointPolicy::EveryNth(0)).unwrap_err();
    assert_eq!(zero, RematError::ZeroInterval);
    assert!(zero.to_string().contains("EveryNth(1)"), "{zero}");

    let tight = chain.plan(CheckpointPolicy::Budget(1 << 20)).unwrap_err();
    let RematError::BudgetTooSmall {
        smallest_budget,
        smallest_peak,
        checkpoints,
        ..
    } = tight
    else {
        panic!("expected BudgetTooSmall, got {tight:?}");
    };
    let message = tight.to_string();
    assert!(message.contains("1.00 MiB"), "{message}");
    assert!(message.contains(&smallest_budget.to_string()), "{message}");
    assert!(message.contains(&smallest_peak.to_string()), "{message}");
    assert!(
        message.contains(&format!("keeping {checkpoints} activations")),
        "{message}"
    );
    assert!(message.contains("Plan with that budget"), "{message}");
    // The library error wraps it and keeps the message.
    let wrapped = gpu_arena::Error::from(tight.clone());
    assert_eq!(wrapped.to_string(), message);

    let peak_tight = chain
        .plan(CheckpointPolicy::PeakBudget(1 << 20))
        .unwrap_err();
    let RematError::BudgetTooSmall {
        smallest_budget, ..
    } = peak_tight
    else {
        panic!("expected BudgetTooSmall, got {peak_tight:?}");
    };
    assert!(peak_tight
        .to_string()
        .contains(&smallest_budget.to_string()));

    // 5 GiB does not fit in one 4 GiB region, so no arena budget holds it; a peak budget does.
    let wide = Chain::new(
        1024,
        vec![Layer::new(1 << 20, 1.0), Layer::new(5 << 30, 1.0)],
    )
    .unwrap();
    let too_large = wide.plan(CheckpointPolicy::Budget(1 << 40)).unwrap_err();
    assert_eq!(
        too_large,
        RematError::ActivationTooLarge {
            activation: 2,
            bytes: 5 << 30,
            max_region_bytes: 4 << 30
        }
    );
    let message = too_large.to_string();
    assert!(message.contains("activation 2 has 5.00 GiB"), "{message}");
    assert!(message.contains("PeakBudget"), "{message}");
    assert!(wide.plan(CheckpointPolicy::PeakBudget(1 << 40)).is_ok());
}

/// 48 layers whose activations cycle through 4 to 48 MiB, as in the remat example.
fn mixed_width_network() -> Chain {
    const MIB: u64 = 1 << 20;
    let widths = [8, 24, 48, 12, 4, 24];
    let layers = (0..48)
        .map(|i| {
            Layer::new(
                widths[i % widths.len()] * MIB,
                widths[i % widths.len()] as f64,
            )
        })
        .collect();
    Chain::new(8 * MIB, layers).unwrap()
}

#[gpu_test]
fn a_peak_only_plan_can_overflow_an_arena_of_its_budget_where_the_budget_plan_fits() {
    let chain = mixed_width_network();
    let all = chain.plan(CheckpointPolicy::SaveAll).unwrap();
    let budget = all.peak_bytes() / 2;
    let by_peak = chain.plan(CheckpointPolicy::PeakBudget(budget)).unwrap();
    assert!(by_peak.peak_bytes() <= budget);
    assert!(
        !replays_in(&by_peak, budget),
        "freed activations leave holes: the peak alone does not place the buffers"
    );
    let in_arena = chain.plan(CheckpointPolicy::Budget(budget)).unwrap();
    assert!(replays_in(&in_arena, budget));
    assert!(in_arena.recompute_cost() >= by_peak.recompute_cost());
}

#[gpu_test]
fn budgets_beyond_one_region_plan_against_regions_of_at_most_four_gib() {
    const GIB: u64 = 1 << 30;
    // Two 3 GiB buffers never share a 4 GiB region, so the arena needs far more than the peak.
    let chain = Chain::new(GIB, vec![Layer::new(3 * GIB, 1.0); 6]).unwrap();
    let all = chain.plan(CheckpointPolicy::SaveAll).unwrap();
    assert!(!replays_in(&all, all.peak_bytes()));
    let budget = all.peak_bytes();
    let error = chain
        .plan(CheckpointPolicy::Budget(budget / 2))
        .unwrap_err();
    let RematError::BudgetTooSmall {
        smallest_budget, ..
    } = error
    else {
        panic!("expected BudgetTooSmall, got {error:?}");
    };
    let fits = chain
        .plan(CheckpointPolicy::Budget(smallest_budget))
        .unwrap();
    assert!(replays_in(&fits, smallest_budget));
    assert!(chain
        .plan(CheckpointPolicy::Budget(
            smallest_budget - ALLOCATION_ALIGNMENT
        ))
        .is_err());
    let roomy = chain.plan(CheckpointPolicy::Budget(budget)).unwrap();
    assert!(replays_in(&roomy, budget));
    // Budgets far past any plan are answered without reserving their size.
    let huge = chain.plan(CheckpointPolicy::Budget(u64::MAX)).unwrap();
    assert_eq!(huge.recompute_cost(), 0.0);
}

#[gpu_test]
fn a_replay_that_runs_out_of_memory_reports_it_and_leaves_the_arena_as_it_was() {
    let chain = Chain::new(1 << 20, vec![Layer::new(1 << 20, 1.0); 16]).unwrap();
    let schedule = chain.plan(CheckpointPolicy::SaveAll).unwrap();
    let mut regions = VirtualRegions::default();
    let mut arena = Arena::new(ArenaOptions::preallocated(12 << 20));
    let before = arena
        .allocate(4096, 0, Some("theirs"), &mut regions)
        .unwrap();
    let error = schedule.replay(&mut arena, &mut regions).unwrap_err();
    assert!(error.as_out_of_memory().is_some(), "{error}");
    let stats = arena.stats();
    assert_eq!(
        stats.bytes_in_use, before.size,
        "only the caller's allocation is left"
    );
    // The same arena fits a plan that fits its budget.
    let fits = chain.plan(CheckpointPolicy::Budget(10 << 20)).unwrap();
    let report = fits.replay(&mut arena, &mut regions).unwrap();
    assert_eq!(report.peak_bytes_in_use, fits.peak_bytes());
}

/// Runs `schedule` with real device arrays: each forward (or recomputed) layer fills its
/// activation with its layer number, each backward step checks its input holds the right
/// layer's values and fills the incoming gradient. Returns the context's peak bytes in use
/// during the run.
fn run_on_device(ctx: &gpu_arena::Context, schedule: &Schedule) -> u64 {
    use std::collections::HashMap;
    let elements = |b: Buffer| (schedule.bytes(b).unwrap() / 4) as usize;
    let input = ctx
        .fill::<u32>(&[elements(Buffer::Activation(0))], 0)
        .unwrap();
    ctx.synchronize().unwrap();
    ctx.reset_peak_stats();
    let mut live: HashMap<Buffer, gpu_arena::DeviceArray<u32>> = HashMap::new();
    for step in schedule.steps() {
        match *step {
            ScheduleStep::Backward { layer } if layer > 1 => {
                // Spot-check that recomputation rebuilt the input this layer reads.
                let read = &live[&Buffer::Activation(layer - 1)];
                assert_eq!(read.to_vec().unwrap()[0], (layer - 1) as u32, "{step:?}");
            }
            ScheduleStep::Free(buffer) => drop(live.remove(&buffer).expect("freed buffer is live")),
            _ => {}
        }
        if let Some(buffer) = step.allocates() {
            let value = match buffer {
                Buffer::Activation(i) => i as u32,
                Buffer::Gradient(i) => 1000 + i as u32,
            };
            live.insert(buffer, ctx.fill::<u32>(&[elements(buffer)], value).unwrap());
        }
    }
    assert!(live.is_empty());
    drop(input);
    ctx.memory_stats().peak_bytes_in_use
}

#[gpu_test]
fn a_plan_run_with_device_arrays_peaks_exactly_where_it_predicted() {
    let ctx = harness::context();
    let sizes = [
        256 << 10,
        64 << 10,
        512 << 10,
        128 << 10,
        256 << 10,
        1 << 20,
        64 << 10,
        320 << 10,
    ];
    let layers = sizes.iter().map(|&b| Layer::new(b, 1.0)).collect();
    let chain = Chain::new(128 << 10, layers).unwrap();
    for policy in [
        CheckpointPolicy::SaveAll,
        CheckpointPolicy::Sqrt,
        CheckpointPolicy::EveryNth(3),
    ] {
        let schedule = chain.plan(policy).unwrap();
        let peak = run_on_device(&ctx, &schedule);
        assert_eq!(peak, schedule.peak_bytes(), "{policy:?}");
    }
}

/// Two plans may leave the backward pass the same activations yet cut their recomputation
/// differently (here every 4th and every 5th layer of 5: layer 4's activation is kept by the
/// first but read by no backward step), so they allocate in another order and only one of them
/// fits an arena: a budget search tries both instead of one per set of checkpoints.
#[gpu_test]
fn plans_with_equal_checkpoints_are_each_tried_against_an_arena_budget() {
    use BackwardReads::{Input, Output};
    let layer = |bytes, reads| Layer::new(bytes, 0.0).with_backward_reads(reads);
    let chain = Chain::new(
        0,
        vec![
            layer(25_601, Input),
            layer(0, Output),
            layer(39_169, Input),
            layer(51_201, Input),
            layer(6_401, Output),
        ],
    )
    .unwrap();
    let (all, simple) = simple_plans(&chain);
    let budget = (all.peak_bytes() as f64 * 1.1527546398992512) as u64;
    assert!(
        simple.iter().any(|s| replays_in(s, budget)),
        "a simple policy fits this arena"
    );
    let plan = chain.plan(CheckpointPolicy::Budget(budget)).unwrap();
    assert!(replays_in(&plan, budget));
    assert_eq!(plan.recompute_cost(), 0.0);
}

/// `remat::Step`, the schedule step's old name, still names it (deprecated), so code written
/// against it compiles.
#[gpu_test]
#[allow(deprecated)]
fn the_old_step_name_still_names_a_schedule_step() {
    let step: gpu_arena::remat::Step = ScheduleStep::Forward { layer: 1 };
    assert_eq!(step.allocates(), Some(Buffer::Activation(1)));
}
