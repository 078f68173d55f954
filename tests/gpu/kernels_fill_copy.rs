//! `fill`, `fill_in_place` and `copy` on the test machine's GPU: values, neighbours untouched,
//! the transfer guard and transfer statistics for `copy`.

use crate::kernels_common::{both_paths, kernel_context};
use gpu_arena::{Error, TransferGuard, TransferGuardLevel};

#[gpu_test]
fn fill_sets_every_element_for_each_element_size() {
    for (_, ctx) in both_paths() {
        assert_eq!(
            ctx.device_get(&ctx.fill(&[7], 0xABu8).unwrap()).unwrap(),
            [0xAB; 7]
        );
        assert_eq!(
            ctx.device_get(&ctx.fill(&[3, 3], -2i16).unwrap()).unwrap(),
            [-2; 9]
        );
        assert_eq!(
            ctx.device_get(&ctx.fill(&[5], 2.5f32).unwrap()).unwrap(),
            [2.5; 5]
        );
        assert_eq!(
            ctx.device_get(&ctx.fill(&[2, 3], 1.0e300f64).unwrap())
                .unwrap(),
            [1.0e300; 6]
        );
        assert_eq!(ctx.device_get(&ctx.fill(&[], 7u64).unwrap()).unwrap(), [7]);
        assert!(ctx.fill(&[0, 4], 1u32).unwrap().is_empty());
    }
}

#[gpu_test]
fn fill_in_place_keeps_the_memory_and_its_neighbours() {
    for (_, ctx) in both_paths() {
        let before = ctx.device_put(&[1u8; 33], &[33]).unwrap();
        let array = ctx.zeros::<u8>(&[1001]).unwrap();
        let after = ctx.device_put(&[2u8; 33], &[33]).unwrap();
        let offset = array.byte_offset();
        let allocs = ctx.memory_stats().num_allocs;
        let array = ctx.fill_in_place(array, 9u8).unwrap();
        assert_eq!(ctx.memory_stats().num_allocs, allocs);
        assert_eq!(array.byte_offset(), offset);
        assert_eq!(ctx.device_get(&array).unwrap(), vec![9u8; 1001]);
        assert_eq!(ctx.device_get(&before).unwrap(), [1; 33]);
        assert_eq!(ctx.device_get(&after).unwrap(), [2; 33]);
    }
}

#[gpu_test]
fn fill_refuses_element_sizes_that_do_not_divide_16() {
    let ctx = kernel_context();
    let err = ctx.fill(&[4], [1u8, 2, 3]).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Element {
                refusal: gpu_arena::error::ElementRefusal::FillSize { bytes: 3, .. },
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("must divide 16"), "{err}");
}

#[gpu_test]
fn copy_is_an_explicit_device_to_device_transfer() {
    for (_, ctx) in both_paths() {
        let data: Vec<u16> = (0..999).collect();
        let a = ctx.device_put(&data, &[9, 111]).unwrap();
        let before = ctx.transfer_stats().device_to_device.explicit;
        let b = ctx.copy(&a).unwrap();
        let after = ctx.transfer_stats().device_to_device.explicit;
        assert_eq!(after.count, before.count + 1);
        assert_eq!(after.bytes, before.bytes + 999 * 2);
        assert_eq!(b.shape(), &[9, 111]);
        assert_ne!(b.byte_offset(), a.byte_offset());
        assert_eq!(ctx.device_get(&b).unwrap(), data);
    }
}

#[gpu_test]
fn copy_is_refused_under_disallow_explicit() {
    let ctx = kernel_context();
    let a = ctx.zeros::<f32>(&[16]).unwrap();
    let _guard = TransferGuard::scoped(TransferGuardLevel::DisallowExplicit);
    let err = ctx.copy(&a).unwrap_err();
    assert!(matches!(err, Error::TransferGuard { .. }), "{err}");
    assert!(err.to_string().contains("device-to-device"), "{err}");
    assert!(err.to_string().contains("copy"), "{err}");
}
