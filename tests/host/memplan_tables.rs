//! The memory-type policy on every real table in `tests/data/memprops`, by device class, and
//! on random tables of the same shape.
//!
//! Expectations are written per class (AMD, small BAR, full BAR, UMA, carve-out, software),
//! never as one file's plan; a table dropped into the folder is covered by the class tests it
//! falls in and by `every_table_in_the_data_folder_gets_a_plan_that_keeps_the_invariants`.

use std::path::PathBuf;

use gpu_arena::memplan::{
    plan_memory, BarClass, DeviceDescription, DeviceKind, HeapBudget, HeapFlags, MemPlanError,
    MemoryHeap, MemoryPlan, MemoryProperties, MemoryRequest, MemoryType, MemoryTypeFlags as F,
    PinnedHostPlan, Vendor, PREALLOC_ALIGN, SMALL_BAR_MAX,
};
use proptest::prelude::*;

const GIB: u64 = 1 << 30;

/// Every table in the data folder: (file name, description, plan).
fn tables() -> Vec<(String, DeviceDescription, MemoryPlan)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/memprops");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/data/memprops exists")
        .map(|entry| entry.expect("readable entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&path).expect("readable table");
            let device = DeviceDescription::from_json(&text)
                .unwrap_or_else(|e| panic!("{name} does not read: {e}"));
            let plan = plan_memory(&device).unwrap_or_else(|e| panic!("{name} does not plan: {e}"));
            (name, device, plan)
        })
        .collect()
}

/// The tables of one class; panics when the class is empty, so a test never passes vacuously.
fn class(
    what: &str,
    keep: impl Fn(&str, &DeviceDescription, &MemoryPlan) -> bool,
) -> Vec<(String, DeviceDescription, MemoryPlan)> {
    let chosen: Vec<_> = tables()
        .into_iter()
        .filter(|(name, device, plan)| keep(name, device, plan))
        .collect();
    assert!(!chosen.is_empty(), "no table of class {what}");
    chosen
}

fn flags(device: &DeviceDescription, ty: u32) -> F {
    device.memory.types[ty as usize].flags
}

fn heap_of(device: &DeviceDescription, ty: u32) -> u32 {
    device.memory.types[ty as usize].heap
}

fn heap_size(device: &DeviceDescription, heap: u32) -> u64 {
    device.memory.heaps[heap as usize].size
}

/// VMA's cost of a type: preferred flags missing plus not-preferred flags present.
fn vma_cost(flags: F, preferred: F, not_preferred: F) -> u32 {
    (preferred.0 & !flags.0).count_ones() + (not_preferred.0 & flags.0).count_ones()
}

/// A model of the filter, written apart from the library's: the flags wgpu-hal knows, minus
/// LAZILY_ALLOCATED, on a heap that exists and is not empty.
fn usable(memory: &MemoryProperties, ty: usize) -> bool {
    let known = F::DEVICE_LOCAL | F::HOST_VISIBLE | F::HOST_COHERENT | F::HOST_CACHED;
    let t = &memory.types[ty];
    ty < 32
        && known.contains(t.flags)
        && memory
            .heaps
            .get(t.heap as usize)
            .is_some_and(|h| h.size > 0)
}

fn usable_with(memory: &MemoryProperties, want: F) -> Vec<u32> {
    (0..memory.types.len())
        .filter(|&i| usable(memory, i) && memory.types[i].flags.contains(want))
        .map(|i| i as u32)
        .collect()
}

const FRACTIONS: [f64; 11] = [
    0.0,
    0.1,
    0.5,
    0.75,
    0.8,
    0.9,
    1.0,
    1.5,
    -0.25,
    f64::NAN,
    f64::INFINITY,
];

