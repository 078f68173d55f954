//! An LLM-style decode loop through gpu-arena: a `[layers, max_seq, dim]` KV cache made once;
//! each step uploads the new rows, writes them into the cache in place (donated
//! `dynamic_update_slice`), and runs a user kernel over a view of each layer (scores of a query
//! against every row so far), all under `TransferGuard` `disallow` (only explicit transfers).
//!
//! Run twice, side by side: single ops (which the context gathers into submissions of up to
//! 32), then one `Sequence` (one submission) per step, three times each in alternation (the
//! median run of each is reported). Checks the scores against a CPU reference, that
//! `bytes_in_use` stays flat across
//! steps (the cache is reused in place; temporaries come and go) and that the sequence makes
//! no more submissions per step than the ops one by one, and prints µs and submissions per
//! step.
//!
//! Both ways make about the same submissions now. On the staging path (discrete GPUs;
//! `GPU_ARENA_ZERO_COPY=0` on lavapipe) single `device_put`s of rows go with the gathered ops
//! (staged in their batch's own staging, copied by a command of the batch), so a step is one
//! batch and the read of the scores, as the sequence's step is one submission and the read.
//! On a CPU adapter with zero-copy (lavapipe by default) single puts are `memcpy`s into the
//! arena, and an update of the cache that a gathered launch still reads runs its copy kernel
//! in the batch rather than waiting for it; the read then submits the batch with the memory
//! dependency to host reads: one submission per step either way.
//!
//! `cargo run --release --example decode -- [--steps N] [--layers L] [--dim D] [--json]`

use gpu_arena::{
    bytemuck, ArenaConfig, Context, DeviceArray, Kernel, TransferGuard, TransferGuardLevel,
};
use lexopt::prelude::*;
use std::time::Instant;

/// Scores of the query against rows `0..rows` of one layer's `[max_seq, dim]` cache view.
const SCORES: &str = r#"
struct Params { rows: u32, dim: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> cache: array<f32>;
@group(0) @binding(2) var<storage, read> query: array<f32>;
@group(0) @binding(3) var<storage, read_write> scores: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let row = id.x;
    if (row >= p.rows) { return; }
    var acc = 0.0;
    for (var d = 0u; d < p.dim; d++) {
        acc += cache[row * p.dim + d] * query[d];
    }
    scores[row] = acc;
}
"#;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[bytemuck(crate = "gpu_arena::bytemuck")]
struct Params {
    rows: u32,
    dim: u32,
}

struct Shape {
    layers: usize,
    max_seq: usize,
    dim: usize,
}

/// The key row of layer `l` at step `t` and the query of step `t`: small integers, so every
/// dot product is exact in f32 whatever order the GPU sums in.
fn key_row(l: usize, t: usize, dim: usize) -> Vec<f32> {
    (0..dim)
        .map(|d| ((l * 7 + t * 3 + d) % 9) as f32 - 4.0)
        .collect()
}
fn query(t: usize, dim: usize) -> Vec<f32> {
    (0..dim).map(|d| ((t + 2 * d) % 5) as f32 - 2.0).collect()
}

/// One decode step: new rows into the cache, scores per layer. `sequenced` records it all into
/// one submission; otherwise each op is a single op (gathered by the context). Returns the
/// cache back.
fn step(
    ctx: &Context,
    kernel: &Kernel,
    shape: &Shape,
    mut cache: DeviceArray<f32>,
    scores: &mut DeviceArray<f32>,
    t: usize,
    sequenced: bool,
) -> anyhow::Result<DeviceArray<f32>> {
    let dim = shape.dim;
    let params = Params {
        rows: (t + 1) as u32,
        dim: dim as u32,
    };
    if sequenced {
        let mut s = ctx.sequence();
        let q = s.put(&query(t, dim), &[dim])?;
        for l in 0..shape.layers {
            let row = s.put(&key_row(l, t, dim), &[1, 1, dim])?;
            cache = s.dynamic_update_slice(cache, &row, &[l as i64, t as i64, 0])?;
            let layer = cache.view(&[l])?;
            let mut out = scores.view_mut(&[l])?;
            s.launch(kernel)
                .params(&params)
                .arg(&layer)
                .arg(&q)
                .arg_mut(&mut out)
                .grid_for((t + 1) as u64)
                .run()?;
        }
        s.submit()?;
    } else {
        let q = ctx.device_put(&query(t, dim), &[dim])?;
        for l in 0..shape.layers {
            let row = ctx.device_put(&key_row(l, t, dim), &[1, 1, dim])?;
            cache = ctx.dynamic_update_slice(cache, &row, &[l as i64, t as i64, 0])?;
            let layer = cache.view(&[l])?;
            let mut out = scores.view_mut(&[l])?;
            ctx.launch(kernel)
                .params(&params)
                .arg(&layer)
                .arg(&q)
                .arg_mut(&mut out)
                .grid_for((t + 1) as u64)
                .run()?;
        }
    }
    Ok(cache)
}

