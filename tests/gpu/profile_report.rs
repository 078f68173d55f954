//! The HTML report: well-formed, self-contained, one rectangle per chunk in normal cases,
//! bounded for huge regions, rendered by headless Chromium when one is installed; and the
//! out-of-memory dump that writes it.

use crate::harness;
use crate::harness::{context_with, test_config};
use gpu_arena::arena::{Arena, ArenaOptions, VirtualRegions};
use gpu_arena::profile::{MemorySnapshot, OOM_DUMP_STEM};
use gpu_arena::report::{self, MAP_WIDTH_PX};
use gpu_arena::{ArenaConfig, Error, KernelDesc, MemFraction};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use xml::reader::{EventReader, XmlEvent};

const MIB: u64 = 1 << 20;
/// How long headless Chromium may take to render the page before the test gives up on it.
const CHROMIUM_TIMEOUT: Duration = Duration::from_secs(90);

/// A fresh, empty directory for this test.
fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gpu-arena-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// What the report's markup says about each region: (region id, `data-chunk-count`, number of
/// chunk rectangles, sum of their `data-chunks`). Fails if the page is not well-formed XML.
fn region_rectangles(html: &str) -> Vec<(u64, usize, usize, usize)> {
    let mut regions = Vec::new();
    let mut depth_in_region: Option<usize> = None;
    let mut depth = 0usize;
    for event in EventReader::new(html.as_bytes()) {
        match event.unwrap_or_else(|e| panic!("the report is not well-formed: {e}")) {
            XmlEvent::StartElement {
                name, attributes, ..
            } => {
                depth += 1;
                let attr = |key: &str| {
                    attributes
                        .iter()
                        .find(|a| a.name.local_name == key)
                        .map(|a| a.value.clone())
                };
                if name.local_name == "g" && attr("class").as_deref() == Some("region") {
                    regions.push((
                        attr("data-region").unwrap().parse().unwrap(),
                        attr("data-chunk-count").unwrap().parse().unwrap(),
                        0,
                        0,
                    ));
                    depth_in_region = Some(depth);
                } else if name.local_name == "rect" && depth_in_region.is_some() {
                    if let Some(chunks) = attr("data-chunks") {
                        let region = regions.last_mut().unwrap();
                        region.2 += 1;
                        region.3 += chunks.parse::<usize>().unwrap();
                    }
                }
            }
            XmlEvent::EndElement { .. } => {
                if depth_in_region == Some(depth) {
                    depth_in_region = None;
                }
                depth -= 1;
            }
            _ => {}
        }
    }
    regions
}

