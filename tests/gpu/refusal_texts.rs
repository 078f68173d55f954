//! What refusals say, read as a user reads them: the thing refused, the value given, the limit
//! or the accepted set, and what to do, in words (no Rust debug forms, counts that agree with
//! their number). Kernels' compile and launch refusals, adapters, shards.

use crate::harness::{context, context_with, gl_context, test_config};
use gpu_arena::kernels::KernelDesc;
use gpu_arena::{devices, gather, shard, AdapterSelector, ArenaConfig, Context, Error};

/// The message of a refused `kernel_with(desc)`.
fn compile_message(ctx: &Context, desc: KernelDesc<'_>) -> String {
    match ctx.kernel_with(desc) {
        Err(Error::KernelCompile { message, .. }) => message,
        other => panic!("expected Error::KernelCompile, got {other:?}"),
    }
}

/// A kernel over `y: array<f32>` with `@workgroup_size(size)` (the override `WG` when the size
/// is `WG`) and the overrides `WG: u32 = 64u`, `K: f32` (`@id(7)`) and `N: u32` (no default)
/// declared when asked for.
fn kernel_source(size: &str, no_default: bool) -> String {
    let n = if no_default { "override N: u32;" } else { "" };
    let use_n = if no_default { "y[0] = f32(N);" } else { "" };
    format!(
        "override WG: u32 = 64u; @id(7) override K: f32 = 1.0; {n}
         @group(0) @binding(0) var<storage, read_write> y: array<f32>;
         @compute @workgroup_size({size}) fn main(@builtin(global_invocation_id) i: vec3<u32>) {{
             if (i.x < arrayLength(&y)) {{ y[i.x] = K; }} {use_n}
         }}"
    )
}

#[gpu_test]
fn compile_refusals_name_what_was_given_and_what_to_do() {
    let ctx = context();
    let plain = kernel_source("64", false);
    // An entry point that is not there: the module's listed in words, or none.
    let message = compile_message(&ctx, KernelDesc::wgsl(&plain, "mian"));
    assert!(
        message.ends_with(
            "no @compute entry point named \"mian\"; the module's @compute entry points are main"
        ),
        "{message}"
    );
    let vertex = "@vertex fn vs() -> @builtin(position) vec4<f32> { return vec4<f32>(0.0); }";
    let message = compile_message(&ctx, KernelDesc::wgsl(vertex, "vs"));
    assert!(
        message.ends_with("; the module has no @compute entry point"),
        "{message}"
    );
    // A workgroup size out of naga's range: the size as declared, or the constants that give it.
    for size in ["20000", "0"] {
        let message = compile_message(&ctx, KernelDesc::wgsl(&kernel_source(size, false), "main"));
        assert!(
            message.starts_with(&format!(
                "the kernel's @workgroup_size({size}, 1, 1) has an axis"
            )),
            "{message}"
        );
        assert!(
            message.contains("max_compute_workgroup_size_x"),
            "{message}"
        );
    }
    let by_override = kernel_source("WG", false);
    let message = compile_message(
        &ctx,
        KernelDesc::wgsl(&by_override, "main").constants(&[("WG", 0.0)]),
    );
    assert!(
        message.starts_with("the @workgroup_size the override constants give (WG = 0) has"),
        "{message}"
    );
    // The same override twice: both values, and the other spelling where there is one.
    let message = compile_message(
        &ctx,
        KernelDesc::wgsl(&by_override, "main").constants(&[("WG", 64.0), ("WG", 32.0)]),
    );
    assert!(
        message.starts_with("override constant \"WG\" is given twice (64, then 32)"),
        "{message}"
    );
    let message = compile_message(
        &ctx,
        KernelDesc::wgsl(&plain, "main").constants(&[("K", 2.0), ("7", 3.0)]),
    );
    assert!(
        message.starts_with("override constant \"7\" is given twice (2 as \"K\", then 3)"),
        "{message}"
    );
    // A value out of f32's range, in exponent form.
    let message = compile_message(
        &ctx,
        KernelDesc::wgsl(&plain, "main").constants(&[("K", 1e39)]),
    );
    assert_eq!(
        message,
        "override constant K = 1e39: out of the range of f32 (±3.4028234663852886e38)"
    );
    // An override with no default and no value: what to give, and where.
    let message = compile_message(&ctx, KernelDesc::wgsl(&kernel_source("64", true), "main"));
    assert!(
        message.starts_with(
            "the override constant N has no default value: give it one in KernelDesc::constants"
        ),
        "{message}"
    );
    // A fixed-size array past what naga lays out: the type, the binding and the remedy.
    let huge = "@group(0) @binding(0) var<storage, read_write> y: array<vec4<f32>, 268435455>;
        @compute @workgroup_size(1) fn main() { y[0] = vec4<f32>(1.0); }";
    let message = compile_message(&ctx, KernelDesc::wgsl(huge, "main"));
    assert!(
        message.starts_with(
            "the type `array<vec4<f32>, 268435455>` of `y` is larger than the 2147483647 bytes"
        ) && message.contains("max_storage_buffer_binding_size")
            && message.ends_with(
                "declare a runtime-sized array (array<T>) and bind an array of the length you need"
            ),
        "{message}"
    );
    // More storage bindings than the stage takes: a sentence whose verb agrees.
    let stage = ctx.limits().max_storage_buffers_per_shader_stage;
    let (mut many, mut body) = (String::new(), String::new());
    for i in 0..=stage {
        many += &format!("@group(0) @binding({i}) var<storage, read_write> b{i}: array<f32>;\n");
        body += &format!("b{i}[0] = 1.0;");
    }
    many += &format!("@compute @workgroup_size(1) fn main() {{ {body} }}");
    let message = compile_message(&ctx, KernelDesc::wgsl(&many, "main"));
    assert!(
        message.starts_with(&format!(
            "the number of storage bindings, {}, exceeds this device's \
             max_storage_buffers_per_shader_stage ({stage})",
            stage + 1
        )),
        "{message}"
    );
}

