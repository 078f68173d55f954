//! The measured figures: each gpu-arena operation beside the plain-wgpu way of doing the same on
//! the same device, in the same run.
//!
//! Every figure is the median of a few synchronized runs (the GPU is idle when a run's clock
//! stops), except the first allocation, which happens once per context.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context as _, Result};
use gpu_arena::{wgpu, Context, DeviceArray};
use serde::Serialize;

use crate::raw_range::raw_write_range;

/// Bytes per MiB.
pub const MIB: usize = 1 << 20;

/// Bytes of each small upload (the 4 KiB arrays).
const SMALL_ARRAY_BYTES: usize = 4096;

/// Elements per row of the `dynamic_update_slice` operand: 4 KiB rows of `u32`, so updates are
/// whole rows (a KV cache's layout).
const ROW: usize = 1024;

/// Bytes per row of the operand.
const ROW_BYTES: usize = ROW * std::mem::size_of::<u32>();

/// Bytes of the arrays the alloc+free figure takes and gives back.
const ALLOC_FREE_BYTES: usize = MIB;

/// How big the measured work is: the sizes, or small ones for CI (`--quick`).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Sizes {
    /// Small uploads per batch (10,000 of 4 KiB).
    pub small_arrays: usize,
    /// Bytes of the large upload and readback (256 MiB).
    pub large_bytes: usize,
    /// Bytes of the small and large in-place updates (1 MiB, 256 MiB).
    pub update_bytes: [usize; 2],
    /// Allocations (and frees) timed for alloc+free.
    pub alloc_free_ops: usize,
    /// Runs per figure; the median is reported.
    pub iters: usize,
}

impl Sizes {
    /// The sizes the issue asks for: under a minute on a real GPU.
    pub const FULL: Sizes = Sizes {
        small_arrays: 10_000,
        large_bytes: 256 * MIB,
        update_bytes: [MIB, 256 * MIB],
        alloc_free_ops: 1_000,
        iters: 5,
    };

    /// Small sizes for CI on lavapipe (seconds, with validation on).
    pub const QUICK: Sizes = Sizes {
        small_arrays: 1_000,
        large_bytes: 16 * MIB,
        update_bytes: [MIB, 16 * MIB],
        alloc_free_ops: 200,
        iters: 3,
    };
}

/// One way of doing a case, and how fast it was.
#[derive(Clone, Debug, Serialize)]
pub struct Measured {
    /// What was timed (`device_put`, `queue.write_buffer`, ...).
    pub method: String,
    /// Median seconds of one run.
    pub seconds: f64,
    /// The figure in [`Figure::unit`].
    pub value: f64,
}

/// One case, gpu-arena's way beside the peer's.
#[derive(Clone, Debug, Serialize)]
pub struct Figure {
    /// What was done, with its size.
    pub case: String,
    /// The unit of the values: `ms`, `us_per_op`, `us_per_array`, `GB/s`.
    pub unit: &'static str,
    /// Whether a higher value is better (bandwidth) or a lower one (time).
    pub higher_is_better: bool,
    /// gpu-arena's way.
    pub gpu_arena: Measured,
    /// The peer's way on the same device.
    pub peer: Measured,
    /// How many times better gpu-arena's figure is than the peer's: above 1, gpu-arena wins.
    pub ratio: f64,
}

impl Figure {
    /// The figure of `gpu_arena` beside `peer`, both in `unit`, with their ratio.
    pub fn new(
        case: String,
        unit: &'static str,
        higher_is_better: bool,
        gpu_arena: Measured,
        peer: Measured,
    ) -> Figure {
        let ratio = if higher_is_better {
            gpu_arena.value / peer.value
        } else {
            peer.value / gpu_arena.value
        };
        Figure {
            case,
            unit,
            higher_is_better,
            gpu_arena,
            peer,
            ratio,
        }
    }
}

/// The unit a figure is reported in, and how to get it from seconds.
#[derive(Clone, Copy)]
enum Unit {
    /// Milliseconds of one run.
    Millis,
    /// Microseconds per operation, for this many operations per run.
    MicrosPer(&'static str, usize),
    /// Gigabytes (10^9 bytes) per second, for this many bytes per run.
    Bandwidth(usize),
}

impl Unit {
    fn name(self) -> &'static str {
        match self {
            Unit::Millis => "ms",
            Unit::MicrosPer(name, _) => name,
            Unit::Bandwidth(_) => "GB/s",
        }
    }

