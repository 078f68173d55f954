//! Model-based property tests of the arena: random sequences of allocations, frees (immediate
//! and frontier-gated), frontier advances, region releases and peak resets, in every mode, with
//! a fake region source that can refuse beyond a cap. After every step the arena's snapshot and
//! statistics are checked against a simple model and against the allocator's invariants; before
//! every allocation the best-fit choice is computed from the snapshot and compared.

use std::collections::{BTreeMap, BTreeSet};

use gpu_arena::arena::{
    AllocationId, Arena, ArenaError, ArenaMode, ArenaOptions, ArenaSnapshot, ChunkState, OomCause,
    RegionId, RegionRefusal, RegionSource, ALLOCATION_ALIGNMENT,
};
use proptest::prelude::*;

/// Sequences per mode. Four modes run in parallel on two cores; the whole file stays well
/// under a minute in a debug build.
const CASES_PER_MODE: u32 = 1500;
/// Operations per sequence.
const OPS: std::ops::Range<usize> = 60..260;

/// A device that hands out numbered regions until `cap` bytes are out.
#[derive(Debug)]
struct FakeSource {
    next_id: u64,
    live: BTreeMap<RegionId, u64>,
    cap: u64,
    created: u64,
}

impl FakeSource {
    fn new(cap: u64) -> FakeSource {
        FakeSource {
            next_id: 100,
            live: BTreeMap::new(),
            cap,
            created: 0,
        }
    }

    fn total(&self) -> u64 {
        self.live.values().sum()
    }
}

impl RegionSource for FakeSource {
    fn create_region(&mut self, size: u64) -> Result<RegionId, RegionRefusal> {
        assert!(
            size > 0 && size.is_multiple_of(ALLOCATION_ALIGNMENT),
            "bad region size {size}"
        );
        if self.total() + size > self.cap {
            return Err(RegionRefusal::out_of_memory(format!(
                "fake device full ({} of {} bytes used)",
                self.total(),
                self.cap
            )));
        }
        self.next_id += 1;
        self.created += 1;
        let id = RegionId(self.next_id);
        self.live.insert(id, size);
        Ok(id)
    }

    fn release_region(&mut self, region: RegionId) {
        assert!(
            self.live.remove(&region).is_some(),
            "released unknown region {region:?}"
        );
    }
}

#[derive(Clone, Copy, Debug)]
enum Setup {
    Preallocated,
    Growing,
    PreallocatedThenGrowing,
    Platform,
}

#[derive(Clone, Debug)]
struct Config {
    options: ArenaOptions,
    source_cap: u64,
}

#[derive(Clone, Debug)]
enum Op {
    Alloc {
        size: u64,
        align: u64,
        labelled: bool,
    },
    Free {
        pick: usize,
        /// Frontier offset from the current queue position; `None` frees at once.
        frontier: Option<u64>,
    },
    DoubleFree {
        pick: usize,
    },
    Advance {
        by: u64,
    },
    ReleaseFree,
    ResetPeaks,
}

const KIB: u64 = 1024;

fn config(setup: Setup) -> impl Strategy<Value = Config> {
    // Regions of 16 KiB to 1 MiB keep sequences short while still filling up.
    let max_region = (6u32..=12).prop_map(|log2_kib| (1u64 << log2_kib) * KIB);
    (
        max_region,
        1u64..=4,
        1u64..=8,
        2u64..=9,
        any::<bool>(),
        0u64..4,
    )
        .prop_map(
            move |(max_region, regions, limit_parts, initial_log2_kib, capped, ragged)| {
                // A reserve that is not a multiple of the region size makes a smaller tail region.
                let reserve = regions * max_region - ragged * 4 * KIB;
                let limit = reserve + limit_parts * max_region / 2;
                let (mode, reserve, limit) = match setup {
                    Setup::Preallocated => (ArenaMode::Bfc, reserve, reserve),
                    Setup::Growing => (ArenaMode::Bfc, 0, limit),
                    Setup::PreallocatedThenGrowing => (ArenaMode::Bfc, reserve, limit),
                    Setup::Platform => (ArenaMode::Platform, 0, limit),
                };
                // Sometimes the device runs out before the limit.
                let source_cap = if capped {
                    reserve + (limit - reserve) / 2
                } else {
                    u64::MAX
                };
                Config {
                    options: ArenaOptions {
                        mode,
                        reserve_bytes: reserve,
                        limit_bytes: limit,
                        max_region_bytes: max_region,
                        initial_growth_region_bytes: (1u64 << initial_log2_kib) * KIB,
                    },
                    source_cap,
                }
            },
        )
}

