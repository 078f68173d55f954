//! Data-parallel training across MPI ranks: the MLP of `examples/train` (its modules are
//! included, not copied), each rank training on its shard of every minibatch, the gradients
//! averaged across ranks before every SGD step, as PyTorch's DistributedDataParallel does.
//!
//! ```text
//! cargo build --release --features mpi --example data_parallel
//! mpirun -np 2 target/release/examples/data_parallel [--steps N] [--bucket-mib X] [--json]
//! ```
//! Steps alternate between two ways of reducing the gradients, so both are timed in one run:
//! - **overlapped** (DDP's buckets): as the backward pass produces each linear layer's
//!   gradients (last layer first), they join a bucket; a bucket that reaches `--bucket-mib` is
//!   started at once (`Collectives::start_all_reduce_mean_many`) and reduced on the progress
//!   thread while the backward pass of the earlier layers goes on; the step waits for every
//!   bucket at its end;
//! - **not overlapped**: the whole backward pass first (its time is the step's *compute*),
//!   then every gradient in one fused `all_reduce_mean_many` (its *communication*).
//!
//! It fails unless, after every step, every rank's parameters are bitwise identical (a hash of
//! their bytes, all-gathered), and the loss curve (the shards' losses averaged) matches a
//! single-process run on the whole minibatches within 1e-5 relative. Every rank prints its
//! `memory_stats` in short (to standard error under `--json`, whose standard output is the
//! JSON row alone); rank 0 prints the median step times of both ways and the share of the
//! overlapped step that the overlap did not hide (its time beyond the compute).

#[path = "../train/data.rs"]
#[allow(dead_code)]
mod data;
#[path = "../flags/mod.rs"]
mod flags;
#[path = "../train/mlp.rs"]
#[allow(dead_code)]
mod mlp;

use anyhow::{ensure, Result};
use gpu_arena::arena::Bytes;
use gpu_arena::backprop::{BackwardArrays, ChainModel};
use gpu_arena::distributed::{self, mpi, Collectives, PendingCollective};
use gpu_arena::remat::{CheckpointPolicy, Schedule};
use gpu_arena::{Context, DeviceArray};
use lexopt::prelude::*;
use mlp::{Mlp, MlpKernels, MlpShape, TrainStep};
use mpi::traits::*;
use std::hash::Hasher;
use std::time::{Duration, Instant};

const USAGE: &str = "\
usage: data_parallel [--steps N] [--bucket-mib X] [--json]

Under mpirun: trains the MLP of examples/train with each rank on its shard of every minibatch
(batch 48, split across 1, 2, 3, 4 or 6 ranks), gradients averaged across ranks every step:
every other step in buckets overlapped with the backward pass, the others after it.
Fails unless every rank's parameters are bitwise identical after every step and the loss
curve matches a single-process run on the whole minibatches within 1e-5 relative.

  --steps N        SGD steps, at least 2: one each way (default 100)
  --bucket-mib X   gradient bucket size in MiB, as DDP's bucket_cap_mb (default 0.03125:
                   32 KiB, about four buckets for this model of 100 KiB of gradients)
  --json           one JSON row (rank 0) instead of the summary
  -h, --help       this text";

/// The whole minibatch: divisible by 1, 2, 3, 4, 6 and 8 ranks.
const BATCH: usize = 48;
/// The most steps `--steps` accepts.
const MAX_STEPS: usize = 100_000;
/// How close the loss curve must be to the single-process one (relative).
const LOSS_TOLERANCE: f32 = 1e-5;
const DATA_SEED: u64 = 0x5eed_da7a;
const PARAMETER_SEED: u64 = 0x5eed_0fae;
const LEARNING_RATE: f32 = 0.05;
const BATCHES: usize = 16;
/// The default bucket (MiB): DDP's `bucket_cap_mb` is 25 MiB for models of hundreds of MiB;
/// this model's gradients are about 100 KiB, so 32 KiB makes a few buckets of it.
const DEFAULT_BUCKET_MIB: f64 = 0.03125;
/// The largest `--bucket-mib` (beyond the model's size every bucket is the whole model).
const MAX_BUCKET_MIB: f64 = 1024.0;

struct Options {
    steps: usize,
    bucket_mib: f64,
    json: bool,
}

