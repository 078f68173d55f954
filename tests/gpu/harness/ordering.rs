//! Kernels whose results show the order work ran in, for the tests of gathered single ops:
//! `a = a * mul + add` does not commute with itself under other parameters, so work run out of
//! order gives a wrong number; and the host's model of each.

use gpu_arena::{Context, DeviceArray, Kernel};

/// `a = a * p.mul + p.add` (wrapping), element by element.
pub const AFFINE: &str = r#"
struct P { mul: u32, add: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read_write> a: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < arrayLength(&a)) { a[id.x] = a[id.x] * p.mul + p.add; }
}
"#;

/// `y = y * 2 + x`: reads `x`, so a later write of `x` must wait for it.
pub const DOUBLE_ADD: &str = r#"
@group(0) @binding(0) var<storage, read> x: array<u32>;
@group(0) @binding(1) var<storage, read_write> y: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < arrayLength(&y)) { y[id.x] = y[id.x] * 2u + x[id.x]; }
}
"#;

/// [`AFFINE`]'s parameter block.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Affine {
    pub mul: u32,
    pub add: u32,
}

/// The host's model of [`AFFINE`].
pub fn affine(v: u32, p: Affine) -> u32 {
    v.wrapping_mul(p.mul).wrapping_add(p.add)
}

/// The parameters of the `i`-th launch of a test: every launch different.
pub fn params(i: u32) -> Affine {
    Affine {
        mul: 3 + i % 5,
        add: i.wrapping_mul(7919) % 1000,
    }
}

/// One launch of [`AFFINE`] over the whole of `a`.
pub fn run_affine(ctx: &Context, k: &Kernel, a: &mut DeviceArray<u32>, p: Affine) {
    let n = a.len() as u64;
    ctx.launch(k)
        .params(&p)
        .arg_mut(a)
        .grid_for(n)
        .run()
        .unwrap();
}

/// One launch of [`DOUBLE_ADD`] over the whole of `y`.
pub fn double_add(ctx: &Context, k: &Kernel, x: &DeviceArray<u32>, y: &mut DeviceArray<u32>) {
    let n = y.len() as u64;
    ctx.launch(k).arg(x).arg_mut(y).grid_for(n).run().unwrap();
}
