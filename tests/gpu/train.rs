//! The training example's MLP (`examples/train`: WGSL kernels through `ctx.launch` and
//! sequences) under every checkpointing policy on lavapipe: each step's peak is the resident
//! arrays plus the plan's peak to the byte, the gradients are the host's and the same bits
//! under every policy, and training changes nothing with the policy.

use crate::data;
use crate::harness;
#[allow(dead_code)]
#[path = "../../examples/train/mlp.rs"]
mod mlp;

use gpu_arena::remat::{BackwardReads, Chain, CheckpointPolicy, RematError, Schedule};
use gpu_arena::{Context, DeviceArray, Error};
use mlp::{Mlp, MlpKernels, MlpShape};

/// Uneven sizes (none a multiple of the kernels' workgroup of 64) and 8 linear layers.
const SHAPE: MlpShape = MlpShape {
    batch: 6,
    inputs: 5,
    width: 13,
    outputs: 3,
    linear_layers: 8,
};
const DATA_SEED: u64 = 11;
const PARAMETER_SEED: u64 = 12;
const LEARNING_RATE: f32 = 0.05;

/// The data set (4 minibatches) on the device, inputs and targets.
fn dataset(ctx: &Context) -> Vec<(DeviceArray<f32>, DeviceArray<f32>)> {
    data::regression_set(DATA_SEED, 4, SHAPE.batch, SHAPE.inputs, SHAPE.outputs)
        .iter()
        .map(|b| {
            (
                ctx.device_put(&b.inputs, &[SHAPE.batch, SHAPE.inputs])
                    .unwrap(),
                ctx.device_put(&b.targets, &[SHAPE.batch, SHAPE.outputs])
                    .unwrap(),
            )
        })
        .collect()
}

/// Every policy, from keeping everything to the least memory any plan needs.
fn policies(chain: &Chain) -> Vec<(CheckpointPolicy, Schedule)> {
    let all = chain.plan(CheckpointPolicy::SaveAll).unwrap().peak_bytes();
    let sqrt = chain.plan(CheckpointPolicy::Sqrt).unwrap().peak_bytes();
    let smallest = match chain.plan(CheckpointPolicy::Budget(0)) {
        Err(RematError::BudgetTooSmall {
            smallest_budget, ..
        }) => smallest_budget,
        other => panic!("no plan fits in 0 bytes: {other:?}"),
    };
    [
        CheckpointPolicy::SaveAll,
        CheckpointPolicy::EveryNth(2),
        CheckpointPolicy::EveryNth(3),
        CheckpointPolicy::EveryNth(5),
        CheckpointPolicy::Sqrt,
        CheckpointPolicy::Budget((all + sqrt) / 2),
        CheckpointPolicy::PeakBudget((all + sqrt) / 2),
        CheckpointPolicy::Budget(smallest),
    ]
    .into_iter()
    .map(|policy| (policy, chain.plan(policy).unwrap()))
    .collect()
}

#[gpu_test]
fn every_policy_peaks_at_the_resident_arrays_plus_its_plan_to_the_byte_with_the_same_gradients() {
    let ctx = harness::context();
    let kernels = MlpKernels::new(&ctx).unwrap();
    let data = dataset(&ctx);
    let (inputs, targets) = &data[0];
    let chain = SHAPE.chain().unwrap();
    let mut reference: Option<Vec<Vec<f32>>> = None;
    let mut recomputing = 0;
    for (policy, schedule) in policies(&chain) {
        let mut mlp = Mlp::new(&ctx, SHAPE, kernels.clone(), PARAMETER_SEED).unwrap();
        let mut losses = ctx.zeros::<f32>(&[1]).unwrap();
        ctx.synchronize().unwrap();
        let before = ctx.memory_stats().bytes_in_use;
        let report = schedule
            .run(&ctx, &mut mlp.step(targets, &mut losses, 0), inputs)
            .unwrap();
        assert_eq!(
            report.resident_bytes,
            before - inputs.allocated_bytes(),
            "{policy:?}"
        );
        assert_eq!(
            report.schedule_peak_bytes,
            schedule.peak_bytes(),
            "{policy:?}"
        );
        assert_eq!(
            report.peak_bytes_in_use,
            report.resident_bytes + schedule.peak_bytes(),
            "{policy:?}: the kernels allocate nothing of their own"
        );
        assert_eq!(report.temporary_bytes(), 0, "{policy:?}");
        assert_eq!(ctx.memory_stats().bytes_in_use, before, "{policy:?}");
        recomputing += usize::from(schedule.recompute_fraction() > 0.0);

        let gradients = mlp.parameter_gradients(&ctx).unwrap();
        let bits = |g: &[Vec<f32>]| -> Vec<Vec<u32>> {
            g.iter()
                .map(|a| a.iter().map(|v| v.to_bits()).collect())
                .collect()
        };
        match &reference {
            None => reference = Some(gradients),
            Some(reference) => assert_eq!(bits(&gradients), bits(reference), "{policy:?}"),
        }
    }
    assert!(recomputing >= 5, "the policies recompute");
}

