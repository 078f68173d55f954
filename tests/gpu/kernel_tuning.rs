//! Kernel tuning: every shape of every library kernel writes the bytes a host reference of
//! XLA's ops writes (every element size, aligned and unaligned boxes, clamped starts, grids
//! split into several dispatches); tuning measures each kernel and size class once, keeps a
//! shape it measured, shares it with every context of the process and with the next process
//! through the tuning file; `cached` and `off` never measure; a damaged, foreign or planted
//! file is ignored with a warning and rewritten, never trusted.

use crate::harness::{self, context_with, test_config, Rng};
use gpu_arena::kernels::{
    DiskCacheLoad, KernelShape, KernelTuning, SizeClass, TuningClock, TuningOrigin, CACHE_DIR_ENV,
};
use gpu_arena::{ArenaConfig, Context, Error};

/// A context whose ops run the WGSL kernels (also on a CPU adapter) under `tuning`.
fn tuned_context(tuning: KernelTuning, max_workgroups: Option<u32>) -> Context {
    context_with(ArenaConfig {
        force_device_kernels: true,
        kernel_tuning: tuning,
        max_workgroups_per_dimension: max_workgroups,
        ..test_config()
    })
}

/// One `dynamic_update_slice` and one `dynamic_slice` of a box on an operand.
struct BoxCase {
    shape: &'static [usize],
    sizes: &'static [usize],
    /// Starts as asked (XLA clamps them so that the box fits).
    start: &'static [i64],
}

/// Aligned and unaligned boxes: whole rows (one contiguous row), rows of 16-byte multiples,
/// of words, of odd bytes, a column, and starts past either end that clamp.
const CASES: [BoxCase; 8] = [
    BoxCase {
        shape: &[64, 40],
        sizes: &[10, 40],
        start: &[7, 0],
    },
    BoxCase {
        shape: &[64, 40],
        sizes: &[10, 12],
        start: &[5, 4],
    },
    BoxCase {
        shape: &[37, 29],
        sizes: &[5, 7],
        start: &[3, 4],
    },
    BoxCase {
        shape: &[37, 29],
        sizes: &[6, 5],
        start: &[35, 27],
    },
    BoxCase {
        shape: &[37, 29],
        sizes: &[5, 7],
        start: &[-3, 4],
    },
    BoxCase {
        shape: &[33, 18],
        sizes: &[33, 1],
        start: &[0, 17],
    },
    BoxCase {
        shape: &[7, 9, 11],
        sizes: &[3, 4, 5],
        start: &[5, 7, 9],
    },
    BoxCase {
        shape: &[300, 1000],
        sizes: &[120, 1000],
        start: &[170, 0],
    },
];

fn row_major_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * shape[d + 1];
    }
    strides
}

/// Element offsets in the operand of every element of the box, in row-major box order, with
/// XLA's clamped start.
fn box_offsets(case: &BoxCase) -> Vec<usize> {
    let strides = row_major_strides(case.shape);
    let start: Vec<usize> = (0..case.shape.len())
        .map(|d| case.start[d].clamp(0, (case.shape[d] - case.sizes[d]) as i64) as usize)
        .collect();
    let count: usize = case.sizes.iter().product();
    let box_strides = row_major_strides(case.sizes);
    (0..count)
        .map(|i| {
            (0..case.shape.len())
                .map(|d| (start[d] + i / box_strides[d] % case.sizes[d]) * strides[d])
                .sum()
        })
        .collect()
}

/// What the ops of one case give on the device, as bytes: the updated operand (in place), the
/// slice, a copy of the operand, and fills of the operand's size.
fn device_outcome<T: bytemuck::Pod>(ctx: &Context, case: &BoxCase, seed: u64) -> Vec<u8> {
    let (operand, update, value) = inputs::<T>(case, seed);
    let mut array = ctx.device_put(&operand, case.shape).unwrap();
    let update = ctx.device_put(&update, case.sizes).unwrap();
    array = ctx
        .dynamic_update_slice(array, &update, case.start)
        .unwrap();
    let slice = ctx.dynamic_slice(&array, case.start, case.sizes).unwrap();
    let copy = ctx.copy(&array).unwrap();
    let filled = ctx.fill(case.shape, value).unwrap();
    let mut out = Vec::new();
    for result in [&array, &slice, &copy, &filled] {
        out.extend_from_slice(bytemuck::cast_slice(&ctx.device_get(result).unwrap()));
    }
    out
}

/// [`device_outcome`] on the host.
fn host_outcome<T: bytemuck::Pod>(case: &BoxCase, seed: u64) -> Vec<u8> {
    let (mut operand, update, value) = inputs::<T>(case, seed);
    let offsets = box_offsets(case);
    for (at, v) in offsets.iter().zip(&update) {
        operand[*at] = *v;
    }
    let slice: Vec<T> = offsets.iter().map(|&at| operand[at]).collect();
    let filled = vec![value; operand.len()];
    let mut out = Vec::new();
    for result in [&operand, &slice, &operand, &filled] {
        out.extend_from_slice(bytemuck::cast_slice(result));
    }
    out
}

/// A case's operand, update and fill value, from `seed`.
fn inputs<T: bytemuck::Pod>(case: &BoxCase, seed: u64) -> (Vec<T>, Vec<T>, T) {
    let mut rng = Rng(seed);
    let size = std::mem::size_of::<T>();
    let mut values = |n: usize| -> Vec<T> { bytemuck::pod_collect_to_vec(&rng.bytes(n * size)) };
    let operand = values(case.shape.iter().product());
    let update = values(case.sizes.iter().product());
    let value = values(1)[0];
    (operand, update, value)
}

