//! Training through gpu-arena under each gradient-checkpointing policy: an MLP of ReLU layers,
//! written as WGSL kernels launched over arena arrays, learns a synthetic regression with SGD,
//! once per policy (keep everything, every n-th, √n, a budget, a quarter of keeping
//! everything met by offloading to pinned host memory), each step run by
//! `Schedule::run`.
//!
//! ```text
//! cargo run --release --example train -- [--large] [--steps N] [--json]
//! ```
//! For each policy it prints the context's measured peak (`RunReport`), the bytes resident
//! before the step (parameters, gradients, data) and the plan's peak, the recomputation, the
//! time per step and the loss. It exits with an error unless, for every policy, every step's
//! peak is the resident bytes plus the plan's peak to the byte, the first step's parameter
//! gradients are bit-identical to those of keeping everything (read back and compared as
//! bytes), the whole loss curve and the trained parameters are too, and training cut the loss
//! to under half; and unless the offload policy's budget is one that keeping everything needs
//! at least 4 times over and under which recomputation alone (`CheckpointPolicy::Budget`)
//! finds no plan.
//!
//! With `--budget-kib N` it also trains under the plan `Chain::plan_fastest` predicts fastest
//! for N KiB of activations and gradients (keep, recompute or offload per activation), from the
//! step costs it measured on the first policies, with the same checks.
//!
//! Then the training step (forward, loss, backward under the schedule, SGD update) captured
//! once per policy (`Context::capture`): each capture's memory plan (its temporaries, every
//! activation and gradient, placed in one block by liveness) is printed next to the remat
//! planner's peak, and it exits with an error unless each block is within 1.05× of the plan's
//! lower bound. The √n policy's captured step then trains a new network from the same start,
//! one run per step: its loss curve and final parameters must equal the uncaptured run's bit
//! for bit, and its runs must allocate nothing (the context's peak over them is the bytes in
//! use before them).

mod data;
#[path = "../flags/mod.rs"]
mod flags;
mod mlp;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context as _, Result};
use gpu_arena::arena::Bytes;
use gpu_arena::remat::{Chain, CheckpointPolicy, RematError, Schedule, StepCosts};
use gpu_arena::{bytemuck, ArenaConfig, Context, DeviceArray};
use lexopt::prelude::*;
use mlp::{CapturedTraining, Mlp, MlpKernels, MlpShape};
use serde_json::json;

const USAGE: &str = "\
usage: train [--large] [--steps N] [--json] [--budget-kib N]

Trains an MLP (16 linear layers of 64 ReLU units, batch 32) on a synthetic regression with SGD
under each checkpointing policy (save all, every 3rd, sqrt, a budget), every step run through
gpu-arena's Schedule::run with WGSL kernels, and checks that each step's peak is the plan's,
that the gradients are bit-identical across policies and that the loss falls.

  --large         a real GPU's sizes: 16 layers of 1024 units, batch 512
  --steps N       SGD steps per policy (default 200; 300 with --large; with too few the loss
                  does not fall under half and the run fails)
  --json          one JSON row per policy instead of the table
  --budget-kib N  also train under the plan predicted fastest for a device budget of N KiB
                  for the activations and gradients (keep, recompute or offload per
                  activation, from the step costs measured on the first policies)
  -h, --help      this text";

/// What the command line asked for.
#[derive(Debug, Default, PartialEq)]
struct Options {
    large: bool,
    steps: Option<usize>,
    json: bool,
    budget_kib: Option<u64>,
}

/// Reads the flags; `Ok(None)` when `--help` was asked for. Errors name the bad argument.
fn parse_args(parser: &mut lexopt::Parser) -> Result<Option<Options>, lexopt::Error> {
    let mut options = Options::default();
    while let Some(arg) = parser.next()? {
        match arg {
            Short('h') | Long("help") => return Ok(None),
            Long("large") => options.large = true,
            Long("json") => options.json = true,
            Long("steps") => options.steps = Some(flags::in_range(parser, "steps", 1..=MAX_STEPS)?),
            Long("budget-kib") => {
                options.budget_kib =
                    Some(flags::in_range(parser, "budget-kib", 1..=MAX_BUDGET_KIB)?)
            }
            _ => return Err(arg.unexpected()),
        }
    }
    Ok(Some(options))
}

/// Most steps `--steps` accepts: the losses live in one device array indexed by `u32`, and a
/// million steps is already hours on a real GPU.
const MAX_STEPS: usize = 1_000_000;

/// The seed of the data set and of the initial weights: every policy trains the same network
/// on the same data.
const DATA_SEED: u64 = 0x5eed_da7a;
const PARAMETER_SEED: u64 = 0x5eed_0fae;

