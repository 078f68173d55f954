//! What a launch costs on the CPU: a small user kernel through gpu-arena (`Context::launch`:
//! argument checks, use tracking, error scopes, its bind group; gathered with the next launches
//! into one submission of up to 32) against the same dispatch in raw wgpu (parameters written,
//! bind group, encoder, pass, submit), measured side by side, and the same launch followed by
//! `flush()` (a submission each, as raw wgpu makes); then 100 small ops as single ops with one
//! wait (gathered, `single_ops_one_wait`), as 100 submissions (`flush()` after each,
//! `submit_each`), as one `Sequence`, as one run of a step captured once (`captured`:
//! `Context::capture`, then `CapturedStep::run`), and in raw wgpu with the pipeline and the
//! bind group made once outside the loop (`raw_wgpu_prebuilt`: an encoder, one pass of the 100
//! dispatches and a submit per round; the floor any wrapper can reach), and the same with 100
//! bind groups made once, one per dispatch (`raw_wgpu_prebuilt_groups`: what a captured step
//! binds, each launch with its own parameter block; wgpu tracks a bind group per dispatch).
//!
//! `us_per_op` is the CPU cost of issuing the work (what gpu-arena and sequences change); each
//! round then waits for the GPU outside that timing, and `end_to_end_us_per_op` adds the wait.
//! The 100-op ways run interleaved, round by round, each [`OPS_RUNS`] times back to back in a
//! round, as a loop issues them (the median of a round's runs, then of the rounds).
//! On lavapipe the GPU side of a tiny dispatch is itself tens of µs (its threads wake for each
//! one), so end to end the two ways differ by less than their issue costs do.
//!
//! Targets (lavapipe): a launch within 1.2x raw wgpu; a sequence of 100 ops at least 5x cheaper
//! per op than 100 submissions; 100 single ops then one wait at most 1.2x the sequence end to
//! end; a captured run of 100 ops at most 1.2x `raw_wgpu_prebuilt` to issue, and no slower
//! than the sequence end to end. A launch with `flush()` after it has no target of its own: it shows what a submission
//! each costs over raw wgpu (the use tracking, error scopes and the command buffer that makes
//! the work's writes visible to host reads).
//!
//! Last, what the timeline costs: the same launch loop and captured run of 100 ops on three
//! contexts side by side, with the timeline off (the default), on without kernel times
//! (`kernel_times: false`), and on with kernel times (each dispatch stamped on the GPU, in a
//! pass of its own, its timestamps resolved and read back): the `timeline` rows, with ratios
//! to the timeline off.
//!
//! `cargo run --release --example bench_launch -- [--json] [--launches N]`

use gpu_arena::profile::DEFAULT_TIMELINE_CAPACITY;
use gpu_arena::{bytemuck, wgpu, ArenaConfig, Context};
use lexopt::prelude::*;
use std::time::Instant;

#[path = "flags/mod.rs"]
mod flags;

const USAGE: &str = "usage: bench_launch [--json] [--launches N]

The CPU cost of a launch through gpu-arena against the same dispatch in raw wgpu, and 100 small
ops as single ops with one wait, as 100 submissions, as one Sequence, as one run of a captured
step and in raw wgpu with the pipeline and bind group made once.
  --json          one JSON object per case instead of a table
  --launches N    timed launches per case (default 200, at most 10000)
  -h, --help      this text";