fn op() -> impl Strategy<Value = Op> {
    let size = prop_oneof![
        1 => Just(0u64),
        3 => 1u64..=4 * KIB,
        4 => (0u32..=21).prop_flat_map(|log2| (1u64 << log2)..=(2u64 << log2)),
    ];
    let align = prop_oneof![
        8 => Just(0u64),
        1 => Just(256u64),
        2 => (9u32..=15).prop_map(|log2| 1u64 << log2),
    ];
    prop_oneof![
        10 => (size, align, any::<bool>())
            .prop_map(|(size, align, labelled)| Op::Alloc { size, align, labelled }),
        7 => (any::<usize>(), prop_oneof![2 => Just(None), 1 => (0u64..3).prop_map(Some)])
            .prop_map(|(pick, frontier)| Op::Free { pick, frontier }),
        1 => any::<usize>().prop_map(|pick| Op::DoubleFree { pick }),
        2 => (0u64..3).prop_map(|by| Op::Advance { by }),
        1 => Just(Op::ReleaseFree),
        1 => Just(Op::ResetPeaks),
    ]
}

#[derive(Clone, Debug)]
struct Live {
    id: AllocationId,
    region: RegionId,
    offset: u64,
    size: u64,
    requested: u64,
    align: u64,
    label: Option<String>,
}

/// What the arena should report, kept the simple way.
#[derive(Debug, Default)]
struct Model {
    live: Vec<Live>,
    pending: Vec<(Live, u64)>,
    freed: Vec<AllocationId>,
    num_allocs: u64,
    peak_in_use: u64,
    largest_alloc: u64,
    peak_reserved: u64,
    queue: u64,
    completed: Option<u64>,
    base_regions: BTreeSet<RegionId>,
}

impl Model {
    fn in_use(&self) -> u64 {
        self.live.iter().map(|l| l.size).sum()
    }
    fn pending_bytes(&self) -> u64 {
        self.pending.iter().map(|(l, _)| l.size).sum()
    }
}

fn rounded(size: u64) -> u64 {
    size.div_ceil(ALLOCATION_ALIGNMENT).max(1) * ALLOCATION_ALIGNMENT
}

fn align_up(value: u64, align: u64) -> u64 {
    value.div_ceil(align) * align
}

/// The chunk best fit must choose: the smallest free chunk that fits (with its alignment
/// gap), lowest address first, regions in snapshot (creation) order.
fn expected_fit(snapshot: &ArenaSnapshot, size: u64, align: u64) -> Option<(RegionId, u64)> {
    let mut best: Option<(u64, usize, u64, RegionId, u64)> = None;
    for (r, region) in snapshot.regions.iter().enumerate() {
        for chunk in &region.chunks {
            if chunk.state != ChunkState::Free {
                continue;
            }
            let start = align_up(chunk.offset, align);
            if start + size > chunk.offset + chunk.size {
                continue;
            }
            let candidate = (chunk.size, r, chunk.offset, region.id, start);
            if best.is_none_or(|b| (candidate.0, candidate.1, candidate.2) < (b.0, b.1, b.2)) {
                best = Some(candidate);
            }
        }
    }
    best.map(|(_, _, _, region, start)| (region, start))
}

/// Regions that are one free chunk.
fn wholly_free(snapshot: &ArenaSnapshot) -> BTreeMap<RegionId, u64> {
    snapshot
        .regions
        .iter()
        .filter(|r| r.chunks.len() == 1 && r.chunks[0].state == ChunkState::Free)
        .map(|r| (r.id, r.size))
        .collect()
}

