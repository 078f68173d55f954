//! The SVG map of every region: one row per region, chunks to scale, coloured by state and
//! label, with a hover title on each.
//!
//! Every region is drawn at the same width, [`MAP_WIDTH_PX`], whatever its size, so a map of
//! 27 regions of 4 GiB (an H200 under a 75 % fraction) reads as well as one of two small ones;
//! each row's caption gives the region's size.
//!
//! The rule for small chunks, which keeps the picture faithful and the file bounded:
//! - a chunk at least [`MIN_CHUNK_PX`] wide is one rectangle (`data-chunks="1"`);
//! - a chunk narrower than that between wider ones is still its own rectangle, widened to
//!   [`MIN_CHUNK_PX`] so it stays visible;
//! - a run of two or more consecutive narrower chunks is cut into pieces of about
//!   [`MIN_CHUNK_PX`] each, and each piece is one rectangle (class `merged`,
//!   `data-chunks="n"`) whose title counts its chunks and their bytes in use and free, and
//!   whose colour is that of the state (and label) holding most of its bytes.
//!
//! So a region whose chunks are all at least a pixel wide has exactly one rectangle per chunk,
//! the `data-chunks` values of a region always add up to its chunk count, and a region never
//! has more than about two rectangles per pixel of width.

use super::colours::{LabelColours, FREE_FILL, PENDING_FILL, PENDING_PATTERN};
use super::format::{percent, total, Bytes, Escape};
use crate::arena::ChunkState;
use crate::profile::snapshot::{MemorySnapshot, SnapshotChunk, SnapshotRegion};
use std::fmt::Write;

/// The drawn width of every region, in CSS pixels.
pub const MAP_WIDTH_PX: f64 = 1000.0;
/// The narrowest rectangle drawn: one CSS pixel, the smallest mark a screen shows.
pub const MIN_CHUNK_PX: f64 = 1.0;
/// Width of the caption column left of the rows.
const CAPTION_PX: f64 = 200.0;
/// Height of a region's row.
const ROW_PX: f64 = 24.0;
/// Space between rows.
const ROW_GAP_PX: f64 = 8.0;
/// Rectangles at least this wide get a white edge that separates neighbours; narrower ones
/// would be all edge.
const EDGE_MIN_PX: f64 = 4.0;

/// The SVG element of the map; with `defs`, it defines the pending hatch pattern that every
/// map on the page fills with (an id is the page's once).
pub fn region_map(snapshot: &MemorySnapshot, colours: &LabelColours, defs: bool) -> String {
    let rows = snapshot.regions.len().max(1) as f64;
    let height = rows * (ROW_PX + ROW_GAP_PX);
    let width = CAPTION_PX + MAP_WIDTH_PX + 2.0;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="region-map" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="map of every region and chunk">"#
    );
    if defs {
        svg.push_str(PENDING_PATTERN);
    }
    if snapshot.regions.is_empty() {
        let _ = write!(
            svg,
            r#"<text x="0" y="16" class="caption">No regions yet: the arena reserves memory at the first allocation.</text>"#
        );
    }
    for (row, region) in snapshot.regions.iter().enumerate() {
        let y = row as f64 * (ROW_PX + ROW_GAP_PX);
        let in_use = region.bytes_in_use();
        let _ = write!(
            svg,
            r#"<text x="0" y="{:.1}" class="caption"><tspan class="region-id">region {}</tspan> {} · {:.0}% in use</text>"#,
            y + ROW_PX * 0.68,
            region.id.0,
            Bytes(region.size),
            percent(in_use, region.size)
        );
        let _ = write!(
            svg,
            r#"<g class="region" data-region="{}" data-chunk-count="{}" transform="translate({CAPTION_PX},{y})">"#,
            region.id.0,
            region.chunks.len()
        );
        let _ = write!(
            svg,
            r##"<rect class="region-bg" x="0" y="0" width="{MAP_WIDTH_PX}" height="{ROW_PX}" fill="{FREE_FILL}" stroke="#c3cad5" stroke-width="1"/>"##
        );
        draw_region(&mut svg, region, colours);
        svg.push_str("</g>");
    }
    svg.push_str("</svg>");
    svg
}

