//! Prints gpu-arena's memory plan for a device as one JSON object.
//!
//! ```text
//! cargo run --example memplan -- tests/data/memprops/nvidia-h200-linux-580.json
//! cargo run --example memplan            # the live adapter's plan
//! ```
//! The table is `VkPhysicalDeviceMemoryProperties` in the memprops JSON schema
//! (`tests/data/memprops/*.json`). The object holds every field of `MemoryPlan` plus
//! `prealloc_fraction` and `prealloc_bytes`: for a table, at JAX's default fraction, 0.75; for
//! the live adapter, at the fraction its `GPU_ARENA_*` variables set (0 without preallocation,
//! and with the platform allocator, which reserves nothing up front).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use gpu_arena::memplan::{plan_memory, DeviceDescription, MemoryPlan};
use lexopt::prelude::*;

/// JAX's default `XLA_PYTHON_CLIENT_MEM_FRACTION`.
const DEFAULT_FRACTION: f64 = 0.75;

#[path = "flags/mod.rs"]
mod flags;

const USAGE: &str = "usage: memplan [MEMORY-TABLE.json]

Prints gpu-arena's memory plan for a VkPhysicalDeviceMemoryProperties table in the memprops
JSON schema (see tests/data/memprops/) as one JSON object.
  MEMORY-TABLE.json  the table; without it, the plan of the live adapter (GPU_ARENA_*
                     variables apply)
  -h, --help         this text";

/// The table's path, if one was given.
fn table_path() -> Option<PathBuf> {
    flags::parse_or_exit(USAGE, |parser| {
        let mut path = None;
        while let Some(arg) = parser.next()? {
            match arg {
                Value(value) if path.is_none() => path = Some(PathBuf::from(value)),
                Short('h') | Long("help") => return Ok(None),
                _ => return Err(arg.unexpected()),
            }
        }
        Ok(Some(path))
    })
}

fn main() -> Result<()> {
    match table_path() {
        Some(path) => print_plan(&plan_for_file(&path)?),
        None => {
            // The live adapter: open it (cheap: nothing is reserved) and print its plan with
            // the table it was made from.
            let config = gpu_arena::ArenaConfig::from_env()?;
            // The platform allocator reserves nothing up front either.
            let fraction = match (config.preallocate, config.allocator) {
                (true, gpu_arena::AllocatorKind::Bfc) => config.mem_fraction.reserve,
                _ => 0.0,
            };
            let ctx = gpu_arena::Context::new(config)?;
            let plan = ctx.memory_plan();
            let mut object = plan_object(plan, fraction)?;
            let info = ctx.adapter_info();
            object["adapter"] = serde_json::json!({
                "name": info.name,
                "backend": info.backend.to_string(),
                "device_type": plan.device_kind.name(),
                "driver": info.driver,
                "driver_info": info.driver_info,
            });
            object["table"] = serde_json::from_str(&ctx.device_description().to_json())?;
            object["max_region_bytes"] = ctx.max_array_bytes().into();
            println!("{}", serde_json::to_string_pretty(&object)?);
            Ok(())
        }
    }
}

/// The most bytes of a table file read (a table is a few KiB; 32 types and 16 heaps at most):
/// `memplan /dev/zero` is refused rather than read until memory runs out.
const MAX_TABLE_BYTES: u64 = 16 << 20;

/// Reads a memprops JSON table (at most [`MAX_TABLE_BYTES`]) and plans memory for it.
fn plan_for_file(path: &Path) -> Result<MemoryPlan> {
    use std::io::Read;
    let name = path.display();
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(MAX_TABLE_BYTES + 1).read_to_string(&mut text))
        .with_context(|| format!("reading {name}"))?;
    anyhow::ensure!(
        text.len() as u64 <= MAX_TABLE_BYTES,
        "reading {name}: more than {} MiB, which no memory table is; give a memprops JSON table",
        MAX_TABLE_BYTES >> 20
    );
    let device = DeviceDescription::from_json(&text).with_context(|| format!("reading {name}"))?;
    plan_memory(&device).with_context(|| format!("planning memory for {name}"))
}

/// Prints the plan as one JSON object, with the default preallocation added.
fn print_plan(plan: &MemoryPlan) -> Result<()> {
    let object = plan_object(plan, DEFAULT_FRACTION)?;
    println!("{}", serde_json::to_string_pretty(&object)?);
    Ok(())
}

/// The plan as a JSON object with the preallocation at `fraction` added.
fn plan_object(plan: &MemoryPlan, fraction: f64) -> Result<serde_json::Value> {
    let mut object = serde_json::to_value(plan)?;
    object["prealloc_fraction"] = fraction.into();
    object["prealloc_bytes"] = plan.prealloc_bytes(fraction).into();
    Ok(object)
}