fn parse_args(parser: &mut lexopt::Parser) -> Result<Option<Options>, lexopt::Error> {
    let mut options = Options {
        steps: 100,
        bucket_mib: DEFAULT_BUCKET_MIB,
        json: false,
    };
    while let Some(arg) = parser.next()? {
        match arg {
            Short('h') | Long("help") => return Ok(None),
            Long("json") => options.json = true,
            Long("steps") => options.steps = flags::in_range(parser, "steps", 2..=MAX_STEPS)?,
            Long("bucket-mib") => {
                options.bucket_mib = flags::in_range(parser, "bucket-mib", 0.0..=MAX_BUCKET_MIB)?
            }
            _ => return Err(arg.unexpected()),
        }
    }
    Ok(Some(options))
}

/// The network of examples/train at CI size, with a minibatch of `batch`.
fn shape(batch: usize) -> MlpShape {
    MlpShape {
        batch,
        inputs: 16,
        width: 64,
        outputs: 4,
        linear_layers: 8,
    }
}

/// A 64-bit hash of the arrays' bytes (the same on every rank: one binary, fixed keys).
fn hash(ctx: &Context, arrays: &[&DeviceArray<f32>]) -> Result<u64> {
    let mut hasher = std::hash::DefaultHasher::new();
    for values in ctx.device_get_many(arrays)? {
        hasher.write(bytemuck::cast_slice(&values));
    }
    Ok(hasher.finish())
}

/// `rows` rows of `width` values from row `first` of a row-major minibatch, on the device.
fn shard(
    ctx: &Context,
    values: &[f32],
    width: usize,
    first: usize,
    rows: usize,
) -> Result<DeviceArray<f32>> {
    Ok(ctx.device_put(
        &values[first * width..(first + rows) * width],
        &[rows, width],
    )?)
}

fn main() -> Result<()> {
    let options = flags::parse_or_exit(USAGE, parse_args);
    let universe = distributed::init()?;
    let world = universe.world();
    let ctx = distributed::abort_on_error(&world, Context::from_env());
    let group = Collectives::new(&ctx, &world);
    // A rank that fails takes the job down rather than leaving the others in a collective.
    let result = train(&ctx, &group, &world, &options);
    group.abort_on_error(result);
    Ok(())
}

