//! Hostile inputs to the parts of the public API that run on the host alone: counts
//! that would need more memory than any machine has, and parsers of user bytes (memory tables,
//! snapshots) fed random, mutated and extreme JSON. Each answer is a value or a typed error,
//! never a panic, an abort or an allocation the input alone sizes.

use gpu_arena::shard_rows;

#[test]
fn shard_rows_answers_any_count_of_shards_without_allocating_or_panicking() {
    // Before: "capacity overflow" for usize::MAX shards and an abort (16 TiB) for 2^40.
    let all = shard_rows(3, usize::MAX);
    assert_eq!(all.len(), usize::MAX);
    assert_eq!(all.get(0), Some(0..1));
    assert_eq!(all.get(2), Some(2..3));
    assert_eq!(all.get(3), Some(3..3));
    assert_eq!(all.get(usize::MAX - 1), Some(3..3));
    assert_eq!(all.get(usize::MAX), None);
    assert_eq!(all.clone().last(), Some(3..3));
    assert_eq!(
        all.clone().take(4).collect::<Vec<_>>(),
        [0..1, 1..2, 2..3, 3..3]
    );
    let mut many = shard_rows(3, 1 << 40);
    assert_eq!(many.len(), 1 << 40);
    assert_eq!(many.nth((1 << 40) - 2), Some(3..3));
    assert_eq!(many.len(), 1);
    assert_eq!(many.next(), Some(3..3));
    assert_eq!(many.next(), None);
    assert_eq!(many.len(), 0);
    assert!(many.is_empty());
    assert!(shard_rows(5, 0).is_empty() && !shard_rows(0, 1).is_empty());
    assert_eq!(shard_rows(4, 2), &[0..2, 2..4][..]);
    // The largest counts of rows split exactly, the first shards one row longer.
    let rows = shard_rows(usize::MAX, 2);
    assert_eq!(
        rows,
        [0..usize::MAX / 2 + 1, usize::MAX / 2 + 1..usize::MAX]
    );
    let rows = shard_rows(usize::MAX, usize::MAX);
    assert_eq!(rows.get(usize::MAX - 1), Some(usize::MAX - 1..usize::MAX));
    assert_eq!(shard_rows(usize::MAX, 0).len(), 0);
    // From the back as from the front: by index, not shard by shard.
    let mut back = shard_rows(3, usize::MAX);
    assert_eq!(back.nth_back(usize::MAX - 1), Some(0..1));
    assert_eq!((back.len(), back.next_back(), back.next()), (0, None, None));
    assert_eq!(
        shard_rows(3, usize::MAX).rev().nth(usize::MAX - 3),
        Some(2..3)
    );
    let mut both = shard_rows(3, usize::MAX);
    assert_eq!(both.nth(1), Some(1..2));
    assert_eq!(both.nth_back(usize::MAX), None, "past the front");
    assert!(both.is_empty());
}

#[test]
fn shard_rows_iterates_the_same_ranges_from_either_end_and_by_index() {
    for rows in 0..30 {
        for shards in 0..8 {
            let forward: Vec<_> = shard_rows(rows, shards).collect();
            let mut backward: Vec<_> = shard_rows(rows, shards).rev().collect();
            backward.reverse();
            let by_index: Vec<_> = (0..shards)
                .map(|i| shard_rows(rows, shards).get(i).unwrap())
                .collect();
            assert_eq!(forward, backward);
            assert_eq!(forward, by_index);
            for n in 0..shards + 2 {
                let want = shards.checked_sub(n + 1).map(|i| forward[i].clone());
                assert_eq!(
                    shard_rows(rows, shards).nth_back(n),
                    want,
                    "{rows} {shards} {n}"
                );
            }
            assert_eq!(shard_rows(rows, shards), forward);
            let covered: usize = forward.iter().map(|r| r.len()).sum();
            assert_eq!(covered, if shards == 0 { 0 } else { rows });
        }
    }
}

