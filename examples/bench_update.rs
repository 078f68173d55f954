//! Donated `dynamic_update_slice` against its peers, side by side in one run.
//!
//! ```text
//! cargo run --release --example bench_update -- [--json] [--size-mib 1024] [--iters 20]
//! cargo run --release --example bench_update -- --help
//! ```
//! An operand of `--size-mib` MiB (default 1024, shrunk and said so if it cannot be allocated)
//! takes updates of 1 MiB, 16 MiB and 256 MiB (capped at the operand), each timed four ways:
//!
//! - `in_place`: `ctx.dynamic_update_slice(operand, &update, start)`, the operand donated;
//! - `out_of_place`: `ctx.dynamic_update_slice_copy(&operand, &update, start)`, a new operand;
//! - `raw_copy_buffer`: `copy_buffer_to_buffer` of the update's bytes to the same place;
//! - `raw_copy_kernel`: a plain copy kernel (one `vec4<u32>` per invocation) doing the same.
//!
//! `seconds` is the median of `--iters` synchronized calls (each call followed by
//! `ctx.synchronize()`), `gbps` the update's bytes per second. The anchors: JAX on an H200 does
//! a donated 1 MiB DUS into a 1 GiB operand in 94 µs per synchronized call and moves 256 MiB at
//! 987 GB/s. The first lines time the first call (which compiles the kernel; with
//! `GPU_ARENA_CACHE_DIR` set, a second process finds the driver's pipeline cache on disk)
//! against a cached call. With `--json`, one JSON object per line (the pipeline timings as
//! `case: "pipeline"`, methods `first_call` and `cached_call`); otherwise a table with ratios.
//!
//! On a CPU adapter (lavapipe) the ops copy on the host, which is faster there;
//! `--device-kernels` runs the WGSL kernels instead, and the pipeline timings always do.
//!
//! `--variants` compares the library's kernels in every shape instead: the fixed shape, the
//! tuned one and each candidate, interleaved round by round (`kernel_variants/mod.rs`).

use anyhow::{Context as _, Result};
use gpu_arena::{wgpu, ArenaConfig, Context, DeviceArray, KernelCacheStats};
use lexopt::prelude::*;
use std::time::{Duration, Instant};

/// Bytes per MiB.
const MIB: u64 = 1 << 20;

/// Elements per operand row: 4 KiB rows of `u32`, so every update is whole rows (the layout of
/// a KV cache or a batch of samples) and takes the contiguous `vec4` path.
const ROW: usize = 1024;

/// The update sizes of the issue, in MiB.
const UPDATE_MIB: [u64; 3] = [1, 16, 256];

/// Calls before timing, so that pipelines are compiled and memory is touched.
const WARMUP: usize = 2;

/// The default operand (the issue's 1 GiB).
const DEFAULT_SIZE_MIB: u64 = 1024;

/// The default number of timed calls per method and case.
const DEFAULT_ITERS: usize = 20;

/// The largest `--size-mib` taken: what an example allocates at most.
const MAX_SIZE_MIB: u64 = flags::MAX_ALLOCATION_BYTES >> 20;

/// The largest `--iters`: bounds the run's time.
const MAX_ITERS: usize = 1000;

/// Smallest operand when shrinking after an allocation failure: the smallest update's.
const MIN_SIZE_MIB: u64 = UPDATE_MIB[0];

#[path = "flags/mod.rs"]
mod flags;
#[path = "kernel_variants/mod.rs"]
mod kernel_variants;
#[path = "raw_range/mod.rs"]
mod raw_range;
use raw_range::raw_write_range;

const USAGE: &str =
    "usage: bench_update [--json] [--size-mib N] [--iters N] [--device-kernels] [--variants]

Donated dynamic_update_slice against its peers, side by side.
  --json            one JSON object per case and method instead of a table
  --size-mib N      the operand, in MiB (default 1024; shrunk, and said so, if it cannot be
                    allocated); updates of 1, 16 and 256 MiB are measured where they fit in it
  --iters N         synchronized calls per method and case; the median is reported (default 20)
  --device-kernels  run the WGSL kernels on a CPU adapter too (where ops copy on the host)
  --variants        the library's kernels in every shape against the fixed and the tuned one
                    (update, slice, copy, fill at 1 MiB and --size-mib up to 256; --iters
                    rounds, at least 15)
  -h, --help        this text
GPU_ARENA_CACHE_DIR=DIR keeps the driver's pipeline cache there for the next run.";

/// The peer copy kernel: one `vec4<u32>` per invocation, what a first copy kernel looks like.
const NAIVE_COPY_WGSL: &str = r#"
@group(0) @binding(0) var<storage, read_write> src: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<u32>>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) n: vec3<u32>) {
    let i = id.x + id.y * n.x * 256u;
    if (i < arrayLength(&src)) {
        dst[i] = src[i];
    }
}
"#;

