//! What `kernel()` and a launch refuse, and what they never do, on the test machine's GPU
//! (lavapipe in CI) with validation on: every device limit a kernel can exceed refused at
//! `kernel()` with the limit's name and value; hostile sources (deep nesting, damaged SPIR-V)
//! refused without an abort or a panic; override constants by name or id, checked, compiled
//! once per set; views bound exactly; element types checked, and `bitcast` to say otherwise.

use crate::harness::context;
use gpu_arena::{Context, Error, KernelDesc};

fn compile_error(ctx: &Context, source: &str) -> String {
    match ctx.kernel(source, "main") {
        Ok(_) => panic!("compiled: {source:.200}"),
        Err(err) => {
            assert!(matches!(err, Error::KernelCompile { .. }), "{err}");
            err.to_string()
        }
    }
}

fn assert_names_limit(message: &str, limit: &str, value: impl std::fmt::Display) {
    let value = format!("{limit} ({value})");
    assert!(
        message.contains(&value),
        "{message:?} should name {value:?}"
    );
}

// ---- a view's binding never reaches past the view ----

/// `struct R { head: u32, data: array<u32> }`: writes `arrayLength` into `head` and 0xFF.. into
/// every element.
const STRUCT_TAIL: &str = r#"
struct R { head: u32, data: array<u32> }
@group(0) @binding(0) var<storage, read_write> r: R;
@compute @workgroup_size(1)
fn main() {
    let n = arrayLength(&r.data);
    r.head = n;
    for (var i = 0u; i < n; i++) { r.data[i] = 0xffffffffu; }
}
"#;

#[gpu_test]
fn a_view_bound_to_a_struct_with_a_runtime_array_never_writes_into_the_next_row() {
    let ctx = context();
    let k = ctx.kernel(STRUCT_TAIL, "main").unwrap();
    let mut rows = ctx.device_put(&[7u8; 34 * 9], &[34, 9]).unwrap();
    // 9 bytes cannot be bound exactly: the binding would be 12 and reach row 1.
    let mut row = rows.view_mut(&[0]).unwrap();
    let err = ctx
        .launch(&k)
        .arg_mut(&mut row)
        .grid([1, 1, 1])
        .run()
        .unwrap_err();
    assert!(matches!(err, Error::KernelArgument { .. }), "{err}");
    assert!(
        err.to_string().contains("not a multiple of 4") && err.to_string().contains("next row"),
        "{err}"
    );
    assert_eq!(
        ctx.device_get(&rows).unwrap(),
        vec![7u8; 34 * 9],
        "nothing ran"
    );
    // The case as reported: row 32 of a [34, 9] array, refused (for its size, or for its
    // offset where the device's storage alignment is above 32 bytes); row 33 stays as it was.
    let mut row = rows.view_mut(&[32]).unwrap();
    let err = ctx
        .launch(&k)
        .arg_mut(&mut row)
        .grid([1, 1, 1])
        .run()
        .unwrap_err();
    assert!(matches!(err, Error::KernelArgument { .. }), "{err}");
    assert_eq!(
        ctx.device_get(&rows).unwrap(),
        vec![7u8; 34 * 9],
        "nothing ran"
    );
    // A 4-byte view is smaller than the struct's 8 bytes: refused too.
    let mut words = ctx.device_put(&[7u32; 8], &[8, 1]).unwrap();
    let mut one = words.view_mut(&[0]).unwrap();
    let err = ctx
        .launch(&k)
        .arg_mut(&mut one)
        .grid([1, 1, 1])
        .run()
        .unwrap_err();
    assert!(
        matches!(&err, Error::KernelArgument { binding, .. }
            if binding == "@binding(0) r: R (read_write)"),
        "{err}"
    );
    assert!(err.to_string().contains("needs 8"), "{err}");
    // Rows of 12 bytes bind exactly: the kernel sees 2 elements, and row 1 is untouched.
    let mut rows = ctx.device_put(&[7u32; 4 * 3], &[4, 3]).unwrap();
    let mut row = rows.view_mut(&[0]).unwrap();
    ctx.launch(&k)
        .arg_mut(&mut row)
        .grid([1, 1, 1])
        .run()
        .unwrap();
    let got = ctx.device_get(&rows).unwrap();
    assert_eq!(&got[..3], [2, u32::MAX, u32::MAX]);
    assert_eq!(&got[3..], [7; 9]);
}

#[gpu_test]
fn a_view_that_is_not_whole_elements_of_a_runtime_array_is_refused_with_the_stride() {
    let ctx = context();
    // vec2<u32> elements: 8 bytes each, after an 8-byte head.
    let k = ctx
        .kernel(
            r#"struct R { head: u32, data: array<vec2<u32>> }
            @group(0) @binding(0) var<storage, read_write> r: R;
            @compute @workgroup_size(1)
            fn main() { r.head = arrayLength(&r.data); }"#,
            "main",
        )
        .unwrap();
    let mut rows = ctx.device_put(&[0u32; 4 * 5], &[4, 5]).unwrap();
    let mut row = rows.view_mut(&[0]).unwrap(); // 20 bytes: 8 + 12
    let err = ctx
        .launch(&k)
        .arg_mut(&mut row)
        .grid([1, 1, 1])
        .run()
        .unwrap_err();
    assert!(
        matches!(&err, Error::KernelArgument { binding, .. }
            if binding == "@binding(0) r: R (read_write)"),
        "{err}"
    );
    assert!(
        err.to_string().contains("8-byte elements") && err.to_string().contains("8 + n × 8"),
        "{err}"
    );
    // The whole array (80 bytes) keeps today's rule: bound inside its own allocation.
    ctx.launch(&k)
        .arg_mut(&mut rows)
        .grid([1, 1, 1])
        .run()
        .unwrap();
    assert_eq!(ctx.device_get(&rows).unwrap()[0], 9);
}