/// What holds for every plan of every table.
fn check_invariants(device: &DeviceDescription, plan: &MemoryPlan) {
    let memory = &device.memory;
    let lists = [
        (
            "arena",
            plan.arena_type,
            &plan.arena_candidates,
            plan.arena_type_bits(),
        ),
        (
            "upload",
            plan.upload_type,
            &plan.upload_candidates,
            plan.upload_type_bits(),
        ),
        (
            "readback",
            plan.readback_type,
            &plan.readback_candidates,
            plan.readback_type_bits(),
        ),
    ];
    for (what, chosen, candidates, bits) in lists {
        assert_eq!(
            candidates.first(),
            Some(&chosen),
            "{what}: the chosen type leads its list"
        );
        let mut sorted = candidates.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(
            sorted.len(),
            candidates.len(),
            "{what}: no duplicates in {candidates:?}"
        );
        for &ty in candidates.iter() {
            assert!(
                (ty as usize) < memory.types.len(),
                "{what}: type {ty} exists"
            );
            assert!(usable(memory, ty as usize), "{what}: type {ty} is usable");
            assert!(
                !flags(device, ty).intersects(
                    F::DEVICE_COHERENT_AMD
                        | F::DEVICE_UNCACHED_AMD
                        | F::PROTECTED
                        | F::LAZILY_ALLOCATED
                ),
                "{what}: type {ty} has no AMD-only, protected or lazy flag"
            );
        }
        assert_eq!(
            bits,
            MemoryPlan::type_mask(candidates),
            "{what}: mask matches the list"
        );
        assert_eq!(
            bits.count_ones() as usize,
            candidates.len(),
            "{what}: one bit per candidate"
        );
    }

    // Staging needs host access, off a small BAR window whenever anything else is host-visible.
    let mut eligible = usable_with(memory, F::HOST_VISIBLE);
    if let (BarClass::Small, Some(window)) = (plan.bar, plan.bar_heap) {
        if eligible.iter().any(|&t| heap_of(device, t) != window) {
            eligible.retain(|&t| heap_of(device, t) != window);
        }
    }
    for (what, ty, coherent) in [
        ("upload", plan.upload_type, plan.upload_coherent),
        ("readback", plan.readback_type, plan.readback_coherent),
    ] {
        assert!(
            flags(device, ty).contains(F::HOST_VISIBLE),
            "{what} is host-visible"
        );
        assert!(eligible.contains(&ty), "{what} type {ty} is eligible");
        assert_eq!(coherent, flags(device, ty).contains(F::HOST_COHERENT));
    }
    // Upload: coherent first (no flush per write), then system memory, then write-combined.
    let upload_key = |t: u32| {
        let f = flags(device, t);
        (
            !f.contains(F::HOST_COHERENT),
            f.contains(F::DEVICE_LOCAL),
            f.contains(F::HOST_CACHED),
        )
    };
    assert_eq!(
        Some(upload_key(plan.upload_type)),
        eligible.iter().map(|&t| upload_key(t)).min(),
        "upload is coherent when it can be, then in system memory, then write-combined"
    );
    // Readback: on a discrete device system memory first (never through the BAR); then VMA's
    // cost (cached preferred, device-local not), coherent or not; then coherent.
    let readback_key = |t: u32| {
        let f = flags(device, t);
        (
            !plan.uma && f.contains(F::DEVICE_LOCAL),
            vma_cost(f, F::HOST_CACHED, F::DEVICE_LOCAL),
            !f.contains(F::HOST_COHERENT),
        )
    };
    assert_eq!(
        Some(readback_key(plan.readback_type)),
        eligible.iter().map(|&t| readback_key(t)).min(),
        "readback is in system memory on a discrete device, then cached when it can be"
    );

    // The arena and its heap.
    assert_eq!(plan.arena_heap, heap_of(device, plan.arena_type));
    assert_eq!(plan.prealloc_heap, plan.arena_heap);
    assert_eq!(plan.heap_bytes, heap_size(device, plan.arena_heap));
    assert_eq!(
        plan.arena_host_visible,
        flags(device, plan.arena_type).contains(F::HOST_VISIBLE)
    );
    let device_local = usable_with(memory, F::DEVICE_LOCAL);
    if !plan.uma && !device_local.is_empty() {
        assert!(
            flags(device, plan.arena_type).contains(F::DEVICE_LOCAL),
            "arena in VRAM"
        );
    }
    let plain_on_arena_heap = device_local.iter().any(|&t| {
        heap_of(device, t) == plan.arena_heap && !flags(device, t).contains(F::HOST_VISIBLE)
    });
    if !plan.uma && plain_on_arena_heap {
        assert!(
            !plan.arena_host_visible,
            "discrete arena is plain VRAM when it can be"
        );
    }
    let mappable_on_arena_heap = usable_with(memory, F::DEVICE_LOCAL | F::HOST_VISIBLE)
        .iter()
        .any(|&t| heap_of(device, t) == plan.arena_heap);
    if plan.uma && mappable_on_arena_heap {
        assert!(
            plan.arena_host_visible,
            "UMA arena is host-visible when it can be"
        );
    }

    // BAR.
    let mappable = usable_with(memory, F::DEVICE_LOCAL | F::HOST_VISIBLE);
    assert_eq!(plan.bar == BarClass::None, mappable.is_empty());
    assert_eq!(plan.bar_type.is_some(), plan.bar != BarClass::None);
    assert_eq!(plan.bar_heap.is_some(), plan.bar != BarClass::None);
    if let (Some(ty), Some(heap)) = (plan.bar_type, plan.bar_heap) {
        assert!(flags(device, ty).contains(F::DEVICE_LOCAL | F::HOST_VISIBLE));
        assert_eq!(heap_of(device, ty), heap);
    }
    if plan.bar == BarClass::Small {
        let window = plan.bar_heap.unwrap();
        let off_window = usable_with(memory, F::HOST_VISIBLE)
            .iter()
            .any(|&t| heap_of(device, t) != window);
        if off_window {
            assert_ne!(
                heap_of(device, plan.upload_type),
                window,
                "upload stays off the window"
            );
            assert_ne!(
                heap_of(device, plan.readback_type),
                window,
                "readback stays off it"
            );
        }
    }

    check_pinned_host(device, plan);

    // Preallocation: bounded, aligned, monotone in the fraction.
    assert!(plan.reservable_bytes <= plan.heap_bytes);
    let mut last = 0;
    for fraction in [0.0, 0.1, 0.5, 0.75, 0.8, 0.9, 1.0] {
        let bytes = plan.prealloc_bytes(fraction);
        assert!(bytes >= last, "prealloc grows with the fraction");
        last = bytes;
    }
    for fraction in FRACTIONS {
        let bytes = plan.prealloc_bytes(fraction);
        assert!(
            bytes <= plan.reservable_bytes,
            "prealloc({fraction}) <= reservable"
        );
        assert_eq!(bytes % PREALLOC_ALIGN, 0, "prealloc({fraction}) is aligned");
    }
    assert_eq!(plan.prealloc_bytes(f64::NAN), 0);
    assert_eq!(plan.prealloc_bytes(-1.0), 0);
    assert_eq!(plan.prealloc_bytes(2.0), plan.prealloc_bytes(1.0));
    assert_eq!(
        plan.budget_bytes.is_some(),
        device
            .heap_budgets
            .as_ref()
            .is_some_and(|b| b.len() == memory.heaps.len())
    );

    // Reasons, one per choice at least.
    for prefix in [
        "arena:",
        "upload:",
        "readback:",
        "pinned host:",
        "preallocate from heap",
    ] {
        assert!(
            plan.reasons.iter().any(|r| r.starts_with(prefix)),
            "a reason starts with {prefix:?}: {:#?}",
            plan.reasons
        );
    }

    // Pure and serializable.
    assert_eq!(&plan_memory(device).unwrap(), plan, "same table, same plan");
    let text = serde_json::to_string(plan).unwrap();
    assert_eq!(&serde_json::from_str::<MemoryPlan>(&text).unwrap(), plan);
}

