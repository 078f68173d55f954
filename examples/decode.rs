//! An LLM-style decode loop through gpu-arena: a `[layers, max_seq, dim]` KV cache made once;
//! each step uploads the new rows, writes them into the cache in place (donated
//! `dynamic_update_slice`), and runs a user kernel over a view of each layer (scores of a query
//! against every row so far), all under `TransferGuard` `disallow` (only explicit transfers).
//!
//! Run three ways, side by side: single ops (which the context gathers into submissions of up
//! to 32), one `Sequence` (one submission) per step, and one step captured once
//! (`Context::capture`) and replayed per step (`CapturedStep::run`: the query, the key rows,
//! the write positions and the row count set per run, the scores read into host memory by the
//! same submission), three times each in turn (the median run of each is reported). Checks
//! every step's scores against a CPU reference bit for bit (so the three ways agree bit for
//! bit) and the final caches against each other, that `bytes_in_use` stays flat across steps
//! (the cache is reused in place; temporaries come and go), that the sequence makes no more
//! submissions per step than the ops one by one, and that a captured run is one submission
//! and allocates nothing; prints µs, submissions and arena allocations per step, end to end
//! (the read of the scores included) and issue cost (the CPU time to issue a step, measured
//! by issuing each step a second time, without the read, and waiting outside the timing: a
//! step issued twice writes the same rows and scores). On lavapipe `vkQueueSubmit` runs a small
//! submission's work before it returns, so there the issue cost holds most of the GPU time too.
//!
//! The captured step runs the scores kernel over a fixed grid of `max_seq` rows (a captured
//! dispatch keeps its grid; the kernel skips rows past the row count of the run), where the
//! other ways dispatch `t + 1` rows.
//!
//! Single ops and the sequence make the same submissions per step. On the staging path (discrete GPUs;
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
    bytemuck, ArenaConfig, CapturedStep, Context, DeviceArray, IndexSlot, InputSlot, Kernel,
    ParamsSlot, ReadSlot, TransferGuard, TransferGuardLevel,
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

/// How a decode step is issued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Way {
    /// Single ops, gathered by the context.
    SingleOps,
    /// One `Sequence` recorded and submitted per step.
    Sequence,
    /// One step captured once and run per step.
    Captured,
}

impl Way {
    const ALL: [Way; 3] = [Way::SingleOps, Way::Sequence, Way::Captured];

    fn name(self) -> &'static str {
        match self {
            Way::SingleOps => "single_ops",
            Way::Sequence => "sequence",
            Way::Captured => "captured",
        }
    }
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

/// The decode step captured once, and the slots a run sets.
struct CapturedDecode {
    step: CapturedStep,
    query: InputSlot<f32>,
    /// Per layer: the key row's host data and its write position in the cache.
    keys: Vec<(InputSlot<f32>, IndexSlot)>,
    params: ParamsSlot<Params>,
    scores: ReadSlot<f32>,
}

/// Captures the same step as [`step`] (at `t = 0`) over `cache` (donated: it comes back, the
/// same array, updated in place by every run) and `scores`; the uploaded query and rows are
/// the step's temporaries.
fn capture(
    ctx: &Context,
    kernel: &Kernel,
    shape: &Shape,
    mut cache: DeviceArray<f32>,
    scores: &mut DeviceArray<f32>,
) -> anyhow::Result<(CapturedDecode, DeviceArray<f32>)> {
    let dim = shape.dim;
    let mut cap = ctx.capture();
    let (q, query_slot) = cap.input(&query(0, dim), &[dim])?;
    let params = cap.params_slot(&Params {
        rows: 1,
        dim: dim as u32,
    });
    let mut keys = Vec::with_capacity(shape.layers);
    for l in 0..shape.layers {
        let (row, key) = cap.input(&key_row(l, 0, dim), &[1, 1, dim])?;
        let at = cap.index_slot(&[l as i64, 0, 0]);
        cache = cap.dynamic_update_slice_at(cache, &row, &at)?;
        let layer = cache.view(&[l])?;
        let mut out = scores.view_mut(&[l])?;
        // A captured dispatch keeps its grid: every row a run may score; the kernel skips
        // the rows past the run's `rows`.
        cap.launch(kernel)
            .params_slot(&params)
            .arg(&layer)
            .arg(&q)
            .arg_mut(&mut out)
            .grid_for(shape.max_seq as u64)
            .run()?;
        keys.push((key, at));
    }
    let read = cap.read(&*scores)?;
    drop(q);
    let step = cap.finish()?;
    Ok((
        CapturedDecode {
            step,
            query: query_slot,
            keys,
            params,
            scores: read,
        },
        cache,
    ))
}

