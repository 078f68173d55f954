//! Allocation sites: every public call that makes an array records the caller's own line, on
//! every path, and the snapshot, its diff, the report's "growing" table, the timeline, the
//! Perfetto trace and the pprof profile show it; a leak without labels is named by its line.

use crate::harness::{context_with, op_paths, test_config};
use gpu_arena::arena::AllocationId;
use gpu_arena::profile::{MemorySnapshot, TimelineEventKind};
use gpu_arena::{ArenaConfig, Context, DeviceArray, MemFraction, MemoryKind};

/// This file's `file:line:` prefix of a site, for a call on line `line`.
fn here(line: u32) -> String {
    format!("{}:{line}:", file!())
}

/// The site the snapshot records for `array`.
fn site_of<T: bytemuck::Pod>(snapshot: &MemorySnapshot, array: &DeviceArray<T>) -> String {
    snapshot
        .chunk(array.allocation_id())
        .and_then(|c| c.site.clone())
        .expect("a live array has a site")
}

fn assert_site<T: bytemuck::Pod>(
    ctx: &Context,
    path: &str,
    what: &str,
    array: &DeviceArray<T>,
    line: u32,
) {
    let site = site_of(&ctx.memory_snapshot(), array);
    assert!(
        site.starts_with(&here(line)),
        "{path}: {what} recorded {site}, not the caller's line {line}"
    );
}

const DOUBLE: &str = r#"
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < arrayLength(&y)) { y[id.x] = 2.0 * x[id.x]; }
}
"#;

#[gpu_test]
fn sites_point_at_the_callers_own_line_for_every_call_that_makes_an_array() {
    for (path, ctx) in op_paths() {
        let (a, l) = (ctx.device_put(&[1.0f32; 64], &[64]).unwrap(), line!());
        assert_site(&ctx, path, "device_put", &a, l);
        let (b, l) = (ctx.zeros::<f32>(&[64]).unwrap(), line!());
        assert_site(&ctx, path, "zeros", &b, l);
        let (c, l) = (ctx.alloc::<u32>(&[8, 8]).unwrap(), line!());
        assert_site(&ctx, path, "alloc", &c, l);
        let (d, l) = (ctx.fill(&[64], 3.0f32).unwrap(), line!());
        assert_site(&ctx, path, "fill", &d, l);
        let (e, l) = (ctx.copy(&a).unwrap(), line!());
        assert_site(&ctx, path, "copy", &e, l);
        let (f, l) = (ctx.dynamic_slice(&a, &[4], &[8]).unwrap(), line!());
        assert_site(&ctx, path, "dynamic_slice", &f, l);
        let l = line!() + 1;
        let g = ctx.dynamic_update_slice_copy(&a, &f, &[0]).unwrap();
        assert_site(&ctx, path, "dynamic_update_slice_copy", &g, l);

        // A launch writes an output the user made: its site is the user's line, and running
        // the kernel over it does not change it.
        let kernel = ctx.kernel(DOUBLE, "main").unwrap();
        let (mut out, l) = (ctx.alloc::<f32>(&[64]).unwrap(), line!());
        ctx.launch(&kernel)
            .arg(&a)
            .arg_mut(&mut out)
            .grid_for(64)
            .run()
            .unwrap();
        assert_eq!(ctx.device_get(&out).unwrap(), vec![2.0; 64]);
        assert_site(&ctx, path, "a launch's output", &out, l);

        // Sequence ops and recorded uploads.
        let mut seq = ctx.sequence();
        let (s1, l1) = (seq.fill(&[16], 1u32).unwrap(), line!());
        let (s2, l2) = (seq.copy(&a).unwrap(), line!());
        let (s3, l3) = (seq.dynamic_slice(&a, &[0], &[4]).unwrap(), line!());
        let (s4, l4) = (seq.put(&[5u32; 8], &[8]).unwrap(), line!());
        let (s5, l5) = (seq.alloc::<u32>(&[8]).unwrap(), line!());
        seq.submit().unwrap();
        assert_site(&ctx, path, "Sequence::fill", &s1, l1);
        assert_site(&ctx, path, "Sequence::copy", &s2, l2);
        assert_site(&ctx, path, "Sequence::dynamic_slice", &s3, l3);
        assert_site(&ctx, path, "Sequence::put", &s4, l4);
        assert_site(&ctx, path, "Sequence::alloc", &s5, l5);

        // Upload batches: the site is the `put`, where the array is made.
        let mut batch = ctx.upload_batch();
        let (pending, l) = (batch.put(&[7u16; 32], &[32]).unwrap(), line!());
        let h = batch.finish().unwrap().take(pending).unwrap();
        assert_site(&ctx, path, "UploadBatch::put", &h, l);
        assert_eq!(ctx.device_get(&h).unwrap(), vec![7; 32]);

        // Another context's array copied here.
        let (i, l) = (a.copy_to(&ctx).unwrap(), line!());
        assert_site(&ctx, path, "copy_to", &i, l);

        // Shards: each made at the `shard` call.
        let (shards, l) = (
            gpu_arena::shard(&[ctx.clone(), ctx.clone()], &[3u32; 16], &[4, 4]).unwrap(),
            line!(),
        );
        for shard in &shards {
            assert_site(&ctx, path, "shard", shard, l - 1);
        }

        // A capture's arrays, its host input included.
        let mut cap = ctx.capture();
        let ((c1, _slot), l1) = (cap.input(&[2u32; 8], &[8]).unwrap(), line!());
        let (c2, l2) = (cap.alloc::<u32>(&[8]).unwrap(), line!());
        let (c3, l3) = (cap.fill(&[8], 4u32).unwrap(), line!());
        assert_site(&ctx, path, "Capture::input", &c1, l1);
        assert_site(&ctx, path, "Capture::alloc", &c2, l2);
        assert_site(&ctx, path, "Capture::fill", &c3, l3);
        drop(cap);
    }
}

