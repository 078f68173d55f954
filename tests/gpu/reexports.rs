//! A dependent needs gpu-arena alone: `gpu_arena::bytemuck` (with its derives) and
//! `gpu_arena::wgpu` are the crate's own. This file names neither crate directly.

use crate::harness;
use gpu_arena::bytemuck;

/// A parameter block derived through gpu-arena's re-export only.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
#[bytemuck(crate = "gpu_arena::bytemuck")]
struct Params {
    n: u32,
    a: f32,
}

const SAXPY: &str = r#"
struct Params { n: u32, a: f32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) i: vec3<u32>) {
    if (i.x < p.n) { y[i.x] = p.a * x[i.x] + y[i.x]; }
}
"#;

#[gpu_test]
fn a_params_block_derived_through_gpu_arena_bytemuck_launches() {
    let ctx = harness::context();
    let saxpy = ctx.kernel(SAXPY, "main").unwrap();
    let x = ctx.device_put(&[1.0f32; 100], &[100]).unwrap();
    let mut y = ctx.device_put(&[1.0f32; 100], &[100]).unwrap();
    let params = Params { n: 100, a: 3.0 };
    assert_eq!(bytemuck::bytes_of(&params).len(), 8);
    ctx.launch(&saxpy)
        .params(&params)
        .arg(&x)
        .arg_mut(&mut y)
        .grid_for(100)
        .run()
        .unwrap();
    assert_eq!(ctx.device_get(&y).unwrap(), vec![4.0; 100]);
}

#[gpu_test]
fn gpu_arena_wgpu_is_the_wgpu_the_context_speaks() {
    let ctx = harness::context();
    // These types are gpu-arena's own wgpu's: a second wgpu version would not type-check here.
    let limits: &gpu_arena::wgpu::Limits = ctx.limits();
    let info: &gpu_arena::wgpu::AdapterInfo = ctx.adapter_info();
    assert!(limits.max_storage_buffer_binding_size > 0);
    assert!(!info.name.is_empty());
}
