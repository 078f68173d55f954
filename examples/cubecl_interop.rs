//! CubeCL on a gpu-arena context's device: arrays move between a CubeCL handle and an arena
//! array by one GPU copy on the shared queue, with no host round trip, and a kernel on each
//! side checks that the data arrived. Then both directions are timed against the trip through
//! host memory that two separate devices would need, in the same run.
//!
//! ```text
//! cargo run --release --features cubecl --example cubecl_interop -- [--mib N] [--iters N] [--json]
//! ```
//!
//! How it works, and what a CubeCL or Burn user copies from it:
//! 1. **One device**: CubeCL starts on the context's instance, adapter, device and queue
//!    ([`cubecl::wgpu::try_init_device`] with a `WgpuSetup`; Burn's `WgpuDevice::Existing`
//!    takes the same `WgpuSetup`). The two keep separate allocators on that device: CubeCL's
//!    memory does not count in the arena's statistics, nor the arena's in CubeCL's.
//! 2. **CubeCL → arena** ([`cubecl_to_arena`]): `client.get_resource` gives the wgpu buffer,
//!    offset and size behind a handle and moves CubeCL's recorded work into its encoder;
//!    `client.flush()` submits it, so the copy, submitted after it on the same queue, reads
//!    what CubeCL wrote. The copy goes through [`Context::raw_submit`] with the arena array in
//!    `uses`, so the arena does not reuse the array's memory before the copy completes.
//! 3. **arena → CubeCL** ([`arena_to_cubecl`]): the same copy the other way. `raw_submit`
//!    submits the single ops the context has gathered first, so the copy reads what arena
//!    kernels wrote; CubeCL work launched afterwards is submitted after the copy.
//! 4. **Lifetimes**: CubeCL does not know about the copy. Keep the CubeCL handle alive until
//!    the copy has completed (here: until [`Context::synchronize`]); a handle dropped earlier
//!    lets CubeCL hand its memory to the next allocation, which may be written (through a host
//!    mapping, on unified memory) while the copy still runs.
//!
//! Cases (each the median of `--iters` runs after one untimed, each run waits for the GPU):
//! - `cubecl_to_arena`: `device_copy` (above) vs `via_host` (`client.read_one` to host bytes,
//!   then `device_put`);
//! - `arena_to_cubecl`: `device_copy` vs `via_host` (`device_get` to a `Vec`, then
//!   `client.create` from it and `client.sync`).
//!
//! The `device_copy` rows carry `speedup_over_via_host` (goal: at least 5 at 64 MiB on a GPU;
//! on lavapipe a GPU copy is itself a CPU `memcpy`, so the ratio is smaller there).
//! With `--json`, one JSON object per line: `case`, `method`, `seconds`, `gbps`, `mib`.

use cubecl::prelude::*;
use cubecl::server::Handle;
use cubecl::wgpu::{AutoCompiler, RuntimeOptions, WgpuServer, WgpuSetup};
use gpu_arena::{bytemuck, ArenaConfig, Context, DeviceArray, SubmissionId};
use lexopt::prelude::*;
use serde_json::json;
use std::time::{Duration, Instant};

#[path = "flags/mod.rs"]
mod flags;

/// The largest `--mib` taken: what an example allocates at most.
const MAX_MIB: usize = (flags::MAX_ALLOCATION_BYTES >> 20) as usize;

/// The largest `--iters`: bounds the run's time.
const MAX_ITERS: usize = 100;

const USAGE: &str = "usage: cubecl_interop [--mib N] [--iters N] [--json]

CubeCL started on a gpu-arena context's device; data moved between a CubeCL handle and an
arena array by a GPU copy (checked by a kernel on each side), timed against a host round trip.
  --mib N     the array moved, in MiB (default 64)
  --iters N   runs per case; the median is reported (default 5)
  --json      one JSON object per case and method instead of a table
  -h, --help  this text";

struct Args {
    mib: usize,
    iters: usize,
    json: bool,
}

