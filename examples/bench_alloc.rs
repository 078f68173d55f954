//! Replays allocation traces through gpu-arena's arena and, side by side in the same run, through
//! the `offset-allocator` crate (TLSF-like, O(1), approximate best fit) and the `range-alloc`
//! crate (wgpu's sorted free list, exact best fit, O(n)).
//!
//! ```text
//! cargo run --release --example bench_alloc            # table with ratios vs offset-allocator
//! cargo run --release --example bench_alloc -- --json  # one JSON object per line
//! cargo run --release --example bench_alloc -- --help  # every flag
//! ```
//!
//! For each trace and allocator it reports the median nanoseconds per alloc+free pair and the
//! address-space high-water mark (the highest offset end ever handed out) over the peak of live
//! bytes: 1.0 means no memory was lost to fragmentation.
//!
//! `benches/alloc.rs` includes this file, so the criterion bench replays the very same traces.

use std::ops::Range;
use std::time::Instant;

use gpu_arena::arena::{Arena, ArenaOptions, RegionId, RegionRefusal, RegionSource};
use lexopt::prelude::*;

// Public so that `bench_timeline`, which includes this file, reads its flags with it too.
#[path = "flags/mod.rs"]
pub mod flags;

const USAGE: &str = "usage: bench_alloc [--json] [--trace NAME] [--allocator NAME] [--scale]

Replays allocation traces through gpu-arena's arena, offset-allocator and range-alloc.
  --json              one JSON object per trace and allocator instead of a table
  --trace NAME        only this trace: random, training or small
  --allocator NAME    only this allocator (for a profiler): gpu-arena, offset-allocator,
                      range-alloc or bump (the replay loop alone)
  --scale             the cost per operation as live chunks grow to a million, instead of
                      the traces (with --json, one object per point)
  -h, --help          this text
BENCH_ALLOC_REPEATS=N sets the replays per allocator and trace (1 to 1000, default 7).";

/// The address space every allocator gets: one region (or range) this large, far above the
/// peak of any trace, so no allocator ever runs out.
pub const SPACE_BYTES: u64 = 64 << 30;

/// offset-allocator counts in `u32` units; at 256 bytes per unit it can address 1 TiB, which
/// covers [`SPACE_BYTES`]. Every trace size is a multiple of 256 (see [`granule_size`]), so the
/// scaling costs it nothing: it is the same granularity gpu-arena rounds to.
pub const OFFSET_ALLOCATOR_UNIT: u64 = 256;

/// Replays per allocator and trace; the median is reported.
pub const REPEATS: usize = 7;

/// The most replays `BENCH_ALLOC_REPEATS` may ask for.
const MAX_REPEATS: usize = 1000;

/// Replays per allocator and trace: [`REPEATS`], or `BENCH_ALLOC_REPEATS` from the
/// environment (1 under a simulator such as cachegrind). A value that is not a count from 1
/// to [`MAX_REPEATS`] ends the program with a message and status 2, before anything is timed.
pub fn repeats() -> usize {
    let Ok(text) = std::env::var("BENCH_ALLOC_REPEATS") else {
        return REPEATS;
    };
    match text.parse() {
        Ok(n) if (1..=MAX_REPEATS).contains(&n) => n,
        _ => {
            eprintln!(
                "BENCH_ALLOC_REPEATS={text:?}: give a number of replays from 1 to {MAX_REPEATS}"
            );
            std::process::exit(2)
        }
    }
}

/// Fixed seed of every trace, so runs are comparable.
pub const SEED: u64 = 0x5EED_A110C;

/// The splitmix64 generator (Steele, Lea and Flood 2014): tiny, fast and good enough to shape
/// traces, with no dependency.
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// Rounds a trace size to 256 bytes so every allocator sees identical, already-aligned sizes
/// and none is charged for another's rounding rule.
pub fn granule_size(bytes: f64) -> u64 {
    ((bytes / 256.0).round() as u64).max(1) * 256
}

/// One step of a trace. Slots name the live buffers.
#[derive(Clone, Copy, Debug)]
pub enum Op {
    /// Allocate `size` bytes into `slot`.
    Alloc {
        /// Buffer slot.
        slot: u32,
        /// Bytes, a multiple of 256.
        size: u64,
    },
    /// Free the buffer in `slot`.
    Free {
        /// Buffer slot.
        slot: u32,
    },
}