    fn value(self, seconds: f64) -> f64 {
        match self {
            Unit::Millis => seconds * 1e3,
            Unit::MicrosPer(_, n) => seconds * 1e6 / n.max(1) as f64,
            Unit::Bandwidth(bytes) => bytes as f64 / seconds / 1e9,
        }
    }
}

fn measured(method: &str, unit: Unit, seconds: f64) -> Measured {
    Measured {
        method: method.to_string(),
        seconds,
        value: unit.value(seconds),
    }
}

fn figure(case: String, unit: Unit, ours: (&str, f64), peer: (&str, f64)) -> Figure {
    Figure::new(
        case,
        unit.name(),
        matches!(unit, Unit::Bandwidth(_)),
        measured(ours.0, unit, ours.1),
        measured(peer.0, unit, peer.1),
    )
}

/// The median seconds of `iters` runs of `body` (given the run's index).
fn median(iters: usize, mut body: impl FnMut(usize) -> Result<()>) -> Result<f64> {
    let mut samples: Vec<Duration> = Vec::with_capacity(iters);
    for i in 0..iters.max(1) {
        let start = Instant::now();
        body(i)?;
        samples.push(start.elapsed());
    }
    samples.sort();
    Ok(samples[samples.len() / 2].as_secs_f64())
}

/// Blocks until the device is idle (for the plain-wgpu peers, which have no context).
fn wait(device: &wgpu::Device) -> Result<()> {
    device
        .poll(wgpu::PollType::wait_indefinitely())
        .map_err(|e| anyhow::anyhow!("waiting for the device: {e}"))?;
    Ok(())
}

fn raw_buffer(ctx: &Context, label: &str, size: usize, usage: wgpu::BufferUsages) -> wgpu::Buffer {
    ctx.device().create_buffer(&wgpu::BufferDescriptor {
        label: Some(label),
        size: size as u64,
        usage,
        mapped_at_creation: false,
    })
}

/// Bytes that vary with their position, so a misplaced copy shows.
fn pattern(len: usize, seed: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(31) ^ (i >> 12) ^ seed) as u8)
        .collect()
}

/// `bytes` rounded down to whole rows of the update operand, at least one row.
fn whole_rows(bytes: usize) -> usize {
    (bytes / ROW_BYTES).max(1)
}

/// Every figure of the report on one context, in the order the issue lists them. The first
/// allocation must come first: it is the arena's reservation.
pub fn measure_all(ctx: &Context, sizes: &Sizes) -> Result<Vec<Figure>> {
    let sizes = capped(ctx, sizes);
    let mut figures = vec![first_allocation(ctx)?, alloc_free(ctx, &sizes)?];
    figures.push(small_uploads(ctx, &sizes)?);
    figures.extend(large_transfers(ctx, &sizes)?);
    for bytes in sizes.update_bytes {
        figures.push(update_in_place(ctx, &sizes, bytes)?);
    }
    Ok(figures)
}

/// The sizes, with every array no larger than the device allows.
pub fn capped(ctx: &Context, sizes: &Sizes) -> Sizes {
    let max = usize::try_from(ctx.max_array_bytes()).unwrap_or(usize::MAX);
    let max_rows = max / ROW_BYTES * ROW_BYTES;
    Sizes {
        large_bytes: sizes.large_bytes.min(max),
        update_bytes: sizes.update_bytes.map(|b| b.min(max_rows)),
        ..*sizes
    }
}

/// The first allocation of a context, which reserves the arena (JAX's preallocation), against
/// `device.create_buffer` of the same bytes in buffers as large as the device allows.
fn first_allocation(ctx: &Context) -> Result<Figure> {
    let config = ctx.config();
    let reserve = if config.preallocate {
        ctx.memory_plan()
            .prealloc_bytes(config.mem_fraction.reserve)
    } else {
        0
    };
    // The peer first, then freed: both cannot hold most of the device's memory at once.
    let max_buffer = ctx.limits().max_buffer_size.max(1);
    let start = Instant::now();
    let mut buffers = Vec::new();
    let mut left = reserve.max(256);
    while left > 0 {
        let size = left.min(max_buffer);
        buffers.push(raw_buffer(
            ctx,
            "peer reservation",
            size as usize,
            wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
        ));
        left -= size;
    }
    wait(ctx.device())?;
    let peer = start.elapsed().as_secs_f64();
    drop(buffers);
    wait(ctx.device())?;

    let start = Instant::now();
    let first = ctx.alloc::<u8>(&[256]).context("the first allocation")?;
    let ours = start.elapsed().as_secs_f64();
    drop(first);
    let reserved = ctx.memory_stats().bytes_reserved;
    Ok(figure(
        format!("first allocation (reserves {})", human_bytes(reserved)),
        Unit::Millis,
        ("Context::alloc, first call", ours),
        ("device.create_buffer of the same bytes", peer),
    ))
}

