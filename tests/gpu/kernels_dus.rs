//! `dynamic_update_slice` on the test machine's GPU (lavapipe in CI) against a CPU reference:
//! random shapes of rank 0 to 6, every element size, starts in range, negative and past the
//! end, zero-size and whole-operand updates; bytes outside the update (and neighbouring arrays)
//! must stay as they were; the donated form must not allocate.

use crate::harness::{context_with, test_config, Rng};
use crate::kernels_common::{both_paths, kernel_context};
use gpu_arena::error::IndexRefusal;
use gpu_arena::{ArenaConfig, Context, DeviceArray, Error, MemFraction};

/// Row-major strides in elements.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// XLA's clamp of one start index.
fn clamp(start: i64, operand: usize, update: usize) -> usize {
    start.clamp(0, (operand - update) as i64) as usize
}

/// The reference: `update` written into `operand` at the clamped `start`, on bytes.
fn reference_dus(
    elem: usize,
    operand: &mut [u8],
    operand_shape: &[usize],
    update: &[u8],
    update_shape: &[usize],
    start: &[i64],
) {
    let start: Vec<usize> = (0..operand_shape.len())
        .map(|d| clamp(start[d], operand_shape[d], update_shape[d]))
        .collect();
    let (so, su) = (strides(operand_shape), strides(update_shape));
    let n: usize = update_shape.iter().product();
    for i in 0..n {
        let (mut rest, mut at_o, mut at_u) = (i, 0, 0);
        for d in (0..update_shape.len()).rev() {
            let index = rest % update_shape[d];
            rest /= update_shape[d];
            at_u += index * su[d];
            at_o += (index + start[d]) * so[d];
        }
        operand[at_o * elem..(at_o + 1) * elem]
            .copy_from_slice(&update[at_u * elem..(at_u + 1) * elem]);
    }
}

fn random_shape(rng: &mut Rng, rank: usize, max_elements: usize) -> Vec<usize> {
    loop {
        let shape: Vec<usize> = (0..rank).map(|_| 1 + rng.below(9) as usize).collect();
        if shape.iter().product::<usize>() <= max_elements {
            return shape;
        }
    }
}

/// One random case for element type `T`: operand between two neighbour arrays, in-place and
/// out-of-place DUS, everything compared with the reference.
fn random_case<T: bytemuck::Pod>(ctx: &Context, rng: &mut Rng, rank: usize) {
    let elem = std::mem::size_of::<T>();
    let operand_shape = random_shape(rng, rank, 4096);
    let update_shape: Vec<usize> = operand_shape
        .iter()
        .map(|&d| match rng.below(6) {
            0 => d,
            1 => 0,
            _ => rng.below(d as u64 + 1) as usize,
        })
        .collect();
    let start: Vec<i64> = operand_shape
        .iter()
        .map(|&d| rng.below(d as u64 + 7) as i64 - 3)
        .collect();
    let n_operand: usize = operand_shape.iter().product();
    let n_update: usize = update_shape.iter().product();
    let operand_bytes = rng.bytes(n_operand * elem);
    let update_bytes = rng.bytes(n_update * elem);
    let as_t = |b: &[u8]| -> Vec<T> {
        let mut v = vec![<T as bytemuck::Zeroable>::zeroed(); b.len() / elem];
        bytemuck::cast_slice_mut::<T, u8>(&mut v).copy_from_slice(b);
        v
    };

    let before = ctx
        .device_put(&as_t(&rng.bytes(300 * elem)), &[300])
        .unwrap();
    let operand = ctx
        .device_put(&as_t(&operand_bytes), &operand_shape)
        .unwrap();
    let after = ctx
        .device_put(&as_t(&rng.bytes(300 * elem)), &[300])
        .unwrap();
    let bytes_of = |a: &DeviceArray<T>| -> Vec<u8> {
        bytemuck::cast_slice(&ctx.device_get(a).unwrap()).to_vec()
    };
    let neighbours = (bytes_of(&before), bytes_of(&after));
    let update = ctx.device_put(&as_t(&update_bytes), &update_shape).unwrap();

    let mut expected = operand_bytes.clone();
    reference_dus(
        elem,
        &mut expected,
        &operand_shape,
        &update_bytes,
        &update_shape,
        &start,
    );
    let what = format!(
        "{} operand {operand_shape:?} update {update_shape:?} start {start:?}",
        std::any::type_name::<T>()
    );

    let copied = ctx
        .dynamic_update_slice_copy(&operand, &update, &start)
        .unwrap();
    let offset = operand.byte_offset();
    let updated = ctx.dynamic_update_slice(operand, &update, &start).unwrap();
    assert_eq!(updated.byte_offset(), offset, "{what}: donated in place");
    for (name, array) in [("in place", &updated), ("out of place", &copied)] {
        let got = bytes_of(array);
        if got != expected {
            let first = got.iter().zip(&expected).position(|(a, b)| a != b);
            panic!("{what} ({name}): first differing byte {first:?}");
        }
    }
    assert_eq!(
        (bytes_of(&before), bytes_of(&after)),
        neighbours,
        "{what}: neighbouring arrays changed"
    );
}

