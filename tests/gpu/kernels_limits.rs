//! Paths that only large arrays take on a real GPU, forced on small ones: bindings smaller than
//! the operand (chunked bindings, rows cut in pieces) and grids past the per-dimension workgroup
//! limit (2-D/3-D grids, dispatches split past the grid).

use crate::harness::{context_with, test_config, Rng};
use gpu_arena::{ArenaConfig, Context, Error};

fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

fn reference_dus(
    op: &mut [u8],
    shape: &[usize],
    up: &[u8],
    up_shape: &[usize],
    start: &[usize],
    e: usize,
) {
    let (so, su) = (strides(shape), strides(up_shape));
    for i in 0..up_shape.iter().product::<usize>() {
        let (mut rest, mut a, mut b) = (i, 0, 0);
        for d in (0..up_shape.len()).rev() {
            let index = rest % up_shape[d];
            rest /= up_shape[d];
            a += index * su[d];
            b += (index + start[d]) * so[d];
        }
        op[b * e..(b + 1) * e].copy_from_slice(&up[a * e..(a + 1) * e]);
    }
}

fn chunked_updates<T: bytemuck::Pod>(max_binding: u64, max_groups: u32) {
    let ctx = context_with(ArenaConfig {
        force_device_kernels: true,
        max_binding_bytes: Some(max_binding),
        max_workgroups_per_dimension: Some(max_groups),
        ..test_config()
    });
    let e = std::mem::size_of::<T>();
    let mut rng = Rng(77 + e as u64);
    let cases: &[(&[usize], &[usize], &[usize])] = &[
        (&[20_000], &[15_001], &[3]),
        (&[50, 300], &[41, 257], &[5, 17]),
        (&[5, 9, 400], &[4, 7, 333], &[1, 2, 33]),
        (&[64, 256], &[32, 256], &[16, 0]),
        (&[3, 5000], &[3, 4999], &[0, 1]),
    ];
    let as_t = |b: &[u8]| -> Vec<T> {
        let mut v = vec![<T as bytemuck::Zeroable>::zeroed(); b.len() / e];
        bytemuck::cast_slice_mut::<T, u8>(&mut v).copy_from_slice(b);
        v
    };
    for (shape, up_shape, start) in cases {
        let op_bytes = rng.bytes(shape.iter().product::<usize>() * e);
        let up_bytes = rng.bytes(up_shape.iter().product::<usize>() * e);
        let operand = ctx.device_put(&as_t(&op_bytes), shape).unwrap();
        let update = ctx.device_put(&as_t(&up_bytes), up_shape).unwrap();
        let mut expected = op_bytes.clone();
        reference_dus(&mut expected, shape, &up_bytes, up_shape, start, e);
        let start: Vec<i64> = start.iter().map(|&s| s as i64).collect();
        let what = format!(
            "{} {shape:?} {up_shape:?} {start:?}",
            std::any::type_name::<T>()
        );

        let copied = ctx
            .dynamic_update_slice_copy(&operand, &update, &start)
            .unwrap();
        let operand = ctx.dynamic_update_slice(operand, &update, &start).unwrap();
        for array in [&operand, &copied] {
            let got = ctx.device_get(array).unwrap();
            assert!(bytemuck::cast_slice::<T, u8>(&got) == expected, "{what}");
        }
        let back = ctx.dynamic_slice(&operand, &start, up_shape).unwrap();
        let got = ctx.device_get(&back).unwrap();
        assert!(
            bytemuck::cast_slice::<T, u8>(&got) == up_bytes,
            "{what}: slice"
        );
        let copy = ctx.copy(&operand).unwrap();
        let got = ctx.device_get(&copy).unwrap();
        assert!(
            bytemuck::cast_slice::<T, u8>(&got) == expected,
            "{what}: copy"
        );
    }
    let filled = ctx
        .fill(&[12_345], <T as bytemuck::Zeroable>::zeroed())
        .unwrap();
    let got = ctx.device_get(&filled).unwrap();
    assert!(bytemuck::cast_slice::<T, u8>(&got).iter().all(|&b| b == 0));
}

#[gpu_test]
fn updates_larger_than_one_binding_are_copied_in_pieces() {
    chunked_updates::<u8>(1024, 65535);
    chunked_updates::<u16>(1024, 65535);
    chunked_updates::<f32>(4096, 65535);
    chunked_updates::<u64>(1536, 65535);
}

#[gpu_test]
fn grids_past_the_workgroup_limit_still_cover_every_element() {
    chunked_updates::<u8>(1 << 30, 2);
    chunked_updates::<u16>(1 << 30, 1);
    chunked_updates::<f32>(1 << 30, 3);
    chunked_updates::<f64>(1 << 30, 2);
}

#[gpu_test]
fn small_bindings_and_small_grids_together() {
    chunked_updates::<u8>(2048, 2);
    chunked_updates::<f32>(1024, 1);
}

#[gpu_test]
fn kernel_limits_below_a_kilobyte_or_a_workgroup_are_refused_when_the_context_opens() {
    for (config, field) in [
        (
            ArenaConfig {
                max_binding_bytes: Some(512),
                ..test_config()
            },
            "ArenaConfig::max_binding_bytes",
        ),
        (
            ArenaConfig {
                max_workgroups_per_dimension: Some(0),
                ..test_config()
            },
            "ArenaConfig::max_workgroups_per_dimension",
        ),
    ] {
        match Context::new(config) {
            Err(Error::Config { variable, .. }) => assert_eq!(variable, field),
            other => panic!("{field}: {:?}", other.map(|_| "a context")),
        }
    }
}
