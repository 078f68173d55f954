use std::time::Instant;
fn main() {
    let ctx = gpu_arena::Context::from_env().unwrap();
    let n_bytes: u64 = 60 << 20;
    let src = ctx.zeros::<u32>(&[(n_bytes / 4) as usize]).unwrap();
    let dst = ctx.zeros::<u32>(&[(n_bytes / 4) as usize]).unwrap();
    let variants: Vec<(&str, String, u64)> = vec![
        ("naive vec4 wg256", r#"
@group(0) @binding(0) var<storage, read_write> src: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<u32>>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>) { let i = id.x; if (i < arrayLength(&src)) { dst[i] = src[i]; } }"#.into(), 16),
        ("naive u32 wg256", r#"
@group(0) @binding(0) var<storage, read_write> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>) { let i = id.x; if (i < arrayLength(&src)) { dst[i] = src[i]; } }"#.into(), 4),
        ("naive vec4 wg64", r#"
@group(0) @binding(0) var<storage, read_write> src: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<u32>>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) { let i = id.x; if (i < arrayLength(&src)) { dst[i] = src[i]; } }"#.into(), 16 * 4),
        ("4 vars strided wg256", r#"
@group(0) @binding(0) var<storage, read_write> src: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<u32>>;
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_index) l: u32) {
  let b = g.x * 1024u + l;
  let v0 = src[b]; let v1 = src[b + 256u]; let v2 = src[b + 512u]; let v3 = src[b + 768u];
  dst[b] = v0; dst[b + 256u] = v1; dst[b + 512u] = v2; dst[b + 768u] = v3; }"#.into(), 64),
        ("16 contiguous per lane wg256", r#"
@group(0) @binding(0) var<storage, read_write> src: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<u32>>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
  let b = id.x * 16u;
  for (var k = 0u; k < 16u; k++) { dst[b + k] = src[b + k]; } }"#.into(), 256),
        ("wg-loop 64 per inv strided wg256", r#"
@group(0) @binding(0) var<storage, read_write> src: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<u32>>;
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_index) l: u32) {
  let b = g.x * 256u * 64u + l;
  for (var k = 0u; k < 64u; k++) { dst[b + k * 256u] = src[b + k * 256u]; } }"#.into(), 1024),
    ];
    for (name, source, bytes_per_inv) in variants {
        let module = ctx
            .device()
            .create_shader_module(wgpu::ShaderModuleDescriptor {
                label: None,
                source: wgpu::ShaderSource::Wgsl(source.into()),
            });
        let p = ctx
            .device()
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: None,
                layout: None,
                module: &module,
                entry_point: Some("main"),
                compilation_options: Default::default(),
                cache: None,
            });
        let bg = ctx.device().create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &p.get_bind_group_layout(0),
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: wgpu::BindingResource::Buffer(src.binding()),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: wgpu::BindingResource::Buffer(dst.binding()),
                },
            ],
        });
        let wg = if name.contains("wg64") { 64 } else { 256 };
        let groups = (n_bytes / bytes_per_inv / if name.contains("wg64") { 1 } else { 1 }) as u32;
        let groups = if name.contains("wg64") {
            (n_bytes / 16 / 64) as u32
        } else {
            groups / wg * 1
        };
        let groups = if name.starts_with("naive") && !name.contains("wg64") {
            (n_bytes / bytes_per_inv / 256) as u32
        } else if name.contains("wg64") {
            groups
        } else {
            (n_bytes / bytes_per_inv / 256) as u32
        };
        let mut best = f64::MAX;
        for _ in 0..6 {
            let t = Instant::now();
            let mut e = ctx.device().create_command_encoder(&Default::default());
            {
                let mut pass = e.begin_compute_pass(&Default::default());
                pass.set_pipeline(&p);
                pass.set_bind_group(0, &bg, &[]);
                let (x, y) = if groups > 65535 {
                    (65535, groups.div_ceil(65535))
                } else {
                    (groups, 1)
                };
                assert!(y == 1, "{name} {groups}");
                pass.dispatch_workgroups(x, y, 1);
            }
            ctx.submit([e.finish()], &[&src, &dst]);
            ctx.synchronize().unwrap();
            best = best.min(t.elapsed().as_secs_f64());
        }
        println!(
            "{name:40} {:.2} GB/s (groups {groups})",
            n_bytes as f64 / best / 1e9
        );
    }
}