#[gpu_test]
fn tuning_a_constant_also_given_in_the_desc_says_so() {
    let ctx = context();
    let source = kernel_source("WG", false);
    let err = ctx
        .tune_kernel(
            KernelDesc::wgsl(&source, "main").constants(&[("WG", 64.0)]),
            "WG",
            &[32.0, 64.0],
            |_| panic!("nothing is timed"),
        )
        .unwrap_err();
    let Error::KernelCompile { message, .. } = &err else {
        panic!("{err:?}")
    };
    assert!(
        message.starts_with(
            "the override constant `WG` tuned over is also given in the KernelDesc's constants"
        ),
        "{message}"
    );
}

#[gpu_test]
fn launch_refusals_say_what_to_do_and_name_a_foreign_kernel() {
    let ctx = context();
    let fixed = ctx
        .kernel(
            "@group(0) @binding(0) var<storage, read_write> y: array<f32, 64>;
             @compute @workgroup_size(64) fn main(@builtin(global_invocation_id) i: vec3<u32>) {
                 y[i.x] = 1.0;
             }",
            "main",
        )
        .unwrap();
    let mut small = ctx.zeros::<f32>(&[10]).unwrap();
    let err = ctx
        .launch(&fixed)
        .arg_mut(&mut small)
        .grid([1, 1, 1])
        .run()
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.ends_with(
            "@binding(0) y: array<f32, 64> (read_write): the argument has 40 bytes; the \
             binding's type needs 256: pass an array (or a view) of at least 256 bytes"
        ),
        "{text}"
    );
    assert_eq!(ctx.device_get(&small).unwrap(), [0.0; 10], "nothing ran");
    // A kernel of another context is called a kernel, not an array.
    let other = context();
    let foreign = other.kernel(&kernel_source("64", false), "main").unwrap();
    let err = ctx
        .launch(&foreign)
        .arg_mut(&mut small)
        .grid_for(10)
        .run()
        .unwrap_err();
    assert!(matches!(err, Error::ForeignArray { .. }), "{err:?}");
    assert!(
        err.to_string()
            .starts_with("launch (the kernel) got a kernel of context"),
        "{err}"
    );
    // A grid past the device's limit, in words.
    let max = ctx.limits().max_compute_workgroups_per_dimension;
    let kernel = ctx.kernel(&kernel_source("64", false), "main").unwrap();
    let err = ctx
        .launch(&kernel)
        .arg_mut(&mut small)
        .grid([1, max + 1, 1])
        .run()
        .unwrap_err();
    assert!(
        err.to_string()
            .contains(&format!("the grid: 1 × {} × 1 workgroups exceed", max + 1)),
        "{err}"
    );
}

