//! Memory snapshots and statistics on the test machine's GPU (lavapipe in CI): every array
//! appears with its label, element type, shape and age; the JSON round-trips; transfer figures
//! sit next to XLA's keys.

use crate::harness::{context_with, test_config};
use gpu_arena::arena::ChunkState;
use gpu_arena::profile::{label_scope, MemorySnapshot, SNAPSHOT_FORMAT};
use gpu_arena::{ArenaConfig, Context};

const MIB: u64 = 1 << 20;

/// Regions of 8 MiB, so a few arrays of tens of KiB make a readable snapshot.
fn small_regions() -> Context {
    context_with(ArenaConfig {
        max_region_bytes: Some(8 * MIB),
        ..test_config()
    })
}

#[gpu_test]
fn the_snapshot_lists_every_array_with_its_label_type_shape_and_age() {
    let ctx = small_regions();
    let weights = ctx.zeros::<f32>(&[64, 128]).unwrap().with_label("weights");
    let tokens = ctx.device_put(&[1u32, 2, 3], &[3]).unwrap();
    let kv = {
        let _model = label_scope("model");
        let _layer = label_scope("layer3");
        ctx.zeros::<u16>(&[4, 8, 16]).unwrap()
    };
    let renamed = {
        let _scope = label_scope("ignored");
        ctx.zeros::<u8>(&[1000])
            .unwrap()
            .with_label("explicit wins")
    };
    let snapshot = ctx.memory_snapshot();

    let weights_chunk = snapshot.chunk(weights.allocation_id()).unwrap();
    assert_eq!(weights_chunk.state, ChunkState::InUse);
    assert_eq!(weights_chunk.label.as_deref(), Some("weights"));
    assert_eq!(weights_chunk.dtype.as_deref(), Some("f32"));
    assert_eq!(weights_chunk.shape.as_deref(), Some(&[64, 128][..]));
    assert_eq!(weights_chunk.size, weights.allocated_bytes());
    assert_eq!(weights_chunk.requested, 64 * 128 * 4);
    assert_eq!(weights_chunk.offset, weights.byte_offset());
    assert_eq!(
        weights_chunk.age_seconds, None,
        "dated only with the timeline on"
    );
    assert_eq!(
        weights_chunk.age_allocs, 3,
        "three allocations came after it"
    );

    let tokens_chunk = snapshot.chunk(tokens.allocation_id()).unwrap();
    assert_eq!(tokens_chunk.label, None);
    assert_eq!(tokens_chunk.dtype.as_deref(), Some("u32"));
    assert_eq!(tokens_chunk.requested, 12);
    assert_eq!(tokens_chunk.size, 256);

    let kv_chunk = snapshot.chunk(kv.allocation_id()).unwrap();
    assert_eq!(kv_chunk.label.as_deref(), Some("model/layer3"));
    assert_eq!(kv_chunk.shape.as_deref(), Some(&[4, 8, 16][..]));
    assert_eq!(
        snapshot
            .chunk(renamed.allocation_id())
            .unwrap()
            .label
            .as_deref(),
        Some("explicit wins")
    );

    // Regions are tiled exactly by their chunks, and the figures agree with the stats.
    let mut in_use = 0;
    for region in &snapshot.regions {
        let mut offset = 0;
        for chunk in &region.chunks {
            assert_eq!(chunk.offset, offset);
            offset += chunk.size;
            if chunk.state == ChunkState::InUse {
                in_use += chunk.size;
            } else {
                assert_eq!((chunk.dtype.as_ref(), chunk.allocation), (None, None));
            }
        }
        assert_eq!(offset, region.size);
    }
    assert_eq!(in_use, snapshot.stats.arena.bytes_in_use);
    assert_eq!(snapshot.stats.arena, ctx.memory_stats());
    assert_eq!(snapshot.format, SNAPSHOT_FORMAT);
    assert_eq!(snapshot.device, ctx.adapter_info().name);
    assert_eq!(snapshot.plan.as_ref(), Some(ctx.memory_plan()));
    assert_eq!(
        snapshot.settings.as_ref().unwrap().max_region_bytes,
        8 * MIB
    );
    drop((weights, tokens, kv, renamed));
}

#[gpu_test]
fn with_the_timeline_on_arrays_are_dated_in_seconds() {
    let ctx = context_with(ArenaConfig {
        max_region_bytes: Some(8 * MIB),
        timeline_capacity: 64,
        ..test_config()
    });
    let old = ctx.zeros::<f32>(&[16]).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let young = ctx.zeros::<f32>(&[16]).unwrap();
    let snapshot = ctx.memory_snapshot();
    let age = |id| snapshot.chunk(id).unwrap().age_seconds.unwrap();
    let (old_age, young_age) = (age(old.allocation_id()), age(young.allocation_id()));
    assert!(old_age >= young_age + 0.015, "{old_age} vs {young_age}");
    assert!(young_age >= 0.0 && old_age < 60.0);
    assert!(snapshot.time_ns.is_some());
}