/// Checks every invariant and every statistic against the model.
fn check(arena: &Arena, source: &FakeSource, model: &Model, limit: u64) {
    let snapshot = arena.snapshot();
    let stats = arena.stats();
    assert_eq!(snapshot.stats, stats);

    // Regions are exactly those the source has out.
    let regions: BTreeMap<RegionId, u64> =
        snapshot.regions.iter().map(|r| (r.id, r.size)).collect();
    assert_eq!(regions, source.live, "regions held vs regions created");
    assert_eq!(stats.num_regions, regions.len() as u64);

    let mut in_use = BTreeMap::new();
    let mut pending = BTreeMap::new();
    let (mut largest_free, mut total_free) = (0, 0);
    for region in &snapshot.regions {
        // Chunks tile the region exactly, aligned, with no two free chunks side by side.
        let mut offset = 0;
        let mut previous_free = false;
        for chunk in &region.chunks {
            assert_eq!(
                chunk.offset, offset,
                "chunks must tile region {:?}",
                region.id
            );
            assert!(chunk.size > 0 && chunk.size.is_multiple_of(ALLOCATION_ALIGNMENT));
            assert!(chunk.offset.is_multiple_of(ALLOCATION_ALIGNMENT));
            let free = chunk.state == ChunkState::Free;
            assert!(
                !(free && previous_free),
                "adjacent free chunks in {:?}",
                region.id
            );
            previous_free = free;
            offset += chunk.size;
            match chunk.state {
                ChunkState::Free => {
                    assert!(chunk.allocation.is_none() && chunk.label.is_none());
                    largest_free = largest_free.max(chunk.size);
                    total_free += chunk.size;
                }
                ChunkState::InUse => {
                    let id = chunk.allocation.expect("in-use chunk names its allocation");
                    in_use.insert(
                        id,
                        (
                            region.id,
                            chunk.offset,
                            chunk.size,
                            chunk.label.clone(),
                            chunk.requested,
                        ),
                    );
                }
                ChunkState::PendingFree => {
                    let id = chunk
                        .allocation
                        .expect("pending chunk names its allocation");
                    pending.insert(id, (region.id, chunk.offset, chunk.size, chunk.frontier));
                }
            }
        }
        assert_eq!(
            offset, region.size,
            "chunks must cover region {:?}",
            region.id
        );
    }

    let want_in_use: BTreeMap<_, _> = model
        .live
        .iter()
        .map(|l| {
            (
                l.id,
                (l.region, l.offset, l.size, l.label.clone(), l.requested),
            )
        })
        .collect();
    assert_eq!(in_use, want_in_use, "live allocations");
    for l in &model.live {
        assert_eq!(
            l.offset % l.align.max(ALLOCATION_ALIGNMENT),
            0,
            "alignment of {l:?}"
        );
        assert_eq!(
            arena.allocation(l.id).map(|a| (a.region, a.offset, a.size)),
            Some((l.region, l.offset, l.size))
        );
    }
    let want_pending: BTreeMap<_, _> = model
        .pending
        .iter()
        .map(|(l, f)| (l.id, (l.region, l.offset, l.size, Some(*f))))
        .collect();
    assert_eq!(pending, want_pending, "pending frees");
    for id in &model.freed {
        assert_eq!(arena.allocation(*id), None);
    }

    let reserved: u64 = source.live.values().sum();
    assert_eq!(stats.num_allocs, model.num_allocs);
    assert_eq!(stats.bytes_in_use, model.in_use());
    assert_eq!(stats.peak_bytes_in_use, model.peak_in_use);
    assert_eq!(stats.largest_alloc_size, model.largest_alloc);
    assert_eq!(stats.bytes_reserved, reserved);
    assert_eq!(stats.peak_bytes_reserved, model.peak_reserved);
    assert_eq!(stats.pool_bytes, Some(reserved));
    assert_eq!(stats.peak_pool_bytes, Some(model.peak_reserved));
    assert_eq!(stats.bytes_limit, Some(limit));
    assert_eq!(stats.bytes_reservable_limit, Some(limit));
    assert_eq!(stats.largest_free_block_bytes, largest_free);
    assert_eq!(arena.pending_free_bytes(), model.pending_bytes());
    assert_eq!(
        arena.pending_free_frontier(),
        model.pending.iter().map(|&(_, frontier)| frontier).max(),
        "the frontier that frees every pending chunk"
    );
    assert_eq!(
        total_free + stats.bytes_in_use + model.pending_bytes(),
        reserved
    );
    let fragmentation = if total_free == 0 {
        0.0
    } else {
        1.0 - largest_free as f64 / total_free as f64
    };
    assert!((stats.fragmentation - fragmentation).abs() < 1e-12);
    assert!(reserved <= limit, "reserved {reserved} over limit {limit}");
}

