//! Gradient checkpointing for a 48-layer network: what each policy keeps, its peak memory and
//! its extra compute, and the arena it needs (found by replaying the plan through arenas of
//! different sizes), for budgets on the peak alone and on the arena; then, when a GPU is
//! there, one plan run with real device arrays through `Schedule::run`.
//!
//! ```text
//! cargo run --release --example remat
//! cargo run --release --example remat -- --layers 20000 [--json]
//! ```
//!
//! With `--layers N` it measures only the planner: a budget search on a chain of N layers of
//! 1 KiB, its peak budget 256 bytes below the save-all plan's peak (so the search cannot stop at
//! keeping everything), timed against one save-all plan of the same chain (one schedule built),
//! as a ratio; then an offload-budget plan for a quarter of keeping everything (or the least
//! offloading fits). Measure its memory with `/usr/bin/time -v` (maximum resident set size).

use gpu_arena::arena::{Arena, ArenaOptions, Bytes, VirtualRegions};
use gpu_arena::backprop::{BackwardArrays, ChainModel};
use gpu_arena::remat::{Chain, CheckpointPolicy, Layer, Schedule};
use gpu_arena::DeviceArray;

#[path = "flags/mod.rs"]
mod flags;

const USAGE: &str = "usage: remat [--layers N] [--json]

Gradient checkpointing for a 48-layer network: each policy's peak memory, extra compute and
the arena it needs; then, when a GPU is there, one plan run with real device arrays.
  --layers N  instead, time a peak-budget search over N layers of 1 KiB (3 to 1000000:
              fewer layers have no plan below keeping everything), then an offload-budget
              plan for a quarter of keeping everything
  --json      with --layers, one JSON row for each of the two
  -h, --help  this text";

/// The fewest layers `--layers` takes: on one or two layers no plan peaks below keeping
/// everything, so the search's budget (256 bytes below that peak) holds none.
const MIN_LAYERS: usize = 3;
/// The most layers `--layers` takes: a million 1 KiB layers plan in well under 1 GiB.
const MAX_LAYERS: usize = 1_000_000;

/// What the command line asks for.
#[derive(Debug, Default, PartialEq)]
struct Options {
    layers: Option<usize>,
    json: bool,
}

fn read_options(parser: &mut lexopt::Parser) -> Result<Option<Options>, lexopt::Error> {
    use lexopt::prelude::*;
    let mut options = Options::default();
    while let Some(arg) = parser.next()? {
        match arg {
            Long("layers") => {
                options.layers = Some(flags::in_range(parser, "layers", MIN_LAYERS..=MAX_LAYERS)?)
            }
            Long("json") => options.json = true,
            Short('h') | Long("help") => return Ok(None),
            _ => return Err(arg.unexpected()),
        }
    }
    if options.json && options.layers.is_none() {
        return Err("--json needs --layers".into());
    }
    Ok(Some(options))
}

/// Times a peak-budget search over `layers` layers of 1 KiB against one save-all plan.
fn bench_planner(layers: usize, json: bool) -> anyhow::Result<()> {
    const KIB: u64 = 1024;
    let chain = Chain::new(KIB, vec![Layer::new(KIB, 1.0); layers])?;
    let started = std::time::Instant::now();
    let all = chain.plan(CheckpointPolicy::SaveAll)?;
    let save_all_ms = started.elapsed().as_secs_f64() * 1e3;
    let budget = all.peak_bytes() - 256;
    drop(all);
    let started = std::time::Instant::now();
    let plan = chain.plan(CheckpointPolicy::PeakBudget(budget))?;
    let budget_ms = started.elapsed().as_secs_f64() * 1e3;
    let ratio = budget_ms / save_all_ms.max(1e-6);
    // Offloading to a quarter of keeping everything (or the least it fits).
    let started = std::time::Instant::now();
    let quarter = (budget + 256) / 4;
    let offload = match chain.plan(CheckpointPolicy::OffloadBudget(quarter)) {
        Err(gpu_arena::remat::RematError::BudgetTooSmall {
            smallest_budget, ..
        }) => chain.plan(CheckpointPolicy::OffloadBudget(smallest_budget))?,
        other => other?,
    };
    let offload_ms = started.elapsed().as_secs_f64() * 1e3;
    if json {
        println!(
            "{{\"bench\":\"remat_planner\",\"case\":\"peak_budget_just_below_save_all\",\"layers\":{layers},\"budget_ms\":{budget_ms},\"save_all_ms\":{save_all_ms},\"ratio\":{ratio},\"checkpoints\":{},\"peak_bytes\":{}}}",
            plan.checkpoints().len(),
            plan.peak_bytes()
        );
        println!(
            "{{\"bench\":\"remat_planner\",\"case\":\"offload_budget_quarter_of_save_all\",\"layers\":{layers},\"offload_ms\":{offload_ms},\"offloaded\":{},\"peak_bytes\":{},\"host_peak_bytes\":{}}}",
            offload.offloaded().len(),
            offload.peak_bytes(),
            offload.host_peak_bytes()
        );
    } else {
        println!(
            "{layers} layers of 1 KiB, peak budget {budget} bytes (save-all peak − 256): planned in {budget_ms:.3} ms, \
             {ratio:.1}× one save-all plan ({save_all_ms:.3} ms); {} kept, peak {}",
            plan.checkpoints().len(),
            Bytes(plan.peak_bytes())
        );
        println!(
            "offload budget (a quarter of keeping everything, or the least it fits): planned in {offload_ms:.3} ms; \
             {} offloaded, device peak {}, host peak {}",
            offload.offloaded().len(),
            Bytes(offload.peak_bytes()),
            Bytes(offload.host_peak_bytes())
        );
    }
    Ok(())
}