#[gpu_test]
fn a_freed_array_leaves_the_snapshot() {
    let ctx = small_regions();
    let a = ctx.zeros::<f32>(&[1024]).unwrap().with_label("temporary");
    let id = a.allocation_id();
    assert!(ctx.memory_snapshot().chunk(id).is_some());
    drop(a);
    ctx.synchronize().unwrap();
    let _b = ctx.zeros::<f32>(&[4]).unwrap(); // retires the pending free
    let snapshot = ctx.memory_snapshot();
    assert!(snapshot.chunk(id).is_none());
    assert!(snapshot
        .chunks()
        .all(|(_, c)| c.label.as_deref() != Some("temporary")));
}

#[gpu_test]
fn the_snapshot_survives_a_json_round_trip() {
    let ctx = small_regions();
    let _a = ctx
        .zeros::<f32>(&[3, 5])
        .unwrap()
        .with_label("a \"quoted\" <label>");
    let _b = ctx.device_put(&[1u8; 300], &[300]).unwrap();
    let _ = _b.to_vec().unwrap();
    let snapshot = ctx.memory_snapshot();
    let json = snapshot.to_json();
    let back = MemorySnapshot::from_json(&json).unwrap();
    assert_eq!(back, snapshot);
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        value["stats"]["bytes_in_use"],
        snapshot.stats.arena.bytes_in_use
    );
    assert_eq!(
        value["stats"]["transfers"]["device_to_host"]["implicit"]["count"],
        1
    );
    assert!(value["regions"][0]["chunks"][0]["state"].is_string());
    // A snapshot of another layout version is refused, naming both formats.
    let mut other = value.clone();
    other["format"] = "gpu-arena-memory-snapshot/999".into();
    let error = MemorySnapshot::from_json(&other.to_string()).unwrap_err();
    let message = error.to_string();
    assert!(
        message.contains("\"gpu-arena-memory-snapshot/999\"")
            && message.contains(&format!("{SNAPSHOT_FORMAT:?}")),
        "{message}"
    );
}

#[gpu_test]
fn stats_with_transfers_keep_xla_keys_and_count_each_direction() {
    let ctx = small_regions();
    let a = ctx.device_put(&[1.0f32; 256], &[256]).unwrap();
    let _ = ctx.device_get(&a).unwrap();
    let _ = a.to_vec().unwrap();
    let stats = ctx.memory_stats_with_transfers();
    assert_eq!(stats.arena, ctx.memory_stats());
    assert_eq!(stats.transfers, ctx.transfer_stats());
    assert_eq!(stats.transfers.host_to_device.explicit.bytes, 1024);
    assert_eq!(stats.transfers.device_to_host.explicit.count, 1);
    assert_eq!(stats.transfers.device_to_host.implicit.count, 1);
    assert_eq!(stats.transferred_bytes(), 3 * 1024);
    let json = serde_json::to_value(&stats).unwrap();
    for key in [
        "num_allocs",
        "bytes_in_use",
        "peak_bytes_in_use",
        "largest_alloc_size",
        "bytes_limit",
        "bytes_reserved",
        "peak_bytes_reserved",
        "largest_free_block_bytes",
        "pool_bytes",
        "pending_free_bytes",
        "transfers",
    ] {
        assert!(json.get(key).is_some(), "{key} missing from {json}");
    }
}

#[gpu_test]
fn the_snapshot_lists_every_heap_of_the_device_with_its_budget_when_the_driver_reports_one() {
    let ctx = small_regions();
    let snapshot = ctx.memory_snapshot();
    let table = &ctx.device_description().memory;
    assert_eq!(snapshot.heaps.len(), table.heaps.len());
    for (heap, described) in snapshot.heaps.iter().zip(&table.heaps) {
        assert_eq!(heap.size, described.size);
        assert_eq!(
            heap.device_local,
            described
                .flags
                .contains(gpu_arena::memplan::HeapFlags::DEVICE_LOCAL)
        );
    }
    // VK_EXT_memory_budget decides whether budgets are there (lavapipe 22 has none).
    let reported = ctx
        .vulkan_limits()
        .is_some_and(|limits| limits.memory_budget);
    assert_eq!(ctx.heap_budgets().is_some(), reported);
    for heap in &snapshot.heaps {
        assert_eq!(heap.budget.is_some(), reported);
        assert_eq!(heap.usage.is_some(), reported);
    }
    let back = MemorySnapshot::from_json(&snapshot.to_json()).unwrap();
    assert_eq!(back.heaps, snapshot.heaps);
}