// ---- defects 2, 3 and the sweep: device limits at kernel() ----

#[gpu_test]
fn workgroup_memory_above_max_compute_workgroup_storage_size_is_refused_at_kernel() {
    let ctx = context();
    let limit = ctx.limits().max_compute_workgroup_storage_size;
    let kernel = |words: u32| {
        format!(
            "var<workgroup> w: array<u32, {words}>;
             @group(0) @binding(0) var<storage, read_write> a: array<u32>;
             @compute @workgroup_size(1) fn main() {{ w[0] = 1u; a[0] = w[0]; }}"
        )
    };
    ctx.kernel(&kernel(limit / 4), "main").unwrap();
    for words in [limit / 4 + 1, 524_288 / 4] {
        let err = compile_error(&ctx, &kernel(words));
        assert_names_limit(&err, "max_compute_workgroup_storage_size", limit);
        let rounded = (words * 4).next_multiple_of(16);
        assert!(err.contains(&format!("{rounded} bytes")), "{err}");
    }
    // A size set by an override constant is counted after the override is applied.
    let err = ctx
        .kernel_with(
            KernelDesc::wgsl(
                "override N: u32 = 4;
                 var<workgroup> w: array<u32, N>;
                 @group(0) @binding(0) var<storage, read_write> a: array<u32>;
                 @compute @workgroup_size(1) fn main() { w[0] = 1u; a[0] = w[0]; }",
                "main",
            )
            .constants(&[("N", f64::from(limit / 4 + 1))]),
        )
        .unwrap_err();
    assert_names_limit(
        &err.to_string(),
        "max_compute_workgroup_storage_size",
        limit,
    );
    // Two variables that fit alone and not together; an unused one does not count.
    let half = limit / 8 + 1;
    let err = compile_error(
        &ctx,
        &format!(
            "var<workgroup> a: array<u32, {half}>; var<workgroup> b: array<u32, {half}>;
             @compute @workgroup_size(1) fn main() {{ a[0] = 1u; b[0] = a[0]; }}"
        ),
    );
    assert_names_limit(&err, "max_compute_workgroup_storage_size", limit);
    ctx.kernel(
        &format!(
            "var<workgroup> a: array<u32, {half}>; var<workgroup> unused: array<u32, {half}>;
             @compute @workgroup_size(1) fn main() {{ a[0] = 1u; }}"
        ),
        "main",
    )
    .unwrap();
}

#[gpu_test]
fn a_uniform_block_above_max_uniform_buffer_binding_size_is_refused_at_kernel() {
    let ctx = context();
    let limit = ctx.limits().max_uniform_buffer_binding_size;
    let source = |vec4s: u64| {
        format!(
            "struct P {{ v: array<vec4<u32>, {vec4s}> }}
             @group(0) @binding(0) var<uniform> p: P;
             @group(0) @binding(1) var<storage, read_write> a: array<u32>;
             @compute @workgroup_size(1) fn main() {{ a[0] = p.v[0].x; }}"
        )
    };
    let err = compile_error(&ctx, &source(limit / 16 + 1));
    assert_names_limit(&err, "max_uniform_buffer_binding_size", limit);
    if ctx.device().features().contains(wgpu::Features::IMMEDIATES) {
        let limit = ctx.limits().max_immediate_size;
        let err = compile_error(
            &ctx,
            &format!(
                "var<immediate> p: array<u32, {}>;
                 @group(0) @binding(0) var<storage, read_write> a: array<u32>;
                 @compute @workgroup_size(1) fn main() {{ a[0] = p[0]; }}",
                limit / 4 + 1
            ),
        );
        assert!(
            err.contains(&format!("max_immediate_size is {limit}")),
            "{err}"
        );
    }
}

#[gpu_test]
fn workgroup_sizes_and_invocations_above_the_device_limits_are_refused_at_kernel() {
    let ctx = context();
    let l = ctx.limits().clone();
    let source = |x: u32, y: u32, z: u32| {
        format!(
            "@group(0) @binding(0) var<storage, read_write> a: array<u32>;
             @compute @workgroup_size({x}, {y}, {z}) fn main() {{ a[0] = 1u; }}"
        )
    };
    let x = l.max_compute_workgroup_size_x;
    let err = compile_error(&ctx, &source(x + 1, 1, 1));
    assert_names_limit(&err, "max_compute_workgroup_size_x", x);
    let y = l.max_compute_workgroup_size_y;
    let err = compile_error(&ctx, &source(1, y + 1, 1));
    assert_names_limit(&err, "max_compute_workgroup_size_y", y);
    let z = l.max_compute_workgroup_size_z;
    let err = compile_error(&ctx, &source(1, 1, z + 1));
    assert_names_limit(&err, "max_compute_workgroup_size_z", z);
    // Each axis within its limit, the product one above the invocation limit.
    let invocations = l.max_compute_invocations_per_workgroup;
    let (wx, wy) = (x.min(invocations), invocations / x.min(invocations) + 1);
    if wy <= y {
        let err = compile_error(&ctx, &source(wx, wy, 1));
        assert_names_limit(&err, "max_compute_invocations_per_workgroup", invocations);
    }
    // And an override that sets the size is checked after it is applied.
    let err = workgroup_override_error(&ctx, f64::from(x + 1));
    assert_names_limit(&err, "max_compute_workgroup_size_x", x);
}