/// The pinned-host kind: off every device-local heap on a discrete GPU (absent only when no
/// host-visible type is), the arena's heap on UMA, host-cached first as for readback.
fn check_pinned_host(device: &DeviceDescription, plan: &MemoryPlan) {
    let memory = &device.memory;
    let device_local_heap = |t: u32| {
        flags(device, t).contains(F::DEVICE_LOCAL)
            || memory.heaps[heap_of(device, t) as usize]
                .flags
                .contains(HeapFlags::DEVICE_LOCAL)
    };
    let mut eligible = usable_with(memory, F::HOST_VISIBLE);
    if !plan.uma {
        eligible.retain(|&t| !device_local_heap(t));
    }
    let Some(host) = &plan.pinned_host else {
        assert!(!plan.uma, "UMA always has the arena's host-visible memory");
        assert!(
            eligible.is_empty(),
            "pinned host is placed when it can be: {eligible:?}"
        );
        return;
    };
    assert_eq!(host.candidates.first(), Some(&host.memory_type));
    let mut sorted = host.candidates.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        {
            let mut e = eligible.clone();
            e.sort_unstable();
            e
        },
        "every eligible type is a candidate, once"
    );
    assert_eq!(host.heap, heap_of(device, host.memory_type));
    assert_eq!(host.heap_bytes, heap_size(device, host.heap));
    let f = flags(device, host.memory_type);
    assert_eq!(
        (host.cached, host.coherent),
        (f.contains(F::HOST_CACHED), f.contains(F::HOST_COHERENT))
    );
    if plan.uma {
        let on_arena_heap = eligible
            .iter()
            .any(|&t| heap_of(device, t) == plan.arena_heap);
        if on_arena_heap {
            assert_eq!(host.heap, plan.arena_heap, "UMA: the arena's heap");
        }
    } else {
        assert!(
            !device_local_heap(host.memory_type),
            "discrete: never a device-local heap"
        );
        if let Some(bar) = plan.bar_type {
            assert!(!host.candidates.contains(&bar), "never the BAR type");
        }
    }
    // Host-cached where the heap has it (the host reads these arrays back), then coherent.
    let key = |t: u32| {
        let f = flags(device, t);
        (
            vma_cost(f, F::HOST_CACHED, F::DEVICE_LOCAL),
            !f.contains(F::HOST_COHERENT),
        )
    };
    let best_on_heap = eligible
        .iter()
        .filter(|&&t| heap_of(device, t) == host.heap)
        .map(|&t| key(t))
        .min();
    assert_eq!(
        Some(key(host.memory_type)),
        best_on_heap,
        "the best type on its heap"
    );
}

#[test]
fn every_table_in_the_data_folder_gets_a_plan_that_keeps_the_invariants() {
    let all = tables();
    assert!(
        all.len() >= 23,
        "the shared tables are all here: {}",
        all.len()
    );
    for (name, device, plan) in &all {
        eprintln!("checking {name}");
        check_invariants(device, plan);
        assert_eq!(
            &DeviceDescription::from_json(&device.to_json()).unwrap(),
            device,
            "{name} round-trips through to_json"
        );
    }
}

#[test]
fn no_amd_table_gets_a_device_coherent_or_uncached_type() {
    let amd = class("AMD", |_, device, _| device.vendor() == Vendor::Amd);
    let mut with_amd_types = 0;
    for (name, device, plan) in &amd {
        let amd_only = F::DEVICE_COHERENT_AMD | F::DEVICE_UNCACHED_AMD;
        if device
            .memory
            .types
            .iter()
            .any(|t| t.flags.intersects(amd_only))
        {
            with_amd_types += 1;
            assert!(
                plan.reasons
                    .iter()
                    .any(|r| r.contains("DEVICE_COHERENT_AMD")),
                "{name} says why it skipped them"
            );
        }
        let chosen = plan
            .arena_candidates
            .iter()
            .chain(&plan.upload_candidates)
            .chain(&plan.readback_candidates)
            .chain(plan.bar_type.as_slice());
        for &ty in chosen {
            assert!(!flags(device, ty).intersects(amd_only), "{name}: type {ty}");
        }
    }
    assert!(
        with_amd_types >= 5,
        "the AMD tables with such types are covered"
    );
}

#[test]
fn small_bar_discrete_tables_keep_the_window_out_of_the_arena_and_staging() {
    let small = class("discrete small BAR", |_, device, plan| {
        device.device_kind == DeviceKind::Discrete && plan.bar == BarClass::Small
    });
    assert!(
        small.len() >= 7,
        "four NVIDIA and three AMD small-BAR tables"
    );
    for (name, device, plan) in &small {
        let window = plan.bar_heap.unwrap();
        assert!(
            heap_size(device, window) < SMALL_BAR_MAX,
            "{name}: the window is small"
        );
        assert!(
            heap_size(device, window) <= 300 << 20,
            "{name}: ~256 MiB or less"
        );
        for (what, candidates) in [
            ("arena", &plan.arena_candidates),
            ("upload", &plan.upload_candidates),
            ("readback", &plan.readback_candidates),
        ] {
            for &ty in candidates.iter() {
                assert_ne!(heap_of(device, ty), window, "{name}: {what} candidate {ty}");
            }
        }
        assert!(
            !flags(device, plan.upload_type).contains(F::DEVICE_LOCAL),
            "{name}"
        );
        assert!(
            plan.reasons.iter().any(|r| r.starts_with("small BAR")),
            "{name}"
        );
    }
}

