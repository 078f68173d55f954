//! What your GPU exposes, what gpu-arena planned for it, and how fast it really is there.
//!
//! ```text
//! cargo run --release --example device_report -- [--json] [--quick] [--save DIR]
//! ```
//! For each adapter gpu-arena would open (or the one `GPU_ARENA_ADAPTER` chooses), it prints:
//! - the adapter, driver and backend, and the limits that matter for memory (largest buffer and
//!   binding, offset alignments, `nonCoherentAtomSize`, `maxMemoryAllocationSize`), with each
//!   heap's budget and usage from `VK_EXT_memory_budget` when the driver offers it;
//! - the memory table in the schema of `tests/data/memprops`: `--save DIR` writes it there
//!   under a name made of vendor, device, OS and driver, ready to become a test fixture (a
//!   non-Vulkan adapter has none: `--save` then says on standard error that it wrote nothing);
//! - the memory plan with its reasons;
//! - measured figures, each beside the plain-wgpu way of doing the same on the same device:
//!   the first allocation (the arena's reservation) against `create_buffer` of the same bytes,
//!   alloc+free of 1 MiB arrays against `create_buffer`/drop, 10,000 uploads of 4 KiB as one
//!   batch against `queue.write_buffer` each, a 256 MiB upload and readback against
//!   `write_buffer` and `map_async`, and donated in-place `dynamic_update_slice` of 1 MiB and
//!   256 MiB against `copy_buffer_to_buffer`. Each figure is the median of 5 synchronized runs
//!   (`--quick`: smaller sizes, 3 runs, for CI on lavapipe);
//! - the library's kernels tuned on the device ([`Context::tune_kernels`]): the shape chosen
//!   per kernel and size class, its bandwidth against the fixed shape's and the device's own
//!   copy (`copy_buffer_to_buffer`, `clear_buffer` for fill), and what tuning cost;
//! - direct writes through a full Resizable BAR (`GPU_ARENA_BAR_WRITES=on`) against the staging
//!   path, where the device has one.
//!
//! `--json` prints one JSON document with all of it instead of the tables. The `GPU_ARENA_*`
//! variables apply (`GPU_ARENA_MEM_FRACTION`, `GPU_ARENA_BAR_WRITES`, ...).

#[path = "../flags/mod.rs"]
mod flags;
mod measure;
#[path = "../raw_range/mod.rs"]
mod raw_range;
mod table;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use gpu_arena::config::{AdapterSelector, ArenaConfig, BarWrites};
use gpu_arena::kernels::TuningClock;
use gpu_arena::{Context, Error};
use lexopt::prelude::*;
use measure::{human_bytes, Figure, Sizes};
use serde_json::json;

const USAGE: &str = "\
usage: device_report [--json] [--quick] [--save DIR]

Reports each GPU adapter gpu-arena would open (GPU_ARENA_ADAPTER picks one): adapter, driver,
limits, heap budgets, the memory table (memprops schema), the memory plan, and measured figures
beside the plain-wgpu way of doing the same.

  --json       one JSON document instead of tables
  --quick      small sizes and 3 runs per figure (CI on lavapipe); default: the full sizes
  --save DIR   write each adapter's memory table into DIR (e.g. tests/data/memprops)
  -h, --help   this text";

/// What the command line asked for.
#[derive(Debug, Default, PartialEq)]
struct Options {
    json: bool,
    quick: bool,
    save: Option<PathBuf>,
}

/// Reads the flags; `Ok(None)` when `--help` was asked for. Errors name the bad argument.
fn parse_args(parser: &mut lexopt::Parser) -> Result<Option<Options>, lexopt::Error> {
    let mut options = Options::default();
    while let Some(arg) = parser.next()? {
        match arg {
            Short('h') | Long("help") => return Ok(None),
            Long("json") => options.json = true,
            Long("quick") => options.quick = true,
            Long("save") => {
                let dir = PathBuf::from(parser.value()?);
                if dir.as_os_str().is_empty() {
                    return Err("--save needs a directory".into());
                }
                options.save = Some(dir);
            }
            _ => return Err(arg.unexpected()),
        }
    }
    Ok(Some(options))
}

