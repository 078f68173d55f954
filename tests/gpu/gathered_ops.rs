//! Single ops gathered into the context's own submission (the recording model in
//! `gpu_arena::kernels`, "Gathered single ops"): launches and library ops go out in
//! submissions of at most `MAX_GATHERED_OPS`; every host read, wait, host-path op, user
//! sequence, `raw_submit` and reuse of a dropped array's memory comes after the ops called
//! before it; parameter slots never alias; threads gathering on one context get every result.
//! Each ordering test uses an op that does not commute (`a = a * mul + add`), so work run in
//! the wrong order gives a wrong number.

use crate::harness;
use crate::harness::ordering::{affine, params, run_affine, AFFINE, DOUBLE_ADD};
use crate::harness::{context_with, op_paths, slow_copy_wgsl, submissions_made, test_config};
use gpu_arena::kernels::MAX_GATHERED_OPS;
use gpu_arena::{wgpu, ArenaConfig, Context, DeviceArray, Kernel};

#[gpu_test]
fn single_launches_are_gathered_into_submissions_of_at_most_32_ops() {
    assert_eq!(MAX_GATHERED_OPS, 32);
    for (path, ctx) in op_paths() {
        let k = ctx.kernel(AFFINE, "main").unwrap();
        let n = 300;
        let mut a = ctx.device_put(&vec![1u32; n], &[n]).unwrap();
        ctx.synchronize().unwrap();
        let launches = 100;
        let (made, ()) = submissions_made(&ctx, || {
            for i in 0..launches {
                run_affine(&ctx, &k, &mut a, params(i));
            }
        });
        let expected = launches.div_ceil(MAX_GATHERED_OPS as u32) as u64;
        assert_eq!(
            made, expected,
            "{path}: {launches} launches made {made} submissions"
        );
        let want = (0..launches).fold(1u32, |v, i| affine(v, params(i)));
        assert_eq!(ctx.device_get(&a).unwrap(), vec![want; n], "{path}");
    }
}

#[gpu_test]
fn a_gathered_op_records_the_submission_it_will_be_part_of_on_its_arrays() {
    for (path, ctx) in op_paths() {
        let k = ctx.kernel(AFFINE, "main").unwrap();
        let mut a = ctx.device_put(&[5u32; 64], &[64]).unwrap();
        let last = ctx.raw_submit(std::iter::empty(), &[]).unwrap();
        run_affine(&ctx, &k, &mut a, params(1));
        // Not submitted yet, yet already the array's last use: the next submission's id.
        assert_eq!(a.last_use().0, last.0 + 1, "{path}");
        let next = ctx.raw_submit(std::iter::empty(), &[]).unwrap();
        assert_eq!(next.0, last.0 + 2, "{path}: the gathered ops went first");
        assert_eq!(
            ctx.device_get(&a).unwrap(),
            vec![affine(5, params(1)); 64],
            "{path}"
        );
    }
}

#[gpu_test]
fn library_ops_are_gathered_like_launches() {
    let ctx = context_with(ArenaConfig {
        zero_copy: false,
        ..test_config()
    });
    let x = ctx
        .device_put(&(0..1000u32).collect::<Vec<_>>(), &[1000])
        .unwrap();
    ctx.synchronize().unwrap();
    let ops = 40;
    let (made, copies) = submissions_made(&ctx, || {
        (0..ops)
            .map(|i| {
                if i % 2 == 0 {
                    ctx.copy(&x).unwrap()
                } else {
                    ctx.dynamic_slice(&x, &[i], &[1000 - i as usize]).unwrap()
                }
            })
            .collect::<Vec<_>>()
    });
    assert_eq!(made, (ops as u64).div_ceil(MAX_GATHERED_OPS as u64));
    for (i, c) in copies.iter().enumerate() {
        let got = ctx.device_get(c).unwrap();
        let from = if i % 2 == 0 { 0 } else { i as u32 };
        assert_eq!(got, (from..1000).collect::<Vec<_>>(), "op {i}");
    }
}

