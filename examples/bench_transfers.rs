//! Transfer benchmark: gpu-arena against wgpu's own ways of moving data, side by side in one run.
//!
//! ```text
//! cargo run --release --example bench_transfers -- [--json] [--size-mib N] [--arrays N] [--iters N]
//! ```
//! Cases (each the median of `--iters` synchronized runs):
//! 1. `small_uploads`: `--arrays` (10,000) uploads of 4 KiB arrays: a gpu-arena batch vs
//!    `queue.write_buffer` per array then one submit (`write_buffer_one_submit`) vs
//!    `write_buffer` + submit + wait per array (`write_buffer_submit_wait_each`) vs
//!    `wgpu::util::StagingBelt` (`staging_belt`). Peers write into one preallocated buffer;
//!    gpu-arena also allocates every array from its arena.
//! 2. `large_upload` / `large_readback`: one array of `--size-mib` (1024) MiB: `device_put` /
//!    `device_get` vs `queue.write_buffer` (`raw_write_buffer`) / copy to a `MAP_READ` buffer and
//!    `map_async` (`raw_map_read`).
//!
//! With `--json`, one JSON object per line: `case`, `method`, `seconds`, and `us_per_array` or
//! `gbps`. Without it, a table with ratios against gpu-arena.

use gpu_arena::{ArenaConfig, Context};
use serde_json::json;
use std::time::{Duration, Instant};

const ARRAY_BYTES: usize = 4096;

struct Args {
    json: bool,
    size_mib: usize,
    arrays: usize,
    iters: usize,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        json: false,
        size_mib: 1024,
        arrays: 10_000,
        iters: 5,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| -> anyhow::Result<usize> {
            it.next()
                .ok_or_else(|| anyhow::anyhow!("{name} needs a value"))?
                .parse()
                .map_err(|e| anyhow::anyhow!("{name}: {e}"))
        };
        match a.as_str() {
            "--json" => args.json = true,
            "--size-mib" => args.size_mib = value("--size-mib")?,
            "--arrays" => args.arrays = value("--arrays")?,
            "--iters" => args.iters = value("--iters")?.max(1),
            "--bench" => {} // passed by `cargo bench`
            other => anyhow::bail!("unknown argument {other}"),
        }
    }
    Ok(args)
}

fn median(mut samples: Vec<Duration>) -> f64 {
    samples.sort();
    samples[samples.len() / 2].as_secs_f64()
}

fn wait(device: &wgpu::Device) {
    device
        .poll(wgpu::PollType::wait_indefinitely())
        .expect("device lost while waiting");
}

struct Row {
    case: &'static str,
    method: &'static str,
    seconds: f64,
    /// (unit name, value)
    figure: (&'static str, f64),
}

fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let ctx = Context::new(ArenaConfig::from_env()?)?;
    let device = ctx.device().clone();
    let queue = ctx.queue().clone();
    let mut rows = Vec::new();
    if !args.json {
        println!(
            "adapter: {} ({:?}); arena memory from {}",
            ctx.adapter_info().name,
            ctx.adapter_info().backend,
            if ctx.is_vulkan() {
                "gpu-allocator"
            } else {
                "wgpu"
            }
        );
    }

    // ---- small uploads -------------------------------------------------------------------
    let n = args.arrays;
    let host: Vec<Vec<u8>> = (0..n)
        .map(|i| (0..ARRAY_BYTES).map(|j| (i * 31 + j) as u8).collect())
        .collect();
    let per_array = |d: f64| d * 1e6 / n as f64;

    let mut samples = Vec::new();
    for _ in 0..args.iters {
        let start = Instant::now();
        let mut batch = ctx.upload_batch();
        let pending: Vec<_> = host
            .iter()
            .map(|h| batch.put(h, &[ARRAY_BYTES]))
            .collect::<Result<_, _>>()?;
        let mut done = batch.finish()?;
        let arrays: Vec<_> = pending
            .into_iter()
            .map(|p| done.take(p))
            .collect::<Result<_, _>>()?;
        ctx.synchronize()?;
        samples.push(start.elapsed());
        // Check the data once, outside the timing.
        if samples.len() == 1 {
            let last = ctx.device_get(arrays.last().expect("at least one array"))?;
            anyhow::ensure!(last == host[n - 1], "gpu-arena batch corrupted data");
        }
    }
    let s = median(samples);
    rows.push(Row {
        case: "small_uploads",
        method: "gpu-arena",
        seconds: s,
        figure: ("us_per_array", per_array(s)),
    });

    let target = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("bench target"),
        size: (n * ARRAY_BYTES) as u64,
        usage: wgpu::BufferUsages::STORAGE
            | wgpu::BufferUsages::COPY_DST
            | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    let mut samples = Vec::new();
    for _ in 0..args.iters {
        let start = Instant::now();
        for (i, h) in host.iter().enumerate() {
            queue.write_buffer(&target, (i * ARRAY_BYTES) as u64, h);
        }
        queue.submit([]);
        wait(&device);
        samples.push(start.elapsed());
    }
    let s = median(samples);
    rows.push(Row {
        case: "small_uploads",
        method: "write_buffer_one_submit",
        seconds: s,
        figure: ("us_per_array", per_array(s)),
    });

    let mut samples = Vec::new();
    // Per-array submit+wait is slow; one pass is representative.
    let each = n.min(2000);
    let start = Instant::now();
    for (i, h) in host.iter().take(each).enumerate() {
        queue.write_buffer(&target, (i * ARRAY_BYTES) as u64, h);
        queue.submit([]);
        wait(&device);
    }
    samples.push(start.elapsed() * (n as u32) / (each as u32));
    let s = median(samples);
    rows.push(Row {
        case: "small_uploads",
        method: "write_buffer_submit_wait_each",
        seconds: s,
        figure: ("us_per_array", per_array(s)),
    });