/// The CPU's scores at step `t`, `[layers, max_seq]` (rows past `t` stay 0).
fn reference(shape: &Shape, t: usize) -> Vec<f32> {
    let mut out = vec![0.0; shape.layers * shape.max_seq];
    let q = query(t, shape.dim);
    for l in 0..shape.layers {
        for r in 0..=t {
            let k = key_row(l, r, shape.dim);
            out[l * shape.max_seq + r] = k.iter().zip(&q).map(|(a, b)| a * b).sum();
        }
    }
    out
}

/// The id of an empty submission: the difference of two, less one, is how many submissions
/// gpu-arena made in between.
fn submission_mark(ctx: &Context) -> anyhow::Result<u64> {
    Ok(ctx.raw_submit(std::iter::empty(), &[])?.0)
}

/// What one way of running the loop measured.
struct Measured {
    us_per_step: f64,
    bytes_in_use: u64,
    /// The most submissions one step made, the read of the scores included (a submission on
    /// the staging path, none on zero-copy).
    submissions_per_step: u64,
}

fn run(ctx: &Context, shape: &Shape, steps: usize, sequenced: bool) -> anyhow::Result<Measured> {
    let kernel = ctx.kernel(SCORES, "main")?;
    let mut cache = ctx.zeros::<f32>(&[shape.layers, shape.max_seq, shape.dim])?;
    let mut scores = ctx.zeros::<f32>(&[shape.layers, shape.max_seq])?;
    ctx.synchronize()?;
    let mut flat = None;
    let mut busy = 0.0;
    let mut submissions_per_step = 0;
    for t in 0..steps {
        let before = submission_mark(ctx)?;
        let started = Instant::now();
        cache = step(ctx, &kernel, shape, cache, &mut scores, t, sequenced)?;
        let got = ctx.device_get(&scores)?; // explicit: allowed under `disallow`
        busy += started.elapsed().as_secs_f64();
        submissions_per_step = submissions_per_step.max(submission_mark(ctx)? - before - 1);
        anyhow::ensure!(
            got == reference(shape, t),
            "step {t}: scores differ from the CPU"
        );
        ctx.synchronize()?;
        let in_use = ctx.memory_stats().bytes_in_use;
        match flat {
            None => flat = Some(in_use),
            Some(first) => anyhow::ensure!(
                in_use == first,
                "step {t}: bytes_in_use {in_use} != {first} after the first step"
            ),
        }
    }
    Ok(Measured {
        us_per_step: busy / steps as f64 * 1e6,
        bytes_in_use: flat.unwrap_or(0),
        submissions_per_step,
    })
}

/// Runs of each way; the median is reported.
const ROUNDS: usize = 3;

/// The round with the median time per step (its submissions and `bytes_in_use` with it).
fn median_round(mut rounds: Vec<Measured>) -> Measured {
    rounds.sort_by(|a, b| a.us_per_step.total_cmp(&b.us_per_step));
    rounds.swap_remove(rounds.len() / 2)
}

#[path = "flags/mod.rs"]
mod flags;

/// The largest `--steps`, `--layers` and `--dim`: far past a demo, far from overflowing sizes.
const MAX_FLAG_VALUE: usize = 1 << 16;

const USAGE: &str = "usage: decode [--steps N] [--layers L] [--dim D] [--json]
  --steps N    decode steps (default 64)
  --layers L   layers, each with its own KV cache (default 4)
  --dim D      model width (default 256)
  --json       one JSON object instead of text
  -h, --help   this text";