/// Every case in every element size on `ctx`, or on the host.
fn all_outcomes(ctx: Option<&Context>) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for (i, case) in CASES.iter().enumerate() {
        let seed = i as u64;
        out.push(match ctx {
            Some(ctx) => device_outcome::<u8>(ctx, case, seed),
            None => host_outcome::<u8>(case, seed),
        });
        out.push(match ctx {
            Some(ctx) => device_outcome::<u16>(ctx, case, seed + 100),
            None => host_outcome::<u16>(case, seed + 100),
        });
        out.push(match ctx {
            Some(ctx) => device_outcome::<u32>(ctx, case, seed + 200),
            None => host_outcome::<u32>(case, seed + 200),
        });
        out.push(match ctx {
            Some(ctx) => device_outcome::<u64>(ctx, case, seed + 300),
            None => host_outcome::<u64>(case, seed + 300),
        });
    }
    out
}

#[gpu_test]
fn every_shape_writes_the_reference_bytes_for_every_op_element_size_and_alignment() {
    let expected = all_outcomes(None);
    let probe = tuned_context(KernelTuning::Off, None);
    let mut shapes = KernelShape::candidates(probe.adapter_info().subgroup_max_size);
    shapes.push(KernelShape::FIXED_BYTES);
    drop(probe);
    for shape in shapes {
        // Also with grids cut into several dispatches, each from its own first item.
        for max_workgroups in [None, Some(2)] {
            let ctx = tuned_context(KernelTuning::Forced(shape), max_workgroups);
            let got = all_outcomes(Some(&ctx));
            for (i, (got, want)) in got.iter().zip(&expected).enumerate() {
                assert!(
                    got == want,
                    "shape {shape}, {max_workgroups:?} workgroups per dimension: case {} in \
                     element size {} differs from the reference",
                    i / 4,
                    1 << (i % 4)
                );
            }
            assert!(ctx.kernel_cache_stats().pipelines_compiled > 0);
        }
    }
}

#[gpu_test]
fn a_forced_shape_the_kernels_cannot_take_is_refused_by_the_configuration() {
    for shape in [
        KernelShape {
            workgroup: 48,
            per_invocation: 4,
        },
        KernelShape {
            workgroup: 512,
            per_invocation: 4,
        },
        KernelShape {
            workgroup: 256,
            per_invocation: 3,
        },
        KernelShape {
            workgroup: 0,
            per_invocation: 0,
        },
    ] {
        let config = ArenaConfig {
            kernel_tuning: KernelTuning::Forced(shape),
            ..test_config()
        };
        match Context::new(config) {
            Err(Error::Config {
                variable,
                value,
                expected,
            }) => {
                assert_eq!(variable, "ArenaConfig::kernel_tuning");
                assert_eq!(value, shape.to_string());
                assert!(expected.contains("256x4"), "{expected}");
            }
            other => panic!("{shape}: {:?}", other.map(|_| "a context")),
        }
        // At run time too, and the context keeps its setting.
        let ctx = tuned_context(KernelTuning::Off, None);
        match ctx.set_kernel_tuning(KernelTuning::Forced(shape)) {
            Err(Error::Config { variable, .. }) => {
                assert_eq!(variable, "Context::set_kernel_tuning")
            }
            other => panic!("{shape}: {other:?}"),
        }
        assert_eq!(ctx.tune_kernels().unwrap().jobs, ctx.kernel_tuning().jobs);
    }
}

#[gpu_test]
fn two_threads_switching_shapes_on_one_array_keep_every_result_exact() {
    let ctx = tuned_context(KernelTuning::Off, None);
    let shapes = KernelShape::candidates(ctx.adapter_info().subgroup_max_size);
    let array = std::sync::Mutex::new(Some(ctx.fill(&[512, 64], 0u32).unwrap()));
    std::thread::scope(|s| {
        for thread in 0..2u32 {
            let (ctx, shapes, array) = (&ctx, &shapes, &array);
            s.spawn(move || {
                for (i, shape) in shapes.iter().enumerate() {
                    ctx.set_kernel_tuning(KernelTuning::Forced(*shape)).unwrap();
                    let value = thread * 100 + i as u32;
                    let row = ctx.fill(&[1, 64], value).unwrap();
                    let mut guard = array.lock().unwrap();
                    let operand = guard.take().unwrap();
                    let start = [i64::from(thread * 100) + i as i64, 0];
                    let operand = ctx.dynamic_update_slice(operand, &row, &start).unwrap();
                    let back = ctx.dynamic_slice(&operand, &start, &[1, 64]).unwrap();
                    *guard = Some(operand);
                    drop(guard);
                    assert_eq!(ctx.device_get(&back).unwrap(), vec![value; 64], "{shape}");
                }
            });
        }
    });
}

#[gpu_test]
fn tuning_measures_each_kernel_and_size_class_once_and_every_context_shares_the_choice() {
    // A child process: its table of choices starts empty whatever this binary ran before.
    let child = harness::run_test_in_child(
        module_path!(),
        "child_tunes_once_per_kernel_and_class",
        &[(CHILD, "1")],
    );
    assert!(child.status.success(), "{}", child.text);
}

/// Set in the children this file starts.
const CHILD: &str = "GPU_ARENA_TEST_TUNING_CHILD";

#[gpu_test]
fn tuning_times_by_the_devices_timestamps_where_it_has_them() {
    let child =
        harness::run_test_in_child(module_path!(), "child_tunes_by_timestamps", &[(CHILD, "1")]);
    assert!(child.status.success(), "{}", child.text);
}