#[gpu_test]
fn adapters_and_shards_are_described_in_words() {
    let config = ArenaConfig {
        adapter: Some(AdapterSelector::Index(99)),
        ..test_config()
    };
    let err = devices(&config).unwrap_err();
    let Error::AdapterNotFound { available, .. } = &err else {
        panic!("{err:?}")
    };
    let listed = devices(&test_config()).unwrap();
    let first = &listed[0];
    let kind = first.device_description().device_kind.name();
    assert!(
        available.starts_with(&format!(
            "0: {} ({}, {kind})",
            first.name(),
            first.backend()
        )),
        "{available}"
    );
    assert!(err.to_string().contains("ArenaConfig::adapter"), "{err}");
    let contexts = [context(), context()];
    let err = shard(&contexts[..1], &[1.0f32, 2.0], &[1]).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("shape [1] holds 1 element but the data has 2"),
        "{err}"
    );
    let shards = shard(&contexts, &[1.0f32, 2.0], &[2]).unwrap();
    let err = gather(&contexts[..1], &shards).unwrap_err();
    assert!(err.to_string().contains("1 context for 2 shards"), "{err}");
    let scalar = contexts[0].device_put(&[1.0f32], &[]).unwrap();
    let err = gather(&contexts[..1], &[scalar]).unwrap_err();
    assert!(
        matches!(&err, Error::Shape { reason, .. } if reason.starts_with("shard 0 has shape []: shards must have rank 1 or more")),
        "{err:?}"
    );
}

#[gpu_test]
fn a_gl_layout_refusal_names_glsls_rules_as_glsl_does() {
    let Some(ctx) = gl_context() else {
        return;
    };
    let message = compile_message(
        &ctx,
        KernelDesc::wgsl(
            "struct P { a: u32, @align(16) b: u32 }
             @group(0) @binding(0) var<uniform> p: P;
             @group(0) @binding(1) var<storage, read_write> y: array<u32>;
             @compute @workgroup_size(1) fn main() { y[0] = p.b; }",
            "main",
        ),
    );
    assert!(
        message.contains("`p.b`") && message.contains("in GLSL's std140"),
        "{message}"
    );
    assert!(
        message.contains("lay the struct out with padding members"),
        "{message}"
    );
}

/// Counts of one byte or one activation read in the singular, in the refusals whose counts the
/// user's own values set: a guard refusal, a launch's parameters, a view, a bitcast, a remat
/// budget.
#[gpu_test]
fn one_byte_and_one_activation_read_in_the_singular() {
    let ctx = context();
    {
        let _guard =
            gpu_arena::TransferGuard::scoped(gpu_arena::TransferGuardLevel::DisallowExplicit);
        let err = ctx.device_put(&[1u8], &[1]).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("Disallowed host-to-device transfer: 1 byte by device_put (explicit)"),
            "{err}"
        );
    }
    let kernel = ctx
        .kernel(
            "struct P { n: u32, a: f32 }
             @group(0) @binding(0) var<uniform> p: P;
             @group(0) @binding(1) var<storage, read_write> y: array<f32>;
             @compute @workgroup_size(64) fn main(@builtin(global_invocation_id) i: vec3<u32>) {
                 if (i.x < p.n) { y[i.x] = p.a; }
             }",
            "main",
        )
        .unwrap();
    let mut y = ctx.zeros::<f32>(&[6]).unwrap();
    let err = ctx
        .launch(&kernel)
        .arg_mut(&mut y)
        .params(&1u8)
        .grid_for(6usize)
        .run()
        .unwrap_err();
    assert!(
        matches!(&err, Error::KernelArgument { reason, .. }
            if reason.starts_with("1 byte given; WGSL lays `P` out in 8 bytes")),
        "{err}"
    );
    let bytes = ctx.device_put(&[1u8, 2, 3], &[3]).unwrap();
    let err = bytes.bitcast::<u16>().unwrap_err();
    assert!(
        err.to_string().contains("u8 is 1 byte and u16 is 2"),
        "{err}"
    );
    let chain = gpu_arena::remat::Chain::new(
        256,
        vec![
            gpu_arena::remat::Layer::new(1 << 20, 1.0),
            gpu_arena::remat::Layer::new(1 << 20, 1.0),
        ],
    )
    .unwrap();
    let err = chain
        .plan(gpu_arena::remat::CheckpointPolicy::Budget(1))
        .unwrap_err();
    let message = err.to_string();
    assert!(
        message.starts_with("no checkpointing of this chain fits in 1 B (1 byte)")
            && message.contains("for a plan keeping 1 activation whose peak is"),
        "{message}"
    );
}

/// A donated array's refusal states its error once when its chain is printed: the error is in
/// its message, so it is not also its source.
#[gpu_test]
fn a_donated_refusal_states_its_error_once_in_a_chain() {
    let ctx = context();
    let a = ctx.device_put(&[1.0f32; 6], &[6]).unwrap();
    let donated = a.reshape(&[4]).unwrap_err();
    let message = donated.error.to_string();
    assert!(std::error::Error::source(&donated).is_none(), "{donated}");
    let chain = format!("{:#}", anyhow::Error::from(donated));
    assert_eq!(
        chain,
        format!("{message} (the donated array was given back)")
    );
}