/// What the command line asks for.
struct Options {
    steps: usize,
    layers: usize,
    dim: usize,
    json: bool,
}

fn options() -> Options {
    flags::parse_or_exit(USAGE, |parser| {
        let mut options = Options {
            steps: 64,
            layers: 4,
            dim: 256,
            json: false,
        };
        let range = 1..=MAX_FLAG_VALUE;
        while let Some(arg) = parser.next()? {
            match arg {
                Long("steps") => options.steps = flags::in_range(parser, "steps", range.clone())?,
                Long("layers") => {
                    options.layers = flags::in_range(parser, "layers", range.clone())?
                }
                Long("dim") => options.dim = flags::in_range(parser, "dim", range.clone())?,
                Long("json") => options.json = true,
                Short('h') | Long("help") => return Ok(None),
                _ => return Err(arg.unexpected()),
            }
        }
        // The KV cache, on the device and as the CPU reference's rows.
        flags::bounded_bytes(
            "--layers × --steps (rounded up to 64) × --dim floats of KV cache",
            &[
                options.layers as u64,
                options.steps.next_multiple_of(64) as u64,
                options.dim as u64,
                4,
            ],
        )?;
        Ok(Some(options))
    })
}

fn main() -> anyhow::Result<()> {
    let Options {
        steps,
        layers,
        dim,
        json,
    } = options();
    // Rows of the scores array start on 256-byte boundaries, so each layer's row binds as a view.
    let shape = Shape {
        layers,
        max_seq: steps.next_multiple_of(64),
        dim,
    };
    let ctx = Context::new(ArenaConfig::from_env()?)?;
    // Every transfer in the loop is explicit; an implicit one would be an error.
    let _guard = TransferGuard::scoped(TransferGuardLevel::Disallow);
    // Both ways in alternation, ROUNDS times each, and the median round of each: a shared
    // machine's load drifts over a run, and alternating spreads it over both ways alike.
    let mut rounds: [Vec<Measured>; 2] = [Vec::new(), Vec::new()];
    for round in 0..ROUNDS {
        for sequenced in [round % 2 == 1, round % 2 == 0] {
            rounds[usize::from(sequenced)].push(run(&ctx, &shape, steps, sequenced)?);
        }
    }
    let [per_op, per_sequence] = rounds.map(median_round);
    anyhow::ensure!(
        per_sequence.submissions_per_step <= per_op.submissions_per_step.max(1),
        "a sequence made {} submissions per step where its ops one by one made {}",
        per_sequence.submissions_per_step,
        per_op.submissions_per_step
    );
    let ops = 1 + 2 * layers + layers;
    let path = if ctx.memory_plan().uma && ctx.config().zero_copy {
        "zero-copy"
    } else {
        "staging"
    };
    if json {
        for (method, m) in [("single_ops", &per_op), ("sequence", &per_sequence)] {
            println!(
                "{{\"case\": \"decode_step\", \"method\": \"{method}\", \"path\": \"{path}\", \"us_per_step\": {:.1}, \"submissions_per_step\": {}, \"ops_per_step\": {ops}, \"layers\": {layers}, \"dim\": {dim}, \"steps\": {steps}}}",
                m.us_per_step, m.submissions_per_step
            );
        }
    } else {
        println!(
            "decode on {} ({path}): {layers} layers x {} positions x {dim}, {steps} steps, {ops} ops per step",
            ctx.adapter_info().name,
            shape.max_seq
        );
        println!(
            "  single ops (gathered):    {:9.1} us/step, {} submissions per step (with the read)",
            per_op.us_per_step, per_op.submissions_per_step
        );
        println!(
            "  one sequence per step:    {:9.1} us/step, {} submissions per step (with the read) ({:.2}x)",
            per_sequence.us_per_step,
            per_sequence.submissions_per_step,
            per_op.us_per_step / per_sequence.us_per_step
        );
        println!(
            "  bytes_in_use flat across steps: {} B (per op), {} B (sequence); scores match the CPU",
            per_op.bytes_in_use, per_sequence.bytes_in_use
        );
    }
    Ok(())
}
