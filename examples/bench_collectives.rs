//! all_reduce bandwidth under MPI: gpu-arena's device all-reduce against MPI on host vectors
//! and a naive device_get / all_reduce / device_put, side by side in one run.
//!
//! ```text
//! mpirun -np 2 target/release/examples/bench_collectives -- [--json] [--iters N] [--max-mib N]
//! GPU_ARENA_ZERO_COPY=0 mpirun -np 2 ...   # through the staging pool, as on discrete GPUs
//! ```
//! For f32 arrays of 4 KiB, 1 MiB and 64 MiB (those up to `--max-mib`), methods:
//! - `gpu-arena`: [`Collectives::all_reduce`] in place on a device array (pipelined);
//! - `mpi_host_vec`: rsmpi's `all_reduce_into` on host `Vec`s of the same bytes: the limit of
//!   this path (the anchor);
//! - `naive`: `device_get`, `all_reduce_into`, `device_put`, one after another.
//!
//!
//! Then the case `all_reduce_many`: 64 f32 arrays of 64 KiB (4 MiB in all; with `--max-mib`
//! below 4, 64 arrays of a 64th of it), reduced by
//! - `gpu-arena-fused`: one [`Collectives::all_reduce_many`] over the list;
//! - `gpu-arena-separate`: 64 [`Collectives::all_reduce`] calls, one per array;
//! - `gpu-arena-one-array`: one `all_reduce` of a single array of the list's total size (the
//!   bound fusion aims at);
//! - `mpi_host_vec`: MPI on one host vector of the total size;
//!
//! rows with `arrays` and `bytes` (the total).
//!
//! Each row is the median over `--iters` runs of the slowest rank's time (ranks start each
//! run together after a barrier), with `busbw_gbps` as nccl-tests define it: algbw × 2(N−1)/N;
//! `seconds_min` and `busbw_gbps_best` are the fastest run's (on a shared machine, ranks that
//! poll while another process holds the core lose whole scheduler slices, which the median
//! can catch and the fastest run does not).
//! Rows also carry `host_bytes`: the host buffers the method used (for gpu-arena, what
//! [`Collectives::host_bytes_peak`] measured). Rank 0 prints; without `--json`, a table with
//! the ratios gpu-arena / mpi_host_vec and gpu-arena / naive.

use gpu_arena::distributed::{self, mpi, Collectives, ReduceOp};
use gpu_arena::{Context, DeviceArray};
use lexopt::prelude::*;
use mpi::collective::SystemOperation;
use mpi::traits::*;
use serde_json::json;
use std::time::Instant;

#[path = "flags/mod.rs"]
mod flags;

const USAGE: &str = "usage: bench_collectives [--json] [--iters N] [--max-mib N]

all_reduce bandwidth of device arrays against MPI on host vectors, under mpirun.
  --json        one JSON object per size and method instead of a table
  --iters N     timed runs per size and method; the median is reported (default 20)
  --max-mib N   leave out sizes above N MiB (default 64: all of 4 KiB, 1 MiB, 64 MiB)
  -h, --help    this text";

/// The sizes of the issue: 4 KiB, 1 MiB and 64 MiB of f32.
const SIZES: [usize; 3] = [4 << 10, 1 << 20, 64 << 20];
/// The list of the `all_reduce_many` case: 64 arrays (a model's gradients, layer by layer)...
const MANY_ARRAYS: usize = 64;
/// ... of 64 KiB each (f32), at most.
const MANY_ARRAY_BYTES: usize = 64 << 10;

struct Args {
    json: bool,
    iters: usize,
    max_mib: usize,
}

fn parse_args() -> Args {
    flags::parse_or_exit(USAGE, |parser| {
        let mut args = Args {
            json: false,
            iters: 20,
            max_mib: 64,
        };
        while let Some(arg) = parser.next()? {
            match arg {
                Long("json") => args.json = true,
                Long("iters") => args.iters = flags::at_least_one(parser, "iters")?,
                Long("max-mib") => args.max_mib = flags::in_range(parser, "max-mib", 0..=64)?,
                Short('h') | Long("help") => return Ok(None),
                _ => return Err(arg.unexpected()),
            }
        }
        Ok(Some(args))
    })
}