#[test]
fn discrete_tables_put_the_arena_in_plain_vram_on_the_largest_device_local_heap() {
    let discrete = class("discrete", |_, device, _| {
        device.device_kind == DeviceKind::Discrete
    });
    for (name, device, plan) in &discrete {
        assert!(!plan.uma, "{name}");
        let arena = flags(device, plan.arena_type);
        assert!(
            arena.contains(F::DEVICE_LOCAL),
            "{name}: arena is device-local"
        );
        let plain_exists = usable_with(&device.memory, F::DEVICE_LOCAL)
            .iter()
            .any(|&t| !flags(device, t).contains(F::HOST_VISIBLE));
        if plain_exists {
            assert!(
                !arena.contains(F::HOST_VISIBLE),
                "{name}: arena is not host-visible"
            );
        }
        let largest = device
            .memory
            .heaps
            .iter()
            .filter(|h| h.flags.contains(HeapFlags::DEVICE_LOCAL))
            .map(|h| h.size)
            .max()
            .unwrap();
        assert_eq!(
            plan.heap_bytes, largest,
            "{name}: the largest device-local heap"
        );
        assert!(!plan.arena_host_visible, "{name}");
        assert!(
            !flags(device, plan.upload_type).contains(F::DEVICE_LOCAL),
            "{name}: staging in host memory"
        );
        assert!(
            flags(device, plan.readback_type).contains(F::HOST_CACHED),
            "{name}: cached readback"
        );
    }
}

#[test]
fn full_bar_discrete_tables_name_the_bar_type_on_the_arena_heap() {
    let full = class("discrete full BAR", |_, device, plan| {
        device.device_kind == DeviceKind::Discrete && plan.bar == BarClass::Full
    });
    assert!(full.len() >= 5, "H200, two NVIDIA and two AMD ReBAR tables");
    for (name, device, plan) in &full {
        assert_eq!(
            plan.bar_heap,
            Some(plan.arena_heap),
            "{name}: the BAR is all of VRAM"
        );
        let bar = flags(device, plan.bar_type.unwrap());
        assert!(
            bar.contains(F::DEVICE_LOCAL | F::HOST_VISIBLE | F::HOST_COHERENT),
            "{name}"
        );
        assert!(
            plan.reasons.iter().any(|r| r.starts_with("full BAR")),
            "{name}"
        );
    }
}

#[test]
fn file_names_that_say_smallbar_or_rebar_agree_with_the_bar_class() {
    for (name, _, plan) in tables() {
        if name.contains("smallbar") {
            assert_eq!(plan.bar, BarClass::Small, "{name}");
        }
        if name.contains("rebar") {
            assert_eq!(plan.bar, BarClass::Full, "{name}");
        }
    }
}

#[test]
fn the_h200_plan_is_full_bar_with_three_quarters_of_its_vram_heap() {
    let h200 = class("NVIDIA H200", |_, device, _| device.name == "NVIDIA H200");
    let (_, device, plan) = &h200[0];
    assert_eq!(plan.vendor, Vendor::Nvidia);
    assert_eq!(plan.bar, BarClass::Full);
    assert_eq!(
        plan.bar_type,
        Some(4),
        "type 4 is DL|HV|HC on the VRAM heap"
    );
    assert_eq!(plan.heap_bytes, 150_754_820_096);
    assert_eq!(plan.prealloc_heap, 0);
    let want = (0.75 * 150_754_820_096_f64) as u64 / PREALLOC_ALIGN * PREALLOC_ALIGN;
    assert_eq!(plan.prealloc_bytes(0.75), want);
    assert_eq!(want, 113_066_115_072);
    assert_eq!(
        plan.reservable_bytes,
        150_754_820_096 / 10 * 8 + 150_754_820_096 % 10 * 8 / 10
    );
    assert!(flags(device, plan.arena_type) == F::DEVICE_LOCAL);
}

#[test]
fn uma_tables_map_the_arena() {
    let uma = class("UMA", |_, device, _| {
        matches!(device.device_kind, DeviceKind::Integrated | DeviceKind::Cpu)
    });
    assert!(uma.len() >= 11);
    for (name, device, plan) in &uma {
        assert!(plan.uma, "{name}");
        assert!(plan.arena_host_visible, "{name}: zero-copy puts and gets");
        let arena = flags(device, plan.arena_type);
        assert!(
            arena.contains(F::HOST_VISIBLE | F::HOST_COHERENT),
            "{name}: coherent arena"
        );
        // Write-combined where the table offers it, on the arena's heap.
        let write_combined_on_heap =
            usable_with(&device.memory, F::HOST_VISIBLE | F::HOST_COHERENT)
                .iter()
                .any(|&t| {
                    heap_of(device, t) == plan.arena_heap
                        && !flags(device, t).contains(F::HOST_CACHED)
                });
        assert_eq!(
            !arena.contains(F::HOST_CACHED),
            write_combined_on_heap,
            "{name}"
        );
    }
}

#[test]
fn uma_tables_with_a_small_device_local_carve_out_put_the_arena_on_the_host_heap() {
    let largest = |device: &DeviceDescription, device_local: bool| {
        device
            .memory
            .heaps
            .iter()
            .filter(|h| h.flags.contains(HeapFlags::DEVICE_LOCAL) == device_local)
            .map(|h| h.size)
            .max()
            .unwrap_or(0)
    };
    let carve_out = class("UMA with a carve-out", |_, device, plan| {
        plan.uma && largest(device, false) > 2 * largest(device, true)
    });
    assert!(carve_out
        .iter()
        .any(|(name, ..)| name == "amd-igpu-amdwin-256m.json"));
    for (name, device, plan) in &carve_out {
        let heap = &device.memory.heaps[plan.arena_heap as usize];
        assert!(
            !heap.flags.contains(HeapFlags::DEVICE_LOCAL),
            "{name}: host heap"
        );
        assert_eq!(
            heap.size,
            largest(device, false),
            "{name}: the largest host heap"
        );
        assert!(
            plan.prealloc_bytes(0.75) > largest(device, true),
            "{name}: more than the whole carve-out"
        );
        assert!(
            plan.reasons.iter().any(|r| r.contains("carve-out")),
            "{name} says why"
        );
    }
    // Every other UMA table keeps the arena on device-local memory.
    for (name, device, plan) in tables() {
        if plan.uma && largest(&device, false) <= 2 * largest(&device, true) {
            assert!(
                flags(&device, plan.arena_type).contains(F::DEVICE_LOCAL),
                "{name}"
            );
        }
    }
}

