//! Running checkpointing schedules on a context with a model's own kernels: the context's peak
//! is the plan's to the byte under every policy, the gradients are the same under every
//! policy, the caller's arrays are reported apart, and a failing step frees what the run made.

use crate::harness;
use gpu_arena::backprop::{BackwardArrays, ChainModel};
use gpu_arena::remat::{
    BackwardReads, Chain, CheckpointPolicy, Layer, Placement, RematError, Schedule, ScheduleStep,
};
use gpu_arena::{Context, DeviceArray, Error, MemoryKind};

/// A step of the model, as it saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Call {
    Forward(usize),
    Recompute(usize),
    LossGradient,
    Backward(usize),
}

/// What a [`Probe`] does when it reaches `at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Misstep {
    /// Returns an error.
    Fail,
    /// Returns a new array instead of the one it was given (or the wrong `Option`).
    ReturnAnother,
    /// Allocates `bytes` of its own, live until the step returns.
    Temporary(usize),
}

/// A deterministic model on `u32` arrays: each forward fills its output with a mix of its
/// input's value and the layer number, the loss gradient and each backward step do the same
/// with what they read, and each backward step records a "parameter gradient" mixed from
/// everything it was given. The arrays are uniform (fills write no temporaries), and reading
/// a whole array checks that it is. Any wrong or stale array changes the recorded values.
struct Probe {
    calls: Vec<Call>,
    /// The parameter gradient of each layer (index 0 unused).
    parameter_gradients: Vec<Option<u32>>,
    misstep: Option<(Call, Misstep)>,
}

impl Probe {
    fn new(layers: usize) -> Probe {
        Probe {
            calls: vec![],
            parameter_gradients: vec![None; layers + 1],
            misstep: None,
        }
    }

    fn with_misstep(layers: usize, at: Call, misstep: Misstep) -> Probe {
        Probe {
            misstep: Some((at, misstep)),
            ..Probe::new(layers)
        }
    }

    /// What to do at `call` (recording it), or an error for a `Fail` misstep there.
    fn enter(&mut self, call: Call) -> Result<Option<Misstep>, Error> {
        self.calls.push(call);
        match self.misstep {
            Some((at, Misstep::Fail)) if at == call => Err(Error::InvalidArgument {
                operation: "the probe model",
                reason: format!("failing on purpose at {call:?}"),
            }),
            Some((at, misstep)) if at == call => Ok(Some(misstep)),
            _ => Ok(None),
        }
    }
}

impl Probe {
    /// Layer `layer` forward, recorded as `call`: the output is a mix of the input's value
    /// and the layer number.
    fn run_forward(
        &mut self,
        call: Call,
        ctx: &Context,
        layer: usize,
        input: &DeviceArray<u32>,
        output: DeviceArray<u32>,
    ) -> Result<DeviceArray<u32>, Error> {
        let misstep = self.enter(call)?;
        let _temporary = temporary(ctx, misstep);
        if misstep == Some(Misstep::ReturnAnother) {
            return ctx.alloc(output.shape());
        }
        let filled = ctx.fill_in_place(output, mix(&[value(ctx, input), layer as u32]))?;
        Ok(filled)
    }
}

/// A deterministic mix of `values` (splitmix-like), distinct for any change in one of them.
fn mix(values: &[u32]) -> u32 {
    values.iter().fold(0x2545_f491u32, |h, &v| {
        (h ^ v).wrapping_mul(0x9e37_79b1).rotate_left(13)
    })
}

/// The one value of a uniform array.
fn value(ctx: &Context, array: &DeviceArray<u32>) -> u32 {
    let values = ctx.device_get(array).unwrap();
    assert!(
        values.iter().all(|&v| v == values[0]),
        "a step left part of an array unwritten"
    );
    values[0]
}

/// A temporary of `bytes` for a `Temporary` misstep, or none.
fn temporary(ctx: &Context, misstep: Option<Misstep>) -> Option<DeviceArray<u8>> {
    match misstep {
        Some(Misstep::Temporary(bytes)) => Some(ctx.zeros::<u8>(&[bytes]).unwrap()),
        _ => None,
    }
}

impl ChainModel for Probe {
    type Element = u32;
    type Error = Error;

    fn forward(
        &mut self,
        ctx: &Context,
        layer: usize,
        input: &DeviceArray<u32>,
        output: DeviceArray<u32>,
    ) -> Result<DeviceArray<u32>, Error> {
        self.run_forward(Call::Forward(layer), ctx, layer, input, output)
    }

    fn recompute(
        &mut self,
        ctx: &Context,
        layer: usize,
        input: &DeviceArray<u32>,
        output: DeviceArray<u32>,
    ) -> Result<DeviceArray<u32>, Error> {
        // The same values as forward (so recomputation is exact), recorded apart.
        self.run_forward(Call::Recompute(layer), ctx, layer, input, output)
    }

    fn loss_gradient(
        &mut self,
        ctx: &Context,
        output: &DeviceArray<u32>,
        gradient: DeviceArray<u32>,
    ) -> Result<DeviceArray<u32>, Error> {
        let misstep = self.enter(Call::LossGradient)?;
        let _temporary = temporary(ctx, misstep);
        let filled = ctx.fill_in_place(gradient, mix(&[value(ctx, output), 0x1055]))?;
        Ok(filled)
    }

