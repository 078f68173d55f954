//! `bench_update --variants`: the library's kernels in every shape against the fixed shape and
//! the tuned one, measured interleaved round by round on one context
//! ([`Context::set_kernel_tuning`] switches between them), medians per line.
//!
//! Four ops, each at 1 MiB and at `--size-mib` MiB (at most 256): the in-place
//! `dynamic_update_slice` and the `dynamic_slice` of a box of half rows (the row kernel, half
//! the operand's bytes), `copy` of the operand (one contiguous row) and `fill_in_place` of it
//! (the fill kernel). Every call is followed by `ctx.synchronize()`; `--iters` rounds (at least
//! 15), each running every variant once per op in an order that rotates.

use anyhow::Result;
use gpu_arena::kernels::{KernelShape, KernelTuning};
use gpu_arena::{Context, DeviceArray};
use std::time::Instant;

/// Bytes per MiB.
const MIB: u64 = 1 << 20;

/// `u32`s per operand row (4 KiB rows); boxes take half of each row.
const ROW: usize = 1024;

/// The fewest rounds a comparison is worth (the goal is measured over 15).
const MIN_ROUNDS: usize = 15;

/// The largest size compared: every variant's op runs once per round.
const MAX_SIZE_MIB: u64 = 256;

/// The ops compared.
const OPS: [&str; 4] = ["update", "slice", "copy", "fill"];

/// One line of the comparison: an op at a size under one setting.
pub struct Line {
    pub op: &'static str,
    pub bytes: u64,
    pub variant: String,
    pub seconds: f64,
}

/// Runs the comparison and prints it (a table, or one JSON object per line with `json`).
pub fn run(ctx: &Context, size_mib: u64, rounds: usize, json: bool) -> Result<()> {
    let rounds = rounds.max(MIN_ROUNDS);
    let started = Instant::now();
    let tuning = ctx.tune_kernels()?;
    let tuning_seconds = started.elapsed().as_secs_f64();
    let mut variants = vec![
        ("fixed".to_string(), KernelTuning::Off),
        ("tuned".to_string(), KernelTuning::On),
    ];
    for shape in KernelShape::candidates(ctx.adapter_info().subgroup_max_size) {
        variants.push((shape.to_string(), KernelTuning::Forced(shape)));
    }
    if !json {
        println!(
            "{} ({}, {}): {} in {tuning_seconds:.2} s; {rounds} rounds, medians",
            ctx.adapter_info().name,
            ctx.adapter_info().backend,
            ctx.memory_plan().device_kind.name(),
            match tuning.jobs {
                1 => "1 tuning job".to_string(),
                jobs => format!("{jobs} tuning jobs"),
            }
        );
        for k in &tuning.kernels {
            println!(
                "  tuned {:<34} {:<7} {:>6} ({:.2}x fixed on the tuning workload)",
                k.kernel,
                k.size_class.name(),
                k.shape.to_string(),
                k.bytes_per_second / k.fixed_bytes_per_second
            );
        }
    }
    let mut sizes = vec![1, size_mib.min(MAX_SIZE_MIB)];
    sizes.dedup();
    for mib in sizes {
        let lines = compare(ctx, mib * MIB, &variants, rounds)?;
        report(&lines, json);
    }
    ctx.set_kernel_tuning(KernelTuning::On)?;
    Ok(())
}

/// Every op at `bytes` under every variant, round by round.
fn compare(
    ctx: &Context,
    bytes: u64,
    variants: &[(String, KernelTuning)],
    rounds: usize,
) -> Result<Vec<Line>> {
    let rows = (bytes as usize / (ROW * 4)).max(1);
    let mut operand = Some(ctx.fill(&[rows, ROW], 1u32)?);
    let update = ctx.fill(&[rows, ROW / 2], 2u32)?;
    let mut samples = vec![vec![Vec::new(); variants.len()]; OPS.len()];
    for round in 0..rounds {
        for (o, op) in OPS.iter().enumerate() {
            for k in 0..variants.len() {
                let v = (round + k) % variants.len();
                ctx.set_kernel_tuning(variants[v].1)?;
                let started = Instant::now();
                let array = operand.take().expect("the operand");
                operand = Some(run_op(ctx, op, array, &update)?);
                ctx.synchronize()?;
                samples[o][v].push(started.elapsed().as_secs_f64());
            }
        }
    }
    let mut lines = Vec::new();
    for (o, op) in OPS.iter().enumerate() {
        let moved = match *op {
            "update" | "slice" => (rows * ROW / 2 * 4) as u64,
            _ => (rows * ROW * 4) as u64,
        };
        for (v, (name, _)) in variants.iter().enumerate() {
            lines.push(Line {
                op,
                bytes: moved,
                variant: name.clone(),
                seconds: median(&mut samples[o][v]),
            });
        }
    }
    Ok(lines)
}

/// One call of `op` (the operand donated where the op takes it, and handed back).
fn run_op(
    ctx: &Context,
    op: &str,
    operand: DeviceArray<u32>,
    update: &DeviceArray<u32>,
) -> Result<DeviceArray<u32>> {
    let half = [0, (ROW / 4) as i64];
    Ok(match op {
        "update" => ctx.dynamic_update_slice(operand, update, &half)?,
        "slice" => {
            drop(ctx.dynamic_slice(&operand, &half, update.shape())?);
            operand
        }
        "copy" => {
            drop(ctx.copy(&operand)?);
            operand
        }
        _ => ctx.fill_in_place(operand, 7)?,
    })
}

fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// Prints the lines of one size and, per op, tuned against fixed and against the fastest shape.
fn report(lines: &[Line], json: bool) {
    for op in OPS {
        let of_op: Vec<&Line> = lines.iter().filter(|l| l.op == op).collect();
        let seconds = |name: &str| {
            of_op
                .iter()
                .find(|l| l.variant == name)
                .map_or(f64::NAN, |l| l.seconds)
        };
        let (fixed, tuned) = (seconds("fixed"), seconds("tuned"));
        let best = of_op
            .iter()
            .filter(|l| l.variant != "fixed" && l.variant != "tuned")
            .min_by(|a, b| a.seconds.total_cmp(&b.seconds))
            .expect("every shape was timed");
        let bytes = of_op[0].bytes;
        for l in &of_op {
            if json {
                println!(
                    "{}",
                    serde_json::json!({
                        "case": "variants", "op": op, "bytes": bytes, "variant": l.variant,
                        "seconds": l.seconds, "gbps": bytes as f64 / l.seconds / 1e9,
                    })
                );
            } else {
                println!(
                    "  {op:<7} {:>9} {:<7} {:>10.1} µs {:>8.2} GB/s",
                    format!("{} KiB", bytes >> 10),
                    l.variant,
                    l.seconds * 1e6,
                    bytes as f64 / l.seconds / 1e9
                );
            }
        }
        if json {
            println!(
                "{}",
                serde_json::json!({
                    "case": "variants_summary", "op": op, "bytes": bytes,
                    "tuned_vs_fixed": fixed / tuned, "tuned_vs_best": best.seconds / tuned,
                    "best": best.variant,
                })
            );
        } else {
            println!(
                "  {op} ({} KiB): tuned {:.2}x the fixed shape, {:.2}x the fastest shape ({})\n",
                bytes >> 10,
                fixed / tuned,
                best.seconds / tuned,
                best.variant
            );
        }
    }
}