/// `EveryNth`'s interval. The chain alternates linear and ReLU layers, so every 3rd keeps
/// linear and ReLU outputs by turns; at these sizes every 4th keeps what √n keeps.
const EVERY: usize = 3;

/// The loss must end below this fraction of where it started (a clear margin: training that
/// stalls or diverges fails).
const LOSS_RATIO_REQUIRED: f32 = 0.5;

/// Sizes of a run.
#[derive(Clone, Copy, Debug)]
struct Config {
    shape: MlpShape,
    /// Minibatches in the data set, visited in turn.
    batches: usize,
    steps: usize,
    learning_rate: f32,
}

/// Small enough for lavapipe in CI.
const CI: Config = Config {
    shape: MlpShape {
        batch: 32,
        inputs: 16,
        width: 64,
        outputs: 4,
        linear_layers: 16,
    },
    batches: 16,
    steps: 200,
    learning_rate: 0.05,
};

/// A real GPU's sizes.
const LARGE: Config = Config {
    shape: MlpShape {
        batch: 512,
        inputs: 64,
        width: 1024,
        outputs: 16,
        linear_layers: 16,
    },
    batches: 16,
    steps: 300,
    learning_rate: 0.02,
};

/// At least 16 linear layers at either size: deep enough that keeping everything needs 4x the
/// offload policy's budget.
const _: () = assert!(CI.shape.linear_layers >= 16 && LARGE.shape.linear_layers >= 16);

