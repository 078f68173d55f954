//! The main demo: what gpu-arena does with this machine's GPU, step by step.
//!
//! ```text
//! cargo run --release --example tour
//! ```
//! Shows the adapter, the memory plan and why, JAX-style preallocation at the first
//! allocation, XLA's memory statistics, explicit and batched transfers, and the transfer guard.
//! `GPU_ARENA_*` variables (and JAX's `XLA_PYTHON_CLIENT_*`) apply. gpu-arena reports what it
//! cannot return as an error (a failed free, an uncaptured device error) through the `log`
//! crate: the tour prints warnings and errors (`RUST_LOG` changes the level).

use gpu_arena::{
    AllocatorKind, ArenaConfig, Context, MemoryKind, TransferGuard, TransferGuardLevel,
};
use std::time::Instant;

#[path = "flags/mod.rs"]
mod flags;

const USAGE: &str = "usage: tour

What gpu-arena does with this machine's GPU, step by step: the adapter, the memory plan,
preallocation, memory statistics, transfers and the transfer guard.
  -h, --help  this text
GPU_ARENA_* variables (and JAX's XLA_PYTHON_CLIENT_*) apply.";

/// `bytes` in the unit that reads best (`2.00 MiB`, `1.50 GiB`).
fn size(bytes: u64) -> String {
    gpu_arena::arena::Bytes(bytes).to_string()
}

fn main() -> anyhow::Result<()> {
    flags::no_options(USAGE);
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let config = ArenaConfig::from_env()?;
    let t = Instant::now();
    let ctx = match Context::new(config.clone()) {
        Ok(ctx) => ctx,
        Err(e) => {
            eprintln!("gpu-arena could not open a GPU: {e}");
            std::process::exit(1);
        }
    };
    let info = ctx.adapter_info();
    println!("== adapter");
    let driver = [info.driver.as_str(), info.driver_info.as_str()]
        .iter()
        .filter(|s| !s.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join(" ");
    println!(
        "{} ({}, {}, driver {driver}) opened in {:.1} ms",
        info.name,
        info.backend,
        ctx.memory_plan().device_kind.name(),
        t.elapsed().as_secs_f64() * 1e3
    );

    println!(
        "\n== memory plan (memory from {})",
        if ctx.is_vulkan() {
            "gpu-allocator on wgpu's VkDevice"
        } else {
            "plain wgpu buffers"
        }
    );
    let plan = ctx.memory_plan();
    let table = ctx.device_description();
    for (i, heap) in table.memory.heaps.iter().enumerate() {
        println!("  heap {i}: {:>10}  {}", size(heap.size), heap.flags);
    }
    for (i, ty) in table.memory.types.iter().enumerate() {
        println!("  type {i}: heap {}  {}", ty.heap, ty.flags);
    }
    println!(
        "  uma={} bar={} arena type {} (heap {}), upload type {}, readback type {}",
        plan.uma, plan.bar, plan.arena_type, plan.arena_heap, plan.upload_type, plan.readback_type
    );
    for reason in &plan.reasons {
        println!("  - {reason}");
    }

    println!("\n== preallocation (like JAX: at the first allocation)");
    println!(
        "  config: preallocate={} fraction={} allocator={}; largest array {}",
        config.preallocate,
        config.mem_fraction,
        match config.allocator {
            AllocatorKind::Bfc => "bfc",
            AllocatorKind::Platform => "platform",
        },
        size(ctx.max_array_bytes())
    );
    let before = ctx.memory_stats();
    println!(
        "  before: pool_bytes={} regions={}",
        before.pool_bytes.unwrap_or(0),
        before.num_regions
    );
    let t = Instant::now();
    let x = ctx.device_put(&(0..1024).map(|i| i as f32).collect::<Vec<_>>(), &[32, 32])?;
    let first = t.elapsed();
    let after = ctx.memory_stats();
    println!(
        "  first allocation took {:.2} ms (reservation {:.2} ms): pool_bytes={} ({}) in {} region{}, bytes_limit={}",
        first.as_secs_f64() * 1e3,
        ctx.reserve_duration().unwrap_or_default().as_secs_f64() * 1e3,
        after.pool_bytes.unwrap_or(0),
        size(after.pool_bytes.unwrap_or(0)),
        after.num_regions,
        if after.num_regions == 1 { "" } else { "s" },
        after.bytes_limit.map_or("none".to_string(), size)
    );

    println!("\n== transfers");
    let back = ctx.device_get(&x)?;
    println!(
        "  device_put/device_get of {:?} f32: round trip ok = {}",
        x.shape(),
        back[1023] == 1023.0
    );
    let small: Vec<Vec<u32>> = (0..10_000u32).map(|i| vec![i; 1024]).collect();
    let t = Instant::now();
    let mut batch = ctx.upload_batch();
    let pending: Vec<_> = small
        .iter()
        .map(|v| batch.put(v, &[v.len()]))
        .collect::<Result<_, _>>()?;
    let arrays = batch.finish()?.take_all(pending)?;
    ctx.synchronize()?;
    println!(
        "  batch of {} arrays of 4 KiB: {:.2} µs/array",
        arrays.len(),
        t.elapsed().as_secs_f64() * 1e6 / arrays.len() as f64
    );
    let refs: Vec<_> = arrays.iter().collect();
    let t = Instant::now();
    let all = ctx.device_get_many(&refs)?;
    println!(
        "  device_get_many of the same: {:.2} µs/array, intact = {}",
        t.elapsed().as_secs_f64() * 1e6 / all.len() as f64,
        all.iter().zip(&small).all(|(a, b)| a == b)
    );
    println!(
        "  transfer stats: {}",
        serde_json::to_string(&ctx.transfer_stats())?
    );

    println!("\n== transfer guard (as jax.transfer_guard)");
    {
        let _guard = TransferGuard::scoped(TransferGuardLevel::Disallow);
        match x.to_vec() {
            Ok(_) => println!("  implicit transfer passed?!"),
            Err(e) => println!("  implicit x.to_vec() under disallow: {e}"),
        }
        println!(
            "  explicit device_get under disallow: {} values",
            ctx.device_get(&x)?.len()
        );
    }

    println!("\n== your own kernel, and a sequence (many ops, one submission)");
    let scale = ctx.kernel(
        "@group(0) @binding(0) var<uniform> factor: f32;
         @group(0) @binding(1) var<storage, read_write> a: array<f32>;
         @compute @workgroup_size(64)
         fn main(@builtin(global_invocation_id) i: vec3<u32>) {
             if (i.x < arrayLength(&a)) { a[i.x] = a[i.x] * factor; }
         }",
        "main",
    )?;
    let mut s = ctx.sequence();
    let mut v = s.put(&[1.0f32, 2.0, 3.0, 4.0], &[4])?;
    s.launch(&scale)
        .params(&10.0f32)
        .arg_mut(&mut v)
        .grid_for(4)
        .run()?;
    let v = s.dynamic_update_slice(v, &[0.5f32][..], &[0])?;
    let steps = s.len();
    s.submit()?;
    println!(
        "  {steps} steps in one submission: {:?} (kernel bindings: {})",
        ctx.device_get(&v)?,
        scale
            .signature()
            .storage
            .iter()
            .map(|b| b.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );

    println!("\n== memory kinds (as JAX's device and pinned_host)");
    let moved = ctx.offload(ctx.device_put(&[3.0f32; 1 << 16], &[1 << 16])?)?;
    let host = ctx.memory_stats_of(MemoryKind::PinnedHost);
    println!(
        "  offloaded 256 KiB to {}: {} B of pinned host memory in use, limit {}",
        moved.memory_kind(),
        host.as_ref().map_or(0, |s| s.bytes_in_use),
        host.as_ref()
            .and_then(|s| s.bytes_limit)
            .map_or("none".to_string(), size)
    );
    let back = ctx.prefetch(moved)?;
    println!(
        "  prefetched back to {}: intact = {}",
        back.memory_kind(),
        ctx.device_get(&back)?.iter().all(|&v| v == 3.0)
    );
    drop(back);

    println!("\n== memory stats (XLA's keys)");
    let stats = ctx.memory_stats();
    println!("{}", serde_json::to_string_pretty(&stats)?);
    drop(arrays);
    drop(v);
    drop(x);
    ctx.synchronize()?;
    println!(
        "\nafter dropping everything: bytes_in_use={} (memory stays reserved: pool_bytes={})",
        ctx.memory_stats().bytes_in_use,
        ctx.memory_stats().pool_bytes.unwrap_or(0)
    );
    Ok(())
}