/// `text` as the report escapes it.
fn escaped(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

/// The page loads nothing: no script, no external stylesheet, image or font; the only URLs are
/// XML namespace names.
fn assert_self_contained(html: &str) {
    assert!(!html.contains("<script"), "the report has no script");
    for (at, _) in html.match_indices("http") {
        let before = &html[at.saturating_sub(8)..at];
        assert!(
            before.contains("xmlns=\""),
            "external URL at {at}: {}",
            &html[at..at + 40]
        );
    }
    for attr in ["src=", "href=", "@import", "url(http"] {
        assert!(!html.contains(attr), "the report loads something: {attr}");
    }
}

#[gpu_test]
fn the_report_is_well_formed_and_draws_one_rectangle_per_chunk() {
    let ctx = context_with(ArenaConfig {
        mem_fraction: MemFraction::fixed(0.02),
        max_region_bytes: Some(8 * MIB),
        timeline_capacity: 4096,
        ..test_config()
    });
    // Arrays of 64 KiB and more in 8 MiB regions: every chunk is at least 8 px wide.
    let mut arrays = Vec::new();
    for i in 0..24usize {
        let a = ctx.zeros::<f32>(&[(16 << 10) * (1 + i % 4)]).unwrap();
        arrays.push(a.with_label(["weights", "kv-cache", "activations"][i % 3]));
    }
    let kept: Vec<_> = arrays
        .into_iter()
        .enumerate()
        .filter_map(|(i, a)| (i % 3 != 2).then_some(a))
        .collect();
    ctx.synchronize().unwrap();
    let _probe = ctx.zeros::<f32>(&[(16 << 10) * 5]).unwrap();
    let snapshot = ctx.memory_snapshot();
    assert!(snapshot.regions.len() >= 2);
    let html = report::render_html(&snapshot, ctx.memory_timeline().as_ref());

    let regions = region_rectangles(&html);
    assert_eq!(regions.len(), snapshot.regions.len());
    for ((id, count, rects, counted), region) in regions.iter().zip(&snapshot.regions) {
        assert_eq!(*id, region.id.0);
        assert_eq!(*count, region.chunks.len());
        assert_eq!(
            *rects,
            region.chunks.len(),
            "one rectangle per chunk in region {id}"
        );
        assert_eq!(*counted, region.chunks.len());
    }
    assert!(regions.iter().map(|r| r.2).sum::<usize>() > kept.len());
    assert_self_contained(&html);
    // Hover titles carry label and size; the other sections are there.
    assert!(
        html.contains("kv-cache · 128.00 KiB in use · f32[32768]"),
        "titles"
    );
    for section in [
        r#"id="curves""#,
        r#"class="bytes-in-use""#,
        r#"class="bytes-reserved""#,
        r#"id="top""#,
        r#"id="fragmentation""#,
        r#"id="plan""#,
        r#"id="transfers""#,
    ] {
        assert!(html.contains(section), "{section} missing");
    }
    for reason in &ctx.memory_plan().reasons {
        assert!(
            html.contains(&escaped(reason)),
            "plan reason missing: {reason}"
        );
    }
    // Counts in words: "1 free chunk.", "3 free chunks.".
    let free = snapshot
        .chunks()
        .filter(|(_, c)| c.state == gpu_arena::arena::ChunkState::Free)
        .count();
    let free = match free {
        1 => "1 free chunk.".to_string(),
        n => format!("{n} free chunks."),
    };
    assert!(html.contains(&free), "{free}");
    // The plan's rows say what the memory plan's own Display forms say, not Rust's debug.
    let plan = ctx.memory_plan();
    let device_row = format!("({}, {})", plan.vendor, plan.device_kind.name());
    assert!(html.contains(&escaped(&device_row)), "{device_row}");
    assert!(
        html.contains(&format!(">{}<", plan.bar)),
        "bar {}",
        plan.bar
    );
    // Without a timeline the page says how to get the curves.
    let html = report::render_html(&snapshot, None);
    assert!(html.contains("GPU_ARENA_TIMELINE=on"));
    region_rectangles(&html);
    drop(kept);
}

#[gpu_test]
fn tiny_chunks_of_huge_regions_merge_into_marks_that_still_count_every_chunk() {
    const REGION: u64 = 4 << 30;
    // Regions of 4 GiB (the options' cap), as an H200 arena has 27 of, without any GPU.
    let mut source = VirtualRegions::default();
    let mut arena = Arena::new(ArenaOptions {
        max_region_bytes: REGION,
        ..ArenaOptions::preallocated(27 * REGION)
    });
    // 30 000 allocations of 256 B to 64 KiB, every third freed: far below a pixel (4 MiB)
    // each. Then a few big ones that are drawn alone.
    let mut ids = Vec::new();
    for i in 0..30_000u64 {
        let a = arena
            .allocate(
                256 << (i % 9),
                0,
                Some(["a", "b", "c"][i as usize % 3]),
                &mut source,
            )
            .unwrap();
        ids.push(a.id);
    }
    for (i, id) in ids.iter().enumerate() {
        if i % 3 == 0 {
            arena.free(*id, None, &mut source).unwrap();
        }
    }
    for _ in 0..4 {
        arena
            .allocate(1 << 30, 0, Some("big"), &mut source)
            .unwrap();
    }
    let snapshot = MemorySnapshot::from_arena(arena.snapshot(), arena.pending_free_bytes());
    assert_eq!(snapshot.regions.len(), 27);
    let html = report::render_html(&snapshot, None);
    let regions = region_rectangles(&html);
    assert_eq!(regions.len(), 27);
    for ((_, count, rects, counted), region) in regions.iter().zip(&snapshot.regions) {
        assert_eq!(*count, region.chunks.len());
        assert_eq!(*counted, region.chunks.len(), "every chunk is counted once");
        assert!(*rects <= 2 * MAP_WIDTH_PX as usize, "{rects} rectangles");
    }
    let first = &regions[0];
    assert!(first.1 > 10_000 && first.2 < first.1 / 10, "{first:?}");
    assert!(html.contains("chunks below a pixel, merged"));
    assert!(
        html.len() < 4 << 20,
        "the page stays small: {} bytes",
        html.len()
    );
}

/// Headless Chromium, if installed (CI installs Debian's `chromium`).
fn chromium() -> Option<&'static str> {
    [
        "chromium",
        "chromium-browser",
        "google-chrome",
        "google-chrome-stable",
    ]
    .into_iter()
    .find(|name| {
        Command::new(name)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// Runs Chromium headless with `args` on `page`; its stdout.
///
/// Stdout is drained on a thread while we wait: a DOM dump is larger than a pipe's buffer, and
/// Chromium blocks on a full pipe. The flags keep it off the network (this machine has none).
fn run_chromium(browser: &str, args: &[&str], page: &Path, profile: &Path) -> String {
    let mut child = Command::new(browser)
        // Its own validation reports (it may start Vulkan) are not this binary's.
        .env_remove(harness::layer_log::SETTINGS_PATH)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--disable-quic",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut out);
        out
    });
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > CHROMIUM_TIMEOUT {
            let _ = child.kill();
            panic!("{browser} did not finish within {CHROMIUM_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    reader.join().unwrap()
}

#[gpu_test]
fn the_report_renders_in_headless_chromium() {
    let Some(browser) = chromium() else {
        crate::harness::skip(crate::harness::Need::Chromium);
        return;
    };
    let ctx = context_with(ArenaConfig {
        mem_fraction: MemFraction::fixed(0.02),
        max_region_bytes: Some(8 * MIB),
        timeline_capacity: 4096,
        ..test_config()
    });
    let arrays: Vec<_> = (0..12)
        .map(|i| {
            ctx.zeros::<f32>(&[32 << 10])
                .unwrap()
                .with_label(&format!("layer{}", i % 4))
        })
        .collect();
    let _ = ctx.device_get(&arrays[0]).unwrap();
    // A kernel, so the page has kernel times to draw.
    let kernel = ctx
        .kernel_with(
            KernelDesc::wgsl(
                "@group(0) @binding(0) var<storage, read_write> x: array<f32>;
                 @compute @workgroup_size(64)
                 fn main(@builtin(global_invocation_id) i: vec3<u32>) {
                     if (i.x < arrayLength(&x)) { x[i.x] = x[i.x] * 2.0; }
                 }",
                "main",
            )
            .label("double_rows"),
        )
        .unwrap();
    let mut doubled = ctx.zeros::<f32>(&[256]).unwrap();
    for _ in 0..3 {
        ctx.launch(&kernel)
            .arg_mut(&mut doubled)
            .grid_for(256)
            .run()
            .unwrap();
    }
    ctx.synchronize().unwrap();
    let dir = scratch_dir("chromium");
    let files = ctx.write_memory_profile(&dir, "report").unwrap();
    let chunks = ctx.memory_snapshot().chunks().count();

    let dom = run_chromium(
        browser,
        &["--dump-dom"],
        &files.report,
        &dir.join("profile"),
    );
    assert!(
        dom.contains("region-map"),
        "Chromium did not render the map: {dom:.300}"
    );
    assert_eq!(dom.matches("<rect class=\"chunk ").count(), chunks);
    assert!(dom.contains("bytes-in-use"));
    // The curve is scaled to the bytes in use (1.5 MiB here), not the 40 MiB reservation,
    // which is pinned to the top with its value; the peak is marked.
    let axis: u64 = dom
        .split("data-axis-bytes=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .and_then(|s| s.parse().ok())
        .expect("the rendered chart carries its axis top");
    let in_use = ctx.memory_snapshot().stats.arena.bytes_in_use;
    assert!(
        axis >= in_use && axis <= 2 * in_use,
        "axis {axis} for {in_use} bytes in use"
    );
    assert!(dom.contains("(above the axis)"));
    assert!(dom.contains("class=\"peak\""));
    // The growing table lists the test's own line, where the arrays were made.
    let growing = &dom[dom.find("id=\"growing\"").expect("a growing table")..];
    assert!(growing.contains(&format!("{}:", file!())), "{growing:.600}");
    // The kernel times table lists the kernel with its three calls.
    let kernels = &dom[dom.find("id=\"kernels\"").expect("a kernel times table")..];
    let row = &kernels[kernels.find("double_rows").expect("the kernel's row")..];
    assert!(row.contains("<td class=\"n\">3</td>"), "{row:.300}");

    let png = dir.join("report.png");
    run_chromium(
        browser,
        &[
            &format!("--screenshot={}", png.display()),
            "--window-size=1400,1800",
        ],
        &files.report,
        &dir.join("profile"),
    );
    let image = std::fs::read(&png).unwrap();
    assert_eq!(&image[1..4], b"PNG");
    assert!(
        image.len() > 20_000,
        "a blank page would be tiny: {} bytes",
        image.len()
    );
    drop((arrays, doubled));
    let _ = std::fs::remove_dir_all(dir);
}

#[gpu_test]
fn write_memory_profile_writes_snapshot_report_and_trace() {
    let dir = scratch_dir("profile-files");
    let traced = context_with(ArenaConfig {
        mem_fraction: MemFraction::fixed(0.02),
        timeline_capacity: 256,
        ..test_config()
    });
    let _a = traced.zeros::<u8>(&[4096]).unwrap();
    let files = traced.write_memory_profile(&dir, "traced").unwrap();
    assert_eq!(files.snapshot, dir.join("traced.json"));
    let snapshot =
        MemorySnapshot::from_json(&std::fs::read_to_string(&files.snapshot).unwrap()).unwrap();
    assert_eq!(snapshot.stats.arena.bytes_in_use, 4096);
    region_rectangles(&std::fs::read_to_string(&files.report).unwrap());
    let trace = files.trace.unwrap();
    let _: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(trace).unwrap()).unwrap();

    let untraced = context_with(ArenaConfig {
        mem_fraction: MemFraction::fixed(0.02),
        ..test_config()
    });
    let files = untraced.write_memory_profile(&dir, "untraced").unwrap();
    assert_eq!(files.trace, None);
    let html = std::fs::read_to_string(&files.report).unwrap();
    assert!(region_rectangles(&html).is_empty(), "nothing reserved yet");
    assert!(html.contains("No regions yet"));
    assert!(files.snapshot.exists());
    let _ = std::fs::remove_dir_all(dir);
}

#[gpu_test]
fn out_of_memory_writes_the_snapshot_and_report_and_names_them_in_the_error() {
    let dir = scratch_dir("oom");
    let ctx = context_with(ArenaConfig {
        mem_fraction: MemFraction::fixed(0.05),
        dump_on_oom: Some(dir.clone()),
        ..test_config()
    });
    let _kept = ctx.zeros::<u8>(&[1 << 20]).unwrap().with_label("kept");
    let limit = ctx.memory_plan().prealloc_bytes(0.05);
    let err = {
        let _scope = gpu_arena::label_scope("too big");
        ctx.alloc::<u8>(&[limit as usize]).unwrap_err()
    };
    let msg = err.to_string();
    assert!(matches!(err, Error::OutOfMemory { .. }), "{msg}");
    assert!(msg.contains("for \"too big\""), "{msg}");
    assert!(
        msg.contains("memory profile written (GPU_ARENA_DUMP_ON_OOM)"),
        "{msg}"
    );
    let written: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(written.len(), 2, "{written:?}");
    for path in &written {
        let name = path.file_name().unwrap().to_str().unwrap();
        assert!(name.starts_with(OOM_DUMP_STEM), "{name}");
        assert!(
            msg.contains(&path.display().to_string()),
            "{msg} names {name}"
        );
    }
    let json = written
        .iter()
        .find(|p| p.extension().unwrap() == "json")
        .unwrap();
    let snapshot = MemorySnapshot::from_json(&std::fs::read_to_string(json).unwrap()).unwrap();
    let report_text = snapshot.out_of_memory.as_deref().unwrap();
    assert!(report_text.starts_with("out of memory"), "{report_text}");
    assert!(snapshot
        .chunks()
        .any(|(_, c)| c.label.as_deref() == Some("kept")));
    let html = written
        .iter()
        .find(|p| p.extension().unwrap() == "html")
        .unwrap();
    let html = std::fs::read_to_string(html).unwrap();
    assert!(html.contains("<h2>Out of memory</h2>"));
    region_rectangles(&html);
    let _ = std::fs::remove_dir_all(dir);
}

#[gpu_test]
fn a_dump_that_cannot_be_written_says_why_in_the_error() {
    let dir = scratch_dir("oom-unwritable");
    let not_a_dir = dir.join("a-file");
    std::fs::write(&not_a_dir, b"in the way").unwrap();
    let ctx = context_with(ArenaConfig {
        mem_fraction: MemFraction::fixed(0.05),
        dump_on_oom: Some(not_a_dir.clone()),
        ..test_config()
    });
    let limit = ctx.memory_plan().prealloc_bytes(0.05);
    let msg = ctx
        .alloc::<u8>(&[limit as usize + 1])
        .unwrap_err()
        .to_string();
    assert!(msg.starts_with("out of memory"), "{msg}");
    assert!(
        msg.contains("GPU_ARENA_DUMP_ON_OOM could not write the memory profile to")
            && msg.contains(&not_a_dir.display().to_string()),
        "{msg}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// Runs out of memory on a context that dumps to `dir`; the error's text.
fn out_of_memory_dumping_to(dir: &Path) -> String {
    let ctx = context_with(ArenaConfig {
        mem_fraction: MemFraction::fixed(0.05),
        dump_on_oom: Some(dir.to_path_buf()),
        ..test_config()
    });
    let limit = ctx.memory_plan().prealloc_bytes(0.05);
    let err = ctx.alloc::<u8>(&[limit as usize + 1]).unwrap_err();
    assert!(matches!(err, Error::OutOfMemory { .. }), "{err}");
    err.to_string()
}

#[cfg(unix)]
#[gpu_test]
fn links_planted_at_the_next_dump_names_are_never_written_through() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch_dir("oom-links");
    let target = dir.join("precious");
    std::fs::write(&target, b"the user's data").unwrap();
    // The names dumps once had, `gpu-arena-oom-<unix ms>-<pid>-<n>`, for the next moments.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let mut planted = 0;
    for millis in now..now + 400 {
        for n in 0..4 {
            for extension in ["json", "html"] {
                let name = format!(
                    "{OOM_DUMP_STEM}-{millis}-{}-{n}.{extension}",
                    std::process::id()
                );
                std::os::unix::fs::symlink(&target, dir.join(name)).unwrap();
                planted += 1;
            }
        }
    }
    let msg = out_of_memory_dumping_to(&dir);
    assert!(
        msg.contains("memory profile written (GPU_ARENA_DUMP_ON_OOM)"),
        "{msg}"
    );
    assert_eq!(std::fs::read(&target).unwrap(), b"the user's data");
    let mut links = 0;
    let mut dumps = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_symlink() {
            links += 1;
        } else if entry.path() != target {
            dumps.push(entry.path());
        }
    }
    assert_eq!(links, planted, "the planted links are left as they were");
    assert_eq!(dumps.len(), 2, "{dumps:?}");
    for dump in &dumps {
        assert!(msg.contains(&dump.display().to_string()), "{msg}");
        let mode = std::fs::metadata(dump).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{}: {mode:o}", dump.display());
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[cfg(unix)]
#[gpu_test]
fn a_dump_dir_others_can_write_gets_no_dump_and_the_error_says_why() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch_dir("oom-open-dir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let msg = out_of_memory_dumping_to(&dir);
    assert!(msg.starts_with("out of memory"), "{msg}");
    assert!(
        msg.contains("GPU_ARENA_DUMP_ON_OOM could not write the memory profile to")
            && msg.contains(&dir.display().to_string())
            && msg.contains("mode 0777")
            && msg.contains("chmod 700"),
        "{msg}"
    );
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "no dump");
    let warnings = harness::logged_messages_containing("mode 0777");
    assert!(
        warnings
            .iter()
            .any(|w| w.contains(&dir.display().to_string())),
        "{warnings:?}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[cfg(unix)]
#[gpu_test]
fn a_dump_dir_of_another_user_gets_no_dump_and_the_error_says_why() {
    let dir = scratch_dir("oom-foreign-dir");
    // Only root can give a directory away.
    if std::os::unix::fs::chown(&dir, Some(4242), None).is_err() {
        crate::harness::skip(crate::harness::Need::Root);
        return;
    }
    let msg = out_of_memory_dumping_to(&dir);
    assert!(
        msg.contains("GPU_ARENA_DUMP_ON_OOM could not write the memory profile to")
            && msg.contains("another user (uid 4242"),
        "{msg}"
    );
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "no dump");
    let _ = std::fs::remove_dir_all(dir);
}

#[cfg(unix)]
#[gpu_test]
fn out_of_memory_creates_a_private_dump_dir() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch_dir("oom-new-dir").join("dumps");
    let msg = out_of_memory_dumping_to(&dir);
    assert!(
        msg.contains("memory profile written (GPU_ARENA_DUMP_ON_OOM)"),
        "{msg}"
    );
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "{mode:o}");
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

#[cfg(unix)]
#[gpu_test]
fn profile_writers_refuse_a_link_at_the_file_name_and_leave_its_target_untouched() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch_dir("profile-links");
    let target = dir.join("precious");
    std::fs::write(&target, b"the user's data").unwrap();
    for name in [
        "planted.json",
        "planted.html",
        "planted.trace.json",
        "page.html",
    ] {
        std::os::unix::fs::symlink(&target, dir.join(name)).unwrap();
    }
    let ctx = context_with(ArenaConfig {
        mem_fraction: MemFraction::fixed(0.02),
        timeline_capacity: 64,
        ..test_config()
    });
    let err = ctx.write_memory_profile(&dir, "planted").unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{err}");
    assert!(err.to_string().contains("symbolic link"), "{err}");
    assert!(
        err.to_string()
            .starts_with(&format!("writing {}", dir.join("planted.json").display())),
        "{err}"
    );
    // A directory path that is a file: the error names it and says so.
    let err = ctx.write_memory_profile(&target, "x").unwrap_err();
    assert!(
        err.to_string()
            .starts_with(&format!("creating {}: ", target.display()))
            && err
                .to_string()
                .ends_with("(it is not a directory: give a directory's path)"),
        "{err}"
    );
    let snapshot = ctx.memory_snapshot();
    let timeline = ctx.memory_timeline();
    let err = report::write_html(&snapshot, timeline.as_ref(), dir.join("page.html")).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{err}");
    assert!(err.to_string().contains("symbolic link"), "{err}");
    let err = timeline
        .as_ref()
        .unwrap()
        .write_chrome_trace(dir.join("planted.trace.json"), "test")
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{err}");
    assert!(err.to_string().contains("symbolic link"), "{err}");
    assert_eq!(std::fs::read(&target).unwrap(), b"the user's data");
    // New files are the user's alone; an existing regular file is replaced.
    let files = ctx.write_memory_profile(&dir, "fresh").unwrap();
    for file in [
        &files.snapshot,
        &files.report,
        files.trace.as_ref().unwrap(),
    ] {
        let mode = std::fs::metadata(file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{}: {mode:o}", file.display());
    }
    std::fs::write(&files.report, b"old").unwrap();
    ctx.write_memory_profile(&dir, "fresh").unwrap();
    assert!(std::fs::read_to_string(&files.report)
        .unwrap()
        .contains("<html"));
    let _ = std::fs::remove_dir_all(dir);
}

#[cfg(unix)]
#[gpu_test]
fn two_threads_running_out_of_memory_at_once_write_two_private_dumps() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch_dir("oom-threads");
    let ctx = context_with(ArenaConfig {
        mem_fraction: MemFraction::fixed(0.05),
        dump_on_oom: Some(dir.clone()),
        ..test_config()
    });
    let limit = ctx.memory_plan().prealloc_bytes(0.05);
    let messages: Vec<String> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    ctx.alloc::<u8>(&[limit as usize + 1])
                        .unwrap_err()
                        .to_string()
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    for msg in &messages {
        assert!(
            msg.contains("memory profile written (GPU_ARENA_DUMP_ON_OOM)"),
            "{msg}"
        );
    }
    let written: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(written.len(), 4, "two dumps of two files: {written:?}");
    for path in &written {
        let mode = std::fs::metadata(path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{}: {mode:o}", path.display());
        assert!(
            messages
                .iter()
                .filter(|m| m.contains(&path.display().to_string()))
                .count()
                == 1,
            "each file is named by one error: {}",
            path.display()
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Labels may hold any text: characters XML cannot hold at all come out as U+FFFD, so the
/// report stays well-formed.
#[gpu_test]
fn the_report_stays_well_formed_with_control_characters_in_labels() {
    let ctx = context_with(ArenaConfig {
        mem_fraction: MemFraction::fixed(0.02),
        timeline_capacity: 64,
        ..test_config()
    });
    let _a = ctx
        .zeros::<f32>(&[64])
        .unwrap()
        .with_label("a\u{0}b\u{1}c\u{b}\u{1f}\u{fffe}\u{ffff}");
    let html = report::render_html(&ctx.memory_snapshot(), ctx.memory_timeline().as_ref());
    region_rectangles(&html);
    assert!(
        html.contains("a\u{fffd}b\u{fffd}c"),
        "the label is still there"
    );
}

/// The profile writers replace a file by renaming a new one over it: a directory at the name
/// is refused as `InvalidInput`, a hard link's other name keeps its bytes, threads writing one
/// name at once leave one whole file, and a stem that is not a plain file name is refused.
#[cfg(unix)]
#[gpu_test]
fn profile_files_are_replaced_whole_and_stay_in_their_directory() {
    let dir = scratch_dir("profile-replace");
    let ctx = context_with(ArenaConfig {
        mem_fraction: MemFraction::fixed(0.02),
        timeline_capacity: 256,
        ..test_config()
    });
    let snapshot = ctx.memory_snapshot();
    std::fs::create_dir(dir.join("taken.html")).unwrap();
    let err = report::write_html(&snapshot, None, dir.join("taken.html")).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{err}");
    let other = dir.join("other.txt");
    std::fs::write(&other, b"the user's data").unwrap();
    std::fs::hard_link(&other, dir.join("linked.html")).unwrap();
    report::write_html(&snapshot, None, dir.join("linked.html")).unwrap();
    assert_eq!(std::fs::read(&other).unwrap(), b"the user's data");
    for stem in ["", ".", "..", "../escaped", "/tmp/absolute", "sub/name"] {
        let err = ctx.write_memory_profile(&dir, stem).unwrap_err();
        assert_eq!(
            err.kind(),
            std::io::ErrorKind::InvalidInput,
            "{stem:?}: {err}"
        );
    }
    assert!(!dir.join("../escaped.json").exists());
    let _live: Vec<_> = (0..64).map(|_| ctx.zeros::<u8>(&[4096]).unwrap()).collect();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..5 {
                    ctx.write_memory_profile(&dir, "same").unwrap();
                }
            });
        }
    });
    let json = std::fs::read_to_string(dir.join("same.json")).unwrap();
    MemorySnapshot::from_json(&json).unwrap();
    region_rectangles(&std::fs::read_to_string(dir.join("same.html")).unwrap());
    let trace = std::fs::read_to_string(dir.join("same.trace.json")).unwrap();
    serde_json::from_str::<serde_json::Value>(&trace).unwrap();
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let _ = std::fs::remove_dir_all(dir);
}