    fn backward(
        &mut self,
        ctx: &Context,
        layer: usize,
        arrays: BackwardArrays<'_, u32>,
    ) -> Result<Option<DeviceArray<u32>>, Error> {
        let misstep = self.enter(Call::Backward(layer))?;
        let _temporary = temporary(ctx, misstep);
        let read = |array: Option<&DeviceArray<u32>>| array.map_or(0xdead, |a| value(ctx, a));
        let seen = [
            layer as u32,
            value(ctx, arrays.output_gradient),
            read(arrays.input),
            read(arrays.output),
        ];
        assert!(
            self.parameter_gradients[layer]
                .replace(mix(&seen))
                .is_none(),
            "layer {layer} run backward twice"
        );
        if misstep == Some(Misstep::ReturnAnother) {
            return match arrays.input_gradient {
                Some(_) => Ok(None),
                None => Ok(Some(ctx.alloc(&[1])?)),
            };
        }
        let Some(gradient) = arrays.input_gradient else {
            return Ok(None);
        };
        let filled = ctx.fill_in_place(gradient, mix(&[seen[0], seen[1], seen[2], seen[3], 7]))?;
        Ok(Some(filled))
    }
}

/// Eight layers of uneven widths (whole `u32`s), every backward reading its input or, with
/// `mixed_reads`, reading its input, its output or both by turns.
fn chain(mixed_reads: bool) -> Chain {
    let widths: [u64; 8] = [96, 24, 160, 40, 64, 256, 24, 72];
    let reads = [
        BackwardReads::Input,
        BackwardReads::Output,
        BackwardReads::InputAndOutput,
    ];
    let layers = widths
        .iter()
        .enumerate()
        .map(|(i, &kib)| {
            let layer = Layer::new(kib << 10, 1.0 + (i % 3) as f64);
            match mixed_reads {
                true => layer.with_backward_reads(reads[i % 3]),
                false => layer,
            }
        })
        .collect();
    Chain::new(48 << 10, layers).unwrap()
}

/// The plan for `policy`; for a budget that fits nothing, the plan at the smallest budget
/// that fits.
fn plan(chain: &Chain, policy: CheckpointPolicy) -> Schedule {
    match chain.plan(policy) {
        Err(RematError::BudgetTooSmall {
            smallest_budget, ..
        }) => {
            let retry = match policy {
                CheckpointPolicy::PeakBudget(_) => CheckpointPolicy::PeakBudget(smallest_budget),
                CheckpointPolicy::OffloadBudget(_) => {
                    CheckpointPolicy::OffloadBudget(smallest_budget)
                }
                _ => CheckpointPolicy::Budget(smallest_budget),
            };
            chain.plan(retry).unwrap()
        }
        other => other.unwrap(),
    }
}

/// Every policy, budgets included (from half to three quarters of keeping everything).
fn policies(chain: &Chain) -> Vec<CheckpointPolicy> {
    let all = chain.plan(CheckpointPolicy::SaveAll).unwrap().peak_bytes();
    vec![
        CheckpointPolicy::SaveAll,
        CheckpointPolicy::Sqrt,
        CheckpointPolicy::EveryNth(2),
        CheckpointPolicy::EveryNth(3),
        CheckpointPolicy::EveryNth(100),
        CheckpointPolicy::Budget(all / 2),
        CheckpointPolicy::Budget(all / 4 * 3),
        CheckpointPolicy::PeakBudget(all / 2),
        CheckpointPolicy::OffloadBudget(all / 2),
        CheckpointPolicy::OffloadBudget(all / 5),
    ]
}

/// The input array for `chain`, holding 1s.
fn input(ctx: &Context, chain: &Chain) -> DeviceArray<u32> {
    let input = ctx
        .fill::<u32>(&[(chain.input_bytes() / 4) as usize], 1)
        .unwrap();
    ctx.synchronize().unwrap();
    input
}

/// The parameter gradients a [`Probe`] must record for `chain`, computed on the host without
/// any schedule: every activation kept, the backward pass from the top.
fn reference_gradients(chain: &Chain) -> Vec<Option<u32>> {
    let n = chain.layer_count();
    let mut activations = vec![1u32];
    for layer in 1..=n {
        activations.push(mix(&[activations[layer - 1], layer as u32]));
    }
    let mut gradients = vec![None; n + 1];
    let mut gradient = mix(&[activations[n], 0x1055]);
    for layer in (1..=n).rev() {
        let reads = chain.layers()[layer - 1].backward_reads;
        let seen = [
            layer as u32,
            gradient,
            if reads.input() {
                activations[layer - 1]
            } else {
                0xdead
            },
            if reads.output() {
                activations[layer]
            } else {
                0xdead
            },
        ];
        gradients[layer] = Some(mix(&seen));
        gradient = mix(&[seen[0], seen[1], seen[2], seen[3], 7]);
    }
    gradients
}

/// A context, the [`chain`], its input and its plan under `policy`.
fn setup(
    mixed_reads: bool,
    policy: CheckpointPolicy,
) -> (Context, Chain, DeviceArray<u32>, Schedule) {
    let ctx = harness::context();
    let chain = chain(mixed_reads);
    let input = input(&ctx, &chain);
    let schedule = plan(&chain, policy);
    (ctx, chain, input, schedule)
}