/// A named sequence of allocations and frees; every allocation is freed by the end.
pub struct Trace {
    /// `random`, `training` or `small`.
    pub name: &'static str,
    /// The operations.
    pub ops: Vec<Op>,
    /// Number of slots used.
    pub slots: usize,
    /// Alloc+free pairs (= allocations).
    pub pairs: usize,
    /// The most bytes live at once.
    pub peak_live: u64,
}

impl Trace {
    fn new(name: &'static str, ops: Vec<Op>, slots: usize) -> Trace {
        let mut sizes = vec![0u64; slots];
        let (mut live, mut peak_live, mut pairs) = (0u64, 0u64, 0usize);
        for op in &ops {
            match *op {
                Op::Alloc { slot, size } => {
                    sizes[slot as usize] = size;
                    live += size;
                    peak_live = peak_live.max(live);
                    pairs += 1;
                }
                Op::Free { slot } => live -= sizes[slot as usize],
            }
        }
        assert_eq!(live, 0, "trace {name} must free everything");
        Trace {
            name,
            ops,
            slots,
            pairs,
            peak_live,
        }
    }
}

/// Random alloc/free over a pool of slots: each step picks a slot and allocates into it if it
/// is empty or frees it if not, so about half the slots are live. Sizes are log-uniform.
fn slot_churn(
    name: &'static str,
    slots: usize,
    pairs: usize,
    mut size: impl FnMut(&mut SplitMix64) -> u64,
) -> Trace {
    let mut rng = SplitMix64::new(SEED);
    let mut live = vec![false; slots];
    let mut ops = Vec::with_capacity(2 * pairs + slots);
    let mut allocs = 0;
    while allocs < pairs {
        let slot = rng.below(slots as u64) as u32;
        if live[slot as usize] {
            ops.push(Op::Free { slot });
        } else {
            ops.push(Op::Alloc {
                slot,
                size: size(&mut rng),
            });
            allocs += 1;
        }
        live[slot as usize] = !live[slot as usize];
    }
    for (slot, &is_live) in live.iter().enumerate() {
        if is_live {
            ops.push(Op::Free { slot: slot as u32 });
        }
    }
    Trace::new(name, ops, slots)
}

/// Log-uniform sizes from 256 B to 64 MiB, alloc/free interleaved, about half the slots live.
pub fn random_trace() -> Trace {
    const SLOTS: usize = 4096;
    const PAIRS: usize = 200_000;
    const MIN_LOG2: f64 = 8.0; // 256 B
    const MAX_LOG2: f64 = 26.0; // 64 MiB
    slot_churn("random", SLOTS, PAIRS, |rng| {
        granule_size((MIN_LOG2 + (MAX_LOG2 - MIN_LOG2) * rng.next_f64()).exp2())
    })
}

/// Many small allocations of one size (1 KiB), alloc/free interleaved.
pub fn small_trace() -> Trace {
    const SLOTS: usize = 65_536;
    const PAIRS: usize = 400_000;
    const SIZE: u64 = 1024;
    slot_churn("small", SLOTS, PAIRS, |_| SIZE)
}

