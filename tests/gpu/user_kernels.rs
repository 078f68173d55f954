//! Users' own kernels through the arena, on the test machine's GPU (lavapipe in CI) with
//! validation on: compilation and its cache, checked launches, `read` bindings beside
//! `read_write` ones in one region, wgpu errors as `Err`, views, sequences, safe reuse of
//! arguments dropped while a kernel runs, donation that gives the array back.

use crate::harness;
use crate::harness::refusals::assert_pending_in_sequence;
use crate::harness::{context, context_with, test_config, Rng};
use gpu_arena::error::Access;
use gpu_arena::{ArenaConfig, Error, KernelDesc, KernelSource, TransferDirection};

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct SaxpyParams {
    n: u32,
    a: f32,
}

const SAXPY: &str = r#"
struct Params { n: u32, a: f32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < p.n) { y[id.x] = p.a * x[id.x] + y[id.x]; }
}
"#;

/// Adds `p` to every element of `a` (a `read_write` array) — the smallest kernel with a param.
const ADD: &str = r#"
@group(0) @binding(0) var<uniform> p: u32;
@group(0) @binding(1) var<storage, read_write> a: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < arrayLength(&a)) { a[id.x] = a[id.x] + p; }
}
"#;

#[gpu_test]
fn saxpy_with_a_read_input_beside_its_output_in_one_region_matches_the_cpu() {
    let ctx = context();
    let k = ctx.kernel(SAXPY, "main").unwrap();
    let mut rng = Rng(7);
    for n in [1usize, 63, 64, 65, 1000, 4097] {
        let xs: Vec<f32> = (0..n).map(|_| rng.below(1000) as f32 / 7.0).collect();
        let ys: Vec<f32> = (0..n).map(|_| rng.below(1000) as f32 / 3.0).collect();
        // Allocated one after the other: the same region buffer, read next to read_write.
        let x = ctx.device_put(&xs, &[n]).unwrap();
        let mut y = ctx.device_put(&ys, &[n]).unwrap();
        assert_eq!(x.buffer(), y.buffer(), "both arrays in one region");
        ctx.launch(&k)
            .arg(&x)
            .arg_mut(&mut y)
            .params(&SaxpyParams {
                n: n as u32,
                a: 2.5,
            })
            .grid_for(n as u64)
            .run()
            .unwrap();
        let expected: Vec<f32> = xs.iter().zip(&ys).map(|(x, y)| 2.5 * x + y).collect();
        assert_eq!(ctx.device_get(&y).unwrap(), expected, "n = {n}");
    }
}

#[gpu_test]
fn kernels_are_reflected_and_compiled_once_per_source_entry_and_constants() {
    let ctx = context();
    let before = ctx.kernel_cache_stats().pipelines_compiled;
    let k = ctx.kernel(SAXPY, "main").unwrap();
    let again = ctx.kernel(SAXPY, "main").unwrap();
    let stats = ctx.kernel_cache_stats();
    assert_eq!(stats.pipelines_compiled, before + 1);
    assert!(stats.pipeline_hits >= 1);
    assert_eq!(k.workgroup_size(), again.workgroup_size());
    let sig = k.signature();
    assert_eq!(sig.storage.len(), 2);
    assert_eq!(sig.storage[0].name, "x");
    assert!(!sig.storage[0].writable && sig.storage[1].writable);
    assert_eq!(sig.params.as_ref().unwrap().size, 8);

    let over = r#"
        override WG: u32 = 16;
        override SCALE: f32 = 1.0;
        @group(0) @binding(0) var<storage, read_write> a: array<f32>;
        @compute @workgroup_size(WG)
        fn main(@builtin(global_invocation_id) id: vec3<u32>) {
            if (id.x < arrayLength(&a)) { a[id.x] = a[id.x] * SCALE; }
        }"#;
    let k3 = ctx
        .kernel_with(KernelDesc::wgsl(over, "main").constants(&[("WG", 32.0), ("SCALE", 3.0)]))
        .unwrap();
    let k4 = ctx
        .kernel_with(KernelDesc::wgsl(over, "main").constants(&[("WG", 128.0), ("SCALE", 3.0)]))
        .unwrap();
    assert_eq!(k3.workgroup_size(), [32, 1, 1]);
    assert_eq!(k4.workgroup_size(), [128, 1, 1]);
    assert_eq!(ctx.kernel_cache_stats().pipelines_compiled, before + 3);
    let mut a = ctx.device_put(&[1.0f32, 2.0, 3.0], &[3]).unwrap();
    ctx.launch(&k4).arg_mut(&mut a).grid_for(3).run().unwrap();
    assert_eq!(ctx.device_get(&a).unwrap(), [3.0, 6.0, 9.0]);
}

