//! Transfer benchmark: gpu-arena against wgpu's own ways of moving data, side by side in one run.
//!
//! ```text
//! cargo run --release --example bench_transfers -- [--json] [--size-mib N] [--arrays N] [--iters N] [--d2d-mib N] [--kind-mib N]
//! cargo run --release --example bench_transfers -- --help
//! ```
//! Cases (each the median of `--iters` synchronized runs):
//! 1. `small_uploads`: `--arrays` (10,000) uploads of 4 KiB arrays: a gpu-arena batch vs
//!    `queue.write_buffer` per array then one submit (`write_buffer_one_submit`) vs
//!    `write_buffer` + submit + wait per array (`write_buffer_submit_wait_each`) vs
//!    `wgpu::util::StagingBelt` (`staging_belt`), and the same arrays as single `device_put`s
//!    in a loop then one wait (`device_put_each`, whose row carries `ratio_to_batch`: goal
//!    ≤ 1.5). Peers write into one preallocated buffer; gpu-arena also allocates every array
//!    from its arena.
//! 2. `large_upload` / `large_readback`: one array of `--size-mib` (1024) MiB: `device_put` /
//!    `device_get` vs `queue.write_buffer` (`raw_write_buffer`) / copy to a `MAP_READ` buffer and
//!    `map_async` (`raw_map_read`); `device_get_into` a reused host buffer (`gpu-arena-into`,
//!    whose row carries `speedup_over_device_get`: a fresh `Vec` costs its page faults).
//! 3. `device_to_device`: one array of `--d2d-mib` (256) MiB from one context to a second one
//!    (on one GPU, a second device on the same adapter): `device_put_from`, pipelined through
//!    both staging pools or one `memcpy` between mappings on UMA, vs `device_get` then
//!    `device_put` through a host `Vec` (`via_host_vec`). The gpu-arena row carries the ratio
//!    (`speedup_over_via_host_vec`).
//! 4. `memory_kinds`: one array of `--kind-mib` (64) MiB offloaded to pinned host memory and
//!    prefetched back (`gpu-arena`: `Context::offload` then `Context::prefetch`, GPU copies)
//!    vs the host link's own round trip of the same bytes on the same path (`put_get_into`:
//!    `device_put` then `device_get_into` a reused buffer). The gpu-arena row carries
//!    `ratio_to_host_link` (its bandwidth over the host link's; goal ≥ 0.8).
//!
//! With `--json`, one JSON object per line: `case`, `method`, `seconds`, and `us_per_array` or
//! `gbps`. Without it, a table with ratios against gpu-arena.

use gpu_arena::{wgpu, ArenaConfig, Context};
use lexopt::prelude::*;
use serde_json::json;
use std::time::{Duration, Instant};

const ARRAY_BYTES: usize = 4096;

#[path = "flags/mod.rs"]
mod flags;

/// The largest `--size-mib` and `--d2d-mib` taken: what an example allocates at most.
const MAX_SIZE_MIB: usize = (flags::MAX_ALLOCATION_BYTES >> 20) as usize;

/// The largest `--iters`: bounds the run's time.
const MAX_ITERS: usize = 1000;

const USAGE: &str =
    "usage: bench_transfers [--json] [--size-mib N] [--arrays N] [--iters N] [--d2d-mib N] [--kind-mib N]

gpu-arena's transfers against wgpu's own ways of moving data, side by side.
  --json          one JSON object per case and method instead of a table
  --size-mib N    the large upload and readback, in MiB (default 1024)
  --arrays N      how many 4 KiB arrays the small-uploads case uploads (default 10000)
  --iters N       synchronized runs per case; the median is reported (default 5)
  --d2d-mib N     the array copied between two contexts, in MiB (default 256)
  --kind-mib N    the array offloaded to pinned host memory and back, in MiB (default 64)
  -h, --help      this text";

struct Args {
    json: bool,
    size_mib: usize,
    arrays: usize,
    iters: usize,
    d2d_mib: usize,
    kind_mib: usize,
}

