//! The arena's documented behaviour, one property per test: growth schedule, releasing free
//! regions, frontier-gated frees, events, statistics keys, snapshots and scale.

use std::sync::{Arc, Mutex};

use gpu_arena::arena::{
    Arena, ArenaEvent, ArenaOptions, ArenaSnapshot, ChunkState, MemoryStats, RegionId,
    RegionRefusal, RegionSource, ALLOCATION_ALIGNMENT,
};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;

/// Hands out regions without limit and remembers what it was asked for.
#[derive(Default)]
struct Recorder {
    next: u64,
    created: Vec<u64>,
    released: Vec<RegionId>,
    live: u64,
}

impl RegionSource for Recorder {
    fn create_region(&mut self, size: u64) -> Result<RegionId, RegionRefusal> {
        self.next += 1;
        self.created.push(size);
        self.live += 1;
        Ok(RegionId(self.next))
    }

    fn release_region(&mut self, region: RegionId) {
        self.released.push(region);
        self.live -= 1;
    }
}

#[test]
fn arena_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Arena>();
}

#[test]
fn growth_regions_start_at_two_mebibytes_and_double_as_in_xla() {
    let mut source = Recorder::default();
    let mut arena = Arena::new(ArenaOptions::growing(GIB));
    for _ in 0..4 {
        // Each request fills the current region, forcing the next growth.
        let region_sizes = source.created.clone();
        let size = region_sizes.last().copied().unwrap_or(2 * MIB);
        arena.allocate(size, 0, None, &mut source).unwrap();
    }
    assert_eq!(source.created, vec![2 * MIB, 4 * MIB, 8 * MIB, 16 * MIB]);
}

#[test]
fn a_large_request_gets_a_region_at_least_its_size_but_never_beyond_the_maximum() {
    let mut source = Recorder::default();
    let mut arena = Arena::new(ArenaOptions {
        max_region_bytes: 100 * MIB,
        ..ArenaOptions::growing(GIB)
    });
    arena.allocate(5 * MIB + 1, 0, None, &mut source).unwrap();
    assert_eq!(
        source.created,
        vec![8 * MIB],
        "doubled from 2 MiB until it covers 5 MiB"
    );
    arena.allocate(90 * MIB, 0, None, &mut source).unwrap();
    assert_eq!(source.created[1], 100 * MIB, "cut to the largest region");
}

#[test]
fn growth_stops_at_the_limit_and_a_last_region_takes_what_is_left() {
    let mut source = Recorder::default();
    let mut arena = Arena::new(ArenaOptions::growing(5 * MIB));
    arena.allocate(2 * MIB, 0, None, &mut source).unwrap();
    arena.allocate(2 * MIB, 0, None, &mut source).unwrap();
    assert_eq!(source.created, vec![2 * MIB, 3 * MIB]);
    assert_eq!(arena.stats().bytes_reserved, 5 * MIB);
}

#[test]
fn reaching_the_limit_releases_wholly_free_regions_before_failing() {
    let mut source = Recorder::default();
    let mut arena = Arena::new(ArenaOptions::growing(7 * MIB));
    let a = arena.allocate(2 * MIB, 0, None, &mut source).unwrap();
    arena.allocate(4 * MIB, 0, None, &mut source).unwrap();
    arena.free(a.id, None, &mut source).unwrap();
    // 2 MiB free in its own region and 1 MiB left under the limit, but 3 MiB wanted: give
    // the free region back, then grow into the room that made.
    let b = arena.allocate(3 * MIB, 0, None, &mut source).unwrap();
    assert_eq!(source.released, vec![a.region]);
    assert_eq!(source.created, vec![2 * MIB, 4 * MIB, 3 * MIB]);
    assert_ne!(b.region, a.region);
    assert_eq!(arena.stats().bytes_reserved, 7 * MIB);
}

#[test]
fn the_preallocated_base_is_split_into_regions_and_never_released_early() {
    let mut source = Recorder::default();
    let mut arena = Arena::new(ArenaOptions {
        max_region_bytes: 4 * MIB,
        ..ArenaOptions::preallocated(10 * MIB)
    });
    arena.reserve(&mut source).unwrap();
    arena.reserve(&mut source).unwrap();
    assert_eq!(
        source.created,
        vec![4 * MIB, 4 * MIB, 2 * MIB],
        "idempotent, split"
    );
    assert_eq!(arena.release_free_regions(&mut source), 0);
    assert!(source.released.is_empty());
}

