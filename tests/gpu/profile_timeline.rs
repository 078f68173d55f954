//! The event timeline on the test machine's GPU (lavapipe in CI): off by default, on it records
//! allocations, frees, region reserves, transfers and dispatches in order, stays bounded, and
//! exports a Chrome trace that ui.perfetto.dev and chrome://tracing read.

use crate::harness::{context, context_with, test_config};
use gpu_arena::profile::TimelineEventKind as Kind;
use gpu_arena::{ArenaConfig, Context, TransferDirection};

fn traced(capacity: usize) -> Context {
    context_with(ArenaConfig {
        timeline_capacity: capacity,
        max_region_bytes: Some(8 << 20),
        ..test_config()
    })
}

#[gpu_test]
fn the_timeline_is_off_unless_configured() {
    let ctx = context();
    let _a = ctx.zeros::<f32>(&[16]).unwrap();
    assert!(ctx.memory_timeline().is_none());
    assert!(ctx.timeline().is_none());
}

#[gpu_test]
fn allocations_transfers_dispatches_and_frees_are_recorded_in_order() {
    let ctx = traced(1024);
    let a = ctx.device_put(&[1.0f32; 1000], &[1000]).unwrap();
    let b = ctx.zeros::<u32>(&[64]).unwrap().with_label("b");
    let _ = ctx.device_get(&a).unwrap();
    let _ = b.to_vec().unwrap();
    let a_id = a.allocation_id();
    drop(a);
    let timeline = ctx.memory_timeline().unwrap();
    let kinds: Vec<&Kind> = timeline.events.iter().map(|e| &e.kind).collect();
    let position = |f: &dyn Fn(&Kind) -> bool| kinds.iter().position(|k| f(k));

    let reserve = position(&|k| matches!(k, Kind::RegionReserve { .. })).unwrap();
    let alloc_a =
        position(&|k| matches!(k, Kind::Alloc { allocation, .. } if *allocation == a_id)).unwrap();
    let upload = position(&|k| {
        matches!(
            k,
            Kind::Transfer {
                direction: TransferDirection::HostToDevice,
                bytes: 4000,
                arrays: 1,
                explicit: true,
                ..
            }
        )
    })
    .unwrap();
    let zeros = position(&|k| matches!(k, Kind::Dispatch { name, .. } if name == "zeros"));
    let readback = position(&|k| {
        matches!(
            k,
            Kind::Transfer {
                direction: TransferDirection::DeviceToHost,
                explicit: true,
                ..
            }
        )
    })
    .unwrap();
    let implicit = position(&|k| {
        matches!(
            k,
            Kind::Transfer {
                direction: TransferDirection::DeviceToHost,
                explicit: false,
                bytes: 256,
                ..
            }
        )
    })
    .unwrap();
    let free_a =
        position(&|k| matches!(k, Kind::Free { allocation, .. } if *allocation == a_id)).unwrap();
    assert!(reserve < alloc_a, "{kinds:#?}");
    // A transfer is stamped with its start, so the upload begins before its array exists.
    assert!(upload <= alloc_a + 1, "{kinds:#?}");
    assert!(
        alloc_a < readback && readback < implicit && implicit < free_a,
        "{kinds:#?}"
    );
    let labelled = position(&|k| matches!(k, Kind::Label { label, .. } if label == "b")).unwrap();
    assert!(alloc_a < labelled && labelled < readback, "{kinds:#?}");
    // On UMA (lavapipe) zeros writes through the mapping; elsewhere it is a dispatch.
    if let Some(zeros) = zeros {
        assert!(zeros < readback);
    }
    // Time runs forward and the counters follow the events.
    assert!(timeline
        .events
        .windows(2)
        .all(|w| w[0].time_ns <= w[1].time_ns));
    let last = timeline.events.last().unwrap();
    assert_eq!(last.bytes_in_use, ctx.memory_stats().bytes_in_use);
    assert_eq!(last.bytes_reserved, ctx.memory_stats().bytes_reserved);
    assert_eq!(timeline.dropped, 0);
}

#[gpu_test]
fn kernel_dispatches_and_device_copies_are_named_on_the_timeline() {
    let ctx = context_with(ArenaConfig {
        force_device_kernels: true,
        timeline_capacity: 1024,
        max_region_bytes: Some(8 << 20),
        ..test_config()
    });
    let a = ctx.fill::<u32>(&[4096], 7).unwrap();
    let b = ctx.copy(&a).unwrap();
    assert_eq!(ctx.device_get(&b).unwrap(), vec![7; 4096]);
    let kinds: Vec<Kind> = ctx
        .memory_timeline()
        .unwrap()
        .events
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert!(
        kinds
            .iter()
            .any(|k| matches!(k, Kind::Dispatch { name, .. } if name == "fill")),
        "{kinds:#?}"
    );
    assert!(
        kinds
            .iter()
            .any(|k| matches!(k, Kind::Dispatch { name, .. } if name.starts_with("copy"))),
        "{kinds:#?}"
    );
    assert!(kinds.iter().any(|k| matches!(
        k,
        Kind::Transfer {
            direction: TransferDirection::DeviceToDevice,
            bytes: 16384,
            ..
        }
    )));
}

