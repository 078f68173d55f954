//! The timeline's counts under concurrency (no GPU): readers snapshot, count and clear while a
//! writer records, and every figure a reader sees is consistent with what was written before
//! and after its read: `dropped`, for one, never wraps to 2^64 − 1 when a snapshot races the
//! writer.

use gpu_arena::arena::{AllocationId, ArenaEvent, RegionId};
use gpu_arena::profile::{Timeline, MAX_TIMELINE_CAPACITY};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Events the writer records in each test.
const EVENTS: u64 = 1_000_000;

fn alloc_event(i: u64) -> ArenaEvent<'static> {
    ArenaEvent::Alloc {
        id: AllocationId(i),
        region: RegionId(0),
        offset: 0,
        size: 256,
        requested: 256,
        label: None,
        sequence: i,
        bytes_in_use: 256,
        bytes_reserved: 1 << 20,
    }
}

/// A writer thread recording `EVENTS` arena events through the timeline's sink, publishing
/// how many it has recorded after each one; `done` is set at the end.
fn spawn_writer(
    timeline: &Arc<Timeline>,
    recorded: &Arc<AtomicU64>,
    done: &Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    let sink = timeline.event_sink().expect("the first sink");
    let (recorded, done) = (Arc::clone(recorded), Arc::clone(done));
    std::thread::spawn(move || {
        for i in 0..EVENTS {
            sink(&alloc_event(i));
            recorded.store(i + 1, Ordering::Release);
        }
        done.store(true, Ordering::Release);
    })
}

#[test]
fn snapshots_racing_the_writer_never_count_more_dropped_than_written() {
    for capacity in [1, 7, 64, 1000] {
        let timeline = Arc::new(Timeline::new(capacity).unwrap());
        let recorded = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let writer = spawn_writer(&timeline, &recorded, &done);
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let (timeline, recorded, done) = (
                    Arc::clone(&timeline),
                    Arc::clone(&recorded),
                    Arc::clone(&done),
                );
                std::thread::spawn(move || {
                    let mut snapshots = 0;
                    while !done.load(Ordering::Acquire) || snapshots == 0 {
                        let before = recorded.load(Ordering::Acquire);
                        let snapshot = timeline.snapshot();
                        // The writer may have stored one event it has not counted yet.
                        let after = recorded.load(Ordering::Acquire) + 1;
                        let held = snapshot.events.len() as u64;
                        assert!(held <= capacity as u64, "{held} events > {capacity}");
                        assert!(
                            snapshot.dropped <= after,
                            "dropped {} > written {after}",
                            snapshot.dropped
                        );
                        let seen = held + snapshot.dropped;
                        assert!(
                            (before..=after).contains(&seen),
                            "held {held} + dropped {} = {seen}, outside {before}..={after}",
                            snapshot.dropped
                        );
                        assert!(timeline.len() <= capacity);
                        snapshots += 1;
                    }
                    snapshots
                })
            })
            .collect();
        writer.join().unwrap();
        for reader in readers {
            assert!(reader.join().unwrap() > 0);
        }
        let last = timeline.snapshot();
        assert_eq!(last.events.len(), capacity.min(EVENTS as usize));
        assert_eq!(last.dropped + last.events.len() as u64, EVENTS);
    }
}

#[test]
fn counting_and_clearing_racing_the_writer_never_wraps() {
    // One reader that clears and then reads at once: right after a clear the ring holds few
    // records, which is when a record written between reading the count and reading the ring
    // made `dropped` wrap. Two threads, so both run at once even on two cores.
    for capacity in [16, 64, 1000, 16, 64, 1000] {
        let timeline = Arc::new(Timeline::new(capacity).unwrap());
        let recorded = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let writer = spawn_writer(&timeline, &recorded, &done);
        let mut reads = 0;
        while !done.load(Ordering::Acquire) || reads == 0 {
            timeline.clear();
            assert!(timeline.len() <= capacity);
            let snapshot = timeline.snapshot();
            let after = recorded.load(Ordering::Acquire) + 1;
            assert!(snapshot.events.len() <= capacity);
            assert!(
                snapshot.dropped + snapshot.events.len() as u64 <= after,
                "held {} + dropped {} > written {after}",
                snapshot.events.len(),
                snapshot.dropped
            );
            reads += 1;
        }
        writer.join().unwrap();
    }
}

#[test]
fn a_timeline_above_the_bound_is_refused_stating_the_bound() {
    let error = Timeline::new(MAX_TIMELINE_CAPACITY + 1).unwrap_err();
    let msg = error.to_string();
    assert!(msg.contains(&MAX_TIMELINE_CAPACITY.to_string()), "{msg}");
    assert!(Timeline::new(usize::MAX).is_err());
    // 68719476736 events is what made a context abort asking for 8 TiB.
    let msg = Timeline::new(68_719_476_736).unwrap_err().to_string();
    assert!(
        msg.contains("68719476736") && msg.contains("16777215"),
        "{msg}"
    );
}