/// `--json` and `--launches`.
fn options() -> (bool, usize) {
    flags::parse_or_exit(USAGE, |parser| {
        let (mut json, mut launches) = (false, 200);
        while let Some(arg) = parser.next()? {
            match arg {
                Long("json") => json = true,
                Long("launches") => launches = flags::in_range(parser, "launches", 1..=10_000)?,
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
/// Rounds of the `ops100` case: its end-to-end figures on lavapipe vary by ±30% from round to
/// round on a shared machine, so the ways run interleaved and the medians of many count.
const OPS_ROUNDS: usize = 15;
/// Runs of each way back to back in a round of the `ops100` case (their median counts): a step
/// is issued in a loop, and the first run after the other ways pays for the caches they left
/// cold, by an amount that depends on how much each way touches, not on what it costs warm.
const OPS_RUNS: usize = 5;

/// Per-op figures of one way of issuing work, in µs: the CPU cost of issuing it, and the cost
/// with the wait for the GPU added.
#[derive(Clone, Copy)]
struct PerOp {
    issue: f64,
    end_to_end: f64,
}

/// Medians over `rounds` rounds of `issue` (which issues `ops` ops) followed by `wait`.
fn measure(
    rounds: usize,
    ops: usize,
    mut issue: impl FnMut() -> anyhow::Result<()>,
    mut wait: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<PerOp> {
    let (mut issued, mut total) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    for _ in 0..rounds {
        let started = Instant::now();
        issue()?;
        let issued_at = Instant::now();
        wait()?;
        let per_op = |d: std::time::Duration| d.as_secs_f64() * 1e6 / ops as f64;
        issued.push(per_op(issued_at - started));
        total.push(per_op(started.elapsed()));
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Ok(PerOp {
        issue: median(issued),
        end_to_end: median(total),
    })
}

/// Medians of each figure on its own.
fn median(v: &[PerOp]) -> PerOp {
    let middle = |mut figures: Vec<f64>| {
        figures.sort_by(f64::total_cmp);
        figures[figures.len() / 2]
    };
    PerOp {
        issue: middle(v.iter().map(|f| f.issue).collect()),
        end_to_end: middle(v.iter().map(|f| f.end_to_end).collect()),
    }
}

/// The timeline's settings compared by [`timeline_costs`]: its name in the output, the
/// timeline's capacity, and whether kernels are timed.
const TIMELINE_SETTINGS: [(&str, usize, bool); 3] = [
    ("timeline_off", 0, true),
    ("timeline_on", DEFAULT_TIMELINE_CAPACITY, false),
    ("timeline_kernel_times", DEFAULT_TIMELINE_CAPACITY, true),
];

/// Per setting of [`TIMELINE_SETTINGS`]: `launches` single launches then one wait, and one
/// captured run of [`OPS`] ops then one wait, on a context of its own, interleaved round by
/// round so all see the same machine.
fn timeline_costs(launches: usize) -> anyhow::Result<Vec<(&'static str, PerOp, PerOp)>> {
    struct Setup {
        ctx: Context,
        kernel: gpu_arena::Kernel,
        a: gpu_arena::DeviceArray<u32>,
        step: gpu_arena::CapturedStep,
    }
    let mut setups = Vec::new();
    for (_, capacity, kernel_times) in TIMELINE_SETTINGS {
        let ctx = Context::new(ArenaConfig {
            timeline_capacity: capacity,
            kernel_times,
            preallocate: false,
            ..ArenaConfig::from_env()?
        })?;
        let kernel = ctx.kernel(ADD, "main")?;
        let mut a = ctx.zeros::<u32>(&[N])?;
        let mut cap = ctx.capture();
        for _ in 0..OPS {
            cap.launch(&kernel)
                .params(&1u32)
                .arg_mut(&mut a)
                .grid_for(N as u64)
                .run()?;
        }
        let mut step = cap.finish()?;
        // Warm up: compilation, first bind groups, first timers.
        step.run().submit()?;
        for _ in 0..10 {
            ctx.launch(&kernel)
                .params(&1u32)
                .arg_mut(&mut a)
                .grid_for(N as u64)
                .run()?;
        }
        ctx.synchronize()?;
        setups.push(Setup {
            ctx,
            kernel,
            a,
            step,
        });
    }
    let mut launch_figures = vec![Vec::new(); setups.len()];
    let mut captured_figures = vec![Vec::new(); setups.len()];
    for _ in 0..OPS_ROUNDS {
        for (i, s) in setups.iter_mut().enumerate() {
            let Setup {
                ctx,
                kernel,
                a,
                step,
            } = s;
            launch_figures[i].push(measure(
                1,
                launches,
                || {
                    for _ in 0..launches {
                        ctx.launch(kernel)
                            .params(&1u32)
                            .arg_mut(a)
                            .grid_for(N as u64)
                            .run()?;
                    }
                    Ok(())
                },
                || Ok(ctx.synchronize()?),
            )?);
            captured_figures[i].push(measure(
                1,
                OPS,
                || {
                    step.run().submit()?;
                    Ok(())
                },
                || Ok(ctx.synchronize()?),
            )?);
        }
    }
    for s in &setups {
        // Kernel times were read back as they completed; reading them checks they exist.
        if let Some(times) = s.ctx.kernel_times()? {
            anyhow::ensure!(times.calls() > 0, "no kernel timed");
        }
    }
    Ok(TIMELINE_SETTINGS
        .iter()
        .zip(launch_figures.iter().zip(&captured_figures))
        .map(|((name, ..), (l, c))| (*name, median(l), median(c)))
        .collect())
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
    // The floor for 100 ops: the bind group made once (the parameter written once), then per
    // round the commands a captured step records again (pipeline, bind group and dispatch for
    // each op, in one pass) and one submit.
    queue.write_buffer(&uniform, 0, bytemuck::bytes_of(&1u32));
    let prebuilt_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some("raw prebuilt"),
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
    let per_op_groups: Vec<wgpu::BindGroup> = (0..OPS)
        .map(|_| {
            device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("raw prebuilt, one per op"),
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
            })
        })
        .collect();
    // One bind group for every dispatch, or one each.
    let raw_prebuilt = |group_per_op: bool| {
        let mut encoder = device.create_command_encoder(&Default::default());
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            for group in &per_op_groups {
                pass.set_pipeline(&pipeline);
                pass.set_bind_group(0, if group_per_op { group } else { &prebuilt_group }, &[]);
                pass.dispatch_workgroups((N / 64) as u32, 1, 1);
            }
        }
        queue.submit([encoder.finish()]);
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
    // `ops` single launches then one wait, with `flush()` after each when `flush_each` (a
    // submission each, as raw wgpu makes).
    let single_ops =
        |a: &mut gpu_arena::DeviceArray<u32>, ops: usize, flush_each: bool, runs: usize| {
            measure(
                runs,
                ops,
                || {
                    for _ in 0..ops {
                        ctx.launch(&kernel)
                            .params(&1u32)
                            .arg_mut(a)
                            .grid_for(N as u64)
                            .run()?;
                        if flush_each {
                            ctx.flush()?;
                        }
                    }
                    Ok(())
                },
                || Ok(ctx.synchronize()?),
            )
        };
    let rounds = 7;
    let (mut ours, mut ours_flushed, mut raw) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        ours.push(single_ops(&mut a, launches, false, 1)?);
        ours_flushed.push(single_ops(&mut a, launches, true, 1)?);
        raw.push(measure(
            1,
            launches,
            || {
                for _ in 0..launches {
                    raw_launch();
                }
                Ok(())
            },
            wait,
        )?);
    }
    let (launch_ours, launch_flushed, launch_raw) =
        (median(&ours), median(&ours_flushed), median(&raw));

    // The same 100 ops captured once: every run is one submission over bind groups made here.
    let mut step = {
        let mut cap = ctx.capture();
        for _ in 0..OPS {
            cap.launch(&kernel)
                .params(&1u32)
                .arg_mut(&mut a)
                .grid_for(N as u64)
                .run()?;
        }
        cap.finish()?
    };
    // One run of each before timing (the captured step's first, the raw pass's first).
    step.run().submit()?;
    raw_prebuilt(false);
    raw_prebuilt(true);
    wait()?;
    ctx.synchronize()?;

    // 100 small ops: single ops then one wait (gathered), each its own submission, one
    // sequence, one captured run, raw wgpu prebuilt; interleaved round by round, so all see
    // the same machine.
    let (mut gathered, mut each) = (Vec::new(), Vec::new());
    let (mut sequenced, mut captured, mut prebuilt) = (Vec::new(), Vec::new(), Vec::new());
    let mut prebuilt_groups = Vec::new();
    for _ in 0..OPS_ROUNDS {
        gathered.push(single_ops(&mut a, OPS, false, OPS_RUNS)?);
        each.push(single_ops(&mut a, OPS, true, OPS_RUNS)?);
        sequenced.push(measure(
            OPS_RUNS,
            OPS,
            || {
                let mut s = ctx.sequence();
                for _ in 0..OPS {
                    s.launch(&kernel)
                        .params(&1u32)
                        .arg_mut(&mut a)
                        .grid_for(N as u64)
                        .run()?;
                }
                s.submit()?;
                Ok(())
            },
            || Ok(ctx.synchronize()?),
        )?);
        captured.push(measure(
            OPS_RUNS,
            OPS,
            || {
                step.run().submit()?;
                Ok(())
            },
            || Ok(ctx.synchronize()?),
        )?);
        for (group_per_op, figures) in [(false, &mut prebuilt), (true, &mut prebuilt_groups)] {
            figures.push(measure(
                OPS_RUNS,
                OPS,
                || {
                    raw_prebuilt(group_per_op);
                    Ok(())
                },
                wait,
            )?);
        }
    }
    let (gathered, each, sequenced) = (median(&gathered), median(&each), median(&sequenced));
    let (captured, prebuilt) = (median(&captured), median(&prebuilt));
    let prebuilt_groups = median(&prebuilt_groups);
    let bind_groups_per_run = {
        let before = ctx.bind_groups_made();
        step.run().submit()?;
        ctx.bind_groups_made() - before
    };
    anyhow::ensure!(
        bind_groups_per_run == 0,
        "a captured run made {bind_groups_per_run} bind groups"
    );
    drop(step);
    // Every launch added 1 to every element: check the work really ran (the captured step
    // ran once before the rounds, OPS_RUNS times per round and once more after).
    let expected = (10 + 2 * rounds * launches + 4 * OPS_ROUNDS * OPS_RUNS * OPS + 2 * OPS) as u32;
    let got = ctx.device_get(&a)?;
    anyhow::ensure!(
        got.iter().all(|&v| v == expected),
        "expected {expected} everywhere, got {:?}",
        &got[..4]
    );

    let timeline = timeline_costs(launches)?;
    let (off_launch, off_captured) = (timeline[0].1, timeline[0].2);

    if json {
        for (method, launch, captured) in &timeline {
            for (case, figures, off) in [
                ("timeline_launch", launch, off_launch),
                ("timeline_ops100_captured", captured, off_captured),
            ] {
                println!(
                    "{{\"case\": \"{case}\", \"method\": \"{method}\", \"us_per_op\": {:.2}, \"end_to_end_us_per_op\": {:.2}, \"issue_vs_timeline_off\": {:.3}, \"end_to_end_vs_timeline_off\": {:.3}}}",
                    figures.issue,
                    figures.end_to_end,
                    figures.issue / off.issue,
                    figures.end_to_end / off.end_to_end
                );
            }
        }
        for (case, method, figures) in [
            ("launch", "gpu-arena", launch_ours),
            ("launch", "gpu-arena_flush_each", launch_flushed),
            ("launch", "raw_wgpu", launch_raw),
            ("ops100", "single_ops_one_wait", gathered),
            ("ops100", "submit_each", each),
            ("ops100", "sequence", sequenced),
            ("ops100", "captured", captured),
            ("ops100", "raw_wgpu_prebuilt", prebuilt),
            ("ops100", "raw_wgpu_prebuilt_groups", prebuilt_groups),
        ] {
            println!(
                "{{\"case\": \"{case}\", \"method\": \"{method}\", \"us_per_op\": {:.2}, \"end_to_end_us_per_op\": {:.2}}}",
                figures.issue, figures.end_to_end
            );
        }
        println!(
            "{{\"case\": \"ops100_ratios\", \"captured_vs_raw_wgpu_prebuilt_issue\": {:.3}, \"captured_vs_raw_wgpu_prebuilt_groups_issue\": {:.3}, \"captured_vs_sequence_end_to_end\": {:.3}}}",
            captured.issue / prebuilt.issue,
            captured.issue / prebuilt_groups.issue,
            captured.end_to_end / sequenced.end_to_end
        );
    } else {
        println!(
            "CPU cost of issuing, on {} (medians of {rounds} rounds, {OPS_ROUNDS} of {OPS_RUNS} runs for 100 ops; end to end with the GPU's wait in brackets):",
            ctx.adapter_info().name
        );
        println!(
            "  gpu-arena launch   {:8.2} us ({:.2})   gathered, {:.2}x raw wgpu (target <= 1.2x)",
            launch_ours.issue,
            launch_ours.end_to_end,
            launch_ours.issue / launch_raw.issue
        );
        println!(
            "  launch + flush     {:8.2} us ({:.2})   a submission each",
            launch_flushed.issue, launch_flushed.end_to_end
        );
        println!(
            "  raw wgpu dispatch  {:8.2} us ({:.2})   launch + flush {:.2}x raw",
            launch_raw.issue,
            launch_raw.end_to_end,
            launch_flushed.issue / launch_raw.issue
        );
        println!("{OPS} small ops:");
        println!(
            "  single ops, 1 wait {:8.2} us/op ({:.2})   {:.2}x the sequence end to end (target <= 1.2x)",
            gathered.issue,
            gathered.end_to_end,
            gathered.end_to_end / sequenced.end_to_end
        );
        println!(
            "  {OPS} submissions     {:8.2} us/op ({:.2})",
            each.issue, each.end_to_end
        );
        println!(
            "  one sequence       {:8.2} us/op ({:.2})   {:.1}x cheaper (target >= 5x; {:.1}x end to end)",
            sequenced.issue,
            sequenced.end_to_end,
            each.issue / sequenced.issue,
            each.end_to_end / sequenced.end_to_end
        );
        println!(
            "  one captured run   {:8.2} us/op ({:.2})   {:.2}x raw prebuilt to issue (target <= 1.2x); {:.2}x the sequence end to end (target <= 1.0x)",
            captured.issue,
            captured.end_to_end,
            captured.issue / prebuilt.issue,
            captured.end_to_end / sequenced.end_to_end
        );
        println!(
            "  raw wgpu prebuilt  {:8.2} us/op ({:.2})   pipeline and one bind group made once",
            prebuilt.issue, prebuilt.end_to_end
        );
        println!(
            "  ... 100 bind groups {:7.2} us/op ({:.2})   one made once per dispatch, as captured; captured {:.2}x",
            prebuilt_groups.issue,
            prebuilt_groups.end_to_end,
            captured.issue / prebuilt_groups.issue
        );
        println!("The timeline's cost (a context each; ratios to the timeline off):");
        for (method, launch, captured) in &timeline {
            println!(
                "  {method:<22} launch {:6.2} us ({:.2}) {:.2}x ({:.2}x)   captured 100 ops {:6.2} us/op ({:.2}) {:.2}x ({:.2}x)",
                launch.issue,
                launch.end_to_end,
                launch.issue / off_launch.issue,
                launch.end_to_end / off_launch.end_to_end,
                captured.issue,
                captured.end_to_end,
                captured.issue / off_captured.issue,
                captured.end_to_end / off_captured.end_to_end
            );
        }
    }
    Ok(())
}