#[gpu_test]
fn child_tunes_by_timestamps() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    // Without the timeline the device is asked for no timestamps: the wall clock.
    let plain = tuned_context(KernelTuning::On, None);
    assert_eq!(plain.kernel_tuning().clock, TuningClock::WallClock);
    let timed = context_with(ArenaConfig {
        force_device_kernels: true,
        timeline_capacity: gpu_arena::profile::DEFAULT_TIMELINE_CAPACITY,
        ..test_config()
    });
    let has = timed
        .device()
        .features()
        .contains(gpu_arena::wgpu::Features::TIMESTAMP_QUERY);
    let clock = timed.kernel_tuning().clock;
    assert_eq!(
        clock,
        if has {
            TuningClock::Timestamps
        } else {
            TuningClock::WallClock
        }
    );
    // The op that tunes (stamps, their readback and all) makes the submissions an op of a
    // tuned class makes, and leaves what was gathered gathered.
    let submissions = |value: u32| {
        let (made, filled) = harness::submissions_made(&timed, || timed.fill(&[70_000], value));
        (made, filled.unwrap())
    };
    let (tuning_op, a) = submissions(3);
    let (tuned_op, _) = submissions(3);
    assert_eq!(tuning_op, tuned_op);
    assert_eq!(timed.device_get(&a).unwrap(), vec![3; 70_000]);
    // Two threads need another class: one job, timed by that clock.
    std::thread::scope(|s| {
        for value in [4u8, 5] {
            let timed = &timed;
            s.spawn(move || {
                let a = timed.fill(&[100], value).unwrap();
                assert_eq!(timed.device_get(&a).unwrap(), vec![value; 100]);
            });
        }
    });
    let report = timed.kernel_tuning();
    assert_eq!(report.jobs, 2, "{report:?}");
    let [small, fill] = report.kernels.as_slice() else {
        panic!("{report:?}");
    };
    let (small, fill) = (small.clone(), fill.clone());
    assert_eq!(fill.size_class, SizeClass::Medium);
    assert_eq!(fill.origin, TuningOrigin::Measured);
    assert!(KernelShape::candidates(timed.adapter_info().subgroup_max_size).contains(&fill.shape));
    for rate in [
        fill.bytes_per_second,
        fill.fixed_bytes_per_second,
        fill.device_copy_bytes_per_second,
    ] {
        assert!(rate.is_finite() && rate > 0.0, "{fill:?}");
    }
    assert!(
        fill.bytes_per_second >= fill.fixed_bytes_per_second,
        "{fill:?}"
    );
    // Tuning's stamps and dispatches are not the program's: the timeline times only the op.
    let times = timed.kernel_times().unwrap();
    if has {
        let times = times.expect("the timeline times kernels");
        assert_eq!(times.get("fill").map(|k| k.calls), Some(4), "{times}");
    }
    // The fill's large class is not tuned yet: its candidates stay compiled.
    assert!(timed.kernel_cache_stats().tuning_pipelines_held > 0);
    // Every kernel and class tuned: the context holds only the chosen shapes no op ran yet.
    let report = timed.tune_kernels().unwrap();
    assert_eq!(report.kernels.len(), 18, "{report:?}");
    let ran = [small.shape, fill.shape];
    let mut chosen: Vec<(&str, KernelShape)> = report
        .kernels
        .iter()
        .filter(|k| !(k.kernel == "fill" && ran.contains(&k.shape)))
        .map(|k| (k.kernel, k.shape))
        .collect();
    chosen.sort();
    chosen.dedup();
    assert_eq!(
        timed.kernel_cache_stats().tuning_pipelines_held,
        chosen.len() as u64,
        "{chosen:?}"
    );
}

