//! Gradient checkpointing for a 48-layer network: what each policy keeps, its peak memory and
//! its extra compute, and the arena it needs (found by replaying the plan through arenas of
//! different sizes); then, when a GPU is there, one plan run with real device arrays.
//!
//! ```text
//! cargo run --release --example remat
//! ```

use std::collections::HashMap;

use gpu_arena::arena::{Arena, ArenaOptions, Bytes, VirtualRegions};
use gpu_arena::remat::{Buffer, Chain, CheckpointPolicy, Layer, Schedule, Step};

#[path = "flags/mod.rs"]
mod flags;

const USAGE: &str = "usage: remat

Gradient checkpointing for a 48-layer network: each policy's peak memory, extra compute and
the arena it needs; then, when a GPU is there, one plan run with real device arrays.
  -h, --help  this text";

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

fn describe(name: &str, schedule: &Schedule) {
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
        "  {name:<12} {:>3} kept  peak {:>11}  recompute {:>5.1}%  arena needed {:>11} (+{:.1}%)",
        schedule.checkpoints().len(),
        Bytes(peak).to_string(),
        100.0 * schedule.recompute_fraction(),
        Bytes(high).to_string(),
        100.0 * (high - peak) as f64 / peak as f64
    );
}

/// Runs `schedule` with device arrays (a fill stands in for each layer's kernel) and returns
/// the context's peak bytes in use.
fn run_on_device(ctx: &gpu_arena::Context, schedule: &Schedule) -> gpu_arena::Result<u64> {
    let bytes = |buffer| schedule.bytes(buffer).expect("a buffer of the chain") as usize;
    let input = ctx.zeros::<u8>(&[bytes(Buffer::Activation(0))])?;
    ctx.synchronize()?;
    ctx.reset_peak_stats();
    let mut live = HashMap::new();
    for step in schedule.steps() {
        if let Step::Free(buffer) = step {
            live.remove(buffer);
        }
        if let Some(buffer) = step.allocates() {
            let array = ctx.fill::<u8>(&[bytes(buffer)], 1)?;
            live.insert(buffer, array);
        }
    }
    ctx.synchronize()?;
    drop(input);
    Ok(ctx.memory_stats().peak_bytes_in_use)
}

fn main() -> anyhow::Result<()> {
    flags::no_options(USAGE);
    let chain = network(1);
    let all = chain.plan(CheckpointPolicy::SaveAll)?;
    println!(
        "== {} layers, {} of activations; peak of each plan (input and gradients included)",
        chain.layer_count(),
        Bytes(chain.layers().iter().map(|l| l.activation_bytes).sum())
    );
    describe("save all", &all);
    describe("every 4th", &chain.plan(CheckpointPolicy::EveryNth(4))?);
    describe("sqrt", &chain.plan(CheckpointPolicy::Sqrt)?);
    for percent in [75, 50, 35, 25] {
        let budget = all.peak_bytes() / 100 * percent;
        match chain.plan(CheckpointPolicy::Budget(budget)) {
            Ok(schedule) => describe(&format!("budget {percent}%"), &schedule),
            Err(error) => println!("  budget {percent}%: {error}"),
        }
    }

    println!("\n== the sqrt plan with device arrays (sizes / 32)");
    let ctx = match gpu_arena::Context::from_env() {
        Ok(ctx) => ctx,
        Err(error) => {
            println!("  skipped: {error}");
            return Ok(());
        }
    };
    let small = network(32);
    let schedule = small.plan(CheckpointPolicy::Sqrt)?;
    let peak = run_on_device(&ctx, &schedule)?;
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
