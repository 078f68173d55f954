//! The HTML report: one self-contained page (no script, no network, no CDN) that shows the
//! memory of a context: an SVG map of every region, the bytes-in-use and bytes-reserved curves
//! over time, GPU time per kernel, the largest allocations, the labels, the fragmentation figures and the memory
//! plan with its reasons. Hover a chunk or a transfer for its details.
//!
//! The page is also well-formed XML (every element closed, the five XML entities only), so
//! tools can parse it.
//!
//! ```no_run
//! # let ctx = gpu_arena::Context::new(Default::default())?;
//! let snapshot = ctx.memory_snapshot();
//! gpu_arena::report::write_html(&snapshot, ctx.memory_timeline().as_ref(), "memory.html")?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod colours;
mod curves;
pub(crate) mod format;
mod region_map;

pub use colours::LABEL_PALETTE;
pub use curves::PLOT_WIDTH_PX;
pub use region_map::{MAP_WIDTH_PX, MIN_CHUNK_PX};

use super::snapshot::{MemorySnapshot, SnapshotChunk, SnapshotRegion};
use crate::arena::ChunkState;
use crate::count::count;
use crate::trace::timeline::MemoryTimeline;
use crate::transfer::{DirectionStats, TransferStats};
use colours::{LabelColours, FREE_FILL, PENDING_SWATCH, UNLABELLED_FILL};
use format::{duration_ns, percent, total, Bytes, Escape};
use std::collections::HashMap;
use std::fmt::Write;
use std::path::Path;

/// Rows in the table of the largest allocations.
pub const TOP_ALLOCATIONS: usize = 25;
/// Rows in the table of labels (the rest are summed in one row).
const TOP_LABELS: usize = 16;
/// Free-chunk size classes of the fragmentation histogram: powers of four from 256 B (the
/// allocation granule) up; the last class takes everything above.
const FREE_SIZE_CLASSES: u32 = 12;

/// Writes [`render_html`] to `path` as a new file readable by the user alone (mode 0600 on
/// Unix: the report names every allocation), renamed over a regular file there: a reader, or
/// another writer of the same path, sees one whole report. A symbolic link at `path` is
/// refused rather than followed, and a hard link's other names keep the old bytes, so a link
/// planted where the report is expected cannot make the process overwrite another file; a
/// FIFO there is refused without waiting for a reader.
///
/// # Errors
/// The file system's error; [`std::io::ErrorKind::InvalidInput`] for a link, a directory or a
/// file that is not regular at `path`.
pub fn write_html(
    snapshot: &MemorySnapshot,
    timeline: Option<&MemoryTimeline>,
    path: impl AsRef<Path>,
) -> std::io::Result<()> {
    crate::backend::write_named_file(path.as_ref(), render_html(snapshot, timeline).as_bytes())
}