fn random_cases<T: bytemuck::Pod>(seed: u64, cases: usize) {
    for (_, ctx) in both_paths() {
        let mut rng = Rng(seed);
        for i in 0..cases {
            random_case::<T>(&ctx, &mut rng, i % 7);
        }
    }
}

#[gpu_test]
fn random_updates_of_bytes_match_the_reference() {
    random_cases::<u8>(1, 140);
}

#[gpu_test]
fn random_updates_of_16_bit_elements_match_the_reference() {
    random_cases::<u16>(2, 140);
}

#[gpu_test]
fn random_updates_of_32_bit_elements_match_the_reference() {
    random_cases::<f32>(3, 100);
}

#[gpu_test]
fn random_updates_of_64_bit_elements_match_the_reference() {
    random_cases::<u64>(4, 100);
}

#[gpu_test]
fn random_updates_of_odd_sized_elements_match_the_reference() {
    random_cases::<[u8; 3]>(5, 70);
    random_cases::<[u16; 3]>(6, 70);
}

#[gpu_test]
fn donated_update_allocates_nothing_and_returns_the_same_memory() {
    for (_, ctx) in both_paths() {
        let operand = ctx.zeros::<f32>(&[256, 64]).unwrap();
        let update = ctx.device_put(&[1.5f32; 3 * 64], &[3, 64]).unwrap();
        ctx.synchronize().unwrap();
        let stats = ctx.memory_stats();
        let (buffer, offset) = (operand.buffer().clone(), operand.byte_offset());
        let operand = ctx
            .dynamic_update_slice(operand, &update, &[10, 0])
            .unwrap();
        let after = ctx.memory_stats();
        assert_eq!(after.num_allocs, stats.num_allocs, "{after:?}");
        assert_eq!(after.bytes_in_use, stats.bytes_in_use);
        assert_eq!(after.peak_bytes_in_use, stats.peak_bytes_in_use);
        assert_eq!((operand.buffer(), operand.byte_offset()), (&buffer, offset));
        let values = ctx.device_get(&operand).unwrap();
        assert!(values[..10 * 64].iter().all(|&v| v == 0.0));
        assert!(values[10 * 64..13 * 64].iter().all(|&v| v == 1.5));
        assert!(values[13 * 64..].iter().all(|&v| v == 0.0));
    }
}

#[gpu_test]
fn out_of_place_update_leaves_the_operand_as_it_was() {
    for (_, ctx) in both_paths() {
        let data: Vec<u16> = (0..100).collect();
        let operand = ctx.device_put(&data, &[10, 10]).unwrap();
        let updated = ctx
            .dynamic_update_slice_copy(&operand, (&[7u16; 4][..], &[2usize, 2][..]), &[9, -1])
            .unwrap();
        assert_eq!(ctx.device_get(&operand).unwrap(), data);
        let got = ctx.device_get(&updated).unwrap();
        let mut expected = data.clone();
        for (r, c) in [(8, 0), (8, 1), (9, 0), (9, 1)] {
            expected[r * 10 + c] = 7;
        }
        assert_eq!(got, expected);
        assert_ne!(updated.byte_offset(), operand.byte_offset());
    }
}