/// The loss and the parameter gradients of one step, computed on the host in f64 with every
/// activation kept: `[dW₀, db₀, dW₁, db₁, …]`.
fn host_step(parameters: &[(Vec<f32>, Vec<f32>)], x: &[f32], t: &[f32]) -> (f64, Vec<Vec<f64>>) {
    let batch = SHAPE.batch;
    let mut activations: Vec<Vec<f64>> = vec![x.iter().map(|&v| v.into()).collect()];
    for (m, (w, b)) in parameters.iter().enumerate() {
        let (inputs, outputs) = SHAPE.linear_dims(m);
        let a = activations.last().unwrap();
        let mut z = vec![0.0; batch * outputs];
        for i in 0..batch {
            for j in 0..outputs {
                let dot: f64 = (0..inputs)
                    .map(|k| a[i * inputs + k] * f64::from(w[j * inputs + k]))
                    .sum();
                z[i * outputs + j] = f64::from(b[j]) + dot;
            }
        }
        if m + 1 < parameters.len() {
            z.iter_mut().for_each(|v| *v = v.max(0.0));
        }
        activations.push(z);
    }
    let y = activations.last().unwrap();
    let n = y.len() as f64;
    let loss = y
        .iter()
        .zip(t)
        .map(|(y, &t)| (y - f64::from(t)).powi(2))
        .sum::<f64>()
        / n;
    let mut dz: Vec<f64> = y
        .iter()
        .zip(t)
        .map(|(y, &t)| 2.0 * (y - f64::from(t)) / n)
        .collect();
    let mut gradients = vec![vec![]; 2 * parameters.len()];
    for m in (0..parameters.len()).rev() {
        let (inputs, outputs) = SHAPE.linear_dims(m);
        let a = &activations[m];
        let w = &parameters[m].0;
        gradients[2 * m] = (0..outputs * inputs)
            .map(|o| {
                let (j, k) = (o / inputs, o % inputs);
                (0..batch)
                    .map(|i| dz[i * outputs + j] * a[i * inputs + k])
                    .sum()
            })
            .collect();
        gradients[2 * m + 1] = (0..outputs)
            .map(|j| (0..batch).map(|i| dz[i * outputs + j]).sum())
            .collect();
        // The gradient of the ReLU output below, masked where that output is 0.
        dz = (0..batch * inputs)
            .map(|o| {
                let (i, k) = (o / inputs, o % inputs);
                let da: f64 = (0..outputs)
                    .map(|j| dz[i * outputs + j] * f64::from(w[j * inputs + k]))
                    .sum();
                if a[o] > 0.0 {
                    da
                } else {
                    0.0
                }
            })
            .collect();
    }
    (loss, gradients)
}

#[gpu_test]
fn the_mlp_kernels_give_the_loss_and_gradients_the_host_computes() {
    let ctx = harness::context();
    let batch = &data::regression_set(DATA_SEED, 1, SHAPE.batch, SHAPE.inputs, SHAPE.outputs)[0];
    let inputs = ctx
        .device_put(&batch.inputs, &[SHAPE.batch, SHAPE.inputs])
        .unwrap();
    let targets = ctx
        .device_put(&batch.targets, &[SHAPE.batch, SHAPE.outputs])
        .unwrap();
    let kernels = MlpKernels::new(&ctx).unwrap();
    let mut mlp = Mlp::new(&ctx, SHAPE, kernels, PARAMETER_SEED).unwrap();
    // Slot 2 of 3: the loss goes where it is told.
    let mut losses = ctx.zeros::<f32>(&[3]).unwrap();
    let schedule = SHAPE.chain().unwrap().plan(CheckpointPolicy::Sqrt).unwrap();
    schedule
        .run(&ctx, &mut mlp.step(&targets, &mut losses, 2), &inputs)
        .unwrap();

    let parameters = mlp::initial_parameters(&SHAPE, PARAMETER_SEED);
    let (loss, expected) = host_step(&parameters, &batch.inputs, &batch.targets);
    let losses = ctx.device_get(&losses).unwrap();
    assert_eq!(losses[..2], [0.0, 0.0]);
    assert!(
        (f64::from(losses[2]) - loss).abs() <= 1e-5 * loss,
        "loss {} on the device, {loss} on the host",
        losses[2]
    );
    let gradients = mlp.parameter_gradients(&ctx).unwrap();
    assert_eq!(gradients.len(), expected.len());
    for (index, (device, host)) in gradients.iter().zip(&expected).enumerate() {
        assert_eq!(device.len(), host.len(), "array {index}");
        let scale = host.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        assert!(scale > 0.0, "array {index}: some gradient flows");
        for (d, h) in device.iter().zip(host) {
            assert!(
                (f64::from(*d) - h).abs() <= 1e-4 * scale,
                "array {index}: {d} on the device, {h} on the host"
            );
        }
    }
}