/// Workgroup size of [`NAIVE_COPY_WGSL`].
const NAIVE_WORKGROUP: u64 = 256;

struct Options {
    json: bool,
    device_kernels: bool,
    variants: bool,
    size_mib: u64,
    iters: usize,
}

fn options() -> Options {
    flags::parse_or_exit(USAGE, |parser| {
        let mut options = Options {
            json: false,
            device_kernels: false,
            variants: false,
            size_mib: DEFAULT_SIZE_MIB,
            iters: DEFAULT_ITERS,
        };
        while let Some(arg) = parser.next()? {
            match arg {
                Long("json") => options.json = true,
                Long("device-kernels") => options.device_kernels = true,
                Long("variants") => options.variants = true,
                Long("size-mib") => {
                    options.size_mib = flags::in_range(parser, "size-mib", 1..=MAX_SIZE_MIB)?
                }
                Long("iters") => options.iters = flags::in_range(parser, "iters", 1..=MAX_ITERS)?,
                Short('h') | Long("help") => return Ok(None),
                _ => return Err(arg.unexpected()),
            }
        }
        Ok(Some(options))
    })
}

/// One measured line.
struct Row {
    case: String,
    method: &'static str,
    seconds: f64,
    update_bytes: u64,
}

impl Row {
    fn gbps(&self) -> f64 {
        self.update_bytes as f64 / self.seconds / 1e9
    }
}

fn median(mut samples: Vec<Duration>) -> f64 {
    samples.sort();
    samples[samples.len() / 2].as_secs_f64()
}

/// Times `iters` calls of `call`, each synchronized, after the warm-up.
fn time(ctx: &Context, iters: usize, mut call: impl FnMut() -> Result<()>) -> Result<f64> {
    for _ in 0..WARMUP {
        call()?;
        ctx.synchronize()?;
    }
    let mut samples = Vec::with_capacity(iters);
    for _ in 0..iters {
        let started = Instant::now();
        call()?;
        ctx.synchronize()?;
        samples.push(started.elapsed());
    }
    Ok(median(samples))
}

/// The operand, allocated at `size_mib` or smaller; says so when it had to shrink. The
/// largest case holds the operand, its update and the out-of-place result at once, so room
/// for all three is checked up front.
fn allocate_operand(ctx: &Context, size_mib: u64) -> Result<(DeviceArray<u32>, u64)> {
    let mut size = size_mib;
    loop {
        let rows = (size * MIB) as usize / (ROW * 4);
        let largest_update = UPDATE_MIB.into_iter().filter(|&mib| mib <= size).max();
        let update_rows = (largest_update.unwrap_or(0) * MIB) as usize / (ROW * 4);
        let attempt = ctx.zeros::<u32>(&[rows, ROW]).and_then(|operand| {
            let others = (
                ctx.alloc::<u32>(&[rows, ROW])?,
                ctx.alloc::<u32>(&[update_rows.min(rows), ROW])?,
            );
            drop(others);
            Ok(operand)
        });
        match attempt {
            Ok(operand) => {
                if size != size_mib {
                    eprintln!(
                        "note: an operand of {size_mib} MiB (with its update and out-of-place \
                         copy) could not be allocated; using {size} MiB"
                    );
                }
                return Ok((operand, size));
            }
            Err(e) if size / 2 >= MIN_SIZE_MIB => {
                eprintln!("note: {size} MiB operand failed ({e}); shrinking");
                ctx.synchronize()?;
                size /= 2;
            }
            Err(e) => return Err(e).context("allocating the operand"),
        }
    }
}

/// The plain copy kernel's pipeline.
fn naive_copy_pipeline(ctx: &Context) -> wgpu::ComputePipeline {
    let module = ctx
        .device()
        .create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("naive vec4 copy"),
            source: wgpu::ShaderSource::Wgsl(NAIVE_COPY_WGSL.into()),
        });
    ctx.device()
        .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("naive vec4 copy"),
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        })
}