fn run(config: Config, ops: Vec<Op>) {
    let options = config.options.clone();
    let limit = options.limit_bytes;
    let mut source = FakeSource::new(config.source_cap);
    let mut arena = Arena::new(options.clone());
    let mut model = Model::default();

    arena
        .reserve(&mut source)
        .expect("the fake source covers the reserve");
    assert!(arena.is_reserved());
    model.base_regions = source.live.keys().copied().collect();
    model.peak_reserved = source.total();
    let expected_base = if options.mode == ArenaMode::Bfc {
        options.reserve_bytes
    } else {
        0
    };
    assert_eq!(source.total(), expected_base);
    check(&arena, &source, &model, limit);

    for op in ops {
        let before = arena.snapshot();
        match op {
            Op::Alloc {
                size,
                align,
                labelled,
            } => {
                let label = labelled.then(|| format!("t{}", model.num_allocs));
                let rounded = rounded(size);
                let want = match options.mode {
                    ArenaMode::Bfc => {
                        expected_fit(&before, rounded, align.max(ALLOCATION_ALIGNMENT))
                    }
                    ArenaMode::Platform => None,
                };
                let regions_before = source.live.clone();
                let created_before = source.created;
                let reserved_before = source.total();
                match arena.allocate(size, align, label.as_deref(), &mut source) {
                    Ok(a) => {
                        assert_eq!((a.size, a.requested), (rounded, size));
                        match want {
                            Some((region, offset)) => {
                                assert_eq!((a.region, a.offset), (region, offset), "best fit");
                                assert_eq!(source.created, created_before, "grew despite a fit");
                            }
                            None => {
                                // A new region, at offset 0, big enough but within bounds.
                                assert!(
                                    !regions_before.contains_key(&a.region),
                                    "no fit, so a new region"
                                );
                                assert_eq!(a.offset, 0);
                                let region_size = source.live[&a.region];
                                assert!(
                                    region_size >= rounded
                                        && region_size <= options.max_region_bytes
                                );
                                if options.mode == ArenaMode::Platform {
                                    assert_eq!(region_size, rounded);
                                }
                                // Regions given back on the way were wholly free growth regions.
                                let free_before = wholly_free(&before);
                                for (id, _) in regions_before
                                    .iter()
                                    .filter(|(id, _)| !source.live.contains_key(id))
                                {
                                    assert!(
                                        free_before.contains_key(id)
                                            && !model.base_regions.contains(id)
                                    );
                                }
                            }
                        }
                        model.num_allocs += 1;
                        model.largest_alloc = model.largest_alloc.max(rounded);
                        model.live.push(Live {
                            id: a.id,
                            region: a.region,
                            offset: a.offset,
                            size: a.size,
                            requested: size,
                            align,
                            label,
                        });
                        model.peak_in_use = model.peak_in_use.max(model.in_use());
                    }
                    Err(ArenaError::OutOfMemory(oom)) => {
                        assert_eq!(want, None, "failed although a free chunk fits");
                        assert_eq!((oom.requested, oom.rounded), (size, rounded));
                        let stats = arena.stats();
                        let total_free =
                            stats.bytes_reserved - stats.bytes_in_use - model.pending_bytes();
                        assert_eq!(oom.total_free, total_free);
                        assert_eq!(oom.largest_free_block, stats.largest_free_block_bytes);
                        assert_eq!(oom.pending_free_bytes, model.pending_bytes());
                        assert_eq!(oom.label, label);
                        if rounded > options.max_region_bytes {
                            assert_eq!(oom.cause, OomCause::LargerThanAnyRegion);
                        } else if total_free >= rounded && options.mode == ArenaMode::Bfc {
                            assert_eq!(oom.cause, OomCause::Fragmentation);
                            assert!(oom.to_string().contains("fragmented"), "{oom}");
                        } else {
                            // Growth was impossible: no room under the limit, or the source
                            // refused even the request's own size.
                            let room = limit - source.total();
                            let refused = source.total() + rounded > source.cap;
                            match &oom.cause {
                                OomCause::LimitReached => assert!(room < rounded),
                                OomCause::SourceExhausted(RegionRefusal::OutOfMemory {
                                    reason,
                                }) => assert!(refused && reason.contains("fake device full")),
                                cause => panic!("unexpected cause {cause:?}"),
                            }
                        }
                        // Failing may only have released wholly free growth regions.
                        let free_before = wholly_free(&before);
                        for id in regions_before
                            .keys()
                            .filter(|id| !source.live.contains_key(id))
                        {
                            assert!(
                                free_before.contains_key(id) && !model.base_regions.contains(id)
                            );
                        }
                        assert!(source.total() <= reserved_before);
                    }
                    Err(other) => panic!("unexpected error {other:?}"),
                }
            }
            Op::Free { pick, frontier } => {
                if model.live.is_empty() {
                    continue;
                }
                let live = model.live.swap_remove(pick % model.live.len());
                let frontier = frontier.map(|f| model.queue + f);
                arena
                    .free(live.id, frontier, &mut source)
                    .expect("freeing a live allocation");
                match frontier {
                    Some(f) if model.completed.is_none_or(|c| c < f) => {
                        model.pending.push((live, f))
                    }
                    _ => {
                        model.freed.push(live.id);
                        if options.mode == ArenaMode::Platform {
                            assert!(
                                !source.live.contains_key(&live.region),
                                "platform frees give the region back"
                            );
                        }
                    }
                }
            }
            Op::DoubleFree { pick } => {
                if model.freed.is_empty() {
                    continue;
                }
                let id = model.freed[pick % model.freed.len()];
                assert_eq!(
                    arena.free(id, None, &mut source),
                    Err(ArenaError::UnknownAllocation(id))
                );
            }
            Op::Advance { by } => {
                model.queue += by;
                arena.advance_frontier(model.queue, &mut source);
                let completed = model.queue.max(model.completed.unwrap_or(0));
                model.completed = Some(completed);
                let (done, waiting): (Vec<_>, Vec<_>) =
                    model.pending.drain(..).partition(|(_, f)| *f <= completed);
                model.pending = waiting;
                model.freed.extend(done.iter().map(|(l, _)| l.id));
            }
            Op::ReleaseFree => {
                let free_before = wholly_free(&before);
                let want: u64 = free_before
                    .iter()
                    .filter(|(id, _)| !model.base_regions.contains(id))
                    .map(|(_, size)| size)
                    .sum();
                assert_eq!(arena.release_free_regions(&mut source), want);
                for id in free_before.keys() {
                    assert_eq!(
                        source.live.contains_key(id),
                        model.base_regions.contains(id)
                    );
                }
            }
            Op::ResetPeaks => {
                arena.reset_peaks();
                model.peak_in_use = model.in_use();
                model.peak_reserved = source.total();
                model.largest_alloc = model.live.iter().map(|l| l.size).max().unwrap_or(0);
            }
        }
        model.peak_reserved = model.peak_reserved.max(source.total());
        check(&arena, &source, &model, limit);
    }

    // Freeing everything and draining the queue leaves one free chunk per region.
    for live in std::mem::take(&mut model.live) {
        arena.free(live.id, None, &mut source).expect("free");
        model.freed.push(live.id);
    }
    arena.advance_frontier(u64::MAX, &mut source);
    model
        .freed
        .extend(model.pending.drain(..).map(|(l, _)| l.id));
    model.completed = Some(u64::MAX);
    check(&arena, &source, &model, limit);
    for region in arena.snapshot().regions {
        assert_eq!(
            region.chunks.len(),
            1,
            "region {:?} is one free chunk",
            region.id
        );
        assert_eq!(region.chunks[0].state, ChunkState::Free);
    }
    if options.mode == ArenaMode::Platform {
        assert!(source.live.is_empty());
    }
    arena.release_all(&mut source);
    assert!(source.live.is_empty() && !arena.is_reserved());
    assert_eq!(arena.stats().bytes_reserved, 0);
}

fn proptest_config() -> ProptestConfig {
    ProptestConfig {
        cases: CASES_PER_MODE,
        // Failures are reported with their seed; do not write regression files into tests/.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(proptest_config())]

    #[test]
    fn preallocated_arena_matches_the_model(config in config(Setup::Preallocated), ops in prop::collection::vec(op(), OPS)) {
        run(config, ops);
    }

    #[test]
    fn growing_arena_matches_the_model(config in config(Setup::Growing), ops in prop::collection::vec(op(), OPS)) {
        run(config, ops);
    }

    #[test]
    fn preallocated_then_growing_arena_matches_the_model(config in config(Setup::PreallocatedThenGrowing), ops in prop::collection::vec(op(), OPS)) {
        run(config, ops);
    }

    #[test]
    fn platform_arena_matches_the_model(config in config(Setup::Platform), ops in prop::collection::vec(op(), OPS)) {
        run(config, ops);
    }
}