fn main() -> ExitCode {
    // wgpu's warnings and validation errors go to stderr, never into the `--json` document.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let options = flags::parse_or_exit(USAGE, parse_args);
    match run(&options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("device_report: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(options: &Options) -> Result<()> {
    let base = ArenaConfig::from_env()?;
    let sizes = if options.quick {
        Sizes::QUICK
    } else {
        Sizes::FULL
    };
    let mut adapters = Vec::new();
    // One adapter when GPU_ARENA_ADAPTER names it; otherwise every adapter, by index, until
    // the context says there is no such index.
    let chosen = base.adapter.is_some();
    for index in 0.. {
        let mut config = base.clone();
        if !chosen {
            config.adapter = Some(AdapterSelector::Index(index));
        }
        let ctx = match Context::new(config.clone()) {
            Ok(ctx) => ctx,
            Err(Error::AdapterNotFound { .. }) if index > 0 => break,
            Err(e) => return Err(e).context("opening the adapter"),
        };
        let report = report_adapter(ctx, &config, &sizes, options)?;
        if !options.json {
            print_report(&report);
        }
        adapters.push(report);
        if chosen {
            break;
        }
    }
    if options.json {
        let document = json!({
            "gpu_arena_version": env!("CARGO_PKG_VERSION"),
            "quick": options.quick,
            "sizes": sizes,
            "adapters": adapters,
        });
        println!("{}", serde_json::to_string_pretty(&document)?);
    }
    Ok(())
}

/// Everything about one adapter, as one JSON value (the `--json` document's element and the
/// source of the printed tables).
fn report_adapter(
    ctx: Context,
    config: &ArenaConfig,
    sizes: &Sizes,
    options: &Options,
) -> Result<serde_json::Value> {
    let info = ctx.adapter_info().clone();
    let limits = ctx.limits();
    let plan = ctx.memory_plan().clone();
    let table = table::table_value(&ctx)?;
    let saved = match &options.save {
        Some(dir) => {
            let saved = table::save_table(&ctx, dir)?;
            if saved.is_none() {
                // On stderr, so that --json's standard output stays one document.
                eprintln!(
                    "--save: {} is not a Vulkan adapter, so it has no memory table; nothing written to {}",
                    info.name,
                    dir.display()
                );
            }
            saved
        }
        None => None,
    };
    let heaps = ctx.memory_snapshot().heaps;
    let mut report = json!({
        "adapter": {
            "name": info.name,
            "vendor_id": format!("{:#x}", info.vendor),
            "vendor": ctx.device_description().vendor().to_string(),
            "device_id": format!("{:#06x}", info.device),
            "device_type": ctx.memory_plan().device_kind.name(),
            "driver": info.driver,
            "driver_info": info.driver_info,
            "backend": info.backend.to_string(),
        },
        "limits": {
            "max_buffer_size": limits.max_buffer_size,
            "max_storage_buffer_binding_size": limits.max_storage_buffer_binding_size,
            "min_storage_buffer_offset_alignment": limits.min_storage_buffer_offset_alignment,
            "min_uniform_buffer_offset_alignment": limits.min_uniform_buffer_offset_alignment,
            "copy_buffer_alignment": gpu_arena::wgpu::COPY_BUFFER_ALIGNMENT,
            "max_array_bytes": ctx.max_array_bytes(),
        },
        "vulkan": ctx.vulkan_limits(),
        "heaps": heaps,
        "table": table,
        "saved_table": saved.map(|p| p.display().to_string()),
        "config": {
            "mem_fraction": config.mem_fraction.to_string(),
            "preallocate": config.preallocate,
            "zero_copy": config.zero_copy,
            "bar_writes": config.bar_writes,
            "bar_writes_active": ctx.bar_writes(),
        },
        "plan": plan,
        "prealloc_bytes": plan.prealloc_bytes(config.mem_fraction.reserve),
        "pinned_host_limit_bytes": ctx
            .memory_stats_of(gpu_arena::MemoryKind::PinnedHost)
            .and_then(|stats| stats.bytes_limit),
    });
    let figures = measure::measure_all(&ctx, sizes).context("measuring")?;
    report["figures"] = serde_json::to_value(&figures)?;
    report["kernel_tuning"] = kernel_tuning(&ctx)?;
    // The BAR comparison opens contexts of its own: this one's arena must be gone first.
    let vulkan = ctx.is_vulkan();
    drop(ctx);
    report["bar_writes"] = bar_writes(config, sizes, &plan, vulkan)?;
    Ok(report)
}

/// Every library kernel tuned on the device (the `GPU_ARENA_KERNEL_TUNING` setting applies:
/// `off` and forced shapes measure nothing): the shape chosen per kernel and size class, and
/// the bandwidth of the chosen and the fixed shape against the device's own copy.
fn kernel_tuning(ctx: &Context) -> Result<serde_json::Value> {
    let report = ctx.tune_kernels().context("tuning the library's kernels")?;
    let kernels: Vec<_> = report
        .kernels
        .iter()
        .map(|k| {
            json!({
                "kernel": k.kernel,
                "size_class": k.size_class.name(),
                "shape": k.shape.to_string(),
                "fixed_shape": k.fixed_shape.to_string(),
                "gb_per_s": k.bytes_per_second / 1e9,
                "fixed_gb_per_s": k.fixed_bytes_per_second / 1e9,
                "device_copy_gb_per_s": k.device_copy_bytes_per_second / 1e9,
                "origin": k.origin.name(),
            })
        })
        .collect();
    Ok(json!({
        "setting": ArenaConfig::from_env()?.kernel_tuning.to_string(),
        "jobs": report.jobs,
        "tuning_seconds": report.tuning_time.as_secs_f64(),
        "clock": match report.clock {
            TuningClock::Timestamps => "timestamps",
            TuningClock::WallClock => "wall clock",
        },
        "file": report.file.map(|f| f.display().to_string()),
        "kernels": kernels,
    }))
}

fn print_kernel_tuning(tuning: &serde_json::Value) {
    println!(
        "kernel tuning ({}): {} jobs in {:.2} s, timed by the {}{}",
        text(&tuning["setting"]),
        tuning["jobs"],
        tuning["tuning_seconds"].as_f64().unwrap_or(f64::NAN),
        text(&tuning["clock"]),
        match tuning["file"].as_str() {
            Some(file) => format!(", kept in {file}"),
            None => String::new(),
        }
    );
    println!(
        "  {:<36} {:<7} {:>6} {:>11} {:>11} {:>11} {:>8} {:>8}",
        "kernel", "class", "shape", "GB/s", "fixed GB/s", "copy GB/s", "x fixed", "x copy"
    );
    for k in tuning["kernels"].as_array().into_iter().flatten() {
        let rate = |key: &str| k[key].as_f64().unwrap_or(f64::NAN);
        println!(
            "  {:<36} {:<7} {:>6} {:>11.2} {:>11.2} {:>11.2} {:>7.2}x {:>7.2}x",
            text(&k["kernel"]),
            text(&k["size_class"]),
            text(&k["shape"]),
            rate("gb_per_s"),
            rate("fixed_gb_per_s"),
            rate("device_copy_gb_per_s"),
            rate("gb_per_s") / rate("fixed_gb_per_s"),
            rate("gb_per_s") / rate("device_copy_gb_per_s"),
        );
    }
}

/// Direct writes through a full BAR against staging, each measured on a context of its own;
/// or why there is nothing to compare on this device.
fn bar_writes(
    config: &ArenaConfig,
    sizes: &Sizes,
    plan: &gpu_arena::MemoryPlan,
    vulkan: bool,
) -> Result<serde_json::Value> {
    let unavailable = |why: String| json!({ "available": false, "why": why });
    if !vulkan {
        return Ok(unavailable(
            "not Vulkan: the arena is wgpu's own buffers, and uploads go through wgpu's staging"
                .into(),
        ));
    }
    if plan.uma {
        return Ok(unavailable(
            "UMA: the arena is host-visible already, so uploads are a memcpy either way".into(),
        ));
    }
    if plan.bar_write_candidates().is_none() {
        return Ok(unavailable(format!(
            "no full Resizable BAR (BAR: {}), so the arena cannot live in host-visible VRAM",
            plan.bar
        )));
    }
    if !config.zero_copy {
        return Ok(unavailable(
            "GPU_ARENA_ZERO_COPY=off forbids mapping the arena".into(),
        ));
    }
    // The same two uploads on a context with direct writes and on one without, one at a time:
    // each arena takes most of the device's memory.
    let measure_with = |setting: BarWrites| -> Result<(bool, Vec<Figure>)> {
        let ctx = Context::new(ArenaConfig {
            bar_writes: setting,
            ..config.clone()
        })?;
        let sizes = measure::capped(&ctx, sizes);
        let big = vec![0xa5u8; sizes.large_bytes];
        let figures = vec![
            measure::large_upload(&ctx, &sizes, &big)?,
            measure::small_uploads(&ctx, &sizes)?,
        ];
        Ok((ctx.bar_writes(), figures))
    };
    let (active, on) = measure_with(BarWrites::On)?;
    let (_, off) = measure_with(BarWrites::Off)?;
    let compared: Vec<Figure> = on
        .into_iter()
        .zip(off)
        .map(|(on, off)| {
            Figure::new(
                on.case,
                on.unit,
                on.higher_is_better,
                measure::Measured {
                    method: "GPU_ARENA_BAR_WRITES=on (memcpy into VRAM)".into(),
                    ..on.gpu_arena
                },
                measure::Measured {
                    method: "GPU_ARENA_BAR_WRITES=off (staging and copy)".into(),
                    ..off.gpu_arena
                },
            )
        })
        .collect();
    Ok(json!({
        "available": true,
        "active": active,
        "figures": compared,
    }))
}

/// The readable form of one adapter's report.
fn print_report(report: &serde_json::Value) {
    let adapter = &report["adapter"];
    println!(
        "== {} ({}, {}) ==",
        text(&adapter["name"]),
        text(&adapter["backend"]),
        text(&adapter["device_type"])
    );
    // A backend may name no driver (GL gives only its version string): the parts it gives.
    let driver: Vec<String> = [text(&adapter["driver"]), text(&adapter["driver_info"])]
        .into_iter()
        .filter(|part| !part.trim().is_empty())
        .collect();
    println!(
        "adapter:  vendor {} ({}), device {}, driver {}",
        text(&adapter["vendor_id"]),
        text(&adapter["vendor"]),
        text(&adapter["device_id"]),
        match driver.is_empty() {
            true => "unnamed".to_string(),
            false => driver.join(" "),
        }
    );
    let limits = &report["limits"];
    println!(
        "limits:   max buffer {}, max storage binding {}, storage offset alignment {}, \
         uniform offset alignment {}, copy alignment {}",
        bytes(&limits["max_buffer_size"]),
        bytes(&limits["max_storage_buffer_binding_size"]),
        limits["min_storage_buffer_offset_alignment"],
        limits["min_uniform_buffer_offset_alignment"],
        limits["copy_buffer_alignment"]
    );
    let vulkan = &report["vulkan"];
    if vulkan.is_null() {
        println!("vulkan:   not a Vulkan adapter (no memory table, atom size or budget)");
    } else {
        println!(
            "vulkan:   {}, nonCoherentAtomSize {}, maxMemoryAllocationSize {}, \
             minMemoryMapAlignment {}, VK_EXT_memory_budget {}",
            text(&vulkan["api_version"]),
            vulkan["non_coherent_atom_size"],
            bytes(&vulkan["max_memory_allocation_size"]),
            vulkan["min_memory_map_alignment"],
            if vulkan["memory_budget"] == true {
                "yes"
            } else {
                "no"
            }
        );
    }
    for heap in report["heaps"].as_array().into_iter().flatten() {
        let kind = if heap["device_local"] == true {
            "device-local"
        } else {
            "host"
        };
        let budget = match (heap["budget"].as_u64(), heap["usage"].as_u64()) {
            (Some(budget), Some(usage)) => format!(
                "budget {}, {} in use",
                human_bytes(budget),
                human_bytes(usage)
            ),
            _ => "no budget reported".into(),
        };
        println!(
            "heap {}:   {} {kind}, {budget}",
            heap["index"],
            bytes(&heap["size"])
        );
    }
    match &report["table"] {
        serde_json::Value::Null => {}
        table => {
            println!("memory table (the tests/data/memprops schema):");
            println!("{}", table::compact_json(table));
        }
    }
    if let Some(path) = report["saved_table"].as_str() {
        println!("saved the table to {path}");
    }
    let plan = &report["plan"];
    println!(
        "plan:     arena type {} on heap {}{}, upload type {}, readback type {}, pinned host {}, \
         BAR {}, UMA {}, preallocates {}{}",
        plan["arena_type"],
        plan["arena_heap"],
        if plan["arena_host_visible"] == true {
            " (host-visible)"
        } else {
            ""
        },
        plan["upload_type"],
        plan["readback_type"],
        match &plan["pinned_host"] {
            serde_json::Value::Null => "none".to_string(),
            host => format!(
                "type {} on heap {} (limit {})",
                host["memory_type"],
                host["heap"],
                bytes(&report["pinned_host_limit_bytes"])
            ),
        },
        text(&plan["bar"]),
        plan["uma"],
        bytes(&report["prealloc_bytes"]),
        if report["config"]["bar_writes_active"] == true {
            ", direct BAR writes on"
        } else {
            ""
        }
    );
    for reason in plan["reasons"].as_array().into_iter().flatten() {
        println!("  - {}", text(reason));
    }
    println!("figures (median of synchronized runs; x > 1: gpu-arena is that many times better):");
    print_figures(&report["figures"]);
    print_kernel_tuning(&report["kernel_tuning"]);
    let bar = &report["bar_writes"];
    if bar["available"] == true {
        println!("direct BAR writes against staging (GPU_ARENA_BAR_WRITES; auto is off for now):");
        print_figures(&bar["figures"]);
    } else {
        println!("direct BAR writes: not measured: {}", text(&bar["why"]));
    }
    println!();
}

fn print_figures(figures: &serde_json::Value) {
    let Ok(figures) = serde_json::from_value::<Vec<serde_json::Value>>(figures.clone()) else {
        return;
    };
    println!(
        "  {:<40} {:>22} {:>22} {:>8}",
        "case", "gpu-arena", "plain wgpu", "x"
    );
    for f in &figures {
        let unit = text(&f["unit"]);
        let value = |m: &serde_json::Value| {
            let v = m["value"].as_f64().unwrap_or(f64::NAN);
            let seconds = m["seconds"].as_f64().unwrap_or(f64::NAN);
            match unit.as_str() {
                "GB/s" => format!("{v:.2} GB/s ({:.0} us)", seconds * 1e6),
                "ms" => format!("{v:.2} ms"),
                _ => format!("{v:.2} us each"),
            }
        };
        let (ours, peer) = (&f["gpu_arena"], &f["peer"]);
        println!(
            "  {:<40} {:>22} {:>22} {:>7.2}x",
            text(&f["case"]),
            value(ours),
            value(peer),
            f["ratio"].as_f64().unwrap_or(f64::NAN)
        );
        println!(
            "      {}  vs  {}",
            text(&ours["method"]),
            text(&peer["method"])
        );
    }
}

fn text(value: &serde_json::Value) -> String {
    match value.as_str() {
        Some(s) => s.to_string(),
        None => value.to_string(),
    }
}

fn bytes(value: &serde_json::Value) -> String {
    value.as_u64().map_or_else(|| "unknown".into(), human_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Option<Options>, String> {
        flags::parse_strings(parse_args, args)
    }

    #[test]
    fn flags_parse_in_any_order() {
        let options = parse(&["--quick", "--save", "dir", "--json"])
            .unwrap()
            .unwrap();
        assert_eq!(
            options,
            Options {
                json: true,
                quick: true,
                save: Some("dir".into())
            }
        );
        assert_eq!(
            parse(&["--save=x"]).unwrap().unwrap().save,
            Some("x".into())
        );
        assert_eq!(parse(&["--help"]).unwrap(), None);
    }

    #[test]
    fn unknown_flags_and_a_missing_directory_are_errors() {
        assert_eq!(parse(&["--fast"]).unwrap_err(), "invalid option '--fast'");
        assert_eq!(
            parse(&["--save"]).unwrap_err(),
            "missing argument for option '--save'"
        );
        assert_eq!(parse(&["--save="]).unwrap_err(), "--save needs a directory");
        assert_eq!(
            parse(&["--json=yes"]).unwrap_err(),
            "unexpected argument for option '--json': \"yes\""
        );
        assert_eq!(
            parse(&["stray"]).unwrap_err(),
            "unexpected argument \"stray\""
        );
    }
}