/// Shaped like deep-network training steps: weights live throughout; the forward pass allocates
/// each layer's activation (kept for backward) with short-lived temporaries; the backward pass
/// walks the layers in reverse, allocating the incoming gradient and the weight gradient and
/// freeing the layer's activation and the outgoing gradient; the optimizer step frees the
/// weight gradients. Sequence lengths vary per step, so activation sizes do too.
pub fn training_trace() -> Trace {
    const LAYERS: usize = 48;
    const STEPS: usize = 100;
    const MIB: f64 = (1 << 20) as f64;
    let mut rng = SplitMix64::new(SEED);
    let weights: Vec<u64> = (0..LAYERS)
        .map(|_| granule_size(MIB * [0.25, 1.0, 2.0, 4.0, 9.0][rng.below(5) as usize]))
        .collect();
    let activation_mib: Vec<f64> = (0..LAYERS)
        .map(|_| [4.0, 8.0, 12.0, 24.0, 48.0][rng.below(5) as usize])
        .collect();

    let mut t = TraceBuilder::default();
    let weight_slots: Vec<u32> = weights.iter().map(|&w| t.alloc(w)).collect();
    for _ in 0..STEPS {
        let sequence_scale = 0.6 + 0.4 * rng.next_f64();
        let act: Vec<u64> = activation_mib
            .iter()
            .map(|&a| granule_size(a * MIB * sequence_scale))
            .collect();
        // Forward.
        let mut activations = Vec::with_capacity(LAYERS);
        for &a in &act {
            let workspace = t.alloc(granule_size(a as f64 * (0.5 + rng.next_f64())));
            activations.push(t.alloc(a));
            let scratch = t.alloc(granule_size(a as f64 * 0.25));
            t.free(scratch);
            t.free(workspace);
        }
        // Backward.
        let mut grad_out = t.alloc(act[LAYERS - 1]);
        let mut weight_grads = Vec::with_capacity(LAYERS);
        for layer in (0..LAYERS).rev() {
            let scratch = t.alloc(granule_size(act[layer] as f64 * 0.5));
            weight_grads.push(t.alloc(weights[layer]));
            let grad_in = t.alloc(act[layer.saturating_sub(1)]);
            t.free(scratch);
            t.free(grad_out);
            t.free(activations[layer]);
            grad_out = grad_in;
        }
        t.free(grad_out);
        // Optimizer step: one temporary per layer, then the weight gradients die.
        for (layer, grad) in weight_grads.into_iter().rev().enumerate() {
            let update = t.alloc(weights[layer]);
            t.free(update);
            t.free(grad);
        }
    }
    for slot in weight_slots {
        t.free(slot);
    }
    Trace::new("training", t.ops, t.next_slot as usize)
}

/// Hands out slot numbers for a scripted trace, reusing freed ones.
#[derive(Default)]
struct TraceBuilder {
    ops: Vec<Op>,
    next_slot: u32,
    free_slots: Vec<u32>,
}

impl TraceBuilder {
    fn alloc(&mut self, size: u64) -> u32 {
        let slot = self.free_slots.pop().unwrap_or_else(|| {
            self.next_slot += 1;
            self.next_slot - 1
        });
        self.ops.push(Op::Alloc { slot, size });
        slot
    }

    fn free(&mut self, slot: u32) {
        self.ops.push(Op::Free { slot });
        self.free_slots.push(slot);
    }
}

/// The names of [`traces`], in report order.
pub const TRACE_NAMES: [&str; 3] = ["random", "training", "small"];

/// The three traces, in report order.
pub fn traces() -> Vec<Trace> {
    let traces = vec![random_trace(), training_trace(), small_trace()];
    debug_assert!(traces.iter().map(|t| t.name).eq(TRACE_NAMES));
    traces
}

/// What the replay needs from an allocator.
pub trait Subject {
    /// What `free` needs back. The replay keeps one per slot, without an `Option` around it,
    /// so every allocator's handle costs its own size and no more.
    type Handle: Default;
    /// Name in reports.
    const NAME: &'static str;
    /// An allocator over `space` bytes that will see at most `slots` live allocations.
    fn new(space: u64, slots: usize) -> Self;
    /// Allocates `size` bytes (a multiple of 256); the handle and the byte offset.
    fn alloc(&mut self, size: u64) -> Option<(Self::Handle, u64)>;
    /// Frees an allocation.
    fn free(&mut self, handle: Self::Handle);
}

/// The single region gpu-arena carves, standing in for a GPU buffer.
pub struct OneRegion;

impl RegionSource for OneRegion {
    fn create_region(&mut self, _size: u64) -> Result<RegionId, RegionRefusal> {
        Ok(RegionId(0))
    }
    fn release_region(&mut self, _region: RegionId) {}
}

/// gpu-arena's allocation id, with 0 (never a valid id) as the empty default.
pub struct ArenaId(gpu_arena::arena::AllocationId);

impl Default for ArenaId {
    fn default() -> Self {
        ArenaId(gpu_arena::arena::AllocationId(0))
    }
}

/// gpu-arena, preallocated over one region of the whole space.
pub struct GpuArena {
    arena: Arena,
    source: OneRegion,
}

impl Subject for GpuArena {
    // `AllocationId` has no spare bit pattern, so `Option` would double it; the id is never 0
    // (generations start at 1), so 0 stands for an empty slot.
    type Handle = ArenaId;
    const NAME: &'static str = "gpu-arena";