#[test]
fn single_heap_uma_tables_use_their_one_heap_for_everything() {
    let single = class(
        "single-heap UMA (Intel, Apple, lavapipe)",
        |_, device, plan| plan.uma && device.memory.heaps.len() == 1,
    );
    assert!(single.len() >= 8);
    for (name, device, plan) in &single {
        assert_eq!(
            plan.bar,
            BarClass::Full,
            "{name}: all of it is host-visible"
        );
        assert_eq!(plan.prealloc_heap, 0, "{name}");
        assert_eq!(plan.heap_bytes, device.memory.heaps[0].size, "{name}");
        if usable_with(&device.memory, F::HOST_VISIBLE | F::HOST_CACHED).is_empty() {
            continue;
        }
        assert!(
            flags(device, plan.readback_type).contains(F::HOST_CACHED),
            "{name}: cached readback"
        );
    }
}

#[test]
fn lavapipe_is_uma_with_one_type_for_arena_and_staging() {
    let lavapipe = class("lavapipe", |_, device, _| {
        device.device_kind == DeviceKind::Cpu || device.vendor() == Vendor::Mesa
    });
    assert!(lavapipe.len() >= 2);
    for (name, _, plan) in &lavapipe {
        assert!(plan.uma && plan.arena_host_visible, "{name}");
        assert_eq!(
            (plan.arena_type, plan.upload_type, plan.readback_type),
            (0, 0, 0),
            "{name}"
        );
        assert_eq!(
            plan.prealloc_bytes(0.75),
            plan.heap_bytes / 4 * 3 / 256 * 256,
            "{name}"
        );
    }
}

#[test]
fn apple_and_intel_tables_skip_lazy_and_protected_types() {
    let tables = class("Apple or Intel", |_, device, _| {
        matches!(device.vendor(), Vendor::Apple | Vendor::Intel)
    });
    let mut skipped = 0;
    for (name, device, plan) in &tables {
        for (i, ty) in device.memory.types.iter().enumerate() {
            if ty.flags.intersects(F::LAZILY_ALLOCATED | F::PROTECTED) {
                skipped += 1;
                let all = plan.arena_candidates.iter().chain(&plan.upload_candidates);
                assert!(all.copied().all(|t| t as usize != i), "{name}: type {i}");
                assert!(
                    plan.reasons
                        .iter()
                        .any(|r| r.contains(&format!("type {i}:"))),
                    "{name}"
                );
            }
        }
    }
    assert!(skipped >= 3, "M1, M2 (lazy) and RPL-U (protected)");
}

#[test]
fn upload_is_write_combined_and_readback_cached_wherever_the_table_allows() {
    for (name, device, plan) in tables() {
        let memory = &device.memory;
        let wc_exists = usable_with(memory, F::HOST_VISIBLE | F::HOST_COHERENT)
            .iter()
            .any(|&t| !flags(&device, t).contains(F::HOST_CACHED));
        assert_eq!(
            !flags(&device, plan.upload_type).contains(F::HOST_CACHED),
            wc_exists,
            "{name}"
        );
        let cached_exists = !usable_with(memory, F::HOST_VISIBLE | F::HOST_CACHED).is_empty();
        assert_eq!(
            flags(&device, plan.readback_type).contains(F::HOST_CACHED),
            cached_exists,
            "{name}"
        );
    }
}

/// A table of the data folder by file name.
fn table(file: &str) -> DeviceDescription {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/memprops")
        .join(file);
    DeviceDescription::from_json(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn the_apple_m1_reads_back_through_cached_memory_and_ranks_its_non_coherent_cached_type_next() {
    let device = table("apple-m1-moltenvk.json");
    assert_eq!(
        flags(&device, 2),
        F::DEVICE_LOCAL | F::HOST_VISIBLE | F::HOST_CACHED,
        "type 2 is cached and not coherent"
    );
    let plan = plan_memory(&device).unwrap();
    check_invariants(&device, &plan);
    assert!(
        flags(&device, plan.readback_type).contains(F::HOST_CACHED),
        "cached readback"
    );
    // Types 1 and 2 are both cached; type 1 is coherent too, so it wins the tie and type 2,
    // which the old policy refused, follows as the next candidate.
    assert_eq!(plan.readback_candidates, [1, 2]);
    assert!(plan.readback_coherent);
    assert!(plan.upload_candidates.contains(&2));
}

#[test]
fn an_m1_whose_coherent_type_is_uncached_reads_back_through_the_non_coherent_cached_type() {
    // MoltenVK's shared memory as an uncached driver would report it, and ARM Mali's layout:
    // the only cached type is not coherent. The old policy read back through uncached memory.
    let mut device = table("apple-m1-moltenvk.json");
    device.memory.types[1].flags = F::DEVICE_LOCAL | F::HOST_VISIBLE | F::HOST_COHERENT;
    let plan = plan_memory(&device).unwrap();
    check_invariants(&device, &plan);
    assert_eq!(plan.readback_type, 2);
    assert!(!plan.readback_coherent);
    let reason = plan
        .reasons
        .iter()
        .find(|r| r.starts_with("readback:"))
        .unwrap();
    assert!(reason.contains("host-cached"), "{reason}");
    assert!(reason.contains("not HOST_COHERENT"), "{reason}");
    assert!(
        reason.contains("vkInvalidateMappedMemoryRanges"),
        "{reason}"
    );
    // Uploads and the arena stay on the coherent write-combined type.
    assert_eq!((plan.upload_type, plan.arena_type), (1, 1));
    assert!(plan.upload_coherent);
}

#[test]
fn full_bar_discrete_tables_offer_direct_writes_in_their_bar_type() {
    let full = class("discrete full BAR", |_, device, plan| {
        device.device_kind == DeviceKind::Discrete && plan.bar == BarClass::Full
    });
    for (name, device, plan) in &full {
        let candidates = plan
            .bar_write_candidates()
            .unwrap_or_else(|| panic!("{name}: full BAR offers direct writes"));
        assert_eq!(candidates[0], plan.bar_type.unwrap(), "{name}");
        assert_eq!(heap_of(device, candidates[0]), plan.arena_heap, "{name}");
        assert!(
            flags(device, candidates[0]).contains(F::DEVICE_LOCAL | F::HOST_VISIBLE),
            "{name}"
        );
        // The plain VRAM type follows, so a region the BAR type cannot hold still works.
        assert_eq!(candidates[1], plan.arena_type, "{name}");
        let mut sorted = candidates.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), candidates.len(), "{name}: no duplicates");
    }
    let h200 = plan_memory(&table("nvidia-h200-linux-580.json")).unwrap();
    assert_eq!(h200.bar_write_candidates(), Some(vec![4, 1]));
    let rebar = plan_memory(&table("nvidia-rtx4060-linux-rebar.json")).unwrap();
    assert_eq!(rebar.bar_write_candidates(), Some(vec![4, 1]));
    let sam = plan_memory(&table("amd-rx6700xt-amdgpupro-rebar.json")).unwrap();
    assert_eq!(sam.bar_write_candidates().unwrap()[0], 2);
}