/// The refusal of a kernel whose `@workgroup_size(WG)` an override constant sets to `wg`.
fn workgroup_override_error(ctx: &gpu_arena::Context, wg: f64) -> String {
    ctx.kernel_with(
        KernelDesc::wgsl(
            "override WG: u32 = 1;
             @group(0) @binding(0) var<storage, read_write> a: array<u32>;
             @compute @workgroup_size(WG) fn main() { a[0] = 1u; }",
            "main",
        )
        .constants(&[("WG", wg)]),
    )
    .map_or_else(
        |err| {
            assert!(matches!(err, Error::KernelCompile { .. }), "{err}");
            err.to_string()
        },
        |_| panic!("a workgroup size of {wg} compiled"),
    )
}

#[gpu_test]
fn a_workgroup_size_beyond_what_any_device_runs_names_the_device_limits_written_or_overridden() {
    // Above naga's own range (16384 per axis) naga refuses the module before the device's
    // limits are compared: the refusal still names them, whether the source declares the
    // size or an override constant sets it.
    let ctx = context();
    let l = ctx.limits().clone();
    let limits = format!(
        "max_compute_workgroup_size_x/y/z ({}, {}, {}), and their product at most its \
         max_compute_invocations_per_workgroup ({})",
        l.max_compute_workgroup_size_x,
        l.max_compute_workgroup_size_y,
        l.max_compute_workgroup_size_z,
        l.max_compute_invocations_per_workgroup
    );
    let declared = compile_error(
        &ctx,
        "@group(0) @binding(0) var<storage, read_write> a: array<u32>;
         @compute @workgroup_size(100000) fn main() { a[0] = 1u; }",
    );
    assert!(
        declared.contains("@workgroup_size(100000, 1, 1) has an axis of 0 or above 16384"),
        "{declared}"
    );
    assert!(declared.contains(&limits), "{declared}");
    // An axis of 0 written or overridden is out of range the same way.
    for wg in [100000.0, 0.0] {
        let overridden = workgroup_override_error(&ctx, wg);
        assert!(
            overridden.contains(&format!(
                "the @workgroup_size the override constants give (WG = {wg})"
            )),
            "{wg}: {overridden}"
        );
        assert!(overridden.contains(&limits), "{wg}: {overridden}");
    }
    let declared = compile_error(
        &ctx,
        "@group(0) @binding(0) var<storage, read_write> a: array<u32>;
         @compute @workgroup_size(0) fn main() { a[0] = 1u; }",
    );
    assert!(declared.contains(&limits), "{declared}");
}

#[gpu_test]
fn more_storage_bindings_than_the_stage_allows_are_refused_at_kernel() {
    let ctx = context();
    let l = ctx.limits().clone();
    let per_stage = l.max_storage_buffers_per_shader_stage;
    let bindings = |n: u32, first: u32| {
        let mut source = String::new();
        let mut body = String::new();
        for i in 0..n {
            source += &format!(
                "@group(0) @binding({}) var<storage, read_write> a{i}: array<u32>;\n",
                first + i
            );
            body += &format!("a{i}[0] = 1u;");
        }
        source + &format!("@compute @workgroup_size(1) fn main() {{ {body} }}")
    };
    if per_stage < l.max_bindings_per_bind_group {
        let err = compile_error(&ctx, &bindings(per_stage + 1, 0));
        assert_names_limit(&err, "max_storage_buffers_per_shader_stage", per_stage);
    }
    let err = compile_error(&ctx, &bindings(1, l.max_bindings_per_bind_group));
    assert_names_binding_bound(&err, l.max_bindings_per_bind_group);
}

/// `message` names the bound binding numbers stop at: the device's, or gpu-arena's where that
/// is lower (and then not as the device's).
fn assert_names_binding_bound(message: &str, device_bound: u32) {
    let ours = gpu_arena::kernels::MAX_BINDING_NUMBERS;
    if device_bound > ours {
        assert_names_limit(message, "kernels::MAX_BINDING_NUMBERS", ours);
        assert!(
            message.contains("exceeds gpu-arena's bound on binding numbers"),
            "{message}"
        );
    } else {
        assert_names_limit(
            message,
            "this device's max_bindings_per_bind_group",
            device_bound,
        );
    }
}