#[gpu_test]
fn every_read_sees_the_gathered_launches_called_before_it() {
    for (path, ctx) in op_paths() {
        let k = ctx.kernel(AFFINE, "main").unwrap();
        let n = 200;
        let mut a = ctx.device_put(&vec![2u32; n], &[20, 10]).unwrap();
        let mut want = 2u32;
        // Reads fall at every position of a batch, and across its bound.
        for i in 0..(2 * MAX_GATHERED_OPS as u32 + 9) {
            run_affine(&ctx, &k, &mut a, params(i));
            want = affine(want, params(i));
            match i % 4 {
                0 => assert_eq!(ctx.device_get(&a).unwrap(), vec![want; n], "{path} {i}"),
                1 => {
                    let mut out = vec![0u32; 10];
                    ctx.device_get_into(a.view(&[7]).unwrap(), &mut out)
                        .unwrap_or_else(|e| panic!("{path} {i}: {e}"));
                    assert_eq!(out, vec![want; 10], "{path} {i}");
                }
                2 => assert_eq!(
                    ctx.device_get_many(&[&a]).unwrap()[0],
                    vec![want; n],
                    "{path} {i}"
                ),
                _ => {}
            }
        }
        assert_eq!(ctx.device_get(&a).unwrap(), vec![want; n], "{path}");
    }
}

#[gpu_test]
fn a_sequence_submitted_after_gathered_ops_runs_after_them() {
    for (path, ctx) in op_paths() {
        let k = ctx.kernel(AFFINE, "main").unwrap();
        let mut a = ctx.device_put(&[1u32; 128], &[128]).unwrap();
        let mut b = ctx.device_put(&[1u32; 128], &[128]).unwrap();
        // Recorded before the single op on `b`, submitted after it.
        let mut s = ctx.sequence();
        s.launch(&k)
            .params(&params(1))
            .arg_mut(&mut a)
            .grid_for(128)
            .run()
            .unwrap();
        run_affine(&ctx, &k, &mut b, params(2));
        s.launch(&k)
            .params(&params(3))
            .arg_mut(&mut a)
            .grid_for(128)
            .run()
            .unwrap();
        s.submit().unwrap();
        // A single op, then a sequence on the same array.
        run_affine(&ctx, &k, &mut b, params(4));
        let mut s = ctx.sequence();
        s.launch(&k)
            .params(&params(5))
            .arg_mut(&mut b)
            .grid_for(128)
            .run()
            .unwrap();
        s.submit().unwrap();
        let want_a = affine(affine(1, params(1)), params(3));
        let want_b = affine(affine(affine(1, params(2)), params(4)), params(5));
        assert_eq!(ctx.device_get(&a).unwrap(), vec![want_a; 128], "{path}");
        assert_eq!(ctx.device_get(&b).unwrap(), vec![want_b; 128], "{path}");
    }
}

#[gpu_test]
fn raw_submit_after_gathered_ops_runs_after_them() {
    for (path, ctx) in op_paths() {
        let k = ctx.kernel(AFFINE, "main").unwrap();
        let mut a = ctx.device_put(&[4u32; 256], &[256]).unwrap();
        run_affine(&ctx, &k, &mut a, params(9));
        // A copy of `a` out to a buffer of our own, built by hand: it must see the launch.
        let device = ctx.device();
        let readback = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("raw readback"),
            size: 1024,
            usage: wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::MAP_READ,
            mapped_at_creation: false,
        });
        let from = a.raw_binding();
        let mut encoder = device.create_command_encoder(&Default::default());
        encoder.copy_buffer_to_buffer(from.buffer, from.offset, &readback, 0, 1024);
        ctx.raw_submit([encoder.finish()], &[&a]).unwrap();
        readback
            .slice(..)
            .map_async(wgpu::MapMode::Read, |r| r.unwrap());
        device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
        let got: Vec<u32> =
            bytemuck::cast_slice(&readback.slice(..).get_mapped_range().unwrap()).to_vec();
        assert_eq!(got, vec![affine(4, params(9)); 256], "{path}");
    }
}

#[gpu_test]
fn host_path_writes_wait_for_the_gathered_launches_that_read_their_arrays() {
    // lavapipe, zero-copy: `dynamic_update_slice` with a host update writes `x` with memcpy
    // at once; the gathered launches that read `x` must have run first.
    for (path, ctx) in op_paths() {
        let k = ctx.kernel(DOUBLE_ADD, "main").unwrap();
        let n = 4096;
        let mut x = ctx.device_put(&vec![1u32; n], &[n]).unwrap();
        let mut y = ctx.device_put(&vec![0u32; n], &[n]).unwrap();
        for _ in 0..5 {
            ctx.launch(&k)
                .arg(&x)
                .arg_mut(&mut y)
                .grid_for(n as u64)
                .run()
                .unwrap();
        }
        x = ctx
            .dynamic_update_slice(x, &vec![1000u32; n][..], &[0])
            .map_err(|e| e.error)
            .unwrap();
        y = ctx.fill_in_place(y, 7u32).map_err(|e| e.error).unwrap();
        // y was 0, 1, 3, 7, 15, 31 before the fill; the fill came after all five launches.
        assert_eq!(ctx.device_get(&y).unwrap(), vec![7; n], "{path}");
        ctx.launch(&k)
            .arg(&x)
            .arg_mut(&mut y)
            .grid_for(n as u64)
            .run()
            .unwrap();
        assert_eq!(ctx.device_get(&y).unwrap(), vec![1014; n], "{path}");
    }
}