/// Allocating and freeing 1 MiB arrays through the arena against creating and dropping wgpu
/// buffers.
fn alloc_free(ctx: &Context, sizes: &Sizes) -> Result<Figure> {
    let ops = sizes.alloc_free_ops;
    let ours = median(sizes.iters, |_| {
        for _ in 0..ops {
            drop(ctx.alloc::<u8>(&[ALLOC_FREE_BYTES])?);
        }
        ctx.synchronize()?;
        Ok(())
    })?;
    let peer = median(sizes.iters, |_| {
        for _ in 0..ops {
            drop(raw_buffer(
                ctx,
                "peer alloc",
                ALLOC_FREE_BYTES,
                wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            ));
        }
        wait(ctx.device())
    })?;
    let unit = Unit::MicrosPer("us_per_op", ops);
    Ok(figure(
        format!("alloc+free of {} arrays of 1 MiB", ops),
        unit,
        ("Context::alloc, drop", ours),
        ("device.create_buffer, drop", peer),
    ))
}

/// `sizes.small_arrays` uploads of 4 KiB as one batch against `queue.write_buffer` per array
/// and one submit. Public for the BAR section, which runs it with direct writes on.
pub fn small_uploads(ctx: &Context, sizes: &Sizes) -> Result<Figure> {
    let n = sizes.small_arrays;
    let host: Vec<Vec<u8>> = (0..n).map(|i| pattern(SMALL_ARRAY_BYTES, i)).collect();
    let ours = median(sizes.iters, |i| {
        let mut batch = ctx.upload_batch();
        let pending: Vec<_> = host
            .iter()
            .map(|h| batch.put(h, &[SMALL_ARRAY_BYTES]))
            .collect::<Result<_, _>>()?;
        let arrays = batch.finish()?.take_all(pending)?;
        ctx.synchronize()?;
        if i == 0 {
            let last = ctx.device_get(arrays.last().context("at least one array")?)?;
            ensure!(last == host[n - 1], "the batch upload corrupted data");
        }
        Ok(())
    })?;
    let target = raw_buffer(
        ctx,
        "peer small uploads",
        n * SMALL_ARRAY_BYTES,
        wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
    );
    let peer = median(sizes.iters, |_| {
        for (i, h) in host.iter().enumerate() {
            ctx.queue()
                .write_buffer(&target, (i * SMALL_ARRAY_BYTES) as u64, h);
        }
        ctx.queue().submit([]);
        wait(ctx.device())
    })?;
    Ok(figure(
        format!("{n} uploads of 4 KiB"),
        Unit::MicrosPer("us_per_array", n),
        ("Context::upload_batch", ours),
        ("queue.write_buffer each, one submit", peer),
    ))
}

/// One large upload and readback against `queue.write_buffer` and a copy into a `MAP_READ`
/// buffer with `map_async`.
fn large_transfers(ctx: &Context, sizes: &Sizes) -> Result<[Figure; 2]> {
    let bytes = sizes.large_bytes;
    let big = pattern(bytes, 7);
    let upload = large_upload(ctx, sizes, &big)?;
    let array = ctx.device_put(&big, &[bytes])?;
    // Both ways check their data on the first run only, so the figures time the transfer.
    let ours = median(sizes.iters, |i| {
        let back = ctx.device_get(&array)?;
        ensure!(i > 0 || back == big, "device_get corrupted data");
        Ok(())
    })?;
    drop(array);
    let raw = raw_buffer(
        ctx,
        "peer large",
        bytes,
        wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
    );
    ctx.queue().write_buffer(&raw, 0, &big);
    let readback = raw_buffer(
        ctx,
        "peer readback",
        bytes,
        wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
    );
    let peer = median(sizes.iters, |i| {
        let mut encoder = ctx.device().create_command_encoder(&Default::default());
        encoder.copy_buffer_to_buffer(&raw, 0, &readback, 0, bytes as u64);
        ctx.queue().submit([encoder.finish()]);
        let slice = readback.slice(..);
        let (tx, rx) = std::sync::mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        wait(ctx.device())?;
        rx.recv()?.map_err(|e| anyhow::anyhow!("map_async: {e}"))?;
        let host = slice
            .get_mapped_range()
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .to_vec();
        readback.unmap();
        ensure!(
            i > 0 || host == big,
            "the map_async readback corrupted data"
        );
        Ok(())
    })?;
    let readback = figure(
        format!("readback of {}", human_bytes(bytes as u64)),
        Unit::Bandwidth(bytes),
        ("Context::device_get", ours),
        ("copy to a MAP_READ buffer, map_async", peer),
    );
    Ok([upload, readback])
}

