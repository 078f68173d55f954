//! The device's memory table in the shared memprops JSON schema (`tests/data/memprops`), and
//! the file name `--save` gives it.
//!
//! Shared with `tests/gpu/device_report_table.rs`, which saves a live table with these functions and
//! reads it back through the memplan loader.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use gpu_arena::memplan::{DeviceDescription, Vendor};
use gpu_arena::Context;

/// What `source` says in tables this binary writes.
pub const TABLE_SOURCE: &str = "gpu-arena examples/device_report.rs on the device itself";

/// Words of a file name taken from the device name at most (`geforce-rtx-4090-laptop-gpu`).
const MAX_NAME_WORDS: usize = 5;

/// The memory table of `ctx`'s device in the memprops schema: `device`, `vendor_id`,
/// `device_type`, `driver`, `source`, `notes`, `heaps`, `types`. `None` when the context is not
/// on Vulkan (other backends do not report a memory table; the context's is synthetic).
///
/// The budget is left out: it changes from run to run, and a fixture should plan the same way
/// every time (the report shows the budget beside the table).
pub fn table_value(ctx: &Context) -> Result<Option<serde_json::Value>> {
    if !ctx.is_vulkan() {
        return Ok(None);
    }
    let description = DeviceDescription {
        heap_budgets: None,
        ..ctx.device_description().clone()
    };
    let mut table: serde_json::Value =
        serde_json::from_str(&description.to_json()).context("the table's own JSON")?;
    let info = ctx.adapter_info();
    let plan = ctx.memory_plan();
    table["driver"] = format!(
        "{} {} ({})",
        info.driver,
        info.driver_info,
        std::env::consts::OS
    )
    .trim()
    .into();
    table["source"] = TABLE_SOURCE.into();
    table["notes"] = format!(
        "{} device, BAR {}, arena type {} on heap {}; device id {:#06x}",
        plan.device_kind.name(),
        plan.bar,
        plan.arena_type,
        plan.arena_heap,
        info.device
    )
    .into();
    Ok(Some(table))
}

/// A file name for the table from vendor, device name, OS and driver (wgpu's `driver` and
/// `driver_info`), as the shared tables are named (`nvidia-h200-linux-580.json`): lower-case
/// ASCII words joined by `-`, nothing else, so a hostile device name cannot leave the directory.
pub fn table_file_name(vendor: Vendor, name: &str, driver: &str, driver_info: &str) -> String {
    let vendor_word = match vendor {
        Vendor::Other(id) => format!("vendor-{id:x}"),
        known => known.to_string().to_ascii_lowercase(),
    };
    let name_words: Vec<String> = words(&without_parentheses(name))
        .into_iter()
        .filter(|w| *w != vendor_word)
        .take(MAX_NAME_WORDS)
        .collect();
    let driver_words: Vec<String> = words(driver)
        .into_iter()
        .filter(|w| *w != vendor_word && !name_words.contains(w))
        .take(2)
        .collect();
    // The driver's major version: the first number in its version text.
    let major = driver_info
        .split(|c: char| !c.is_ascii_digit())
        .find(|part| !part.is_empty())
        .map(str::to_string);
    let mut parts = vec![vendor_word];
    parts.extend(name_words);
    parts.push(std::env::consts::OS.to_string());
    parts.extend(driver_words);
    parts.extend(major);
    parts.dedup();
    format!("{}.json", parts.join("-"))
}

/// Writes the table of `ctx` into `dir` (made if missing) under [`table_file_name`]; returns the
/// path, or `None` when the context has no real table (not Vulkan).
pub fn save_table(ctx: &Context, dir: &Path) -> Result<Option<PathBuf>> {
    let Some(table) = table_value(ctx)? else {
        return Ok(None);
    };
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let vendor = ctx.device_description().vendor();
    let info = ctx.adapter_info();
    let path = dir.join(table_file_name(
        vendor,
        &info.name,
        &info.driver,
        &info.driver_info,
    ));
    let text = compact_json(&table) + "\n";
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(Some(path))
}

/// The schema's keys in the order the shared tables write them; others follow.
const KEY_ORDER: [&str; 8] = [
    "device",
    "vendor_id",
    "device_type",
    "driver",
    "source",
    "notes",
    "heaps",
    "types",
];

/// A table as JSON in the shared tables' key order, one heap or type per line: valid JSON that
/// a person can read and diff.
pub fn compact_json(table: &serde_json::Value) -> String {
    let Some(object) = table.as_object() else {
        return table.to_string();
    };
    let mut keys: Vec<&String> = object.keys().collect();
    keys.sort_by_key(|k| {
        KEY_ORDER
            .iter()
            .position(|o| o == k)
            .unwrap_or(KEY_ORDER.len())
    });
    let entries: Vec<String> = keys
        .into_iter()
        .map(|key| {
            let value = &object[key];
            match value.as_array() {
                Some(items) if key == "heaps" || key == "types" || key == "heap_budgets" => {
                    let lines: Vec<String> = items
                        .iter()
                        .map(|item| format!("  {}", item_json(item)))
                        .collect();
                    format!(" \"{key}\": [\n{}\n ]", lines.join(",\n"))
                }
                _ => format!(" \"{key}\": {value}"),
            }
        })
        .collect();
    format!("{{\n{}\n}}", entries.join(",\n"))
}

/// One heap or type with its scalar field (`size`, `heap`) before its `flags`.
fn item_json(item: &serde_json::Value) -> String {
    let Some(object) = item.as_object() else {
        return item.to_string();
    };
    let mut keys: Vec<&String> = object.keys().collect();
    keys.sort_by_key(|k| *k == "flags");
    let fields: Vec<String> = keys
        .into_iter()
        .map(|k| format!("\"{k}\": {}", object[k]))
        .collect();
    format!("{{{}}}", fields.join(", "))
}

/// `text` without its parenthesised parts: `Intel(R) Iris(R) Xe Graphics (RPL-U)` gives
/// `Intel Iris Xe Graphics`.
fn without_parentheses(text: &str) -> String {
    let mut depth = 0usize;
    let mut kept = String::new();
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            _ if depth == 0 => kept.push(c),
            _ => {}
        }
    }
    kept
}

/// The lower-case ASCII letter-and-digit words of `text`.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_lowercase)
        .collect()
}