/// What a rectangle stands for: one chunk, or a merged run of tiny ones.
struct Mark<'a> {
    chunks: &'a [SnapshotChunk],
}

fn draw_region(svg: &mut String, region: &SnapshotRegion, colours: &LabelColours) {
    let scale = MAP_WIDTH_PX / region.size.max(1) as f64;
    let tiny = |c: &SnapshotChunk| (c.size as f64 * scale) < MIN_CHUNK_PX;
    let chunks = &region.chunks;
    let mut i = 0;
    while i < chunks.len() {
        if !tiny(&chunks[i]) {
            draw(
                svg,
                region,
                &Mark {
                    chunks: &chunks[i..=i],
                },
                scale,
                colours,
            );
            i += 1;
            continue;
        }
        // A run of tiny chunks: cut it into pieces of about one pixel.
        let run_end = chunks[i..]
            .iter()
            .position(|c| !tiny(c))
            .map_or(chunks.len(), |n| i + n);
        while i < run_end {
            let mut end = i;
            let mut width = 0.0;
            while end < run_end && width < MIN_CHUNK_PX {
                width += chunks[end].size as f64 * scale;
                end += 1;
            }
            draw(
                svg,
                region,
                &Mark {
                    chunks: &chunks[i..end],
                },
                scale,
                colours,
            );
            i = end;
        }
    }
}

fn draw(
    svg: &mut String,
    region: &SnapshotRegion,
    mark: &Mark<'_>,
    scale: f64,
    colours: &LabelColours,
) {
    let first = &mark.chunks[0];
    let bytes = total(mark.chunks.iter().map(|c| c.size));
    let x = first.offset as f64 * scale;
    let width = (bytes as f64 * scale)
        .max(MIN_CHUNK_PX)
        .min(MAP_WIDTH_PX - x + MIN_CHUNK_PX);
    let merged = mark.chunks.len() > 1;
    // The colour and class of the bytes that dominate the mark.
    let dominant = if merged {
        dominant_chunk(mark.chunks)
    } else {
        first
    };
    let (state, fill) = match dominant.state {
        ChunkState::InUse => ("in-use", colours.fill(dominant.label.as_deref())),
        ChunkState::PendingFree => ("pending", PENDING_FILL),
        ChunkState::Free => ("free", FREE_FILL),
    };
    let edge = if width >= EDGE_MIN_PX {
        r##" stroke="#ffffff" stroke-width="0.75""##
    } else {
        ""
    };
    let _ = write!(
        svg,
        r#"<rect class="chunk {state}{}" data-chunks="{}" data-offset="{}" x="{x:.2}" y="0" width="{width:.2}" height="{ROW_PX}" fill="{fill}"{edge}><title>"#,
        if merged { " merged" } else { "" },
        mark.chunks.len(),
        first.offset,
    );
    if merged {
        let in_use = total(
            mark.chunks
                .iter()
                .filter(|c| c.state == ChunkState::InUse)
                .map(|c| c.size),
        );
        let _ = write!(
            svg,
            "{} chunks below a pixel, merged: {} in use, {} free or pending · offsets {}–{} of region {}",
            mark.chunks.len(),
            Bytes(in_use),
            Bytes(bytes.saturating_sub(in_use)),
            first.offset,
            first.offset.saturating_add(bytes),
            region.id.0
        );
    } else {
        chunk_title(svg, region, first);
    }
    svg.push_str("</title></rect>");
}

/// The chunk whose state and label hold the most bytes of a run.
fn dominant_chunk(chunks: &[SnapshotChunk]) -> &SnapshotChunk {
    let key = |c: &SnapshotChunk| (c.state, c.label.clone());
    let mut best = &chunks[0];
    let mut best_bytes = 0;
    for candidate in chunks {
        let bytes = total(
            chunks
                .iter()
                .filter(|c| key(c) == key(candidate))
                .map(|c| c.size),
        );
        if bytes > best_bytes {
            best = candidate;
            best_bytes = bytes;
        }
    }
    best
}

