//! Hostile inputs through the public API on the test machine's GPU (lavapipe in CI): extreme
//! shapes and indices, and configuration set in code, each an error with a message or a
//! correct result, never a panic, an abort or a driver call with a bad value.

use crate::harness;
use crate::harness::{context_with, init_logging, test_config};
use crate::kernels_common::both_paths;
use gpu_arena::{ArenaConfig, BackendChoice, Context, Error, MAX_ARRAY_SPAN_BYTES};

/// The largest dimension a zero-size array of bytes may have: its span is then exactly the
/// bound.
const LARGEST_DIM: usize = MAX_ARRAY_SPAN_BYTES as usize;

#[gpu_test]
fn a_shape_no_device_can_address_is_refused_when_the_array_is_made() {
    let ctx = harness::context();
    for shape in [
        vec![0, usize::MAX],
        vec![usize::MAX, 0],
        vec![0, LARGEST_DIM + 1],
        vec![0, 1 << 32, 1 << 32],
        vec![0, 3, 1 << 62],
    ] {
        let error = ctx.alloc::<u8>(&shape).unwrap_err();
        assert!(matches!(error, Error::Shape { .. }), "{shape:?}: {error}");
        let msg = error.to_string();
        assert!(msg.contains("more than any device addresses"), "{msg}");
        assert!(msg.contains(&MAX_ARRAY_SPAN_BYTES.to_string()), "{msg}");
        // Every way of making an array refuses it alike, naming the call.
        let operation = |result: gpu_arena::Result<gpu_arena::DeviceArray<u8>>| match result {
            Err(Error::Shape { operation, .. }) => operation,
            other => panic!("{shape:?}: {other:?}"),
        };
        assert_eq!(operation(ctx.device_put(&[], &shape)), "device_put");
        assert_eq!(operation(ctx.zeros(&shape)), "zeros");
        assert_eq!(operation(ctx.alloc(&shape)), "alloc");
        for kind in [
            gpu_arena::MemoryKind::Device,
            gpu_arena::MemoryKind::PinnedHost,
        ] {
            assert_eq!(operation(ctx.zeros_in(kind, &shape)), "zeros_in");
            assert_eq!(operation(ctx.alloc_in(kind, &shape)), "alloc_in");
        }
        assert_eq!(operation(ctx.fill(&shape, 7)), "fill");
        let mut batch = ctx.upload_batch();
        let refused = batch.put::<u8>(&[], &shape).map(drop).unwrap_err();
        assert!(matches!(
            refused,
            Error::Shape {
                operation: "UploadBatch::put",
                ..
            }
        ));
        let mut sequence = ctx.sequence();
        assert_eq!(operation(sequence.fill(&shape, 7)), "fill");
        let mut capture = ctx.capture();
        assert_eq!(operation(capture.alloc(&shape)), "alloc");
    }
    // The span counts the element size: [0, 2^62] of u32 spans 2^64 bytes.
    assert!(ctx.alloc::<u32>(&[0, 1 << 62]).is_err());
    assert!(ctx.alloc::<u8>(&[0, 1 << 62]).is_ok());
    assert_eq!(ctx.memory_stats().bytes_in_use, 0);
}

#[gpu_test]
fn dynamic_slice_of_a_zero_size_operand_with_a_huge_dimension_does_not_panic() {
    // `alloc(&[0, usize::MAX])` is accepted, so `dynamic_slice` must clamp it without a panic
    // in `Ord::clamp` ("min > max"): the largest shape accepted slices fine.
    for (path, ctx) in both_paths() {
        assert!(ctx.alloc::<u8>(&[0, usize::MAX]).is_err(), "{path}");
        let a = ctx.alloc::<u8>(&[0, LARGEST_DIM]).unwrap();
        for start in [[0, 5], [i64::MIN, i64::MAX], [i64::MAX, i64::MIN], [-1, -1]] {
            for sizes in [[0, 1], [0, 0], [0, LARGEST_DIM]] {
                let s = ctx.dynamic_slice(&a, &start, &sizes).unwrap();
                assert_eq!(s.shape(), sizes, "{path}");
                assert!(ctx.device_get(&s).unwrap().is_empty(), "{path}");
            }
        }
        // Larger than the operand, or of another rank: errors that say so.
        let msg = ctx
            .dynamic_slice(&a, &[0, 0], &[1, 1])
            .unwrap_err()
            .to_string();
        assert!(msg.contains("larger than the operand"), "{msg}");
        drop(a);
        ctx.synchronize().unwrap();
        assert_eq!(ctx.memory_stats().bytes_in_use, 0, "{path}");
    }
}