#[test]
fn small_bar_uma_and_software_tables_offer_no_direct_writes() {
    for (name, _, plan) in tables() {
        if plan.uma || plan.bar != BarClass::Full {
            assert_eq!(plan.bar_write_candidates(), None, "{name}");
        }
    }
}

/// The RX 6600 (RADV, small BAR) table with a budget appended.
fn with_budgets(budgets: &str) -> DeviceDescription {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/memprops/amd-rx6600-radv-smallbar.json"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let text = text.trim_end().trim_end_matches('}').to_string()
        + &format!(r#", "heap_budgets": {budgets}}}"#);
    DeviceDescription::from_json(&text).unwrap()
}

#[test]
fn a_memory_budget_caps_what_the_arena_may_take() {
    let device = with_budgets(
        r#"[{"budget": 6000000000, "usage": 1000000000}, {"budget": 1, "usage": 0}, {"budget": 1, "usage": 0}]"#,
    );
    assert_eq!(
        device.heap_budgets.as_deref().unwrap()[0],
        HeapBudget {
            budget: 6_000_000_000,
            usage: 1_000_000_000
        }
    );
    let plan = plan_memory(&device).unwrap();
    check_invariants(&device, &plan);
    assert_eq!(plan.budget_bytes, Some(6_000_000_000));
    assert_eq!(plan.reservable_bytes, 5_000_000_000);
    assert_eq!(plan.prealloc_bytes(0.75), 5_000_000_000 / 256 * 256);
    assert!(plan.reasons.iter().any(|r| r.contains("budget")));
}

#[test]
fn a_budget_larger_than_the_heap_is_capped_by_the_heap_and_an_overspent_one_gives_nothing() {
    let device = with_budgets(
        r#"[{"budget": 99000000000, "usage": 0}, {"budget": 1, "usage": 0}, {"budget": 1, "usage": 0}]"#,
    );
    let plan = plan_memory(&device).unwrap();
    assert_eq!(plan.reservable_bytes, plan.heap_bytes);
    assert_eq!(
        plan.prealloc_bytes(0.75),
        plan.heap_bytes / 4 * 3 / 256 * 256
    );

    let device = with_budgets(
        r#"[{"budget": 100, "usage": 200}, {"budget": 1, "usage": 0}, {"budget": 1, "usage": 0}]"#,
    );
    let plan = plan_memory(&device).unwrap();
    assert_eq!((plan.reservable_bytes, plan.prealloc_bytes(0.75)), (0, 0));
}

#[test]
fn a_budget_list_of_the_wrong_length_is_ignored_and_said() {
    let device = with_budgets(r#"[{"budget": 100, "usage": 0}]"#);
    let plan = plan_memory(&device).unwrap();
    check_invariants(&device, &plan);
    assert_eq!(plan.budget_bytes, None);
    assert_eq!(
        plan.reservable_bytes,
        plan.heap_bytes / 10 * 8 + plan.heap_bytes % 10 * 8 / 10
    );
    assert!(
        plan.reasons
            .iter()
            .any(|r| r.contains("1 entries for 3 heaps")),
        "{:#?}",
        plan.reasons
    );
}

#[test]
fn virtual_devices_are_uma_only_when_the_table_looks_it() {
    for (name, mut device, plan) in tables() {
        device.device_kind = DeviceKind::Virtual;
        let as_virtual = plan_memory(&device).unwrap();
        check_invariants(&device, &as_virtual);
        let host_heap = device
            .memory
            .heaps
            .iter()
            .any(|h| h.size > 0 && !h.flags.contains(HeapFlags::DEVICE_LOCAL));
        assert_eq!(as_virtual.uma, !host_heap, "{name}");
        if plan.device_kind == DeviceKind::Discrete {
            assert_eq!(
                as_virtual.arena_type, plan.arena_type,
                "{name}: same choice as discrete"
            );
        }
    }
}

// ---- Random tables of the same shape ----

/// Heap sizes that matter: empty, BAR windows, carve-outs, real VRAM, and extremes.
fn heap_size_strategy() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0),
        Just(224_395_264),
        Just(256 << 20),
        Just(2 * GIB),
        Just(8 * GIB),
        Just(150_754_820_096),
        Just(u64::MAX),
        1..64 * GIB,
        any::<u64>(),
    ]
}

/// Type flags: mostly combinations of the four usable flags, sometimes any Vulkan bits.
fn type_flags_strategy() -> impl Strategy<Value = F> {
    prop_oneof![
        4 => (0u32..16).prop_map(F),
        1 => (0u32..0x100).prop_map(F),
        1 => any::<u32>().prop_map(F),
    ]
}

