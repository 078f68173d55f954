//! Runs a small LLM-serving workload that fragments the arena, then writes the memory report.
//!
//! ```text
//! cargo run --release --example memory_report                # writes target/memory_report/
//! cargo run --release --example memory_report -- --out out/  # or into out/
//! ```
//!
//! The workload: a 20-layer model's weights are loaded once; then requests of random prompt
//! lengths arrive, each holding a KV cache for a random number of steps, while every step
//! allocates and frees activations and attention scratch sized by the tokens in flight and
//! reads the logits back. KV caches of different sizes and lifetimes interleaved with
//! temporaries leave holes, which the map shows. The report is written during the last step.
//! Then a traffic spike admits requests until memory runs out: the refusal is an
//! out-of-memory error, and its dump (GPU_ARENA_DUMP_ON_OOM) lands next to the report.
//!
//! Written: `memory_report.html` (open it in a browser), `memory_report.json` (the snapshot),
//! `memory_report.trace.json` (open it in ui.perfetto.dev), and `gpu-arena-oom-*.{json,html}`.

use anyhow::Result;
use gpu_arena::profile::{label_scope, DEFAULT_TIMELINE_CAPACITY};
use gpu_arena::{ArenaConfig, Context, DeviceArray, Error, MemFraction};
use lexopt::prelude::*;
use std::path::PathBuf;

const MIB: u64 = 1 << 20;
/// Every region is at most this large, so the map has several rows.
const REGION_BYTES: u64 = 64 * MIB;
/// Reserved at the first allocation: three regions.
const RESERVE_BYTES: u64 = 3 * REGION_BYTES;
/// The arena may grow to this: two more regions.
const LIMIT_BYTES: u64 = 5 * REGION_BYTES;
/// Transformer layers; each holds a 4 MiB and a 1.5 MiB weight matrix.
const LAYERS: usize = 20;
/// Model width (f32 elements per token of activations).
const HIDDEN: usize = 1024;
/// KV-cache elements per token: keys and values, 8 heads of 64.
const KV_PER_TOKEN: usize = 2 * 8 * 64;
/// Prompt tokens one request contributes to a step (chunked prefill).
const TOKENS_PER_REQUEST_STEP: usize = 512;
/// Tokens one step processes at most (the batch budget).
const TOKENS_PER_STEP: usize = 2048;
/// Tokens of each request of the closing traffic spike (a 6 MiB KV cache).
const SPIKE_TOKENS: usize = 1536;
/// Vocabulary slice whose logits are read back each step.
const VOCAB: usize = 4096;
/// Serving steps.
const STEPS: usize = 160;
/// Fixed seed, so every run draws the same picture.
const SEED: u64 = 0x6A2E_4A11;

/// splitmix64 (Steele, Lea and Flood 2014): enough randomness to shape a workload.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn range(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low)
    }
}

/// One request being served: its prompt tokens and its KV cache, until `ends`.
struct Request {
    _prompt: DeviceArray<u32>,
    kv: DeviceArray<f32>,
    tokens: usize,
    ends: usize,
}

#[path = "flags/mod.rs"]
mod flags;

/// Where the report goes without `--out`.
const DEFAULT_OUT: &str = "target/memory_report";

const USAGE: &str = "usage: memory_report [--out DIR]

Runs a small LLM-serving workload that fragments the arena, then writes the memory report.
  --out DIR   where to write memory_report.{html,json,trace.json} and the out-of-memory dump
              (default target/memory_report; created if missing)
  -h, --help  this text";

/// The directory of `--out`.
fn out_dir() -> PathBuf {
    flags::parse_or_exit(USAGE, |parser| {
        let mut out = PathBuf::from(DEFAULT_OUT);
        while let Some(arg) = parser.next()? {
            match arg {
                Long("out") => {
                    out = parser.value()?.into();
                    if out.as_os_str().is_empty() {
                        return Err("--out needs a directory".into());
                    }
                }
                Short('h') | Long("help") => return Ok(None),
                _ => return Err(arg.unexpected()),
            }
        }
        Ok(Some(out))
    })
}