/// The calls the schedule's steps make, in order.
fn expected_calls(schedule: &Schedule) -> Vec<Call> {
    schedule
        .steps()
        .iter()
        .filter_map(|step| match *step {
            ScheduleStep::Forward { layer } => Some(Call::Forward(layer)),
            ScheduleStep::Recompute { layer } => Some(Call::Recompute(layer)),
            ScheduleStep::LossGradient { .. } => Some(Call::LossGradient),
            ScheduleStep::Backward { layer } => Some(Call::Backward(layer)),
            ScheduleStep::Free(_)
            | ScheduleStep::Offload { .. }
            | ScheduleStep::Prefetch { .. } => None,
        })
        .collect()
}

#[gpu_test]
fn every_policy_peaks_at_its_plan_to_the_byte_and_gives_the_same_gradients() {
    let ctx = harness::context();
    for mixed_reads in [false, true] {
        let chain = chain(mixed_reads);
        let input = input(&ctx, &chain);
        let reference = reference_gradients(&chain);
        let mut recomputing_policies = 0;
        let mut offloading_policies = 0;
        for policy in policies(&chain) {
            let schedule = plan(&chain, policy);
            let mut probe = Probe::new(chain.layer_count());
            let report = schedule.run(&ctx, &mut probe, &input).unwrap();
            let context = format!("{policy:?}, mixed reads {mixed_reads}");
            assert_eq!(report.peak_bytes_in_use, schedule.peak_bytes(), "{context}");
            assert_eq!(
                ctx.memory_stats().peak_bytes_in_use,
                schedule.peak_bytes(),
                "{context}"
            );
            assert_eq!(
                report.schedule_peak_bytes,
                schedule.peak_bytes(),
                "{context}"
            );
            assert_eq!(report.resident_bytes, 0, "{context}");
            assert_eq!(report.temporary_bytes(), 0, "{context}");
            assert_eq!(
                ctx.memory_stats().bytes_in_use,
                input.allocated_bytes(),
                "{context}: the run frees all it made"
            );
            assert_eq!(probe.calls, expected_calls(&schedule), "{context}");
            assert_eq!(
                report.host_peak_bytes,
                schedule.host_peak_bytes(),
                "{context}"
            );
            let host = ctx.memory_stats_of(MemoryKind::PinnedHost).unwrap();
            assert_eq!(
                host.peak_bytes_in_use,
                schedule.host_peak_bytes(),
                "{context}"
            );
            assert_eq!(host.bytes_in_use, 0, "{context}: every offload came back");
            offloading_policies += usize::from(!schedule.offloaded().is_empty());
            recomputing_policies += usize::from(schedule.recompute_cost() > 0.0);
            // The same gradients as computed on the host with everything kept, so the same
            // under every policy.
            assert_eq!(probe.parameter_gradients, reference, "{context}");
        }
        assert!(recomputing_policies >= 4, "the policies recompute");
        assert!(offloading_policies >= 2, "the policies offload");
    }
}

/// Two threads run schedules on one context from one input (one plan offloads, the other
/// recomputes) while a third reads the input: each run gives the host's gradients, the input
/// is read intact throughout, and the runs free everything they made.
#[gpu_test]
fn two_threads_run_schedules_from_one_input_with_the_hosts_gradients() {
    let ctx = harness::context();
    let chain = chain(true);
    let input = input(&ctx, &chain);
    let reference = reference_gradients(&chain);
    let all = chain.plan(CheckpointPolicy::SaveAll).unwrap().peak_bytes();
    let schedules = [
        plan(&chain, CheckpointPolicy::OffloadBudget(all / 5)),
        plan(&chain, CheckpointPolicy::Sqrt),
    ];
    assert!(
        !schedules[0].offloaded().is_empty(),
        "the first plan offloads"
    );
    assert!(
        schedules[1].recompute_cost() > 0.0,
        "the second plan recomputes"
    );
    let expected = ctx.device_get(&input).unwrap();
    std::thread::scope(|s| {
        let runs: Vec<_> = schedules
            .iter()
            .map(|schedule| {
                let (ctx, input, layers) = (&ctx, &input, chain.layer_count());
                s.spawn(move || {
                    let mut gradients = vec![];
                    for _ in 0..3 {
                        let mut probe = Probe::new(layers);
                        schedule.run(ctx, &mut probe, input).unwrap();
                        gradients.push(probe.parameter_gradients);
                    }
                    gradients
                })
            })
            .collect();
        let reader = s.spawn(|| {
            for _ in 0..20 {
                assert_eq!(ctx.device_get(&input).unwrap(), expected);
            }
        });
        for run in runs {
            for gradients in run.join().unwrap() {
                assert_eq!(gradients, reference);
            }
        }
        reader.join().unwrap();
    });
    ctx.synchronize().unwrap();
    assert_eq!(ctx.memory_stats().bytes_in_use, input.allocated_bytes());
    let host = ctx.memory_stats_of(MemoryKind::PinnedHost).unwrap();
    assert_eq!(host.bytes_in_use, 0, "every offload came back");
}