    let mut belt = wgpu::util::StagingBelt::new(device.clone(), 4 << 20);
    let mut samples = Vec::new();
    for _ in 0..args.iters {
        let start = Instant::now();
        let mut encoder = device.create_command_encoder(&Default::default());
        for (i, h) in host.iter().enumerate() {
            let mut view = belt.write_buffer(
                &mut encoder,
                &target,
                (i * ARRAY_BYTES) as u64,
                wgpu::BufferSize::new(ARRAY_BYTES as u64).expect("non-zero"),
            );
            view.copy_from_slice(h);
        }
        belt.finish();
        queue.submit([encoder.finish()]);
        belt.recall();
        wait(&device);
        samples.push(start.elapsed());
    }
    let s = median(samples);
    rows.push(Row {
        case: "small_uploads",
        method: "staging_belt",
        seconds: s,
        figure: ("us_per_array", per_array(s)),
    });
    drop(target);

    // ---- large transfers -------------------------------------------------------------------
    let bytes = (args.size_mib << 20).min(ctx.max_array_bytes() as usize);
    let big: Vec<u8> = (0..bytes).map(|i| (i * 7 + (i >> 12)) as u8).collect();
    let gbps = |s: f64| bytes as f64 / s / 1e9;

    let mut samples = Vec::new();
    let mut array = None;
    for _ in 0..args.iters {
        drop(array.take());
        ctx.synchronize()?;
        let start = Instant::now();
        let a = ctx.device_put(&big, &[bytes])?;
        ctx.synchronize()?;
        samples.push(start.elapsed());
        array = Some(a);
    }
    let s = median(samples);
    rows.push(Row {
        case: "large_upload",
        method: "gpu-arena",
        seconds: s,
        figure: ("gbps", gbps(s)),
    });
    let array = array.expect("iters >= 1");

    let mut samples = Vec::new();
    for _ in 0..args.iters {
        let start = Instant::now();
        let back = ctx.device_get(&array)?;
        samples.push(start.elapsed());
        anyhow::ensure!(
            back.len() == bytes
                && back[bytes - 1] == big[bytes - 1]
                && back[bytes / 3] == big[bytes / 3],
            "gpu-arena readback corrupted data"
        );
    }
    let s = median(samples);
    rows.push(Row {
        case: "large_readback",
        method: "gpu-arena",
        seconds: s,
        figure: ("gbps", gbps(s)),
    });
    drop(array);

    let raw = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("bench raw"),
        size: bytes as u64,
        usage: wgpu::BufferUsages::STORAGE
            | wgpu::BufferUsages::COPY_DST
            | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    let mut samples = Vec::new();
    for _ in 0..args.iters {
        let start = Instant::now();
        queue.write_buffer(&raw, 0, &big);
        queue.submit([]);
        wait(&device);
        samples.push(start.elapsed());
    }
    let s = median(samples);
    rows.push(Row {
        case: "large_upload",
        method: "raw_write_buffer",
        seconds: s,
        figure: ("gbps", gbps(s)),
    });

    let readback = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("bench readback"),
        size: bytes as u64,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut samples = Vec::new();
    for _ in 0..args.iters {
        let start = Instant::now();
        let mut encoder = device.create_command_encoder(&Default::default());
        encoder.copy_buffer_to_buffer(&raw, 0, &readback, 0, bytes as u64);
        queue.submit([encoder.finish()]);
        let slice = readback.slice(..);
        slice.map_async(wgpu::MapMode::Read, |r| r.expect("map_async failed"));
        wait(&device);
        let host_copy = slice
            .get_mapped_range()
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .to_vec();
        readback.unmap();
        samples.push(start.elapsed());
        anyhow::ensure!(
            host_copy[bytes - 1] == big[bytes - 1],
            "raw readback corrupted data"
        );
    }
    let s = median(samples);
    rows.push(Row {
        case: "large_readback",
        method: "raw_map_read",
        seconds: s,
        figure: ("gbps", gbps(s)),
    });

    // ---- report ----------------------------------------------------------------------------
    if args.json {
        for r in &rows {
            let mut o = json!({"case": r.case, "method": r.method, "seconds": r.seconds});
            o[r.figure.0] = r.figure.1.into();
            println!("{o}");
        }
        return Ok(());
    }
    println!(
        "{:<16} {:<30} {:>12} {:>14} {:>16}",
        "case", "method", "seconds", "figure", "vs gpu-arena"
    );
    for r in &rows {
        let ours = rows
            .iter()
            .find(|o| o.case == r.case && o.method == "gpu-arena")
            .expect("gpu-arena row per case");
        let ratio = if r.figure.0 == "gbps" {
            format!("{:.2}x bandwidth", r.figure.1 / ours.figure.1)
        } else {
            format!("{:.2}x time", r.seconds / ours.seconds)
        };
        println!(
            "{:<16} {:<30} {:>12.6} {:>10.3} {:<4} {:>16}",
            r.case,
            r.method,
            r.seconds,
            r.figure.1,
            if r.figure.0 == "gbps" { "GB/s" } else { "us" },
            ratio
        );
    }
    println!(
        "(figures from {} MiB and {} arrays of 4 KiB, median of {} runs)",
        bytes >> 20,
        n,
        args.iters
    );
    Ok(())
}