fn bench_case(
    ctx: &Context,
    operand: &mut Option<DeviceArray<u32>>,
    update_mib: u64,
    options: &Options,
    naive: &wgpu::ComputePipeline,
) -> Result<Vec<Row>> {
    let case = format!("{update_mib}MiB");
    let rows_total = operand.as_ref().expect("operand").shape()[0];
    let update_rows = ((update_mib * MIB) as usize / (ROW * 4)).min(rows_total);
    let update_bytes = (update_rows * ROW * 4) as u64;
    let mut update = ctx.device_put(
        &(0..update_rows * ROW).map(|i| i as u32).collect::<Vec<_>>(),
        &[update_rows, ROW],
    )?;
    // The middle of the operand, the same place for every method.
    let start_row = (rows_total - update_rows) / 2;
    let start = [start_row as i64, 0];
    let mut rows = Vec::new();
    let mut row = |method, seconds| {
        rows.push(Row {
            case: case.clone(),
            method,
            seconds,
            update_bytes,
        })
    };

    let seconds = time(ctx, options.iters, || {
        let donated = operand.take().expect("operand");
        *operand = Some(ctx.dynamic_update_slice(donated, &update, &start)?);
        Ok(())
    })?;
    row("in_place", seconds);

    let seconds = time(ctx, options.iters, || {
        let current = operand.as_ref().expect("operand");
        let result = ctx.dynamic_update_slice_copy(current, &update, &start)?;
        drop(result);
        Ok(())
    })?;
    row("out_of_place", seconds);

    // The raw peers write the same rows, at a place taken from the operand's own binding.
    let (dst_buffer, dst_offset) = raw_write_range(
        operand.as_mut().expect("operand"),
        (start_row * ROW * 4) as u64,
        update_bytes,
    )?;
    let current = operand.as_ref().expect("operand");
    // `copy_buffer_to_buffer` may not copy within one buffer, and arena arrays share region
    // buffers, so this peer copies from a buffer of its own.
    let source = ctx.device().create_buffer(&wgpu::BufferDescriptor {
        label: Some("raw copy source"),
        size: update_bytes,
        usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let seconds = time(ctx, options.iters, || {
        let mut encoder = ctx.device().create_command_encoder(&Default::default());
        encoder.copy_buffer_to_buffer(&source, 0, &dst_buffer, dst_offset, update_bytes);
        ctx.raw_submit([encoder.finish()], &[current])
            .expect("submit");
        Ok(())
    })?;
    row("raw_copy_buffer", seconds);

    // One dispatch per binding-sized chunk (lavapipe binds at most 128 MiB), one vec4 per
    // invocation, a 2-D grid past the workgroup limit.
    let chunk = ctx.limits().max_storage_buffer_binding_size / 256 * 256;
    // The kernel's source binding comes from the update's own binding, like its target's.
    let (update_buffer, update_offset) = raw_write_range(&mut update, 0, update_bytes)?;
    let max = u64::from(ctx.limits().max_compute_workgroups_per_dimension);
    let mut dispatches = Vec::new();
    let mut at = 0;
    while at < update_bytes {
        let len = chunk.min(update_bytes - at);
        let group = ctx.device().create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("naive vec4 copy"),
            layout: &naive.get_bind_group_layout(0),
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: &update_buffer,
                        offset: update_offset + at,
                        size: wgpu::BufferSize::new(len),
                    }),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: &dst_buffer,
                        offset: dst_offset + at,
                        size: wgpu::BufferSize::new(len),
                    }),
                },
            ],
        });
        let groups = (len / 16).div_ceil(NAIVE_WORKGROUP);
        let (x, y) = if groups <= max {
            (groups, 1)
        } else {
            (max, groups.div_ceil(max))
        };
        dispatches.push((group, x as u32, y as u32));
        at += len;
    }
    let seconds = time(ctx, options.iters, || {
        let mut encoder = ctx.device().create_command_encoder(&Default::default());
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            pass.set_pipeline(naive);
            for (group, x, y) in &dispatches {
                pass.set_bind_group(0, group, &[]);
                pass.dispatch_workgroups(*x, *y, 1);
            }
        }
        ctx.raw_submit([encoder.finish()], &[current, &update])
            .expect("submit");
        Ok(())
    })?;
    row("raw_copy_kernel", seconds);
    Ok(rows)
}

/// First call (compiles the kernel) against a cached call, and how the kernels compiled, on a
/// 1 MiB update of a 2 MiB operand (half as much where no array may be 2 MiB), with the WGSL
/// kernels whatever the adapter: on a context of its own (growing, so that it takes only what
/// it uses), closed before the measured one opens. Also the update's size in bytes.
fn pipeline_timing(config: &ArenaConfig) -> Result<(f64, f64, KernelCacheStats, u64)> {
    let ctx = Context::new(ArenaConfig {
        force_device_kernels: true,
        preallocate: false,
        ..config.clone()
    })
    .context("opening the GPU")?;
    let row_bytes = (ROW * 4) as u64;
    let rows = (MIB.min(ctx.max_array_bytes() / 2) / row_bytes).max(1) as usize;
    let mut operand = Some(ctx.zeros::<u32>(&[2 * rows, ROW])?);
    let update = ctx.zeros::<u32>(&[rows, ROW])?;
    ctx.synchronize()?;
    let mut call = || -> Result<f64> {
        let started = Instant::now();
        let donated = operand.take().expect("operand");
        operand = Some(ctx.dynamic_update_slice(donated, &update, &[0, 0])?);
        ctx.synchronize()?;
        Ok(started.elapsed().as_secs_f64())
    };
    let first = call()?;
    let cached = call()?;
    Ok((
        first,
        cached,
        ctx.kernel_cache_stats(),
        rows as u64 * row_bytes,
    ))
}