#[gpu_test]
fn the_callers_arrays_are_reported_apart_from_the_schedules_peak() {
    let (ctx, chain, input, schedule) = setup(true, CheckpointPolicy::Sqrt);
    // Parameters live across the run: counted as resident, added to the peak exactly.
    let parameters = [
        ctx.zeros::<f32>(&[1000]).unwrap(),
        ctx.zeros::<f32>(&[70_000]).unwrap(),
    ];
    let parameter_bytes: u64 = parameters.iter().map(|p| p.allocated_bytes()).sum();
    let report = schedule
        .run(&ctx, &mut Probe::new(chain.layer_count()), &input)
        .unwrap();
    assert_eq!(report.resident_bytes, parameter_bytes);
    assert_eq!(report.schedule_peak_bytes, schedule.peak_bytes());
    assert_eq!(
        report.peak_bytes_in_use,
        parameter_bytes + schedule.peak_bytes()
    );
    assert_eq!(report.temporary_bytes(), 0);

    // A temporary far larger than the plan, made in one forward step, raises the peak by
    // at most its own bytes and by more than the plan's peak.
    let huge = 4 * schedule.peak_bytes() as usize;
    let mut probe = Probe::with_misstep(
        chain.layer_count(),
        Call::Forward(3),
        Misstep::Temporary(huge),
    );
    let report = schedule.run(&ctx, &mut probe, &input).unwrap();
    assert!(report.temporary_bytes() <= huge as u64, "{report:?}");
    assert!(
        report.temporary_bytes() > schedule.peak_bytes(),
        "{report:?}"
    );
    assert_eq!(
        report.peak_bytes_in_use,
        report.resident_bytes + report.schedule_peak_bytes + report.temporary_bytes()
    );
    drop(parameters);
}

#[gpu_test]
fn an_input_in_pinned_host_memory_is_not_counted_as_device_memory_and_the_report_adds_up() {
    let (ctx, chain, device_input, schedule) = setup(true, CheckpointPolicy::Sqrt);
    let mut on_device = Probe::new(chain.layer_count());
    schedule.run(&ctx, &mut on_device, &device_input).unwrap();
    let input_bytes = device_input.allocated_bytes();
    let Ok(pinned) = ctx.offload(device_input) else {
        eprintln!("no pinned host memory here: skipped");
        return;
    };
    ctx.synchronize().unwrap();
    let parameters = ctx.zeros::<f32>(&[1000]).unwrap();
    let mut on_host = Probe::new(chain.layer_count());
    let report = schedule.run(&ctx, &mut on_host, &pinned).unwrap();
    assert_eq!(
        report.resident_bytes,
        parameters.allocated_bytes(),
        "{report:?}"
    );
    assert_eq!(
        report.schedule_peak_bytes,
        schedule.peak_bytes() - input_bytes,
        "{report:?}"
    );
    assert_eq!(report.temporary_bytes(), 0, "{report:?}");
    assert_eq!(
        report.peak_bytes_in_use,
        report.resident_bytes + report.schedule_peak_bytes + report.temporary_bytes()
    );
    assert_eq!(on_host.parameter_gradients, on_device.parameter_gradients);
}

#[gpu_test]
fn a_failing_step_stops_the_run_and_frees_what_it_allocated() {
    let (ctx, chain, input, schedule) = setup(true, CheckpointPolicy::EveryNth(3));
    let recomputed = schedule
        .steps()
        .iter()
        .find_map(|step| match *step {
            ScheduleStep::Recompute { layer } => Some(layer),
            _ => None,
        })
        .expect("every third keeps some to recompute");
    let before = ctx.memory_stats().bytes_in_use;
    for at in [
        Call::Forward(1),
        Call::Forward(5),
        Call::Recompute(recomputed),
        Call::LossGradient,
        Call::Backward(8),
        Call::Backward(4),
        Call::Backward(1),
    ] {
        let mut probe = Probe::with_misstep(chain.layer_count(), at, Misstep::Fail);
        let error = schedule.run(&ctx, &mut probe, &input).unwrap_err();
        let message = error.to_string();
        assert!(
            message.contains(&format!("failing on purpose at {at:?}")),
            "{message}"
        );
        assert_eq!(
            probe.calls.last(),
            Some(&at),
            "the run stops at the failure"
        );
        assert_eq!(
            ctx.memory_stats().bytes_in_use,
            before,
            "a failure at {at:?} leaves what the run allocated"
        );
    }
}

#[gpu_test]
fn a_step_that_returns_another_array_is_refused_with_a_message_that_says_what_to_return() {
    let (ctx, chain, input, schedule) = setup(false, CheckpointPolicy::SaveAll);
    let before = ctx.memory_stats().bytes_in_use;
    for (at, expected) in [
        (
            Call::Forward(2),
            "ChainModel::forward of layer 2 returned an array other than",
        ),
        (
            Call::Backward(5),
            "ChainModel::backward of layer 5 returned None",
        ),
        (Call::Backward(1), "layer 1 writes no input gradient"),
    ] {
        let mut probe = Probe::with_misstep(chain.layer_count(), at, Misstep::ReturnAnother);
        let error = schedule.run(&ctx, &mut probe, &input).unwrap_err();
        assert!(matches!(error, Error::InvalidArgument { .. }), "{error}");
        assert!(error.to_string().contains(expected), "{error}");
        assert_eq!(ctx.memory_stats().bytes_in_use, before, "{at:?}");
    }
}