#[test]
fn preallocated_then_growing_keeps_its_base_and_releases_only_growth() {
    let mut source = Recorder::default();
    let mut arena = Arena::new(ArenaOptions {
        reserve_bytes: 4 * MIB,
        ..ArenaOptions::growing(16 * MIB)
    });
    let big = arena.allocate(6 * MIB, 0, None, &mut source).unwrap();
    assert_eq!(source.created, vec![4 * MIB, 8 * MIB]);
    arena.free(big.id, None, &mut source).unwrap();
    assert_eq!(arena.release_free_regions(&mut source), 8 * MIB);
    assert_eq!(arena.stats().bytes_reserved, 4 * MIB);
}

#[test]
fn platform_mode_gives_every_allocation_its_own_region_and_returns_it() {
    let mut source = Recorder::default();
    let mut arena = Arena::new(ArenaOptions::platform(GIB));
    let a = arena.allocate(1000, 0, None, &mut source).unwrap();
    let b = arena.allocate(3000, 0, None, &mut source).unwrap();
    assert_eq!(source.created, vec![1024, 3072]);
    assert_ne!(a.region, b.region);
    arena.free(a.id, None, &mut source).unwrap();
    assert_eq!(source.released, vec![a.region]);
    // A frontier keeps the region until the queue gets there.
    arena.free(b.id, Some(5), &mut source).unwrap();
    assert_eq!(source.live, 1);
    arena.advance_frontier(5, &mut source);
    assert_eq!(source.live, 0);
}

#[test]
fn a_pending_free_is_not_reused_until_its_frontier_completes_then_coalesces() {
    let mut source = Recorder::default();
    let mut arena = Arena::new(ArenaOptions::preallocated(MIB));
    let a = arena.allocate(256 * KIB, 0, None, &mut source).unwrap();
    let b = arena.allocate(256 * KIB, 0, None, &mut source).unwrap();
    arena.free(a.id, Some(10), &mut source).unwrap();
    assert_eq!(arena.pending_free_bytes(), 256 * KIB);
    let stats = arena.stats();
    assert_eq!(
        stats.bytes_in_use,
        256 * KIB,
        "pending bytes are not in use"
    );
    assert_eq!(stats.largest_free_block_bytes, 512 * KIB, "nor free");

    let c = arena.allocate(256 * KIB, 0, None, &mut source).unwrap();
    assert_ne!(c.offset, a.offset, "the pending chunk is not handed out");
    arena.advance_frontier(9, &mut source);
    assert_eq!(
        arena.pending_free_bytes(),
        256 * KIB,
        "9 is before the frontier"
    );
    arena.advance_frontier(10, &mut source);
    assert_eq!(arena.pending_free_bytes(), 0);

    arena.free(b.id, None, &mut source).unwrap();
    arena.free(c.id, None, &mut source).unwrap();
    let snapshot = arena.snapshot();
    assert_eq!(snapshot.regions[0].chunks.len(), 1, "everything coalesced");
    // A free whose frontier is already complete takes effect at once.
    let d = arena.allocate(1, 0, None, &mut source).unwrap();
    arena.free(d.id, Some(3), &mut source).unwrap();
    assert_eq!(arena.pending_free_bytes(), 0);
}