/// Runs the captured step at position `t`: the query, the rows, their positions and the row
/// count set for this run, the scores read into `read` when given (then the run waits).
fn run_captured(
    decode: &mut CapturedDecode,
    shape: &Shape,
    t: usize,
    read: Option<&mut [f32]>,
) -> anyhow::Result<()> {
    let dim = shape.dim;
    let q = query(t, dim);
    let rows: Vec<Vec<f32>> = (0..shape.layers).map(|l| key_row(l, t, dim)).collect();
    let mut run = decode.step.run().input(&decode.query, &q).params(
        &decode.params,
        &Params {
            rows: (t + 1) as u32,
            dim: dim as u32,
        },
    );
    for (l, ((key, at), row)) in decode.keys.iter().zip(&rows).enumerate() {
        run = run.input(key, row).start(at, &[l as i64, t as i64, 0]);
    }
    if let Some(read) = read {
        run = run.read_into(&decode.scores, read);
    }
    run.submit()?;
    Ok(())
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

fn bits(values: &[f32]) -> Vec<u32> {
    values.iter().map(|v| v.to_bits()).collect()
}

/// The id of an empty submission: the difference of two, less one, is how many submissions
/// gpu-arena made in between.
fn submission_mark(ctx: &Context) -> anyhow::Result<u64> {
    Ok(ctx.raw_submit(std::iter::empty(), &[])?.0)
}

/// What one way of running the loop measured.
struct Measured {
    /// End to end: the step issued, its scores read back.
    us_per_step: f64,
    /// The CPU time to issue a step (no read; the GPU's wait outside the timing).
    issue_us_per_step: f64,
    bytes_in_use: u64,
    /// The most submissions one step made, the read of the scores included (a submission on
    /// the staging path for single ops and sequences, none on zero-copy; a captured run reads
    /// in its own submission).
    submissions_per_step: u64,
    /// The most arena allocations (`memory_stats().num_allocs`) one step made.
    allocations_per_step: u64,
    /// The captured step's plan (captured way only): temporaries, block and lower bound in
    /// bytes, and the µs the capture and its `finish` took.
    plan: Option<(usize, u64, u64, f64)>,
    /// Moving copies a captured run made on the host, per run (`CapturedStep::host_copies`:
    /// on a CPU adapter with zero-copy).
    host_copies_per_run: f64,
    /// The cache after the last step.
    cache: Vec<f32>,
}

fn run(ctx: &Context, shape: &Shape, steps: usize, way: Way) -> anyhow::Result<Measured> {
    let kernel = ctx.kernel(SCORES, "main")?;
    let mut cache = ctx.zeros::<f32>(&[shape.layers, shape.max_seq, shape.dim])?;
    let mut scores = ctx.zeros::<f32>(&[shape.layers, shape.max_seq])?;
    ctx.synchronize()?;
    let mut captured = None;
    let mut plan = None;
    if way == Way::Captured {
        let started = Instant::now();
        let (decode, donated) = capture(ctx, &kernel, shape, cache, &mut scores)?;
        let capture_us = started.elapsed().as_secs_f64() * 1e6;
        let p = decode.step.plan();
        plan = Some((
            p.temporaries.len(),
            p.block_bytes,
            p.lower_bound_bytes,
            capture_us,
        ));
        cache = donated;
        captured = Some(decode);
        ctx.synchronize()?;
    }
    let mut flat = None;
    let (mut busy, mut issuing) = (0.0, 0.0);
    let (mut submissions_per_step, mut allocations_per_step) = (0, 0);
    let mut got = vec![0.0f32; shape.layers * shape.max_seq];
    for t in 0..steps {
        let before = submission_mark(ctx)?;
        let allocs = ctx.memory_stats().num_allocs;
        let started = Instant::now();
        match &mut captured {
            Some(decode) => run_captured(decode, shape, t, Some(&mut got))?,
            None => {
                cache = step(
                    ctx,
                    &kernel,
                    shape,
                    cache,
                    &mut scores,
                    t,
                    way == Way::Sequence,
                )?;
                ctx.device_get_into(&scores, &mut got)?; // explicit: allowed under `disallow`
            }
        }
        busy += started.elapsed().as_secs_f64();
        submissions_per_step = submissions_per_step.max(submission_mark(ctx)? - before - 1);
        allocations_per_step = allocations_per_step.max(ctx.memory_stats().num_allocs - allocs);
        anyhow::ensure!(
            bits(&got) == bits(&reference(shape, t)),
            "{}, step {t}: scores differ from the CPU's bits",
            way.name()
        );
        // The same step again, timed until it is issued; its wait outside the timing.
        ctx.synchronize()?;
        let started = Instant::now();
        match &mut captured {
            Some(decode) => run_captured(decode, shape, t, None)?,
            None => {
                cache = step(
                    ctx,
                    &kernel,
                    shape,
                    cache,
                    &mut scores,
                    t,
                    way == Way::Sequence,
                )?
            }
        }
        issuing += started.elapsed().as_secs_f64();
        ctx.synchronize()?;
        let in_use = ctx.memory_stats().bytes_in_use;
        match flat {
            None => flat = Some(in_use),
            Some(first) => anyhow::ensure!(
                in_use == first,
                "{}, step {t}: bytes_in_use {in_use} != {first} after the first step",
                way.name()
            ),
        }
    }
    // Every step ran twice: once read back, once timed to its issue.
    let host_copies_per_run = captured
        .as_ref()
        .map_or(0.0, |d| d.step.host_copies() as f64 / (2 * steps) as f64);
    drop(captured);
    Ok(Measured {
        us_per_step: busy / steps as f64 * 1e6,
        issue_us_per_step: issuing / steps as f64 * 1e6,
        bytes_in_use: flat.unwrap_or(0),
        submissions_per_step,
        allocations_per_step,
        plan,
        host_copies_per_run,
        cache: ctx.device_get(&cache)?,
    })
}

/// Runs of each way; the median is reported.
const ROUNDS: usize = 3;

/// The round with the median time per step (its submissions and `bytes_in_use` with it), and
/// the median issue cost of the rounds.
fn median_round(mut rounds: Vec<Measured>) -> Measured {
    let mut issue: Vec<f64> = rounds.iter().map(|m| m.issue_us_per_step).collect();
    issue.sort_by(f64::total_cmp);
    rounds.sort_by(|a, b| a.us_per_step.total_cmp(&b.us_per_step));
    let mut median = rounds.swap_remove(rounds.len() / 2);
    median.issue_us_per_step = issue[issue.len() / 2];
    median
}

#[path = "flags/mod.rs"]
mod flags;

/// The largest `--steps`, `--layers` and `--dim`: far past a demo, far from overflowing sizes.
const MAX_FLAG_VALUE: usize = 1 << 16;

const USAGE: &str = "usage: decode [--steps N] [--layers L] [--dim D] [--json]

An LLM-style decode loop over a KV cache written in place, run three ways side by side:
single ops, one sequence per step, one step captured once and replayed.
  --steps N    decode steps (default 64)
  --layers L   layers, each with its own KV cache (default 4)
  --dim D      model width (default 256)
  --json       one JSON object per way (single ops, sequence, captured) instead of text
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
    // The ways in turn, ROUNDS times each (the order rotated each round), and the median round
    // of each: a shared machine's load drifts over a run, and taking turns spreads it over
    // every way alike.
    let mut rounds: [Vec<Measured>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    for round in 0..ROUNDS {
        for i in 0..Way::ALL.len() {
            let way = (round + i) % Way::ALL.len();
            rounds[way].push(run(&ctx, &shape, steps, Way::ALL[way])?);
        }
    }
    let [per_op, per_sequence, captured] = rounds.map(median_round);
    anyhow::ensure!(
        per_sequence.submissions_per_step <= per_op.submissions_per_step.max(1),
        "a sequence made {} submissions per step where its ops one by one made {}",
        per_sequence.submissions_per_step,
        per_op.submissions_per_step
    );
    anyhow::ensure!(
        captured.submissions_per_step == 1 && captured.allocations_per_step == 0,
        "a captured run made {} submissions and {} arena allocations, not 1 and 0",
        captured.submissions_per_step,
        captured.allocations_per_step
    );
    for (way, m) in [("sequence", &per_sequence), ("captured", &captured)] {
        anyhow::ensure!(
            bits(&m.cache) == bits(&per_op.cache),
            "the cache the {way} way left differs from the single ops' in its bits"
        );
    }
    let (temporaries, block_bytes, lower_bound_bytes, capture_us) =
        captured.plan.unwrap_or_default();
    let ops = 1 + 2 * layers + layers;
    // Zero-copy where the arena is mapped (UMA with gpu-allocator; not wgpu's GL buffers).
    let plan = ctx.memory_plan();
    let path = if plan.uma && plan.arena_host_visible && ctx.config().zero_copy {
        "zero-copy"
    } else {
        "staging"
    };
    let issue_ratio = captured.issue_us_per_step / per_sequence.issue_us_per_step;
    let end_to_end_ratio = captured.us_per_step / per_sequence.us_per_step;
    if json {
        for (way, m) in [
            (Way::SingleOps, &per_op),
            (Way::Sequence, &per_sequence),
            (Way::Captured, &captured),
        ] {
            let extra = match way {
                Way::Captured => format!(
                    ", \"issue_vs_sequence\": {issue_ratio:.3}, \"end_to_end_vs_sequence\": {end_to_end_ratio:.3}, \"temporaries\": {temporaries}, \"block_bytes\": {block_bytes}, \"lower_bound_bytes\": {lower_bound_bytes}, \"capture_us\": {capture_us:.1}, \"host_copies_per_run\": {:.1}",
                    captured.host_copies_per_run
                ),
                _ => String::new(),
            };
            println!(
                "{{\"case\": \"decode_step\", \"method\": \"{}\", \"path\": \"{path}\", \"us_per_step\": {:.1}, \"issue_us_per_step\": {:.1}, \"submissions_per_step\": {}, \"allocations_per_step\": {}, \"ops_per_step\": {ops}, \"layers\": {layers}, \"dim\": {dim}, \"steps\": {steps}{extra}}}",
                way.name(),
                m.us_per_step,
                m.issue_us_per_step,
                m.submissions_per_step,
                m.allocations_per_step
            );
        }
    } else {
        println!(
            "decode on {} ({path}): {layers} layer{} x {} positions x {dim}, {steps} step{}, {ops} ops per step",
            ctx.adapter_info().name,
            if layers == 1 { "" } else { "s" },
            shape.max_seq,
            if steps == 1 { "" } else { "s" }
        );
        println!("  end to end (the read included); issue cost in brackets; per step:");
        for (name, m) in [
            ("single ops (gathered):", &per_op),
            ("one sequence per step:", &per_sequence),
            ("captured, one run/step:", &captured),
        ] {
            println!(
                "  {name:<24} {:9.1} us ({:7.1}), {} submission{}, {} arena allocation{} ({:.2}x single ops)",
                m.us_per_step,
                m.issue_us_per_step,
                m.submissions_per_step,
                if m.submissions_per_step == 1 { "" } else { "s" },
                m.allocations_per_step,
                if m.allocations_per_step == 1 { "" } else { "s" },
                per_op.us_per_step / m.us_per_step
            );
        }
        println!(
            "  captured vs sequence: issue {issue_ratio:.2}x (goal <= 0.5x), end to end {end_to_end_ratio:.2}x (goal <= 1.0x)"
        );
        println!(
            "  captured plan: {temporaries} temporaries, {block_bytes} B of blocks, lower bound {lower_bound_bytes} B; capture + finish {capture_us:.0} us; {:.1} moving copies per run on the host",
            captured.host_copies_per_run
        );
        println!(
            "  bytes_in_use flat across steps: {} B (per op), {} B (sequence), {} B (captured); scores match the CPU bit for bit",
            per_op.bytes_in_use, per_sequence.bytes_in_use, captured.bytes_in_use
        );
    }
    Ok(())
}