#[gpu_test]
fn running_out_of_memory_mid_run_reports_it_and_frees_what_the_run_made() {
    let ctx = harness::context();
    // Enough to reserve the arena, then a chain whose plan needs more than all of it.
    let input = ctx.fill::<u32>(&[1024], 1).unwrap();
    let limit = ctx
        .memory_stats()
        .bytes_limit
        .expect("a preallocated arena");
    let width = (limit / 8).next_multiple_of(1024);
    let chain = Chain::new(4096, vec![Layer::new(width, 1.0); 12]).unwrap();
    let schedule = plan(&chain, CheckpointPolicy::SaveAll);
    assert!(schedule.peak_bytes() > limit);
    let before = ctx.memory_stats().bytes_in_use;
    let mut probe = Probe::new(chain.layer_count());
    let error = schedule.run(&ctx, &mut probe, &input).unwrap_err();
    assert!(matches!(error, Error::OutOfMemory { .. }), "{error}");
    assert!(
        matches!(probe.calls.last(), Some(Call::Forward(_))),
        "{:?}",
        probe.calls
    );
    assert_eq!(ctx.memory_stats().bytes_in_use, before);
}

/// A [`Probe`] whose activations have the shapes it is given.
struct Shaped(Probe, Vec<Option<Vec<usize>>>);

impl ChainModel for Shaped {
    type Element = u32;
    type Error = Error;

    fn activation_shape(&self, activation: usize) -> Option<Vec<usize>> {
        self.1[activation].clone()
    }

    fn forward(
        &mut self,
        ctx: &Context,
        layer: usize,
        input: &DeviceArray<u32>,
        output: DeviceArray<u32>,
    ) -> Result<DeviceArray<u32>, Error> {
        assert_eq!(
            Some(output.shape().to_vec()),
            self.1[layer].clone().or(Some(vec![output.len()]))
        );
        self.0.forward(ctx, layer, input, output)
    }

    fn loss_gradient(
        &mut self,
        ctx: &Context,
        output: &DeviceArray<u32>,
        gradient: DeviceArray<u32>,
    ) -> Result<DeviceArray<u32>, Error> {
        assert_eq!(gradient.shape(), output.shape());
        self.0.loss_gradient(ctx, output, gradient)
    }

    fn backward(
        &mut self,
        ctx: &Context,
        layer: usize,
        arrays: BackwardArrays<'_, u32>,
    ) -> Result<Option<DeviceArray<u32>>, Error> {
        self.0.backward(ctx, layer, arrays)
    }
}

#[gpu_test]
fn activation_shapes_are_used_and_ones_that_do_not_match_the_chain_are_refused() {
    let ctx = harness::context();
    let chain = Chain::new(1024, vec![Layer::new(4096, 1.0); 3]).unwrap();
    let input = ctx.fill::<u32>(&[16, 16], 1).unwrap();
    let schedule = plan(&chain, CheckpointPolicy::SaveAll);
    let shapes = vec![None, Some(vec![32, 32]), None, Some(vec![4, 16, 16])];
    let mut shaped = Shaped(Probe::new(3), shapes);
    schedule.run(&ctx, &mut shaped, &input).unwrap();
    assert_eq!(shaped.0.calls.len(), 7);

    let before = ctx.memory_stats().bytes_in_use;
    let mut wrong = Shaped(Probe::new(3), vec![None, None, Some(vec![32, 33]), None]);
    let error = schedule.run(&ctx, &mut wrong, &input).unwrap_err();
    assert!(matches!(error, Error::Shape { .. }), "{error}");
    let message = error.to_string();
    assert!(
        message.contains("activation_shape(2) is [32, 33]"),
        "{message}"
    );
    assert!(message.contains("4096 bytes"), "{message}");
    let mut overflowing = Shaped(
        Probe::new(3),
        vec![None, Some(vec![usize::MAX, usize::MAX]), None, None],
    );
    let error = schedule.run(&ctx, &mut overflowing, &input).unwrap_err();
    assert!(
        matches!(
            error,
            Error::Shape {
                operation: "Schedule::run",
                ..
            }
        ),
        "{error}"
    );
    assert!(error.to_string().contains("activation_shape(1)"), "{error}");
    // A shape of the chain's bytes that no array takes (rank 7): refused before anything runs.
    let mut rank7 = Shaped(
        Probe::new(3),
        vec![None, None, None, Some(vec![1, 1, 1, 1, 1, 4, 256])],
    );
    let error = schedule.run(&ctx, &mut rank7, &input).unwrap_err();
    assert!(
        matches!(&error, Error::Shape { operation: "Schedule::run", reason } if reason.contains("activation_shape(3)") && reason.contains("rank 7")),
        "{error}"
    );
    assert!(rank7.0.calls.is_empty(), "{:?}", rank7.0.calls);
    assert!(wrong.0.calls.is_empty() && overflowing.0.calls.is_empty());
    assert_eq!(ctx.memory_stats().bytes_in_use, before);
}

