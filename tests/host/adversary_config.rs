//! Hostile input for the pure-CPU parts: configuration read from variables (through
//! `ArenaConfig::from_lookup`, never the process environment), memory fractions, memory tables
//! that no driver would report, arena options at the edges of `u64`, and checkpointing plans
//! whose reported peak must agree with replaying them. Every refusal must be a typed error,
//! never a panic.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

use gpu_arena::arena::{
    Arena, ArenaError, ArenaMode, ArenaOptions, ChunkState, VirtualRegions, ALLOCATION_ALIGNMENT,
};
use gpu_arena::config::{MemFraction, MemFractionError};
use gpu_arena::memplan::{
    plan_memory, DeviceDescription, DeviceKind, HeapBudget, HeapFlags, MemPlanError, MemoryHeap,
    MemoryProperties, MemoryType, MemoryTypeFlags as F,
};
use gpu_arena::remat::{BackwardReads, Chain, CheckpointPolicy, Layer, RematError};
use gpu_arena::{ArenaConfig, Error};

use crate::config_variables::EVERY_VARIABLE;
use proptest::prelude::*;

fn config_from(pairs: &[(&str, &str)]) -> gpu_arena::Result<ArenaConfig> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    ArenaConfig::from_lookup(|name| map.get(name).cloned())
}

