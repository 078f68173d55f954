//! Data-parallel training across MPI ranks: the MLP of `examples/train` (its modules are
//! included, not copied), each rank training on its shard of every minibatch, the gradients
//! averaged across ranks (`Collectives::all_reduce_mean`) before every SGD step.
//!
//! ```text
//! cargo build --release --features mpi --example data_parallel
//! mpirun -np 2 target/release/examples/data_parallel [--steps N] [--json]
//! ```
//! It fails unless, after every step, every rank's parameters are bitwise identical (a hash of
//! their bytes, all-gathered), and the loss curve (the shards' losses averaged) matches a
//! single-process run on the whole minibatches within 1e-5 relative. Every rank prints its
//! `memory_stats`; rank 0 prints the share of step time spent in the all-reduce.

#[path = "../train/data.rs"]
#[allow(dead_code)]
mod data;
#[path = "../flags/mod.rs"]
mod flags;
#[path = "../train/mlp.rs"]
#[allow(dead_code)]
mod mlp;

use anyhow::{ensure, Result};
use gpu_arena::distributed::{self, mpi, Collectives};
use gpu_arena::remat::{CheckpointPolicy, Schedule};
use gpu_arena::{Context, DeviceArray};
use lexopt::prelude::*;
use mlp::{Mlp, MlpKernels, MlpShape};
use mpi::traits::*;
use std::hash::Hasher;
use std::time::{Duration, Instant};

const USAGE: &str = "\
usage: data_parallel [--steps N] [--json]

Under mpirun: trains the MLP of examples/train with each rank on its shard of every minibatch
(batch 48, split across 1, 2, 3, 4 or 6 ranks), gradients averaged across ranks every step.
Fails unless every rank's parameters are bitwise identical after every step and the loss
curve matches a single-process run on the whole minibatches within 1e-5 relative.

  --steps N    SGD steps (default 100)
  --json       one JSON row (rank 0) instead of the summary
  -h, --help   this text";

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

struct Options {
    steps: usize,
    json: bool,
}

fn parse_args(parser: &mut lexopt::Parser) -> Result<Option<Options>, lexopt::Error> {
    let mut options = Options {
        steps: 100,
        json: false,
    };
    while let Some(arg) = parser.next()? {
        match arg {
            Short('h') | Long("help") => return Ok(None),
            Long("json") => options.json = true,
            Long("steps") => options.steps = flags::in_range(parser, "steps", 1..=MAX_STEPS)?,
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
    let mut reducing = Duration::ZERO;
    let mut checking = Duration::ZERO;
    let started = Instant::now();
    for step in 0..options.steps {
        let (inputs, targets) = &shards[step % shards.len()];
        let mut model = mlp.step(targets, &mut losses, step as u32);
        schedule.run(ctx, &mut model, inputs)?;
        let reduce = Instant::now();
        mlp.replace_gradients(ctx, |gradient| group.all_reduce_mean(gradient))?;
        ctx.synchronize()?;
        reducing += reduce.elapsed();
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
    println!("rank {rank}: memory_stats {:?}", ctx.memory_stats());
    let share = reducing.as_secs_f64() / step_time.as_secs_f64();
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
        if options.json {
            println!(
                "{}",
                serde_json::json!({
                    "case": "data_parallel", "ranks": ranks, "steps": options.steps,
                    "ms_per_step": step_time.as_secs_f64() * 1e3 / options.steps as f64,
                    "all_reduce_share": share, "loss_first": first, "loss_last": last,
                    "max_relative_loss_difference": worst,
                })
            );
        } else {
            println!(
                "data_parallel on {ranks} ranks ({}): {} steps, {:.2} ms/step, {:.1}% of step time in the gradient all-reduce; loss {first:.5} -> {last:.5}; parameters bitwise identical on every rank after every step; loss curve within {worst:.1e} of the single-process run",
                ctx.adapter_info().name,
                options.steps,
                step_time.as_secs_f64() * 1e3 / options.steps as f64,
                100.0 * share,
            );
        }
    }
    Ok(())
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