#[gpu_test]
fn host_data_updates_are_uploaded_implicitly() {
    for (_, ctx) in both_paths() {
        let operand = ctx.zeros::<i8>(&[13]).unwrap();
        let before = ctx.transfer_stats().host_to_device.implicit;
        let operand = ctx
            .dynamic_update_slice(operand, &[-1i8, -2, -3][..], &[5])
            .unwrap();
        let after = ctx.transfer_stats().host_to_device.implicit;
        assert_eq!(
            (after.count, after.bytes),
            (before.count + 1, before.bytes + 3)
        );
        assert_eq!(
            ctx.device_get(&operand).unwrap(),
            [0, 0, 0, 0, 0, -1, -2, -3, 0, 0, 0, 0, 0]
        );
    }
}

#[gpu_test]
fn update_equal_to_the_operand_replaces_it_whatever_the_start() {
    for (_, ctx) in both_paths() {
        let operand = ctx.device_put(&[1u8; 7 * 5], &[7, 5]).unwrap();
        let update: Vec<u8> = (0..35).collect();
        let operand = ctx
            .dynamic_update_slice(operand, (&update[..], &[7usize, 5][..]), &[3, -8])
            .unwrap();
        assert_eq!(ctx.device_get(&operand).unwrap(), update);
    }
}

#[gpu_test]
fn zero_size_and_rank_zero_updates_work() {
    for (_, ctx) in both_paths() {
        let operand = ctx.device_put(&[9u32; 6], &[2, 3]).unwrap();
        let empty: DeviceArray<u32> = ctx.zeros(&[0, 3]).unwrap();
        let operand = ctx.dynamic_update_slice(operand, &empty, &[1, 0]).unwrap();
        assert_eq!(ctx.device_get(&operand).unwrap(), [9; 6]);
        let scalar = ctx.device_put(&[1u16], &[]).unwrap();
        let scalar = ctx
            .dynamic_update_slice(scalar, (&[5u16][..], &[][..]), &[])
            .unwrap();
        assert_eq!(ctx.device_get(&scalar).unwrap(), [5]);
    }
}

