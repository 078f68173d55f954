//! A data-parallel step over several devices: the batch is sharded along its rows (one upload
//! batch per device), the weights are put on the first device and copied device to device to
//! the others, each device runs the same kernel on its shard (`y = relu(x · w)`), and the
//! results are gathered and checked against the CPU. Then a device-to-device copy is timed
//! against the naive route through a host `Vec`.
//!
//! `cargo run --release --example multi_device -- [--contexts N] [--rows R] [--cols C] [--mib M]`
//!
//! With one GPU (or lavapipe) the contexts are opened on the same adapter, each a device of its
//! own with its own arena; with several, they go round the adapters of `gpu_arena::devices`.

use gpu_arena::arena::Bytes;
use gpu_arena::{bytemuck, devices, gather, shard, ArenaConfig, Context, DeviceArray};
use lexopt::prelude::*;
use std::time::Instant;

const MATVEC_RELU: &str = r#"
struct Params { rows: u32, cols: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x >= p.rows) { return; }
    var acc = 0.0;
    for (var j = 0u; j < p.cols; j++) { acc += x[id.x * p.cols + j] * w[j]; }
    y[id.x] = max(acc, 0.0);
}
"#;

/// Runs of each device-to-device copy; the fastest is reported.
const TIMED_RUNS: usize = 3;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[bytemuck(crate = "gpu_arena::bytemuck")]
struct Params {
    rows: u32,
    cols: u32,
}

const USAGE: &str = "usage: multi_device [--contexts N] [--rows R] [--cols C] [--mib M]

A data-parallel step over several devices, checked against the CPU, and a timed device-to-device copy.
  --contexts N   contexts to open, round the device list (default 2)
  --rows R       rows of the sharded batch (default 100003)
  --cols C       columns of the batch and length of the weights (default 64)
  --mib M        MiB copied between the first two contexts; 0 skips it (default 64; with
                 --contexts 1 there is no copy, and a --mib above 0 is refused)
  -h, --help     this text";

/// Largest value a size flag takes (keeps the size arithmetic far from overflow); `--rows`
/// times `--cols` is bounded too ([`flags::bounded_bytes`]).
const MAX_FLAG_VALUE: usize = 1 << 30;

/// The largest `--mib`: what an example allocates at most.
const MAX_MIB: usize = (flags::MAX_ALLOCATION_BYTES >> 20) as usize;

struct Args {
    contexts: usize,
    rows: usize,
    cols: usize,
    mib: usize,
}

#[path = "flags/mod.rs"]
mod flags;

fn parse_args() -> Args {
    flags::parse_or_exit(USAGE, |parser| {
        let mut args = Args {
            contexts: 2,
            rows: 100_003,
            cols: 64,
            mib: 64,
        };
        let mut mib_given = false;
        while let Some(arg) = parser.next()? {
            match arg {
                Long("contexts") => args.contexts = flags::in_range(parser, "contexts", 1..=64)?,
                Long("rows") => args.rows = flags::in_range(parser, "rows", 1..=MAX_FLAG_VALUE)?,
                Long("cols") => args.cols = flags::in_range(parser, "cols", 1..=MAX_FLAG_VALUE)?,
                Long("mib") => {
                    args.mib = flags::in_range(parser, "mib", 0..=MAX_MIB)?;
                    mib_given = true;
                }
                Short('h') | Long("help") => return Ok(None),
                _ => return Err(arg.unexpected()),
            }
        }
        if args.contexts < 2 && args.mib > 0 && mib_given {
            return Err(
                "--mib copies between two contexts: give --contexts 2 or more, or --mib 0".into(),
            );
        }
        // The batch is held on the host (and its shards on the devices); before, 2^30 × 2^30
        // passed the ranges and aborted on a 256 GiB allocation.
        flags::bounded_bytes(
            "--rows × --cols floats",
            &[args.rows as u64, args.cols as u64, 4],
        )?;
        Ok(Some(args))
    })
}