#[gpu_test]
fn an_input_or_chain_that_does_not_fit_the_model_is_refused_before_anything_runs() {
    let ctx = harness::context();
    let chain = Chain::new(1024, vec![Layer::new(4096, 1.0); 3]).unwrap();
    let schedule = plan(&chain, CheckpointPolicy::SaveAll);
    let before = ctx.memory_stats().bytes_in_use;

    let short = ctx.fill::<u32>(&[255], 1).unwrap();
    let mut probe = Probe::new(3);
    let error = schedule.run(&ctx, &mut probe, &short).unwrap_err();
    assert!(matches!(error, Error::Shape { .. }), "{error}");
    let message = error.to_string();
    assert!(message.contains("the input has 1020 bytes"), "{message}");
    assert!(message.contains("chain's input has 1024"), "{message}");
    drop(short);

    // 4098 bytes are not a whole number of u32s.
    let odd = Chain::new(1024, vec![Layer::new(4096, 1.0), Layer::new(4098, 1.0)]).unwrap();
    let input = ctx.fill::<u32>(&[256], 1).unwrap();
    let error = plan(&odd, CheckpointPolicy::SaveAll)
        .run(&ctx, &mut probe, &input)
        .unwrap_err();
    assert!(matches!(error, Error::InvalidArgument { .. }), "{error}");
    let message = error.to_string();
    assert!(message.contains("activation 2 has 4098 bytes"), "{message}");
    assert!(message.contains("4-byte elements"), "{message}");

    let other = harness::context();
    let foreign = other.fill::<u32>(&[256], 1).unwrap();
    let error = schedule.run(&ctx, &mut probe, &foreign).unwrap_err();
    assert!(matches!(error, Error::ForeignArray { .. }), "{error}");
    assert!(error.to_string().contains("Schedule::run"), "{error}");

    assert!(probe.calls.is_empty(), "the model was never called");
    drop(input);
    assert_eq!(ctx.memory_stats().bytes_in_use, before);
}

/// `y = relu(x + bias)` per layer, run with the user-kernel API; the loss is `sum(y)`. Each
/// backward step records its bias gradient, summed on the host from what it was given.
struct BiasRelu {
    forward: gpu_arena::Kernel,
    backward: gpu_arena::Kernel,
    biases: Vec<f32>,
    bias_gradients: Vec<Option<f32>>,
}

const BIAS_RELU_FORWARD: &str = "
    @group(0) @binding(0) var<uniform> bias: f32;
    @group(0) @binding(1) var<storage, read> x: array<f32>;
    @group(0) @binding(2) var<storage, read_write> y: array<f32>;
    @compute @workgroup_size(64)
    fn main(@builtin(global_invocation_id) i: vec3<u32>) {
        if (i.x < arrayLength(&y)) { y[i.x] = max(x[i.x] + bias, 0.0); }
    }";

const RELU_BACKWARD: &str = "
    @group(0) @binding(0) var<storage, read> y: array<f32>;
    @group(0) @binding(1) var<storage, read> dy: array<f32>;
    @group(0) @binding(2) var<storage, read_write> dx: array<f32>;
    @compute @workgroup_size(64)
    fn main(@builtin(global_invocation_id) i: vec3<u32>) {
        if (i.x < arrayLength(&dx)) { dx[i.x] = select(0.0, dy[i.x], y[i.x] > 0.0); }
    }";

/// The bias gradient of a ReLU layer: the sum of `dy` where `y > 0`, in index order.
fn bias_gradient(y: &[f32], dy: &[f32]) -> f32 {
    y.iter()
        .zip(dy)
        .filter(|(y, _)| **y > 0.0)
        .fold(0.0, |sum, (_, dy)| sum + dy)
}

impl ChainModel for BiasRelu {
    type Element = f32;
    type Error = Error;

    fn forward(
        &mut self,
        ctx: &Context,
        layer: usize,
        input: &DeviceArray<f32>,
        mut output: DeviceArray<f32>,
    ) -> Result<DeviceArray<f32>, Error> {
        let n = output.len() as u64;
        ctx.launch(&self.forward)
            .params(&self.biases[layer - 1])
            .arg(input)
            .arg_mut(&mut output)
            .grid_for(n)
            .run()?;
        Ok(output)
    }

    fn loss_gradient(
        &mut self,
        ctx: &Context,
        _output: &DeviceArray<f32>,
        gradient: DeviceArray<f32>,
    ) -> Result<DeviceArray<f32>, Error> {
        let gradient = ctx.fill_in_place(gradient, 1.0)?;
        Ok(gradient)
    }

    fn backward(
        &mut self,
        ctx: &Context,
        layer: usize,
        arrays: BackwardArrays<'_, f32>,
    ) -> Result<Option<DeviceArray<f32>>, Error> {
        let output = arrays.output.expect("a ReLU's backward reads its output");
        assert!(arrays.input.is_none(), "nor its input");
        let y = ctx.device_get(output)?;
        let dy = ctx.device_get(arrays.output_gradient)?;
        self.bias_gradients[layer] = Some(bias_gradient(&y, &dy));
        let Some(mut gradient) = arrays.input_gradient else {
            return Ok(None);
        };
        let n = gradient.len() as u64;
        ctx.launch(&self.backward)
            .arg(output)
            .arg(arrays.output_gradient)
            .arg_mut(&mut gradient)
            .grid_for(n)
            .run()?;
        Ok(Some(gradient))
    }
}