#[test]
fn events_carry_the_counters_after_each_change() {
    let mut source = Recorder::default();
    let mut arena = Arena::new(ArenaOptions::growing(GIB));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    arena.set_event_sink(Some(Box::new(move |event: &ArenaEvent<'_>| {
        sink.lock().unwrap().push(format!("{event:?}"));
    })));
    let a = arena
        .allocate(1000, 0, Some("weights"), &mut source)
        .unwrap();
    arena.free(a.id, Some(1), &mut source).unwrap();
    arena.advance_frontier(1, &mut source);
    arena.release_free_regions(&mut source);
    arena.set_event_sink(None);
    arena.allocate(1000, 0, None, &mut source).unwrap();

    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 4, "{seen:#?}");
    assert!(seen[0].starts_with("RegionCreated") && seen[0].contains("bytes_reserved: 2097152"));
    assert!(seen[1].starts_with("Alloc") && seen[1].contains("label: Some(\"weights\")"));
    assert!(seen[1].contains("size: 1024") && seen[1].contains("bytes_in_use: 1024"));
    assert!(seen[2].starts_with("Free") && seen[2].contains("pending: true"));
    assert!(seen[2].contains("bytes_in_use: 0"));
    assert!(seen[3].starts_with("RegionReleased") && seen[3].contains("bytes_reserved: 0"));
}

#[test]
fn memory_stats_serialise_with_the_keys_of_jax_memory_stats() {
    let mut source = Recorder::default();
    let mut arena = Arena::new(ArenaOptions::preallocated(MIB));
    arena.allocate(1000, 0, None, &mut source).unwrap();
    let json = serde_json::to_value(arena.stats()).unwrap();
    let mut keys: Vec<_> = json.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "bytes_in_use",
            "bytes_limit",
            "bytes_reservable_limit",
            "bytes_reserved",
            "fragmentation",
            "largest_alloc_size",
            "largest_free_block_bytes",
            "num_allocs",
            "num_regions",
            "peak_bytes_in_use",
            "peak_bytes_reserved",
            "peak_pool_bytes",
            "pool_bytes",
        ]
    );
    let back: MemoryStats = serde_json::from_value(json).unwrap();
    assert_eq!(back, arena.stats());
    assert_eq!(back.bytes_limit, Some(MIB));
    assert_eq!(back.pool_bytes, Some(MIB));
}

#[test]
fn num_allocs_counts_allocations_made_and_peaks_reset_to_current_values() {
    let mut source = Recorder::default();
    let mut arena = Arena::new(ArenaOptions::preallocated(MIB));
    let big = arena.allocate(512 * KIB, 0, None, &mut source).unwrap();
    let small = arena.allocate(1000, 0, None, &mut source).unwrap();
    arena.free(big.id, None, &mut source).unwrap();
    let stats = arena.stats();
    assert_eq!(stats.num_allocs, 2);
    assert_eq!(stats.bytes_in_use, 1024);
    assert_eq!(stats.peak_bytes_in_use, 512 * KIB + 1024);
    assert_eq!(stats.largest_alloc_size, 512 * KIB);
    arena.reset_peaks();
    let stats = arena.stats();
    assert_eq!(stats.peak_bytes_in_use, 1024);
    assert_eq!(
        stats.largest_alloc_size, 1024,
        "the largest live allocation"
    );
    assert_eq!(stats.peak_bytes_reserved, MIB);
    assert_eq!(stats.num_allocs, 2, "not a peak");
    arena.free(small.id, None, &mut source).unwrap();
}

#[test]
fn zero_bytes_take_one_granule_as_in_xla() {
    let mut source = Recorder::default();
    let mut arena = Arena::new(ArenaOptions::preallocated(MIB));
    let a = arena.allocate(0, 0, None, &mut source).unwrap();
    let b = arena.allocate(0, 0, None, &mut source).unwrap();
    assert_eq!((a.size, a.requested), (ALLOCATION_ALIGNMENT, 0));
    assert_ne!(a.offset, b.offset, "distinct addresses");
}

#[test]
fn a_snapshot_lists_labels_and_sequence_numbers_and_survives_json() {
    let mut source = Recorder::default();
    let mut arena = Arena::new(ArenaOptions::preallocated(MIB));
    let a = arena.allocate(1000, 0, Some("x"), &mut source).unwrap();
    let b = arena.allocate(3000, 0, None, &mut source).unwrap();
    arena.free(a.id, Some(4), &mut source).unwrap();
    let snapshot = arena.snapshot();
    let chunks = &snapshot.regions[0].chunks;
    assert_eq!(chunks.len(), 3);
    assert_eq!(chunks[0].state, ChunkState::PendingFree);
    assert_eq!(
        (chunks[0].label.as_deref(), chunks[0].sequence),
        (Some("x"), 1)
    );
    assert_eq!(chunks[0].frontier, Some(4));
    assert_eq!(
        (chunks[1].allocation, chunks[1].requested),
        (Some(b.id), 3000)
    );
    assert_eq!(
        (chunks[1].state, chunks[1].sequence),
        (ChunkState::InUse, 2)
    );
    assert_eq!(chunks[2].state, ChunkState::Free);
    let json = serde_json::to_string(&snapshot).unwrap();
    let back: ArenaSnapshot = serde_json::from_str(&json).unwrap();
    assert_eq!(back, snapshot);
}