const MIB: u64 = 1 << 20;

/// 48 layers whose activations cycle through 4 to 48 MiB (attention, MLP and norm outputs of
/// different widths), each costing compute in proportion to its bytes.
fn network(scale: u64) -> Chain {
    let widths = [8, 24, 48, 12, 4, 24];
    let layers = (0..48)
        .map(|i| {
            let bytes = widths[i % widths.len()] * MIB / scale;
            Layer::new(bytes, bytes as f64 / MIB as f64)
        })
        .collect();
    Chain::new(8 * MIB / scale, layers).expect("a valid chain")
}

/// Whether `schedule` runs in an arena that preallocates `bytes`.
fn fits_in(schedule: &Schedule, bytes: u64) -> bool {
    let mut arena = Arena::new(ArenaOptions::preallocated(bytes));
    schedule
        .replay(&mut arena, &mut VirtualRegions::default())
        .is_ok()
}

fn describe(name: &str, schedule: &Schedule, note: &str) {
    // Best fit places the plan in a little more than its peak: freed activations leave holes
    // that the next, differently sized buffers cannot all use. Find how much, to 1 MiB.
    let peak = schedule.peak_bytes();
    let (mut low, mut high) = (peak, 2 * peak);
    assert!(
        fits_in(schedule, high),
        "twice its peak holds any plan here"
    );
    while high - low > MIB {
        let mid = (low + high) / 2;
        if fits_in(schedule, mid) {
            high = mid;
        } else {
            low = mid;
        }
    }
    println!(
        "  {name:<10} {:>3} kept  peak {:>11}  recompute {:>5.1}%  arena needed {:>11} (+{:.1}%){note}",
        schedule.checkpoints().len(),
        Bytes(peak).to_string(),
        100.0 * schedule.recompute_fraction(),
        Bytes(high).to_string(),
        100.0 * (high - peak) as f64 / peak as f64
    );
}

/// A stand-in for a network's kernels: every step fills the array it writes.
struct Fills;

impl ChainModel for Fills {
    type Element = u8;
    type Error = gpu_arena::Error;

    fn forward(
        &mut self,
        ctx: &gpu_arena::Context,
        _layer: usize,
        _input: &DeviceArray<u8>,
        output: DeviceArray<u8>,
    ) -> gpu_arena::Result<DeviceArray<u8>> {
        let output = ctx.fill_in_place(output, 1)?;
        Ok(output)
    }

    fn loss_gradient(
        &mut self,
        ctx: &gpu_arena::Context,
        _output: &DeviceArray<u8>,
        gradient: DeviceArray<u8>,
    ) -> gpu_arena::Result<DeviceArray<u8>> {
        let gradient = ctx.fill_in_place(gradient, 2)?;
        Ok(gradient)
    }

    fn backward(
        &mut self,
        ctx: &gpu_arena::Context,
        _layer: usize,
        arrays: BackwardArrays<'_, u8>,
    ) -> gpu_arena::Result<Option<DeviceArray<u8>>> {
        let Some(gradient) = arrays.input_gradient else {
            return Ok(None);
        };
        let gradient = ctx.fill_in_place(gradient, 3)?;
        Ok(Some(gradient))
    }
}

fn main() -> anyhow::Result<()> {
    let options = flags::parse_or_exit(USAGE, read_options);
    if let Some(layers) = options.layers {
        return bench_planner(layers, options.json);
    }
    let chain = network(1);
    let all = chain.plan(CheckpointPolicy::SaveAll)?;
    println!(
        "== {} layers, {} of activations; peak of each plan (input and gradients included)",
        chain.layer_count(),
        Bytes(chain.layers().iter().map(|l| l.activation_bytes).sum())
    );
    describe("save all", &all, "");
    describe("every 4th", &chain.plan(CheckpointPolicy::EveryNth(4))?, "");
    describe("sqrt", &chain.plan(CheckpointPolicy::Sqrt)?, "");
    // A budget on the peak alone can pick a plan that does not fit in an arena of that size
    // (freed activations leave holes); a budget on the arena replays each candidate in one.
    for percent in [75, 50, 35, 25] {
        let budget = all.peak_bytes() / 100 * percent;
        for (name, policy) in [
            ("peak", CheckpointPolicy::PeakBudget(budget)),
            ("arena", CheckpointPolicy::Budget(budget)),
        ] {
            match chain.plan(policy) {
                Ok(schedule) => {
                    let fits = match fits_in(&schedule, budget) {
                        true => "  fits the budget's arena",
                        false => "  OVERFLOWS the budget's arena",
                    };
                    describe(&format!("{name} {percent}%"), &schedule, fits);
                }
                Err(error) => println!("  {name} {percent}%: {error}"),
            }
        }
    }

    println!("\n== the sqrt plan with device arrays (sizes / 32)");
    // Only a machine with no adapter skips the run; a bad variable is the user's to fix.
    let ctx = match gpu_arena::Context::from_env() {
        Ok(ctx) => ctx,
        Err(error @ gpu_arena::Error::NoAdapter { .. }) => {
            println!("  skipped: {error}");
            return Ok(());
        }
        Err(error) => return Err(error.into()),
    };
    let small = network(32);
    let schedule = small.plan(CheckpointPolicy::Sqrt)?;
    let input = ctx.zeros::<u8>(&[small.input_bytes() as usize])?;
    let report = schedule.run(&ctx, &mut Fills, &input)?;
    let peak = report.peak_bytes_in_use;
    println!(
        "  {}: context peak {} = planned {}: {}",
        ctx.adapter_info().name,
        Bytes(peak),
        Bytes(schedule.peak_bytes()),
        if peak == schedule.peak_bytes() {
            "exact"
        } else {
            "DIFFERENT"
        }
    );
    Ok(())
}