/// The hover text of one chunk: what it is, its size, and where.
pub fn chunk_title(out: &mut String, region: &SnapshotRegion, chunk: &SnapshotChunk) {
    match chunk.state {
        ChunkState::Free => {
            let _ = write!(out, "free · {}", Bytes(chunk.size));
        }
        ChunkState::PendingFree => {
            let _ = write!(
                out,
                "pending free · {} · reusable after submission {}",
                Bytes(chunk.size),
                chunk.frontier.unwrap_or(0)
            );
        }
        ChunkState::InUse => {
            let _ = write!(
                out,
                "{} · {} in use",
                Escape(chunk.label.as_deref().unwrap_or("(unlabelled)")),
                Bytes(chunk.size)
            );
            if let (Some(dtype), Some(shape)) = (&chunk.dtype, &chunk.shape) {
                let _ = write!(out, " · {}{:?}", Escape(dtype), shape);
            }
            if let Some(site) = &chunk.site {
                let _ = write!(out, " · made at {}", Escape(site));
            }
            if let Some(id) = chunk.allocation {
                let _ = write!(out, " · allocation {}", id.0);
            }
            let age = crate::count::count(chunk.age_allocs, "allocation");
            let _ = write!(out, " · {age} old");
            if let Some(age) = chunk.age_seconds {
                let age = super::format::duration_ns((age * 1e9) as u64);
                let _ = write!(out, " ({age})");
            }
        }
    }
    let _ = write!(out, " · offset {} of region {}", chunk.offset, region.id.0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arena::{AllocationId, ChunkRecord, RegionId};

    fn chunk(offset: u64, size: u64, state: ChunkState) -> SnapshotChunk {
        SnapshotChunk {
            record: ChunkRecord {
                offset,
                size,
                state,
                allocation: (state != ChunkState::Free).then_some(AllocationId(offset)),
                label: None,
                requested: size,
            },
            age_allocs: 0,
            age_seconds: None,
            dtype: None,
            shape: None,
            site: None,
            frontier: None,
        }
    }

    fn marks(region: &SnapshotRegion) -> Vec<usize> {
        let mut svg = String::new();
        draw_region(&mut svg, region, &LabelColours::default());
        svg.split("data-chunks=\"")
            .skip(1)
            .map(|s| s[..s.find('"').unwrap()].parse().unwrap())
            .collect()
    }

    #[test]
    fn chunks_a_pixel_wide_or_more_get_one_rectangle_each() {
        // 1000 px over 1 MiB: a pixel is about 1 KiB.
        let region = SnapshotRegion {
            id: RegionId(1),
            size: 1 << 20,
            chunks: (0..256)
                .map(|i| chunk(i * 4096, 4096, ChunkState::InUse))
                .collect(),
        };
        assert_eq!(marks(&region), vec![1; 256]);
    }

    #[test]
    fn runs_of_tiny_chunks_merge_into_pixel_wide_pieces_that_count_them() {
        // A 4 GiB region (one H200 region): a pixel is about 4 MiB, so 100 000 chunks of
        // 256 B to 4 KiB are tiny, then one big free tail.
        let mut chunks = Vec::new();
        let mut offset = 0;
        for i in 0..100_000u64 {
            let size = 256 << (i % 5);
            let state = if i % 3 == 0 {
                ChunkState::Free
            } else {
                ChunkState::InUse
            };
            chunks.push(chunk(offset, size, state));
            offset += size;
        }
        let size = 4u64 << 30;
        chunks.push(chunk(offset, size - offset, ChunkState::Free));
        let region = SnapshotRegion {
            id: RegionId(7),
            size,
            chunks,
        };
        let marks = marks(&region);
        assert_eq!(marks.iter().sum::<usize>(), region.chunks.len());
        assert!(marks.len() < 2 * MAP_WIDTH_PX as usize, "{}", marks.len());
        assert_eq!(
            *marks.last().unwrap(),
            1,
            "the big tail is its own rectangle"
        );
    }

    #[test]
    fn a_lone_tiny_chunk_between_wide_ones_stays_visible_on_its_own() {
        let size = 1u64 << 30;
        let region = SnapshotRegion {
            id: RegionId(2),
            size,
            chunks: vec![
                chunk(0, size / 2, ChunkState::InUse),
                chunk(size / 2, 256, ChunkState::Free),
                chunk(size / 2 + 256, size / 2 - 256, ChunkState::InUse),
            ],
        };
        assert_eq!(marks(&region), vec![1, 1, 1]);
    }
}