#[gpu_test]
fn child_tunes_once_per_kernel_and_class() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let candidates = |ctx: &Context| KernelShape::candidates(ctx.adapter_info().subgroup_max_size);
    // The host link: a guard that refuses explicit transfers refuses its measurement, and
    // nothing is kept; two threads then measure it once and read the same figure.
    let guarded = context_with(ArenaConfig {
        transfer_guard: gpu_arena::TransferGuardLevels::all(
            gpu_arena::TransferGuardLevel::DisallowExplicit,
        ),
        ..test_config()
    });
    assert!(matches!(
        guarded.host_link_bandwidth(),
        Err(Error::TransferGuard { .. })
    ));
    assert_eq!(guarded.kernel_tuning().host_link_bytes_per_second, None);
    drop(guarded);
    // Both directions are checked before anything moves: with only the way back refused,
    // nothing went out either. On the thread that holds a capture open it is refused by name.
    let one_way = context_with(test_config());
    {
        let _back = gpu_arena::TransferGuard::scoped_direction(
            gpu_arena::TransferDirection::HostToDevice,
            gpu_arena::TransferGuardLevel::DisallowExplicit,
        );
        let refused = one_way.host_link_bandwidth().unwrap_err();
        assert!(
            matches!(
                refused,
                Error::TransferGuard {
                    direction: gpu_arena::TransferDirection::HostToDevice,
                    operation: "host_link_bandwidth",
                    ..
                }
            ),
            "{refused:?}"
        );
    }
    assert_eq!(one_way.transfer_stats().device_to_host.explicit.count, 0);
    let capture = one_way.capture();
    assert!(matches!(
        one_way.host_link_bandwidth(),
        Err(Error::EagerDuringCapture {
            operation: "host_link_bandwidth",
            ..
        })
    ));
    drop(capture);
    drop(one_way);
    // A pinned-host kind too small for the measurement's array: its out of memory, nothing
    // kept.
    let small = context_with(ArenaConfig {
        pinned_host_bytes: Some(256),
        ..test_config()
    });
    assert!(matches!(
        small.host_link_bandwidth(),
        Err(Error::OutOfMemory { .. })
    ));
    assert_eq!(small.kernel_tuning().host_link_bytes_per_second, None);
    drop(small);
    let link = tuned_context(KernelTuning::Off, None);
    let rates: Vec<f64> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..2)
            .map(|_| s.spawn(|| link.host_link_bandwidth().unwrap()))
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    assert_eq!(rates[0], rates[1]);
    assert_eq!(
        link.kernel_tuning().host_link_bytes_per_second,
        Some(rates[0])
    );
    // Its moves are the program's explicit transfers, counted once: 8 round trips of 16 MiB.
    let stats = link.transfer_stats();
    for direction in [stats.device_to_host, stats.host_to_device] {
        assert_eq!(
            (direction.explicit.count, direction.explicit.bytes),
            (8, 8 << 24),
            "{stats:?}"
        );
    }
    // `cached` and `off` never measure, not even when asked to tune every kernel.
    for tuning in [KernelTuning::Cached, KernelTuning::Off] {
        let ctx = tuned_context(tuning, None);
        let a = ctx.fill(&[70_000], 3u32).unwrap();
        assert_eq!(ctx.device_get(&a).unwrap(), vec![3; 70_000]);
        let report = ctx.kernel_tuning();
        assert_eq!(
            (report.jobs, report.kernels.len()),
            (0, 0),
            "{tuning}: {report:?}"
        );
        let asked = ctx.tune_kernels().unwrap();
        assert_eq!(asked.jobs, 0, "{tuning}: {asked:?}");
    }
    // A user's sequence takes the fixed shape and does not tune either.
    let ctx = tuned_context(KernelTuning::On, None);
    let mut sequence = ctx.sequence();
    let a = sequence.fill(&[70_000], 5u32).unwrap();
    sequence.submit().unwrap();
    assert_eq!(ctx.device_get(&a).unwrap(), vec![5; 70_000]);
    assert_eq!(ctx.kernel_tuning().jobs, 0);
    // The first single op of a kernel and class tunes it: 70,000 words is a medium fill.
    let compiled_before = ctx.kernel_cache_stats().pipelines_compiled;
    // Tuning's own work is not the program's: the op that tunes makes the submissions an op
    // of a tuned class makes.
    let submissions = |value: u32| {
        let (made, filled) = harness::submissions_made(&ctx, || ctx.fill(&[70_000], value));
        (made, filled.unwrap())
    };
    let (tuning_op, b) = submissions(6);
    let (tuned_op, _) = submissions(6);
    assert_eq!(tuning_op, tuned_op);
    assert_eq!(ctx.device_get(&b).unwrap(), vec![6; 70_000]);
    let report = ctx.kernel_tuning();
    assert_eq!(report.jobs, 1, "{report:?}");
    let [fill] = report.kernels.as_slice() else {
        panic!("{report:?}");
    };
    assert_eq!((fill.kernel, fill.size_class), ("fill", SizeClass::Medium));
    assert_eq!(fill.origin, TuningOrigin::Measured);
    assert_eq!(fill.fixed_shape, KernelShape::FIXED);
    assert!(candidates(&ctx).contains(&fill.shape), "{fill:?}");
    assert!(fill.fixed_bytes_per_second > 0.0 && fill.device_copy_bytes_per_second > 0.0);
    assert!(
        fill.bytes_per_second >= fill.fixed_bytes_per_second,
        "{fill:?}"
    );
    assert!(report.tuning_time > std::time::Duration::ZERO);
    // Shapes compiled only to be timed are not counted; the one the op used is, once (the
    // sequence compiled the fixed shape already).
    assert_eq!(
        ctx.kernel_cache_stats().pipelines_compiled,
        compiled_before + u64::from(fill.shape != KernelShape::FIXED)
    );
    // Later ops of the class, and other contexts (two threads at once), reuse the choice.
    let other = tuned_context(KernelTuning::On, None);
    std::thread::scope(|s| {
        for (ctx, value) in [(&ctx, 7u32), (&other, 8u32)] {
            s.spawn(move || {
                let c = ctx.fill(&[100_000], value).unwrap();
                assert_eq!(ctx.device_get(&c).unwrap(), vec![value; 100_000]);
            });
        }
    });
    assert_eq!(other.kernel_tuning().jobs, 1);
    // A small fill is another class: tuned once, by whichever of two threads comes first.
    std::thread::scope(|s| {
        for ctx in [&ctx, &other] {
            s.spawn(move || {
                let c = ctx.fill(&[100], 9u8).unwrap();
                assert_eq!(ctx.device_get(&c).unwrap(), vec![9; 100]);
            });
        }
    });
    let report = other.kernel_tuning();
    assert_eq!(report.jobs, 2, "{report:#?}");
    assert_eq!(
        report
            .kernels
            .iter()
            .map(|k| k.size_class)
            .collect::<Vec<_>>(),
        [SizeClass::Small, SizeClass::Medium]
    );
    // Without GPU_ARENA_CACHE_DIR nothing is written.
    assert_eq!(
        (report.file.as_ref(), &report.file_load),
        (None, &DiskCacheLoad::Off)
    );
}

