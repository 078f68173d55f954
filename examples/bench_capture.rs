//! What capturing a step costs as it grows: `Capture::finish` (planning the step's
//! temporaries into one block, laying out parameter blocks, making bind groups) per op, for
//! chains of launches each writing a temporary the next one reads, at several lengths, and
//! the same capture repeated on one context. A planner that grows with the square of the
//! step shows as a per-op cost that grows with the length; one in O(n log n) stays flat.
//!
//! `cargo run --release --example bench_capture -- [--ops N,N,...] [--repeat R] [--json]`
//!
//! Prints, per length (shortest first), the median of `--rounds` finishes (each on a fresh
//! capture) in µs per op and its ratio to the shortest length's; then `--repeat` captures of the longest length
//! one after another on one context, each against the first (the context must not slow down
//! as it captures). `--json` prints one row per figure.

use gpu_arena::{ArenaConfig, Context, Kernel};
use lexopt::prelude::*;
use std::time::Instant;

#[path = "flags/mod.rs"]
mod flags;

const USAGE: &str = "usage: bench_capture [--ops N,N,...] [--repeat R] [--rounds K] [--json]

Capture::finish per op for chains of N launches (each writing a temporary the next reads).
  --ops LIST    chain lengths, comma-separated, each 1 to 100000 (default 2000,20000)
  --rounds K    finishes measured per length, median taken (1 to 20, default 3)
  --repeat R    captures of the longest length one after another on one context (1 to 20,
                default 4)
  --json        one JSON row per figure
  -h, --help    this text";

struct Flags {
    ops: Vec<usize>,
    rounds: usize,
    repeat: usize,
    json: bool,
}

fn parse() -> Flags {
    flags::parse_or_exit(USAGE, |parser| {
        let mut flags = Flags {
            ops: vec![2000, 20000],
            rounds: 3,
            repeat: 4,
            json: false,
        };
        while let Some(arg) = parser.next()? {
            match arg {
                Long("ops") => {
                    let text: String = flags::value(parser, "ops")?;
                    let mut ops = Vec::new();
                    for part in text.split(',') {
                        match part.trim().parse::<usize>() {
                            Ok(n) if (1..=100_000).contains(&n) => ops.push(n),
                            _ => {
                                return Err(lexopt::Error::Custom(
                                    format!(
                                        "--ops must be lengths between 1 and 100000, got {part:?}"
                                    )
                                    .into(),
                                ))
                            }
                        }
                    }
                    flags.ops = ops;
                }
                Long("rounds") => flags.rounds = flags::in_range(parser, "rounds", 1..=20)?,
                Long("repeat") => flags.repeat = flags::in_range(parser, "repeat", 1..=20)?,
                Long("json") => flags.json = true,
                Short('h') | Long("help") => return Ok(None),
                _ => return Err(arg.unexpected()),
            }
        }
        Ok(Some(flags))
    })
}

const STEP: &str = r#"
@group(0) @binding(0) var<storage, read> x: array<u32>;
@group(0) @binding(1) var<storage, read_write> y: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) i: vec3<u32>) {
    if (i.x < arrayLength(&y)) { y[i.x] = x[i.x] + 1u; }
}
"#;

/// Elements of each temporary.
const ELEMENTS: usize = 64;

/// Captures a chain of `ops` launches and returns how long `finish` took, in seconds.
fn finish_seconds(ctx: &Context, kernel: &Kernel, ops: usize) -> anyhow::Result<f64> {
    let input = ctx.zeros::<u32>(&[ELEMENTS])?;
    let mut cap = ctx.capture();
    let mut current = cap.alloc::<u32>(&[ELEMENTS])?;
    cap.launch(kernel)
        .arg(&input)
        .arg_mut(&mut current)
        .grid_for(ELEMENTS)
        .run()?;
    for _ in 1..ops {
        let mut next = cap.alloc::<u32>(&[ELEMENTS])?;
        cap.launch(kernel)
            .arg(&current)
            .arg_mut(&mut next)
            .grid_for(ELEMENTS)
            .run()?;
        // The previous array is held by the capture alone now: a temporary.
        current = next;
    }
    let started = Instant::now();
    let step = cap.finish()?;
    let seconds = started.elapsed().as_secs_f64();
    drop((step, current));
    Ok(seconds)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() -> anyhow::Result<()> {
    let flags = parse();
    let config = ArenaConfig::from_env()?;
    // Shortest first: each length's cost per op is compared with the shortest's.
    let mut lengths = flags.ops.clone();
    lengths.sort_unstable();
    let mut shortest_per_op = None;
    for &ops in &lengths {
        let mut rounds = Vec::new();
        for _ in 0..flags.rounds {
            // A context of its own per finish: what one capture costs, alone.
            let ctx = Context::new(config.clone())?;
            let kernel = ctx.kernel(STEP, "main")?;
            rounds.push(finish_seconds(&ctx, &kernel, ops)?);
        }
        let per_op_us = median(rounds) * 1e6 / ops as f64;
        let ratio = per_op_us / *shortest_per_op.get_or_insert(per_op_us);
        if flags.json {
            println!(
                "{{\"bench\":\"capture_finish\",\"ops\":{ops},\"us_per_op\":{per_op_us:.3},\"ratio_to_shortest_length\":{ratio:.3}}}"
            );
        } else {
            let noun = if ops == 1 { "op" } else { "ops" };
            println!("finish of {ops:>6} {noun}: {per_op_us:8.2} µs per op ({ratio:.2}x the shortest length's)");
        }
    }
    let longest = lengths.last().copied().unwrap_or(1);
    let ctx = Context::new(config)?;
    let kernel = ctx.kernel(STEP, "main")?;
    let mut first = None;
    for capture in 1..=flags.repeat {
        let seconds = finish_seconds(&ctx, &kernel, longest)?;
        let ratio = seconds / *first.get_or_insert(seconds);
        if flags.json {
            println!(
                "{{\"bench\":\"capture_again\",\"ops\":{longest},\"capture\":{capture},\"seconds\":{seconds},\"ratio_to_first\":{ratio:.3}}}"
            );
        } else {
            let ms = seconds * 1e3;
            let noun = if longest == 1 { "op" } else { "ops" };
            println!("capture {capture} of {longest} {noun} on one context: {ms:.3} ms ({ratio:.2}x the first)");
        }
    }
    Ok(())
}