#[gpu_test]
fn user_kernels_give_the_hosts_gradients_bit_for_bit_under_every_policy() {
    const ELEMENTS: usize = 1024;
    const LAYERS: usize = 12;
    let ctx = harness::context();
    let biases: Vec<f32> = (0..LAYERS).map(|l| (l % 5) as f32 * 0.2 - 0.3).collect();
    let xs: Vec<f32> = (0..ELEMENTS)
        .map(|i| (i % 7) as f32 * 0.25 - 0.75)
        .collect();
    // The host's forward and backward passes, everything kept.
    let mut activations = vec![xs.clone()];
    for bias in &biases {
        let last = activations.last().unwrap();
        activations.push(last.iter().map(|x| (x + bias).max(0.0)).collect());
    }
    let mut expected = vec![None; LAYERS + 1];
    let mut dy = vec![1.0f32; ELEMENTS];
    for layer in (1..=LAYERS).rev() {
        let y = &activations[layer];
        expected[layer] = Some(bias_gradient(y, &dy));
        dy = y
            .iter()
            .zip(&dy)
            .map(|(y, d)| if *y > 0.0 { *d } else { 0.0 })
            .collect();
    }

    let relu = Layer::new(4 * ELEMENTS as u64, 1.0).with_backward_reads(BackwardReads::Output);
    let chain = Chain::new(4 * ELEMENTS as u64, vec![relu; LAYERS]).unwrap();
    let input = ctx.device_put(&xs, &[ELEMENTS]).unwrap();
    ctx.synchronize().unwrap();
    let mut model = BiasRelu {
        forward: ctx.kernel(BIAS_RELU_FORWARD, "main").unwrap(),
        backward: ctx.kernel(RELU_BACKWARD, "main").unwrap(),
        biases,
        bias_gradients: vec![],
    };
    for policy in policies(&chain) {
        let schedule = plan(&chain, policy);
        model.bias_gradients = vec![None; LAYERS + 1];
        let report = schedule.run(&ctx, &mut model, &input).unwrap();
        assert_eq!(
            report.peak_bytes_in_use,
            schedule.peak_bytes(),
            "{policy:?}"
        );
        let bits = |g: &[Option<f32>]| g.iter().map(|g| g.map(f32::to_bits)).collect::<Vec<_>>();
        assert_eq!(bits(&model.bias_gradients), bits(&expected), "{policy:?}");
    }
    assert!(
        expected.iter().flatten().any(|&g| g > 0.0),
        "some gradient flows"
    );
}

#[gpu_test]
fn a_chain_recomputation_cannot_fit_trains_by_offloading_with_the_same_gradients() {
    let ctx = harness::context();
    // 48 layers of 8 KiB activations, backward reads by turns.
    let reads = [
        BackwardReads::Input,
        BackwardReads::Output,
        BackwardReads::InputAndOutput,
    ];
    let layers = (0..48)
        .map(|i| Layer::new(8 << 10, 1.0).with_backward_reads(reads[i % 3]))
        .collect();
    let chain = Chain::new(8 << 10, layers).unwrap();
    let input = input(&ctx, &chain);
    let reference = reference_gradients(&chain);
    let all = chain.plan(CheckpointPolicy::SaveAll).unwrap();
    let budget = all.peak_bytes() / 4;
    assert!(
        matches!(
            chain.plan(CheckpointPolicy::Budget(budget)),
            Err(RematError::BudgetTooSmall { .. })
        ),
        "recomputation alone fits a quarter of keeping everything: pick a smaller budget"
    );
    let schedule = chain.plan(CheckpointPolicy::OffloadBudget(budget)).unwrap();
    assert!(schedule.peak_bytes() <= budget);
    assert!(!schedule.offloaded().is_empty());
    assert_eq!(schedule.recompute_cost(), 0.0);
    let mut probe = Probe::new(chain.layer_count());
    let report = schedule.run(&ctx, &mut probe, &input).unwrap();
    assert_eq!(
        report.peak_bytes_in_use,
        schedule.peak_bytes(),
        "to the byte"
    );
    assert_eq!(report.host_peak_bytes, schedule.host_peak_bytes());
    assert_eq!(
        probe.parameter_gradients, reference,
        "the same as keeping everything"
    );
    assert_eq!(ctx.memory_stats().bytes_in_use, input.allocated_bytes());
}

#[gpu_test]
fn keep_recompute_and_offload_mixes_give_the_same_gradients_at_their_planned_peaks() {
    let ctx = harness::context();
    for mixed_reads in [false, true] {
        let chain = chain(mixed_reads);
        let input = input(&ctx, &chain);
        let reference = reference_gradients(&chain);
        let places = [Placement::Keep, Placement::Offload, Placement::Recompute];
        for turn in 0..3 {
            let schedule = chain.plan_placing(|i| places[(i + turn) % 3]);
            let mut probe = Probe::new(chain.layer_count());
            let report = schedule.run(&ctx, &mut probe, &input).unwrap();
            let context = format!("turn {turn}, mixed reads {mixed_reads}");
            assert_eq!(report.peak_bytes_in_use, schedule.peak_bytes(), "{context}");
            assert_eq!(
                report.host_peak_bytes,
                schedule.host_peak_bytes(),
                "{context}"
            );
            assert!(!schedule.offloaded().is_empty(), "{context}");
            assert_eq!(probe.calls, expected_calls(&schedule), "{context}");
            assert_eq!(probe.parameter_gradients, reference, "{context}");
        }
    }
}