#[gpu_test]
fn the_next_process_reads_the_tuning_file_and_measures_nothing() {
    let dir = std::env::temp_dir().join(format!("gpu-arena-tuning-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let dir_text = dir.to_str().unwrap();
    let run = |scenario: &str| {
        let child = harness::run_test_in_child(
            module_path!(),
            "child_with_a_tuning_file",
            &[(CHILD, scenario), (CACHE_DIR_ENV, dir_text)],
        );
        assert!(child.status.success(), "{scenario}: {}", child.text);
        child.text
    };
    run("first");
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("kernel-tuning-")
        })
        .collect();
    let [file] = files.as_slice() else {
        panic!("{files:?}");
    };
    run("next");
    // A damaged file (one byte flipped, truncated, emptied), one another device wrote (its
    // checksum made good), and one naming a shape tuning never measures: each is ignored with
    // a warning, the kernel is measured again, and the file is valid after.
    let good = std::fs::read(file).unwrap();
    let body = String::from_utf8_lossy(&good[..good.len() - 16]).into_owned();
    let with_trailer = |text: &str| {
        let mut bytes = text.as_bytes().to_vec();
        let checksum = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        bytes.extend_from_slice(&checksum.to_le_bytes());
        bytes.extend_from_slice(b"gpuarena");
        bytes
    };
    let mut flipped = good.clone();
    flipped[good.len() / 3] ^= 0x20;
    let foreign = body.replacen("device ", "device another GPU ", 1);
    let planted = body
        .lines()
        .map(
            |line| match line.split('\t').collect::<Vec<_>>().as_slice() {
                [kernel, class, _shape, rest @ ..] => {
                    format!("{kernel}\t{class}\t1024x8\t{}", rest.join("\t"))
                }
                _ => line.to_string(),
            },
        )
        .collect::<Vec<_>>()
        .join("\n")
        + "\n";
    for (what, contents) in [
        ("flipped", flipped),
        ("truncated", good[..good.len() / 2].to_vec()),
        ("empty", Vec::new()),
        ("foreign", with_trailer(&foreign)),
        ("planted", with_trailer(&planted)),
    ] {
        std::fs::write(file, &contents).unwrap();
        let text = run("damaged");
        assert!(text.contains("damaged file ok"), "{what}: {text}");
        // Rewritten after the new measurement: the next process uses it again.
        run("next");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[gpu_test]
fn child_with_a_tuning_file() {
    let Some(scenario) = std::env::var_os(CHILD) else {
        return;
    };
    let ctx = tuned_context(KernelTuning::On, None);
    let a = ctx.fill(&[70_000], 4u32).unwrap();
    assert_eq!(ctx.device_get(&a).unwrap(), vec![4; 70_000]);
    // A user's kernel tuned over its workgroup size, kept in the same file.
    let mut y = ctx.device_put(&[0.0f32; 1024], &[1024]).unwrap();
    let mut calls = 0;
    let desc = gpu_arena::kernels::KernelDesc::wgsl(USER_WGSL, "main");
    let user = ctx
        .tune_kernel(desc, "WG", &[32.0, 64.0], |k| {
            calls += 1;
            ctx.launch(k).arg_mut(&mut y).grid_for(1024usize).run()
        })
        .unwrap();
    assert!([32, 64].contains(&user.workgroup_size()[0]));
    let report = ctx.kernel_tuning();
    let [tuned_user] = report.user_kernels.as_slice() else {
        panic!("{report:?}");
    };
    assert!(
        report.file.is_some() && report.file_write_error.is_none(),
        "{report:?}"
    );
    let fill = report
        .kernels
        .iter()
        .find(|k| (k.kernel, k.size_class) == ("fill", SizeClass::Medium))
        .unwrap_or_else(|| panic!("{report:?}"));
    match scenario.to_str().unwrap() {
        "first" => {
            // The host link, measured once and kept in the same file.
            let rate = ctx.host_link_bandwidth().unwrap();
            assert!(rate > 0.0 && rate.is_finite());
            assert_eq!(ctx.host_link_bandwidth().unwrap(), rate);
            assert_eq!(ctx.kernel_tuning().host_link_bytes_per_second, Some(rate));
            assert_eq!(report.file_load, DiskCacheLoad::NoFile);
            assert_eq!((report.jobs, fill.origin), (2, TuningOrigin::Measured));
            assert_eq!(tuned_user.origin, TuningOrigin::Measured);
            assert!(calls >= 2 * 4, "{calls}");
        }
        "next" => {
            assert!(report.host_link_bytes_per_second.is_some(), "{report:?}");
            assert_eq!(report.file_load, DiskCacheLoad::Used);
            assert_eq!((report.jobs, fill.origin), (0, TuningOrigin::File));
            assert_eq!((tuned_user.origin, calls), (TuningOrigin::File, 0));
            assert_eq!(tuned_user.value, f64::from(user.workgroup_size()[0]));
            // `cached` uses the file's choice too.
            let cached = tuned_context(KernelTuning::Cached, None);
            let b = cached.fill(&[70_000], 5u32).unwrap();
            assert_eq!(cached.device_get(&b).unwrap(), vec![5; 70_000]);
            assert_eq!(cached.kernel_tuning().jobs, 0);
        }
        "damaged" => {
            ctx.host_link_bandwidth().unwrap();
            assert!(
                matches!(&report.file_load, DiskCacheLoad::Discarded { reason } if !reason.is_empty()),
                "{report:?}"
            );
            assert_eq!((report.jobs, fill.origin), (2, TuningOrigin::Measured));
            println!("damaged file ok");
        }
        other => panic!("scenario {other}"),
    }
}

/// A user's kernel whose workgroup size is an override constant.
const USER_WGSL: &str = "override WG: u32 = 64u;
    override SCALE: f32 = 2.0;
    @group(0) @binding(0) var<storage, read_write> y: array<f32>;
    @compute @workgroup_size(WG)
    fn main(@builtin(global_invocation_id) i: vec3<u32>, @builtin(num_workgroups) n: vec3<u32>) {
        let at = i.x + i.y * n.x * WG;
        if (at < arrayLength(&y)) { y[at] = y[at] * SCALE + 1.0; }
    }";

#[gpu_test]
fn a_users_kernel_is_tuned_over_its_constant_once_and_the_choice_is_reused() {
    use gpu_arena::kernels::KernelDesc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let ctx = tuned_context(KernelTuning::On, None);
    let values = [32.0, 64.0, 128.0];
    // A label of its own: other tests of this binary tune other kernels.
    let desc = KernelDesc::wgsl(USER_WGSL, "main").label("tuned-scale");
    let y = std::sync::Mutex::new(ctx.fill(&[4096], 1.0f32).unwrap());
    let calls = AtomicUsize::new(0);
    let run = |k: &gpu_arena::Kernel| {
        calls.fetch_add(1, Ordering::Relaxed);
        let mut y = y.lock().unwrap();
        ctx.launch(k).arg_mut(&mut *y).grid_for(4096usize).run()
    };
    // Two threads at once: one job measures, the other waits for it and gets its choice.
    let kernels: Vec<_> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..2)
            .map(|_| s.spawn(|| ctx.tune_kernel(desc, "WG", &values, run).unwrap()))
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let measured = calls.load(Ordering::Relaxed);
    assert!(
        (values.len() * 4..=values.len() * 6).contains(&measured),
        "{measured} calls"
    );
    let wg = kernels[0].workgroup_size()[0];
    assert_eq!(kernels[1].workgroup_size()[0], wg);
    assert!(values.contains(&f64::from(wg)), "{wg}");
    let report = ctx.kernel_tuning();
    let tuned = report
        .user_kernels
        .iter()
        .find(|k| k.kernel == "tuned-scale")
        .unwrap_or_else(|| panic!("{report:?}"));
    assert_eq!(
        (tuned.constant.as_str(), tuned.value),
        ("WG", f64::from(wg))
    );
    assert_eq!(tuned.origin, TuningOrigin::Measured);
    assert_eq!(tuned.seconds.len(), 3);
    assert!(tuned.seconds.iter().all(|&(_, s)| s > 0.0));
    // Asked again (any context of the process): no call, the same kernel.
    let again = tuned_context(KernelTuning::On, None)
        .tune_kernel(desc, "WG", &values, |_| panic!("measured again"))
        .unwrap();
    assert_eq!(again.workgroup_size()[0], wg);
    // The kernel it returns computes: every element went through each call's y * 2 + 1.
    let mut y = y.into_inner().unwrap();
    let mut expected = 1.0f32;
    for _ in 0..measured {
        expected = expected * 2.0 + 1.0;
    }
    let chosen = kernels[0].clone();
    ctx.launch(&chosen)
        .arg_mut(&mut y)
        .grid_for(4096usize)
        .run()
        .unwrap();
    let got = ctx.device_get(&y).unwrap();
    assert!(
        got.iter().all(|&v| v == expected * 2.0 + 1.0),
        "{:?}",
        &got[..4]
    );
}

#[gpu_test]
fn tuning_a_users_kernel_refuses_what_cannot_compile_and_keeps_nothing_a_run_failed() {
    use gpu_arena::kernels::KernelDesc;
    let ctx = tuned_context(KernelTuning::On, None);
    let desc = KernelDesc::wgsl(USER_WGSL, "main").label("refused-scale");
    let never = |_: &gpu_arena::Kernel| -> gpu_arena::Result<()> { panic!("run called") };
    let compile_error = |result: gpu_arena::Result<gpu_arena::Kernel>| match result {
        Err(Error::KernelCompile { kernel, message }) => (kernel, message),
        other => panic!("{:?}", other.map(|k| k.workgroup_size())),
    };
    let (kernel, message) = compile_error(ctx.tune_kernel(desc, "WG", &[], never));
    assert_eq!(kernel, "refused-scale");
    assert!(
        message.contains("no values") && message.contains("WG"),
        "{message}"
    );
    compile_error(ctx.tune_kernel(desc, "NOT_THERE", &[64.0], never));
    // Every value is checked before any is compiled: a refused call compiles nothing.
    let compiled = ctx.kernel_cache_stats().pipelines_compiled;
    compile_error(ctx.tune_kernel(desc, "WG", &[96.0, 48.0, 1.5], never));
    compile_error(ctx.tune_kernel(desc, "WG", &[96.0, 48.0, f64::NAN], never));
    let (_, message) = compile_error(ctx.tune_kernel(desc, "WG", &[64.0, 4096.0], never));
    assert!(
        message.contains("max_compute_workgroup_size_x"),
        "{message}"
    );
    // A size the compiler itself refuses still names this device's limits and their values.
    let (_, message) = compile_error(ctx.tune_kernel(desc, "WG", &[64.0, 65535.0], never));
    let limit = ctx.limits().max_compute_workgroup_size_x;
    assert!(
        message.contains("max_compute_workgroup_size_x") && message.contains(&limit.to_string()),
        "{message}"
    );
    assert_eq!(ctx.kernel_cache_stats().pipelines_compiled, compiled);
    // Unlabelled, the report names the kernel as everything else does (entry point and hash),
    // and a value given twice is timed once.
    let unlabelled = KernelDesc::wgsl(USER_WGSL, "main");
    let mut z = ctx.device_put(&[1.0f32; 64], &[64]).unwrap();
    let k = ctx
        .tune_kernel(unlabelled, "SCALE", &[3.0, 3.0, 5.0], |k| {
            ctx.launch(k).arg_mut(&mut z).grid_for(64usize).run()
        })
        .unwrap();
    let report = ctx.kernel_tuning();
    let row = (report.user_kernels.iter())
        .find(|t| t.kernel == k.name())
        .unwrap_or_else(|| panic!("{} not in {report:?}", k.name()));
    assert!(k.name().starts_with("main#"), "{}", k.name());
    assert_eq!(row.seconds.len(), 2, "{row:?}");
    let both = KernelDesc::wgsl(USER_WGSL, "main").constants(&[("WG", 64.0)]);
    compile_error(ctx.tune_kernel(both, "WG", &[64.0, 128.0], never));
    // A run that fails: its error comes back, nothing is kept, the next call measures.
    let failing = |_: &gpu_arena::Kernel| -> gpu_arena::Result<()> {
        Err(Error::KernelCompile {
            kernel: "run".into(),
            message: "refused on purpose".into(),
        })
    };
    let (kernel, _) = compile_error(ctx.tune_kernel(desc, "WG", &[64.0, 128.0], failing));
    assert_eq!(kernel, "run");
    assert!(ctx
        .kernel_tuning()
        .user_kernels
        .iter()
        .all(|k| k.kernel != "refused-scale"));
    // A tuning asked for inside another's run measures nothing (and does not wait for the
    // job its own thread holds).
    let mut y = ctx.device_put(&[1.0f32; 256], &[256]).unwrap();
    let outer = ctx
        .tune_kernel(desc, "WG", &[64.0, 32.0], |k| {
            let inner = ctx.tune_kernel(desc, "SCALE", &[5.0, 6.0], never)?;
            assert_eq!(inner.workgroup_size(), [64, 1, 1]);
            ctx.launch(k).arg_mut(&mut y).grid_for(256usize).run()
        })
        .unwrap();
    assert!([32, 64].contains(&outer.workgroup_size()[0]));
    // Off and forced shapes measure nothing: the first value.
    for tuning in [KernelTuning::Off, KernelTuning::Forced(KernelShape::FIXED)] {
        ctx.set_kernel_tuning(tuning).unwrap();
        let k = ctx.tune_kernel(desc, "WG", &[128.0, 64.0], never).unwrap();
        assert_eq!(k.workgroup_size(), [128, 1, 1]);
    }
    // Cached, never tuned: the first value, nothing measured.
    ctx.set_kernel_tuning(KernelTuning::Cached).unwrap();
    let k = ctx.tune_kernel(desc, "SCALE", &[3.0, 4.0], never).unwrap();
    assert_eq!(k.workgroup_size(), [64, 1, 1]);
}

#[gpu_test]
fn tuning_is_refused_on_the_thread_that_holds_a_capture_open_and_nowhere_else() {
    // Under `Off` nothing is measured, so the refusal alone is what differs.
    let ctx = tuned_context(KernelTuning::Off, None);
    let mut capture = ctx.capture();
    // A measurement has no capture counterpart: the message offers only what can be done.
    let desc = gpu_arena::kernels::KernelDesc::wgsl(USER_WGSL, "main");
    let mut runs = 0;
    for refused in [
        ctx.tune_kernels().map(drop),
        ctx.host_link_bandwidth().map(drop),
        ctx.tune_kernel(desc, "WG", &[32.0, 64.0], |_| {
            runs += 1;
            Ok(())
        })
        .map(drop),
    ] {
        let error = refused.unwrap_err();
        assert!(
            matches!(error, Error::EagerDuringCapture { .. }),
            "{error:?}"
        );
        let message = error.to_string();
        assert!(!message.contains("Record it in the capture"), "{message}");
        assert!(message.contains("Finish the capture first"), "{message}");
    }
    assert_eq!(runs, 0, "a refused tune_kernel ran its workload");
    assert!(matches!(
        ctx.tune_kernels(),
        Err(Error::EagerDuringCapture {
            operation: "tune_kernels",
            ..
        })
    ));
    std::thread::scope(|s| {
        s.spawn(|| ctx.tune_kernels().unwrap()).join().unwrap();
    });
    capture.set_mode(gpu_arena::CaptureMode::Relaxed);
    ctx.tune_kernels().unwrap();
    drop(capture);
    // Once the capture is gone the call is the plain one.
    ctx.tune_kernels().unwrap();
}

#[gpu_test]
fn a_run_that_waits_for_threads_which_tune_other_kernels_and_measure_the_host_link_finishes() {
    // In a process of its own: the host link's figure is kept for the process.
    let child = harness::run_test_in_child(
        module_path!(),
        "child_run_waits_for_threads_that_tune",
        &[(CHILD, "1")],
    );
    assert!(child.status.success(), "{}", child.text);
}

#[gpu_test]
fn child_run_waits_for_threads_that_tune() {
    use gpu_arena::kernels::KernelDesc;
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let ctx = tuned_context(KernelTuning::On, None);
    let outer = KernelDesc::wgsl(USER_WGSL, "main").label("spawning-run");
    let other = KernelDesc::wgsl(USER_WGSL, "main").label("tuned-meanwhile");
    let (done, finished) = std::sync::mpsc::channel();
    let work = ctx.clone();
    std::thread::spawn(move || {
        let ctx = work;
        let mut y = ctx.fill(&[1024], 1.0f32).unwrap();
        let mut first = true;
        let kernel = ctx.tune_kernel(outer, "WG", &[64.0, 128.0], |k| {
            if std::mem::take(&mut first) {
                // Work handed to other threads and waited for: another kernel is tuned and
                // the host link measured while this job runs.
                let (inner, rate) = std::thread::scope(|s| {
                    let inner = s.spawn(|| {
                        let mut z = ctx.fill(&[256], 1.0f32)?;
                        ctx.tune_kernel(other, "WG", &[32.0, 64.0], |k| {
                            ctx.launch(k).arg_mut(&mut z).grid_for(256usize).run()
                        })
                    });
                    let rate = s.spawn(|| ctx.host_link_bandwidth());
                    (inner.join().unwrap(), rate.join().unwrap())
                });
                assert!([32, 64].contains(&inner?.workgroup_size()[0]));
                assert!(rate? > 0.0);
            }
            ctx.launch(k).arg_mut(&mut y).grid_for(1024usize).run()
        });
        done.send(kernel.map(|k| k.workgroup_size())).unwrap();
    });
    let wg = finished
        .recv_timeout(std::time::Duration::from_secs(120))
        .expect("the tuning finished")
        .unwrap();
    assert!([[64, 1, 1], [128, 1, 1]].contains(&wg), "{wg:?}");
    // Both were measured and kept.
    let report = ctx.kernel_tuning();
    for name in ["spawning-run", "tuned-meanwhile"] {
        let row = (report.user_kernels.iter())
            .find(|k| k.kernel == name)
            .unwrap_or_else(|| panic!("{name} not in {report:?}"));
        assert_eq!(row.origin, TuningOrigin::Measured);
    }
}

#[gpu_test]
fn a_constant_given_by_its_id_or_by_its_name_is_one_tuning() {
    use gpu_arena::kernels::KernelDesc;
    let ctx = tuned_context(KernelTuning::On, None);
    let wgsl = "@id(7) override IDC: u32 = 1u;
        override WG: u32 = 64u;
        @group(0) @binding(0) var<storage, read_write> y: array<u32>;
        @compute @workgroup_size(WG)
        fn main(@builtin(global_invocation_id) i: vec3<u32>) {
            if (i.x < arrayLength(&y)) { y[i.x] = y[i.x] + IDC; }
        }";
    let desc = KernelDesc::wgsl(wgsl, "main").label("tuned-by-id-or-name");
    let mut y = ctx.zeros::<u32>(&[1024]).unwrap();
    let by_name = ctx
        .tune_kernel(desc.constants(&[("IDC", 3.0)]), "WG", &[32.0, 64.0], |k| {
            ctx.launch(k).arg_mut(&mut y).grid_for(1024usize).run()
        })
        .unwrap();
    let never = |_: &gpu_arena::Kernel| -> gpu_arena::Result<()> { panic!("measured again") };
    let by_id = ctx
        .tune_kernel(desc.constants(&[("7", 3.0)]), "WG", &[32.0, 64.0], never)
        .unwrap();
    assert_eq!(by_id.workgroup_size(), by_name.workgroup_size());
    // Another value of the other constant is another tuning.
    let mut z = ctx.zeros::<u32>(&[1024]).unwrap();
    let mut calls = 0;
    ctx.tune_kernel(desc.constants(&[("7", 4.0)]), "WG", &[32.0, 64.0], |k| {
        calls += 1;
        ctx.launch(k).arg_mut(&mut z).grid_for(1024usize).run()
    })
    .unwrap();
    assert!(calls > 0);
}

/// Values that apply alike are one: `0.0` and `-0.0` are one candidate, and two `f64`s one
/// `f32` rounds to are one compiled kernel and one tuning.
#[gpu_test]
fn values_that_apply_alike_are_one_candidate_one_kernel_and_one_tuning() {
    use gpu_arena::kernels::KernelDesc;
    let ctx = tuned_context(KernelTuning::On, None);
    let wgsl = "override BIAS: u32 = 1u;
        @id(3) override SCALE: f32 = 1.0;
        @group(0) @binding(0) var<storage, read_write> y: array<f32>;
        @compute @workgroup_size(64)
        fn main(@builtin(global_invocation_id) i: vec3<u32>) {
            if (i.x < arrayLength(&y)) { y[i.x] = y[i.x] * SCALE + f32(BIAS); }
        }";
    let desc = KernelDesc::wgsl(wgsl, "main").label("applied-alike");
    let mut y = ctx.zeros::<f32>(&[1024]).unwrap();
    let mut run = |k: &gpu_arena::Kernel| ctx.launch(k).arg_mut(&mut y).grid_for(1024usize).run();
    ctx.tune_kernel(
        desc.constants(&[("SCALE", 0.5)]),
        "BIAS",
        &[0.0, -0.0, 2.0],
        &mut run,
    )
    .unwrap();
    let row = |ctx: &gpu_arena::Context| {
        (ctx.kernel_tuning().user_kernels.into_iter())
            .find(|r| r.kernel == "applied-alike" && r.constant == "BIAS")
            .unwrap()
    };
    let values: Vec<f64> = row(&ctx).seconds.iter().map(|(v, _)| *v).collect();
    assert_eq!(values, [0.0, 2.0]);
    // 0.1 and 0.1 as f32: one constant as applied, so one compiled kernel and one tuning.
    let compiled = ctx.kernel_cache_stats().pipelines_compiled;
    ctx.kernel_with(desc.constants(&[("SCALE", 0.1)])).unwrap();
    let once = ctx.kernel_cache_stats().pipelines_compiled;
    assert_eq!(once, compiled + 1);
    ctx.kernel_with(desc.constants(&[("3", f64::from(0.1f32))]))
        .unwrap();
    assert_eq!(ctx.kernel_cache_stats().pipelines_compiled, once);
    ctx.tune_kernel(
        desc.constants(&[("SCALE", 0.1)]),
        "BIAS",
        &[1.0, 3.0],
        &mut run,
    )
    .unwrap();
    let never = |_: &gpu_arena::Kernel| -> gpu_arena::Result<()> { panic!("measured again") };
    ctx.tune_kernel(
        desc.constants(&[("3", f64::from(0.1f32))]),
        "BIAS",
        &[1.0, 3.0],
        never,
    )
    .unwrap();
}