fn parse_args() -> Args {
    flags::parse_or_exit(USAGE, |parser| {
        let mut args = Args {
            mib: 64,
            iters: 5,
            json: false,
        };
        while let Some(arg) = parser.next()? {
            match arg {
                Long("mib") => args.mib = flags::in_range(parser, "mib", 1..=MAX_MIB)?,
                Long("iters") => args.iters = flags::in_range(parser, "iters", 1..=MAX_ITERS)?,
                Long("json") => args.json = true,
                Short('h') | Long("help") => return Ok(None),
                _ => return Err(arg.unexpected()),
            }
        }
        Ok(Some(args))
    })
}

/// The CubeCL kernel of the check: `out = 3 * x + 1`.
#[cube(launch)]
fn triple_plus_one(input: &[u32], output: &mut [u32]) {
    if ABSOLUTE_POS < input.len() {
        output[ABSOLUTE_POS] = input[ABSOLUTE_POS] * 3 + 1;
    }
}

/// The arena kernel of the check: `out = 2 * x + 7` (a linear grid: 64 MiB of words need more
/// workgroups than one dimension allows).
const TWICE_PLUS_SEVEN: &str = r#"
struct Params { n: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read_write> y: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = gid.x + gid.y * groups.x * 64u;
    if (i < p.n) { y[i] = 2u * x[i] + 7u; }
}
"#;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[bytemuck(crate = "gpu_arena::bytemuck")]
struct Params {
    n: u32,
}

/// The CubeCL server type of a device started with `try_init_device` (its automatic compiler).
type Server = WgpuServer<AutoCompiler>;

/// Copies the first `array.size_in_bytes()` bytes of CubeCL's `handle` into `array` on the GPU.
/// Keep `handle` alive until the returned submission completes (see the module docs).
fn cubecl_to_arena(
    ctx: &Context,
    client: &Client,
    handle: &Handle,
    array: &DeviceArray<u32>,
) -> anyhow::Result<SubmissionId> {
    let bytes = array.size_in_bytes();
    // Moves CubeCL's recorded work on the handle into its encoder; the flush submits it, so
    // the copy below (a later submission on the same queue) runs after it.
    let managed = client.get_resource::<Server>(handle.clone())?;
    client.flush()?;
    let source = managed.resource();
    anyhow::ensure!(
        source.size >= bytes,
        "the CubeCL handle holds {} bytes, the arena array {bytes}",
        source.size
    );
    let target = array.raw_binding();
    let mut encoder = ctx.device().create_command_encoder(&Default::default());
    encoder.copy_buffer_to_buffer(
        &source.buffer,
        source.offset,
        target.buffer,
        target.offset,
        bytes,
    );
    Ok(ctx.raw_submit([encoder.finish()], &[array])?)
}

/// Copies `array` into CubeCL's `handle` (at least as large) on the GPU, after every arena op
/// called before it. Keep `handle` alive until the returned submission completes.
fn arena_to_cubecl(
    ctx: &Context,
    client: &Client,
    array: &DeviceArray<u32>,
    handle: &Handle,
) -> anyhow::Result<SubmissionId> {
    let bytes = array.size_in_bytes();
    // CubeCL work still recorded on this memory (an earlier user of a reused slice) goes out
    // before the copy overwrites it.
    let managed = client.get_resource::<Server>(handle.clone())?;
    client.flush()?;
    let target = managed.resource();
    anyhow::ensure!(
        target.size >= bytes,
        "the CubeCL handle holds {} bytes, the arena array {bytes}",
        target.size
    );
    let source = array.raw_binding();
    let mut encoder = ctx.device().create_command_encoder(&Default::default());
    encoder.copy_buffer_to_buffer(
        source.buffer,
        source.offset,
        &target.buffer,
        target.offset,
        bytes,
    );
    // The submission goes out after the context's gathered ops, which may write `array`.
    Ok(ctx.raw_submit([encoder.finish()], &[array])?)
}