/// Kernels that read their inputs and never wait: when the run frees a buffer, the work that
/// read it is mostly still in flight at the next allocation.
struct InFlight {
    forward: gpu_arena::Kernel,
    backward: gpu_arena::Kernel,
}

const SCALE_FORWARD: &str = "
    @group(0) @binding(0) var<storage, read> x: array<f32>;
    @group(0) @binding(1) var<storage, read_write> y: array<f32>;
    @compute @workgroup_size(64)
    fn main(@builtin(global_invocation_id) i: vec3<u32>) {
        if (i.x < arrayLength(&y)) { y[i.x] = x[i.x % arrayLength(&x)] * 0.5 + 0.25; }
    }";

const SCALE_BACKWARD: &str = "
    @group(0) @binding(0) var<storage, read> x: array<f32>;
    @group(0) @binding(1) var<storage, read> dy: array<f32>;
    @group(0) @binding(2) var<storage, read_write> dx: array<f32>;
    @compute @workgroup_size(64)
    fn main(@builtin(global_invocation_id) i: vec3<u32>) {
        if (i.x < arrayLength(&dx)) {
            dx[i.x] = dy[i.x % arrayLength(&dy)] * 0.5 + x[i.x % arrayLength(&x)];
        }
    }";

impl ChainModel for InFlight {
    type Element = f32;
    type Error = Error;

    fn forward(
        &mut self,
        ctx: &Context,
        _layer: usize,
        input: &DeviceArray<f32>,
        mut output: DeviceArray<f32>,
    ) -> Result<DeviceArray<f32>, Error> {
        let n = output.len() as u64;
        ctx.launch(&self.forward)
            .arg(input)
            .arg_mut(&mut output)
            .grid_for(n)
            .run()?;
        Ok(output)
    }

    fn loss_gradient(
        &mut self,
        ctx: &Context,
        _output: &DeviceArray<f32>,
        gradient: DeviceArray<f32>,
    ) -> Result<DeviceArray<f32>, Error> {
        Ok(ctx.fill_in_place(gradient, 1.0)?)
    }

    fn backward(
        &mut self,
        ctx: &Context,
        _layer: usize,
        arrays: BackwardArrays<'_, f32>,
    ) -> Result<Option<DeviceArray<f32>>, Error> {
        let read = arrays
            .input
            .or(arrays.output)
            .expect("every layer reads one");
        let Some(mut gradient) = arrays.input_gradient else {
            return Ok(None);
        };
        let n = gradient.len() as u64;
        ctx.launch(&self.backward)
            .arg(read)
            .arg(arrays.output_gradient)
            .arg_mut(&mut gradient)
            .grid_for(n)
            .run()?;
        Ok(Some(gradient))
    }
}

#[gpu_test]
fn a_plan_for_a_budget_runs_in_an_arena_of_that_budget_with_its_kernels_in_flight() {
    let sizes = [1004u64, 3000, 260, 5120, 2052, 7996, 516, 4000, 1200, 6000];
    use BackwardReads::{Input, InputAndOutput, Output};
    let reads = [
        Input,
        Output,
        InputAndOutput,
        Input,
        Output,
        Input,
        InputAndOutput,
        Output,
        Input,
        Input,
    ];
    let layers = sizes
        .iter()
        .zip(reads)
        .enumerate()
        .map(|(i, (&bytes, reads))| Layer::new(bytes, 1.0 + i as f64).with_backward_reads(reads))
        .collect();
    let chain = Chain::new(2048, layers).unwrap();
    let all = chain.plan(CheckpointPolicy::SaveAll).unwrap();
    // The heap the fraction applies to, from a context that reserves nothing.
    let heap = 2 * harness::context_with(gpu_arena::ArenaConfig {
        mem_fraction: gpu_arena::MemFraction::fixed(0.5),
        preallocate: false,
        ..harness::test_config()
    })
    .memory_stats()
    .bytes_limit
    .unwrap();
    let mut ran = 0;
    for share in [0.9, 0.75, 0.6, 0.5, 0.4, 0.3] {
        let budget = (all.peak_bytes() as f64 * share) as u64 / 256 * 256;
        for policy in [
            CheckpointPolicy::Budget(budget),
            CheckpointPolicy::OffloadBudget(budget),
        ] {
            let Ok(schedule) = chain.plan(policy) else {
                continue;
            };
            let ctx = harness::context_with(gpu_arena::ArenaConfig {
                mem_fraction: gpu_arena::MemFraction::fixed((budget as f64 + 128.0) / heap as f64),
                pinned_host_bytes: Some(16 << 20),
                ..harness::test_config()
            });
            assert_eq!(
                ctx.memory_stats().bytes_limit,
                Some(budget),
                "an arena of the budget"
            );
            let mut model = InFlight {
                forward: ctx.kernel(SCALE_FORWARD, "main").unwrap(),
                backward: ctx.kernel(SCALE_BACKWARD, "main").unwrap(),
            };
            let input = ctx.device_put(&[0.5f32; 512], &[512]).unwrap();
            let report = schedule
                .run(&ctx, &mut model, &input)
                .unwrap_or_else(|error| panic!("{policy:?}: {error}"));
            assert_eq!(
                report.peak_bytes_in_use,
                schedule.peak_bytes(),
                "{policy:?}"
            );
            ran += 1;
        }
    }
    assert!(ran >= 4, "only {ran} plans found for these budgets");
}