fn device_strategy() -> impl Strategy<Value = DeviceDescription> {
    let heaps = prop::collection::vec((heap_size_strategy(), 0u32..4), 0..6);
    heaps.prop_flat_map(|heaps| {
        let count = heaps.len() as u32;
        // Mostly heaps that exist; now and then one past the end.
        let heap_index = prop_oneof![30 => 0..count.max(1), 1 => 0..count + 1];
        let types = prop::collection::vec((heap_index, type_flags_strategy()), 0..36);
        let budget_count = prop_oneof![4 => Just(heaps.len()), 1 => 0..6usize];
        let budgets = prop::option::of(
            budget_count.prop_flat_map(|n| prop::collection::vec((any::<u64>(), any::<u64>()), n)),
        );
        let kind = prop_oneof![
            Just(DeviceKind::Discrete),
            Just(DeviceKind::Integrated),
            Just(DeviceKind::Cpu),
            Just(DeviceKind::Virtual),
            Just(DeviceKind::Other),
        ];
        let vendor = prop_oneof![
            Just(0x1002u32),
            Just(0x10de),
            Just(0x8086),
            Just(0x106b),
            Just(0x10005),
            any::<u32>(),
        ];
        (Just(heaps), types, budgets, kind, vendor).prop_map(
            |(heaps, types, budgets, device_kind, vendor_id)| DeviceDescription {
                name: "random".to_string(),
                vendor_id,
                device_kind,
                memory: MemoryProperties {
                    heaps: heaps
                        .into_iter()
                        .map(|(size, flags)| MemoryHeap {
                            size,
                            flags: HeapFlags(flags),
                        })
                        .collect(),
                    types: types
                        .into_iter()
                        .map(|(heap, flags)| MemoryType { heap, flags })
                        .collect(),
                },
                heap_budgets: budgets.map(|b| {
                    b.into_iter()
                        .map(|(budget, usage)| HeapBudget { budget, usage })
                        .collect()
                }),
            },
        )
    })
}

proptest! {
    // No failure file: integration tests have no lib.rs for proptest to put it beside.
    #![proptest_config(ProptestConfig {
        cases: 2000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_tables_plan_or_fail_for_a_stated_reason_and_never_panic(device in device_strategy()) {
        let memory = &device.memory;
        let result = plan_memory(&device);
        let heap_missing = memory.types.iter().any(|t| t.heap as usize >= memory.heaps.len());
        match result {
            Err(MemPlanError::NoMemoryTypes { .. }) => prop_assert!(memory.types.is_empty()),
            Err(MemPlanError::TooManyTypes { count, .. }) => prop_assert!(count > 32),
            Err(MemPlanError::HeapOutOfRange { .. }) => prop_assert!(heap_missing),
            Err(MemPlanError::NoHostVisibleType { .. }) => {
                prop_assert!(!heap_missing && memory.types.len() <= 32);
                prop_assert!(usable_with(memory, F::HOST_VISIBLE).is_empty());
            }
            Err(other) => prop_assert!(false, "unexpected error {other}"),
            Ok(plan) => {
                prop_assert!(!memory.types.is_empty() && memory.types.len() <= 32 && !heap_missing);
                prop_assert!(!usable_with(memory, F::HOST_VISIBLE).is_empty());
                check_invariants(&device, &plan);
            }
        }
    }

    /// `fraction × heap_bytes` exactly on heaps of any size (f64 alone rounds above 2^53),
    /// with fractions of the form k / 2^20, which f64 holds exactly.
    #[test]
    fn prealloc_is_the_exact_fraction_of_any_heap(heap in any::<u64>(), k in 0u64..=1 << 20) {
        let mut plan = tables().swap_remove(0).2;
        (plan.heap_bytes, plan.reservable_bytes) = (heap, heap);
        let exact = (u128::from(heap) * u128::from(k)) >> 20;
        let want = u64::try_from(exact).unwrap() / PREALLOC_ALIGN * PREALLOC_ALIGN;
        prop_assert_eq!(plan.prealloc_bytes(k as f64 / (1u64 << 20) as f64), want);
    }

    #[test]
    fn random_tables_round_trip_through_json(device in device_strategy()) {
        let again = DeviceDescription::from_json(&device.to_json()).unwrap();
        prop_assert_eq!(again, device);
    }

    #[test]
    fn ranking_matches_a_sort_by_vma_cost_then_index(
        device in device_strategy(),
        required in 0u32..16,
        preferred in 0u32..16,
        not_preferred in 0u32..16,
    ) {
        let request = MemoryRequest {
            required: F(required),
            preferred: F(preferred),
            not_preferred: F(not_preferred),
        };
        let memory = &device.memory;
        let mut model: Vec<(u32, u32)> = (0..memory.types.len())
            .filter(|&i| usable(memory, i) && memory.types[i].flags.0 & required == required)
            .map(|i| {
                let f = memory.types[i].flags.0;
                let cost = (preferred & !f).count_ones() + (not_preferred & f).count_ones();
                (cost, i as u32)
            })
            .collect();
        model.sort();
        let model: Vec<u32> = model.into_iter().map(|(_, i)| i).collect();
        prop_assert_eq!(request.rank(memory), model);
    }

    #[test]
    fn appending_an_unusable_type_changes_nothing_but_the_reasons(
        device in device_strategy(),
        bad in prop_oneof![
            Just(F::DEVICE_COHERENT_AMD | F::DEVICE_UNCACHED_AMD | F::DEVICE_LOCAL | F::HOST_VISIBLE),
            Just(F::PROTECTED | F::DEVICE_LOCAL),
            Just(F::LAZILY_ALLOCATED | F::DEVICE_LOCAL),
        ],
    ) {
        prop_assume!(device.memory.types.len() < 32 && !device.memory.heaps.is_empty());
        let Ok(before) = plan_memory(&device) else { return Ok(()) };
        let mut more = device.clone();
        more.memory.types.push(MemoryType { heap: 0, flags: bad });
        let mut after = plan_memory(&more).unwrap();
        after.reasons = before.reasons.clone();
        prop_assert_eq!(after, before);
    }
}

