//! `dynamic_slice` on the test machine's GPU against a CPU reference, and its errors.

use crate::harness::Rng;
use crate::kernels_common::{both_paths, kernel_context};
use gpu_arena::error::IndexRefusal;
use gpu_arena::Error;

fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

fn reference_slice<T: Copy>(
    operand: &[T],
    shape: &[usize],
    start: &[i64],
    sizes: &[usize],
) -> Vec<T> {
    let start: Vec<usize> = (0..shape.len())
        .map(|d| start[d].clamp(0, (shape[d] - sizes[d]) as i64) as usize)
        .collect();
    let so = strides(shape);
    let n: usize = sizes.iter().product();
    (0..n)
        .map(|i| {
            let (mut rest, mut at) = (i, 0);
            for d in (0..sizes.len()).rev() {
                at += (rest % sizes[d] + start[d]) * so[d];
                rest /= sizes[d];
            }
            operand[at]
        })
        .collect()
}

fn random_slices<T: bytemuck::Pod + PartialEq + std::fmt::Debug>(seed: u64, cases: usize) {
    for (_, ctx) in both_paths() {
        random_slices_on::<T>(&ctx, seed, cases);
    }
}

fn random_slices_on<T: bytemuck::Pod + PartialEq + std::fmt::Debug>(
    ctx: &gpu_arena::Context,
    seed: u64,
    cases: usize,
) {
    let mut rng = Rng(seed);
    let elem = std::mem::size_of::<T>();
    for i in 0..cases {
        let rank = i % 7;
        let shape: Vec<usize> = (0..rank).map(|_| 1 + rng.below(7) as usize).collect();
        let sizes: Vec<usize> = shape
            .iter()
            .map(|&d| rng.below(d as u64 + 1) as usize)
            .collect();
        let start: Vec<i64> = shape
            .iter()
            .map(|&d| rng.below(d as u64 + 7) as i64 - 3)
            .collect();
        let n: usize = shape.iter().product();
        let mut data = vec![<T as bytemuck::Zeroable>::zeroed(); n];
        bytemuck::cast_slice_mut::<T, u8>(&mut data).copy_from_slice(&rng.bytes(n * elem));
        let operand = ctx.device_put(&data, &shape).unwrap();
        let slice = ctx.dynamic_slice(&operand, &start, &sizes).unwrap();
        assert_eq!(slice.shape(), &sizes[..]);
        assert_eq!(
            ctx.device_get(&slice).unwrap(),
            reference_slice(&data, &shape, &start, &sizes),
            "shape {shape:?} start {start:?} sizes {sizes:?}"
        );
    }
}

#[gpu_test]
fn random_slices_of_bytes_match_the_reference() {
    random_slices::<u8>(11, 120);
}

#[gpu_test]
fn random_slices_of_16_bit_elements_match_the_reference() {
    random_slices::<i16>(12, 120);
}

#[gpu_test]
fn random_slices_of_32_and_64_bit_elements_match_the_reference() {
    random_slices::<u32>(13, 80);
    random_slices::<f64>(14, 80);
}

#[gpu_test]
fn slice_starts_are_clamped_like_xla() {
    for (_, ctx) in both_paths() {
        let x = ctx
            .device_put(&(0..100u32).collect::<Vec<_>>(), &[10, 10])
            .unwrap();
        let block = ctx.dynamic_slice(&x, &[8, -3], &[4, 2]).unwrap();
        assert_eq!(
            ctx.device_get(&block).unwrap(),
            [60, 61, 70, 71, 80, 81, 90, 91]
        );
    }
}

#[gpu_test]
fn bad_slice_sizes_and_starts_are_errors_that_say_why() {
    let ctx = kernel_context();
    let x = ctx.zeros::<u8>(&[3, 3]).unwrap();
    let err = ctx.dynamic_slice(&x, &[0, 0], &[4, 1]).unwrap_err();
    assert!(matches!(err, Error::Shape { .. }), "{err}");
    assert!(err.to_string().contains("dynamic_slice"), "{err}");
    assert!(err.to_string().contains("dimension 0 (4 > 3)"), "{err}");
    let err = ctx.dynamic_slice(&x, &[0, 0], &[1]).unwrap_err();
    assert!(err.to_string().contains("ranks must match"), "{err}");
    let err = ctx.dynamic_slice(&x, &[0, 0, 0], &[1, 1]).unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Index {
                operation: "dynamic_slice",
                refusal: IndexRefusal::StartCount { given: 3, shape },
            } if shape == &[3, 3]
        ),
        "{err}"
    );
}