#[gpu_test]
fn a_transfer_of_no_array_is_no_event_as_it_is_no_count() {
    let ctx = traced(1024);
    ctx.upload_batch().finish().unwrap();
    assert!(ctx.device_get_many::<u32>(&[]).unwrap().is_empty());
    assert_eq!(ctx.transfer_stats(), Default::default());
    let timeline = ctx.memory_timeline().unwrap();
    assert!(timeline.events.is_empty(), "{:?}", timeline.events);
    // One array, even of no bytes, is a transfer on both.
    let empty = ctx.device_put::<u32>(&[], &[0]).unwrap();
    assert_eq!(ctx.transfer_stats().host_to_device.explicit.count, 1);
    let transfers = ctx
        .memory_timeline()
        .unwrap()
        .events
        .iter()
        .filter(|e| matches!(e.kind, Kind::Transfer { arrays: 1, .. }))
        .count();
    assert_eq!(transfers, 1);
    drop(empty);
}

#[gpu_test]
fn a_small_ring_keeps_only_the_newest_events() {
    let ctx = traced(16);
    for _ in 0..40 {
        let _ = ctx.zeros::<f32>(&[256]).unwrap();
    }
    let timeline = ctx.memory_timeline().unwrap();
    assert_eq!(timeline.events.len(), 16);
    assert!(timeline.dropped >= 40, "{}", timeline.dropped);
    assert_eq!(timeline.capacity, 16);
}

#[gpu_test]
fn the_chrome_trace_parses_and_holds_counters_slices_and_instants() {
    let ctx = traced(4096);
    let a = ctx
        .device_put(&[7u8; 5000], &[5000])
        .unwrap()
        .with_label("x");
    let _ = ctx.device_get(&a).unwrap();
    let b = ctx.zeros::<f32>(&[100]).unwrap();
    drop((a, b));
    let timeline = ctx.memory_timeline().unwrap();
    let text = timeline.to_chrome_trace(&ctx.adapter_info().name);
    let trace: serde_json::Value = serde_json::from_str(&text).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    let count = |f: &dyn Fn(&serde_json::Value) -> bool| events.iter().filter(|e| f(e)).count();

    // Every event has the fields the format requires.
    for e in events {
        assert!(e["name"].is_string() && e["ph"].is_string(), "{e}");
        assert!(
            e["pid"].is_u64() && e["tid"].is_u64() && e["ts"].is_number(),
            "{e}"
        );
        assert!(e.get("args").is_none_or(|a| a.is_object()), "{e}");
    }
    assert_eq!(
        count(&|e| e["ph"] == "M" && e["name"] == "thread_name"),
        4,
        "arena, transfers, dispatches and GPU tracks"
    );
    let in_use = count(&|e| e["ph"] == "C" && e["name"] == "bytes_in_use");
    let reserved = count(&|e| e["ph"] == "C" && e["name"] == "bytes_reserved");
    assert!(in_use >= 3 && in_use == reserved, "{in_use} {reserved}");
    let slices: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "transfer")
        .collect();
    assert_eq!(slices.len(), 2, "one upload, one readback");
    assert_eq!(slices[0]["args"]["direction"], "host_to_device");
    assert_eq!(slices[0]["args"]["bytes"], 5000);
    assert_eq!(slices[0]["args"]["explicit"], true);
    assert!(slices[0]["dur"].is_number());
    assert_eq!(
        count(&|e| e["ph"] == "i" && e["name"].as_str().unwrap().starts_with("alloc ")),
        2
    );
    assert_eq!(
        count(&|e| e["ph"] == "i" && e["name"].as_str().unwrap().starts_with("free ")),
        2
    );
    assert!(
        count(&|e| e["ph"] == "i" && e["name"].as_str().unwrap().starts_with("reserve region"))
            >= 1
    );
    let labelled = events
        .iter()
        .find(|e| e["args"]["label"] == "x")
        .expect("the labelled allocation");
    assert_eq!(labelled["args"]["requested"], 5000);
    // The written file is the same document.
    let path = std::env::temp_dir().join(format!("gpu-arena-trace-{}.json", std::process::id()));
    timeline.write_chrome_trace(&path, "test").unwrap();
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(
        written["traceEvents"].as_array().unwrap().len(),
        events.len()
    );
    let _ = std::fs::remove_file(path);
}