/// `3 * x + 1` over `input` on CubeCL, into a new handle.
fn cubecl_triple_plus_one(client: &Client, input: &Handle, n: usize) -> Handle {
    let output = client.empty(n * size_of::<u32>());
    let cube_dim = CubeDim::new(client, n);
    let cube_count = cubecl::calculate_cube_count_elemwise(client, n, cube_dim);
    // SAFETY: both handles hold `n` u32 words (made above and by the caller with that size).
    let (input_arg, output_arg) = unsafe {
        (
            BufferArg::from_raw_parts(input.clone(), n),
            BufferArg::from_raw_parts(output.clone(), n),
        )
    };
    triple_plus_one::launch(client, cube_count, cube_dim, input_arg, output_arg);
    output
}

/// The first index where `got` differs from `want(i)`, as a message.
fn check(what: &str, got: &[u32], want: impl Fn(usize) -> u32) -> anyhow::Result<()> {
    match got.iter().enumerate().find(|&(i, &v)| v != want(i)) {
        None => Ok(()),
        Some((i, &v)) => anyhow::bail!("{what}: element {i} is {v}, expected {}", want(i)),
    }
}

/// Runs `body` once untimed, then `iters` times, and returns the median duration. The untimed
/// run keeps first touches out of the figures (on a CPU device, such as lavapipe, memory never
/// used before costs page faults).
fn median(iters: usize, mut body: impl FnMut() -> anyhow::Result<()>) -> anyhow::Result<f64> {
    body()?;
    let mut samples: Vec<Duration> = Vec::with_capacity(iters);
    for _ in 0..iters {
        let start = Instant::now();
        body()?;
        samples.push(start.elapsed());
    }
    samples.sort();
    Ok(samples[samples.len() / 2].as_secs_f64())
}