fn parse_args() -> Args {
    flags::parse_or_exit(USAGE, |parser| {
        let mut args = Args {
            json: false,
            size_mib: 1024,
            arrays: 10_000,
            iters: 5,
            d2d_mib: 256,
            kind_mib: 64,
        };
        while let Some(arg) = parser.next()? {
            match arg {
                Long("json") => args.json = true,
                Long("size-mib") => {
                    args.size_mib = flags::in_range(parser, "size-mib", 1..=MAX_SIZE_MIB)?
                }
                Long("arrays") => args.arrays = flags::at_least_one(parser, "arrays")?,
                Long("iters") => args.iters = flags::in_range(parser, "iters", 1..=MAX_ITERS)?,
                Long("d2d-mib") => {
                    args.d2d_mib = flags::in_range(parser, "d2d-mib", 1..=MAX_SIZE_MIB)?
                }
                Long("kind-mib") => {
                    args.kind_mib = flags::in_range(parser, "kind-mib", 1..=MAX_SIZE_MIB)?
                }
                // Passed by `cargo bench` to every target it runs.
                Long("bench") => {}
                Short('h') | Long("help") => return Ok(None),
                _ => return Err(arg.unexpected()),
            }
        }
        // The small arrays are held on the host and, uploaded, on the device.
        flags::bounded_bytes(
            "--arrays of 4 KiB",
            &[args.arrays as u64, ARRAY_BYTES as u64],
        )?;
        Ok(Some(args))
    })
}

/// One measured row of the report.
struct Row {
    case: &'static str,
    method: &'static str,
    seconds: f64,
    /// (unit name, value)
    figure: (&'static str, f64),
}

/// Times bodies side by side and keeps the rows.
struct Bench {
    iters: usize,
    rows: Vec<Row>,
}

/// The figure a row reports, from its median seconds.
#[derive(Clone, Copy)]
enum Figure {
    /// Microseconds per array, for this many arrays.
    PerArray(usize),
    /// GB/s, for this many bytes.
    Bandwidth(usize),
}

impl Bench {
    /// Runs `body` `iters` times (iteration index given), timing each run, and records the
    /// median. `body` must leave the GPU idle (synchronize) before it returns.
    fn run(
        &mut self,
        case: &'static str,
        method: &'static str,
        figure: Figure,
        mut body: impl FnMut(usize) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let mut samples: Vec<Duration> = Vec::with_capacity(self.iters);
        for i in 0..self.iters {
            let start = Instant::now();
            body(i)?;
            samples.push(start.elapsed());
        }
        samples.sort();
        let seconds = samples[samples.len() / 2].as_secs_f64();
        self.push(case, method, figure, seconds);
        Ok(())
    }