// ---- parsers of user bytes: memory tables and snapshots ----------------------------------------

use gpu_arena::arena::{Arena, ArenaOptions, VirtualRegions};
use gpu_arena::memplan::{plan_memory, usable_type_mask, DeviceDescription, MemoryRequest};
use gpu_arena::profile::MemorySnapshot;
use proptest::prelude::*;

/// A real memory table (lavapipe's, with budgets) as memprops JSON.
const TABLE: &str = r#"{"device": "llvmpipe", "vendor_id": "0x10005", "device_type": "cpu",
  "heaps": [{"size": 2147483648, "flags": ["DEVICE_LOCAL"]}],
  "types": [{"heap": 0, "flags": ["DEVICE_LOCAL", "HOST_VISIBLE", "HOST_COHERENT"]}],
  "heap_budgets": [{"budget": 1073741824, "usage": 0}]}"#;

/// A real snapshot of a small arena: regions, in-use, free and pending chunks, labels.
fn snapshot_text() -> String {
    let mut arena = Arena::new(ArenaOptions::preallocated(4 << 20));
    let mut regions = VirtualRegions::default();
    let a = arena.allocate(1000, 0, Some("a"), &mut regions).unwrap();
    arena.allocate(5000, 0, Some("b"), &mut regions).unwrap();
    let c = arena.allocate(300, 0, None, &mut regions).unwrap();
    arena.free(a.id, Some(3), &mut regions).unwrap();
    arena.free(c.id, None, &mut regions).unwrap();
    MemorySnapshot::from_arena(arena.snapshot(), 1024).to_json()
}

/// Everything a caller may do with a table it read: plan it, and use the plan.
fn use_table(text: &str) {
    let Ok(device) = DeviceDescription::from_json(text) else {
        return;
    };
    let _ = usable_type_mask(&device.memory);
    let _ = device.vendor();
    let _ = device.to_json();
    let request = MemoryRequest {
        required: Default::default(),
        preferred: Default::default(),
        not_preferred: Default::default(),
    };
    let _ = request.rank(&device.memory);
    if let Ok(plan) = plan_memory(&device) {
        for fraction in [f64::NAN, -1.0, 0.0, 0.75, 1.0, f64::INFINITY] {
            let _ = plan.prealloc_bytes(fraction);
        }
        let _ = (
            plan.arena_type_bits(),
            plan.upload_type_bits(),
            plan.readback_type_bits(),
        );
        let _ = plan.bar_write_candidates();
    }
}

/// Everything a caller may do with a snapshot it read: its sums, lookups and the report.
fn use_snapshot(text: &str) {
    let Ok(snapshot) = MemorySnapshot::from_json(text) else {
        return;
    };
    for region in &snapshot.regions {
        let _ = (
            region.bytes_in_use(),
            region.bytes_free(),
            region.largest_free_chunk(),
        );
    }
    let _ = snapshot.top_allocations(usize::MAX);
    let _ = snapshot.chunks().count();
    let _ = snapshot.to_json();
    let page = gpu_arena::report::render_html(&snapshot, None);
    assert!(page.ends_with("</html>\n"));
}