fn timeline_context() -> Context {
    context_with(ArenaConfig {
        mem_fraction: MemFraction::fixed(0.1),
        timeline_capacity: 1 << 16,
        ..test_config()
    })
}

#[gpu_test]
fn a_leak_without_labels_is_named_by_its_line_in_the_diff_and_the_growing_table() {
    let ctx = timeline_context();
    let before = ctx.memory_snapshot();
    let mut kept = Vec::new();
    let mut leak_line = 0;
    for step in 0..600u32 {
        // Temporaries freed every step, of several sizes.
        let x = ctx.fill(&[256], step as f32).unwrap();
        let y = ctx.copy(&x).unwrap();
        drop((x, y));
        // The leak: one [32] f32 array kept per step, no label.
        kept.push(ctx.zeros::<f32>(&[32]).unwrap());
        leak_line = line!() - 1;
    }
    let after = ctx.memory_snapshot();

    let diff = after.diff(&before);
    let top = &diff.groups[0];
    assert!(
        top.site.as_deref().unwrap().starts_with(&here(leak_line)),
        "{diff}"
    );
    assert_eq!(
        (top.count, top.bytes, top.label.as_deref()),
        (600, 600 * 256, None)
    );
    assert_eq!(diff.groups.len(), 1, "the temporaries were freed: {diff}");
    assert!(diff.to_string().contains(&here(leak_line)));

    // The same line heads the report's growing table, in one run.
    let timeline = ctx.memory_timeline().unwrap();
    assert_eq!(timeline.dropped, 0);
    let growing = timeline.growing_sites();
    assert!(growing[0]
        .site
        .as_deref()
        .unwrap()
        .starts_with(&here(leak_line)));
    assert_eq!((growing[0].count, growing[0].bytes), (600, 600 * 256));
    let html = gpu_arena::report::render_html(&after, Some(&timeline));
    let table = &html[html.find(r#"<section id="growing">"#).unwrap()..];
    let first_row = &table[table.find("<tr><td").unwrap()..];
    let first_row = &first_row[..first_row.find("</tr>").unwrap()];
    assert!(first_row.contains(&here(leak_line)), "{first_row}");
    assert!(first_row.contains(">600<"), "{first_row}");

    // The curve is scaled to the bytes in use (about 150 KiB), not the reservation
    // (about 200 MiB), and says so.
    let axis: u64 = html
        .split("data-axis-bytes=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .unwrap()
        .parse()
        .unwrap();
    let in_use = after.stats.arena.bytes_in_use;
    assert!(
        axis >= in_use && axis < 2 * in_use + 4096,
        "axis {axis}, in use {in_use}"
    );
    assert!(html.contains("(above the axis)"));
    assert!(html.contains(r#"<g class="peak">"#));
    drop(kept);
}

#[gpu_test]
fn frees_in_the_timeline_and_trace_carry_the_arrays_label_shape_and_site() {
    let ctx = timeline_context();
    let (named, named_line) = (ctx.zeros::<f32>(&[4, 8]).unwrap(), line!());
    let named = named.with_label("weights");
    let (plain, plain_line) = (ctx.alloc::<u32>(&[16]).unwrap(), line!());
    let (named_id, plain_id) = (named.allocation_id(), plain.allocation_id());
    drop((named, plain));
    let timeline = ctx.memory_timeline().unwrap();
    let free_of = |id: AllocationId| {
        timeline
            .events
            .iter()
            .find_map(|e| match &e.kind {
                TimelineEventKind::Free {
                    allocation,
                    label,
                    site,
                    dtype,
                    shape,
                    ..
                } if *allocation == id => {
                    Some((label.clone(), site.clone(), dtype.clone(), shape.clone()))
                }
                _ => None,
            })
            .expect("the free is on the timeline")
    };
    let (label, site, dtype, shape) = free_of(named_id);
    assert_eq!(label.as_deref(), Some("weights"));
    assert!(site.unwrap().starts_with(&here(named_line)));
    assert_eq!((dtype.as_deref(), shape), (Some("f32"), Some(vec![4, 8])));
    let (label, site, dtype, shape) = free_of(plain_id);
    assert_eq!(label, None);
    assert!(site.unwrap().starts_with(&here(plain_line)));
    assert_eq!((dtype.as_deref(), shape), (Some("u32"), Some(vec![16])));

    // In the trace each array is one async slice, begun at its allocation and ended at its
    // free under the same name and id, with its site.
    let trace: serde_json::Value = serde_json::from_str(&timeline.to_chrome_trace("test")).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    for (id, name, line) in [
        (named_id, "weights", named_line),
        (plain_id, "u32[16]", plain_line),
    ] {
        let id = format!("{:#x}", id.0);
        let slice: Vec<&serde_json::Value> = events
            .iter()
            .filter(|e| e["cat"] == "array" && e["id"] == id.as_str())
            .collect();
        assert_eq!(slice.len(), 2, "{slice:?}");
        assert_eq!(
            (&slice[0]["ph"], &slice[1]["ph"]),
            (&"b".into(), &"e".into())
        );
        assert!(slice.iter().all(|e| e["name"] == name), "{slice:?}");
        // The end has no arguments: the field is left out (the format's `args` is an object).
        assert!(slice[1].get("args").is_none(), "{slice:?}");
        assert!(slice[0]["args"]["site"]
            .as_str()
            .unwrap()
            .starts_with(&here(line)));
        let free = events
            .iter()
            .find(|e| {
                e["ph"] == "i"
                    && e["name"].as_str().unwrap().starts_with("free ")
                    && e["args"]["allocation"] == id_number(&id)
            })
            .unwrap();
        assert!(free["args"]["site"]
            .as_str()
            .unwrap()
            .starts_with(&here(line)));
        assert!(free["name"].as_str().unwrap().contains(name));
    }
}

fn id_number(hex: &str) -> u64 {
    u64::from_str_radix(hex.trim_start_matches("0x"), 16).unwrap()
}

#[gpu_test]
fn two_threads_allocating_at_once_each_get_their_own_sites_on_the_timeline() {
    let ctx = timeline_context();
    let shared = ctx.zeros::<f32>(&[256]).unwrap();
    let lines = std::thread::scope(|s| {
        let a = s.spawn(|| {
            (0..200)
                .map(|_| (ctx.copy(&shared).unwrap(), line!()))
                .collect::<Vec<_>>()
        });
        let b = s.spawn(|| {
            (0..200)
                .map(|_| (ctx.dynamic_slice(&shared, &[0], &[16]).unwrap(), line!()))
                .collect::<Vec<_>>()
        });
        (a.join().unwrap(), b.join().unwrap())
    });
    let snapshot = ctx.memory_snapshot();
    let timeline = ctx.memory_timeline().unwrap();
    for (arrays, elements) in [(&lines.0, 256usize), (&lines.1, 16)] {
        for (array, line) in arrays {
            assert!(site_of(&snapshot, array).starts_with(&here(*line)));
            let (site, shape) = timeline
                .events
                .iter()
                .find_map(|e| match &e.kind {
                    TimelineEventKind::Alloc {
                        allocation,
                        site,
                        shape,
                        ..
                    } if *allocation == array.allocation_id() => {
                        Some((site.clone().unwrap(), shape.clone().unwrap()))
                    }
                    _ => None,
                })
                .unwrap();
            assert!(site.starts_with(&here(*line)), "{site}");
            assert_eq!(shape, [elements]);
        }
    }
}

#[gpu_test]
fn a_pprof_profile_holds_live_bytes_by_site_and_go_tool_pprof_reads_it() {
    let ctx = timeline_context();
    let kept: Vec<_> = (0..10)
        .map(|_| ctx.zeros::<f32>(&[1024]).unwrap())
        .collect();
    let line = line!() - 2;
    let weights = ctx.zeros::<u8>(&[1 << 20]).unwrap().with_label("weights");
    let weights_line = line!() - 1;
    let profile = ctx.memory_snapshot().to_pprof();
    assert_eq!(&profile[..2], &[0x1f, 0x8b], "gzip");
    // The strings are stored uncompressed: the sites are there.
    let text = String::from_utf8_lossy(&profile);
    assert!(text.contains(&here(line)) && text.contains(&here(weights_line)));

    let dir = std::env::temp_dir().join(format!("gpu-arena-pprof-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("memory.pb.gz");
    ctx.memory_snapshot().write_pprof(&path).unwrap();
    // Go's pprof, an independent reader: CI installs Debian's golang-go and sets
    // GPU_ARENA_REQUIRE_PPROF so the check cannot be skipped there.
    let go = std::process::Command::new("go")
        .args(["tool", "pprof", "-top", "-sample_index=space"])
        .arg(&path)
        .env("HOME", &dir)
        .env("GOCACHE", dir.join("gocache"))
        .output();
    match go {
        Ok(out) => {
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "go tool pprof failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            // The weights' site holds 1 MiB, the loop's 40 KiB; pprof lists the first first.
            let weights_at = stdout.find(&here(weights_line)).expect(&stdout);
            let loop_at = stdout.find(&here(line)).expect(&stdout);
            assert!(weights_at < loop_at, "{stdout}");
            assert!(
                stdout.contains("1MB") || stdout.contains("1024kB"),
                "{stdout}"
            );
        }
        Err(e) => {
            assert!(
                std::env::var_os("GPU_ARENA_REQUIRE_PPROF").is_none(),
                "go tool pprof is required here: {e}"
            );
            eprintln!("skipped the pprof reader: no go ({e}); apt-get install golang-go");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    drop((kept, weights));
}

/// Arrays kept in pinned host memory between two snapshots are in the diff too, by their line,
/// beside device ones of the same line; allocation ids are compared within each kind (each
/// kind's arena numbers its own), and the bytes-in-use change counts both.
#[gpu_test]
fn the_diff_counts_arrays_kept_in_pinned_host_memory() {
    use gpu_arena::MemoryKind;
    let ctx = context_with(test_config());
    // One array of each kind before: their ids must not hide the new ones of the other kind.
    let _old = ctx.zeros::<f32>(&[64]).unwrap();
    let _old_host = ctx.alloc_in::<f32>(MemoryKind::PinnedHost, &[64]).unwrap();
    let before = ctx.memory_snapshot();
    let mut kept = Vec::new();
    let mut line = 0;
    for _ in 0..5 {
        kept.push(ctx.alloc_in::<f32>(MemoryKind::PinnedHost, &[64]).unwrap());
        line = line!() - 1;
    }
    let diff = ctx.memory_snapshot().diff(&before);
    assert_eq!((diff.count, diff.bytes), (5, 5 * 256), "{diff}");
    assert!(diff.groups[0]
        .site
        .as_deref()
        .unwrap()
        .starts_with(&here(line)));
    assert_eq!(diff.bytes_in_use_change, 5 * 256);
}

#[gpu_test]
fn a_host_updates_temporary_upload_records_the_callers_line() {
    let ctx = timeline_context();
    let host = [5u32; 8];
    let update = (&host[..], &[1usize, 8][..]);
    // Every site the timeline has recorded so far, in order.
    let sites = |ctx: &Context| -> Vec<String> {
        let timeline = ctx.memory_timeline().unwrap();
        timeline
            .events
            .iter()
            .filter_map(|e| match &e.kind {
                TimelineEventKind::Alloc { site, .. } => site.clone(),
                _ => None,
            })
            .collect()
    };
    let x = ctx.zeros::<u32>(&[8, 8]).unwrap();
    let before = sites(&ctx).len();
    let eager = line!() + 1;
    let x = ctx.dynamic_update_slice(x, update, &[1, 0]).unwrap();
    let copied = line!() + 1;
    let copy = ctx.dynamic_update_slice_copy(&x, update, &[2, 0]).unwrap();
    let mut sequence = ctx.sequence();
    let recorded = line!() + 1;
    let x = sequence.dynamic_update_slice(x, update, &[3, 0]).unwrap();
    // The temporary lives until the sequence runs: the snapshot shows it at the caller's line.
    let snapshot = ctx.memory_snapshot();
    let held: Vec<_> = snapshot
        .chunks()
        .filter_map(|(_, c)| c.site.clone())
        .collect();
    assert!(
        held.iter().any(|site| site.starts_with(&here(recorded))),
        "{held:?}"
    );
    assert!(
        held.iter().all(|site| site.starts_with(file!())),
        "{held:?}"
    );
    sequence.submit().unwrap();
    let made = sites(&ctx)[before..].to_vec();
    // One temporary each, and the copy's result beside its temporary.
    let expected = [eager, copied, copied, recorded].map(here);
    assert_eq!(made.len(), expected.len(), "{made:?}");
    for (site, line) in made.iter().zip(&expected) {
        assert!(site.starts_with(line), "{site} is not the caller's {line}");
    }
    let rows = ctx.device_get(&x).unwrap();
    assert_eq!(
        (&rows[8..16], &rows[16..24]),
        (&[5u32; 8][..], &[0u32; 8][..])
    );
    assert_eq!(rows[24..32], [5u32; 8]);
    assert_eq!(ctx.device_get(&copy).unwrap()[16..24], [5u32; 8]);
}

#[gpu_test]
fn a_moved_array_keeps_its_label_in_the_other_memory() {
    let ctx = timeline_context();
    // The label of `id` in the snapshot of `kind`.
    let label_of = |kind: MemoryKind, id: AllocationId| {
        let snapshot = ctx.memory_snapshot();
        let (_, of_kind) = snapshot.kinds().find(|(k, _)| *k == kind)?;
        of_kind.chunk(id).and_then(|c| c.label.clone())
    };
    let kv = ctx.device_put(&[1u32; 64], &[64]).unwrap().with_label("kv");
    let held = ctx.offload(kv).unwrap();
    assert_eq!(
        label_of(MemoryKind::PinnedHost, held.allocation_id()).as_deref(),
        Some("kv")
    );
    let mut sequence = ctx.sequence();
    let back = sequence.prefetch(held).unwrap();
    sequence.submit().unwrap();
    assert_eq!(
        label_of(MemoryKind::Device, back.allocation_id()).as_deref(),
        Some("kv")
    );
    assert_eq!(ctx.device_get(&back).unwrap(), [1u32; 64]);
    // An array without a label moves without one.
    let plain = ctx.device_put(&[2u32; 4], &[4]).unwrap();
    let plain = ctx.offload(plain).unwrap();
    assert_eq!(
        label_of(MemoryKind::PinnedHost, plain.allocation_id()),
        None
    );
}
