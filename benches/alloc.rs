//! Criterion benchmark of gpu-arena's arena against two peers in the same run: the
//! `offset-allocator` crate (TLSF-like, O(1), approximate best fit) and the `range-alloc` crate
//! (wgpu's sorted free list, exact best fit, O(n)).
//!
//! ```text
//! cargo bench --bench alloc
//! ```
//!
//! Each benchmark replays a whole trace (`random`, `training`, `small`) on a fresh allocator;
//! throughput is in alloc+free pairs. After criterion's report, a summary prints the median
//! ns per pair and the address-space high-water mark over peak live bytes, with ratios to
//! offset-allocator. The traces and the allocator adapters live in `examples/bench_alloc.rs`,
//! included here, so both harnesses replay exactly the same operations.

use std::time::Duration;

use criterion::{criterion_group, BatchSize, BenchmarkGroup, Criterion, Throughput};

#[path = "../examples/bench_alloc.rs"]
#[allow(dead_code)]
mod bench_alloc;

use bench_alloc::{GpuArena, OffsetAllocator, RangeAlloc, Subject, Trace, SPACE_BYTES};

/// Samples per benchmark: a replay takes milliseconds (range-alloc's random replay a good
/// fraction of a second), so criterion's default of 100 would make the run take many minutes.
const SAMPLES: usize = 10;

fn bench_one<S: Subject>(
    group: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>,
    trace: &Trace,
) {
    group.bench_function(S::NAME, |b| {
        b.iter_batched(
            || S::new(SPACE_BYTES, trace.slots),
            |mut subject| {
                bench_alloc::run(&mut subject, trace).expect("the trace fits the address space");
                subject
            },
            BatchSize::LargeInput,
        )
    });
}

fn replay_traces(c: &mut Criterion) {
    for trace in bench_alloc::traces() {
        let mut group = c.benchmark_group(format!("alloc/{}", trace.name));
        group.throughput(Throughput::Elements(trace.pairs as u64));
        group.sample_size(SAMPLES);
        group.warm_up_time(Duration::from_secs(1));
        group.measurement_time(Duration::from_secs(3));
        bench_one::<GpuArena>(&mut group, &trace);
        bench_one::<OffsetAllocator>(&mut group, &trace);
        bench_one::<RangeAlloc>(&mut group, &trace);
        group.finish();
    }
}

criterion_group!(benches, replay_traces);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    // Criterion reports each allocator alone; the ratios against the peer come from the
    // same replay engine as `examples/bench_alloc.rs`.
    println!(
        "\nsummary (median of {} replays per allocator, taking turns):",
        bench_alloc::repeats()
    );
    println!(
        "  {:<9} {:<17} {:>9} {:>8} {:>14} {:>8}",
        "trace", "allocator", "ns/op", "vs o-a", "hw/peak-live", "vs o-a"
    );
    for trace in bench_alloc::traces() {
        let rows = bench_alloc::measure_all(&trace).expect("replay");
        let peer = &rows[1];
        for row in &rows {
            println!(
                "  {:<9} {:<17} {:>9.1} {:>7.2}x {:>14.3} {:>7.3}x",
                row.trace,
                row.allocator,
                row.ns_per_op,
                row.ns_per_op / peer.ns_per_op,
                row.high_water_over_peak_live,
                row.high_water_over_peak_live / peer.high_water_over_peak_live
            );
        }
    }
}