#[gpu_test]
fn binding_numbers_stop_at_the_devices_bound_or_gpu_arenas_whichever_is_lower() {
    // wgpu's GL backend reports no bound (u32::MAX) and allocates a table as long as the
    // largest binding number: @binding(1000000000) took a gigabyte and a second.
    let mut adapters = vec![context()];
    adapters.extend(crate::harness::gl_context());
    for ctx in adapters {
        let backend = ctx.adapter_info().backend;
        let device_bound = ctx.limits().max_bindings_per_bind_group;
        let bound = device_bound.min(gpu_arena::kernels::MAX_BINDING_NUMBERS);
        let source = |n: u32| {
            format!(
                "@group(0) @binding({n}) var<storage, read_write> a: array<u32>;
                 @compute @workgroup_size(1) fn main() {{ a[0] = a[0] + 1u; }}"
            )
        };
        let highest = ctx.kernel(&source(bound - 1), "main").unwrap();
        let mut a = ctx.device_put(&[1u32], &[1]).unwrap();
        ctx.launch(&highest)
            .arg_mut(&mut a)
            .grid([1, 1, 1])
            .run()
            .unwrap();
        assert_eq!(ctx.device_get(&a).unwrap(), [2], "{backend:?}");
        for number in [bound, 1_000_000_000, u32::MAX - 1] {
            let err = compile_error(&ctx, &source(number));
            assert_names_binding_bound(&err, device_bound);
        }
    }
}

#[gpu_test]
fn a_grid_above_max_compute_workgroups_per_dimension_is_refused_before_anything_runs() {
    let ctx = context();
    let k = ctx
        .kernel(
            "@group(0) @binding(0) var<storage, read_write> a: array<u32>;
             @compute @workgroup_size(1) fn main() { a[0] = a[0] + 1u; }",
            "main",
        )
        .unwrap();
    let max = ctx.limits().max_compute_workgroups_per_dimension;
    let mut a = ctx.device_put(&[0u32; 4], &[4]).unwrap();
    for grid in [[max + 1, 1, 1], [1, max + 1, 1], [1, 1, max + 1]] {
        let err = ctx.launch(&k).arg_mut(&mut a).grid(grid).run().unwrap_err();
        assert_names_limit(
            &err.to_string(),
            "max_compute_workgroups_per_dimension",
            max,
        );
    }
    assert_eq!(ctx.device_get(&a).unwrap(), [0; 4]);
}

// ---- defects 4 and 5: hostile sources ----

#[gpu_test]
fn deeply_nested_wgsl_is_refused_without_aborting_the_process() {
    let ctx = context();
    for n in [20_000usize, 200_000] {
        for source in [
            format!(
                "@compute @workgroup_size(1) fn main() {{ var x = 0u; x = x{}; }}",
                " + 1u".repeat(n)
            ),
            format!(
                "@compute @workgroup_size(1) fn main() {{ var x = 0u; x = {}x; }}",
                "~".repeat(n)
            ),
            format!(
                "@compute @workgroup_size(1) fn main() {{ var x = 0u; x = {}x{}; }}",
                "(".repeat(n),
                ")".repeat(n)
            ),
            format!(
                "@compute @workgroup_size(1) fn main() {{ var x = true; x = x{}; }}",
                " && x".repeat(n)
            ),
            format!(
                "const C = 0u{}; @compute @workgroup_size(1) fn main() {{ }}",
                " + 1u".repeat(n)
            ),
            format!(
                "@compute @workgroup_size(1) fn main() {{ var x = 0u; x = {}x{}; }}",
                "min(1u, ".repeat(n),
                ")".repeat(n)
            ),
            format!("alias T = {}u32{};", "array<".repeat(n), ", 1>".repeat(n)),
        ] {
            let err = compile_error(&ctx, &source);
            assert!(
                err.contains(&gpu_arena::kernels::MAX_WGSL_EXPRESSION_DEPTH.to_string())
                    && err.contains("let"),
                "{err:.300}"
            );
        }
    }
    // Nested blocks stop at naga's own bound (127 braces), without a crash either.
    for n in [20_000usize, 200_000] {
        let blocks = format!(
            "@compute @workgroup_size(1) fn main() {{ {}{} }}",
            "{".repeat(n),
            "}".repeat(n)
        );
        compile_error(&ctx, &blocks);
    }
    let huge = format!(
        "@compute @workgroup_size(1) fn main() {{ }}{}",
        " ".repeat(gpu_arena::kernels::MAX_WGSL_SOURCE_BYTES)
    );
    assert!(compile_error(&ctx, &huge).contains("bytes"));
}

#[gpu_test]
fn an_entry_point_named_in_more_bytes_than_vulkan_takes_is_refused_and_the_longest_runs() {
    // Vulkan's `pName` (as the validation layer checks it) is at most 256 bytes: one more used
    // to reach the driver, and the layer reported it.
    let ctx = context();
    let limit = gpu_arena::kernels::MAX_ENTRY_POINT_BYTES;
    let source = |name: &str| {
        format!(
            "@group(0) @binding(0) var<storage, read_write> a: array<u32>;
             @compute @workgroup_size(1) fn {name}() {{ a[0] = a[0] + 1u; }}"
        )
    };
    let longest = format!("k{}", "x".repeat(limit - 1));
    let kernel = ctx.kernel(&source(&longest), &longest).unwrap();
    let mut a = ctx.device_put(&[41u32], &[1]).unwrap();
    ctx.launch(&kernel)
        .arg_mut(&mut a)
        .grid([1, 1, 1])
        .run()
        .unwrap();
    assert_eq!(ctx.device_get(&a).unwrap(), [42]);
    let over = format!("k{}", "x".repeat(limit));
    let error = ctx.kernel(&source(&over), &over).unwrap_err();
    assert!(matches!(error, Error::KernelCompile { .. }), "{error}");
    let message = error.to_string();
    assert!(
        message.contains(&format!("{} bytes long", limit + 1)) && message.contains("at most 256"),
        "{message}"
    );
}