#[test]
fn the_pinned_host_kind_is_system_memory_on_discrete_tables_and_the_arena_heap_on_uma() {
    let discrete = class("discrete", |_, _, plan| !plan.uma);
    for (name, device, plan) in &discrete {
        let host = plan
            .pinned_host
            .as_ref()
            .unwrap_or_else(|| panic!("{name}: every real discrete table has a system heap"));
        let heap = &device.memory.heaps[host.heap as usize];
        assert!(!heap.flags.contains(HeapFlags::DEVICE_LOCAL), "{name}");
        assert_ne!(host.heap, plan.arena_heap, "{name}: not the VRAM heap");
        assert!(
            host.cached,
            "{name}: real drivers offer cached system memory"
        );
    }
    let uma = class("UMA", |_, _, plan| plan.uma);
    for (name, _, plan) in &uma {
        let host = plan.pinned_host.as_ref().expect("UMA has host memory");
        assert_eq!(
            host.heap, plan.arena_heap,
            "{name}: the same DRAM as the arena"
        );
    }
    let h200 = table("nvidia-h200-linux-580.json");
    let plan = plan_memory(&h200).unwrap();
    assert_eq!(
        plan.pinned_host,
        Some(PinnedHostPlan {
            memory_type: 3,
            heap: 1,
            heap_bytes: h200.memory.heaps[1].size,
            candidates: vec![3, 2],
            cached: true,
            coherent: true,
        })
    );
}

#[test]
fn a_discrete_table_whose_host_visible_memory_is_all_device_local_has_no_pinned_host_kind() {
    let device = DeviceDescription {
        name: "BAR only".into(),
        vendor_id: 0x10de,
        device_kind: DeviceKind::Discrete,
        memory: MemoryProperties {
            heaps: vec![MemoryHeap {
                size: 8 * GIB,
                flags: HeapFlags::DEVICE_LOCAL,
            }],
            types: vec![
                MemoryType {
                    heap: 0,
                    flags: F::DEVICE_LOCAL,
                },
                MemoryType {
                    heap: 0,
                    flags: F::DEVICE_LOCAL | F::HOST_VISIBLE | F::HOST_COHERENT,
                },
            ],
        },
        heap_budgets: None,
    };
    let plan = plan_memory(&device).unwrap();
    assert_eq!(plan.pinned_host, None);
    assert!(
        plan.reasons
            .iter()
            .any(|r| r.starts_with("pinned host: none")),
        "{:#?}",
        plan.reasons
    );
}

#[test]
fn a_uma_table_whose_arena_heap_cannot_be_mapped_puts_the_pinned_host_kind_on_host_memory() {
    let device = DeviceDescription {
        name: "UMA, unmappable arena heap".into(),
        vendor_id: 0x8086,
        device_kind: DeviceKind::Integrated,
        memory: MemoryProperties {
            heaps: vec![
                MemoryHeap {
                    size: 2 * GIB,
                    flags: HeapFlags::DEVICE_LOCAL,
                },
                MemoryHeap {
                    size: GIB,
                    flags: HeapFlags::empty(),
                },
            ],
            types: vec![
                MemoryType {
                    heap: 0,
                    flags: F::DEVICE_LOCAL,
                },
                MemoryType {
                    heap: 1,
                    flags: F::HOST_VISIBLE | F::HOST_COHERENT,
                },
            ],
        },
        heap_budgets: None,
    };
    let plan = plan_memory(&device).unwrap();
    assert!(plan.uma && !plan.arena_host_visible);
    let host = plan.pinned_host.as_ref().expect("host memory exists");
    assert_eq!((host.memory_type, host.heap), (1, 1));
    let reason = plan
        .reasons
        .iter()
        .find(|r| r.starts_with("pinned host:"))
        .unwrap();
    assert!(
        reason.contains("the arena's heap has no host-visible type"),
        "{reason}"
    );
}

#[test]
fn a_uma_arena_is_coherent_where_a_coherent_type_is_there_cached_or_not() {
    let memory_type = |heap, flags| MemoryType { heap, flags };
    let mappable = F::DEVICE_LOCAL | F::HOST_VISIBLE;
    let uma = |heaps: Vec<MemoryHeap>, types, device_kind| DeviceDescription {
        name: "UMA, a non-coherent type first".into(),
        vendor_id: 0x1002,
        device_kind,
        memory: MemoryProperties { heaps, types },
        heap_budgets: None,
    };
    let one_heap = || {
        vec![MemoryHeap {
            size: GIB,
            flags: HeapFlags::DEVICE_LOCAL,
        }]
    };
    for kind in [DeviceKind::Integrated, DeviceKind::Cpu] {
        // The only coherent type is cached: coherent wins over write-combined.
        let types = vec![
            memory_type(0, mappable),
            memory_type(0, mappable | F::HOST_COHERENT | F::HOST_CACHED),
        ];
        let plan = plan_memory(&uma(one_heap(), types, kind)).unwrap();
        assert!(plan.uma);
        assert_eq!(plan.arena_type, 1, "{:#?}", plan.reasons);
        // Among coherent types, write-combined still comes first.
        let types = vec![
            memory_type(0, mappable),
            memory_type(0, mappable | F::HOST_COHERENT | F::HOST_CACHED),
            memory_type(0, mappable | F::HOST_COHERENT),
        ];
        let plan = plan_memory(&uma(one_heap(), types, kind)).unwrap();
        assert_eq!(plan.arena_type, 2, "{:#?}", plan.reasons);
    }
    // A tiny carve-out puts the arena on the host heap: coherent there too.
    let heaps = vec![
        MemoryHeap {
            size: 256 << 20,
            flags: HeapFlags::DEVICE_LOCAL,
        },
        MemoryHeap {
            size: 16 * GIB,
            flags: HeapFlags::empty(),
        },
    ];
    let types = vec![
        memory_type(0, F::DEVICE_LOCAL),
        memory_type(1, F::HOST_VISIBLE),
        memory_type(1, F::HOST_VISIBLE | F::HOST_COHERENT | F::HOST_CACHED),
    ];
    let plan = plan_memory(&uma(heaps, types, DeviceKind::Integrated)).unwrap();
    assert_eq!(
        (plan.arena_type, plan.arena_heap),
        (2, 1),
        "{:#?}",
        plan.reasons
    );
}