    fn new(space: u64, _slots: usize) -> Self {
        let mut arena = Arena::new(ArenaOptions {
            max_region_bytes: space,
            ..ArenaOptions::preallocated(space)
        });
        let mut source = OneRegion;
        arena.reserve(&mut source).expect("one region");
        GpuArena { arena, source }
    }

    fn alloc(&mut self, size: u64) -> Option<(Self::Handle, u64)> {
        let a = self.arena.allocate(size, 0, None, &mut self.source).ok()?;
        Some((ArenaId(a.id), a.offset))
    }

    fn free(&mut self, handle: Self::Handle) {
        self.arena
            .free(handle.0, None, &mut self.source)
            .expect("trace frees live allocations");
    }
}

/// The `offset-allocator` crate in 256-byte units.
pub struct OffsetAllocator(offset_allocator::Allocator);

/// offset-allocator's allocation; `Option` costs nothing here (it has a spare bit pattern).
#[derive(Default)]
pub struct OffsetHandle(Option<offset_allocator::Allocation>);

impl Subject for OffsetAllocator {
    type Handle = OffsetHandle;
    const NAME: &'static str = "offset-allocator";

    fn new(space: u64, slots: usize) -> Self {
        let units = u32::try_from(space / OFFSET_ALLOCATOR_UNIT).expect("space fits in u32 units");
        // Nodes: one per live allocation plus at most one free node between each pair.
        let max_allocs = u32::try_from(2 * slots + 16).expect("node count fits");
        OffsetAllocator(offset_allocator::Allocator::with_max_allocs(
            units, max_allocs,
        ))
    }

    fn alloc(&mut self, size: u64) -> Option<(Self::Handle, u64)> {
        let units = u32::try_from(size / OFFSET_ALLOCATOR_UNIT).ok()?;
        let a = self.0.allocate(units)?;
        Some((
            OffsetHandle(Some(a)),
            u64::from(a.offset) * OFFSET_ALLOCATOR_UNIT,
        ))
    }

    fn free(&mut self, handle: Self::Handle) {
        if let Some(a) = handle.0 {
            self.0.free(a);
        }
    }
}

/// The `range-alloc` crate over bytes.
pub struct RangeAlloc(range_alloc::RangeAllocator<u64>);

impl Subject for RangeAlloc {
    type Handle = Range<u64>;
    const NAME: &'static str = "range-alloc";

    fn new(space: u64, _slots: usize) -> Self {
        RangeAlloc(range_alloc::RangeAllocator::new(0..space))
    }

    fn alloc(&mut self, size: u64) -> Option<(Self::Handle, u64)> {
        let range = self.0.allocate_range(size).ok()?;
        let start = range.start;
        Some((range, start))
    }

    fn free(&mut self, handle: Self::Handle) {
        self.0.free_range(handle);
    }
}

/// A bump pointer that never reuses memory: not a contender, but replaying through it measures
/// the replay loop itself (`--allocator bump`), to subtract when profiling.
pub struct Bump(u64);

impl Subject for Bump {
    type Handle = ();
    const NAME: &'static str = "bump";

    fn new(_space: u64, _slots: usize) -> Self {
        Bump(0)
    }

    fn alloc(&mut self, size: u64) -> Option<(Self::Handle, u64)> {
        self.0 += size;
        Some(((), self.0 - size))
    }

    fn free(&mut self, _handle: Self::Handle) {}
}

/// Replays `trace` on `subject`: the high-water mark, or the index of the operation that
/// failed. Untimed, for harnesses that time it themselves (criterion).
pub fn run<S: Subject>(subject: &mut S, trace: &Trace) -> Result<u64, usize> {
    let mut handles: Vec<S::Handle> = (0..trace.slots).map(|_| S::Handle::default()).collect();
    let mut high_water = 0u64;
    for (index, op) in trace.ops.iter().enumerate() {
        match *op {
            Op::Alloc { slot, size } => {
                let (handle, offset) = subject.alloc(size).ok_or(index)?;
                high_water = high_water.max(offset + size);
                handles[slot as usize] = handle;
            }
            Op::Free { slot } => subject.free(std::mem::take(&mut handles[slot as usize])),
        }
    }
    Ok(high_water)
}