#[gpu_test]
fn dynamic_update_slice_of_a_zero_size_operand_with_a_huge_dimension_does_not_panic() {
    // The same clamp in `dynamic_update_slice(_copy)`.
    for (path, ctx) in both_paths() {
        let update = ctx.alloc::<u8>(&[0, 1]).unwrap();
        for start in [[0, 5], [i64::MIN, i64::MAX], [i64::MAX, i64::MIN]] {
            let operand = ctx.alloc::<u8>(&[0, LARGEST_DIM]).unwrap();
            let copy = ctx
                .dynamic_update_slice_copy(&operand, &update, &start)
                .unwrap();
            assert_eq!(copy.shape(), [0, LARGEST_DIM], "{path}");
            let operand = ctx.dynamic_update_slice(operand, &update, &start).unwrap();
            assert_eq!(operand.shape(), [0, LARGEST_DIM], "{path}");
            // Host updates too (an implicit upload of nothing).
            let host: &[u8] = &[];
            let shape: &[usize] = &[0, 3];
            let operand = ctx
                .dynamic_update_slice(operand, (host, shape), &start)
                .unwrap();
            assert!(ctx.device_get(&operand).unwrap().is_empty());
        }
        drop(update);
        ctx.synchronize().unwrap();
        assert_eq!(ctx.memory_stats().bytes_in_use, 0, "{path}");
    }
}

#[gpu_test]
fn extreme_starts_clamp_like_xla_on_ordinary_arrays() {
    for (path, ctx) in both_paths() {
        let data: Vec<u16> = (0..60).collect();
        let a = ctx.device_put(&data, &[6, 10]).unwrap();
        let cases: [([i64; 2], [usize; 2]); 4] = [
            ([i64::MIN, i64::MAX], [0, 8]),
            ([i64::MAX, i64::MIN], [4, 0]),
            ([-1, 3], [0, 3]),
            ([2, i64::MAX - 1], [2, 8]),
        ];
        for (start, clamped) in cases {
            let s = ctx.dynamic_slice(&a, &start, &[2, 2]).unwrap();
            let expected: Vec<u16> = (0..2)
                .flat_map(|r| (0..2).map(move |c| ((clamped[0] + r) * 10 + clamped[1] + c) as u16))
                .collect();
            assert_eq!(ctx.device_get(&s).unwrap(), expected, "{path} {start:?}");
        }
    }
}

#[gpu_test]
fn zero_staging_bytes_are_refused_before_any_buffer_is_made() {
    // `staging_bytes: 0` must be an error before vkCreateBuffer sees size 0
    // (VUID-VkBufferCreateInfo-size-00912).
    init_logging();
    for staging_bytes in [0, 1, 4095, u64::MAX] {
        let result = Context::new(ArenaConfig {
            staging_bytes,
            zero_copy: false,
            ..test_config()
        });
        let error = result.expect_err("refused");
        let msg = error.to_string();
        assert!(matches!(error, Error::Config { .. }), "{msg}");
        assert!(msg.contains("ArenaConfig::staging_bytes"), "{msg}");
        assert!(msg.contains("from 4096 to 4294967296 bytes"), "{msg}");
    }
    // The smallest accepted pool moves data correctly (in many pieces).
    let ctx = context_with(ArenaConfig {
        staging_bytes: gpu_arena::config::MIN_STAGING_BYTES,
        zero_copy: false,
        ..test_config()
    });
    let data: Vec<u32> = (0..10_000).collect();
    let a = ctx.device_put(&data, &[10_000]).unwrap();
    assert_eq!(ctx.device_get(&a).unwrap(), data);
}

#[gpu_test]
fn a_memory_fraction_that_rounds_to_no_byte_is_refused_at_open() {
    // In (0, 1] but below one 256-byte unit of the heap: an arena that could hold nothing.
    for fraction in [
        gpu_arena::MemFraction::fixed(1e-300),
        gpu_arena::MemFraction {
            reserve: 1e-300,
            limit: 1e-299,
        },
    ] {
        let error = Context::new(ArenaConfig {
            mem_fraction: fraction,
            ..test_config()
        })
        .expect_err("refused");
        match &error {
            Error::Config {
                variable,
                value,
                expected,
            } => {
                assert_eq!(variable, "ArenaConfig::mem_fraction");
                // The value as written, not Rust's `MemFraction { .. }`.
                assert_eq!(value, &fraction.to_string(), "{error}");
                assert!(!value.contains('{'), "{error}");
                assert!(expected.contains("at least 256 bytes"), "{error}");
            }
            other => panic!("{other:?}"),
        }
    }
    // A tiny reserve under a usable limit is no arena of nothing: it opens and grows.
    let ctx = context_with(ArenaConfig {
        mem_fraction: gpu_arena::MemFraction {
            reserve: 1e-300,
            limit: 0.5,
        },
        ..test_config()
    });
    let a = ctx.device_put(&[7u32; 64], &[64]).unwrap();
    assert_eq!(ctx.device_get(&a).unwrap(), vec![7u32; 64]);
}