fn main() -> anyhow::Result<()> {
    let args = parse_args();
    let config = ArenaConfig::from_env()?;
    let list = devices(&config)?;
    println!("devices:");
    for device in &list {
        println!("  {device}");
    }
    // One context per device, going round the list when asked for more contexts than devices.
    let contexts: Vec<Context> = (0..args.contexts)
        .map(|i| Context::on_device(&list[i % list.len()], config.clone()))
        .collect::<Result<_, _>>()?;

    // ---- a data-parallel step ----------------------------------------------------------------
    let (rows, cols) = (args.rows, args.cols);
    let x: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 7) % 13) as f32 - 6.0)
        .collect();
    let w: Vec<f32> = (0..cols).map(|j| (j % 5) as f32 - 2.0).collect();
    let started = Instant::now();
    let x_shards = shard(&contexts, &x, &[rows, cols])?;
    // The weights go to the first device and from there to the others, device to device.
    let w_first = contexts[0].device_put(&w, &[cols])?;
    let mut weights: Vec<DeviceArray<f32>> = contexts[1..]
        .iter()
        .map(|ctx| w_first.copy_to(ctx))
        .collect::<Result<_, _>>()?;
    weights.insert(0, w_first);
    let mut outputs = Vec::with_capacity(contexts.len());
    for ((ctx, x_shard), w) in contexts.iter().zip(&x_shards).zip(&weights) {
        let kernel = ctx.kernel(MATVEC_RELU, "main")?; // compiled once per context
        let shard_rows = x_shard.shape()[0];
        let mut y = ctx.zeros::<f32>(&[shard_rows])?;
        ctx.launch(&kernel)
            .arg(x_shard)
            .arg(w)
            .arg_mut(&mut y)
            .params(&Params {
                rows: u32::try_from(shard_rows)?,
                cols: u32::try_from(cols)?,
            })
            .grid_for(shard_rows as u64)
            .run()?; // the devices run side by side: nothing waits until the gather
        outputs.push(y);
    }
    let (y, shape) = gather(&contexts, &outputs)?;
    let took = started.elapsed();
    anyhow::ensure!(shape == [rows], "gathered shape {shape:?}");
    let wrong = (0..rows)
        .filter(|&r| {
            let acc: f32 = (0..cols).map(|j| x[r * cols + j] * w[j]).sum();
            y[r] != acc.max(0.0)
        })
        .count();
    println!(
        "data-parallel step: {rows} x {cols} over {} context{} in {:.2} ms (shard, copy weights, \
         kernels, gather), {wrong} wrong",
        contexts.len(),
        if contexts.len() == 1 { "" } else { "s" },
        took.as_secs_f64() * 1e3
    );
    anyhow::ensure!(wrong == 0, "{wrong} rows differ from the CPU");
    for ctx in &contexts {
        let stats = ctx.memory_stats();
        let moved = ctx.transfer_stats();
        println!(
            "  {ctx:?}: {} allocation{} made, {} in use (peak {}), {} reserved; device-to-device {} \
             transfer{}, {} bytes",
            stats.num_allocs,
            if stats.num_allocs == 1 { "" } else { "s" },
            Bytes(stats.bytes_in_use),
            Bytes(stats.peak_bytes_in_use),
            Bytes(stats.bytes_reserved),
            moved.device_to_device.explicit.count,
            if moved.device_to_device.explicit.count == 1 {
                ""
            } else {
                "s"
            },
            moved.device_to_device.explicit.bytes
        );
    }
    drop((x_shards, weights, outputs));

    // ---- device-to-device bandwidth ----------------------------------------------------------
    if args.contexts >= 2 && args.mib > 0 {
        let (a, b) = (&contexts[0], &contexts[1]);
        let bytes = (args.mib << 20).min(a.max_array_bytes().min(b.max_array_bytes()) as usize);
        let data: Vec<u8> = (0..bytes).map(|i| (i * 31 + (i >> 11)) as u8).collect();
        let source = a.device_put(&data, &[bytes])?;
        a.synchronize()?;
        // The best of a few runs: the first touches fresh arena pages, later ones reuse them.
        let time = |copy: &dyn Fn() -> anyhow::Result<DeviceArray<u8>>| -> anyhow::Result<f64> {
            let mut best = f64::INFINITY;
            for _ in 0..TIMED_RUNS {
                let started = Instant::now();
                let copied = copy()?;
                b.synchronize()?;
                best = best.min(started.elapsed().as_secs_f64());
                anyhow::ensure!(b.device_get(&copied)? == data, "the copy differs");
            }
            Ok(best)
        };
        let pipelined = time(&|| Ok(b.device_put_from(&source)?))?;
        let via_host = time(&|| Ok(b.device_put(&a.device_get(&source)?, &[bytes])?))?;
        let gbps = |seconds: f64| bytes as f64 / seconds / 1e9;
        println!(
            "device to device, {} MiB: device_put_from {:.2} GB/s, device_get + device_put {:.2} \
             GB/s ({:.2}x)",
            bytes >> 20,
            gbps(pipelined),
            gbps(via_host),
            via_host / pipelined
        );
    }
    Ok(())
}
