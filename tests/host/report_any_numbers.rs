//! The report, the Perfetto export and the snapshot's sums on snapshots and timelines holding
//! any numbers (a snapshot is read back from JSON, a timeline's fields are public): they draw
//! or export them, never panic on a sum or a difference out of range.

use gpu_arena::arena::{AllocationId, Arena, ArenaOptions, RegionId, VirtualRegions};
use gpu_arena::profile::{MemorySnapshot, MemoryTimeline, TimelineEvent, TimelineEventKind};
use gpu_arena::TransferDirection;
use proptest::prelude::*;
use serde_json::Value;

/// Numbers that break careless arithmetic, and ordinary ones.
fn number() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(u64::MAX),
        Just(u64::MAX - 1),
        Just(u64::MAX / 2),
        Just(1 << 63),
        0..(1u64 << 24),
        any::<u64>(),
    ]
}

/// A real snapshot of a small arena, as JSON: regions, in-use, free and pending chunks.
fn snapshot_json() -> Value {
    let mut arena = Arena::new(ArenaOptions::preallocated(4 << 20));
    let mut regions = VirtualRegions::default();
    let a = arena.allocate(1000, 0, Some("a"), &mut regions).unwrap();
    arena.allocate(5000, 0, Some("b"), &mut regions).unwrap();
    let c = arena.allocate(300, 0, None, &mut regions).unwrap();
    arena.free(a.id, Some(3), &mut regions).unwrap();
    arena.free(c.id, None, &mut regions).unwrap();
    let snapshot = MemorySnapshot::from_arena(arena.snapshot(), 1024);
    serde_json::from_str(&snapshot.to_json()).unwrap()
}

/// Replaces the unsigned numbers of `value` where `picks` says so, in document order.
fn replace_numbers(value: &mut Value, picks: &mut impl Iterator<Item = (bool, u64)>) {
    match value {
        Value::Number(n) if n.is_u64() => {
            if let Some((true, x)) = picks.next() {
                *value = Value::from(x);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| replace_numbers(v, picks)),
        Value::Object(fields) => fields
            .iter_mut()
            .for_each(|(_, v)| replace_numbers(v, picks)),
        _ => {}
    }
}

fn event((time_ns, a, b, c): (u64, u64, u64, u64)) -> TimelineEvent {
    let kind = match c % 4 {
        0 => TimelineEventKind::RegionReserve {
            region: RegionId(1),
            size: c,
        },
        1 => TimelineEventKind::Transfer {
            direction: TransferDirection::HostToDevice,
            bytes: c,
            arrays: a,
            explicit: true,
            duration_ns: b,
        },
        2 => TimelineEventKind::Free {
            allocation: AllocationId(a),
            region: RegionId(1),
            offset: b,
            size: c,
            pending: true,
            label: None,
            site: None,
            dtype: None,
            shape: None,
        },
        _ => TimelineEventKind::Alloc {
            allocation: AllocationId(1),
            region: RegionId(1),
            offset: c,
            size: a,
            requested: b,
            label: None,
            site: Some("src/main.rs:1:1".into()),
            dtype: None,
            shape: None,
        },
    };
    TimelineEvent {
        time_ns,
        bytes_in_use: a,
        bytes_reserved: b,
        kind,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn a_snapshot_and_timeline_with_any_numbers_render_without_panicking(
        picks in proptest::collection::vec((proptest::bool::weighted(0.3), number()), 160),
        events in proptest::collection::vec((number(), number(), number(), number()), 0..8),
        dropped in number(),
        capacity in 0usize..16,
    ) {
        let mut json = snapshot_json();
        replace_numbers(&mut json, &mut picks.into_iter());
        // Numbers that make the JSON no snapshot (a chunk state, ...) are serde's to refuse.
        let Ok(snapshot) = serde_json::from_value::<MemorySnapshot>(json) else {
            return Ok(());
        };
        for region in &snapshot.regions {
            let _ = (region.bytes_in_use(), region.bytes_free(), region.largest_free_chunk());
        }
        let _ = snapshot.top_allocations(3);
        let timeline = MemoryTimeline {
            events: events.into_iter().map(event).collect(),
            dropped,
            capacity,
        };
        let page = gpu_arena::report::render_html(&snapshot, Some(&timeline));
        prop_assert!(page.ends_with("</html>\n"));
        let page = gpu_arena::report::render_html(&snapshot, None);
        prop_assert!(page.ends_with("</html>\n"));
        let trace = timeline.to_chrome_trace("hostile");
        prop_assert!(serde_json::from_str::<Value>(&trace).is_ok());
    }
}