fn main() -> anyhow::Result<()> {
    let args = parse_args();
    let ctx = Context::new(ArenaConfig::from_env()?)?;
    let setup = WgpuSetup {
        // A context that opened its own device always has the instance that found it.
        instance: ctx
            .instance()
            .ok_or_else(|| anyhow::anyhow!("the context has no wgpu instance"))?
            .clone(),
        adapter: ctx.adapter().clone(),
        device: ctx.device().clone(),
        queue: ctx.queue().clone(),
        backend: ctx.adapter_info().backend,
    };
    let device = cubecl::wgpu::try_init_device(setup, RuntimeOptions::try_default()?)?;
    let client = cubecl::Device::Wgpu(device).client();
    let n = (args.mib << 20) / size_of::<u32>();
    let bytes = n * size_of::<u32>();
    if !args.json {
        println!(
            "CubeCL ({}) and gpu-arena on one device: {} ({:?}); {} MiB",
            client.name(),
            ctx.adapter_info().name,
            ctx.adapter_info().backend,
            args.mib
        );
    }

    // ---- the check: a kernel on each side of each copy -----------------------------------
    let input: Vec<u32> = (0..n as u32).collect();
    let x = client.create_from_slice(bytemuck::cast_slice(&input));
    let y = cubecl_triple_plus_one(&client, &x, n); // 3i + 1, on CubeCL
    let on_arena = ctx.alloc::<u32>(&[n])?;
    cubecl_to_arena(&ctx, &client, &y, &on_arena)?;
    let twice = ctx.kernel(TWICE_PLUS_SEVEN, "main")?;
    let mut z = ctx.alloc::<u32>(&[n])?;
    ctx.launch(&twice)
        .arg(&on_arena)
        .arg_mut(&mut z)
        .params(&Params { n: n as u32 })
        .grid_linear(n as u64)
        .run()?; // 2(3i + 1) + 7, on the arena
    let back = client.empty(bytes);
    arena_to_cubecl(&ctx, &client, &z, &back)?;
    let w = cubecl_triple_plus_one(&client, &back, n); // 3(6i + 9) + 1, on CubeCL
    let result = client.read_one(w)?;
    let result: &[u32] = bytemuck::try_cast_slice(&result[..])
        .map_err(|e| anyhow::anyhow!("CubeCL's bytes as u32: {e}"))?;
    check("CubeCL -> arena -> CubeCL", result, |i| 18 * i as u32 + 28)?;
    check(
        "the arena array copied from CubeCL",
        &ctx.device_get(&on_arena)?,
        |i| 3 * i as u32 + 1,
    )?;
    ctx.synchronize()?; // the copies have completed: the handles may go
    drop((x, back));
    if !args.json {
        println!("check: CubeCL kernel -> copy -> arena kernel -> copy -> CubeCL kernel: {n} words exact");
    }

    // ---- timing --------------------------------------------------------------------------
    // Each run makes its destination, moves the data and waits for the GPU.
    let source = y; // on CubeCL: 3i + 1
    let c2a_device = median(args.iters, || {
        let array = ctx.alloc::<u32>(&[n])?;
        cubecl_to_arena(&ctx, &client, &source, &array)?;
        ctx.synchronize()?;
        Ok(())
    })?;
    let c2a_host = median(args.iters, || {
        let host = client.read_one(source.clone())?;
        let words: &[u32] = bytemuck::try_cast_slice(&host[..])
            .map_err(|e| anyhow::anyhow!("CubeCL's bytes as u32: {e}"))?;
        let _array = ctx.device_put(words, &[n])?;
        ctx.synchronize()?;
        Ok(())
    })?;
    let a2c_device = median(args.iters, || {
        let handle = client.empty(bytes);
        arena_to_cubecl(&ctx, &client, &z, &handle)?;
        ctx.synchronize()?;
        Ok(())
    })?;
    let a2c_host = median(args.iters, || {
        let host = ctx.device_get(&z)?;
        let _handle = client.create(cubecl::bytes::Bytes::from_elems(host));
        cubecl::future::block_on(client.sync())?;
        Ok(())
    })?;
    // One more of each device copy, checked (outside the timing).
    let array = ctx.alloc::<u32>(&[n])?;
    cubecl_to_arena(&ctx, &client, &source, &array)?;
    check(
        "timed CubeCL -> arena copy",
        &ctx.device_get(&array)?,
        |i| 3 * i as u32 + 1,
    )?;
    let handle = client.empty(bytes);
    arena_to_cubecl(&ctx, &client, &z, &handle)?;
    let copied = client.read_one(handle)?;
    check(
        "timed arena -> CubeCL copy",
        bytemuck::try_cast_slice(&copied[..]).map_err(|e| anyhow::anyhow!("{e}"))?,
        |i| 6 * i as u32 + 9,
    )?;

    let rows = [
        (
            "cubecl_to_arena",
            "device_copy",
            c2a_device,
            Some(c2a_host / c2a_device),
        ),
        ("cubecl_to_arena", "via_host", c2a_host, None),
        (
            "arena_to_cubecl",
            "device_copy",
            a2c_device,
            Some(a2c_host / a2c_device),
        ),
        ("arena_to_cubecl", "via_host", a2c_host, None),
    ];
    for (case, method, seconds, speedup) in rows {
        let gbps = bytes as f64 / seconds / 1e9;
        if args.json {
            let mut row = json!({"case": case, "method": method, "seconds": seconds,
                "gbps": gbps, "mib": args.mib});
            if let Some(speedup) = speedup {
                row["speedup_over_via_host"] = speedup.into();
            }
            println!("{row}");
        } else {
            println!(
                "{case:<16} {method:<12} {:>10.3} ms {gbps:>8.2} GB/s {}",
                seconds * 1e3,
                speedup.map_or(String::new(), |s| format!("at {s:.1}x via_host's speed"))
            );
        }
    }
    if !args.json {
        println!(
            "(median of {} run{}; goal: device_copy at least 5x faster at 64 MiB)",
            args.iters,
            if args.iters == 1 { "" } else { "s" }
        );
    }
    Ok(())
}