/// One large upload with `device_put` against `queue.write_buffer`. Public for the BAR section.
pub fn large_upload(ctx: &Context, sizes: &Sizes, big: &[u8]) -> Result<Figure> {
    let bytes = big.len();
    let mut array: Option<DeviceArray<u8>> = None;
    let ours = median(sizes.iters, |i| {
        drop(array.take()); // the previous run's array: its memory is reused
        let put = ctx.device_put(big, &[bytes])?;
        ctx.synchronize()?;
        if i == 0 {
            ensure!(ctx.device_get(&put)? == big, "device_put corrupted data");
        }
        array = Some(put);
        Ok(())
    })?;
    drop(array);
    let raw = raw_buffer(
        ctx,
        "peer large upload",
        bytes,
        wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
    );
    let peer = median(sizes.iters, |_| {
        ctx.queue().write_buffer(&raw, 0, big);
        ctx.queue().submit([]);
        wait(ctx.device())
    })?;
    Ok(figure(
        format!("upload of {}", human_bytes(bytes as u64)),
        Unit::Bandwidth(bytes),
        ("Context::device_put", ours),
        ("queue.write_buffer", peer),
    ))
}

/// A donated, in-place `dynamic_update_slice` of `bytes` (whole 4 KiB rows) into an operand of
/// the same size, against `copy_buffer_to_buffer` of the same bytes to the same place.
fn update_in_place(ctx: &Context, sizes: &Sizes, bytes: usize) -> Result<Figure> {
    let rows = whole_rows(bytes);
    let bytes = rows * ROW_BYTES;
    let values: Vec<u32> = (0..rows * ROW).map(|i| i as u32 ^ 0x5a5a).collect();
    let update = ctx.device_put(&values, &[rows, ROW])?;
    let mut operand = Some(ctx.zeros::<u32>(&[rows, ROW])?);
    let ours = median(sizes.iters, |_| {
        let donated = operand.take().context("the operand")?;
        operand = Some(ctx.dynamic_update_slice(donated, &update, &[0, 0])?);
        ctx.synchronize()?;
        Ok(())
    })?;
    let mut operand = operand.context("the operand")?;
    ensure!(
        ctx.device_get(&operand)? == values,
        "dynamic_update_slice corrupted data"
    );
    // Where the peer writes: the operand's own binding, checked, not a hand-made offset.
    let (dst_buffer, dst_offset) = raw_write_range(&mut operand, 0, bytes as u64)?;
    // `copy_buffer_to_buffer` may not copy within one buffer, and arena arrays share region
    // buffers, so the peer copies from a buffer of its own.
    let source = raw_buffer(
        ctx,
        "peer update source",
        bytes,
        wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
    );
    let peer = median(sizes.iters, |_| {
        let mut encoder = ctx.device().create_command_encoder(&Default::default());
        encoder.copy_buffer_to_buffer(&source, 0, &dst_buffer, dst_offset, bytes as u64);
        ctx.raw_submit([encoder.finish()], &[&operand])?;
        ctx.synchronize()?;
        Ok(())
    })?;
    Ok(figure(
        format!(
            "dynamic_update_slice of {} in place",
            human_bytes(bytes as u64)
        ),
        Unit::Bandwidth(bytes),
        ("Context::dynamic_update_slice, donated", ours),
        ("encoder.copy_buffer_to_buffer", peer),
    ))
}

/// Bytes for people: "256 MiB", "1.50 GiB".
pub fn human_bytes(bytes: u64) -> String {
    const GIB: u64 = 1 << 30;
    if bytes >= GIB {
        format!("{:.2} GiB", bytes as f64 / GIB as f64)
    } else if bytes >= MIB as u64 {
        format!("{} MiB", bytes / MIB as u64)
    } else if bytes >= 1024 {
        format!("{} KiB", bytes / 1024)
    } else {
        format!("{bytes} bytes")
    }
}