fn main() -> Result<()> {
    let out = out_dir();
    let ctx = open_context(&out)?;
    // The sizes the arena will really have: the fractions as this device's heap rounds them.
    let (plan, fraction) = (ctx.memory_plan(), ctx.config().mem_fraction);
    let mib = |bytes: u64| bytes as f64 / MIB as f64;
    println!(
        "{} ({}): arena of {:.1} MiB reserved at the first allocation, growing to {:.1} MiB, \
         regions of {} MiB",
        ctx.adapter_info().name,
        ctx.adapter_info().backend,
        mib(plan.prealloc_bytes(fraction.reserve)),
        mib(plan.prealloc_bytes(fraction.limit)),
        REGION_BYTES / MIB
    );

    // Load the model: the embedding comes from the host, the layers are initialised on the
    // device. A scope labels everything allocated inside it.
    let embedding = ctx
        .device_put(&vec![0.5f32; 3 * 1024 * 1024], &[3 * 1024, 1024])?
        .with_label("embedding");
    let weights = {
        let _scope = label_scope("weights");
        (0..LAYERS)
            .map(|_| {
                Ok((
                    ctx.zeros::<f32>(&[HIDDEN, HIDDEN])?,
                    ctx.zeros::<f32>(&[HIDDEN, 384])?,
                ))
            })
            .collect::<Result<Vec<_>>>()?
    };

    let mut rng = Rng(SEED);
    let mut requests: Vec<Request> = Vec::new();
    for step in 0..STEPS {
        // Finished requests leave; new ones arrive with prompts of 64 to 2048 tokens.
        requests.retain(|r| r.ends > step);
        for _ in 0..rng.range(0, 3) {
            let tokens = rng.range(64, 2048) as usize;
            let prompt = {
                let _scope = label_scope("prompts");
                ctx.device_put(&vec![7u32; tokens], &[tokens])?
            };
            let kv = ctx
                .zeros::<f32>(&[tokens, KV_PER_TOKEN])?
                .with_label("kv-cache");
            requests.push(Request {
                _prompt: prompt,
                kv,
                tokens,
                ends: step + rng.range(6, 48) as usize,
            });
        }
        // One forward step: temporaries sized by the tokens in flight, freed at its end.
        let in_flight: usize = requests
            .iter()
            .map(|r| r.tokens.min(TOKENS_PER_REQUEST_STEP))
            .sum::<usize>()
            .clamp(16, TOKENS_PER_STEP);
        let batch = requests.len().max(1);
        {
            let _scope = label_scope("activations");
            let hidden = ctx.alloc::<f32>(&[in_flight, HIDDEN])?;
            let scratch = {
                let _inner = label_scope("attention");
                ctx.alloc::<f32>(&[in_flight, 256])?
            };
            let logits = ctx.zeros::<f32>(&[batch, VOCAB])?.with_label("logits");
            let host = ctx.device_get(&logits)?;
            assert_eq!(host.len(), batch * VOCAB);
            if step % 20 == 0 {
                // A debugging habit that costs a transfer: printing a device array is an
                // implicit device-to-host copy (the transfer guard watches these).
                let _ = format!("{}", ctx.zeros::<f32>(&[4])?);
            }
            if step == STEPS - 1 {
                // The report shows the last step at work, its temporaries included.
                report(&ctx, &out)?;
            }
            drop((hidden, scratch, logits));
        }
        // Every tenth step a request's KV cache is grown (reallocated larger), as a server
        // does when a generation runs past its reservation.
        if step % 10 == 5 {
            if let Some(r) = requests.iter_mut().max_by_key(|r| r.ends) {
                r.tokens += 256;
                r.kv = ctx
                    .zeros::<f32>(&[r.tokens, KV_PER_TOKEN])?
                    .with_label("kv-cache");
            }
        }
    }

    // A traffic spike: requests are admitted until memory runs out. The first refusal is an
    // out-of-memory error whose dump (GPU_ARENA_DUMP_ON_OOM) shows the arena at that moment.
    let _scope = label_scope("kv-cache (spike)");
    let mut spike = Vec::new();
    let refusal = loop {
        match ctx.zeros::<f32>(&[SPIKE_TOKENS, KV_PER_TOKEN]) {
            Ok(kv) => spike.push(kv),
            Err(e) => break e,
        }
    };
    match refusal {
        Error::OutOfMemory { .. } => {
            println!(
                "\nthe spike was refused after {} more requests:\n{refusal}",
                spike.len()
            )
        }
        other => return Err(other.into()),
    }
    drop((embedding, weights, requests, spike));
    Ok(())
}

/// Writes the report, the snapshot and the trace into `out`, and says where.
fn report(ctx: &Context, out: &std::path::Path) -> Result<()> {
    ctx.synchronize()?;
    let files = ctx.write_memory_profile(out, "memory_report")?;
    let stats = ctx.memory_stats_with_transfers();
    let live = ctx
        .memory_snapshot()
        .chunks()
        .filter(|(_, c)| c.allocation.is_some())
        .count();
    println!(
        "{live} live arrays; in use {:.1} MiB of {:.1} MiB reserved (peak {:.1} MiB); largest \
         free block {:.1} MiB; fragmentation {:.3}; {:.1} MiB transferred",
        mib(stats.arena.bytes_in_use),
        mib(stats.arena.bytes_reserved),
        mib(stats.arena.peak_bytes_in_use),
        mib(stats.arena.largest_free_block_bytes),
        stats.arena.fragmentation,
        mib(stats.transferred_bytes()),
    );
    println!("report:   {}", files.report.display());
    println!("snapshot: {}", files.snapshot.display());
    if let Some(trace) = &files.trace {
        println!(
            "trace:    {} (open in https://ui.perfetto.dev)",
            trace.display()
        );
    }
    Ok(())
}

/// A context whose arena reserves [`RESERVE_BYTES`] and may grow to [`LIMIT_BYTES`] in regions
/// of [`REGION_BYTES`], with the timeline on and out-of-memory dumps written to `out`.
///
/// The arena is sized in fractions of the device heap, so a first context reads the heap.
fn open_context(out: &std::path::Path) -> Result<Context> {
    let heap = Context::new(ArenaConfig::default())?
        .memory_plan()
        .heap_bytes as f64;
    Ok(Context::new(ArenaConfig {
        mem_fraction: MemFraction {
            reserve: (RESERVE_BYTES as f64 + 0.5 * MIB as f64) / heap,
            limit: (LIMIT_BYTES as f64 + 0.5 * MIB as f64) / heap,
        },
        max_region_bytes: Some(REGION_BYTES),
        timeline_capacity: DEFAULT_TIMELINE_CAPACITY,
        dump_on_oom: Some(out.to_path_buf()),
        ..ArenaConfig::from_env()?
    })?)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / MIB as f64
}