fn train<C: Communicator>(
    ctx: &Context,
    group: &Collectives,
    world: &C,
    options: &Options,
) -> Result<()> {
    let (rank, ranks) = (group.rank(), group.size());
    ensure!(
        BATCH.is_multiple_of(ranks),
        "the minibatch of {BATCH} does not split across {ranks} ranks; run 1, 2, 3, 4, 6 or 8"
    );
    let rows = BATCH / ranks;
    let local = shape(rows);
    local.check().map_err(anyhow::Error::msg)?;
    let kernels = MlpKernels::new(ctx)?;
    let dataset = data::regression_set(DATA_SEED, BATCHES, BATCH, local.inputs, local.outputs);
    let shards = dataset
        .iter()
        .map(|b| {
            Ok((
                shard(ctx, &b.inputs, local.inputs, rank * rows, rows)?,
                shard(ctx, &b.targets, local.outputs, rank * rows, rows)?,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    let schedule = local.chain()?.plan(CheckpointPolicy::SaveAll)?;
    let mut mlp = Mlp::new(ctx, local, kernels.clone(), PARAMETER_SEED)?;
    let mut losses = ctx.zeros::<f32>(&[options.steps])?;
    let mut hashes = vec![0u64; ranks];
    let cap_bytes = (options.bucket_mib * (1 << 20) as f64) as u64;
    // Seconds per step of each way: overlapped steps; compute and communication of the
    // steps that are not overlapped.
    let (mut overlapped, mut compute, mut communication) = (Vec::new(), Vec::new(), Vec::new());
    let mut buckets = 0;
    let mut checking = Duration::ZERO;
    let started = Instant::now();
    for step in 0..options.steps {
        let (inputs, targets) = &shards[step % shards.len()];
        let begun = Instant::now();
        if step % 2 == 1 {
            let model = mlp.step(targets, &mut losses, step as u32);
            let mut bucketed = Bucketed {
                step: model,
                group,
                cap_bytes,
                open: Vec::new(),
                started: Vec::new(),
            };
            schedule.run(ctx, &mut bucketed, inputs)?;
            let started = bucketed.started;
            buckets = started.len();
            for (layers, pending) in started {
                let mut arrays = pending.wait()?.into_iter();
                for m in layers {
                    let (Some(w), Some(b)) = (arrays.next(), arrays.next()) else {
                        anyhow::bail!("a bucket came back with fewer arrays than it took");
                    };
                    mlp.put_gradients(m, [w, b]);
                }
            }
            ctx.synchronize()?;
            overlapped.push(begun.elapsed().as_secs_f64());
        } else {
            let mut model = mlp.step(targets, &mut losses, step as u32);
            schedule.run(ctx, &mut model, inputs)?;
            ctx.synchronize()?;
            compute.push(begun.elapsed().as_secs_f64());
            let reduce = Instant::now();
            let layers: Vec<usize> = (0..mlp.linear_layers()).rev().collect();
            let mut gradients = Vec::new();
            for &m in &layers {
                gradients.extend(mlp.take_gradients(ctx, m)?);
            }
            let mut reduced = group.all_reduce_mean_many(gradients)?.into_iter();
            for &m in &layers {
                let (Some(w), Some(b)) = (reduced.next(), reduced.next()) else {
                    anyhow::bail!("all_reduce_mean_many gave back fewer arrays than it took");
                };
                mlp.put_gradients(m, [w, b]);
            }
            ctx.synchronize()?;
            communication.push(reduce.elapsed().as_secs_f64());
        }
        mlp.sgd(ctx, LEARNING_RATE)?;
        let check = Instant::now();
        let mine = hash(ctx, &mlp.parameters())?;
        world.all_gather_into(&mine, &mut hashes[..]);
        ensure!(
            hashes.iter().all(|&h| h == mine),
            "after step {step} the ranks' parameters differ: hashes {hashes:x?}"
        );
        checking += check.elapsed();
    }
    ctx.synchronize()?;
    let step_time = started.elapsed() - checking;
    // The loss of a whole minibatch is the mean of its equal shards' losses.
    let losses = group.all_reduce_mean(losses)?;
    let curve = ctx.device_get(&losses)?;
    let stats = ctx.memory_stats();
    let line = format!(
        "rank {rank}: {} in use (peak {}), {} reserved, {} allocation{} made",
        Bytes(stats.bytes_in_use),
        Bytes(stats.peak_bytes_in_use),
        Bytes(stats.bytes_reserved),
        stats.num_allocs,
        if stats.num_allocs == 1 { "" } else { "s" }
    );
    // Standard output holds only the JSON row under --json.
    match options.json {
        true => eprintln!("{line}"),
        false => println!("{line}"),
    }
    let (overlapped, compute, communication) = (
        median(&mut overlapped),
        median(&mut compute),
        median(&mut communication),
    );
    let not_overlapped = compute + communication;
    // The part of the overlapped step beyond the compute: communication the overlap did not
    // hide (DDP's measure of a bucket size).
    let exposed = ((overlapped - compute) / overlapped).max(0.0);
    let bound = overlapped / compute.max(communication);
    if rank == 0 {
        let reference = single_process(ctx, &kernels, &dataset, options.steps)?;
        let worst = curve
            .iter()
            .zip(&reference)
            .map(|(a, b)| (a - b).abs() / b.abs().max(f32::MIN_POSITIVE))
            .fold(0.0f32, f32::max);
        ensure!(
            worst <= LOSS_TOLERANCE,
            "the loss curve differs from the single-process run by {worst:e} relative (at most {LOSS_TOLERANCE:e})"
        );
        let (first, last) = (curve[0], curve[curve.len() - 1]);
        let ms = |s: f64| s * 1e3;
        if options.json {
            println!(
                "{}",
                serde_json::json!({
                    "case": "data_parallel", "ranks": ranks, "steps": options.steps,
                    "zero_copy": ctx.config().zero_copy,
                    "bucket_mib": options.bucket_mib, "buckets": buckets,
                    "ms_per_step": ms(step_time.as_secs_f64()) / options.steps as f64,
                    "ms_step_overlapped": ms(overlapped),
                    "ms_step_not_overlapped": ms(not_overlapped),
                    "ms_compute": ms(compute), "ms_communication": ms(communication),
                    "overlapped_over_max_compute_communication": bound,
                    "share_not_hidden": exposed,
                    "all_reduce_share": communication / not_overlapped,
                    "loss_first": first, "loss_last": last,
                    "max_relative_loss_difference": worst,
                })
            );
        } else {
            println!(
                "data_parallel on {ranks} rank{} ({}): {} steps; median step {:.2} ms overlapped ({buckets} bucket{} of up to {} MiB) vs {:.2} ms not overlapped (compute {:.2} ms + all-reduce {:.2} ms); overlapped at {bound:.2}x max(compute, communication), {:.1}% of its step time not hidden; loss {first:.5} -> {last:.5}; parameters bitwise identical on every rank after every step; loss curve within {worst:.1e} of the single-process run",
                if ranks == 1 { "" } else { "s" },
                ctx.adapter_info().name,
                options.steps,
                ms(overlapped),
                if buckets == 1 { "" } else { "s" },
                options.bucket_mib,
                ms(not_overlapped),
                ms(compute),
                ms(communication),
                100.0 * exposed,
            );
        }
    }
    Ok(())
}

/// The median of `values` (0 for none: a run of one step has no overlapped step).
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// One training step whose linear layers' gradients are reduced in buckets as the backward
/// pass produces them (DDP's overlap): after a linear layer's backward was submitted, its
/// gradients join the open bucket, and a bucket that reaches `cap_bytes` (or holds the first
/// layer, the last to run) is started on the progress thread while the backward pass of the
/// earlier layers is recorded and runs.
struct Bucketed<'s, 'a> {
    step: TrainStep<'a>,
    group: &'s Collectives,
    cap_bytes: u64,
    /// The open bucket: linear layers and their weight and bias gradients.
    open: Vec<(usize, [DeviceArray<f32>; 2])>,
    /// Started buckets: their layers, in the order their gradients were passed.
    started: Vec<(Vec<usize>, PendingCollective<f32>)>,
}

impl Bucketed<'_, '_> {
    fn start_bucket(&mut self) -> gpu_arena::Result<()> {
        let open = std::mem::take(&mut self.open);
        let layers = open.iter().map(|(m, _)| *m).collect();
        let arrays = open.into_iter().flat_map(|(_, pair)| pair).collect();
        let pending = self.group.start_all_reduce_mean_many(arrays)?;
        self.started.push((layers, pending));
        Ok(())
    }
}

impl ChainModel for Bucketed<'_, '_> {
    type Element = f32;
    type Error = gpu_arena::Error;

    fn activation_shape(&self, activation: usize) -> Option<Vec<usize>> {
        self.step.activation_shape(activation)
    }

    fn forward(
        &mut self,
        ctx: &Context,
        layer: usize,
        input: &DeviceArray<f32>,
        output: DeviceArray<f32>,
    ) -> gpu_arena::Result<DeviceArray<f32>> {
        self.step.forward(ctx, layer, input, output)
    }

    fn recompute(
        &mut self,
        ctx: &Context,
        layer: usize,
        input: &DeviceArray<f32>,
        output: DeviceArray<f32>,
    ) -> gpu_arena::Result<DeviceArray<f32>> {
        self.step.recompute(ctx, layer, input, output)
    }

    fn loss_gradient(
        &mut self,
        ctx: &Context,
        output: &DeviceArray<f32>,
        gradient: DeviceArray<f32>,
    ) -> gpu_arena::Result<DeviceArray<f32>> {
        self.step.loss_gradient(ctx, output, gradient)
    }

    fn backward(
        &mut self,
        ctx: &Context,
        layer: usize,
        arrays: BackwardArrays<'_, f32>,
    ) -> gpu_arena::Result<Option<DeviceArray<f32>>> {
        let input_gradient = self.step.backward(ctx, layer, arrays)?;
        if let Some(m) = MlpShape::linear_layer(layer) {
            let gradients = self.step.mlp().take_gradients(ctx, m)?;
            self.open.push((m, gradients));
            let bytes: u64 = self
                .open
                .iter()
                .flat_map(|(_, pair)| pair.iter().map(|a| a.size_in_bytes()))
                .sum();
            if bytes >= self.cap_bytes || m == 0 {
                self.start_bucket()?;
            }
        }
        Ok(input_gradient)
    }
}

/// The reference: one process on the whole minibatches, the same network and steps.
fn single_process(
    ctx: &Context,
    kernels: &MlpKernels,
    dataset: &[data::Batch],
    steps: usize,
) -> Result<Vec<f32>> {
    let whole = shape(BATCH);
    let batches = dataset
        .iter()
        .map(|b| {
            Ok((
                ctx.device_put(&b.inputs, &[BATCH, whole.inputs])?,
                ctx.device_put(&b.targets, &[BATCH, whole.outputs])?,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    let schedule: Schedule = whole.chain()?.plan(CheckpointPolicy::SaveAll)?;
    let mut mlp = Mlp::new(ctx, whole, kernels.clone(), PARAMETER_SEED)?;
    let mut losses = ctx.zeros::<f32>(&[steps])?;
    for step in 0..steps {
        let (inputs, targets) = &batches[step % batches.len()];
        let mut model = mlp.step(targets, &mut losses, step as u32);
        schedule.run(ctx, &mut model, inputs)?;
        mlp.sgd(ctx, LEARNING_RATE)?;
    }
    Ok(ctx.device_get(&losses)?)
}
