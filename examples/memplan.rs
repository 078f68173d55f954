//! Prints gpu-arena's memory plan for a device as one JSON object.
//!
//! ```text
//! cargo run --example memplan -- tests/data/memprops/nvidia-h200-linux-580.json
//! ```
//! The table is `VkPhysicalDeviceMemoryProperties` in the memprops JSON schema
//! (`tests/data/memprops/*.json`). The object holds every field of `MemoryPlan` plus
//! `prealloc_fraction` and `prealloc_bytes` (for JAX's default fraction, 0.75).

use std::process::ExitCode;

use anyhow::{Context, Result};
use gpu_arena::memplan::{plan_memory, DeviceDescription, MemoryPlan};

/// JAX's default `XLA_PYTHON_CLIENT_MEM_FRACTION`.
const DEFAULT_FRACTION: f64 = 0.75;

const USAGE: &str = "usage: memplan [memory-table.json]\n\
    with no argument: the plan of the live adapter (GPU_ARENA_* variables apply)\n\
    prints gpu-arena's memory plan for a VkPhysicalDeviceMemoryProperties table in the\n\
    memprops JSON schema (see tests/data/memprops/) as one JSON object";

fn main() -> Result<ExitCode> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [flag] if flag == "-h" || flag == "--help" => {
            println!("{USAGE}");
            Ok(ExitCode::SUCCESS)
        }
        [path] => {
            print_plan(&plan_for_file(path)?)?;
            Ok(ExitCode::SUCCESS)
        }
        [] => {
            // The live adapter: open it (cheap: nothing is reserved) and print its plan with
            // the table it was made from.
            let ctx = gpu_arena::Context::from_env()?;
            let plan = ctx.memory_plan();
            let mut object = plan_object(plan)?;
            object["adapter"] = format!("{:?}", ctx.adapter_info()).into();
            object["table"] = serde_json::from_str(&ctx.device_description().to_json())?;
            object["max_region_bytes"] = ctx.max_array_bytes().into();
            println!("{}", serde_json::to_string_pretty(&object)?);
            Ok(ExitCode::SUCCESS)
        }
        _ => {
            eprintln!("{USAGE}");
            Ok(ExitCode::from(2))
        }
    }
}

/// Reads a memprops JSON table and plans memory for it.
fn plan_for_file(path: &str) -> Result<MemoryPlan> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    let device = DeviceDescription::from_json(&text).with_context(|| format!("reading {path}"))?;
    plan_memory(&device).with_context(|| format!("planning memory for {path}"))
}

/// Prints the plan as one JSON object, with the default preallocation added.
fn print_plan(plan: &MemoryPlan) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(&plan_object(plan)?)?);
    Ok(())
}

/// The plan as a JSON object with the default preallocation added.
fn plan_object(plan: &MemoryPlan) -> Result<serde_json::Value> {
    let mut object = serde_json::to_value(plan)?;
    object["prealloc_fraction"] = DEFAULT_FRACTION.into();
    object["prealloc_bytes"] = plan.prealloc_bytes(DEFAULT_FRACTION).into();
    Ok(object)
}