/// The report as one HTML string. `timeline` gives the curves; without it (the timeline is off
/// by default) the page says how to turn it on.
pub fn render_html(snapshot: &MemorySnapshot, timeline: Option<&MemoryTimeline>) -> String {
    let labels = label_totals(snapshot);
    let colours = LabelColours::new(labels.iter().map(|l| l.label.as_str()));
    let mut page = String::with_capacity(64 * 1024);
    page.push_str("<!DOCTYPE html>\n");
    page.push_str(
        r#"<html xmlns="http://www.w3.org/1999/xhtml" lang="en"><head><meta charset="utf-8"/>"#,
    );
    let _ = write!(
        page,
        "<title>gpu-arena memory report: {}</title><style>{STYLE}</style></head><body>",
        Escape(&snapshot.device)
    );
    header(&mut page, snapshot);
    page.push_str("<main>");
    if let Some(oom) = &snapshot.out_of_memory {
        let _ = write!(
            page,
            r#"<section class="oom"><h2>Out of memory</h2><pre>{}</pre></section>"#,
            Escape(oom)
        );
    }
    cards(&mut page, snapshot);
    map_section(&mut page, snapshot, &colours, &labels);
    pinned_host_section(&mut page, snapshot, &colours);
    curves_section(&mut page, snapshot, timeline);
    growing_section(&mut page, timeline);
    kernels_section(&mut page, timeline);
    page.push_str(r#"<div class="two">"#);
    top_allocations(&mut page, snapshot, &colours, "top", "Largest allocations");
    labels_section(&mut page, snapshot, &colours, &labels);
    page.push_str("</div>");
    fragmentation(&mut page, snapshot);
    page.push_str(r#"<div class="two">"#);
    plan_section(&mut page, snapshot);
    transfers_section(&mut page, &snapshot.stats.transfers);
    page.push_str("</div>");
    let _ = write!(
        page,
        r#"<footer>{} · written by gpu-arena {} · hover a chunk, a curve marker or a transfer for details</footer>"#,
        Escape(&snapshot.format),
        env!("CARGO_PKG_VERSION")
    );
    page.push_str("</main></body></html>\n");
    page
}

const STYLE: &str = r#"
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;margin:0;background:#f4f6f9;color:#1d2430}
header{background:#1d2430;color:#fff;padding:16px 28px}
header h1{margin:0;font-size:21px;font-weight:600}
header .sub{opacity:.78;font-size:13px;margin-top:2px}
main{padding:4px 28px 28px;max-width:1380px}
section{background:#fff;border:1px solid #dfe3ea;border-radius:8px;padding:12px 16px;margin:14px 0;overflow-x:auto}
h2{font-size:15px;margin:0 0 8px;font-weight:600}
.note{color:#5b6575;font-size:12.5px;margin:2px 0 8px}
.cards{display:grid;grid-template-columns:repeat(6,1fr);gap:10px;margin-top:14px}
.card{background:#fff;border:1px solid #dfe3ea;border-radius:8px;padding:8px 12px}
.card .v{font-size:19px;font-weight:600;font-variant-numeric:tabular-nums}
.card .k{font-size:12px;color:#5b6575}
.card.warn .v{color:#c0392b}
table{border-collapse:collapse;width:100%;font-size:12.5px}
th,td{padding:3px 8px;border-bottom:1px solid #eef0f3;text-align:left;white-space:nowrap}
th{color:#5b6575;font-weight:600}
.n{text-align:right;font-variant-numeric:tabular-nums}
.swatch{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:6px;vertical-align:-1px}
.legend-row{display:flex;flex-wrap:wrap;gap:4px 16px;font-size:12.5px;margin:2px 0 10px}
.oom{background:#fff4f4;border-color:#e15759}
.oom pre{white-space:pre-wrap;margin:0;font-size:12.5px}
.two{display:grid;grid-template-columns:1fr 1fr;gap:0 14px}
.meter{background:#e9edf2;height:9px;border-radius:2px;width:160px}
.meter div{background:#4e79a7;height:9px;border-radius:2px}
svg text{font:11.5px system-ui,-apple-system,"Segoe UI",Roboto,Arial,sans-serif;fill:#1d2430}
svg text.axis{fill:#5b6575}
svg .region-id{font-weight:600}
svg rect.chunk:hover{stroke:#1d2430;stroke-width:1.5}
ol.reasons{margin:4px 0 0;padding-left:22px;font-size:12.5px}
footer{color:#7a8494;font-size:12px;margin-top:10px}
"#;

fn header(page: &mut String, snapshot: &MemorySnapshot) {
    let _ = write!(
        page,
        r#"<header><h1>gpu-arena memory report — {}</h1><div class="sub">"#,
        Escape(if snapshot.device.is_empty() {
            "arena"
        } else {
            &snapshot.device
        })
    );
    let mut parts = Vec::new();
    if !snapshot.backend.is_empty() {
        parts.push(snapshot.backend.clone());
    }
    if let Some(s) = &snapshot.settings {
        let fraction = if s.mem_fraction.limit > s.mem_fraction.reserve {
            format!(
                "memory fraction {:.3}, growing to {:.3}",
                s.mem_fraction.reserve, s.mem_fraction.limit
            )
        } else {
            format!("memory fraction {:.3}", s.mem_fraction.reserve)
        };
        parts.push(format!(
            "{} allocator, {}, {fraction}",
            match s.allocator {
                crate::config::AllocatorKind::Bfc => "BFC",
                crate::config::AllocatorKind::Platform => "platform",
            },
            if s.preallocate {
                "preallocated"
            } else {
                "growing on demand"
            },
        ));
        parts.push(format!("largest region {}", Bytes(s.max_region_bytes)));
    }
    if let Some(t) = snapshot.time_ns {
        parts.push(format!("taken {} after the context opened", duration_ns(t)));
    }
    let _ = write!(page, "{}</div></header>", Escape(&parts.join(" · ")));
}

fn cards(page: &mut String, snapshot: &MemorySnapshot) {
    let s = &snapshot.stats.arena;
    let live = snapshot
        .chunks()
        .filter(|(_, c)| c.state == ChunkState::InUse)
        .count();
    let total_free = total(snapshot.regions.iter().map(|r| r.bytes_free()));
    let cards: [(&str, String, bool); 12] = [
        ("bytes in use", Bytes(s.bytes_in_use).to_string(), false),
        (
            "peak bytes in use",
            Bytes(s.peak_bytes_in_use).to_string(),
            false,
        ),
        ("bytes reserved", Bytes(s.bytes_reserved).to_string(), false),
        (
            "bytes limit",
            s.bytes_limit
                .map_or("none".into(), |l| Bytes(l).to_string()),
            false,
        ),
        (
            "largest free block",
            Bytes(s.largest_free_block_bytes).to_string(),
            false,
        ),
        (
            "fragmentation",
            format!("{:.1}%", s.fragmentation * 100.0),
            s.fragmentation > 0.5,
        ),
        ("free in total", Bytes(total_free).to_string(), false),
        (
            "pending free",
            Bytes(snapshot.stats.pending_free_bytes).to_string(),
            false,
        ),
        ("live allocations", live.to_string(), false),
        ("allocations made", s.num_allocs.to_string(), false),
        ("regions", s.num_regions.to_string(), false),
        (
            "transferred",
            Bytes(snapshot.stats.transferred_bytes()).to_string(),
            false,
        ),
    ];
    page.push_str(r#"<div class="cards">"#);
    for (key, value, warn) in cards {
        let _ = write!(
            page,
            r#"<div class="card{}"><div class="v">{}</div><div class="k">{key}</div></div>"#,
            if warn { " warn" } else { "" },
            Escape(&value)
        );
    }
    page.push_str("</div>");
}

/// Bytes and count of live allocations per label, largest first.
struct LabelTotal {
    label: String,
    count: u64,
    bytes: u64,
}

fn label_totals(snapshot: &MemorySnapshot) -> Vec<LabelTotal> {
    let mut totals: HashMap<&str, (u64, u64)> = HashMap::new();
    for (_, chunk) in snapshot.chunks() {
        if let (ChunkState::InUse, Some(label)) = (chunk.state, &chunk.label) {
            let entry = totals.entry(label).or_default();
            entry.0 += 1; // one per chunk: cannot pass usize::MAX
            entry.1 = entry.1.saturating_add(chunk.size);
        }
    }
    let mut totals: Vec<LabelTotal> = totals
        .into_iter()
        .map(|(label, (count, bytes))| LabelTotal {
            label: label.to_string(),
            count,
            bytes,
        })
        .collect();
    totals.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.label.cmp(&b.label)));
    totals
}

fn swatch(page: &mut String, fill: &str) {
    let _ = write!(
        page,
        r#"<span class="swatch" style="background:{fill}"></span>"#
    );
}

fn map_section(
    page: &mut String,
    snapshot: &MemorySnapshot,
    colours: &LabelColours,
    labels: &[LabelTotal],
) {
    let _ = write!(
        page,
        r#"<section id="map"><h2>Regions</h2><p class="note">Every region at the same width ({MAP_WIDTH_PX} px; its size is in the caption), chunks to scale. Runs of chunks narrower than {MIN_CHUNK_PX} px are merged into pixel-wide marks that count them. Hover for details.</p><div class="legend-row">"#
    );
    for label in labels.iter().take(LABEL_PALETTE.len()) {
        swatch(page, colours.fill(Some(&label.label)));
        let _ = write!(page, "<span>{}</span>", Escape(&label.label));
    }
    if labels.len() > LABEL_PALETTE.len() {
        swatch(page, colours::OTHER_LABEL_FILL);
        page.push_str("<span>other labels</span>");
    }
    for (fill, text) in [
        (UNLABELLED_FILL, "unlabelled"),
        (PENDING_SWATCH, "pending free (waiting for the GPU)"),
        (FREE_FILL, "free"),
    ] {
        swatch(page, fill);
        let _ = write!(page, "<span>{text}</span>");
    }
    page.push_str("</div>");
    page.push_str(&region_map::region_map(snapshot, colours, true));
    page.push_str("</section>");
}

/// The pinned-host kind's arena, when the snapshot has one: its figures, its regions drawn as
/// the device arena's are, and its largest arrays.
fn pinned_host_section(page: &mut String, snapshot: &MemorySnapshot, colours: &LabelColours) {
    let Some(host) = snapshot.pinned_host.as_deref() else {
        return;
    };
    let stats = &host.stats.arena;
    let arrays = host
        .chunks()
        .filter(|(_, c)| c.state == ChunkState::InUse)
        .count();
    let _ = write!(
        page,
        r#"<section id="pinned-host"><h2>Pinned host memory</h2><p class="note">The pinned_host memory kind's own arena: {} in use in {} (peak {}), {} held in {} of a {} limit, {} pending free.</p>"#,
        Bytes(stats.bytes_in_use),
        count(arrays, "array"),
        Bytes(stats.peak_bytes_in_use),
        Bytes(stats.bytes_reserved),
        count(host.regions.len(), "region"),
        stats
            .bytes_limit
            .map_or("no".to_string(), |l| Bytes(l).to_string()),
        Bytes(host.stats.pending_free_bytes),
    );
    if !host.regions.is_empty() {
        // The device's map, before it on the page, defines the pattern both use.
        page.push_str(&region_map::region_map(host, colours, false));
    }
    top_allocations(
        page,
        host,
        colours,
        "pinned-host-top",
        "Largest pinned-host allocations",
    );
    page.push_str("</section>");
}

fn curves_section(page: &mut String, snapshot: &MemorySnapshot, timeline: Option<&MemoryTimeline>) {
    page.push_str(r#"<section id="curves"><h2>Memory over time</h2>"#);
    let chart = timeline.and_then(|t| {
        curves::curves(
            t,
            snapshot.stats.arena.bytes_limit,
            snapshot.time_ns,
            snapshot.out_of_memory.is_some(),
        )
    });
    match (timeline, chart) {
        (Some(t), Some(chart)) => {
            let _ = write!(
                page,
                r#"<p class="note">{}{}. Dotted lines: regions reserved or released.</p>"#,
                count(t.events.len(), "event"),
                if t.dropped > 0 {
                    format!(
                        "; the {} oldest were dropped (ring of {}), so the curves start later",
                        t.dropped, t.capacity
                    )
                } else {
                    String::new()
                }
            );
            page.push_str(&chart);
        }
        (Some(_), None) => page.push_str(r#"<p class="note">The timeline holds no event yet.</p>"#),
        (None, _) => page.push_str(
            r#"<p class="note">The timeline is off. Set <code>GPU_ARENA_TIMELINE=on</code> (or <code>ArenaConfig::timeline_capacity</code>) to record allocations, frees, transfers and dispatches and draw the curves here.</p>"#,
        ),
    }
    page.push_str("</section>");
}

/// Rows of the "growing" table at most.
const GROWING_ROWS: usize = 20;

/// The sites whose live bytes rose across the timeline, most first: the leak suspects.
fn growing_section(page: &mut String, timeline: Option<&MemoryTimeline>) {
    page.push_str(r#"<section id="growing"><h2>Growing</h2>"#);
    let Some(timeline) = timeline else {
        page.push_str(r#"<p class="note">The timeline is off: turn it on to see which allocation sites keep memory.</p></section>"#);
        return;
    };
    let growing = timeline.growing_sites();
    page.push_str(r#"<p class="note">Arrays allocated during the timeline and still alive at its end, by the line that made them and their label, most bytes first: a site that keeps an array per step is a leak suspect. <code>MemorySnapshot::diff</code> gives the same between two snapshots.</p><table><tr><th>site</th><th>label</th><th class="n">arrays</th><th class="n">bytes</th></tr>"#);
    for g in growing.iter().take(GROWING_ROWS) {
        let _ = write!(
            page,
            r#"<tr><td class="site">{}</td><td>{}</td><td class="n">{}</td><td class="n">{}</td></tr>"#,
            Escape(g.site.as_deref().unwrap_or("(unknown site)")),
            Escape(g.label.as_deref().unwrap_or("")),
            g.count,
            Bytes(g.bytes)
        );
    }
    if growing.is_empty() {
        page.push_str(
            r#"<tr><td colspan="4">Every array allocated during the timeline was freed.</td></tr>"#,
        );
    }
    page.push_str("</table></section>");
}

/// Rows of the "kernel times" table at most.
const KERNEL_ROWS: usize = 30;

/// GPU time per kernel, most first: the slow kernels.
fn kernels_section(page: &mut String, timeline: Option<&MemoryTimeline>) {
    page.push_str(r#"<section id="kernels"><h2>Kernel times</h2>"#);
    let Some(timeline) = timeline else {
        page.push_str(r#"<p class="note">The timeline is off: turn it on to time each kernel on the GPU.</p></section>"#);
        return;
    };
    let times = timeline.kernel_times();
    if times.is_empty() {
        page.push_str(r#"<p class="note">No kernel was timed: the device has no timestamp queries (wgpu's <code>TIMESTAMP_QUERY</code>), or no kernel ran while the timeline held its events.</p></section>"#);
        return;
    }
    let all = times.total_ns();
    let _ = write!(
        page,
        r#"<p class="note">GPU time between each dispatch's begin and end timestamps, per kernel, over the dispatches the timeline holds: {} in {}. <code>Context::kernel_times</code> prints the same table; the trace's <code>GPU</code> track shows each dispatch.</p><table><tr><th>kernel</th><th class="n">calls</th><th class="n">total</th><th class="n">mean</th><th class="n">max</th><th class="n">share</th></tr>"#,
        duration_ns(all),
        crate::count::count(times.calls(), "dispatch").plural("dispatches")
    );
    for k in times.kernels.iter().take(KERNEL_ROWS) {
        let _ = write!(
            page,
            r#"<tr><td>{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{:.1}%</td></tr>"#,
            Escape(&k.name),
            k.calls,
            duration_ns(k.total_ns),
            duration_ns(k.mean_ns()),
            duration_ns(k.max_ns),
            percent(k.total_ns, all)
        );
    }
    page.push_str("</table></section>");
}

fn chunk_type(chunk: &SnapshotChunk) -> String {
    match (&chunk.dtype, &chunk.shape) {
        (Some(dtype), Some(shape)) => format!("{dtype}{shape:?}"),
        _ => String::new(),
    }
}

/// The table of `snapshot`'s largest live arrays, as a section `id` under `heading`.
fn top_allocations(
    page: &mut String,
    snapshot: &MemorySnapshot,
    colours: &LabelColours,
    id: &str,
    heading: &str,
) {
    let _ = write!(
        page,
        r#"<section id="{id}"><h2>{heading}</h2><table><tr><th>label</th><th class="n">size</th><th>type</th><th class="n">region</th><th class="n">offset</th><th class="n">age</th><th>site</th></tr>"#
    );
    let top: Vec<(&SnapshotRegion, &SnapshotChunk)> = snapshot.top_allocations(TOP_ALLOCATIONS);
    for (region, chunk) in &top {
        page.push_str("<tr><td>");
        swatch(page, colours.fill(chunk.label.as_deref()));
        let _ = write!(
            page,
            r#"{}</td><td class="n">{}</td><td>{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="site">{}</td></tr>"#,
            Escape(chunk.label.as_deref().unwrap_or("(unlabelled)")),
            Bytes(chunk.size),
            Escape(&chunk_type(chunk)),
            region.id.0,
            chunk.offset,
            chunk
                .age_seconds
                .map_or(format!("{} allocs", chunk.age_allocs), |s| {
                    duration_ns((s * 1e9) as u64)
                }),
            Escape(chunk.site.as_deref().unwrap_or("")),
        );
    }
    if top.is_empty() {
        page.push_str(r#"<tr><td colspan="7">Nothing is allocated.</td></tr>"#);
    }
    page.push_str("</table></section>");
}

fn labels_section(
    page: &mut String,
    snapshot: &MemorySnapshot,
    colours: &LabelColours,
    labels: &[LabelTotal],
) {
    let in_use = snapshot.stats.arena.bytes_in_use;
    page.push_str(r#"<section id="labels"><h2>Memory by label</h2><table><tr><th>label</th><th class="n">arrays</th><th class="n">bytes</th><th class="n">share of in use</th><th></th></tr>"#);
    let row = |page: &mut String, fill: &str, name: &str, count: u64, bytes: u64| {
        page.push_str("<tr><td>");
        swatch(page, fill);
        let share = percent(bytes, in_use);
        let _ = write!(
            page,
            r#"{}</td><td class="n">{count}</td><td class="n">{}</td><td class="n">{share:.1}%</td><td><div class="meter"><div style="width:{:.1}%"></div></div></td></tr>"#,
            Escape(name),
            Bytes(bytes),
            share.min(100.0)
        );
    };
    for label in labels.iter().take(TOP_LABELS) {
        row(
            page,
            colours.fill(Some(&label.label)),
            &label.label,
            label.count,
            label.bytes,
        );
    }
    let rest = &labels[labels.len().min(TOP_LABELS)..];
    if !rest.is_empty() {
        row(
            page,
            colours::OTHER_LABEL_FILL,
            &format!("{} more labels", rest.len()),
            total(rest.iter().map(|l| l.count)),
            total(rest.iter().map(|l| l.bytes)),
        );
    }
    let (count, bytes) = snapshot
        .chunks()
        .filter(|(_, c)| c.state == ChunkState::InUse && c.label.is_none())
        .fold((0u64, 0u64), |(n, b), (_, c)| {
            (n.saturating_add(1), b.saturating_add(c.size))
        });
    if count > 0 {
        row(page, UNLABELLED_FILL, "(unlabelled)", count, bytes);
    }
    page.push_str("</table></section>");
}

fn fragmentation(page: &mut String, snapshot: &MemorySnapshot) {
    let s = &snapshot.stats.arena;
    let free: Vec<u64> = snapshot
        .chunks()
        .filter(|(_, c)| c.state == ChunkState::Free)
        .map(|(_, c)| c.size)
        .collect();
    let total_free = total(free.iter().copied());
    let _ = write!(
        page,
        r#"<section id="fragmentation"><h2>Fragmentation</h2><p class="note">Fragmentation = 1 − largest free block / free bytes = 1 − {} / {} = <b>{:.3}</b>: 0 means all free memory is one block; near 1, it is scattered in pieces too small for large arrays. {}.</p><div class="two"><table><tr><th class="n">region</th><th class="n">size</th><th class="n">in use</th><th class="n">free</th><th class="n">largest free</th><th class="n">free chunks</th><th class="n">fragmentation</th></tr>"#,
        Bytes(s.largest_free_block_bytes),
        Bytes(total_free),
        s.fragmentation,
        count(free.len(), "free chunk")
    );
    for region in &snapshot.regions {
        let region_free = region.bytes_free();
        let largest = region.largest_free_chunk();
        let pieces = region
            .chunks
            .iter()
            .filter(|c| c.state == ChunkState::Free)
            .count();
        let frag = if region_free == 0 {
            0.0
        } else {
            1.0 - largest as f64 / region_free as f64
        };
        let _ = write!(
            page,
            r#"<tr><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{pieces}</td><td class="n">{frag:.3}</td></tr>"#,
            region.id.0,
            Bytes(region.size),
            Bytes(region.bytes_in_use()),
            Bytes(region_free),
            Bytes(largest),
        );
    }
    page.push_str(r#"</table><table><tr><th>free chunk size</th><th class="n">chunks</th><th class="n">bytes</th><th></th></tr>"#);
    let mut classes = [(0u64, 0u64); FREE_SIZE_CLASSES as usize];
    for &size in &free {
        // 256 B = class 0; each class is four times the one before.
        let class = ((size.max(256).ilog2() - 8) / 2).min(FREE_SIZE_CLASSES - 1) as usize;
        classes[class].0 = classes[class].0.saturating_add(1);
        classes[class].1 = classes[class].1.saturating_add(size);
    }
    for (class, &(count, bytes)) in classes.iter().enumerate() {
        if count == 0 {
            continue;
        }
        let low = 256u64 << (2 * class);
        let range = if class as u32 == FREE_SIZE_CLASSES - 1 {
            format!("{} and more", Bytes(low))
        } else {
            format!("{} – {}", Bytes(low), Bytes(low.saturating_mul(4)))
        };
        let _ = write!(
            page,
            r#"<tr><td>{}</td><td class="n">{count}</td><td class="n">{}</td><td><div class="meter"><div style="width:{:.1}%"></div></div></td></tr>"#,
            Escape(&range),
            Bytes(bytes),
            percent(bytes, total_free)
        );
    }
    page.push_str("</table></div></section>");
}

fn plan_section(page: &mut String, snapshot: &MemorySnapshot) {
    page.push_str(r#"<section id="plan"><h2>Memory plan</h2>"#);
    let Some(plan) = &snapshot.plan else {
        page.push_str(
            r#"<p class="note">No plan: this snapshot is of a bare arena.</p></section>"#,
        );
        return;
    };
    let rows: [(&str, String); 9] = [
        (
            "device",
            format!(
                "{} ({}, {})",
                plan.device,
                plan.vendor,
                plan.device_kind.name()
            ),
        ),
        ("unified memory (UMA)", plan.uma.to_string()),
        ("host-visible VRAM (BAR)", plan.bar.to_string()),
        (
            "arena memory",
            format!(
                "type {} on heap {}{}",
                plan.arena_type,
                plan.arena_heap,
                if plan.arena_host_visible {
                    ", host-visible (zero-copy transfers)"
                } else {
                    ""
                }
            ),
        ),
        (
            "staging",
            format!(
                "upload type {}, readback type {}",
                plan.upload_type, plan.readback_type
            ),
        ),
        (
            "pinned host memory",
            plan.pinned_host.as_ref().map_or("none".into(), |host| {
                format!("type {} on heap {}", host.memory_type, host.heap)
            }),
        ),
        ("heap size", Bytes(plan.heap_bytes).to_string()),
        (
            "budget",
            plan.budget_bytes
                .map_or("not reported".into(), |b| Bytes(b).to_string()),
        ),
        ("reservable", Bytes(plan.reservable_bytes).to_string()),
    ];
    page.push_str("<table>");
    for (key, value) in rows {
        let _ = write!(page, "<tr><th>{key}</th><td>{}</td></tr>", Escape(&value));
    }
    for heap in &snapshot.heaps {
        let budget = match (heap.budget, heap.usage) {
            (Some(budget), Some(usage)) => {
                format!("budget {}, {} in use", Bytes(budget), Bytes(usage))
            }
            _ => "no budget reported".to_string(),
        };
        let kind = if heap.device_local {
            "device-local"
        } else {
            "host"
        };
        let _ = write!(
            page,
            "<tr><th>heap {}</th><td>{} {kind}, {}</td></tr>",
            heap.index,
            Bytes(heap.size),
            Escape(&budget)
        );
    }
    page.push_str(r#"</table><ol class="reasons">"#);
    for reason in &plan.reasons {
        let _ = write!(page, "<li>{}</li>", Escape(reason));
    }
    page.push_str("</ol></section>");
}

fn transfers_section(page: &mut String, transfers: &TransferStats) {
    page.push_str(r#"<section id="transfers"><h2>Transfers</h2><table><tr><th>direction</th><th class="n">explicit</th><th class="n">explicit bytes</th><th class="n">implicit</th><th class="n">implicit bytes</th></tr>"#);
    let rows: [(&str, &DirectionStats); 3] = [
        ("host → device", &transfers.host_to_device),
        ("device → host", &transfers.device_to_host),
        ("device → device", &transfers.device_to_device),
    ];
    for (name, d) in rows {
        let _ = write!(
            page,
            r#"<tr><td>{name}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td></tr>"#,
            d.explicit.count,
            Bytes(d.explicit.bytes),
            d.implicit.count,
            Bytes(d.implicit.bytes)
        );
    }
    page.push_str(r#"</table><p class="note">Implicit transfers (host data where a device array was expected, <code>to_vec</code>, comparisons, printing) are what the transfer guard watches.</p></section>"#);
}
