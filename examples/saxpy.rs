//! The shortest correct user kernel through gpu-arena: `y = a * x + y` in WGSL, launched over
//! arena arrays, checked against the CPU. It also shows the newcomer's mistake the launch
//! catches: `x` uploaded as the bits of the floats (`u32`) and bound to `array<f32>` is
//! refused, naming both types, until the array is reinterpreted on purpose with `bitcast`.
//!
//! `cargo run --release --example saxpy -- [--n N]`

use gpu_arena::{bytemuck, ArenaConfig, Context};
use lexopt::prelude::*;

#[path = "flags/mod.rs"]
mod flags;

const USAGE: &str = "usage: saxpy [--n N]

y = a*x + y over N floats on the GPU, checked on the CPU.
  --n N       how many floats (default 1048576)
  -h, --help  this text";

/// `--n`.
fn element_count() -> u32 {
    flags::parse_or_exit(USAGE, |parser| {
        let mut n = 1 << 20;
        while let Some(arg) = parser.next()? {
            match arg {
                Long("n") => n = flags::at_least_one(parser, "n")?,
                Short('h') | Long("help") => return Ok(None),
                _ => return Err(arg.unexpected()),
            }
        }
        // x, its bits, y and the result on the host (x and y on the device too).
        flags::bounded_bytes("--n floats, four copies", &[u64::from(n), 4, 4])?;
        Ok(Some(n))
    })
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

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[bytemuck(crate = "gpu_arena::bytemuck")]
struct Params {
    n: u32,
    a: f32,
}

fn main() -> anyhow::Result<()> {
    let n = element_count();
    let ctx = Context::new(ArenaConfig::from_env()?)?;
    let xs: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
    let ys: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();

    let saxpy = ctx.kernel(SAXPY, "main")?; // compiled once per context
                                            // Data that arrives as raw bits (a file, a network buffer): u32 words.
    let x_bits: Vec<u32> = xs.iter().map(|x| x.to_bits()).collect();
    let x = ctx.device_put(&x_bits, &[n as usize])?;
    let mut y = ctx.device_put(&ys, &[n as usize])?;
    // Bound as they are, u32 elements for `array<f32>` are refused before anything runs.
    let refused = ctx
        .launch(&saxpy)
        .arg(&x)
        .arg_mut(&mut y)
        .params(&Params { n, a: 2.0 })
        .grid_for(n)
        .run()
        .expect_err("a u32 array bound to array<f32> is refused");
    println!("refused as expected: {refused}");
    // Reinterpreting the bits is explicit, free (no copy) and keeps the array's tracking.
    let x = x.bitcast::<f32>()?;
    let started = std::time::Instant::now();
    ctx.launch(&saxpy)
        .arg(&x)
        .arg_mut(&mut y)
        .params(&Params { n, a: 2.0 })
        .grid_for(n)
        .run()?;
    let result = ctx.device_get(&y)?; // waits for the kernel
    let took = started.elapsed();

    let wrong = (0..n as usize)
        .filter(|&i| result[i] != 2.0 * xs[i] + ys[i])
        .count();
    println!(
        "saxpy over {n} float{} on {}: {:.2} ms (launch + readback), {wrong} wrong",
        if n == 1 { "" } else { "s" },
        ctx.adapter_info().name,
        took.as_secs_f64() * 1e3
    );
    anyhow::ensure!(wrong == 0, "{wrong} results differ from the CPU");
    Ok(())
}