/// Replays `trace` on a fresh `S`: the elapsed nanoseconds and the high-water mark, or the
/// index of the operation that failed.
pub fn replay<S: Subject>(trace: &Trace) -> Result<(u128, u64), usize> {
    let mut subject = S::new(SPACE_BYTES, trace.slots);
    let start = Instant::now();
    let high_water = run(&mut subject, trace)?;
    let elapsed = start.elapsed().as_nanos();
    std::hint::black_box(&subject);
    Ok((elapsed, high_water))
}

/// One line of the report.
#[derive(serde::Serialize)]
pub struct Measurement {
    /// Trace name.
    pub trace: &'static str,
    /// Allocator name.
    pub allocator: &'static str,
    /// Median nanoseconds per alloc+free pair.
    pub ns_per_op: f64,
    /// Highest offset end handed out over the peak of live bytes.
    pub high_water_over_peak_live: f64,
}

/// One replay of `trace` on `S`: nanoseconds per pair and the high-water mark.
fn replay_once<S: Subject>(trace: &Trace) -> Result<(f64, u64), String> {
    let (ns, high_water) = replay::<S>(trace).map_err(|index| {
        format!(
            "{} failed on trace {} at operation {index}",
            S::NAME,
            trace.name
        )
    })?;
    Ok((ns as f64 / trace.pairs as f64, high_water))
}

/// Replays `trace` [`repeats`] times on each allocator, taking turns so that a burst of load
/// on the machine hits all of them alike, and summarises each (gpu-arena, offset-allocator,
/// range-alloc).
pub fn measure_all(trace: &Trace) -> Result<[Measurement; 3], String> {
    let mut times = [const { Vec::new() }; 3];
    let mut high_water = [0u64; 3];
    for _ in 0..repeats() {
        for (i, run) in [
            replay_once::<GpuArena> as fn(&Trace) -> Result<(f64, u64), String>,
            replay_once::<OffsetAllocator>,
            replay_once::<RangeAlloc>,
        ]
        .iter()
        .enumerate()
        {
            let (ns, hw) = run(trace)?;
            times[i].push(ns);
            high_water[i] = hw;
        }
    }
    let names = [GpuArena::NAME, OffsetAllocator::NAME, RangeAlloc::NAME];
    Ok(std::array::from_fn(|i| {
        times[i].sort_by(f64::total_cmp);
        Measurement {
            trace: trace.name,
            allocator: names[i],
            ns_per_op: times[i][times[i].len() / 2],
            high_water_over_peak_live: high_water[i] as f64 / trace.peak_live as f64,
        }
    }))
}

/// Replays `trace` [`repeats`] times on `S` alone and summarises.
pub fn measure<S: Subject>(trace: &Trace) -> Result<Measurement, String> {
    let mut times = Vec::with_capacity(repeats());
    let mut high_water = 0;
    for _ in 0..repeats() {
        let (ns, hw) = replay_once::<S>(trace)?;
        times.push(ns);
        high_water = hw;
    }
    times.sort_by(f64::total_cmp);
    Ok(Measurement {
        trace: trace.name,
        allocator: S::NAME,
        ns_per_op: times[times.len() / 2],
        high_water_over_peak_live: high_water as f64 / trace.peak_live as f64,
    })
}

/// Live chunks at which `--scale` measures.
pub const SCALE_LIVE: [usize; 4] = [1_000, 10_000, 100_000, 1_000_000];
/// Timed free+alloc pairs per scale point.
pub const SCALE_PAIRS: usize = 200_000;