#[gpu_test]
fn a_read_of_the_source_after_gathered_launches_sees_them_before_a_host_copy() {
    for (path, ctx) in op_paths() {
        let k = ctx.kernel(AFFINE, "main").unwrap();
        let mut a = ctx.device_put(&[3u32; 500], &[500]).unwrap();
        run_affine(&ctx, &k, &mut a, params(11));
        // On lavapipe's zero-copy path these copy on the host, after waiting for `a`.
        let copied = ctx.copy(&a).unwrap();
        let sliced = ctx.dynamic_slice(&a, &[100], &[50]).unwrap();
        let want = affine(3, params(11));
        assert_eq!(ctx.device_get(&copied).unwrap(), vec![want; 500], "{path}");
        assert_eq!(ctx.device_get(&sliced).unwrap(), vec![want; 50], "{path}");
    }
}

#[gpu_test]
fn memory_of_an_array_dropped_after_a_gathered_launch_is_not_reused_before_it_ran() {
    for (path, ctx) in op_paths() {
        let k = ctx.kernel(&slow_copy_wgsl("read"), "main").unwrap();
        let n = 64 << 10;
        let data: Vec<u32> = (0..n as u32).map(|i| i ^ 0x5A5A).collect();
        let x = ctx.device_put(&data, &[n]).unwrap();
        let mut y = ctx.zeros::<u32>(&[n]).unwrap();
        let mut sink = ctx.zeros::<u32>(&[n]).unwrap();
        ctx.synchronize().unwrap();
        ctx.launch(&k)
            .arg(&x)
            .arg_mut(&mut y)
            .arg_mut(&mut sink)
            .grid_for(n as u64)
            .run()
            .unwrap();
        // Gathered, not submitted: the source's memory must stay out of reach until it ran.
        let source = (x.buffer().clone(), x.byte_offset());
        drop(x);
        harness::assert_dropped_source_was_not_reused(&ctx, source, &y, &data, path);
    }
}

/// `out[p.index] = p.value + p.check[LAST].x`: the whole block must reach its own launch.
fn slot_kernel(vec4s: usize) -> String {
    format!(
        r#"
struct P {{ index: u32, value: u32, pad: vec2<u32>, check: array<vec4<u32>, {vec4s}> }}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(1)
fn main() {{ out[p.index] = p.value + p.check[{last}].x; }}
"#,
        last = vec4s - 1
    )
}

/// Launches [`slot_kernel`] with a block of type `P` (its size in words, `W`, makes
/// `W / 4 - 1` check vectors): writes `value + check` at `index`.
fn launch_slot<P: bytemuck::Pod>(
    ctx: &Context,
    k: &Kernel,
    out: &mut DeviceArray<u32>,
    [index, value, check]: [u32; 3],
) -> gpu_arena::Result<()> {
    let mut block = P::zeroed();
    let words: &mut [u32] = bytemuck::cast_slice_mut(bytemuck::bytes_of_mut(&mut block));
    let last = words.len() - 4;
    words[0] = index;
    words[1] = value;
    words[last] = check;
    ctx.launch(k)
        .params(&block)
        .arg_mut(out)
        .grid([1, 1, 1])
        .run()
}

#[gpu_test]
fn parameter_blocks_of_gathered_launches_keep_their_own_slots_whatever_their_sizes() {
    for (path, ctx) in op_paths() {
        // Blocks of 32 bytes, 4 KiB, 16 KiB and 64 KiB (what WebGPU guarantees a uniform
        // binding can hold), in an irregular mix, so small and large blocks share batches, fill
        // the parameter buffer early and make it grow.
        let limit = ctx.limits().max_uniform_buffer_binding_size;
        assert!(limit >= 64 << 10, "{path}: {limit}");
        let kernels: Vec<Kernel> = [1usize, 255, 1023, 4095]
            .iter()
            .map(|&v| ctx.kernel(&slot_kernel(v), "main").unwrap())
            .collect();
        let launches = 150u32;
        let mut out = ctx.zeros::<u32>(&[launches as usize]).unwrap();
        for i in 0..launches {
            let args = [i, 1000 * i, i % 3];
            let launched = match (i * 7) % 11 % 4 {
                0 => launch_slot::<[u32; 8]>(&ctx, &kernels[0], &mut out, args),
                1 => launch_slot::<[u32; 1024]>(&ctx, &kernels[1], &mut out, args),
                2 => launch_slot::<[u32; 4096]>(&ctx, &kernels[2], &mut out, args),
                _ => launch_slot::<[[u32; 4096]; 4]>(&ctx, &kernels[3], &mut out, args),
            };
            launched.unwrap_or_else(|e| panic!("{path} launch {i}: {e}"));
        }
        let want: Vec<u32> = (0..launches).map(|i| 1000 * i + i % 3).collect();
        assert_eq!(ctx.device_get(&out).unwrap(), want, "{path}");
    }
}