fn main() -> ExitCode {
    // wgpu's warnings and validation errors go to stderr (CI looks for the latter).
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let options = flags::parse_or_exit(USAGE, parse_args);
    match run(&options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("train: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// What training under one policy measured.
struct PolicyRun {
    name: String,
    schedule: Schedule,
    /// The highest `peak_bytes_in_use` of any step's `RunReport`.
    peak_bytes_in_use: u64,
    /// Bytes in use before each step besides the input: parameters, gradients, data, losses.
    resident_bytes: u64,
    time_per_step: Duration,
    /// The loss of every step's minibatch, before that step's update.
    losses: Vec<f32>,
    /// The parameter gradients of the first step, per array.
    first_gradients: Vec<Vec<f32>>,
    /// The weights and biases after the last step, per array.
    parameters: Vec<Vec<f32>>,
}

/// The training step captured under one policy: its memory plan.
struct CapturedPlan {
    name: String,
    plan_peak_bytes: u64,
    block_bytes: u64,
    lower_bound_bytes: u64,
    temporaries: usize,
    steps: usize,
}

/// Training with a captured step: what it measured.
struct CapturedRun {
    /// The policy whose schedule was captured.
    name: String,
    time_per_step: Duration,
    losses: Vec<f32>,
    parameters: Vec<Vec<f32>>,
    /// `peak_bytes_in_use` over the runs, and the bytes in use before them.
    peak_bytes_in_use: u64,
    bytes_in_use_before: u64,
}

/// The policy whose captured step trains (it recomputes, so the capture replays recomputation).
const CAPTURED_POLICY: usize = 2;

/// The largest `--budget-kib`: 1 TiB, beyond any device.
const MAX_BUDGET_KIB: u64 = 1 << 30;

/// The captured plan's block may exceed its lower bound by this factor at most.
const BLOCK_OVER_LOWER_BOUND: f64 = 1.05;

impl PolicyRun {
    fn initial_loss(&self) -> f32 {
        self.losses[0]
    }

    /// The mean loss of the last pass over the data set (or of every step, when fewer).
    fn final_loss(&self, batches: usize) -> f32 {
        let last = &self.losses[self.losses.len().saturating_sub(batches)..];
        last.iter().sum::<f32>() / last.len() as f32
    }
}

fn run(options: &Options) -> Result<()> {
    let mut config = if options.large { LARGE } else { CI };
    config.steps = options.steps.unwrap_or(config.steps);
    let shape = config.shape;
    shape.check().map_err(anyhow::Error::msg)?;
    let ctx = Context::new(ArenaConfig::from_env()?)?;
    let kernels = MlpKernels::new(&ctx)?;
    let batches = data::regression_set(
        DATA_SEED,
        config.batches,
        shape.batch,
        shape.inputs,
        shape.outputs,
    );
    let dataset = batches
        .iter()
        .map(|batch| {
            Ok((
                ctx.device_put(&batch.inputs, &[shape.batch, shape.inputs])?,
                ctx.device_put(&batch.targets, &[shape.batch, shape.outputs])?,
            ))
        })
        .collect::<gpu_arena::Result<Vec<_>>>()?;

    let chain = shape.chain()?;
    let (schedules, claim) = policies(&chain)?;
    let mut runs = schedules
        .into_iter()
        .map(|(name, schedule)| {
            train(&ctx, &config, &kernels, &dataset, name, schedule)
                .with_context(|| "training failed")
        })
        .collect::<Result<Vec<_>>>()?;
    let costs = step_costs(&ctx, &runs)?;
    if let Some(kib) = options.budget_kib {
        let budget = kib << 10;
        let schedule = chain
            .plan_fastest(budget, &costs)
            .with_context(|| format!("no plan fits a budget of {kib} KiB"))?;
        ensure!(
            schedule.peak_bytes() <= budget,
            "the plan's peak exceeds the budget"
        );
        let name = format!("fastest {kib} KiB");
        runs.push(
            train(&ctx, &config, &kernels, &dataset, name, schedule)
                .with_context(|| "training under the budget failed")?,
        );
    }

    // The data set stacked, `[batches, batch, features]`, for a captured step to slice.
    let stacked = (
        ctx.device_put(
            &batches
                .iter()
                .flat_map(|b| b.inputs.clone())
                .collect::<Vec<_>>(),
            &[config.batches, shape.batch, shape.inputs],
        )?,
        ctx.device_put(
            &batches
                .iter()
                .flat_map(|b| b.targets.clone())
                .collect::<Vec<_>>(),
            &[config.batches, shape.batch, shape.outputs],
        )?,
    );
    let plans = runs
        .iter()
        .map(|run| captured_plan(&ctx, &config, &kernels, &stacked, run))
        .collect::<Result<Vec<_>>>()?;
    let trained = &runs[CAPTURED_POLICY.min(runs.len() - 1)];
    let captured = train_captured(&ctx, &config, &kernels, &stacked, trained)
        .with_context(|| "training with the captured step failed")?;

    if options.json {
        for run in &runs {
            println!("{}", row(&ctx, &config, run, &costs));
        }
        println!("{}", claim.row());
        for plan in &plans {
            println!("{}", captured_row(&ctx, &config, plan, &captured));
        }
    } else {
        print_table(&ctx, &config, &runs, &costs);
        println!("{}", claim.describe());
        print_captured(&plans, &captured, trained);
    }
    check(&config, &runs)?;
    claim.check()?;
    check_captured(&plans, &captured, trained)
}

/// Captures the training step under `run`'s schedule over a new network and reads its plan.
fn captured_plan(
    ctx: &Context,
    config: &Config,
    kernels: &MlpKernels,
    stacked: &(DeviceArray<f32>, DeviceArray<f32>),
    run: &PolicyRun,
) -> Result<CapturedPlan> {
    let mut mlp = Mlp::new(ctx, config.shape, kernels.clone(), PARAMETER_SEED)?;
    let mut losses = ctx.zeros::<f32>(&[config.steps])?;
    let captured = mlp.capture_step(
        ctx,
        &run.schedule,
        &stacked.0,
        &stacked.1,
        &mut losses,
        config.learning_rate,
    )?;
    let plan = captured.step.plan();
    Ok(CapturedPlan {
        name: run.name.clone(),
        plan_peak_bytes: run.schedule.peak_bytes(),
        block_bytes: plan.block_bytes,
        lower_bound_bytes: plan.lower_bound_bytes,
        temporaries: plan.temporaries.len(),
        steps: plan.steps,
    })
}

/// Trains a new network from the same start with the training step captured under `run`'s
/// schedule: one run per step, each setting the minibatch and the loss's slot.
fn train_captured(
    ctx: &Context,
    config: &Config,
    kernels: &MlpKernels,
    stacked: &(DeviceArray<f32>, DeviceArray<f32>),
    run: &PolicyRun,
) -> Result<CapturedRun> {
    let mut mlp = Mlp::new(ctx, config.shape, kernels.clone(), PARAMETER_SEED)?;
    let mut losses = ctx.zeros::<f32>(&[config.steps])?;
    let CapturedTraining {
        mut step,
        batch,
        loss_slot,
    } = mlp.capture_step(
        ctx,
        &run.schedule,
        &stacked.0,
        &stacked.1,
        &mut losses,
        config.learning_rate,
    )?;
    ctx.synchronize()?;
    let bytes_in_use_before = ctx.memory_stats().bytes_in_use;
    ctx.reset_peak_stats();
    let started = Instant::now();
    for i in 0..config.steps {
        // `MAX_STEPS` fits a u32; the batch index fits an i64.
        step.run()
            .start(&batch, &[(i % config.batches) as i64, 0, 0])
            .params(&loss_slot, &(i as u32))
            .submit()?;
    }
    ctx.synchronize()?;
    let time_per_step = started.elapsed() / config.steps as u32;
    let peak_bytes_in_use = ctx.memory_stats().peak_bytes_in_use;
    Ok(CapturedRun {
        name: run.name.clone(),
        time_per_step,
        losses: ctx.device_get(&losses)?,
        parameters: ctx.device_get_many(&mlp.parameters())?,
        peak_bytes_in_use,
        bytes_in_use_before,
    })
}

fn print_captured(plans: &[CapturedPlan], captured: &CapturedRun, trained: &PolicyRun) {
    println!(
        "the training step captured (forward, loss, backward, SGD update; one submission per run):"
    );
    println!(
        "{:<18} {:>6} {:>12} {:>12} {:>12} {:>10} {:>11}",
        "policy", "steps", "temporaries", "block", "lower bound", "block/lb", "plan peak"
    );
    for plan in plans {
        println!(
            "{:<18} {:>6} {:>12} {:>12} {:>12} {:>9.3}x {:>11}",
            plan.name,
            plan.steps,
            plan.temporaries,
            plan.block_bytes,
            plan.lower_bound_bytes,
            plan.block_bytes as f64 / plan.lower_bound_bytes.max(1) as f64,
            plan.plan_peak_bytes
        );
    }
    println!(
        "block: the one reservation of the step's temporaries (activations, gradients, the \
         minibatch); plan peak: the remat planner's (activations and gradients with the input, \
         not the targets)"
    );
    println!(
        "captured {} training: {:.2}ms/step (uncaptured {:.2}ms/step), peak over the runs {} B = \
         {} B in use before them",
        captured.name,
        captured.time_per_step.as_secs_f64() * 1e3,
        trained.time_per_step.as_secs_f64() * 1e3,
        captured.peak_bytes_in_use,
        captured.bytes_in_use_before
    );
}

fn captured_row(
    ctx: &Context,
    config: &Config,
    plan: &CapturedPlan,
    captured: &CapturedRun,
) -> serde_json::Value {
    let mut row = json!({
        "case": "train_captured",
        "adapter": ctx.adapter_info().name,
        "policy": plan.name,
        "steps_per_run": plan.steps,
        "temporaries": plan.temporaries,
        "block_bytes": plan.block_bytes,
        "lower_bound_bytes": plan.lower_bound_bytes,
        "plan_peak_bytes": plan.plan_peak_bytes,
        "batch": config.shape.batch,
        "width": config.shape.width,
    });
    if plan.name == captured.name {
        row["us_per_step"] = json!(captured.time_per_step.as_secs_f64() * 1e6);
        row["steps"] = json!(config.steps);
    }
    row
}

/// The captured step's claims: every block within [`BLOCK_OVER_LOWER_BOUND`] of its lower
/// bound; training with it gives the uncaptured run's losses and parameters, bit for bit; its
/// runs allocate nothing.
fn check_captured(
    plans: &[CapturedPlan],
    captured: &CapturedRun,
    trained: &PolicyRun,
) -> Result<()> {
    for plan in plans {
        ensure!(
            plan.block_bytes as f64 <= BLOCK_OVER_LOWER_BOUND * plan.lower_bound_bytes as f64,
            "{}: the captured step's block of {} bytes is more than {BLOCK_OVER_LOWER_BOUND}x \
             its lower bound of {}",
            plan.name,
            plan.block_bytes,
            plan.lower_bound_bytes
        );
    }
    let same = |a: &[f32], b: &[f32]| {
        a.len() == b.len() && a.iter().zip(b).all(|(a, b)| a.to_bits() == b.to_bits())
    };
    ensure!(
        same(&captured.losses, &trained.losses),
        "{}: the captured step's loss curve differs from the uncaptured step's in its bits",
        captured.name
    );
    ensure!(
        captured.parameters.len() == trained.parameters.len()
            && captured
                .parameters
                .iter()
                .zip(&trained.parameters)
                .all(|(a, b)| same(a, b)),
        "{}: the captured step's final parameters differ from the uncaptured step's in their bits",
        captured.name
    );
    ensure!(
        captured.peak_bytes_in_use == captured.bytes_in_use_before,
        "the captured runs' peak was {} bytes, above the {} in use before them",
        captured.peak_bytes_in_use,
        captured.bytes_in_use_before
    );
    eprintln!(
        "checked: captured steps' blocks within {BLOCK_OVER_LOWER_BOUND}x of their lower bounds \
         under {} policies; {} training with the captured step: all {} losses and the final \
         parameters bit-identical to the uncaptured step's, no allocation over its runs",
        plans.len(),
        captured.name,
        captured.losses.len()
    );
    Ok(())
}

/// The policies compared, named, with their plans: keep everything, every n-th, √n, a
/// budget halfway between √n's peak and keeping everything (or the smallest that fits, if
/// that is less than any plan needs), and a quarter of keeping everything met by offloading
/// activations to pinned host memory (or the least that offloading fits).
fn policies(chain: &Chain) -> Result<(Vec<(String, Schedule)>, OffloadClaim)> {
    let all = chain.plan(CheckpointPolicy::SaveAll)?;
    let sqrt = chain.plan(CheckpointPolicy::Sqrt)?;
    let halfway = (all.peak_bytes() + sqrt.peak_bytes()) / 2;
    let budget = match chain.plan(CheckpointPolicy::Budget(halfway)) {
        Err(RematError::BudgetTooSmall {
            smallest_budget, ..
        }) => smallest_budget,
        other => other.map(|_| halfway)?,
    };
    // A quarter of keeping everything, by offloading (or the least that offloading fits).
    let quarter = all.peak_bytes() / 4;
    let offload_budget = match chain.plan(CheckpointPolicy::OffloadBudget(quarter)) {
        Err(RematError::BudgetTooSmall {
            smallest_budget, ..
        }) => smallest_budget,
        other => other.map(|_| quarter)?,
    };
    let claim = OffloadClaim {
        budget: offload_budget,
        save_all_bytes: all.peak_bytes(),
        recompute_alone_bytes: match chain.plan(CheckpointPolicy::Budget(offload_budget)) {
            Err(RematError::BudgetTooSmall {
                smallest_budget, ..
            }) => Some(smallest_budget),
            other => other.map(|_| None)?,
        },
    };
    let schedules = vec![
        ("save all".into(), all),
        (
            format!("every nth ({EVERY})"),
            chain.plan(CheckpointPolicy::EveryNth(EVERY))?,
        ),
        ("sqrt".into(), sqrt),
        (
            format!("budget {}", Bytes(budget)),
            chain.plan(CheckpointPolicy::Budget(budget))?,
        ),
        (
            format!("offload {}", Bytes(offload_budget)),
            chain.plan(CheckpointPolicy::OffloadBudget(offload_budget))?,
        ),
    ];
    Ok((schedules, claim))
}

/// What the offload policy shows: a budget that keeping everything needs several times over
/// and that recomputation alone (`CheckpointPolicy::Budget`) cannot meet.
struct OffloadClaim {
    budget: u64,
    save_all_bytes: u64,
    /// The smallest budget recomputation alone fits, when it does not fit `budget`.
    recompute_alone_bytes: Option<u64>,
}

impl OffloadClaim {
    fn save_all_over_budget(&self) -> f64 {
        self.save_all_bytes as f64 / self.budget as f64
    }

    fn describe(&self) -> String {
        let recompute = match self.recompute_alone_bytes {
            Some(bytes) => format!("recomputation alone finds no plan (it needs {bytes} B)"),
            None => "recomputation alone also fits it".into(),
        };
        format!(
            "offload {}: keeping everything needs {:.2}x this budget; {recompute}",
            Bytes(self.budget),
            self.save_all_over_budget()
        )
    }

    fn row(&self) -> serde_json::Value {
        json!({
            "case": "train_offload_budget",
            "budget_bytes": self.budget,
            "save_all_bytes": self.save_all_bytes,
            "save_all_over_budget": self.save_all_over_budget(),
            "recompute_alone_bytes": self.recompute_alone_bytes,
        })
    }

    /// At the example's sizes the offload policy trains under a budget that keeping
    /// everything needs at least 4 times over and that recomputation alone cannot meet.
    fn check(&self) -> Result<()> {
        ensure!(
            self.save_all_over_budget() >= 4.0 && self.recompute_alone_bytes.is_some(),
            "{}: the offload policy should train where keeping everything needs 4x the budget \
             and recomputation alone cannot",
            self.describe()
        );
        Ok(())
    }
}

/// Trains a new network from the same start for `config.steps` SGD steps under `schedule`.
fn train(
    ctx: &Context,
    config: &Config,
    kernels: &MlpKernels,
    dataset: &[(DeviceArray<f32>, DeviceArray<f32>)],
    name: String,
    schedule: Schedule,
) -> Result<PolicyRun> {
    let mut mlp = Mlp::new(ctx, config.shape, kernels.clone(), PARAMETER_SEED)?;
    let mut losses = ctx.zeros::<f32>(&[config.steps])?;
    ctx.synchronize()?;
    let mut peak_bytes_in_use = 0;
    let mut resident_bytes = 0;
    let mut first_gradients = Vec::new();
    let mut reading_back = Duration::ZERO;
    let started = Instant::now();
    for step in 0..config.steps {
        let (inputs, targets) = &dataset[step % dataset.len()];
        // `MAX_STEPS` fits a u32.
        let mut model = mlp.step(targets, &mut losses, step as u32);
        let report = schedule.run(ctx, &mut model, inputs)?;
        ensure!(
            report.peak_bytes_in_use == report.resident_bytes + schedule.peak_bytes(),
            "{name}, step {step}: the context's peak is {} bytes, not the {} resident plus the \
             plan's {}",
            report.peak_bytes_in_use,
            report.resident_bytes,
            schedule.peak_bytes()
        );
        peak_bytes_in_use = peak_bytes_in_use.max(report.peak_bytes_in_use);
        resident_bytes = report.resident_bytes;
        if step == 0 {
            let reading = Instant::now();
            first_gradients = mlp.parameter_gradients(ctx)?;
            reading_back = reading.elapsed();
        }
        mlp.sgd(ctx, config.learning_rate)?;
    }
    ctx.synchronize()?;
    let time_per_step = (started.elapsed() - reading_back) / config.steps as u32;
    Ok(PolicyRun {
        name,
        schedule,
        peak_bytes_in_use,
        resident_bytes,
        time_per_step,
        losses: ctx.device_get(&losses)?,
        first_gradients,
        parameters: ctx.device_get_many(&mlp.parameters())?,
    })
}

/// The step costs measured on this device, for the plans' predicted step times: the save-all
/// run's step time as the base, the √n run's extra time per unit of recomputation, and the
/// host link's bandwidth (`Context::host_link_bandwidth`).
fn step_costs(ctx: &Context, runs: &[PolicyRun]) -> Result<StepCosts> {
    let seconds = |name: &str| -> Result<(f64, &Schedule)> {
        let run = runs.iter().find(|r| r.name == name).context("policy ran")?;
        Ok((run.time_per_step.as_secs_f64(), &run.schedule))
    };
    let (base_seconds, _) = seconds("save all")?;
    let (sqrt_seconds, sqrt) = seconds("sqrt")?;
    let seconds_per_cost = ((sqrt_seconds - base_seconds) / sqrt.recompute_cost()).max(0.0);
    // Measured once per device and kept beside the pipeline cache (GPU_ARENA_CACHE_DIR).
    let host_link_bytes_per_second = ctx.host_link_bandwidth()?;
    Ok(StepCosts {
        base_seconds,
        seconds_per_cost,
        host_link_bytes_per_second,
    })
}

fn print_table(ctx: &Context, config: &Config, runs: &[PolicyRun], costs: &StepCosts) {
    let shape = &config.shape;
    println!(
        "train on {}: {} linear layers ({} -> {} x{} -> {}) with ReLU, batch {}, {} SGD step{} \
         (lr {}) over {} samples",
        ctx.adapter_info().name,
        shape.linear_layers,
        shape.inputs,
        shape.width,
        shape.linear_layers - 1,
        shape.outputs,
        shape.batch,
        config.steps,
        if config.steps == 1 { "" } else { "s" },
        config.learning_rate,
        config.batches * shape.batch
    );
    println!(
        "{:<18} {:>5} {:>10} {:>15} {:>10} {:>10} {:>10} {:>10} {:>9} {:>9}",
        "policy",
        "kept",
        "recompute",
        "peak (context)",
        "resident",
        "plan peak",
        "time/step",
        "predicted",
        "loss 0",
        "loss end"
    );
    for run in runs {
        println!(
            "{:<18} {:>5} {:>9.1}% {:>15} {:>10} {:>10} {:>8.2}ms {:>8.2}ms {:>9.5} {:>9.5}",
            run.name,
            run.schedule.checkpoints().len(),
            100.0 * run.schedule.recompute_fraction(),
            run.peak_bytes_in_use,
            run.resident_bytes,
            run.schedule.peak_bytes(),
            run.time_per_step.as_secs_f64() * 1e3,
            run.schedule.predicted_step(costs).total_seconds * 1e3,
            run.initial_loss(),
            run.final_loss(config.batches)
        );
    }
    println!(
        "peaks in bytes; kept: activations checkpointed besides the input and the output; \
         recompute: forward FLOPs run again, of one forward pass; predicted: from save all's \
         and sqrt's measured times and the host link's measured bandwidth ({:.2} GB/s for the \
         largest activation); loss end: mean over the last pass over the data",
        costs.host_link_bytes_per_second / 1e9
    );
}

fn row(ctx: &Context, config: &Config, run: &PolicyRun, costs: &StepCosts) -> serde_json::Value {
    let shape = &config.shape;
    let predicted = run.schedule.predicted_step(costs);
    let measured = run.time_per_step.as_secs_f64();
    json!({
        "case": "train",
        "adapter": ctx.adapter_info().name,
        "policy": run.name,
        "kept": run.schedule.checkpoints().len(),
        "recompute_fraction": run.schedule.recompute_fraction(),
        "peak_bytes_in_use": run.peak_bytes_in_use,
        "resident_bytes": run.resident_bytes,
        "plan_peak_bytes": run.schedule.peak_bytes(),
        "us_per_step": measured * 1e6,
        "predicted_us_per_step": predicted.total_seconds * 1e6,
        "predicted_over_measured": predicted.total_seconds / measured,
        "predicted_recompute_us": predicted.recompute_seconds * 1e6,
        "predicted_transfer_us": predicted.transfer_seconds * 1e6,
        "offloaded_bytes": run.schedule.offloaded_bytes(),
        "host_peak_bytes": run.schedule.host_peak_bytes(),
        "initial_loss": run.initial_loss(),
        "final_loss": run.final_loss(config.batches),
        "steps": config.steps,
        "batch": shape.batch,
        "width": shape.width,
        "linear_layers": shape.linear_layers,
    })
}

/// The example's claims: the first step's gradients and every loss are the same bits under
/// every policy, and the loss fell by a clear margin. (Each step's peak was checked as it
/// ran.)
fn check(config: &Config, runs: &[PolicyRun]) -> Result<()> {
    let (first, rest) = runs.split_first().context("no policy ran")?;
    let bytes = |arrays: &[Vec<f32>]| -> Vec<u8> {
        arrays
            .iter()
            .flat_map(|a| bytemuck::cast_slice::<f32, u8>(a).to_vec())
            .collect()
    };
    let reference = bytes(&first.first_gradients);
    ensure!(
        first.first_gradients.iter().flatten().any(|&g| g != 0.0),
        "the first step's gradients are all zero: nothing was learned from"
    );
    for run in rest {
        let differing = first
            .first_gradients
            .iter()
            .zip(&run.first_gradients)
            .map(|(a, b)| {
                a.iter()
                    .zip(b)
                    .filter(|(a, b)| a.to_bits() != b.to_bits())
                    .count()
            })
            .sum::<usize>();
        ensure!(
            bytes(&run.first_gradients) == reference,
            "{}: {differing} first-step gradients differ from {}'s in their bits",
            run.name,
            first.name
        );
        let same_losses = run
            .losses
            .iter()
            .zip(&first.losses)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        ensure!(
            same_losses,
            "{}: the loss curve differs from {}'s",
            run.name,
            first.name
        );
        ensure!(
            bytes(&run.parameters) == bytes(&first.parameters),
            "{}: the trained parameters differ from {}'s in their bits",
            run.name,
            first.name
        );
    }
    let (initial, last) = (first.initial_loss(), first.final_loss(config.batches));
    ensure!(
        last.is_finite() && last < LOSS_RATIO_REQUIRED * initial,
        "the loss went from {initial} to {last}, not below {LOSS_RATIO_REQUIRED} of where it \
         started ({} step{})",
        config.steps,
        if config.steps == 1 { "" } else { "s" }
    );
    eprintln!(
        "checked: each step's peak = resident + plan peak; first-step gradients ({} bytes), \
         all {} losses and the trained parameters ({} bytes) bit-identical under {} policies; \
         loss {initial:.5} -> {last:.5}",
        reference.len(),
        first.losses.len(),
        bytes(&first.parameters).len(),
        runs.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Option<Options>, String> {
        flags::parse_strings(parse_args, args)
    }

    #[test]
    fn flags_parse_in_any_order_and_with_equals() {
        assert_eq!(
            parse(&["--json", "--steps", "7", "--large"]).unwrap(),
            Some(Options {
                large: true,
                steps: Some(7),
                json: true,
                budget_kib: None,
            })
        );
        assert_eq!(
            parse(&["--budget-kib", "40"]).unwrap().unwrap().budget_kib,
            Some(40)
        );
        assert!(parse(&["--budget-kib", "0"]).is_err());
        assert_eq!(parse(&["--steps=12"]).unwrap().unwrap().steps, Some(12));
        assert_eq!(parse(&[]).unwrap(), Some(Options::default()));
        assert_eq!(parse(&["--help"]).unwrap(), None);
        assert_eq!(parse(&["-h"]).unwrap(), None);
    }

    #[test]
    fn a_missing_or_bad_step_count_is_refused_with_the_reason() {
        // Unknown flags and stray arguments: lexopt's messages, checked for every example
        // by .ci/examples-flags.sh.
        assert_eq!(
            parse(&["--steps"]).unwrap_err(),
            "missing argument for option '--steps'"
        );
        for bad in ["0", "1000001"] {
            let message = parse(&["--steps", bad]).unwrap_err();
            assert_eq!(message, "--steps must be between 1 and 1000000");
        }
        for bad in ["-3", "many", ""] {
            let message = parse(&["--steps", bad]).unwrap_err();
            assert!(message.starts_with("invalid value"), "{message}");
        }
    }

    /// A run under `policy` of the CI network with the given gradients and losses.
    fn run_with(policy: CheckpointPolicy, gradients: Vec<Vec<f32>>, losses: Vec<f32>) -> PolicyRun {
        PolicyRun {
            name: format!("{policy:?}"),
            schedule: CI.shape.chain().unwrap().plan(policy).unwrap(),
            peak_bytes_in_use: 0,
            resident_bytes: 0,
            time_per_step: Duration::ZERO,
            losses,
            first_gradients: gradients,
            parameters: Vec::new(),
        }
    }

    fn runs(second_gradients: Vec<Vec<f32>>, second_losses: Vec<f32>) -> Vec<PolicyRun> {
        vec![
            run_with(
                CheckpointPolicy::SaveAll,
                vec![vec![0.25, -1.0], vec![3.0]],
                good_losses(),
            ),
            run_with(CheckpointPolicy::Sqrt, second_gradients, second_losses),
        ]
    }

    fn good_losses() -> Vec<f32> {
        vec![2.0; CI.batches].into_iter().chain([0.5; 16]).collect()
    }

    #[test]
    fn check_accepts_runs_with_the_same_bits_whose_loss_fell() {
        let runs = runs(vec![vec![0.25, -1.0], vec![3.0]], good_losses());
        check(&CI, &runs).unwrap();
    }

    #[test]
    fn check_refuses_gradients_one_bit_apart_and_says_how_many_differ() {
        let off_by_one_bit = f32::from_bits(3.0f32.to_bits() + 1);
        let runs = runs(vec![vec![0.25, -1.0], vec![off_by_one_bit]], good_losses());
        let message = check(&CI, &runs).unwrap_err().to_string();
        assert_eq!(
            message,
            "Sqrt: 1 first-step gradients differ from SaveAll's in their bits"
        );
        // -0.0 equals 0.0 as a number but not as bits.
        let mut runs = runs;
        runs[0].first_gradients = vec![vec![0.0, 1.0]];
        runs[1].first_gradients = vec![vec![-0.0, 1.0]];
        assert!(check(&CI, &runs).is_err());
    }

    #[test]
    fn check_refuses_a_loss_curve_that_differs_and_a_loss_that_did_not_fall() {
        let mut losses = good_losses();
        losses[20] = 0.4;
        let differing = runs(vec![vec![0.25, -1.0], vec![3.0]], losses);
        let message = check(&CI, &differing).unwrap_err().to_string();
        assert_eq!(message, "Sqrt: the loss curve differs from SaveAll's");

        for end in [1.5, f32::NAN, f32::INFINITY] {
            let losses: Vec<f32> = vec![2.0; CI.batches].into_iter().chain([end; 16]).collect();
            let mut runs = runs(vec![vec![0.25, -1.0], vec![3.0]], losses.clone());
            runs[0].losses = losses;
            let message = check(&CI, &runs).unwrap_err().to_string();
            assert!(message.starts_with("the loss went from 2 to"), "{message}");
            assert!(
                message.contains("not below 0.5 of where it started (200 steps)"),
                "{message}"
            );
        }
    }

    #[test]
    fn check_refuses_trained_parameters_one_bit_apart() {
        let mut runs = runs(vec![vec![0.25, -1.0], vec![3.0]], good_losses());
        runs[0].parameters = vec![vec![1.0, 2.0]];
        runs[1].parameters = vec![vec![1.0, f32::from_bits(2.0f32.to_bits() + 1)]];
        let message = check(&CI, &runs).unwrap_err().to_string();
        assert_eq!(
            message,
            "Sqrt: the trained parameters differ from SaveAll's in their bits"
        );
    }

    #[test]
    fn check_refuses_gradients_that_are_all_zero() {
        let zeros = vec![vec![0.0, 0.0], vec![0.0]];
        let mut runs = runs(zeros.clone(), good_losses());
        runs[0].first_gradients = zeros;
        let message = check(&CI, &runs).unwrap_err().to_string();
        assert!(message.contains("gradients are all zero"), "{message}");
    }

    #[test]
    fn both_networks_fit_the_kernels_and_the_default_chain_has_thirty_one_layers() {
        CI.shape.check().unwrap();
        LARGE.shape.check().unwrap();
        // 16 linear layers with a ReLU between each two.
        assert_eq!(CI.shape.chain().unwrap().layer_count(), 31);
    }

    #[test]
    fn the_offload_claim_holds_only_at_four_times_and_where_recomputation_cannot_fit() {
        let claim = |budget, recompute_alone_bytes| OffloadClaim {
            budget,
            save_all_bytes: 4096,
            recompute_alone_bytes,
        };
        assert!(claim(1024, Some(2048)).check().is_ok());
        assert!(claim(1025, Some(2048)).check().is_err());
        let fits = claim(1024, None);
        assert!(fits.check().is_err());
        assert!(fits.describe().contains("recomputation alone also fits"));
        assert_eq!(fits.row()["save_all_over_budget"], 4.0);
    }
}