#[gpu_test]
fn the_deepest_accepted_wgsl_compiles_and_runs_on_every_adapter_from_a_thread_with_a_small_stack() {
    let depth = gpu_arena::kernels::MAX_WGSL_EXPRESSION_DEPTH - 8;
    let chain = " + 1u".repeat(depth);
    let unary = "~".repeat(depth - 1);
    let source = format!(
        "@group(0) @binding(0) var<storage, read_write> a: array<u32>;
         @compute @workgroup_size(1) fn main() {{ a[0] = a[0]{chain}; a[1] = {unary}a[1]; }}"
    );
    // Every adapter the machine has: the default (Vulkan where a driver is installed) and
    // wgpu's GL backend, where the pipeline is a GLSL translation whose writer recurses once
    // per nesting level.
    let mut adapters = vec![context()];
    if let Some(gl) = crate::harness::gl_context() {
        if gl.adapter_info().backend != adapters[0].adapter_info().backend {
            adapters.push(gl);
        }
    }
    for ctx in adapters {
        let backend = ctx.adapter_info().backend;
        // Parsing and making the pipeline run on the library's own thread, not the caller's
        // 256 KiB one.
        let handle = std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn({
                let ctx = ctx.clone();
                let source = source.clone();
                move || -> gpu_arena::Result<Vec<u32>> {
                    let kernel = ctx.kernel(&source, "main")?;
                    let mut a = ctx.device_put(&[5u32, 0x0F0F_0F0F], &[2])?;
                    ctx.launch(&kernel).arg_mut(&mut a).grid([1, 1, 1]).run()?;
                    ctx.device_get(&a)
                }
            })
            .unwrap();
        let got = handle.join().unwrap().unwrap();
        // An odd count of `~` flips the bits; the chain adds one per level.
        let flipped = if (depth - 1) % 2 == 1 {
            !0x0F0F_0F0Fu32
        } else {
            0x0F0F_0F0F
        };
        assert_eq!(got, vec![5 + depth as u32, flipped], "{backend:?}");
    }
}

/// A valid SPIR-V module with branches, bools, loops and a parameter (from naga's SPIR-V
/// back end).
fn spirv_words() -> Vec<u32> {
    let source = r#"
        struct P { n: u32, flag: u32 }
        @group(0) @binding(0) var<uniform> p: P;
        @group(0) @binding(1) var<storage, read_write> a: array<u32>;
        @compute @workgroup_size(64)
        fn main(@builtin(global_invocation_id) id: vec3<u32>) {
            let on = p.flag != 0u;
            if (id.x < p.n && on) {
                var s = 0u;
                for (var i = 0u; i < 4u; i++) { s += select(i, 2u * i, on); }
                a[id.x] = a[id.x] + s;
            }
        }"#;
    let module = wgpu::naga::front::wgsl::parse_str(source).unwrap();
    let info = wgpu::naga::valid::Validator::new(
        wgpu::naga::valid::ValidationFlags::all(),
        wgpu::naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .unwrap();
    wgpu::naga::back::spv::write_vec(&module, &info, &Default::default(), None).unwrap()
}

#[gpu_test]
fn damaged_spirv_is_a_compile_error_never_a_panic_and_the_kernel_lock_survives() {
    let ctx = context();
    let words = spirv_words();
    let mut refused = 0;
    // Deterministic mutations: a bit flipped, a word set small, a word zeroed, two swapped.
    for i in 0..480usize {
        let mut damaged = words.clone();
        let at = 5 + (i * 7919) % (damaged.len() - 5);
        match i % 4 {
            0 => damaged[at] ^= 1 << (i % 32),
            1 => damaged[at] = (i % 64) as u32,
            2 => damaged[at] = 0,
            _ => damaged.swap(at, 5 + (at * 31) % (words.len() - 5)),
        }
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            ctx.kernel_with(KernelDesc::spirv(&damaged, "main"))
        }));
        match result.expect("no panic reaches the caller") {
            Ok(_) => {}
            Err(err) => {
                assert!(matches!(err, Error::KernelCompile { .. }), "{err}");
                refused += 1;
            }
        }
    }
    assert!(refused > 100, "most damage is refused ({refused})");
    // Truncated modules, and an empty one.
    for len in [0, 1, 5, 6, words.len() / 2, words.len() - 1] {
        let err = ctx
            .kernel_with(KernelDesc::spirv(&words[..len], "main"))
            .unwrap_err();
        assert!(matches!(err, Error::KernelCompile { .. }), "{err}");
    }
    // The lock is not poisoned: a good kernel still compiles and runs.
    let k = ctx.kernel_with(KernelDesc::spirv(&words, "main")).unwrap();
    let mut a = ctx.device_put(&[1u32; 4], &[4]).unwrap();
    ctx.launch(&k)
        .arg_mut(&mut a)
        .params(&[4u32, 1])
        .grid_for(4)
        .run()
        .unwrap();
    assert_eq!(ctx.device_get(&a).unwrap(), [13; 4]);
}