fn refused_variable(pairs: &[(&str, &str)]) -> String {
    match config_from(pairs) {
        Err(Error::Config { variable, .. }) => variable,
        other => panic!("{pairs:?}: expected a config error, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Configuration

/// The list of every variable is exact: every variable name the configuration's reader spells
/// out is in it, and every name in it is one the reader spells out or a transfer guard's
/// per-direction name (built from the direction's suffix, which `guard_levels.rs` spells).
#[test]
fn the_list_names_every_variable_the_reader_spells_out_and_no_other() {
    let reader = include_str!("../../src/config/env.rs");
    let suffixes = include_str!("../../src/guard_levels.rs");
    let quoted = |source: &str, text: &str| source.contains(&format!("\"{text}\""));
    let named = reader.split('"').filter(|text| {
        ["GPU_ARENA_", "XLA_", "JAX_"]
            .iter()
            .any(|prefix| text.starts_with(prefix))
            && text.bytes().all(|b| b.is_ascii_uppercase() || b == b'_')
    });
    let mut count = 0;
    for variable in named {
        assert!(
            EVERY_VARIABLE.contains(&variable),
            "{variable} is not listed"
        );
        count += 1;
    }
    assert!(count >= 20, "found only {count} names in the reader");
    for variable in EVERY_VARIABLE {
        let per_direction = ["GPU_ARENA_TRANSFER_GUARD_", "JAX_TRANSFER_GUARD_"]
            .iter()
            .filter_map(|prefix| variable.strip_prefix(prefix))
            .any(|suffix| quoted(suffixes, suffix));
        assert!(
            quoted(reader, variable) || per_direction,
            "{variable} is listed but the reader does not read it"
        );
    }
}

#[test]
fn blank_and_whitespace_values_are_refused_for_every_documented_variable() {
    for variable in EVERY_VARIABLE {
        for blank in ["", " ", "\t\n", "\u{3000}"] {
            assert_eq!(
                refused_variable(&[(variable, blank)]),
                variable,
                "{variable}={blank:?}"
            );
        }
    }
}

#[test]
fn numbers_near_the_edges_of_64_bits_are_refused_or_taken_exactly_never_wrapped() {
    for (variable, value) in [
        ("GPU_ARENA_MAX_BINDING_BYTES", "18446744073709551616"),
        ("GPU_ARENA_MAX_BINDING_BYTES", "-1024"),
        ("GPU_ARENA_MAX_BINDING_BYTES", "1023"),
        ("GPU_ARENA_MAX_BINDING_BYTES", "1e9"),
        ("GPU_ARENA_MAX_BINDING_BYTES", "0x400"),
        ("GPU_ARENA_MAX_WORKGROUPS_PER_DIMENSION", "0"),
        ("GPU_ARENA_MAX_WORKGROUPS_PER_DIMENSION", "-1"),
        (
            "GPU_ARENA_MAX_WORKGROUPS_PER_DIMENSION",
            "18446744073709551615",
        ),
        ("GPU_ARENA_STAGING_MB", "18446744073709551615"),
        ("GPU_ARENA_STAGING_MB", "-64"),
        ("GPU_ARENA_STAGING_MB", "1.5"),
        ("GPU_ARENA_DEVICE_MEMORY_MB", "0"),
        ("GPU_ARENA_DEVICE_MEMORY_MB", "17592186044416"),
        ("GPU_ARENA_MAX_REGION_MB", "0"),
        ("GPU_ARENA_MAX_REGION_MB", "-0"),
        ("GPU_ARENA_TIMELINE", "16777216"),
        ("GPU_ARENA_TIMELINE", "18446744073709551615"),
        ("GPU_ARENA_TIMELINE", "1.0"),
        ("GPU_ARENA_ADAPTER", "18446744073709551616"),
    ] {
        assert_eq!(refused_variable(&[(variable, value)]), variable, "{value}");
    }
    let config = config_from(&[
        ("GPU_ARENA_MAX_BINDING_BYTES", "18446744073709551615"),
        ("GPU_ARENA_MAX_WORKGROUPS_PER_DIMENSION", "4294967295"),
        ("GPU_ARENA_DEVICE_MEMORY_MB", "17592186044415"),
    ])
    .unwrap();
    assert_eq!(config.max_binding_bytes, Some(u64::MAX));
    assert_eq!(config.max_workgroups_per_dimension, Some(u32::MAX));
    assert_eq!(config.fallback_device_memory_bytes, 17592186044415 << 20);
}

/// `GPU_ARENA_TIMELINE`'s refusal says what the guide's table says it takes.
#[test]
fn the_timeline_variables_refusal_lists_what_it_reads() {
    match config_from(&[("GPU_ARENA_TIMELINE", "1.0")]) {
        Err(Error::Config { expected, .. }) => assert_eq!(
            expected,
            "on, off, or a number of events from 2 to 16777215 (the largest ring gpu-arena \
             makes; 1 reads as on and 0 as off, as booleans do)"
        ),
        other => panic!("expected a config error, got {other:?}"),
    }
    let on = config_from(&[("GPU_ARENA_TIMELINE", "1")]).unwrap();
    assert_eq!(
        on.timeline_capacity,
        gpu_arena::config::DEFAULT_TIMELINE_CAPACITY
    );
    let two = config_from(&[("GPU_ARENA_TIMELINE", "2")]).unwrap();
    assert_eq!(two.timeline_capacity, 2);
}

#[test]
fn conflicting_fraction_aliases_are_refused_even_when_one_is_invalid() {
    // With our variable unset, the two JAX spellings must agree before either is parsed.
    match config_from(&[
        ("XLA_CLIENT_MEM_FRACTION", "0.5"),
        ("XLA_PYTHON_CLIENT_MEM_FRACTION", "nan"),
    ]) {
        Err(Error::ConflictingEnv { first, second }) => {
            assert_eq!(first, "XLA_CLIENT_MEM_FRACTION=0.5");
            assert_eq!(second, "XLA_PYTHON_CLIENT_MEM_FRACTION=nan");
        }
        other => panic!("{other:?}"),
    }
    // Our variable wins over two aliases that disagree with each other.
    let config = config_from(&[
        ("GPU_ARENA_MEM_FRACTION", "0.25"),
        ("XLA_CLIENT_MEM_FRACTION", "0.5"),
        ("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.9"),
    ])
    .unwrap();
    assert_eq!(config.mem_fraction, MemFraction::fixed(0.25));
    // Our variable wins, but a bad value of ours is not rescued by a good alias.
    assert_eq!(
        refused_variable(&[
            ("GPU_ARENA_MEM_FRACTION", "1.5"),
            ("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.5"),
        ]),
        "GPU_ARENA_MEM_FRACTION"
    );
}

#[cfg(unix)]
#[test]
fn a_value_that_is_not_utf8_is_refused_for_every_variable_naming_it() {
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;
    for variable in [
        "GPU_ARENA_PREALLOCATE",
        "GPU_ARENA_ADAPTER",
        "GPU_ARENA_DUMP_ON_OOM",
        "JAX_TRANSFER_GUARD_DEVICE_TO_DEVICE",
        "XLA_PYTHON_CLIENT_ALLOCATOR",
        "GPU_ARENA_TIMELINE",
    ] {
        let error = ArenaConfig::from_lookup(|name| {
            (name == variable).then(|| OsString::from_vec(vec![b'/', 0xff, 0xfe]))
        })
        .unwrap_err();
        match error {
            Error::Config {
                variable: named, ..
            } => assert_eq!(named, variable),
            other => panic!("{variable}: {other:?}"),
        }
    }
}

#[test]
fn fraction_text_never_panics_and_whatever_it_accepts_passes_the_check() {
    for text in [
        "-",
        "+",
        "--",
        "-+",
        "+-",
        "0.5--0.6",
        "0.5-+0.6",
        "0.5+-",
        "0.5+0.6",
        "1e-",
        "e-1",
        "1e-1-1e-",
        "-1e-1",
        "1-",
        "-1",
        "1+",
        "+1",
        "++1",
        "0.5-0.5",
        "1-1",
        "1e-400",
        "1e400",
        "4.9e-324",
        "0.5-inf",
        "inf-inf",
        "NaN-NaN",
        "0.5 - 0.6",
        "\u{2212}0.5",
        "0.5\u{2013}0.6",
        "0,5",
        "١",
        "0.5\0",
        "0.5-0.6-0.7",
        "0.1-0.2+",
    ] {
        let parsed = catch_unwind(|| MemFraction::parse(text))
            .unwrap_or_else(|_| panic!("MemFraction::parse({text:?}) panicked"));
        if let Ok(fraction) = parsed {
            fraction
                .check()
                .unwrap_or_else(|why| panic!("{text:?} parsed to {fraction:?} but {why}"));
            assert!(fraction.reserve > 0.0 && fraction.limit <= 1.0, "{text:?}");
            // Its display reads back as the same fraction.
            assert_eq!(
                MemFraction::parse(&fraction.to_string()).as_ref(),
                Ok(&fraction),
                "{text:?}"
            );
        }
    }
    assert!(matches!(
        MemFraction::parse("0.5-0.6-0.7"),
        Err(MemFractionError::NotAFraction { .. }) | Err(MemFractionError::NotANumber { .. })
    ));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_fraction_text_parses_to_a_checked_fraction_or_a_typed_error(text in "[-+0-9.eEinfaN ]{0,12}") {
        if let Ok(fraction) = MemFraction::parse(&text) {
            prop_assert!(fraction.check().is_ok(), "{:?} -> {:?}", text, fraction);
        }
    }

    #[test]
    fn the_display_of_any_valid_fraction_parses_back_to_it(reserve in 1e-9f64..=1.0, extra in 0.0f64..=1.0) {
        let limit = reserve + (1.0 - reserve) * extra;
        let fraction = MemFraction { reserve, limit };
        prop_assume!(fraction.check().is_ok());
        prop_assert_eq!(MemFraction::parse(&fraction.to_string()), Ok(fraction));
    }
}

// ---------------------------------------------------------------------------------------------
// Memory tables

fn device(heaps: Vec<MemoryHeap>, types: Vec<MemoryType>, kind: DeviceKind) -> DeviceDescription {
    DeviceDescription {
        name: "hostile".into(),
        vendor_id: 0x10de,
        device_kind: kind,
        memory: MemoryProperties { heaps, types },
        heap_budgets: None,
    }
}

fn heap(size: u64, flags: HeapFlags) -> MemoryHeap {
    MemoryHeap { size, flags }
}

fn ty(heap: u32, flags: F) -> MemoryType {
    MemoryType { heap, flags }
}

const HV: F = F(F::HOST_VISIBLE.0 | F::HOST_COHERENT.0);

#[test]
fn tables_without_heaps_or_types_or_with_types_on_missing_heaps_are_typed_errors() {
    let none = device(vec![], vec![], DeviceKind::Discrete);
    assert!(matches!(
        plan_memory(&none),
        Err(MemPlanError::NoMemoryTypes { .. })
    ));
    let no_heap = device(vec![], vec![ty(0, HV)], DeviceKind::Discrete);
    assert!(matches!(
        plan_memory(&no_heap),
        Err(MemPlanError::HeapOutOfRange { heap: 0, .. })
    ));
    let far = device(
        vec![heap(1 << 30, HeapFlags::DEVICE_LOCAL)],
        vec![ty(0, F::DEVICE_LOCAL), ty(u32::MAX, HV)],
        DeviceKind::Discrete,
    );
    assert!(matches!(
        plan_memory(&far),
        Err(MemPlanError::HeapOutOfRange {
            type_index: 1,
            heap: u32::MAX,
            ..
        })
    ));
    let many = device(
        vec![heap(1 << 30, HeapFlags::empty())],
        vec![ty(0, HV); 33],
        DeviceKind::Integrated,
    );
    assert!(matches!(
        plan_memory(&many),
        Err(MemPlanError::TooManyTypes { count: 33, .. })
    ));
    // Exactly 32 is what Vulkan allows.
    let thirty_two = device(
        vec![heap(1 << 30, HeapFlags::empty())],
        vec![ty(0, HV); 32],
        DeviceKind::Integrated,
    );
    let plan = plan_memory(&thirty_two).unwrap();
    assert!(plan.arena_candidates.iter().all(|&t| t < 32));
}

#[test]
fn tables_whose_only_host_visible_heaps_are_empty_are_refused_not_planned_on_nothing() {
    let empty_host = device(
        vec![
            heap(8 << 30, HeapFlags::DEVICE_LOCAL),
            heap(0, HeapFlags::empty()),
        ],
        vec![
            ty(0, F::DEVICE_LOCAL),
            ty(1, HV),
            ty(1, HV | F::HOST_CACHED),
        ],
        DeviceKind::Discrete,
    );
    assert!(matches!(
        plan_memory(&empty_host),
        Err(MemPlanError::NoHostVisibleType { .. })
    ));
    // Every heap empty: nothing to put the arena on.
    let all_empty = device(
        vec![heap(0, HeapFlags::DEVICE_LOCAL)],
        vec![ty(0, F::DEVICE_LOCAL | HV)],
        DeviceKind::Integrated,
    );
    assert!(plan_memory(&all_empty).is_err());
}

#[test]
fn heaps_and_budgets_at_u64_max_plan_without_overflow() {
    let mut huge = device(
        vec![
            heap(u64::MAX, HeapFlags::DEVICE_LOCAL),
            heap(u64::MAX, HeapFlags::empty()),
        ],
        vec![
            ty(0, F::DEVICE_LOCAL),
            ty(0, F::DEVICE_LOCAL | HV),
            ty(1, HV),
            ty(1, HV | F::HOST_CACHED),
        ],
        DeviceKind::Discrete,
    );
    for budgets in [
        None,
        Some(vec![
            HeapBudget {
                budget: u64::MAX,
                usage: 0,
            },
            HeapBudget {
                budget: u64::MAX,
                usage: u64::MAX,
            },
        ]),
        Some(vec![
            HeapBudget {
                budget: 0,
                usage: u64::MAX,
            },
            HeapBudget {
                budget: 1,
                usage: 2,
            },
        ]),
    ] {
        huge.heap_budgets = budgets.clone();
        let plan = catch_unwind(|| plan_memory(&huge))
            .unwrap_or_else(|_| panic!("plan_memory panicked with budgets {budgets:?}"))
            .unwrap();
        assert!(plan.reservable_bytes <= plan.heap_bytes, "{budgets:?}");
        for fraction in [0.0, 1e-300, 0.5, 1.0, 2.0, f64::NAN, f64::INFINITY, -1.0] {
            let bytes = plan.prealloc_bytes(fraction);
            assert!(bytes <= plan.reservable_bytes, "{fraction}");
            assert_eq!(bytes % 256, 0, "{fraction}");
        }
    }
}

#[test]
fn a_budget_over_a_heap_or_usage_over_a_budget_never_reserves_more_than_the_heap() {
    let mut d = device(
        vec![heap(4 << 30, HeapFlags::DEVICE_LOCAL)],
        vec![ty(0, F::DEVICE_LOCAL | HV)],
        DeviceKind::Integrated,
    );
    d.heap_budgets = Some(vec![HeapBudget {
        budget: 64 << 30,
        usage: 1 << 30,
    }]);
    let plan = plan_memory(&d).unwrap();
    assert!(plan.reservable_bytes <= 4 << 30);
    d.heap_budgets = Some(vec![HeapBudget {
        budget: 1 << 30,
        usage: 2 << 30,
    }]);
    let plan = plan_memory(&d).unwrap();
    assert_eq!(plan.reservable_bytes, 0);
    assert_eq!(plan.prealloc_bytes(1.0), 0);
}

#[test]
fn json_tables_with_hostile_numbers_and_flags_are_typed_errors_or_plans() {
    let base = |heaps: &str, types: &str, extra: &str| {
        format!(
            r#"{{"device": "x", "vendor_id": "0x10de", "device_type": "discrete",
                "heaps": {heaps}, "types": {types}{extra}}}"#
        )
    };
    let cases = [
        base(r#"[{"size": -1}]"#, r#"[{"heap": 0}]"#, ""),
        base(r#"[{"size": 1.5}]"#, r#"[{"heap": 0}]"#, ""),
        base(
            r#"[{"size": 18446744073709551616}]"#,
            r#"[{"heap": 0}]"#,
            "",
        ),
        base(r#"[{"size": 1e30}]"#, r#"[{"heap": 0}]"#, ""),
        base(r#"[{"size": 1}]"#, r#"[{"heap": -1}]"#, ""),
        base(r#"[{"size": 1}]"#, r#"[{"heap": 4294967296}]"#, ""),
        base(
            r#"[{"size": 1}]"#,
            r#"[{"heap": 0, "flags": ["HOST_VISIBLE", "HOST_VISIBLE"]}]"#,
            "",
        ),
        base(r#"[{"size": 1}]"#, r#"[{"heap": 0, "flags": [""]}]"#, ""),
        base(
            r#"[{"size": 1}]"#,
            r#"[{"heap": 0, "flags": ["host_visible"]}]"#,
            "",
        ),
        base(
            r#"[{"size": 1}]"#,
            r#"[{"heap": 0, "flags": "HOST_VISIBLE"}]"#,
            "",
        ),
        base(
            r#"[{"size": 1}]"#,
            r#"[{"heap": 0}]"#,
            r#", "heap_budgets": [{"budget": -5, "usage": 0}]"#,
        ),
        base(
            r#"[{"size": 1}]"#,
            r#"[{"heap": 0}]"#,
            r#", "heap_budgets": null"#,
        ),
        base(r#"[]"#, r#"[]"#, ""),
        base(
            r#"[{"size": 0}]"#,
            r#"[{"heap": 0, "flags": ["HOST_VISIBLE", "HOST_COHERENT"]}]"#,
            "",
        ),
        r#"{"device": "x", "vendor_id": "", "device_type": "cpu", "heaps": [], "types": []}"#
            .to_string(),
        r#"{"device": "x", "vendor_id": "0x", "device_type": "cpu", "heaps": [], "types": []}"#
            .to_string(),
        r#"{"device": "x", "vendor_id": "-0x1", "device_type": "cpu", "heaps": [], "types": []}"#
            .to_string(),
        r#"{"device": "x", "vendor_id": -1, "device_type": "cpu", "heaps": [], "types": []}"#
            .to_string(),
        r#"{"device": "x", "vendor_id": 1.5, "device_type": "cpu", "heaps": [], "types": []}"#
            .to_string(),
        r#"{"device": "x", "vendor_id": "0x10de", "device_type": "", "heaps": [], "types": []}"#
            .to_string(),
    ];
    for text in &cases {
        let outcome = catch_unwind(|| {
            DeviceDescription::from_json(text).and_then(|d| plan_memory(&d).map(|_| d))
        })
        .unwrap_or_else(|_| panic!("panicked on {text}"));
        if let Ok(d) = outcome {
            // What reads must write back and read the same.
            assert_eq!(DeviceDescription::from_json(&d.to_json()).unwrap(), d);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Arena options at the edges

#[test]
fn arenas_with_extreme_options_refuse_with_typed_errors_and_keep_their_books() {
    let sizes = [
        0,
        1,
        255,
        256,
        257,
        (1 << 20) + 1,
        1 << 32,
        (1 << 38) + 1,
        u64::MAX / 2,
        u64::MAX - 255,
        u64::MAX,
    ];
    let aligns = [0, 1, 3, 256, 4096, 1 << 40, 1 << 63, u64::MAX];
    let edge = [
        0,
        1,
        255,
        256,
        300,
        1 << 20,
        1 << 40,
        u64::MAX / 2,
        u64::MAX,
    ];
    let mut options = Vec::new();
    for &a in &edge {
        options.push(ArenaOptions::preallocated(a));
        options.push(ArenaOptions::growing(a));
        options.push(ArenaOptions::platform(a));
        for &b in &edge {
            options.push(ArenaOptions {
                max_region_bytes: a,
                initial_growth_region_bytes: b,
                ..ArenaOptions::growing(u64::MAX)
            });
            options.push(ArenaOptions {
                reserve_bytes: a.min(1 << 36),
                max_region_bytes: b,
                limit_bytes: a / 2,
                ..ArenaOptions::default()
            });
        }
    }
    for options in options {
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let mut arena = Arena::new(options.clone());
            let mut source = VirtualRegions::default();
            let mut live = Vec::new();
            for &size in &sizes {
                for &align in &aligns {
                    match arena.allocate(size, align, None, &mut source) {
                        Ok(a) => {
                            assert!(a.size >= a.requested && a.size % ALLOCATION_ALIGNMENT == 0);
                            if align.is_power_of_two() {
                                assert_eq!(a.offset % align.max(1), 0, "{size} {align}");
                            }
                            live.push(a.id);
                        }
                        Err(ArenaError::InvalidAlignment(bad)) => {
                            assert!(!bad.is_power_of_two() && bad != 0)
                        }
                        Err(_) => {}
                    }
                }
            }
            check_books(&arena);
            for id in live.drain(..) {
                arena.free(id, Some(u64::MAX), &mut source).unwrap();
            }
            arena.advance_frontier(u64::MAX, &mut source);
            check_books(&arena);
            assert_eq!(arena.stats().bytes_in_use, 0);
            arena.release_free_regions(&mut source);
            arena.release_all(&mut source);
        }));
        assert!(outcome.is_ok(), "panicked with {options:?}");
    }
}

/// The snapshot's chunks tile each region exactly, the counters match the chunks, and no two
/// free chunks are neighbours (they would have been merged).
fn check_books(arena: &Arena) {
    let snapshot = arena.snapshot();
    let mut in_use = 0u64;
    let mut reserved = 0u64;
    let mut largest_free = 0u64;
    for region in &snapshot.regions {
        let mut offset = 0u64;
        let mut previous_free = false;
        for chunk in &region.chunks {
            let record = &chunk.record;
            assert_eq!(record.offset, offset, "chunks tile the region");
            offset += record.size;
            let free = record.state == ChunkState::Free;
            if arena.options().mode == ArenaMode::Bfc {
                assert!(!(free && previous_free), "two free neighbours");
            }
            previous_free = free;
            match record.state {
                ChunkState::Free => largest_free = largest_free.max(record.size),
                ChunkState::InUse => in_use += record.size,
                _ => {}
            }
        }
        assert_eq!(offset, region.size, "chunks cover the region");
        reserved += region.size;
    }
    let stats = &snapshot.stats;
    assert_eq!(stats.bytes_in_use, in_use);
    assert_eq!(stats.bytes_reserved, reserved);
    assert_eq!(stats.largest_free_block_bytes, largest_free);
    assert!(stats.peak_bytes_in_use >= stats.bytes_in_use);
    assert!(stats.peak_bytes_reserved >= stats.bytes_reserved);
    assert!(stats.bytes_reserved <= stats.bytes_limit.unwrap_or(u64::MAX));
    assert!((0.0..=1.0).contains(&stats.fragmentation));
}

// ---------------------------------------------------------------------------------------------
// Checkpointing plans

#[test]
fn chains_at_the_edges_plan_or_refuse_with_typed_errors() {
    let policies = [
        CheckpointPolicy::SaveAll,
        CheckpointPolicy::Sqrt,
        CheckpointPolicy::EveryNth(1),
        CheckpointPolicy::EveryNth(usize::MAX),
        CheckpointPolicy::EveryNth(0),
        CheckpointPolicy::Budget(0),
        CheckpointPolicy::Budget(1),
        CheckpointPolicy::Budget(1 << 30),
        CheckpointPolicy::Budget(u64::MAX),
        CheckpointPolicy::PeakBudget(0),
        CheckpointPolicy::PeakBudget(u64::MAX),
    ];
    let chains = [
        (0, vec![Layer::new(0, 0.0); 5]),
        (0, vec![Layer::new(1, 1.0)]),
        (u64::MAX / 8, vec![Layer::new(1, 1.0)]),
        (1, vec![Layer::new(u64::MAX / 8, 1.0); 1]),
        (1, vec![Layer::new(1 << 40, f64::MAX / 4.0); 3]),
        (1 << 20, vec![Layer::new(1 << 20, 0.0); 200]),
        (
            256,
            vec![
                Layer::new(u64::MAX / 16, 1.0).with_backward_reads(BackwardReads::Output),
                Layer::new(1, 1.0).with_backward_reads(BackwardReads::InputAndOutput),
            ],
        ),
    ];
    for (input, layers) in chains {
        let chain = match Chain::new(input, layers.clone()) {
            Ok(chain) => chain,
            Err(RematError::TooLarge) => continue,
            Err(other) => panic!("{other}"),
        };
        for policy in policies {
            let planned = catch_unwind(|| chain.plan(policy))
                .unwrap_or_else(|_| panic!("plan panicked: {policy:?} on {input} {layers:?}"));
            let Ok(schedule) = planned else { continue };
            // Huge costs summed stay finite figures.
            assert!(schedule.recompute_cost().is_finite(), "{policy:?}");
            assert!(schedule.recompute_fraction().is_finite(), "{policy:?}");
            match policy {
                CheckpointPolicy::PeakBudget(b) => assert!(schedule.peak_bytes() <= b),
                CheckpointPolicy::Budget(b) => assert!(schedule.peak_bytes() <= b),
                _ => {}
            }
        }
    }
    assert!(matches!(
        Chain::new(1, vec![Layer::new(1, f64::NAN)]),
        Err(RematError::InvalidCost { layer: 1, .. })
    ));
    assert!(matches!(
        Chain::new(
            1,
            vec![
                Layer::new(1, 1.0),
                Layer::new(1, -0.0),
                Layer::new(1, -1e-300)
            ]
        ),
        Err(RematError::InvalidCost { layer: 3, .. })
    ));
    assert!(matches!(
        Chain::new(u64::MAX, vec![Layer::new(1, 1.0)]),
        Err(RematError::TooLarge)
    ));
    assert!(matches!(Chain::new(1, vec![]), Err(RematError::NoLayers)));
}

fn any_chain() -> impl Strategy<Value = Chain> {
    let reads = prop_oneof![
        Just(BackwardReads::Input),
        Just(BackwardReads::Output),
        Just(BackwardReads::InputAndOutput)
    ];
    let bytes = prop_oneof![Just(0u64), 1u64..600, 1u64..(1 << 22)];
    let layer = (bytes.clone(), 0.0f64..10.0, reads)
        .prop_map(|(b, c, r)| Layer::new(b, c).with_backward_reads(r));
    (bytes, prop::collection::vec(layer, 1..24))
        .prop_map(|(input, layers)| Chain::new(input, layers).unwrap())
}

fn any_policy() -> impl Strategy<Value = CheckpointPolicy> {
    prop_oneof![
        Just(CheckpointPolicy::SaveAll),
        Just(CheckpointPolicy::Sqrt),
        (1usize..30).prop_map(CheckpointPolicy::EveryNth),
        (0u64..(1 << 26)).prop_map(CheckpointPolicy::Budget),
        (0u64..(1 << 26)).prop_map(CheckpointPolicy::PeakBudget),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn every_planned_schedule_replays_to_its_reported_peak_and_fits_its_budget(
        chain in any_chain(),
        policy in any_policy(),
    ) {
        let Ok(schedule) = chain.plan(policy) else { return Ok(()) };
        // Replay in a growing arena with something already allocated: the peak is counted
        // above what was in use before.
        let mut arena = Arena::new(ArenaOptions::growing(u64::MAX / 2));
        let mut source = VirtualRegions::default();
        let before = arena.allocate(1000, 0, None, &mut source).unwrap();
        let report = schedule.replay(&mut arena, &mut source).unwrap();
        prop_assert_eq!(report.peak_bytes_in_use, schedule.peak_bytes());
        prop_assert_eq!(arena.stats().bytes_in_use, before.size, "replay frees what it allocated");
        if let CheckpointPolicy::Budget(budget) = policy {
            let mut fixed = Arena::new(ArenaOptions::preallocated(budget));
            let fits = schedule.replay(&mut fixed, &mut VirtualRegions::default());
            prop_assert!(fits.is_ok(), "Budget({}) plan does not replay in that arena: {:?}", budget, fits);
        }
        if let CheckpointPolicy::PeakBudget(budget) = policy {
            prop_assert!(schedule.peak_bytes() <= budget);
        }
        // Kept activations are in range and the last one is always kept.
        let n = chain.layer_count();
        prop_assert!(schedule.checkpoints().iter().all(|&c| c <= n));
        prop_assert!(schedule.recompute_cost() >= 0.0 && schedule.recompute_cost().is_finite());
    }
}

#[test]
fn costs_that_are_finite_alone_but_overflow_together_are_refused_naming_the_layer() {
    // Each cost is finite, so each layer alone passes; their sum is not. Accepting the chain
    // made `Sqrt` report recompute_cost inf and recompute_fraction NaN.
    let error = Chain::new(1 << 20, vec![Layer::new(1 << 20, f64::MAX); 8]).unwrap_err();
    assert!(
        matches!(error, RematError::InvalidCost { layer: 2, cost } if cost == f64::MAX),
        "{error:?}"
    );
    // The cost is fine alone: the message blames the sum, and writes f64::MAX short.
    let message = error.to_string();
    assert!(message.contains("add up past the largest f64"), "{message}");
    assert!(message.contains("1.7976931348623157e308"), "{message}");
    assert!(message.len() < 300, "{message}");
    let message = Chain::new(1, vec![Layer::new(1, -1e300)])
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("forward_cost -1e300: costs must be"),
        "{message}"
    );
    // Costs whose sum stays finite, however large, plan with finite figures.
    let chain = Chain::new(1 << 20, vec![Layer::new(1 << 20, f64::MAX / 8.0); 8]).unwrap();
    for policy in [
        CheckpointPolicy::Sqrt,
        CheckpointPolicy::EveryNth(2),
        CheckpointPolicy::EveryNth(8),
        CheckpointPolicy::PeakBudget(6 << 20),
        CheckpointPolicy::Budget(8 << 20),
    ] {
        let schedule = chain.plan(policy).unwrap();
        let (cost, fraction) = (schedule.recompute_cost(), schedule.recompute_fraction());
        assert!(
            cost.is_finite() && cost > 0.0 && (0.0..=1.0 + 1e-9).contains(&fraction),
            "{policy:?}: recompute_cost {cost}, recompute_fraction {fraction}"
        );
    }
}

fn any_temporaries() -> impl Strategy<Value = Vec<gpu_arena::arena::Temporary>> {
    let size = prop_oneof![Just(0u64), 1u64..700, 1u64..(1 << 30)];
    prop::collection::vec(
        (size, 0usize..12, 0usize..6).prop_map(|(size, first, len)| gpu_arena::arena::Temporary {
            size,
            first_step: first,
            last_step: first + len,
        }),
        0..24,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn assigned_buffers_live_together_never_share_a_byte_and_sit_on_the_alignment(
        temporaries in any_temporaries(),
        alignment in prop_oneof![Just(0u64), Just(1u64), Just(3u64), Just(256u64), 1u64..5000],
    ) {
        let result = gpu_arena::arena::assign_buffers(&temporaries, alignment);
        let align = alignment.max(1);
        let round = |s: u64| s.div_ceil(align) * align;
        prop_assert_eq!(result.offsets.len(), temporaries.len());
        let mut end = 0u64;
        for (i, a) in temporaries.iter().enumerate() {
            let (oa, sa) = (result.offsets[i], round(a.size));
            prop_assert_eq!(oa % align, 0);
            end = end.max(oa + sa);
            for (j, b) in temporaries.iter().enumerate().skip(i + 1) {
                let (ob, sb) = (result.offsets[j], round(b.size));
                let together = a.first_step <= b.last_step && b.first_step <= a.last_step;
                if together && sa > 0 && sb > 0 {
                    prop_assert!(oa + sa <= ob || ob + sb <= oa, "{} and {} overlap", i, j);
                }
            }
        }
        prop_assert_eq!(result.block_bytes, end);
        prop_assert!(result.block_bytes >= result.lower_bound_bytes);
    }

    /// Cut into blocks of at most `max`: every temporary lies whole in its block, a block is
    /// no larger than `max` unless a temporary of it alone is, blocks start in order, and one
    /// block is the whole where it fits.
    #[test]
    fn a_split_assignment_keeps_every_temporary_whole_in_a_block_of_at_most_the_limit(
        temporaries in any_temporaries(),
        alignment in prop_oneof![Just(1u64), Just(256u64)],
        max in prop_oneof![Just(0u64), Just(u64::MAX), 1u64..(1 << 31)],
    ) {
        let result = gpu_arena::arena::assign_buffers(&temporaries, alignment);
        let split = result.split(&temporaries, alignment, max);
        let round = |s: u64| s.div_ceil(alignment) * alignment;
        prop_assert_eq!(split.block_of.len(), temporaries.len());
        prop_assert_eq!(split.blocks.is_empty(), temporaries.is_empty());
        for (i, t) in temporaries.iter().enumerate() {
            let (start, bytes) = split.blocks[split.block_of[i]];
            prop_assert!(result.offsets[i] >= start);
            prop_assert!(result.offsets[i] + round(t.size) <= start + bytes);
        }
        for (k, &(start, bytes)) in split.blocks.iter().enumerate() {
            let too_large = (0..temporaries.len())
                .any(|i| split.block_of[i] == k && round(temporaries[i].size) > max);
            prop_assert!(bytes <= max || too_large, "block {} of {} bytes over {}", k, bytes, max);
            if let Some(&(next, _)) = split.blocks.get(k + 1) {
                prop_assert!(start <= next);
            }
        }
        if result.block_bytes <= max && !temporaries.is_empty() {
            prop_assert_eq!(split.blocks.len(), 1);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn budget_plans_of_gib_activations_replay_in_an_arena_of_their_budget(
        input in 1u64..(3 << 30),
        layers in prop::collection::vec((1u64..(3 << 30), 0.0f64..4.0), 1..10),
        budget in (1u64 << 30)..(40u64 << 30),
    ) {
        let chain = Chain::new(
            input,
            layers.iter().map(|&(bytes, cost)| Layer::new(bytes, cost)).collect(),
        )
        .unwrap();
        let Ok(schedule) = chain.plan(CheckpointPolicy::Budget(budget)) else { return Ok(()) };
        let mut arena = Arena::new(ArenaOptions::preallocated(budget));
        let replayed = schedule.replay(&mut arena, &mut VirtualRegions::default());
        prop_assert!(replayed.is_ok(), "Budget({}) plan does not fit that arena: {:?}", budget, replayed);
        prop_assert_eq!(replayed.unwrap().peak_bytes_in_use, schedule.peak_bytes());
    }

    #[test]
    fn a_replay_that_runs_out_of_memory_frees_everything_it_allocated(
        chain in any_chain(),
        share in 0.0f64..1.0,
    ) {
        let schedule = chain.plan(CheckpointPolicy::SaveAll).unwrap();
        let limit = ((schedule.peak_bytes() as f64 * share) as u64).max(256 * 4);
        let mut arena = Arena::new(ArenaOptions::growing(limit));
        let mut source = VirtualRegions::default();
        let before = arena.allocate(1, 0, None, &mut source).unwrap();
        let in_use = arena.stats().bytes_in_use;
        let outcome = schedule.replay(&mut arena, &mut source);
        prop_assert_eq!(arena.stats().bytes_in_use, in_use, "{:?}", outcome);
        prop_assert!(arena.allocation(before.id).is_some());
        if let Err(error) = outcome {
            prop_assert!(error.as_out_of_memory().is_some(), "{}", error);
        }
    }
}

#[test]
fn a_replay_that_runs_out_of_memory_names_the_buffer_and_the_arenas_own_knob() {
    let chain = Chain::new(1 << 20, vec![Layer::new(1 << 20, 1.0); 8]).unwrap();
    let schedule = chain.plan(CheckpointPolicy::SaveAll).unwrap();
    let mut arena = Arena::new(ArenaOptions::preallocated(4 << 20));
    let error = schedule
        .replay(&mut arena, &mut VirtualRegions::default())
        .unwrap_err();
    let report = error.as_out_of_memory().expect("out of memory");
    // The input and activations 1 to 3 fill the 4 MiB: activation 4 is refused.
    assert_eq!(report.label.as_deref(), Some("activation 4"));
    let message = error.to_string();
    assert!(message.contains("\"activation 4\""), "{message}");
    assert!(message.contains("ArenaOptions::limit_bytes"), "{message}");
}

#[test]
fn a_table_that_is_not_memprops_json_says_why_once() {
    use std::error::Error as _;
    for text in ["{", r#"{"device": "x"}"#] {
        let error = DeviceDescription::from_json(text).unwrap_err();
        assert!(matches!(error, MemPlanError::Json(_)), "{error:?}");
        assert!(error.to_string().contains("line 1 column"), "{error}");
        assert!(error.source().is_none(), "{error}");
        let error = Error::from(error);
        assert!(error.source().is_none(), "{error}");
    }
}

#[test]
fn a_vendor_id_that_is_no_string_or_whole_number_is_bad_vendor_id() {
    let table = |id: &str| {
        format!(
            r#"{{"device": "x", "vendor_id": {id}, "device_type": "cpu", "heaps": [], "types": []}}"#
        )
    };
    for bad in [
        r#""""#,
        r#""0x""#,
        r#""-0x1""#,
        "-1",
        "1.5",
        "true",
        "4294967296",
    ] {
        match DeviceDescription::from_json(&table(bad)) {
            Err(MemPlanError::BadVendorId(_)) => {}
            other => panic!("{bad}: {other:?}"),
        }
    }
    for good in [r#""0x1002""#, r#"" 0X10DE ""#, r#""4098""#, "4098"] {
        // The table has no types, so only the id is read; it is not refused.
        if let Err(MemPlanError::BadVendorId(id)) = DeviceDescription::from_json(&table(good)) {
            panic!("{good} refused as {id}");
        }
    }
}
