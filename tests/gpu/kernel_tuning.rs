//! Kernel tuning: every shape of every library kernel writes the bytes a host reference of
//! XLA's ops writes (every element size, aligned and unaligned boxes, clamped starts, grids
//! split into several dispatches); tuning measures each kernel and size class once, keeps a
//! shape it measured, shares it with every context of the process and with the next process
//! through the tuning file; `cached` and `off` never measure; a damaged, foreign or planted
//! file is ignored with a warning and rewritten, never trusted.

use crate::harness::{self, context_with, test_config, Rng};
use gpu_arena::kernels::{
    DiskCacheLoad, KernelShape, KernelTuning, SizeClass, TuningOrigin, CACHE_DIR_ENV,
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
fn child_tunes_once_per_kernel_and_class() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let candidates = |ctx: &Context| KernelShape::candidates(ctx.adapter_info().subgroup_max_size);
    // `cached` and `off` never measure.
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
    let b = ctx.fill(&[70_000], 6u32).unwrap();
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
    let report = ctx.kernel_tuning();
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
            assert_eq!(report.file_load, DiskCacheLoad::NoFile);
            assert_eq!((report.jobs, fill.origin), (1, TuningOrigin::Measured));
        }
        "next" => {
            assert_eq!(report.file_load, DiskCacheLoad::Used);
            assert_eq!((report.jobs, fill.origin), (0, TuningOrigin::File));
            // `cached` uses the file's choice too.
            let cached = tuned_context(KernelTuning::Cached, None);
            let b = cached.fill(&[70_000], 5u32).unwrap();
            assert_eq!(cached.device_get(&b).unwrap(), vec![5; 70_000]);
            assert_eq!(cached.kernel_tuning().jobs, 0);
        }
        "damaged" => {
            assert!(
                matches!(&report.file_load, DiskCacheLoad::Discarded { reason } if !reason.is_empty()),
                "{report:?}"
            );
            assert_eq!((report.jobs, fill.origin), (1, TuningOrigin::Measured));
            println!("damaged file ok");
        }
        other => panic!("scenario {other}"),
    }
}