#[gpu_test]
fn flush_submits_the_gathered_ops_once() {
    for (path, ctx) in op_paths() {
        let k = ctx.kernel(AFFINE, "main").unwrap();
        let mut a = ctx.device_put(&[1u32; 64], &[64]).unwrap();
        ctx.synchronize().unwrap();
        let (made, ()) = submissions_made(&ctx, || {
            run_affine(&ctx, &k, &mut a, params(0));
            run_affine(&ctx, &k, &mut a, params(1));
            ctx.flush().unwrap();
            // Nothing gathered: no submission.
            ctx.flush().unwrap();
        });
        assert_eq!(made, 1, "{path}");
        let (made, ()) = submissions_made(&ctx, || ctx.flush().unwrap());
        assert_eq!(made, 0, "{path}");
        assert_eq!(
            ctx.device_get(&a).unwrap(),
            vec![affine(affine(1, params(0)), params(1)); 64],
            "{path}"
        );
    }
}

#[gpu_test]
fn two_threads_gathering_on_one_context_get_every_result() {
    for (path, ctx) in op_paths() {
        let k = ctx.kernel(AFFINE, "main").unwrap();
        let acc = ctx.kernel(DOUBLE_ADD, "main").unwrap();
        let n = 256;
        let shared = ctx.device_put(&vec![1u32; n], &[n]).unwrap();
        std::thread::scope(|scope| {
            for thread in 0..2u32 {
                let (ctx, k, acc, shared) = (&ctx, &k, &acc, &shared);
                scope.spawn(move || {
                    let mut own = ctx.device_put(&vec![thread; n], &[n]).unwrap();
                    let mut sum = ctx.zeros::<u32>(&[n]).unwrap();
                    let (mut want, mut want_sum) = (thread, 0u32);
                    for i in 0..150u32 {
                        let p = params(i + 1000 * thread);
                        run_affine(ctx, k, &mut own, p);
                        want = affine(want, p);
                        // Both threads read the shared array through gathered launches.
                        ctx.launch(acc)
                            .arg(shared)
                            .arg_mut(&mut sum)
                            .grid_for(n as u64)
                            .run()
                            .unwrap();
                        want_sum = want_sum.wrapping_mul(2).wrapping_add(1);
                        if i % 13 == 0 {
                            assert_eq!(ctx.device_get(&own).unwrap(), vec![want; n], "{path}");
                            assert_eq!(ctx.device_get(shared).unwrap(), vec![1; n], "{path}");
                            let head = ctx.dynamic_slice(&sum, &[0], &[8]).unwrap();
                            assert_eq!(ctx.device_get(&head).unwrap(), vec![want_sum; 8]);
                        }
                    }
                    assert_eq!(ctx.device_get(&own).unwrap(), vec![want; n], "{path}");
                    assert_eq!(ctx.device_get(&sum).unwrap(), vec![want_sum; n], "{path}");
                });
            }
        });
        drop(shared);
        ctx.synchronize().unwrap();
        assert_eq!(ctx.memory_stats().bytes_in_use, 0, "{path}");
    }
}

#[gpu_test]
fn immediate_parameters_of_gathered_launches_stay_with_their_launch() {
    let ctx = context_with(test_config());
    if !ctx.device().features().contains(wgpu::Features::IMMEDIATES) {
        harness::skip(harness::Need::Immediates);
        return;
    }
    let k = ctx
        .kernel(
            r#"
        var<immediate> p: vec2<u32>;
        @group(0) @binding(0) var<storage, read_write> out: array<u32>;
        @compute @workgroup_size(1)
        fn main() { out[p.x] = p.y; }"#,
            "main",
        )
        .unwrap();
    let mut out = ctx.zeros::<u32>(&[100]).unwrap();
    for i in 0..100u32 {
        ctx.launch(&k)
            .params(&[i, i * i + 1])
            .arg_mut(&mut out)
            .grid([1, 1, 1])
            .run()
            .unwrap();
    }
    let want: Vec<u32> = (0..100u32).map(|i| i * i + 1).collect();
    assert_eq!(ctx.device_get(&out).unwrap(), want);
}