/// Trains a new network for `steps` SGD steps under `schedule`; returns the loss curve.
fn train(
    ctx: &Context,
    kernels: &MlpKernels,
    data: &[(DeviceArray<f32>, DeviceArray<f32>)],
    schedule: &Schedule,
    steps: usize,
) -> Vec<f32> {
    let mut mlp = Mlp::new(ctx, SHAPE, kernels.clone(), PARAMETER_SEED).unwrap();
    let mut losses = ctx.zeros::<f32>(&[steps]).unwrap();
    for step in 0..steps {
        let (inputs, targets) = &data[step % data.len()];
        schedule
            .run(
                ctx,
                &mut mlp.step(targets, &mut losses, step as u32),
                inputs,
            )
            .unwrap();
        mlp.sgd(ctx, LEARNING_RATE).unwrap();
    }
    ctx.device_get(&losses).unwrap()
}

#[gpu_test]
fn sgd_lowers_the_loss_along_the_same_curve_to_the_bit_whatever_is_recomputed() {
    const STEPS: usize = 40;
    let ctx = harness::context();
    let kernels = MlpKernels::new(&ctx).unwrap();
    let data = dataset(&ctx);
    let chain = SHAPE.chain().unwrap();
    let policies = policies(&chain);
    let (_, all) = &policies[0];
    let (_, least) = policies.last().unwrap();
    assert!(least.recompute_fraction() > all.recompute_fraction());
    let kept = train(&ctx, &kernels, &data, all, STEPS);
    let recomputed = train(&ctx, &kernels, &data, least, STEPS);
    let bits = |l: &[f32]| l.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&kept), bits(&recomputed));
    // The last pass over the 4 minibatches against the first.
    let mean = |l: &[f32]| l.iter().sum::<f32>() / l.len() as f32;
    let (first, last) = (mean(&kept[..4]), mean(&kept[STEPS - 4..]));
    assert!(last < 0.5 * first, "the loss went from {first} to {last}");
}

#[gpu_test]
fn a_chain_that_misstates_what_a_backward_step_reads_is_refused_by_the_model() {
    let ctx = harness::context();
    let kernels = MlpKernels::new(&ctx).unwrap();
    let data = dataset(&ctx);
    let (inputs, targets) = &data[0];
    let mut mlp = Mlp::new(&ctx, SHAPE, kernels, PARAMETER_SEED).unwrap();
    let mut losses = ctx.zeros::<f32>(&[1]).unwrap();
    let before = ctx.memory_stats().bytes_in_use;
    // Every layer said to read its input: the ReLUs are not given their outputs.
    let right = SHAPE.chain().unwrap();
    let layers = right
        .layers()
        .iter()
        .map(|l| l.with_backward_reads(BackwardReads::Input))
        .collect();
    let wrong = Chain::new(right.input_bytes(), layers).unwrap();
    let error = wrong
        .plan(CheckpointPolicy::SaveAll)
        .unwrap()
        .run(&ctx, &mut mlp.step(targets, &mut losses, 0), inputs)
        .unwrap_err();
    assert!(matches!(error, Error::InvalidArgument { .. }), "{error}");
    assert!(
        error
            .to_string()
            .contains("layer 14's backward was not given its output"),
        "{error}"
    );
    // Every layer said to read only its output: the linear layers miss their inputs.
    let layers = right
        .layers()
        .iter()
        .map(|l| l.with_backward_reads(BackwardReads::Output))
        .collect();
    let error = Chain::new(right.input_bytes(), layers)
        .unwrap()
        .plan(CheckpointPolicy::SaveAll)
        .unwrap()
        .run(&ctx, &mut mlp.step(targets, &mut losses, 0), inputs)
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("layer 15's backward was not given its input"),
        "{error}"
    );
    assert_eq!(
        ctx.memory_stats().bytes_in_use,
        before,
        "the runs freed all they made"
    );
}

#[gpu_test]
fn a_network_the_kernels_cannot_index_is_refused_before_anything_is_allocated() {
    let ctx = harness::context();
    let kernels = MlpKernels::new(&ctx).unwrap();
    let before = ctx.memory_stats().bytes_in_use;
    for (shape, expected) in [
        (
            MlpShape {
                linear_layers: 0,
                ..SHAPE
            },
            "the number of linear layers is 0",
        ),
        (MlpShape { width: 0, ..SHAPE }, "the hidden width is 0"),
        (
            MlpShape {
                width: 2049,
                ..SHAPE
            },
            "more than the kernels' 1-D grids reach",
        ),
        (
            MlpShape {
                batch: usize::MAX,
                ..SHAPE
            },
            "more than the kernels' 1-D grids reach",
        ),
    ] {
        let error = match Mlp::new(&ctx, shape, kernels.clone(), 1) {
            Err(error) => error,
            Ok(_) => panic!("{shape:?} was accepted"),
        };
        assert!(matches!(error, Error::InvalidArgument { .. }), "{error}");
        assert!(error.to_string().contains(expected), "{error}");
    }
    assert_eq!(ctx.memory_stats().bytes_in_use, before);
}
