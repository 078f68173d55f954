//! What the memory timeline costs the arena: replays allocation traces through a bare
//! [`Arena`] with no event sink (the timeline off: what a context installs by default, the
//! arena's code path of before the timeline existed) and with the timeline's sink, in the same
//! run, and prints ns per alloc+free pair and the ratio.
//!
//! The last line does the same through a [`gpu_arena::Context`] (when a GPU adapter, or
//! lavapipe, is there): where the timeline runs in practice, with the context's clock read per
//! arena call included.
//!
//! ```text
//! cargo run --release --example bench_timeline
//! cargo run --release --example bench_timeline -- --json   # one JSON object per trace
//! cargo run --release --example bench_timeline -- --help
//! ```
//!
//! Traces: exactly those of the arena's own benchmark (`bench_alloc.rs`, included): `random`
//! — log-uniform sizes from 256 B to 64 MiB over 4096 slots, about half live; `training` — a
//! 48-layer training step (weights live, activations kept for backward, short-lived
//! temporaries); `small` — 1 KiB allocations over 65 536 slots. The timeline
//! ring holds [`RING_EVENTS`] events, far fewer than a trace makes, so the measurement includes
//! the steady state of a full ring that drops its oldest events.

use gpu_arena::arena::{AllocationId, Arena, ArenaOptions};
use gpu_arena::profile::Timeline;
use lexopt::prelude::*;
use std::sync::Arc;
use std::time::Instant;

// The traces, and the single region they run in, are the arena benchmark's own.
#[path = "bench_alloc.rs"]
#[allow(dead_code)]
mod bench_alloc;
// The command-line helper, through the arena benchmark's inclusion of it (one copy).
use bench_alloc::flags;

const USAGE: &str = "usage: bench_timeline [--json]

The arena's cost per alloc+free pair with the memory timeline off and on, side by side.
  --json      one JSON object per trace instead of a table
  -h, --help  this text";

/// Whether `--json` was given (the only flag).
fn json_flag() -> bool {
    flags::parse_or_exit(USAGE, |parser| {
        let mut json = false;
        while let Some(arg) = parser.next()? {
            match arg {
                Long("json") => json = true,
                Short('h') | Long("help") => return Ok(None),
                _ => return Err(arg.unexpected()),
            }
        }
        Ok(Some(json))
    })
}

use bench_alloc::{traces, OneRegion, Op, Trace, SPACE_BYTES};

/// Replays per configuration; the median is reported. Off and on alternate, so drifts in the
/// machine's speed hit both alike.
const REPEATS: usize = 9;
/// Ring size of the timeline under test (the default capacity is larger; a smaller ring fills
/// sooner, so the steady state of dropping events is what gets measured).
const RING_EVENTS: usize = (1 << 16) - 1;

/// Nanoseconds per alloc+free pair for one replay of `trace`, with the timeline's sink when
/// `timeline` is given.
fn replay(trace: &Trace, timeline: Option<&Arc<Timeline>>) -> f64 {
    let mut source = OneRegion;
    let mut arena = Arena::new(ArenaOptions {
        max_region_bytes: SPACE_BYTES,
        ..ArenaOptions::preallocated(SPACE_BYTES)
    });
    arena.set_event_sink(timeline.and_then(|t| t.event_sink()));
    arena.reserve(&mut source).expect("one region");
    let mut handles: Vec<Option<AllocationId>> = vec![None; trace.slots];
    let start = Instant::now();
    for op in &trace.ops {
        match *op {
            Op::Alloc { slot, size } => {
                let a = arena.allocate(size, 0, None, &mut source).expect("fits");
                handles[slot as usize] = Some(a.id);
            }
            Op::Free { slot } => {
                let id = handles[slot as usize].take().expect("live");
                arena.free(id, None, &mut source).expect("live");
            }
        }
    }
    let ns = start.elapsed().as_nanos() as f64;
    std::hint::black_box(&arena);
    ns / trace.pairs as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Alloc+free pairs through a [`Context`] (1 KiB arrays, no GPU work), timeline off and on:
/// what the timeline costs where it runs in practice, next to a real allocation's cost.
const CONTEXT_PAIRS: usize = 20_000;

/// ns per `alloc` + drop through a context, median of [`REPEATS`].
fn context_pairs(ctx: &gpu_arena::Context) -> f64 {
    let mut times = Vec::new();
    for _ in 0..REPEATS {
        let start = Instant::now();
        for _ in 0..CONTEXT_PAIRS {
            drop(ctx.alloc::<u8>(&[1024]).expect("fits"));
        }
        times.push(start.elapsed().as_nanos() as f64 / CONTEXT_PAIRS as f64);
    }
    median(times)
}

fn context_bench(json: bool) {
    let open = |timeline_capacity| {
        gpu_arena::Context::new(gpu_arena::ArenaConfig {
            mem_fraction: gpu_arena::MemFraction::fixed(0.05),
            timeline_capacity,
            ..gpu_arena::ArenaConfig::default()
        })
    };
    let (Ok(off_ctx), Ok(on_ctx)) = (open(0), open(RING_EVENTS)) else {
        eprintln!("no GPU adapter: context measurement skipped");
        return;
    };
    let (mut off, mut on) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        off.push(context_pairs(&off_ctx));
        on.push(context_pairs(&on_ctx));
    }
    let (off, on) = (median(off), median(on));
    if json {
        println!(
            "{{\"trace\":\"context\",\"pairs\":{CONTEXT_PAIRS},\"off_ns_per_pair\":{off:.1},\"on_ns_per_pair\":{on:.1},\"on_over_off\":{:.3}}}",
            on / off
        );
    } else {
        println!(
            "{:<9} {:>8} {:>16.1} {:>15.1} {:>7.2}x   (Context::alloc + drop, {})",
            "context",
            CONTEXT_PAIRS,
            off,
            on,
            on / off,
            off_ctx.adapter_info().name
        );
    }
}

fn main() {
    let json = json_flag();
    if !json {
        println!(
            "{:<9} {:>8} {:>16} {:>15} {:>8}",
            "trace", "pairs", "off ns/pair", "on ns/pair", "on/off"
        );
    }
    for trace in traces() {
        let timeline = Arc::new(Timeline::new(RING_EVENTS).expect("a ring within the bound"));
        // One warm-up of each, then alternate.
        replay(&trace, None);
        replay(&trace, Some(&timeline));
        let (mut off, mut on) = (Vec::new(), Vec::new());
        for _ in 0..REPEATS {
            off.push(replay(&trace, None));
            timeline.clear();
            on.push(replay(&trace, Some(&timeline)));
        }
        let (off, on) = (median(off), median(on));
        assert!(timeline.len() == RING_EVENTS.min(2 * trace.pairs + 1));
        if json {
            println!(
                "{{\"trace\":\"{}\",\"pairs\":{},\"off_ns_per_pair\":{off:.1},\"on_ns_per_pair\":{on:.1},\"on_over_off\":{:.3}}}",
                trace.name,
                trace.pairs,
                on / off
            );
        } else {
            println!(
                "{:<9} {:>8} {:>16.1} {:>15.1} {:>7.2}x",
                trace.name,
                trace.pairs,
                off,
                on,
                on / off
            );
        }
    }
    context_bench(json);
}
