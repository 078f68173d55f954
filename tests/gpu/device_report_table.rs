//! The memory table `examples/device_report` saves (`--save DIR`) reads back through the same
//! loader the memplan tests use, and plans as the live device does: a user's report becomes a
//! test fixture as it is.
//!
//! The example's own table code is compiled in here (`#[path]`), so this tests what the binary
//! writes, not a copy of it.

#[path = "../../examples/device_report/table.rs"]
mod table;

use crate::harness::context;
use gpu_arena::memplan::{plan_memory, DeviceDescription, Vendor};

/// A directory of its own under the system's temporary directory.
fn scratch_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("gpu-arena-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[gpu_test(needs = Vulkan)]
fn a_saved_table_reads_back_through_the_memplan_loader_and_plans_as_the_live_device() {
    let ctx = context();
    let dir = scratch_dir("device-report-table");
    let path = table::save_table(&ctx, &dir)
        .unwrap()
        .expect("lavapipe is a Vulkan adapter with a real memory table");
    assert_eq!(path.parent(), Some(dir.as_path()));
    let text = std::fs::read_to_string(&path).unwrap();
    let saved = DeviceDescription::from_json(&text).unwrap();
    let live = ctx.device_description();
    assert_eq!(saved.name, live.name);
    assert_eq!(saved.vendor_id, live.vendor_id);
    assert_eq!(saved.device_kind, live.device_kind);
    assert_eq!(saved.memory, live.memory);
    assert_eq!(
        saved.heap_budgets, None,
        "budgets change per run and stay out of fixtures"
    );
    let plan = plan_memory(&saved).unwrap();
    let live_plan = ctx.memory_plan();
    assert_eq!(
        (
            plan.arena_type,
            plan.upload_type,
            plan.readback_type,
            plan.bar
        ),
        (
            live_plan.arena_type,
            live_plan.upload_type,
            live_plan.readback_type,
            live_plan.bar
        )
    );
    // The fields the shared schema adds for people are there too.
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    for key in ["driver", "source", "notes"] {
        assert!(value[key].is_string(), "{key} in {text}");
    }
    assert_eq!(
        value,
        table::table_value(&ctx).unwrap().unwrap(),
        "--json shows the same table"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[gpu_test]
fn table_file_names_follow_the_shared_tables_vendor_device_os_driver() {
    let os = std::env::consts::OS;
    assert_eq!(
        table::table_file_name(Vendor::Nvidia, "NVIDIA H200", "NVIDIA", "580.65.06"),
        format!("nvidia-h200-{os}-580.json")
    );
    assert_eq!(
        table::table_file_name(
            Vendor::Amd,
            "AMD Radeon RX 6600 (RADV NAVI23)",
            "radv",
            "Mesa 23.1.0"
        ),
        format!("amd-radeon-rx-6600-{os}-radv-23.json")
    );
    assert_eq!(
        table::table_file_name(
            Vendor::Intel,
            "Intel(R) Iris(R) Xe Graphics (RPL-U)",
            "Intel open-source Mesa driver",
            "Mesa 25.0.1"
        ),
        format!("intel-iris-xe-graphics-{os}-open-source-25.json")
    );
}

#[gpu_test]
fn hostile_device_names_cannot_leave_the_directory_or_make_odd_file_names() {
    for name in [
        "../../etc/passwd",
        "/abs/path",
        "GPU\0\n\\..\\x",
        "日本語 GPU ✓",
        "",
        "(((",
    ] {
        let file = table::table_file_name(Vendor::Other(0x13b5), name, "../driver", "v../1");
        assert!(file.ends_with(".json"), "{file}");
        let stem = file.trim_end_matches(".json");
        assert!(
            stem.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
            "{name:?} gave {file:?}"
        );
        assert!(
            !stem.is_empty() && !stem.starts_with('-') && !stem.contains("--"),
            "{file}"
        );
        assert!(file.starts_with("vendor-13b5-"), "{file}");
    }
}

#[gpu_test]
fn an_adapter_of_another_backend_has_no_table_to_save_and_save_writes_nothing() {
    let Some(gl) = crate::harness::gl_context() else {
        crate::harness::skip(crate::harness::Need::GlAdapter);
        return;
    };
    assert_ne!(gl.adapter_info().backend, gpu_arena::wgpu::Backend::Vulkan);
    let dir = scratch_dir("device-report-no-table");
    assert!(table::table_value(&gl).unwrap().is_none());
    assert_eq!(table::save_table(&gl, &dir).unwrap(), None);
    // Nothing was written, not even the directory.
    assert!(!dir.exists(), "{}", dir.display());
}
