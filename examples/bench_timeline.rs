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
//! ```
//!
//! Traces (fixed seed), the shapes of the arena's own benchmark: `random` — log-uniform sizes
//! from 256 B to 64 MiB over 4096 slots, about half live; `training` — a 48-layer training
//! step (weights live, activations kept for backward, short-lived temporaries); `small` —
//! 1 KiB allocations over 65 536 slots. The timeline
//! ring holds [`RING_EVENTS`] events, far fewer than a trace makes, so the measurement includes
//! the steady state of a full ring that drops its oldest events.

use gpu_arena::arena::{AllocationId, Arena, ArenaOptions, RegionId, RegionSource};
use gpu_arena::profile::Timeline;
use std::sync::Arc;
use std::time::Instant;

/// One region this large: no trace comes near it, so the arena never grows.
const SPACE_BYTES: u64 = 64 << 30;
/// Replays per configuration; the median is reported. Off and on alternate, so drifts in the
/// machine's speed hit both alike.
const REPEATS: usize = 9;
/// Ring size of the timeline under test (the default capacity is larger; a smaller ring fills
/// sooner, so the steady state of dropping events is what gets measured).
const RING_EVENTS: usize = (1 << 16) - 1;
/// Fixed seed, so runs are comparable.
const SEED: u64 = 0x5EED_A110C;

/// splitmix64 (Steele, Lea and Flood 2014).
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// A size rounded to the arena's 256-byte granule.
fn granule(bytes: f64) -> u64 {
    ((bytes / 256.0).round() as u64).max(1) * 256
}

#[derive(Clone, Copy)]
enum Op {
    Alloc { slot: u32, size: u64 },
    Free { slot: u32 },
}

struct Trace {
    name: &'static str,
    ops: Vec<Op>,
    slots: usize,
    pairs: usize,
}

/// Hands out slots for a scripted trace, reusing freed ones.
#[derive(Default)]
struct Builder {
    ops: Vec<Op>,
    next: u32,
    free: Vec<u32>,
}

impl Builder {
    fn alloc(&mut self, size: u64) -> u32 {
        let slot = self.free.pop().unwrap_or_else(|| {
            self.next += 1;
            self.next - 1
        });
        self.ops.push(Op::Alloc { slot, size });
        slot
    }

    fn free(&mut self, slot: u32) {
        self.ops.push(Op::Free { slot });
        self.free.push(slot);
    }

    fn finish(self, name: &'static str) -> Trace {
        let pairs = self
            .ops
            .iter()
            .filter(|o| matches!(o, Op::Alloc { .. }))
            .count();
        Trace {
            name,
            slots: self.next as usize,
            pairs,
            ops: self.ops,
        }
    }
}

/// Random alloc/free over `slots` slots (about half live), sizes from `size`.
fn churn(name: &'static str, slots: usize, pairs: usize, size: impl Fn(&mut Rng) -> u64) -> Trace {
    let mut rng = Rng(SEED);
    let mut b = Builder::default();
    let mut live: Vec<Option<u32>> = vec![None; slots];
    let mut allocs = 0;
    while allocs < pairs {
        let i = rng.below(slots as u64) as usize;
        match live[i].take() {
            Some(slot) => b.free(slot),
            None => {
                let bytes = size(&mut rng);
                live[i] = Some(b.alloc(bytes));
                allocs += 1;
            }
        }
    }
    for slot in live.into_iter().flatten() {
        b.free(slot);
    }
    b.finish(name)
}

/// Log-uniform sizes from 256 B to 64 MiB over 4096 slots.
fn random_trace() -> Trace {
    churn("random", 4096, 200_000, |rng| {
        granule((8.0 + 18.0 * rng.unit()).exp2())
    })
}

/// Many 1 KiB allocations over 65 536 slots: the cheapest operations, so the timeline's
/// share is largest here.
fn small_trace() -> Trace {
    churn("small", 65_536, 400_000, |_| 1024)
}

fn training_trace() -> Trace {
    const LAYERS: usize = 48;
    const STEPS: usize = 100;
    const MIB: f64 = (1 << 20) as f64;
    let mut rng = Rng(SEED);
    let weights: Vec<u64> = (0..LAYERS)
        .map(|_| granule(MIB * [0.25, 1.0, 2.0, 4.0, 9.0][rng.below(5) as usize]))
        .collect();
    let act_mib: Vec<f64> = (0..LAYERS)
        .map(|_| [4.0, 8.0, 12.0, 24.0, 48.0][rng.below(5) as usize])
        .collect();
    let mut b = Builder::default();
    let weight_slots: Vec<u32> = weights.iter().map(|&w| b.alloc(w)).collect();
    for _ in 0..STEPS {
        let scale = 0.6 + 0.4 * rng.unit();
        let act: Vec<u64> = act_mib.iter().map(|&a| granule(a * MIB * scale)).collect();
        let mut kept = Vec::new();
        for &a in &act {
            let workspace = b.alloc(granule(a as f64 * (0.5 + rng.unit())));
            kept.push(b.alloc(a));
            let scratch = b.alloc(granule(a as f64 * 0.25));
            b.free(scratch);
            b.free(workspace);
        }
        let mut grad = b.alloc(act[LAYERS - 1]);
        let mut grads = Vec::new();
        for layer in (0..LAYERS).rev() {
            let scratch = b.alloc(granule(act[layer] as f64 * 0.5));
            grads.push(b.alloc(weights[layer]));
            let grad_in = b.alloc(act[layer.saturating_sub(1)]);
            b.free(scratch);
            b.free(grad);
            b.free(kept[layer]);
            grad = grad_in;
        }
        b.free(grad);
        for (layer, g) in grads.into_iter().rev().enumerate() {
            let update = b.alloc(weights[layer]);
            b.free(update);
            b.free(g);
        }
    }
    for slot in weight_slots {
        b.free(slot);
    }
    b.finish("training")
}

struct OneRegion;

impl RegionSource for OneRegion {
    fn create_region(&mut self, _size: u64) -> Result<RegionId, String> {
        Ok(RegionId(0))
    }
    fn release_region(&mut self, _region: RegionId) {}
}

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
    let json = std::env::args().any(|a| a == "--json");
    if !json {
        println!(
            "{:<9} {:>8} {:>16} {:>15} {:>8}",
            "trace", "pairs", "off ns/pair", "on ns/pair", "on/off"
        );
    }
    for trace in [random_trace(), training_trace(), small_trace()] {
        let timeline = Arc::new(Timeline::new(RING_EVENTS));
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