#[gpu_test]
fn hostile_sources_on_two_threads_leave_a_third_thread_s_launches_running() {
    let ctx = context();
    let add = ctx
        .kernel(
            "@group(0) @binding(0) var<storage, read_write> a: array<u32>;
             @compute @workgroup_size(64) fn main(@builtin(global_invocation_id) i: vec3<u32>) {
                 if (i.x < arrayLength(&a)) { a[i.x] = a[i.x] + 1u; } }",
            "main",
        )
        .unwrap();
    let mut a = ctx.device_put(&[0u32; 256], &[256]).unwrap();
    let words = spirv_words();
    std::thread::scope(|s| {
        for t in 0..2usize {
            let ctx = ctx.clone();
            let words = words.clone();
            s.spawn(move || {
                for i in 0..40usize {
                    let deep = format!("fn f() {{ var x = {}0u; }}", "~".repeat(30_000 + i));
                    assert!(ctx.kernel(&deep, "main").is_err());
                    let mut damaged = words.clone();
                    let at = 5 + (i * 131 + t * 17) % (damaged.len() - 5);
                    damaged[at] ^= 0x8000_0001;
                    let _ = ctx.kernel_with(KernelDesc::spirv(&damaged, "main"));
                }
            });
        }
        for _ in 0..20 {
            ctx.launch(&add)
                .arg_mut(&mut a)
                .grid_for(256)
                .run()
                .unwrap();
        }
    });
    assert_eq!(ctx.device_get(&a).unwrap(), vec![20; 256]);
}

// ---- defects 6, 7, 8: override constants and labels ----

const SCALED: &str = r#"
@id(7) override SCALE: f32 = 1.0;
override OFFSET: u32 = 0u;
override ON: bool = true;
@group(0) @binding(0) var<storage, read_write> a: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) i: vec3<u32>) {
    if (ON && i.x < arrayLength(&a)) { a[i.x] = a[i.x] * SCALE + f32(OFFSET); }
}
"#;

fn run_scaled(ctx: &Context, constants: &[(&str, f64)]) -> Vec<f32> {
    let k = ctx
        .kernel_with(KernelDesc::wgsl(SCALED, "main").constants(constants))
        .unwrap();
    let mut a = ctx.device_put(&[2.0f32; 4], &[4]).unwrap();
    ctx.launch(&k).arg_mut(&mut a).grid_for(4).run().unwrap();
    ctx.device_get(&a).unwrap()
}

#[gpu_test]
fn an_override_with_an_id_is_set_by_its_name_or_its_id() {
    let ctx = context();
    assert_eq!(run_scaled(&ctx, &[("SCALE", 3.0)]), [6.0; 4]);
    assert_eq!(run_scaled(&ctx, &[("7", 5.0)]), [10.0; 4]);
    assert_eq!(run_scaled(&ctx, &[]), [2.0; 4]);
}

#[gpu_test]
fn the_same_override_constants_in_another_order_or_by_id_compile_once() {
    let ctx = context();
    let before = ctx.kernel_cache_stats().pipelines_compiled;
    assert_eq!(
        run_scaled(&ctx, &[("SCALE", 3.0), ("OFFSET", 1.0)]),
        [7.0; 4]
    );
    assert_eq!(
        run_scaled(&ctx, &[("OFFSET", 1.0), ("SCALE", 3.0)]),
        [7.0; 4]
    );
    assert_eq!(run_scaled(&ctx, &[("OFFSET", 1.0), ("7", 3.0)]), [7.0; 4]);
    assert_eq!(run_scaled(&ctx, &[("7", 3.0), ("OFFSET", 1.0)]), [7.0; 4]);
    assert_eq!(ctx.kernel_cache_stats().pipelines_compiled, before + 1);
    // -0.0 and 0.0 set the same value.
    run_scaled(&ctx, &[("SCALE", 0.0)]);
    run_scaled(&ctx, &[("SCALE", -0.0)]);
    assert_eq!(ctx.kernel_cache_stats().pipelines_compiled, before + 2);
}

#[gpu_test]
fn unknown_duplicate_non_finite_fractional_and_out_of_range_constants_are_refused() {
    let ctx = context();
    let refuse = |constants: &[(&str, f64)], parts: &[&str]| {
        let err = ctx
            .kernel_with(KernelDesc::wgsl(SCALED, "main").constants(constants))
            .unwrap_err();
        assert!(matches!(err, Error::KernelCompile { .. }), "{err}");
        for part in parts {
            assert!(
                err.to_string().contains(part),
                "{err} should contain {part:?}"
            );
        }
    };
    refuse(&[("SCAL", 1.0)], &["\"SCAL\"", "SCALE (@id(7))", "OFFSET"]);
    refuse(&[("8", 1.0)], &["\"8\""]);
    refuse(&[("SCALE", 1.0), ("SCALE", 2.0)], &["twice"]);
    refuse(&[("SCALE", 1.0), ("7", 1.0)], &["twice", "SCALE"]);
    refuse(&[("SCALE", f64::NAN)], &["finite"]);
    refuse(&[("SCALE", f64::INFINITY)], &["finite"]);
    refuse(&[("SCALE", 1e39)], &["range of f32"]);
    refuse(&[("OFFSET", 1.5)], &["whole numbers", "u32"]);
    refuse(&[("OFFSET", -1.0)], &["range of u32"]);
    refuse(&[("OFFSET", 4_294_967_296.0)], &["range of u32"]);
    refuse(&[("ON", 2.0)], &["range of bool"]);
    assert_eq!(
        run_scaled(&ctx, &[("OFFSET", 4_294_967_295.0), ("ON", 0.0)]),
        [2.0; 4]
    );
}