/// The median and the fastest over runs of the slowest rank's seconds: each run starts after
/// a barrier.
fn time<C: Communicator>(
    world: &C,
    iters: usize,
    mut run: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<(f64, f64)> {
    run()?; // warm-up: first-touch of buffers, pipelines, MPI connections
    let mut times = Vec::with_capacity(iters);
    for _ in 0..iters {
        world.barrier();
        let started = Instant::now();
        run()?;
        let mine = started.elapsed().as_secs_f64();
        let mut slowest = 0.0f64;
        world.all_reduce_into(&mine, &mut slowest, SystemOperation::max());
        times.push(slowest);
    }
    times.sort_by(|a, b| a.total_cmp(b));
    Ok((times[times.len() / 2], times[0]))
}

fn main() -> anyhow::Result<()> {
    let args = parse_args();
    let universe = distributed::init()?;
    let world = universe.world();
    let ctx = distributed::abort_on_error(&world, Context::from_env());
    let group = Collectives::new(&ctx, &world);
    let (rank, ranks) = (group.rank(), group.size());
    let mut rows = Vec::new();
    for bytes in SIZES.into_iter().filter(|&b| b <= args.max_mib << 20) {
        let len = bytes / 4;
        let data: Vec<f32> = (0..len).map(|i| (i % 7) as f32 + rank as f32).collect();
        // gpu-arena: in place on a donated device array.
        let mut array: Option<DeviceArray<f32>> = Some(ctx.device_put(&data, &[len])?);
        let arena_seconds = time(&world, args.iters, || {
            let a = array.take().expect("put back after every run");
            array = Some(group.all_reduce(a, ReduceOp::Sum)?);
            ctx.synchronize()?;
            Ok(())
        })?;
        let arena_host = group.host_bytes_peak();
        drop(array);
        // mpi_host_vec: the anchor, MPI on host vectors of the same bytes.
        let mut recv = vec![0f32; len];
        let host_seconds = time(&world, args.iters, || {
            world.all_reduce_into(&data[..], &mut recv[..], SystemOperation::sum());
            Ok(())
        })?;
        drop(recv);
        // naive: device_get, all_reduce_into, device_put.
        let mut array: Option<DeviceArray<f32>> = Some(ctx.device_put(&data, &[len])?);
        let naive_seconds = time(&world, args.iters, || {
            let host = ctx.device_get(array.as_ref().expect("put back"))?;
            let mut reduced = vec![0f32; len];
            world.all_reduce_into(&host[..], &mut reduced[..], SystemOperation::sum());
            array = Some(ctx.device_put(&reduced, &[len])?);
            ctx.synchronize()?;
            Ok(())
        })?;
        drop(array);
        for (method, seconds, host_bytes) in [
            ("gpu-arena", arena_seconds, arena_host),
            ("mpi_host_vec", host_seconds, 2 * bytes as u64),
            ("naive", naive_seconds, 2 * bytes as u64),
        ] {
            let mut row = row(bytes, ranks, method, seconds, ctx.config().zero_copy);
            row["case"] = json!("all_reduce");
            row["host_bytes"] = json!(host_bytes);
            rows.push(row);
        }
    }
    let many = many_rows(&ctx, &group, &world, &args)?;
    if rank != 0 {
        return Ok(());
    }
    if args.json {
        for row in rows.iter().chain(&many) {
            println!("{row}");
        }
        return Ok(());
    }
    println!(
        "all_reduce of f32 on {ranks} rank{} ({}; {}), median of {} run{}",
        if ranks == 1 { "" } else { "s" },
        ctx.adapter_info().name,
        // Zero-copy where the arena is mapped (UMA with gpu-allocator; not wgpu's GL buffers).
        match ctx.memory_plan() {
            plan if plan.uma && plan.arena_host_visible && ctx.config().zero_copy => "zero-copy",
            _ => "staging",
        },
        args.iters,
        if args.iters == 1 { "" } else { "s" }
    );
    println!(
        "{:>10} {:>13} {:>11} {:>11} {:>11} {:>12}",
        "bytes", "method", "median ms", "busbw GB/s", "best ms", "host bytes"
    );
    for row in &rows {
        println!(
            "{:>10} {:>13} {:>11.3} {:>11.3} {:>11.3} {:>12}",
            row["bytes"].as_u64().unwrap_or(0),
            row["method"].as_str().unwrap_or(""),
            row["seconds"].as_f64().unwrap_or(0.0) * 1e3,
            row["busbw_gbps"].as_f64().unwrap_or(0.0),
            row["seconds_min"].as_f64().unwrap_or(0.0) * 1e3,
            row["host_bytes"].as_u64().unwrap_or(0)
        );
    }
    for size in rows.chunks(3) {
        let s = |i: usize, key: &str| size[i][key].as_f64().unwrap_or(f64::NAN);
        println!(
            "{:>10} bytes: gpu-arena at {:.2}x mpi_host_vec's bandwidth, {:.2}x naive's (best runs: {:.2}x, {:.2}x)",
            size[0]["bytes"].as_u64().unwrap_or(0),
            s(1, "seconds") / s(0, "seconds"),
            s(2, "seconds") / s(0, "seconds"),
            s(1, "seconds_min") / s(0, "seconds_min"),
            s(2, "seconds_min") / s(0, "seconds_min"),
        );
    }
    if let [fused, separate, one, host] = &many[..] {
        let s = |row: &serde_json::Value, key: &str| row[key].as_f64().unwrap_or(f64::NAN);
        println!(
            "all_reduce_many of {} f32 arrays ({} bytes in all): fused {:.3} ms, separate {:.3} ms, one array {:.3} ms, mpi_host_vec {:.3} ms; fused at {:.1}x separate calls' speed, at {:.2}x one array's bandwidth, {:.2}x mpi_host_vec's",
            fused["arrays"].as_u64().unwrap_or(0),
            fused["bytes"].as_u64().unwrap_or(0),
            s(fused, "seconds") * 1e3,
            s(separate, "seconds") * 1e3,
            s(one, "seconds") * 1e3,
            s(host, "seconds") * 1e3,
            s(separate, "seconds") / s(fused, "seconds"),
            s(one, "seconds") / s(fused, "seconds"),
            s(host, "seconds") / s(fused, "seconds"),
        );
    }
    Ok(())
}

/// A row of `method` on `bytes` over `ranks`: the median and fastest seconds, and `busbw_gbps`
/// as nccl-tests define it.
fn row(
    bytes: usize,
    ranks: usize,
    method: &str,
    (seconds, fastest): (f64, f64),
    zero_copy: bool,
) -> serde_json::Value {
    let bus = 2.0 * (ranks as f64 - 1.0) / ranks as f64;
    json!({
        "bytes": bytes,
        "ranks": ranks,
        "method": method,
        "seconds": seconds,
        "busbw_gbps": bytes as f64 / seconds / 1e9 * bus,
        "seconds_min": fastest,
        "busbw_gbps_best": bytes as f64 / fastest / 1e9 * bus,
        "zero_copy": zero_copy,
    })
}

/// The `all_reduce_many` case: a list of arrays fused, reduced one by one, as one array of
/// the same total size, and on a host vector; empty when `--max-mib` is 0.
fn many_rows<C: Communicator>(
    ctx: &Context,
    group: &Collectives,
    world: &C,
    args: &Args,
) -> anyhow::Result<Vec<serde_json::Value>> {
    let array_bytes = MANY_ARRAY_BYTES.min((args.max_mib << 20) / MANY_ARRAYS);
    if array_bytes == 0 {
        return Ok(Vec::new());
    }
    let (len, total) = (array_bytes / 4, MANY_ARRAYS * array_bytes / 4);
    let rank = group.rank() as f32;
    let data: Vec<f32> = (0..total).map(|i| (i % 7) as f32 + rank).collect();
    let list = || -> anyhow::Result<Vec<DeviceArray<f32>>> {
        data.chunks(len)
            .map(|values| Ok(ctx.device_put(values, &[len])?))
            .collect()
    };
    let mut arrays = Some(list()?);
    let fused = time(world, args.iters, || {
        let list = arrays.take().expect("put back after every run");
        arrays = Some(group.all_reduce_many(list, ReduceOp::Sum)?);
        ctx.synchronize()?;
        Ok(())
    })?;
    let mut separate_arrays = Some(list()?);
    let separate = time(world, args.iters, || {
        let list = separate_arrays.take().expect("put back after every run");
        let mut reduced = Vec::with_capacity(list.len());
        for array in list {
            reduced.push(group.all_reduce(array, ReduceOp::Sum)?);
        }
        separate_arrays = Some(reduced);
        ctx.synchronize()?;
        Ok(())
    })?;
    // The same values, whatever the grouping: fused and separate results agree.
    let (fused_values, separate_values) = (
        ctx.device_get_many(&arrays.iter().flatten().collect::<Vec<_>>())?,
        ctx.device_get_many(&separate_arrays.iter().flatten().collect::<Vec<_>>())?,
    );
    anyhow::ensure!(
        fused_values == separate_values,
        "fused and separate all-reduces differ"
    );
    drop((arrays, separate_arrays));
    let mut one = Some(ctx.device_put(&data, &[total])?);
    let one_array = time(world, args.iters, || {
        let a = one.take().expect("put back after every run");
        one = Some(group.all_reduce(a, ReduceOp::Sum)?);
        ctx.synchronize()?;
        Ok(())
    })?;
    drop(one);
    let mut recv = vec![0f32; total];
    let host = time(world, args.iters, || {
        world.all_reduce_into(&data[..], &mut recv[..], SystemOperation::sum());
        Ok(())
    })?;
    let zero_copy = ctx.config().zero_copy;
    Ok([
        ("gpu-arena-fused", fused),
        ("gpu-arena-separate", separate),
        ("gpu-arena-one-array", one_array),
        ("mpi_host_vec", host),
    ]
    .into_iter()
    .map(|(method, seconds)| {
        let mut row = row(total * 4, group.size(), method, seconds, zero_copy);
        row["case"] = json!("all_reduce_many");
        row["arrays"] = json!(MANY_ARRAYS);
        row["array_bytes"] = json!(array_bytes);
        row
    })
    .collect())
}