/// A launch refused for its argument's scalars advises a `bitcast` to a type of the element's
/// size, and following it runs the kernel: `[u8; 4]` for `array<f32>` is to be read as `f32`,
/// `u64` for `array<vec2<f32>>` as `[f32; 2]`.
#[gpu_test]
fn the_bitcast_a_launch_refusal_advises_is_one_that_runs() {
    let ctx = context();
    let kernel = |ty: &str| {
        ctx.kernel(
            &format!(
                "@group(0) @binding(0) var<storage, read_write> x: array<{ty}>;
                 @compute @workgroup_size(1) fn main() {{ x[0] = x[0] + x[0]; }}"
            ),
            "main",
        )
        .unwrap()
    };
    let floats = kernel("f32");
    let mut bytes = ctx.device_put(&[1.5f32.to_le_bytes()], &[1]).unwrap();
    let err = ctx
        .launch(&floats)
        .arg_mut(&mut bytes)
        .grid([1, 1, 1])
        .run();
    let err = err.unwrap_err().to_string();
    assert!(err.contains("with .bitcast::<f32>() (no copy)"), "{err}");
    let mut as_floats = bytes.bitcast::<f32>().unwrap();
    ctx.launch(&floats)
        .arg_mut(&mut as_floats)
        .grid([1, 1, 1])
        .run()
        .unwrap();
    assert_eq!(ctx.device_get(&as_floats).unwrap(), [3.0]);
    let pairs = kernel("vec2<f32>");
    let mut words = ctx.device_put(&[0u64], &[1]).unwrap();
    let err = ctx.launch(&pairs).arg_mut(&mut words).grid([1, 1, 1]).run();
    let err = err.unwrap_err().to_string();
    assert!(
        err.contains("with .bitcast::<[f32; 2]>() (no copy)"),
        "{err}"
    );
    words.bitcast::<[f32; 2]>().unwrap();
}

/// Counts of one element in the refusals of a captured run's input and read and of
/// `device_get_into`, and of one dispatch in the HTML report's kernel times.
#[gpu_test]
fn one_element_and_one_dispatch_read_in_the_singular() {
    let ctx = context_with(ArenaConfig {
        timeline_capacity: 1024,
        ..test_config()
    });
    let double = ctx
        .kernel(
            "@group(0) @binding(0) var<storage, read_write> x: array<f32>;
             @compute @workgroup_size(1) fn main() { x[0] = x[0] * 2.0; }",
            "main",
        )
        .unwrap();
    let mut cap = ctx.capture();
    let (mut row, slot) = cap.input(&[1.0f32], &[1]).unwrap();
    cap.launch(&double)
        .arg_mut(&mut row)
        .grid([1, 1, 1])
        .run()
        .unwrap();
    let read = cap.read(&row).unwrap();
    let mut step = cap.finish().unwrap();
    let err = step
        .run()
        .input(&slot, &[1.0f32, 2.0])
        .submit()
        .unwrap_err();
    assert!(
        err.to_string().ends_with(
            "the input has 2 elements and the captured upload 1: give each run exactly 1 element"
        ),
        "{err}"
    );
    let mut two = [0.0f32; 2];
    let err = step.run().read_into(&read, &mut two).submit().unwrap_err();
    assert!(
        err.to_string().ends_with(
            "the output slice holds 2 elements and the captured read 1: pass a slice of exactly \
             1 element"
        ),
        "{err}"
    );
    let mut out = [0.0f32; 1];
    step.run().read_into(&read, &mut out).submit().unwrap();
    assert_eq!(out, [2.0]);
    let one = ctx.device_put(&[7.0f32], &[1]).unwrap();
    let err = ctx.device_get_into(&one, &mut two).unwrap_err();
    assert!(
        err.to_string().ends_with(
            "the source has 1 element (shape [1]) but the output slice holds 2; pass a slice of \
             exactly 1 element"
        ),
        "{err}"
    );
    drop(step);
    // The one run that went through is the one dispatch timed (where the device times them).
    let Some(times) = ctx.kernel_times().unwrap() else {
        return;
    };
    assert_eq!(times.calls(), 1);
    let timeline = ctx.memory_timeline();
    let html = gpu_arena::report::render_html(&ctx.memory_snapshot(), timeline.as_ref());
    assert!(html.contains(" in 1 dispatch. <code>"), "{html}");
}