#[gpu_test]
fn wrong_rank_too_large_update_and_short_start_are_errors_not_panics() {
    let ctx = kernel_context();
    let operand = ctx.zeros::<f32>(&[4, 4]).unwrap();
    let row = ctx.zeros::<f32>(&[4]).unwrap();
    let err = ctx
        .dynamic_update_slice_copy(&operand, &row, &[0, 0])
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Shape {
                operation: "dynamic_update_slice_copy",
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("dynamic_update_slice_copy"),
        "{err}"
    );
    assert!(err.to_string().contains("ranks must match"), "{err}");

    let big = ctx.zeros::<f32>(&[2, 5]).unwrap();
    let err = ctx
        .dynamic_update_slice_copy(&operand, &big, &[0, 0])
        .unwrap_err();
    assert!(matches!(err, Error::Shape { .. }), "{err}");
    assert!(err.to_string().contains("larger than the operand"), "{err}");

    let small = ctx.zeros::<f32>(&[2, 2]).unwrap();
    let donated = ctx.dynamic_update_slice(operand, &small, &[1]).unwrap_err();
    let err = &donated.error;
    assert!(
        matches!(
            err,
            Error::Index {
                refusal: IndexRefusal::StartCount { given: 1, .. },
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("one per dimension"), "{err}");
    assert_eq!(
        donated.array.shape(),
        [4, 4],
        "the donated operand comes back"
    );

    let other = kernel_context();
    let foreign = other.zeros::<f32>(&[2, 2]).unwrap();
    let operand = ctx.zeros::<f32>(&[4, 4]).unwrap();
    let err = ctx
        .dynamic_update_slice(operand, &foreign, &[0, 0])
        .unwrap_err()
        .error;
    assert!(matches!(err, Error::ForeignArray { .. }), "{err}");
}

#[gpu_test]
fn repeated_updates_of_one_buffer_apply_in_order() {
    for (_, ctx) in both_paths() {
        let mut operand = ctx.zeros::<u8>(&[64]).unwrap();
        for i in 0..64u8 {
            operand = ctx
                .dynamic_update_slice(operand, &[i, i][..], &[i64::from(i)])
                .unwrap();
        }
        let got = ctx.device_get(&operand).unwrap();
        let expected: Vec<u8> = (0..64u8).map(|i| if i >= 62 { 63 } else { i }).collect();
        assert_eq!(got, expected);
    }
}

#[gpu_test]
fn a_donated_update_allocates_only_a_host_updates_temporary() {
    for (path, ctx) in both_paths() {
        let cache = ctx.zeros::<f32>(&[64, 256]).unwrap();
        let offset = cache.byte_offset();
        let on_device = ctx.device_put(&[2.0f32; 256], &[1, 256]).unwrap();
        let before = ctx.memory_stats();
        let cache = ctx
            .dynamic_update_slice(cache, &on_device, &[3, 0])
            .unwrap();
        let after_device = ctx.memory_stats();
        assert_eq!(
            after_device.num_allocs, before.num_allocs,
            "{path}: a device update allocates nothing"
        );
        assert_eq!(after_device.peak_bytes_in_use, before.peak_bytes_in_use);
        let row = [1.0f32; 256];
        let cache = ctx
            .dynamic_update_slice(cache, (&row[..], &[1usize, 256][..]), &[17, 0])
            .unwrap();
        let after_host = ctx.memory_stats();
        assert_eq!(cache.byte_offset(), offset, "{path}: the same memory");
        assert_eq!(
            after_host.num_allocs,
            before.num_allocs + 1,
            "{path}: a host update's temporary, as documented"
        );
        assert_eq!(
            after_host.bytes_in_use, before.bytes_in_use,
            "{path}: the temporary is let go when the op returns"
        );
        let got = ctx.device_get(&cache).unwrap();
        assert!(got[3 * 256..4 * 256].iter().all(|&v| v == 2.0), "{path}");
        assert!(got[17 * 256..18 * 256].iter().all(|&v| v == 1.0), "{path}");
        assert_eq!(got.iter().filter(|&&v| v != 0.0).count(), 512, "{path}");
    }
}

/// A copy update whose result does not fit refuses with nothing changed, eager or recorded: a
/// host update is checked first and uploaded only once the result has its memory, so no
/// allocation, peak or transfer is counted for it.
#[gpu_test]
fn a_copy_update_whose_result_does_not_fit_uploads_and_counts_nothing() {
    let configs = [
        (
            "kernels",
            ArenaConfig {
                force_device_kernels: true,
                ..test_config()
            },
        ),
        ("default", test_config()),
        (
            "staging",
            ArenaConfig {
                zero_copy: false,
                ..test_config()
            },
        ),
    ];
    for (path, config) in configs {
        let heap = context_with(config.clone()).memory_plan().heap_bytes;
        let ctx = context_with(ArenaConfig {
            mem_fraction: MemFraction::fixed((1 << 20) as f64 / heap as f64),
            ..config
        });
        let operand = ctx.device_put(&vec![7u8; 640 << 10], &[640 << 10]).unwrap();
        ctx.synchronize().unwrap();
        let (stats, transfers) = (ctx.memory_stats(), ctx.transfer_stats());
        let eager = ctx.dynamic_update_slice_copy(&operand, &[9u8; 4][..], &[0]);
        let mut sequence = ctx.sequence();
        let recorded = sequence.dynamic_update_slice_copy(&operand, &[9u8; 4][..], &[0]);
        for (how, outcome) in [("eager", eager), ("recorded", recorded)] {
            let error = outcome.err();
            assert!(
                matches!(error, Some(Error::OutOfMemory { .. })),
                "{path}, {how}: {error:?}"
            );
        }
        drop(sequence);
        assert_eq!(ctx.memory_stats(), stats, "{path}");
        assert_eq!(ctx.transfer_stats(), transfers, "{path}");
        assert!(ctx.device_get(&operand).unwrap().iter().all(|&b| b == 7));
        // A result that fits is made as before.
        let small = ctx.device_put(&[1u8; 8], &[8]).unwrap();
        let updated = ctx
            .dynamic_update_slice_copy(&small, &[9u8; 4][..], &[2])
            .unwrap();
        assert_eq!(
            ctx.device_get(&updated).unwrap(),
            [1, 1, 9, 9, 9, 9, 1, 1],
            "{path}"
        );
    }
}