#[gpu_test]
fn spirv_kernels_run_like_wgsl_ones() {
    let ctx = context();
    let module = wgpu::naga::front::wgsl::parse_str(ADD).unwrap();
    let info = wgpu::naga::valid::Validator::new(
        wgpu::naga::valid::ValidationFlags::all(),
        wgpu::naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .unwrap();
    let words =
        wgpu::naga::back::spv::write_vec(&module, &info, &Default::default(), None).unwrap();
    let k = ctx
        .kernel_with(KernelDesc {
            source: KernelSource::SpirV(&words),
            entry_point: "main",
            constants: &[],
            label: Some("add (spir-v)"),
        })
        .unwrap();
    assert_eq!(k.name(), "add (spir-v)");
    let mut a = ctx.device_put(&[1u32, 2, 3, 4, 5], &[5]).unwrap();
    ctx.launch(&k)
        .arg_mut(&mut a)
        .params(&10u32)
        .grid_for(5)
        .run()
        .unwrap();
    assert_eq!(ctx.device_get(&a).unwrap(), [11, 12, 13, 14, 15]);
}

#[gpu_test]
fn bad_kernels_are_compile_errors_with_the_compiler_s_message() {
    let ctx = context();
    let err = ctx
        .kernel(
            "@compute @workgroup_size(1) fn main() { let x = ; }",
            "main",
        )
        .unwrap_err();
    assert!(matches!(err, Error::KernelCompile { .. }), "{err}");
    assert!(err.to_string().contains("did not compile"), "{err}");
    assert!(err.to_string().contains("expected"), "{err}");

    let err = ctx.kernel(ADD, "nope").unwrap_err();
    assert!(
        matches!(&err, Error::KernelCompile { kernel, .. } if kernel.starts_with("nope#")),
        "{err}"
    );
    assert!(
        err.to_string().contains("\"nope\"")
            && err
                .to_string()
                .ends_with("the module's @compute entry points are main"),
        "{err}"
    );

    // Valid WGSL the device cannot run (more invocations per workgroup than it allows):
    // refused at kernel(), naming the limit.
    let err = ctx
        .kernel(
            "@group(0) @binding(0) var<storage, read_write> a: array<u32>;
             @compute @workgroup_size(1024, 1024) fn main() { a[0] = 1u; }",
            "main",
        )
        .unwrap_err();
    assert!(matches!(err, Error::KernelCompile { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("max_compute_invocations_per_workgroup"),
        "{err}"
    );

    let err = ctx
        .kernel_with(KernelDesc::wgsl(ADD, "main").constants(&[("NOPE", 1.0)]))
        .unwrap_err();
    assert!(
        matches!(&err, Error::KernelCompile { kernel, .. } if kernel.starts_with("main#")),
        "{err}"
    );
    assert!(err.to_string().contains("NOPE"), "{err}");
    let err = ctx
        .kernel_with(KernelDesc::spirv(&[0x0723_0203, 1, 2], "main"))
        .unwrap_err();
    assert!(
        matches!(&err, Error::KernelCompile { kernel, .. } if kernel.starts_with("main#")),
        "{err}"
    );
    assert!(err.to_string().contains("SPIR-V"), "{err}");
}

/// Each way a launch can disagree with its kernel: a typed error naming the binding, and
/// nothing submitted (the output is untouched).
#[gpu_test]
fn every_argument_mismatch_is_a_typed_error_naming_the_binding() {
    let ctx = context();
    let k = ctx.kernel(SAXPY, "main").unwrap();
    let x = ctx.device_put(&[1.0f32; 8], &[8]).unwrap();
    let mut y = ctx.device_put(&[0.0f32; 8], &[8]).unwrap();
    let p = SaxpyParams { n: 8, a: 1.0 };
    let expect = |result: gpu_arena::Result<()>, parts: &[&str]| {
        let err = result.unwrap_err();
        assert!(matches!(err, Error::KernelArgument { .. }), "{err}");
        let text = err.to_string();
        for part in parts {
            assert!(text.contains(part), "{text:?} should contain {part:?}");
        }
    };
    // Too few arguments.
    expect(
        ctx.launch(&k).arg(&x).params(&p).grid_for(8).run(),
        &[
            "has no argument: 1 array given",
            "binds 2",
            "@binding(2) y: array<f32> (read_write)",
        ],
    );
    // The binding field names the first binding without an argument, or the first argument
    // without a binding.
    let z = ctx.device_put(&[0.0f32; 8], &[8]).unwrap();
    let binding_at_fault = |result: gpu_arena::Result<()>| match result {
        Err(Error::KernelArgument { binding, .. }) => binding,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        binding_at_fault(ctx.launch(&k).arg(&x).params(&p).grid_for(8).run()),
        "@binding(2) y: array<f32> (read_write)"
    );
    assert_eq!(
        binding_at_fault(
            ctx.launch(&k)
                .arg(&x)
                .arg_mut(&mut y)
                .arg(&z)
                .params(&p)
                .grid_for(8)
                .run()
        ),
        "argument 2 (no binding takes it)"
    );
    // Two too many, and arguments for a kernel that binds no storage buffer.
    let w = ctx.device_put(&[0.0f32; 8], &[8]).unwrap();
    let two_many = ctx.launch(&k).arg(&x).arg_mut(&mut y).arg(&z).arg(&w);
    expect(
        two_many.params(&p).grid_for(8).run(),
        &["is the first of 2 too many: 4 arrays given, the kernel binds 2: "],
    );
    let none = ctx
        .kernel("@compute @workgroup_size(1) fn main() {}", "main")
        .unwrap();
    expect(
        ctx.launch(&none).arg(&x).grid([1, 1, 1]).run(),
        &[
            "argument 0 (no binding takes it): is one too many: 1 array given, the kernel binds \
           no storage buffer; pass one array per binding, in the order of their @binding numbers",
        ],
    );
    // A read-only argument for a read_write binding.
    let y2 = ctx.device_put(&[0.0f32; 8], &[8]).unwrap();
    expect(
        ctx.launch(&k).arg(&x).arg(&y2).params(&p).grid_for(8).run(),
        &["@binding(2) y", "arg_mut"],
    );
    // An element size that is not the WGSL element's.
    let mut wide = ctx.device_put(&[0u64; 8], &[8]).unwrap();
    expect(
        ctx.launch(&k)
            .arg(&x)
            .arg_mut(&mut wide)
            .params(&p)
            .grid_for(8)
            .run(),
        &["@binding(2) y", "4 bytes apart", "u64"],
    );
    // Parameters: missing, wrong size, given to a kernel without a block.
    expect(
        ctx.launch(&k).arg(&x).arg_mut(&mut y).grid_for(8).run(),
        &["parameter block `p: Params`", "8 bytes"],
    );
    expect(
        ctx.launch(&k)
            .arg(&x)
            .arg_mut(&mut y)
            .params(&[0u32; 3])
            .grid_for(8)
            .run(),
        &["12 bytes given", "8 bytes"],
    );
    let scale = ctx
        .kernel(
            "@group(0) @binding(0) var<storage, read_write> a: array<f32>;
             @compute @workgroup_size(64) fn main(@builtin(global_invocation_id) i: vec3<u32>) {
                 if (i.x < arrayLength(&a)) { a[i.x] = 2.0 * a[i.x]; } }",
            "main",
        )
        .unwrap();
    expect(
        ctx.launch(&scale)
            .arg_mut(&mut y)
            .params(&p)
            .grid_for(8)
            .run(),
        &["no var<uniform>"],
    );
    // Grids: missing, too large.
    expect(
        ctx.launch(&k).arg(&x).arg_mut(&mut y).params(&p).run(),
        &["the grid", "not set"],
    );
    let max = ctx.limits().max_compute_workgroups_per_dimension;
    expect(
        ctx.launch(&k)
            .arg(&x)
            .arg_mut(&mut y)
            .params(&p)
            .grid([max + 1, 1, 1])
            .run(),
        &["the grid", "max_compute_workgroups_per_dimension"],
    );
    expect(
        ctx.launch(&k)
            .arg(&x)
            .arg_mut(&mut y)
            .params(&p)
            .grid_for(u64::from(max) * 64 + 1)
            .run(),
        &["grid_linear"],
    );
    // A fixed-size binding larger than the array.
    let fixed = ctx
        .kernel(
            "@group(0) @binding(0) var<storage, read_write> a: array<u32, 64>;
             @compute @workgroup_size(1) fn main() { a[63] = 1u; }",
            "main",
        )
        .unwrap();
    let mut small = ctx.zeros::<u32>(&[8]).unwrap();
    expect(
        ctx.launch(&fixed).arg_mut(&mut small).grid([1, 1, 1]).run(),
        &["32 bytes", "needs 256"],
    );
    assert_eq!(ctx.device_get(&y).unwrap(), [0.0; 8], "nothing ran");

    // Arrays and kernels of another context.
    let other = context();
    let mut foreign = other.device_put(&[0.0f32; 8], &[8]).unwrap();
    let err = ctx
        .launch(&k)
        .arg(&x)
        .arg_mut(&mut foreign)
        .params(&p)
        .grid_for(8)
        .run()
        .unwrap_err();
    assert!(matches!(err, Error::ForeignArray { .. }), "{err}");
    assert!(err.to_string().contains("context"), "{err}");
    let foreign_x = other.device_put(&[0.0f32; 8], &[8]).unwrap();
    let err = other
        .launch(&k)
        .arg(&foreign_x)
        .arg_mut(&mut foreign)
        .params(&p)
        .grid_for(8)
        .run()
        .unwrap_err();
    assert!(matches!(err, Error::ForeignArray { .. }), "{err}");
}

#[gpu_test]
fn a_refused_submission_comes_back_as_an_err_from_raw_submit() {
    let ctx = context();
    let a = ctx.zeros::<u8>(&[64]).unwrap();
    // Encoding by hand: the encoder's own error is the caller's to scope.
    let scope = ctx.device().push_error_scope(wgpu::ErrorFilter::Validation);
    let mut encoder = ctx.device().create_command_encoder(&Default::default());
    // A copy within one buffer is a validation error of the command buffer.
    encoder.copy_buffer_to_buffer(
        a.buffer(),
        a.byte_offset(),
        a.buffer(),
        a.byte_offset() + 8,
        4,
    );
    let commands = encoder.finish();
    assert!(pollster::block_on(scope.pop()).is_some());
    // Submitting the invalid command buffer: an Err from raw_submit, not a log line.
    let err = ctx.raw_submit([commands], &[&a]).unwrap_err();
    assert!(matches!(err, Error::Device { .. }), "{err}");
    assert!(err.to_string().contains("raw_submit"), "{err}");
}

#[gpu_test]
fn views_bind_exactly_their_rows_and_misaligned_views_are_refused_with_advice() {
    let ctx = context();
    let add = ctx.kernel(ADD, "main").unwrap();
    let (layers, seq, dim) = (3usize, 4usize, 64usize);
    let mut cache = ctx.zeros::<u32>(&[layers, seq, dim]).unwrap();
    {
        let mut row = cache.view_mut(&[1, 2]).unwrap();
        assert_eq!(row.shape(), [dim]);
        ctx.launch(&add)
            .params(&5u32)
            .arg_mut(&mut row)
            .grid_for(dim as u64)
            .run()
            .unwrap();
    }
    {
        let mut layer = cache.view_mut(&[2]).unwrap();
        assert_eq!(layer.shape(), [seq, dim]);
        ctx.launch(&add)
            .params(&1u32)
            .arg_mut(&mut layer)
            .grid_for((seq * dim) as u64)
            .run()
            .unwrap();
    }
    let got = ctx.device_get(&cache).unwrap();
    for l in 0..layers {
        for t in 0..seq {
            for d in 0..dim {
                let expected = match (l, t) {
                    (1, 2) => 5,
                    (2, _) => 1,
                    _ => 0,
                };
                assert_eq!(got[(l * seq + t) * dim + d], expected, "[{l}, {t}, {d}]");
            }
        }
    }
    // A view must start on the device's storage-offset alignment.
    let align = ctx.limits().min_storage_buffer_offset_alignment as usize;
    let mut odd = ctx.zeros::<u32>(&[align, 1]).unwrap();
    let mut row1 = odd.view_mut(&[1]).unwrap();
    let err = ctx
        .launch(&add)
        .params(&1u32)
        .arg_mut(&mut row1)
        .grid_for(1)
        .run()
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains(&align.to_string()) && text.contains("dynamic_slice"),
        "{text}"
    );
    // Hostile indices are errors, not panics.
    assert!(cache.view(&[3]).is_err());
    assert!(cache.view(&[0, 0, 0, 0]).is_err());
    assert!(cache.view(&[usize::MAX]).is_err());
    assert!(cache.reshaped(&[layers * seq * dim + 1]).is_err());
    let flat = cache.reshaped(&[layers * seq * dim]).unwrap();
    assert_eq!(flat.len(), layers * seq * dim);
}

#[gpu_test]
fn reshape_keeps_the_memory_and_gives_the_array_back_on_a_bad_shape() {
    let ctx = context();
    let a = ctx.device_put(&[1u16, 2, 3, 4, 5, 6], &[6]).unwrap();
    let offset = (a.buffer().clone(), a.byte_offset());
    let a = a.reshape(&[2, 3]).unwrap();
    assert_eq!(a.shape(), [2, 3]);
    assert_eq!((a.buffer().clone(), a.byte_offset()), offset);
    let donated = a.reshape(&[4, 2]).unwrap_err();
    assert!(
        matches!(
            donated.error,
            Error::Shape {
                operation: "reshape",
                ..
            }
        ),
        "{}",
        donated.error
    );
    assert!(
        donated.error.to_string().contains("holds 8 elements"),
        "{}",
        donated.error
    );
    let a = donated.array;
    assert_eq!(ctx.device_get(&a).unwrap(), [1, 2, 3, 4, 5, 6]);
}

#[gpu_test]
fn a_sequence_runs_its_steps_in_order_and_equals_the_op_by_op_result() {
    let ctx = context();
    let add = ctx.kernel(ADD, "main").unwrap();
    let run = |sequenced: bool| -> Vec<u32> {
        let base: Vec<u32> = (0..256).collect();
        if sequenced {
            let mut s = ctx.sequence();
            let a = s.put(&base, &[16, 16]).unwrap();
            let mut a = s
                .dynamic_update_slice(a, (&[7u32; 16][..], &[1usize, 16][..]), &[3, 0])
                .unwrap();
            s.launch(&add)
                .params(&100u32)
                .arg_mut(&mut a)
                .grid_for(256)
                .run()
                .unwrap();
            let b = s.dynamic_slice(&a, &[2, 0], &[4, 16]).unwrap();
            let mut c = s.copy(&b).unwrap();
            s.launch(&add)
                .params(&1u32)
                .arg_mut(&mut c)
                .grid_for(64)
                .run()
                .unwrap();
            let c = s.fill_in_place(c, 9u32).unwrap();
            let mut d = s.dynamic_update_slice(b, &c, &[0, 0]).unwrap();
            s.launch(&add)
                .params(&2u32)
                .arg_mut(&mut d)
                .grid_for(64)
                .run()
                .unwrap();
            // Eight steps, or seven where the first update ran at once on the host (a CPU
            // adapter with a mapped arena: no recorded step touched its arrays yet).
            assert!(s.len() >= 7, "{} steps", s.len());
            s.submit().unwrap();
            ctx.device_get(&d).unwrap()
        } else {
            let a = ctx.device_put(&base, &[16, 16]).unwrap();
            let mut a = ctx
                .dynamic_update_slice(a, (&[7u32; 16][..], &[1usize, 16][..]), &[3, 0])
                .unwrap();
            ctx.launch(&add)
                .params(&100u32)
                .arg_mut(&mut a)
                .grid_for(256)
                .run()
                .unwrap();
            let b = ctx.dynamic_slice(&a, &[2, 0], &[4, 16]).unwrap();
            let mut c = ctx.copy(&b).unwrap();
            ctx.launch(&add)
                .params(&1u32)
                .arg_mut(&mut c)
                .grid_for(64)
                .run()
                .unwrap();
            let c = ctx.fill_in_place(c, 9u32).unwrap();
            let mut d = ctx.dynamic_update_slice(b, &c, &[0, 0]).unwrap();
            ctx.launch(&add)
                .params(&2u32)
                .arg_mut(&mut d)
                .grid_for(64)
                .run()
                .unwrap();
            ctx.device_get(&d).unwrap()
        }
    };
    let by_ops = run(false);
    assert_eq!(by_ops, vec![11u32; 64], "fill then +2 over the whole slice");
    assert_eq!(run(true), by_ops);
}

#[gpu_test]
fn a_sequence_is_one_submission_and_its_arrays_wait_for_submit() {
    let ctx = context_with(ArenaConfig {
        force_device_kernels: true,
        ..test_config()
    });
    let add = ctx.kernel(ADD, "main").unwrap();
    let mut a = ctx.zeros::<u32>(&[64]).unwrap();
    ctx.synchronize().unwrap();
    let before = a.last_use();
    let mut s = ctx.sequence();
    for _ in 0..10 {
        s.launch(&add)
            .params(&1u32)
            .arg_mut(&mut a)
            .grid_for(64)
            .run()
            .unwrap();
    }
    let filled = s.fill(&[8], 3u8).unwrap();
    // Reading back before submit would run before the recorded work: refused, not stale data.
    let err = ctx.device_get(&a).unwrap_err();
    assert_pending_in_sequence(&err, "device_get", "the array", Access::Write, Access::Read);
    let donated = ctx.fill_in_place(a, 0).unwrap_err();
    assert_pending_in_sequence(
        &donated.error,
        "fill_in_place",
        "the array",
        Access::Write,
        Access::Write,
    );
    a = donated.array;
    let id = s.submit().unwrap();
    assert_eq!(a.last_use(), id);
    assert!(id.0 == before.0 + 1 || before.0 == 0 || id > before);
    assert_eq!(ctx.device_get(&a).unwrap(), vec![10; 64]);
    assert_eq!(ctx.device_get(&filled).unwrap(), vec![3; 8]);

    // A dropped sequence discards its steps and releases its arrays.
    let mut s = ctx.sequence();
    s.launch(&add)
        .params(&1u32)
        .arg_mut(&mut a)
        .grid_for(64)
        .run()
        .unwrap();
    drop(s);
    assert_eq!(ctx.device_get(&a).unwrap(), vec![10; 64]);
}

/// The frontier on the launch path: a kernel reads X, X is dropped right after the launch, a
/// new array of the same size is written at once; the kernel must still read X's data.
#[gpu_test]
fn an_argument_dropped_while_its_kernel_runs_is_not_reused_until_it_completes() {
    let ctx = context();
    const N: usize = 1 << 16;
    let slow = ctx
        .kernel(&harness::slow_copy_wgsl("read"), "main")
        .unwrap();
    let data: Vec<u32> = (0..N as u32).collect();
    for sequenced in [false, true] {
        let x = ctx.device_put(&data, &[N]).unwrap();
        let mut y = ctx.zeros::<u32>(&[N]).unwrap();
        let mut sink = ctx.zeros::<u32>(&[N]).unwrap();
        let place = (x.buffer().clone(), x.byte_offset());
        if sequenced {
            let mut s = ctx.sequence();
            s.launch(&slow)
                .arg(&x)
                .arg_mut(&mut y)
                .arg_mut(&mut sink)
                .grid_for(N as u64)
                .run()
                .unwrap();
            drop(x); // before the sequence is even submitted
            s.submit().unwrap();
        } else {
            ctx.launch(&slow)
                .arg(&x)
                .arg_mut(&mut y)
                .arg_mut(&mut sink)
                .grid_for(N as u64)
                .run()
                .unwrap();
            drop(x);
        }
        harness::assert_dropped_source_was_not_reused(
            &ctx,
            place,
            &y,
            &data,
            &format!("sequenced {sequenced}"),
        );
    }
}

/// Every op that takes an array by value gives it back, contents intact, on each error path.
#[gpu_test]
fn donated_operands_survive_every_error_with_their_contents() {
    let ctx = context();
    let contents: Vec<f32> = (0..32).map(|i| i as f32).collect();
    let check = |donated: gpu_arena::Donated<f32>,
                 variant: fn(&Error) -> bool,
                 part: &str|
     -> gpu_arena::DeviceArray<f32> {
        assert!(
            variant(&donated.error),
            "{} is not the expected variant",
            donated.error
        );
        assert!(
            donated.error.to_string().contains(part),
            "{} should say {part:?}",
            donated.error
        );
        let array = donated.array;
        assert_eq!(ctx.device_get(&array).unwrap(), contents);
        array
    };
    let mut a = ctx.device_put(&contents, &[4, 8]).unwrap();
    for (path, sequenced) in [("context", false), ("sequence", true)] {
        let mut s = ctx.sequence();
        let mut dus = |a, update: gpu_arena::Operand<'_, f32>, start: &[i64]| {
            if sequenced {
                s.dynamic_update_slice(a, update, start)
            } else {
                ctx.dynamic_update_slice(a, update, start)
            }
        };
        // Bad start vector, rank mismatch, too large an update, foreign update.
        a = check(
            dus(a, (&[1.0f32; 8][..], &[1usize, 8][..]).into(), &[0]).unwrap_err(),
            |e| {
                matches!(
                    e,
                    Error::Index {
                        operation: "dynamic_update_slice",
                        refusal: gpu_arena::error::IndexRefusal::StartCount { given: 1, .. },
                    }
                )
            },
            "one per dimension",
        );
        a = check(
            dus(a, (&[1.0f32; 8][..]).into(), &[0, 0]).unwrap_err(),
            |e| {
                matches!(
                    e,
                    Error::Shape {
                        operation: "dynamic_update_slice",
                        ..
                    }
                )
            },
            "rank",
        );
        a = check(
            dus(a, (&[1.0f32; 9][..], &[1usize, 9][..]).into(), &[0, 0]).unwrap_err(),
            |e| {
                matches!(
                    e,
                    Error::Shape {
                        operation: "dynamic_update_slice",
                        ..
                    }
                )
            },
            "larger",
        );
        let other = context();
        let foreign = other.zeros::<f32>(&[1, 8]).unwrap();
        a = check(
            dus(a, (&foreign).into(), &[0, 0]).unwrap_err(),
            |e| {
                matches!(
                    e,
                    Error::ForeignArray {
                        operation: "dynamic_update_slice",
                        ..
                    }
                )
            },
            "context",
        );
        // The guard refusing the implicit upload of a host update.
        {
            let _g = gpu_arena::TransferGuard::scoped(gpu_arena::TransferGuardLevel::Disallow);
            a = check(
                dus(a, (&[1.0f32; 8][..], &[1usize, 8][..]).into(), &[0, 0]).unwrap_err(),
                |e| {
                    matches!(
                        e,
                        Error::TransferGuard {
                            direction: TransferDirection::HostToDevice,
                            bytes: 32,
                            operation: "dynamic_update_slice",
                            explicitness: "implicit",
                        }
                    )
                },
                "Disallowed",
            );
        }
        drop(s);
        // fill_in_place of an element size that cannot be filled.
        let _ = path;
    }
    let bad = ctx.device_put(&[[0u8; 3]; 4], &[4]).unwrap();
    let donated = ctx.fill_in_place(bad, [1u8; 3]).unwrap_err();
    assert!(
        matches!(
            donated.error,
            Error::Element {
                operation: "fill_in_place",
                refusal: gpu_arena::error::ElementRefusal::FillSize { .. },
            }
        ),
        "{}",
        donated.error
    );
    assert!(
        donated.error.to_string().contains("divide 16"),
        "{}",
        donated.error
    );
    assert_eq!(ctx.device_get(&donated.array).unwrap(), [[0u8; 3]; 4]);
    // A foreign context's fill_in_place.
    let other = context();
    let donated = other.fill_in_place(a, 1.0).unwrap_err();
    let a = check(
        donated,
        |e| {
            matches!(
                e,
                Error::ForeignArray {
                    operation: "fill_in_place",
                    ..
                }
            )
        },
        "context",
    );
    // Out of memory for a host update: the operand survives.
    let oom_ctx = harness::context_with(gpu_arena::ArenaConfig {
        preallocate: true,
        mem_fraction: gpu_arena::MemFraction::fixed(0.01),
        ..harness::test_config()
    });
    let limit = oom_ctx.memory_plan().prealloc_bytes(0.01);
    let big = oom_ctx.zeros::<u8>(&[(limit as usize) * 3 / 4]).unwrap();
    let huge = vec![1u8; (limit as usize) / 2];
    let donated = oom_ctx
        .dynamic_update_slice(big, &huge[..], &[0])
        .unwrap_err();
    assert!(
        matches!(donated.error, Error::OutOfMemory { .. }),
        "{}",
        donated.error
    );
    assert_eq!(donated.array.len(), (limit as usize) * 3 / 4);
    drop(a);
}

#[gpu_test]
fn immediate_parameters_work_where_the_device_has_them_and_say_what_to_do_where_not() {
    let ctx = context();
    let source = harness::IMMEDIATE_ADD;
    let has = ctx.device().features().contains(wgpu::Features::IMMEDIATES);
    match ctx.kernel(source, "main") {
        Ok(k) => {
            assert!(has, "compiled without Features::IMMEDIATES");
            let mut a = harness::run_immediate_add(&ctx, &k);
            let err = ctx
                .launch(&k)
                .params(&[1u32, 2])
                .arg_mut(&mut a)
                .grid_for(100)
                .run()
                .unwrap_err();
            assert!(
                matches!(&err, Error::KernelArgument { kernel, binding, .. }
                    if kernel.starts_with("main#") && binding == "parameter block `add: u32`"),
                "{err}"
            );
            assert!(err.to_string().contains("8 bytes given"), "{err}");
        }
        Err(err) => {
            assert!(!has, "{err}");
            assert!(
                matches!(&err, Error::KernelCompile { kernel, .. } if kernel.starts_with("main#")),
                "{err}"
            );
            assert!(err.to_string().contains("var<uniform>"), "{err}");
        }
    }
}

#[gpu_test]
fn kernels_sequences_and_donated_errors_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<gpu_arena::Kernel>();
    send_sync::<gpu_arena::Donated<f32>>();
    send::<gpu_arena::Sequence>();
    let ctx = context();
    let k = ctx.kernel(ADD, "main").unwrap();
    let handles: Vec<_> = (0..4u32)
        .map(|i| {
            let (ctx, k) = (ctx.clone(), k.clone());
            std::thread::spawn(move || {
                let mut a = ctx.zeros::<u32>(&[1000]).unwrap();
                let mut s = ctx.sequence();
                for _ in 0..=i {
                    s.launch(&k)
                        .params(&(i + 1))
                        .arg_mut(&mut a)
                        .grid_for(1000)
                        .run()
                        .unwrap();
                }
                s.submit().unwrap();
                ctx.device_get(&a).unwrap()
            })
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        let i = i as u32;
        assert_eq!(h.join().unwrap(), vec![(i + 1) * (i + 1); 1000]);
    }
}

#[gpu_test]
fn hostile_grids_empty_arrays_and_empty_sequences_are_errors_or_no_ops_never_panics() {
    let ctx = context();
    let add = ctx.kernel(ADD, "main").unwrap();
    let mut a = ctx.device_put(&[1u32; 8], &[8]).unwrap();
    for n in [u64::MAX, u64::MAX / 2, 1 << 40] {
        let err = ctx
            .launch(&add)
            .params(&1u32)
            .arg_mut(&mut a)
            .grid_for(n)
            .run()
            .unwrap_err();
        assert!(matches!(err, Error::KernelArgument { .. }), "{err}");
        let err = ctx
            .launch(&add)
            .params(&1u32)
            .arg_mut(&mut a)
            .grid_linear(n)
            .run()
            .unwrap_err();
        assert!(
            matches!(&err, Error::KernelArgument { binding, .. } if binding == "the grid"),
            "{err}"
        );
        assert!(err.to_string().contains("two dimensions"), "{err}");
    }
    // A zero grid and an empty array run nothing and succeed.
    ctx.launch(&add)
        .params(&1u32)
        .arg_mut(&mut a)
        .grid_for(0)
        .run()
        .unwrap();
    let mut empty = ctx.zeros::<u32>(&[0]).unwrap();
    ctx.launch(&add)
        .params(&1u32)
        .arg_mut(&mut empty)
        .grid_for(0)
        .run()
        .unwrap();
    let mut empty2 = ctx.zeros::<u32>(&[4, 0]).unwrap();
    let mut row = empty2.view_mut(&[3]).unwrap();
    assert_eq!(row.len(), 0);
    ctx.launch(&add)
        .params(&1u32)
        .arg_mut(&mut row)
        .grid([0, 1, 1])
        .run()
        .unwrap();
    // An empty view in a launch that runs cannot be bound without reaching past it.
    let err = ctx
        .launch(&add)
        .params(&1u32)
        .arg_mut(&mut row)
        .grid([1, 1, 1])
        .run()
        .unwrap_err();
    assert!(
        matches!(&err, Error::KernelArgument { binding, .. }
            if binding == "@binding(1) a: array<u32> (read_write)"),
        "{err}"
    );
    assert!(err.to_string().contains("the view is empty"), "{err}");
    assert_eq!(ctx.device_get(&a).unwrap(), [1; 8], "nothing ran on a");
    // Empty sequences, and zero-size ops inside one.
    ctx.sequence().submit().unwrap();
    let mut s = ctx.sequence();
    let z = s.put::<f32>(&[], &[0, 3]).unwrap();
    let z = s
        .dynamic_update_slice(z, (&[][..], &[0usize, 3][..]), &[i64::MIN, i64::MAX])
        .unwrap();
    let sliced = s.dynamic_slice(&z, &[i64::MAX, i64::MIN], &[0, 2]).unwrap();
    let filled = s.fill::<u8>(&[0], 7).unwrap();
    s.submit().unwrap();
    assert!(ctx.device_get(&sliced).unwrap().is_empty());
    assert!(ctx.device_get(&filled).unwrap().is_empty());
}

/// Fails when a message repeats one of its parts (the pieces between ": " and line breaks,
/// past a few characters): wgpu's text and its `source()` chain say the same causes.
fn assert_each_cause_once(message: &str) {
    assert!(!message.contains('\n'), "one line: {message}");
    let parts: Vec<&str> = message
        .split(": ")
        .map(str::trim)
        .filter(|p| p.len() > 12)
        .collect();
    for (i, part) in parts.iter().enumerate() {
        assert!(
            !parts[i + 1..].iter().any(|later| later.contains(part)),
            "{part:?} said twice in: {message}"
        );
    }
}

#[gpu_test]
fn a_device_refusal_states_its_cause_once() {
    let ctx = context();
    let a = ctx.zeros::<u8>(&[64]).unwrap();
    let scope = ctx.device().push_error_scope(wgpu::ErrorFilter::Validation);
    let mut encoder = ctx.device().create_command_encoder(&Default::default());
    encoder.copy_buffer_to_buffer(
        a.buffer(),
        a.byte_offset(),
        a.buffer(),
        a.byte_offset() + 8,
        4,
    );
    let commands = encoder.finish();
    assert!(pollster::block_on(scope.pop()).is_some());
    let err = ctx.raw_submit([commands], &[&a]).unwrap_err();
    let message = err.to_string();
    assert!(
        message.starts_with("GPU device error while submitting command buffers (raw_submit): "),
        "{message}"
    );
    assert!(message.contains("same buffer"), "{message}");
    assert_each_cause_once(&message);
}

#[gpu_test]
fn grids_take_the_integers_users_hold_and_refuse_a_negative_count() {
    let ctx = context();
    let k = ctx.kernel(ADD, "main").unwrap();
    let len: usize = 130;
    let mut a = ctx.device_put(&vec![1u32; len], &[len]).unwrap();
    // A usize length, a u32 count, a bare literal, an i64: no casts.
    let rows: u32 = 130;
    ctx.launch(&k)
        .params(&1u32)
        .arg_mut(&mut a)
        .grid_for(len)
        .run()
        .unwrap();
    ctx.launch(&k)
        .params(&1u32)
        .arg_mut(&mut a)
        .grid_for(rows)
        .run()
        .unwrap();
    ctx.launch(&k)
        .params(&1u32)
        .arg_mut(&mut a)
        .grid_for(130)
        .run()
        .unwrap();
    ctx.launch(&k)
        .params(&1u32)
        .arg_mut(&mut a)
        .grid_linear(130i64)
        .run()
        .unwrap();
    assert_eq!(ctx.device_get(&a).unwrap(), vec![5; len]);
    for refused in [
        ctx.launch(&k)
            .params(&1u32)
            .arg_mut(&mut a)
            .grid_for(-1)
            .run(),
        ctx.launch(&k)
            .params(&1u32)
            .arg_mut(&mut a)
            .grid_linear(-5isize)
            .run(),
    ] {
        let error = refused.unwrap_err();
        assert!(
            matches!(&error, Error::KernelArgument { binding, .. } if binding == "the grid"),
            "{error:?}"
        );
        assert!(error.to_string().contains("0 or more"), "{error}");
    }
    assert_eq!(ctx.device_get(&a).unwrap(), vec![5; len], "nothing ran");
}

/// A blank label would name no row of `kernel_times`: refused as a compile error naming why;
/// the same source under a real label compiles.
#[gpu_test]
fn a_blank_kernel_label_is_refused() {
    let ctx = context();
    for blank in ["", "  ", "\t"] {
        let refused = ctx
            .kernel_with(KernelDesc::wgsl(ADD, "main").label(blank))
            .unwrap_err();
        match &refused {
            Error::KernelCompile { kernel, message } => {
                // Named as the unlabelled kernel is, not by the blank.
                let unlabelled = ctx.kernel_with(KernelDesc::wgsl(ADD, "main")).unwrap();
                assert_eq!(kernel, unlabelled.name());
                assert!(kernel.starts_with("main#"), "{kernel}");
                assert!(message.contains("label is blank"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }
    let named = ctx
        .kernel_with(KernelDesc::wgsl(ADD, "main").label("add"))
        .unwrap();
    assert_eq!(named.name(), "add");
}

/// On wgpu's GL backend naga writes buffers as GLSL blocks without WGSL's offsets: a kernel
/// laid out with `@align` would read other bytes there, so it is refused before it compiles;
/// the same layout spelled with padding members runs alike everywhere.
#[gpu_test]
fn explicit_wgsl_offsets_run_as_wgsl_lays_them_out_or_are_refused_on_gl() {
    let ctx = context();
    let kernel = |params: &str| {
        ctx.kernel(
            &format!(
                "struct P {{ {params} }}
                @group(0) @binding(0) var<uniform> p: P;
                @group(0) @binding(1) var<storage, read_write> y: array<u32>;
                @compute @workgroup_size(1) fn main() {{ y[0] = p.a; y[1] = p.b; }}"
            ),
            "main",
        )
    };
    // The block's words are 10, 11, 12, ...: `b` reads 14 at byte 16.
    fn run<const WORDS: usize>(ctx: &gpu_arena::Context, k: &gpu_arena::Kernel) -> Vec<u32> {
        let mut y = ctx.zeros::<u32>(&[2]).unwrap();
        let words: [u32; WORDS] = std::array::from_fn(|i| i as u32 + 10);
        ctx.launch(k)
            .arg_mut(&mut y)
            .params(&words)
            .grid_for(1)
            .run()
            .unwrap();
        ctx.device_get(&y).unwrap()
    }
    let padded = kernel("a: u32, pad0: u32, pad1: u32, pad2: u32, b: u32").unwrap();
    assert_eq!(run::<5>(&ctx, &padded), [10, 14]);
    let aligned = kernel("a: u32, @align(16) b: u32");
    if ctx.adapter_info().backend == wgpu::Backend::Gl {
        let Err(Error::KernelCompile { message, .. }) = aligned else {
            panic!("GL would read `p.b` at byte 4: {aligned:?}")
        };
        assert!(
            message.contains("`p.b`") && message.contains("GL backend"),
            "{message}"
        );
    } else {
        // WGSL rounds the block up to its 16-byte alignment.
        assert_eq!(run::<8>(&ctx, &aligned.unwrap()), [10, 14]);
    }
}

/// Immediates too: wgpu's GL backend sets them member by member at std430's places, so a block
/// whose `@align` or `@size` moves a member is refused there (it read `p.b` at byte 4) and runs
/// as WGSL lays it out elsewhere.
#[gpu_test]
fn immediates_moved_by_align_or_size_run_as_wgsl_lays_them_out_or_are_refused_on_gl() {
    let ctx = context();
    if !ctx.device().features().contains(wgpu::Features::IMMEDIATES) {
        harness::skip(harness::Need::Immediates);
        return;
    }
    let gl = ctx.adapter_info().backend == wgpu::Backend::Gl;
    // The block's words are 10, 11, 12, ...: `b` reads 14 at byte 16.
    fn check<const WORDS: usize>(ctx: &gpu_arena::Context, gl: bool, members: &str) {
        let kernel = ctx.kernel(
            &format!(
                "struct P {{ {members} }}
                var<immediate> p: P;
                @group(0) @binding(0) var<storage, read_write> y: array<u32>;
                @compute @workgroup_size(1) fn main() {{ y[0] = p.a; y[1] = p.b; }}"
            ),
            "main",
        );
        if gl {
            let Err(Error::KernelCompile { message, .. }) = kernel else {
                panic!("GL would read `p.b` at byte 4 ({members}): {kernel:?}")
            };
            assert!(
                message.contains("`p.b`") && message.contains("GL backend"),
                "{message}"
            );
            return;
        }
        let mut y = ctx.zeros::<u32>(&[2]).unwrap();
        let words: [u32; WORDS] = std::array::from_fn(|i| i as u32 + 10);
        let launch = ctx.launch(&kernel.unwrap()).arg_mut(&mut y).params(&words);
        launch.grid_for(1).run().unwrap();
        assert_eq!(ctx.device_get(&y).unwrap(), [10, 14], "{members}");
    }
    check::<8>(&ctx, gl, "a: u32, @align(16) b: u32");
    check::<5>(&ctx, gl, "@size(16) a: u32, b: u32");
    // A struct with `@align` members inside the block: naga places it by its members' own
    // alignment on every backend, as in a buffer.
    let nested = ctx.kernel(
        "struct Q { x: u32, @align(16) y: u32 }
        struct P { a: u32, q: Q }
        var<immediate> p: P;
        @group(0) @binding(0) var<storage, read_write> out: array<u32>;
        @compute @workgroup_size(1) fn main() { out[0] = p.q.y; }",
        "main",
    );
    let Err(Error::KernelCompile { message, .. }) = nested else {
        panic!("a nested @align struct in an immediate block must be refused: {nested:?}")
    };
    assert!(message.contains("`p.q` is struct `Q`"), "{message}");
}

/// Layouts naga would not keep are refused on every backend (a struct with `@align` inside
/// another struct; a `matCx2` in a struct nested in the uniform, whose SPIR-V loses the
/// device); the forms around them that naga keeps run, read where WGSL lays them out.
#[gpu_test]
fn layouts_naga_would_move_are_refused_and_their_neighbours_run_as_wgsl_lays_them_out() {
    let ctx = context();
    let gl = ctx.adapter_info().backend == wgpu::Backend::Gl;
    let refused = |wgsl: &str, place: &str| match ctx.kernel(wgsl, "main") {
        Err(Error::KernelCompile { message, .. }) => {
            assert!(message.contains(&format!("`{place}`")), "{message}")
        }
        other => panic!("{place} must be refused: {other:?}"),
    };
    fn run<const WORDS: usize>(ctx: &gpu_arena::Context, wgsl: &str, params: bool) -> Vec<u32> {
        let k = ctx.kernel(wgsl, "main").unwrap();
        let words: [u32; WORDS] = std::array::from_fn(|i| i as u32 + 10);
        let mut out = ctx.zeros::<u32>(&[2]).unwrap();
        match params {
            true => ctx
                .launch(&k)
                .arg_mut(&mut out)
                .params(&words)
                .grid_for(1)
                .run(),
            false => {
                let input = ctx.device_put(&words, &[WORDS]).unwrap();
                ctx.launch(&k)
                    .arg(&input)
                    .arg_mut(&mut out)
                    .grid_for(1)
                    .run()
            }
        }
        .unwrap();
        ctx.device_get(&out).unwrap()
    }
    let storage = |structs: &str, read: &str| {
        format!(
            "{structs} struct O {{ h: u32, s: A }}
            @group(0) @binding(0) var<storage, read> inp: O;
            @group(0) @binding(1) var<storage, read_write> out: array<u32>;
            @compute @workgroup_size(1) fn main() {{ out[0] = inp.h; out[1] = {read}; }}"
        )
    };
    // WGSL puts `s` at 16 (A's alignment is 16); naga would read it at 4.
    refused(
        &storage("struct A { a: u32, @align(16) b: u32 }", "inp.s.b"),
        "inp.s",
    );
    let padded = storage("struct A { a: u32, p0: u32, p1: u32, b: u32 }", "inp.s.b");
    assert_eq!(run::<5>(&ctx, &padded, false), [10, 14]);
    // `@size` keeps the struct's alignment: naga places it as WGSL does.
    let sized = storage("struct A { @size(16) a: u32, b: u32 }", "inp.s.b");
    if !gl {
        assert_eq!(run::<6>(&ctx, &sized, false), [10, 15]);
    }
    let uniform = |structs: &str, read: &str| {
        format!(
            "{structs}
            @group(0) @binding(0) var<uniform> p: P;
            @group(0) @binding(1) var<storage, read_write> out: array<u32>;
            @compute @workgroup_size(1) fn main() {{ out[0] = p.x.y; out[1] = bitcast<u32>({read}); }}"
        )
    };
    let nested = "struct In { m: mat2x2<f32> } struct P { x: vec4<u32>, i: In }";
    refused(&uniform(nested, "p.i.m[1][0]"), "p.i.m");
    if !gl {
        // An array's element struct, and an array of matrices in a nested struct, are kept.
        let in_array = "struct In { m: mat2x2<f32> } struct P { x: vec4<u32>, a: array<In, 2> }";
        assert_eq!(
            run::<12>(&ctx, &uniform(in_array, "p.a[1].m[1][0]"), true),
            [11, 20]
        );
        let matrices = "struct In { m: array<mat2x2<f32>, 2> } struct P { x: vec4<u32>, i: In }";
        assert_eq!(
            run::<12>(&ctx, &uniform(matrices, "p.i.m[1][0].y"), true),
            [11, 19]
        );
    }
}

/// A refused layout is refused on every thread that asks for it at once, and each time it is
/// asked for again; threads that compile and run a good kernel on the same context meanwhile
/// are not disturbed.
#[gpu_test]
fn a_refused_layout_is_refused_on_every_thread_and_the_context_keeps_running() {
    let ctx = context();
    let refused = "struct A { a: u32, @align(16) b: u32 } struct O { h: u32, s: A }
        @group(0) @binding(0) var<storage, read> inp: O;
        @group(0) @binding(1) var<storage, read_write> out: array<u32>;
        @compute @workgroup_size(1) fn main() { out[0] = inp.s.b; }";
    let handles: Vec<_> = (0..4u32)
        .map(|i| {
            let ctx = ctx.clone();
            std::thread::spawn(move || {
                for _ in 0..3 {
                    match ctx.kernel(refused, "main") {
                        Err(Error::KernelCompile { message, .. }) => {
                            assert!(message.contains("`inp.s`"), "{message}")
                        }
                        other => panic!("thread {i}: must be refused: {other:?}"),
                    }
                }
                let add = ctx.kernel(ADD, "main").unwrap();
                let mut a = ctx.device_put(&[i; 100], &[100]).unwrap();
                ctx.launch(&add)
                    .params(&(i + 1))
                    .arg_mut(&mut a)
                    .grid_for(100)
                    .run()
                    .unwrap();
                ctx.device_get(&a).unwrap()
            })
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        let i = i as u32;
        assert_eq!(h.join().unwrap(), vec![2 * i + 1; 100]);
    }
}

/// Refusals of a launch's grid and parameters say what to do, not only what is wrong.
#[gpu_test]
fn grid_and_parameter_refusals_say_what_to_do() {
    let ctx = context();
    let add = ctx.kernel(ADD, "main").unwrap();
    let no_params = ctx
        .kernel(
            "@group(0) @binding(0) var<storage, read_write> a: array<u32>;
            @compute @workgroup_size(1) fn main() { a[0] = 1u; }",
            "main",
        )
        .unwrap();
    let mut a = ctx.device_put(&[5u32; 64], &[64]).unwrap();
    let max = ctx.limits().max_compute_workgroups_per_dimension;
    let reason = |result: gpu_arena::Result<()>| match result {
        Err(Error::KernelArgument { reason, .. }) => reason,
        other => panic!("{other:?}"),
    };
    let too_wide = reason(
        ctx.launch(&add)
            .params(&1u32)
            .arg_mut(&mut a)
            .grid([max + 1, 1, 1])
            .run(),
    );
    assert!(too_wide.contains(".grid_linear(n)"), "{too_wide}");
    let items = u64::from(max) * u64::from(max) * 64 + 1;
    let too_many = reason(
        ctx.launch(&add)
            .params(&1u32)
            .arg_mut(&mut a)
            .grid_linear(items)
            .run(),
    );
    assert!(too_many.contains("several parts"), "{too_many}");
    let unread = reason(
        ctx.launch(&no_params)
            .params(&1u32)
            .arg_mut(&mut a)
            .grid([1, 1, 1])
            .run(),
    );
    assert!(unread.contains("drop .params(..)"), "{unread}");
    assert_eq!(ctx.device_get(&a).unwrap(), [5; 64], "nothing ran");
}