    fn push(&mut self, case: &'static str, method: &'static str, figure: Figure, seconds: f64) {
        let figure = match figure {
            Figure::PerArray(n) => ("us_per_array", seconds * 1e6 / n as f64),
            Figure::Bandwidth(bytes) => ("gbps", bytes as f64 / seconds / 1e9),
        };
        self.rows.push(Row {
            case,
            method,
            seconds,
            figure,
        });
    }
}

fn wait(device: &wgpu::Device) {
    device
        .poll(wgpu::PollType::wait_indefinitely())
        .expect("device lost while waiting");
}

fn main() -> anyhow::Result<()> {
    let args = parse_args();
    let ctx = Context::new(ArenaConfig::from_env()?)?;
    let device = ctx.device().clone();
    let queue = ctx.queue().clone();
    let mut bench = Bench {
        iters: args.iters,
        rows: Vec::new(),
    };
    if !args.json {
        println!(
            "adapter: {} ({}); arena memory from {}",
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
    let per_array = Figure::PerArray(n);

    bench.run("small_uploads", "gpu-arena", per_array, |i| {
        let mut batch = ctx.upload_batch();
        let pending: Vec<_> = host
            .iter()
            .map(|h| batch.put(h, &[ARRAY_BYTES]))
            .collect::<Result<_, _>>()?;
        let arrays = batch.finish()?.take_all(pending)?;
        ctx.synchronize()?;
        if i == 0 {
            // Checked once; the readback is part of this one sample only.
            let last = ctx.device_get(arrays.last().expect("at least one array"))?;
            anyhow::ensure!(last == host[n - 1], "gpu-arena batch corrupted data");
        }
        Ok(())
    })?;

    // The same arrays as single `device_put`s in a loop, then one wait: on the staging path
    // they go with the context's gathered ops (staged in the batch's own staging, a
    // submission per 4 MiB), against the batch above.
    bench.run("small_uploads", "device_put_each", per_array, |i| {
        let arrays = host
            .iter()
            .map(|h| ctx.device_put(h, &[ARRAY_BYTES]))
            .collect::<Result<Vec<_>, _>>()?;
        ctx.synchronize()?;
        if i == 0 {
            let last = ctx.device_get(arrays.last().expect("at least one array"))?;
            anyhow::ensure!(last == host[n - 1], "single device_puts corrupted data");
        }
        Ok(())
    })?;

    let target = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("bench target"),
        size: (n * ARRAY_BYTES) as u64,
        usage: wgpu::BufferUsages::STORAGE
            | wgpu::BufferUsages::COPY_DST
            | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    bench.run(
        "small_uploads",
        "write_buffer_one_submit",
        per_array,
        |_| {
            for (i, h) in host.iter().enumerate() {
                queue.write_buffer(&target, (i * ARRAY_BYTES) as u64, h);
            }
            queue.submit([]);
            wait(&device);
            Ok(())
        },
    )?;

    // Per-array submit+wait is slow: one pass over at most 2,000 arrays, scaled to `n`.
    let each = n.min(2000);
    let start = Instant::now();
    for (i, h) in host.iter().take(each).enumerate() {
        queue.write_buffer(&target, (i * ARRAY_BYTES) as u64, h);
        queue.submit([]);
        wait(&device);
    }
    let scaled = start.elapsed().as_secs_f64() * n as f64 / each as f64;
    bench.push(
        "small_uploads",
        "write_buffer_submit_wait_each",
        per_array,
        scaled,
    );

    let mut belt = wgpu::util::StagingBelt::new(device.clone(), 4 << 20);
    bench.run("small_uploads", "staging_belt", per_array, |_| {
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
        Ok(())
    })?;
    drop(target);

    // ---- large transfers -------------------------------------------------------------------
    let bytes = (args.size_mib << 20).min(ctx.max_array_bytes() as usize);
    let big: Vec<u8> = (0..bytes).map(|i| (i * 7 + (i >> 12)) as u8).collect();
    let bandwidth = Figure::Bandwidth(bytes);

    let mut array = None;
    bench.run("large_upload", "gpu-arena", bandwidth, |_| {
        drop(array.take()); // the previous iteration's array: its memory is reused
        array = Some(ctx.device_put(&big, &[bytes])?);
        ctx.synchronize()?;
        Ok(())
    })?;
    let array = array.expect("iters >= 1");
    bench.run("large_readback", "gpu-arena", bandwidth, |_| {
        let back = ctx.device_get(&array)?;
        anyhow::ensure!(
            back.len() == bytes
                && back[bytes - 1] == big[bytes - 1]
                && back[bytes / 3] == big[bytes / 3],
            "gpu-arena readback corrupted data"
        );
        Ok(())
    })?;
    // Into memory the caller owns, reused: touched once here (not timed), as a buffer that a
    // loop reads into again and again is.
    let mut into = vec![1u8; bytes];
    bench.run("large_readback", "gpu-arena-into", bandwidth, |_| {
        ctx.device_get_into(&array, &mut into)?;
        anyhow::ensure!(
            into[bytes - 1] == big[bytes - 1] && into[bytes / 3] == big[bytes / 3],
            "gpu-arena readback into caller memory corrupted data"
        );
        Ok(())
    })?;
    drop((array, into));

    let raw = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("bench raw"),
        size: bytes as u64,
        usage: wgpu::BufferUsages::STORAGE
            | wgpu::BufferUsages::COPY_DST
            | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    bench.run("large_upload", "raw_write_buffer", bandwidth, |_| {
        queue.write_buffer(&raw, 0, &big);
        queue.submit([]);
        wait(&device);
        Ok(())
    })?;

    let readback = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("bench readback"),
        size: bytes as u64,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    bench.run("large_readback", "raw_map_read", bandwidth, |_| {
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
        anyhow::ensure!(
            host_copy[bytes - 1] == big[bytes - 1],
            "raw readback corrupted data"
        );
        Ok(())
    })?;
    drop((raw, readback, big));

    // ---- device to device ------------------------------------------------------------------
    let other = Context::new(ArenaConfig::from_env()?)?;
    let d2d_bytes =
        (args.d2d_mib << 20).min(ctx.max_array_bytes().min(other.max_array_bytes()) as usize);
    let d2d_data: Vec<u8> = (0..d2d_bytes).map(|i| (i * 13 + (i >> 10)) as u8).collect();
    let source = ctx.device_put(&d2d_data, &[d2d_bytes])?;
    ctx.synchronize()?;
    let d2d_bandwidth = Figure::Bandwidth(d2d_bytes);
    let mut copied = None;
    for method in ["gpu-arena", "via_host_vec"] {
        bench.run("device_to_device", method, d2d_bandwidth, |_| {
            drop(copied.take()); // the previous iteration's copy: its memory is reused
            copied = Some(if method == "gpu-arena" {
                other.device_put_from(&source)?
            } else {
                other.device_put(&ctx.device_get(&source)?, &[d2d_bytes])?
            });
            other.synchronize()?;
            Ok(())
        })?;
        let last = copied.as_ref().expect("iters >= 1");
        anyhow::ensure!(
            other.device_get(last)? == d2d_data,
            "{method}: the device-to-device copy differs"
        );
    }
    drop((source, copied, other, d2d_data));

    // ---- memory kinds ----------------------------------------------------------------------
    let kind_bytes = (args.kind_mib << 20).min(ctx.max_array_bytes() as usize);
    let kind_data: Vec<u8> = (0..kind_bytes).map(|i| (i * 5 + (i >> 9)) as u8).collect();
    let round_trip = Figure::Bandwidth(2 * kind_bytes);
    let mut moving = Some(ctx.device_put(&kind_data, &[kind_bytes])?);
    ctx.synchronize()?;
    bench.run("memory_kinds", "gpu-arena", round_trip, |_| {
        let host = ctx.offload(moving.take().expect("put back each run"))?;
        moving = Some(ctx.prefetch(host)?);
        ctx.synchronize()?;
        Ok(())
    })?;
    anyhow::ensure!(
        ctx.device_get(moving.as_ref().expect("kept"))? == kind_data,
        "offload and prefetch changed the data"
    );
    drop(moving);
    let mut sink = vec![0u8; kind_bytes];
    bench.run("memory_kinds", "put_get_into", round_trip, |_| {
        let array = ctx.device_put(&kind_data, &[kind_bytes])?;
        ctx.device_get_into(&array, &mut sink)?;
        Ok(())
    })?;
    anyhow::ensure!(
        sink == kind_data,
        "the host link's round trip changed the data"
    );

    let rows = bench.rows;
    let kind_ratio = {
        let gbps = |method: &str| {
            rows.iter()
                .find(|r| r.case == "memory_kinds" && r.method == method)
                .map_or(f64::NAN, |r| r.figure.1)
        };
        gbps("gpu-arena") / gbps("put_get_into")
    };
    let d2d_speedup = {
        let seconds = |method: &str| {
            rows.iter()
                .find(|r| r.case == "device_to_device" && r.method == method)
                .map_or(f64::NAN, |r| r.seconds)
        };
        seconds("via_host_vec") / seconds("gpu-arena")
    };
    let put_each_ratio = {
        let seconds = |method: &str| {
            rows.iter()
                .find(|r| r.case == "small_uploads" && r.method == method)
                .map_or(f64::NAN, |r| r.seconds)
        };
        seconds("device_put_each") / seconds("gpu-arena")
    };
    let into_speedup = {
        let seconds = |method: &str| {
            rows.iter()
                .find(|r| r.case == "large_readback" && r.method == method)
                .map_or(f64::NAN, |r| r.seconds)
        };
        seconds("gpu-arena") / seconds("gpu-arena-into")
    };

    // ---- report ----------------------------------------------------------------------------
    if args.json {
        for r in &rows {
            let mut o = json!({"case": r.case, "method": r.method, "seconds": r.seconds});
            o[r.figure.0] = r.figure.1.into();
            if r.case == "device_to_device" && r.method == "gpu-arena" {
                o["speedup_over_via_host_vec"] = d2d_speedup.into();
            }
            if r.case == "small_uploads" && r.method == "device_put_each" {
                o["ratio_to_batch"] = put_each_ratio.into();
            }
            if r.case == "large_readback" && r.method == "gpu-arena-into" {
                o["speedup_over_device_get"] = into_speedup.into();
            }
            if r.case == "memory_kinds" && r.method == "gpu-arena" {
                o["ratio_to_host_link"] = kind_ratio.into();
            }
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
        "(figures from {} MiB and {} array{} of 4 KiB, median of {} run{})",
        bytes >> 20,
        n,
        if n == 1 { "" } else { "s" },
        args.iters,
        if args.iters == 1 { "" } else { "s" }
    );
    println!(
        "small_uploads: single device_puts then one wait {put_each_ratio:.2}x the batch's time (goal <= 1.5x)"
    );
    println!(
        "large_readback: device_get_into a reused buffer at {into_speedup:.2}x device_get's speed"
    );
    println!(
        "device_to_device ({} MiB): gpu-arena at {d2d_speedup:.2}x via_host_vec's speed",
        d2d_bytes >> 20
    );
    println!(
        "memory_kinds ({} MiB): offload + prefetch at {kind_ratio:.2}x the host link's round trip bandwidth (goal >= 0.8x)",
        kind_bytes >> 20
    );
    Ok(())
}