#[gpu_test]
fn a_module_asked_for_under_another_label_shares_its_pipeline_under_its_own_name() {
    let ctx = context();
    let first = ctx
        .kernel_with(KernelDesc::wgsl(SCALED, "main").label("first"))
        .unwrap();
    let compiled = ctx.kernel_cache_stats().pipelines_compiled;
    let second = ctx
        .kernel_with(KernelDesc::wgsl(SCALED, "main").label("second"))
        .unwrap();
    assert_eq!(first.name(), "first");
    assert_eq!(second.name(), "second");
    assert_eq!(
        ctx.kernel_cache_stats().pipelines_compiled,
        compiled,
        "compiled once"
    );
    // Unlabelled: the entry point and a hash of the source, stable, distinct per source.
    let plain = ctx.kernel(SCALED, "main").unwrap();
    assert!(plain.name().starts_with("main#"), "{}", plain.name());
    assert_eq!(plain.name().len(), "main#".len() + 8, "{}", plain.name());
    assert_eq!(ctx.kernel(SCALED, "main").unwrap().name(), plain.name());
    let other = ctx
        .kernel(&format!("{SCALED}\n// another source"), "main")
        .unwrap();
    assert_ne!(other.name(), plain.name());
    let mut a = ctx.device_put(&[1u32; 4], &[4]).unwrap();
    let err = ctx
        .launch(&second)
        .arg_mut(&mut a)
        .grid_for(4)
        .run()
        .unwrap_err();
    assert!(
        matches!(&err, Error::KernelArgument { kernel, binding, .. }
            if kernel == "second" && binding == "@binding(0) a: array<f32> (read_write)"),
        "{err}"
    );
    assert!(err.to_string().contains("second"), "{err}");
}

// ---- element types, and bitcast ----

const DOUBLE_F32: &str = r#"
@group(0) @binding(0) var<storage, read_write> a: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) i: vec3<u32>) {
    if (i.x < arrayLength(&a)) { a[i.x] = 2.0 * a[i.x]; }
}
"#;

#[gpu_test]
fn a_u32_array_bound_to_array_f32_is_refused_naming_both_and_bitcast() {
    let ctx = context();
    let k = ctx.kernel(DOUBLE_F32, "main").unwrap();
    let mut bits = ctx.device_put(&[1.5f32.to_bits(); 4], &[4]).unwrap();
    let err = ctx
        .launch(&k)
        .arg_mut(&mut bits)
        .grid_for(4)
        .run()
        .unwrap_err();
    assert!(matches!(err, Error::KernelArgument { .. }), "{err}");
    for part in ["f32", "u32", ".bitcast::<f32>()"] {
        assert!(
            err.to_string().contains(part),
            "{err} should contain {part:?}"
        );
    }
    let mut ints = ctx.device_put(&[3i32; 4], &[4]).unwrap();
    let err = ctx
        .launch(&k)
        .arg_mut(&mut ints)
        .grid_for(4)
        .run()
        .unwrap_err();
    assert!(
        matches!(&err, Error::KernelArgument { binding, .. }
            if binding == "@binding(0) a: array<f32> (read_write)"),
        "{err}"
    );
    assert!(err.to_string().contains("i32"), "{err}");
    // Deliberate: bitcast, no copy, same memory.
    let offset = bits.byte_offset();
    let mut floats = bits.bitcast::<f32>().unwrap();
    assert_eq!(floats.byte_offset(), offset);
    ctx.launch(&k)
        .arg_mut(&mut floats)
        .grid_for(4)
        .run()
        .unwrap();
    let bits = floats.bitcast::<u32>().unwrap();
    assert_eq!(ctx.device_get(&bits).unwrap(), [3.0f32.to_bits(); 4]);
    // Another size is refused, and the array comes back intact.
    let donated = bits.bitcast::<u64>().unwrap_err();
    assert!(
        matches!(
            donated.error,
            Error::Element {
                operation: "DeviceArray::bitcast",
                refusal: gpu_arena::error::ElementRefusal::BitcastSize {
                    from_bytes: 4,
                    to_bytes: 8,
                    ..
                },
            }
        ),
        "{}",
        donated.error
    );
    assert!(
        donated.error.to_string().contains("same size"),
        "{}",
        donated.error
    );
    assert_eq!(
        ctx.device_get(&donated.array).unwrap(),
        [3.0f32.to_bits(); 4]
    );
}