#[test]
fn aligned_requests_leave_the_gap_free_and_usable() {
    let mut source = Recorder::default();
    let mut arena = Arena::new(ArenaOptions::preallocated(MIB));
    arena.allocate(256, 0, None, &mut source).unwrap();
    let aligned = arena.allocate(1000, 64 * KIB, None, &mut source).unwrap();
    assert_eq!(aligned.offset, 64 * KIB);
    let filler = arena.allocate(1000, 0, None, &mut source).unwrap();
    assert_eq!(
        filler.offset, 256,
        "the gap before the aligned chunk is reused first"
    );
}

#[test]
fn the_private_address_space_is_repacked_when_regions_churn_for_long() {
    // Regions of 256 GiB created and released over and over exhaust the 256 TiB address
    // space after about a thousand rounds; the arena must keep working.
    let mut source = Recorder::default();
    let region = 256 * GIB - 256;
    let mut arena = Arena::new(ArenaOptions {
        max_region_bytes: u64::MAX,
        reserve_bytes: region,
        ..ArenaOptions::growing(4 * region)
    });
    let keep = arena.allocate(1, 0, None, &mut source).unwrap();
    for round in 0..1500 {
        let a = arena.allocate(region, 0, None, &mut source).unwrap();
        let b = arena.allocate(1, 0, None, &mut source).unwrap();
        assert_eq!(
            b.region, keep.region,
            "round {round}: best fit still finds the base"
        );
        arena.free(b.id, None, &mut source).unwrap();
        arena.free(a.id, None, &mut source).unwrap();
        arena.release_free_regions(&mut source);
    }
    assert_eq!(source.created.len(), 1501);
    assert!(arena.allocation(keep.id).is_some());
}

#[test]
fn a_hundred_thousand_live_chunks_allocate_and_free_correctly() {
    let mut source = Recorder::default();
    let mut arena = Arena::new(ArenaOptions::preallocated(64 * GIB));
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut live: Vec<_> = (0..100_000)
        .map(|_| {
            let size = 256 << (next() % 12);
            arena.allocate(size, 0, None, &mut source).unwrap()
        })
        .collect();
    for _ in 0..100_000 {
        let i = (next() % live.len() as u64) as usize;
        let old = live.swap_remove(i);
        arena.free(old.id, None, &mut source).unwrap();
        live.push(
            arena
                .allocate(256 << (next() % 12), 0, None, &mut source)
                .unwrap(),
        );
    }
    let in_use: u64 = live.iter().map(|a| a.size).sum();
    assert_eq!(arena.stats().bytes_in_use, in_use);
    for a in live {
        arena.free(a.id, None, &mut source).unwrap();
    }
    assert_eq!(arena.snapshot().regions[0].chunks.len(), 1);
}

#[test]
fn after_release_all_the_pending_frontier_is_that_of_the_frees_made_since() {
    let mut source = Recorder::default();
    let mut arena = Arena::new(ArenaOptions::growing(GIB));
    let a = arena.allocate(KIB, 0, None, &mut source).unwrap();
    arena.free(a.id, Some(17), &mut source).unwrap();
    assert_eq!(arena.pending_free_frontier(), Some(17));
    arena.release_all(&mut source);
    assert_eq!(arena.pending_free_frontier(), None);
    let b = arena.allocate(KIB, 0, None, &mut source).unwrap();
    arena.free(b.id, Some(15), &mut source).unwrap();
    assert_eq!(
        arena.pending_free_frontier(),
        Some(15),
        "the forgotten free's 17 is no position to wait for"
    );
}
