//! What a launch costs on the CPU: a small user kernel through gpu-arena (`Context::launch`:
//! argument checks, use tracking, error scopes, one submission) against the same dispatch in
//! raw wgpu (parameters written, bind group, encoder, pass, submit), measured side by side;
//! and 100 small ops as 100 submissions against one `Sequence`.
//!
//! Targets (lavapipe): a launch within 1.2x raw wgpu; a sequence of 100 ops at least 5x
//! cheaper per op than 100 submissions.
//!
//! `cargo run --release --example bench_launch -- [--json] [--launches N]`

use gpu_arena::{ArenaConfig, Context};
use lexopt::prelude::*;
use std::time::Instant;

#[path = "flags/mod.rs"]
mod flags;

const USAGE: &str = "usage: bench_launch [--json] [--launches N]

The CPU cost of a launch through gpu-arena against the same dispatch in raw wgpu, and 100 small
ops as 100 submissions against one Sequence.
  --json          one JSON object per case instead of a table
  --launches N    timed launches per case (default 200)
  -h, --help      this text";

/// `--json` and `--launches`.
fn options() -> (bool, usize) {
    flags::parse_or_exit(USAGE, |parser| {
        let (mut json, mut launches) = (false, 200);
        while let Some(arg) = parser.next()? {
            match arg {
                Long("json") => json = true,
                Long("launches") => launches = flags::at_least_one(parser, "launches")?,
                Short('h') | Long("help") => return Ok(None),
                _ => return Err(arg.unexpected()),
            }
        }
        Ok(Some((json, launches)))
    })
}

const ADD: &str = r#"
@group(0) @binding(0) var<uniform> p: u32;
@group(0) @binding(1) var<storage, read_write> a: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < arrayLength(&a)) { a[id.x] = a[id.x] + p; }
}
"#;

/// Elements of the array each launch touches: small, so the CPU cost of launching dominates.
const N: usize = 256;
/// Ops per batch in the `ops100` case.
const OPS: usize = 100;

/// Median of `runs` timings of `f`, in µs per op (`ops` ops per run).
fn median_us(
    runs: usize,
    ops: usize,
    mut f: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<f64> {
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        f()?;
        times.push(started.elapsed().as_secs_f64() * 1e6 / ops as f64);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[runs / 2])
}

fn main() -> anyhow::Result<()> {
    let (json, launches) = options();
    let ctx = Context::new(ArenaConfig::from_env()?)?;
    let kernel = ctx.kernel(ADD, "main")?;
    let mut a = ctx.zeros::<u32>(&[N])?;

    // Raw wgpu: the same module and dispatch, with its own buffers.
    let device = ctx.device();
    let queue = ctx.queue();
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("raw add"),
        source: wgpu::ShaderSource::Wgsl(ADD.into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("raw add"),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let storage = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("raw storage"),
        size: (N * 4) as u64,
        usage: wgpu::BufferUsages::STORAGE,
        mapped_at_creation: false,
    });
    let uniform = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("raw params"),
        size: 16,
        usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let layout = pipeline.get_bind_group_layout(0);
    let raw_launch = || {
        queue.write_buffer(&uniform, 0, bytemuck::bytes_of(&1u32));
        let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &layout,
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: uniform.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: storage.as_entire_binding(),
                },
            ],
        });
        let mut encoder = device.create_command_encoder(&Default::default());
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &group, &[]);
            pass.dispatch_workgroups((N / 64) as u32, 1, 1);
        }
        queue.submit([encoder.finish()]);
    };
    let wait = || -> anyhow::Result<()> {
        device.poll(wgpu::PollType::wait_indefinitely())?;
        Ok(())
    };

    // Warm up both paths (compilation, first bind groups).
    for _ in 0..10 {
        raw_launch();
        ctx.launch(&kernel)
            .params(&1u32)
            .arg_mut(&mut a)
            .grid_for(N as u64)
            .run()?;
    }
    wait()?;
    ctx.synchronize()?;

    // Interleaved rounds, so both paths see the same machine.
    let rounds = 7;
    let (mut ours, mut raw) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        ours.push(median_us(1, launches, || {
            for _ in 0..launches {
                ctx.launch(&kernel)
                    .params(&1u32)
                    .arg_mut(&mut a)
                    .grid_for(N as u64)
                    .run()?;
            }
            ctx.synchronize()?;
            Ok(())
        })?);
        raw.push(median_us(1, launches, || {
            for _ in 0..launches {
                raw_launch();
            }
            wait()
        })?);
    }
    ours.sort_by(f64::total_cmp);
    raw.sort_by(f64::total_cmp);
    let (launch_ours, launch_raw) = (ours[rounds / 2], raw[rounds / 2]);

    // 100 small ops: each its own submission, or one sequence.
    let each = median_us(rounds, OPS, || {
        for _ in 0..OPS {
            ctx.launch(&kernel)
                .params(&1u32)
                .arg_mut(&mut a)
                .grid_for(N as u64)
                .run()?;
        }
        ctx.synchronize()?;
        Ok(())
    })?;
    let sequenced = median_us(rounds, OPS, || {
        let mut s = ctx.sequence();
        for _ in 0..OPS {
            s.launch(&kernel)
                .params(&1u32)
                .arg_mut(&mut a)
                .grid_for(N as u64)
                .run()?;
        }
        s.submit()?;
        ctx.synchronize()?;
        Ok(())
    })?;
    // Every launch added 1 to every element: check the work really ran.
    let expected = (10 + rounds * launches + 2 * rounds * OPS) as u32;
    let got = ctx.device_get(&a)?;
    anyhow::ensure!(
        got.iter().all(|&v| v == expected),
        "expected {expected} everywhere, got {:?}",
        &got[..4]
    );

    if json {
        for (case, method, us) in [
            ("launch", "gpu-arena", launch_ours),
            ("launch", "raw_wgpu", launch_raw),
            ("ops100", "submit_each", each),
            ("ops100", "sequence", sequenced),
        ] {
            println!("{{\"case\": \"{case}\", \"method\": \"{method}\", \"us_per_op\": {us:.2}}}");
        }
    } else {
        println!(
            "launch CPU cost on {} (median of {rounds} rounds of {launches}):",
            ctx.adapter_info().name
        );
        println!("  gpu-arena launch   {launch_ours:8.2} us");
        println!(
            "  raw wgpu dispatch  {launch_raw:8.2} us   ratio {:.2}x (target <= 1.2x)",
            launch_ours / launch_raw
        );
        println!("{OPS} small ops:");
        println!("  {OPS} submissions     {each:8.2} us/op");
        println!(
            "  one sequence       {sequenced:8.2} us/op   {:.1}x cheaper (target >= 5x)",
            each / sequenced
        );
    }
    Ok(())
}