#[gpu_test]
fn fixed_rust_arrays_match_wgsl_vectors_of_the_same_scalar_and_structs_match_by_size() {
    let ctx = context();
    let k = ctx
        .kernel(
            "@group(0) @binding(0) var<storage, read_write> a: array<vec4<f32>>;
             @compute @workgroup_size(1) fn main() { a[0] = a[0] * 2.0; }",
            "main",
        )
        .unwrap();
    let mut v = ctx.device_put(&[[1.0f32, 2.0, 3.0, 4.0]], &[1]).unwrap();
    ctx.launch(&k)
        .arg_mut(&mut v)
        .grid([1, 1, 1])
        .run()
        .unwrap();
    assert_eq!(ctx.device_get(&v).unwrap(), [[2.0, 4.0, 6.0, 8.0]]);
    let mut u = ctx.device_put(&[[1u32; 4]], &[1]).unwrap();
    let err = ctx
        .launch(&k)
        .arg_mut(&mut u)
        .grid([1, 1, 1])
        .run()
        .unwrap_err();
    assert!(
        matches!(&err, Error::KernelArgument { binding, .. }
            if binding == "@binding(0) a: array<vec4<f32>> (read_write)"),
        "{err}"
    );
    assert!(
        err.to_string().contains("[u32; 4]") && err.to_string().contains("vec4<f32>"),
        "{err}"
    );
    #[repr(C)]
    #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
    struct Quad {
        a: u32,
        b: u32,
        c: u32,
        d: u32,
    }
    let mut q = ctx.zeros::<Quad>(&[1]).unwrap();
    ctx.launch(&k)
        .arg_mut(&mut q)
        .grid([1, 1, 1])
        .run()
        .unwrap();
}

#[gpu_test]
fn views_bitcast_without_a_copy_and_writes_through_them_land_in_the_array() {
    let ctx = context();
    let k = ctx.kernel(DOUBLE_F32, "main").unwrap();
    let mut rows = ctx
        .device_put(&[1.0f32.to_bits(); 4 * 64], &[4, 64])
        .unwrap();
    {
        let view = rows.view(&[1]).unwrap().bitcast::<f32>().unwrap();
        assert_eq!(view.shape(), [64]);
        assert!(matches!(
            rows.view(&[1]).unwrap().bitcast::<u16>(),
            Err(Error::Element {
                operation: "ArrayView::bitcast",
                ..
            })
        ));
    }
    let mut row = rows.view_mut(&[1]).unwrap();
    let err = ctx
        .launch(&k)
        .arg_mut(&mut row)
        .grid_for(64)
        .run()
        .unwrap_err();
    assert!(
        matches!(&err, Error::KernelArgument { binding, .. }
            if binding == "@binding(0) a: array<f32> (read_write)"),
        "{err}"
    );
    assert!(err.to_string().contains("bitcast"), "{err}");
    let mut row = rows.view_mut(&[1]).unwrap().bitcast::<f32>().unwrap();
    ctx.launch(&k).arg_mut(&mut row).grid_for(64).run().unwrap();
    let got = ctx.device_get(&rows).unwrap();
    assert!(got[..64].iter().all(|&b| b == 1.0f32.to_bits()));
    assert!(got[64..128].iter().all(|&b| b == 2.0f32.to_bits()));
    assert!(got[128..].iter().all(|&b| b == 1.0f32.to_bits()));
}

#[gpu_test]
fn two_threads_launch_over_bitcast_views_of_one_array_and_refuse_its_bits() {
    let ctx = context();
    let k = ctx
        .kernel(
            "@group(0) @binding(0) var<storage, read> x: array<f32>;
             @group(0) @binding(1) var<storage, read_write> y: array<f32>;
             @compute @workgroup_size(64) fn main(@builtin(global_invocation_id) i: vec3<u32>) {
                 if (i.x < arrayLength(&y)) { y[i.x] = 2.0 * x[i.x]; } }",
            "main",
        )
        .unwrap();
    let bits = ctx
        .device_put(&[1.0f32.to_bits(), 2.0f32.to_bits()].repeat(64), &[2, 64])
        .unwrap();
    let out: Vec<Vec<f32>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2usize)
            .map(|t| {
                let (ctx, k, bits) = (ctx.clone(), k.clone(), &bits);
                s.spawn(move || {
                    let mut mine = ctx.zeros::<f32>(&[64]).unwrap();
                    for _ in 0..10 {
                        let raw = bits.view(&[t]).unwrap();
                        let err = ctx
                            .launch(&k)
                            .arg(&raw)
                            .arg_mut(&mut mine)
                            .grid_for(64)
                            .run()
                            .unwrap_err();
                        assert!(
                            matches!(&err, Error::KernelArgument { binding, .. }
                                if binding == "@binding(0) x: array<f32> (read)"),
                            "{err}"
                        );
                        assert!(err.to_string().contains("bitcast"), "{err}");
                        let row = bits.view(&[t]).unwrap().bitcast::<f32>().unwrap();
                        ctx.launch(&k)
                            .arg(&row)
                            .arg_mut(&mut mine)
                            .grid_for(64)
                            .run()
                            .unwrap();
                    }
                    ctx.device_get(&mine).unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let row: Vec<f32> = [2.0f32, 4.0].repeat(32);
    assert_eq!(out, [row.clone(), row]);
}