#[gpu_test]
fn configuration_is_checked_before_any_device_call() {
    // A backend this machine may not have and a bad field: the field is reported, not the
    // missing adapter, because nothing is asked of a device before the check.
    for config in [
        ArenaConfig {
            backend: BackendChoice::Metal,
            timeline_capacity: 68_719_476_736,
            ..ArenaConfig::default()
        },
        ArenaConfig {
            backend: BackendChoice::Dx12,
            mem_fraction: gpu_arena::MemFraction::fixed(f64::NAN),
            ..ArenaConfig::default()
        },
        ArenaConfig {
            backend: BackendChoice::Metal,
            max_region_bytes: Some(0),
            ..ArenaConfig::default()
        },
    ] {
        let error = Context::new(config).expect_err("refused");
        assert!(matches!(error, Error::Config { .. }), "{error}");
    }
}

#[gpu_test]
fn a_timeline_larger_than_the_bound_is_an_error_not_an_abort() {
    // `GPU_ARENA_TIMELINE=68719476736` would ask for 8 TiB: refused by `from_env` and by
    // `Context::new`, never an abort.
    init_logging();
    let error = Context::new(ArenaConfig {
        timeline_capacity: 68_719_476_736,
        ..test_config()
    })
    .expect_err("refused");
    let msg = error.to_string();
    assert!(msg.contains("ArenaConfig::timeline_capacity"), "{msg}");
    assert!(msg.contains("16777215"), "{msg}");
    let error =
        ArenaConfig::from_lookup(|name| (name == "GPU_ARENA_TIMELINE").then_some("68719476736"))
            .unwrap_err();
    assert!(
        error.to_string().starts_with("GPU_ARENA_TIMELINE"),
        "{error}"
    );
}

/// A buffer type nested thousands of structs deep (each declaration shallow, so no source
/// bound applies) is checked on the compiler's thread: a result or a `KernelCompile`, never
/// an overflow of the caller's stack.
#[gpu_test]
fn a_buffer_type_nested_thousands_of_structs_deep_is_checked_without_overflowing_the_stack() {
    let ctx = harness::context();
    let depth = 20_000;
    let mut wgsl = String::from("struct S0 { @align(16) a: u32 }\n");
    for i in 1..=depth {
        wgsl += &format!("struct S{i} {{ h: u32, s: S{} }}\n", i - 1);
    }
    wgsl += &format!(
        "@group(0) @binding(0) var<storage, read_write> x: S{depth};
        @compute @workgroup_size(1) fn main() {{ x.h = 1u; }}"
    );
    // A small stack, as an app's worker thread may have.
    let outcome = std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(move || ctx.kernel(&wgsl, "main").map(drop))
        .unwrap()
        .join()
        .unwrap();
    match outcome {
        Err(Error::KernelCompile { message, .. }) => assert!(!message.is_empty()),
        other => panic!("S0's @align inside S1 must be refused: {other:?}"),
    }
}

/// A buffer type whose structs each hold two of the struct below, 28 deep (2^28 places of
/// one type), is checked type by type, not place by place: its `@align` in a struct nested
/// after them is found, and the kernel refused, on every backend.
#[gpu_test]
fn a_buffer_type_that_repeats_one_struct_2_to_the_28_times_is_checked_once_per_type() {
    let ctx = harness::context();
    let depth = 28;
    let mut wgsl = String::from("struct S0 { a: u32 }\nstruct A { @align(16) a: u32 }\n");
    for i in 1..=depth {
        wgsl += &format!("struct S{i} {{ a: S{p}, b: S{p} }}\n", p = i - 1);
    }
    wgsl += &format!(
        "struct T {{ wide: S{depth}, h: u32, aligned: A }}
        @group(0) @binding(0) var<storage, read_write> x: T;
        @compute @workgroup_size(1) fn main() {{ x.h = 1u; }}"
    );
    match ctx.kernel(&wgsl, "main") {
        Err(Error::KernelCompile { message, .. }) => {
            assert!(message.contains("`x.aligned`"), "{message}")
        }
        other => panic!("A's @align inside T must be refused: {other:?}"),
    }
}