/// Steady state at `live` live allocations of log-uniform sizes from 256 B to 64 KiB (so a
/// million fit the address space): the median ns per free+alloc pair on `S`. Building up the
/// live set is not timed.
pub fn scale_point<S: Subject>(live: usize) -> f64 {
    let mut rng = SplitMix64::new(SEED);
    let size = |rng: &mut SplitMix64| granule_size((8.0 + 8.0 * rng.next_f64()).exp2());
    let mut times = Vec::new();
    for _ in 0..repeats().min(3) {
        let mut subject = S::new(SPACE_BYTES, live);
        let mut handles: Vec<S::Handle> = (0..live)
            .map(|_| subject.alloc(size(&mut rng)).expect("fits").0)
            .collect();
        let victims: Vec<(usize, u64)> = (0..SCALE_PAIRS)
            .map(|_| (rng.below(live as u64) as usize, size(&mut rng)))
            .collect();
        let start = Instant::now();
        for &(victim, bytes) in &victims {
            subject.free(std::mem::take(&mut handles[victim]));
            handles[victim] = subject.alloc(bytes).expect("fits").0;
        }
        times.push(start.elapsed().as_nanos() as f64 / SCALE_PAIRS as f64);
        std::hint::black_box(&subject);
    }
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// What the command line asks for.
#[derive(Default)]
struct Options {
    json: bool,
    scale: bool,
    trace: Option<&'static str>,
    allocator: Option<&'static str>,
}

fn options() -> Options {
    flags::parse_or_exit(USAGE, |parser| {
        let mut options = Options::default();
        while let Some(arg) = parser.next()? {
            match arg {
                Long("json") => options.json = true,
                Long("scale") => options.scale = true,
                Long("trace") => {
                    options.trace = Some(flags::one_of(parser, "trace", &TRACE_NAMES)?)
                }
                Long("allocator") => {
                    let names = [
                        GpuArena::NAME,
                        OffsetAllocator::NAME,
                        RangeAlloc::NAME,
                        Bump::NAME,
                    ];
                    options.allocator = Some(flags::one_of(parser, "allocator", &names)?);
                }
                Short('h') | Long("help") => return Ok(None),
                _ => return Err(arg.unexpected()),
            }
        }
        Ok(Some(options))
    })
}

#[allow(dead_code)]
fn main() -> Result<(), String> {
    let options = options();
    let json = options.json;
    repeats();
    // `--scale` checks that the cost per operation holds as live chunks grow to a million.
    if options.scale {
        if !json {
            println!(
                "{:>10} {:>12} {:>18} {:>8}",
                "live", "gpu-arena", "offset-allocator", "ratio"
            );
        }
        for live in SCALE_LIVE {
            let arena = scale_point::<GpuArena>(live);
            let peer = scale_point::<OffsetAllocator>(live);
            match json {
                true => println!(
                    "{}",
                    serde_json::json!({
                        "case": "scale", "live": live, "gpu_arena_ns": arena,
                        "offset_allocator_ns": peer, "ratio": arena / peer,
                    })
                ),
                false => println!(
                    "{live:>10} {arena:>9.1} ns {peer:>15.1} ns {:>7.2}x",
                    arena / peer
                ),
            }
        }
        return Ok(());
    }
    // `--trace NAME` limits the run to one trace (handy under a profiler).
    for trace in traces() {
        if options.trace.is_some_and(|name| name != trace.name) {
            continue;
        }
        // `--allocator NAME` replays on one allocator only (for profiling it alone).
        if let Some(name) = options.allocator {
            let row = match name {
                OffsetAllocator::NAME => measure::<OffsetAllocator>(&trace)?,
                RangeAlloc::NAME => measure::<RangeAlloc>(&trace)?,
                Bump::NAME => measure::<Bump>(&trace)?,
                _ => measure::<GpuArena>(&trace)?,
            };
            match json {
                true => println!(
                    "{}",
                    serde_json::to_string(&row).map_err(|e| e.to_string())?
                ),
                false => println!(
                    "{} {}: {:.1} ns/op",
                    row.trace, row.allocator, row.ns_per_op
                ),
            }
            continue;
        }
        let rows = measure_all(&trace)?;
        if json {
            for row in &rows {
                println!("{}", serde_json::to_string(row).map_err(|e| e.to_string())?);
            }
            continue;
        }
        println!(
            "\ntrace {:<9} {} pairs, peak live {:.1} MiB",
            trace.name,
            trace.pairs,
            trace.peak_live as f64 / (1 << 20) as f64
        );
        println!(
            "  {:<17} {:>9} {:>8}   {:>14} {:>8}",
            "allocator", "ns/op", "vs o-a", "hw/peak-live", "vs o-a"
        );
        let peer = &rows[1];
        for row in &rows {
            println!(
                "  {:<17} {:>9.1} {:>7.2}x   {:>14.3} {:>7.3}x",
                row.allocator,
                row.ns_per_op,
                row.ns_per_op / peer.ns_per_op,
                row.high_water_over_peak_live,
                row.high_water_over_peak_live / peer.high_water_over_peak_live
            );
        }
    }
    Ok(())
}