fn main() -> Result<()> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let options = options();
    let config = ArenaConfig::from_env().context("reading GPU_ARENA_* variables")?;
    if options.variants {
        let ctx = Context::new(ArenaConfig {
            force_device_kernels: options.device_kernels || config.force_device_kernels,
            ..config
        })
        .context("opening the GPU")?;
        return kernel_variants::run(&ctx, options.size_mib, options.iters, options.json);
    }
    let (first, cached, stats, pipeline_bytes) = pipeline_timing(&config)?;
    let ctx = Context::new(ArenaConfig {
        force_device_kernels: options.device_kernels || config.force_device_kernels,
        ..config
    })
    .context("opening the GPU")?;
    let (operand, size_mib) = allocate_operand(&ctx, options.size_mib)?;
    let mut operand = Some(operand);
    let info = ctx.adapter_info();
    let disk = match &stats.disk_cache_file {
        Some(file) => format!(
            "{} ({} bytes loaded: {})",
            file.display(),
            stats.disk_cache_loaded_bytes,
            stats.disk_cache_load
        ),
        None => "off (set GPU_ARENA_CACHE_DIR)".into(),
    };
    if options.json {
        for (method, seconds) in [("first_call", first), ("cached_call", cached)] {
            println!(
                "{}",
                serde_json::json!({
                    "case": "pipeline", "method": method, "seconds": seconds,
                    "gbps": pipeline_bytes as f64 / seconds / 1e9, "update_bytes": pipeline_bytes,
                    "compile_seconds": stats.compile_time.as_secs_f64(),
                    "disk_cache_loaded_bytes": stats.disk_cache_loaded_bytes,
                    "disk_cache_load": stats.disk_cache_load.name(),
                    "adapter": info.name,
                })
            );
        }
    } else {
        println!(
            "{} ({}, {}), operand {size_mib} MiB, {} timed call{} per line (median){}",
            info.name,
            info.backend,
            ctx.memory_plan().device_kind.name(),
            options.iters,
            if options.iters == 1 { "" } else { "s" },
            if options.device_kernels {
                ", WGSL kernels forced"
            } else {
                ""
            }
        );
        println!(
            "first call {:.3} ms (compiling {:.3} ms), cached call {:.3} ms; pipeline cache on disk: {disk}\n",
            first * 1e3,
            stats.compile_time.as_secs_f64() * 1e3,
            cached * 1e3
        );
    }

    let naive = naive_copy_pipeline(&ctx);
    let mut all = Vec::new();
    // An update larger than the operand is not measured: it would be the operand's size under
    // another name.
    for update_mib in UPDATE_MIB.into_iter().filter(|&mib| mib <= size_mib) {
        let rows = bench_case(&ctx, &mut operand, update_mib, &options, &naive)?;
        for r in &rows {
            if options.json {
                println!(
                    "{}",
                    serde_json::json!({
                        "case": r.case, "method": r.method, "seconds": r.seconds,
                        "gbps": r.gbps(), "update_bytes": r.update_bytes,
                        "operand_bytes": size_mib * MIB, "iters": options.iters,
                        "adapter": info.name,
                    })
                );
            }
        }
        all.push(rows);
    }
    if !options.json {
        print_table(&all);
    }
    Ok(())
}

fn print_table(all: &[Vec<Row>]) {
    println!(
        "{:<8} {:<16} {:>12} {:>10} {:>14}",
        "case", "method", "median", "GB/s", "vs in_place"
    );
    for rows in all {
        let in_place = rows[0].seconds;
        for r in rows {
            println!(
                "{:<8} {:<16} {:>9.1} µs {:>10.2} {:>13.2}x",
                r.case,
                r.method,
                r.seconds * 1e6,
                r.gbps(),
                r.seconds / in_place
            );
        }
        let raw = rows[2].seconds.min(rows[3].seconds);
        println!(
            "{:<8} in place is {:.1}x faster than out of place and moves {:.0}% of the best raw copy's bandwidth ({} MiB update)\n",
            rows[0].case,
            rows[1].seconds / in_place,
            100.0 * raw / in_place,
            rows[0].update_bytes / MIB
        );
    }
}