/// One edit of a document's bytes: flip, insert, delete or duplicate.
fn mutate(text: &str, edits: &[(u8, usize, u8)]) -> String {
    let mut bytes = text.as_bytes().to_vec();
    for &(kind, at, byte) in edits {
        let at = at % (bytes.len() + 1);
        match kind % 5 {
            0 if at < bytes.len() => bytes[at] = byte,
            1 => bytes.insert(at, byte),
            2 if at < bytes.len() => {
                bytes.remove(at);
            }
            3 => {
                // A structural character where it breaks or nests things.
                let c = b"{}[]\":,-0e9"[usize::from(byte) % 11];
                bytes.insert(at, c);
            }
            _ => {
                let end = (at + usize::from(byte)).min(bytes.len());
                let piece = bytes[at..end].to_vec();
                bytes.splice(at..at, piece);
            }
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// JSON values that are wrong in type or size for any field.
fn hostile_values() -> Vec<String> {
    let mut values: Vec<String> = [
        "null",
        "true",
        "-1",
        "-0",
        "0",
        "1e400",
        "-1e400",
        "1.5",
        "18446744073709551615",
        "18446744073709551616",
        "4294967296",
        "99999999999999999999999999999",
        "\"\"",
        "\"NaN\"",
        "\"0x\"",
        "\"0xFFFFFFFFFF\"",
        "[]",
        "{}",
        "[[[[[[]]]]]]",
        "\"\\u0000\"",
        "\"\\ud800\"",
    ]
    .map(String::from)
    .to_vec();
    values.push(format!("[{}]", vec!["0"; 100_000].join(",")));
    values.push(format!("\"{}\"", "x".repeat(1 << 20)));
    values
}

/// A string no document holds, replaced by a hostile value's text.
const PLACEHOLDER: &str = "@@hostile@@";

/// Every place a value can go in `text` (each field's value), replaced by each hostile value.
fn with_each_field_replaced(text: &str) -> Vec<String> {
    let document: serde_json::Value = serde_json::from_str(text).unwrap();
    let mut paths = Vec::new();
    collect_paths(&document, &mut Vec::new(), &mut paths);
    let mut out = Vec::new();
    for path in &paths {
        for value in hostile_values() {
            // Some values (1e400) are no `serde_json::Value`: put them in as text.
            let mut changed = document.clone();
            *pointer(&mut changed, path) = serde_json::Value::from(PLACEHOLDER);
            out.push(
                changed
                    .to_string()
                    .replace(&format!("\"{PLACEHOLDER}\""), &value),
            );
        }
    }
    out
}

fn collect_paths(value: &serde_json::Value, at: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match value {
        serde_json::Value::Object(fields) => {
            for (key, v) in fields {
                at.push(key.clone());
                out.push(at.clone());
                collect_paths(v, at, out);
                at.pop();
            }
        }
        serde_json::Value::Array(items) => {
            for (i, v) in items.iter().enumerate().take(3) {
                at.push(i.to_string());
                out.push(at.clone());
                collect_paths(v, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

fn pointer<'v>(value: &'v mut serde_json::Value, path: &[String]) -> &'v mut serde_json::Value {
    path.iter().fold(value, |v, key| match v {
        serde_json::Value::Array(items) => &mut items[key.parse::<usize>().unwrap()],
        other => &mut other[key.as_str()],
    })
}

/// Documents nested far past serde_json's recursion limit (128), in every field's place.
fn deep(depth: usize) -> Vec<String> {
    vec![
        "[".repeat(depth),
        "{\"a\":".repeat(depth),
        format!("{}{}", "[".repeat(depth), "]".repeat(depth)),
        format!(
            "{{\"device\": {}0{}}}",
            "[".repeat(depth),
            "]".repeat(depth)
        ),
    ]
}

#[test]
fn a_memory_table_with_any_value_in_any_field_is_read_or_refused_without_panicking() {
    for text in with_each_field_replaced(TABLE) {
        use_table(&text);
    }
}

#[test]
fn a_snapshot_with_any_value_in_any_field_is_read_or_refused_without_panicking() {
    for text in with_each_field_replaced(&snapshot_text()) {
        use_snapshot(&text);
    }
}

#[test]
fn nesting_past_the_recursion_limit_is_refused_as_json_not_a_stack_overflow() {
    // serde_json stops at 128 levels: an error, on any thread's stack (tests run on 2 MiB ones).
    for text in deep(200_000) {
        assert!(DeviceDescription::from_json(&text).is_err());
        assert!(MemorySnapshot::from_json(&text).is_err());
    }
    // Typed fields refuse nesting at its first level; fields a reader ignores (a table's
    // `notes`, say) are skipped without recursion, at any depth.
    let nested = format!("{}{}", "[".repeat(200_000), "]".repeat(200_000));
    let text = TABLE.replacen('{', &format!("{{\"notes\": {nested}, "), 1);
    assert_eq!(
        DeviceDescription::from_json(&text).unwrap().name,
        "llvmpipe"
    );
    let snapshot = snapshot_text().replacen('{', &format!("{{\"notes\": {nested}, "), 1);
    assert!(MemorySnapshot::from_json(&snapshot).is_ok());
    // And serde_json's own limit holds for untyped values too.
    let error = serde_json::from_str::<serde_json::Value>(&deep(200)[0]).unwrap_err();
    assert_eq!(
        error.classify(),
        serde_json::error::Category::Syntax,
        "{error}"
    );
    assert!(
        error.to_string().contains("recursion limit exceeded"),
        "{error}"
    );
}

#[test]
fn a_table_of_a_million_types_or_heaps_is_refused_by_the_plan_not_a_panic() {
    let types = vec![r#"{"heap": 0, "flags": ["HOST_VISIBLE"]}"#; 1_000_000].join(",");
    let text = TABLE.replace(
        r#"[{"heap": 0, "flags": ["DEVICE_LOCAL", "HOST_VISIBLE", "HOST_COHERENT"]}]"#,
        &format!("[{types}]"),
    );
    let device = DeviceDescription::from_json(&text).unwrap();
    let message = plan_memory(&device).unwrap_err().to_string();
    assert!(message.contains("32"), "{message}");
    use_table(&text);
    let heaps = vec![r#"{"size": 18446744073709551615}"#; 1_000_000].join(",");
    let text = TABLE.replace(
        r#"[{"size": 2147483648, "flags": ["DEVICE_LOCAL"]}]"#,
        &format!("[{heaps}]"),
    );
    use_table(&text);
    let text = TABLE.replace(r#""heap": 0"#, r#""heap": 4294967295"#);
    assert!(plan_memory(&DeviceDescription::from_json(&text).unwrap()).is_err());
}

#[test]
fn a_snapshot_of_a_million_chunks_reads_and_reports_in_bounded_time() {
    let mut document: serde_json::Value = serde_json::from_str(&snapshot_text()).unwrap();
    let mut chunk = document["regions"][0]["chunks"][0].clone();
    for (field, value) in [
        ("size", serde_json::json!(u64::MAX)),
        ("offset", serde_json::json!(u64::MAX - 1)),
        ("age_allocs", serde_json::json!(u64::MAX)),
        ("requested", serde_json::json!(u64::MAX)),
        ("age_seconds", serde_json::json!(1e308)),
        ("shape", serde_json::json!([usize::MAX, 2])),
        ("label", serde_json::json!("<script>")),
    ] {
        chunk[field] = value;
    }
    document["regions"][0]["chunks"] = serde_json::Value::from(vec![chunk; 1_000_000]);
    use_snapshot(&document.to_string());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn mutated_memory_tables_are_read_or_refused_without_panicking(
        edits in prop::collection::vec((any::<u8>(), any::<usize>(), any::<u8>()), 1..8),
    ) {
        use_table(&mutate(TABLE, &edits));
    }

    #[test]
    fn mutated_snapshots_are_read_or_refused_without_panicking(
        edits in prop::collection::vec((any::<u8>(), any::<usize>(), any::<u8>()), 1..8),
    ) {
        use_snapshot(&mutate(&snapshot_text(), &edits));
    }

    #[test]
    fn random_bytes_are_refused_as_tables_and_snapshots_without_panicking(
        bytes in prop::collection::vec(any::<u8>(), 0..512),
    ) {
        let text = String::from_utf8_lossy(&bytes);
        use_table(&text);
        use_snapshot(&text);
    }
}
