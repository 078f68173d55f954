//! What changed between two memory snapshots: the arrays born after the first and still alive
//! in the second, grouped by where they were made and how they were labelled — the leak
//! suspects, as PyTorch users read them off memory_viz and JAX users off two device memory
//! profiles. The same grouping over the timeline gives the report's "growing" table.

use super::snapshot::MemorySnapshot;
use crate::arena::{AllocationId, Bytes, ChunkState};
use crate::trace::timeline::{MemoryTimeline, TimelineEventKind};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::fmt;

/// Arrays of one allocation site and label born between two snapshots and alive in the later.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteGrowth {
    /// The user's call that made them (`src/main.rs:12:5`); `None` for allocations without a
    /// recorded site (a bare arena, or a snapshot written before sites were recorded).
    pub site: Option<String>,
    /// Their label, if any.
    pub label: Option<String>,
    /// How many such arrays.
    pub count: u64,
    /// Bytes they hold (rounded to 256, as the arena sets them aside).
    pub bytes: u64,
}

/// The arrays born between two snapshots and still alive, by site and label, most bytes first
/// (ties: most arrays, then site and label in order). Made by [`MemorySnapshot::diff`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotDiff {
    /// One row per site and label.
    pub groups: Vec<SiteGrowth>,
    /// Arrays in all groups.
    pub count: u64,
    /// Bytes in all groups.
    pub bytes: u64,
    /// Bytes in use in the later snapshot minus in the earlier (negative when memory went
    /// back), freed arrays included.
    pub bytes_in_use_change: i64,
}

impl MemorySnapshot {
    /// The arrays alive in `self` that `before` did not hold, in device and pinned-host memory
    /// alike, grouped by allocation site and label: what a loop kept between two snapshots. An
    /// allocation is new when its id is not among `before`'s chunks of the same memory kind
    /// (an id comes back only after 2^32 allocations of the arena, and every arena's ids
    /// differ from another's; compare two snapshots of one context). `bytes_in_use_change`
    /// counts both kinds.
    ///
    /// ```no_run
    /// # let ctx = gpu_arena::Context::new(Default::default())?;
    /// let before = ctx.memory_snapshot();
    /// let mut kept = Vec::new();
    /// for _ in 0..100 {
    ///     kept.push(ctx.zeros::<f32>(&[32])?); // the leak
    /// }
    /// print!("{}", ctx.memory_snapshot().diff(&before)); // 100 arrays at this file's line
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn diff(&self, before: &MemorySnapshot) -> SnapshotDiff {
        // Each kind's arena numbers its allocations on its own: compared kind by kind.
        fn kinds(s: &MemorySnapshot) -> [Option<&MemorySnapshot>; 2] {
            [Some(s), s.pinned_host.as_deref()]
        }
        let mut born = Vec::new();
        for (now, then) in kinds(self).into_iter().zip(kinds(before)) {
            let known: HashSet<AllocationId> = (then.into_iter())
                .flat_map(|s| s.chunks().filter_map(|(_, c)| c.allocation))
                .collect();
            born.extend(
                (now.into_iter().flat_map(|s| s.chunks()))
                    .filter(|(_, c)| c.state == ChunkState::InUse)
                    .filter(|(_, c)| c.allocation.is_some_and(|id| !known.contains(&id)))
                    .map(|(_, c)| (c.site.as_deref(), c.label.as_deref(), c.size)),
            );
        }
        let groups = group(born.into_iter());
        let in_use = |s: &MemorySnapshot| {
            (kinds(s).into_iter().flatten())
                .map(|k| k.stats.arena.bytes_in_use as i128)
                .sum::<i128>()
        };
        SnapshotDiff {
            count: groups.iter().map(|g| g.count).sum(),
            bytes: groups.iter().map(|g| g.bytes).fold(0, u64::saturating_add),
            bytes_in_use_change: (in_use(self) - in_use(before))
                .clamp(i64::MIN as i128, i64::MAX as i128) as i64,
            groups,
        }
    }
}

impl MemoryTimeline {
    /// The sites whose live bytes rose across the timeline: arrays allocated in the events
    /// held and not freed by the last, by allocation site and latest label, most bytes first.
    /// What the report's "growing" table lists; a loop that keeps an array per step comes out
    /// on top with its line.
    pub fn growing_sites(&self) -> Vec<SiteGrowth> {
        let mut live: HashMap<AllocationId, (Option<&str>, Option<&str>, u64)> = HashMap::new();
        for event in &self.events {
            match &event.kind {
                TimelineEventKind::Alloc {
                    allocation,
                    size,
                    label,
                    site,
                    ..
                } => {
                    live.insert(*allocation, (site.as_deref(), label.as_deref(), *size));
                }
                TimelineEventKind::Label { allocation, label } => {
                    if let Some(entry) = live.get_mut(allocation) {
                        entry.1 = Some(label);
                    }
                }
                TimelineEventKind::Free { allocation, .. } => {
                    live.remove(allocation);
                }
                _ => {}
            }
        }
        group(live.into_values())
    }
}

/// Arrays (site, label, bytes) grouped by site and label, most bytes first (ties: most
/// arrays, then site and label in order).
fn group<'a>(
    arrays: impl Iterator<Item = (Option<&'a str>, Option<&'a str>, u64)>,
) -> Vec<SiteGrowth> {
    // (site, label) → (arrays, bytes).
    type Key<'k> = (Option<&'k str>, Option<&'k str>);
    let mut groups: HashMap<Key<'_>, (u64, u64)> = HashMap::new();
    for (site, label, bytes) in arrays {
        let entry = groups.entry((site, label)).or_default();
        entry.0 += 1;
        entry.1 = entry.1.saturating_add(bytes);
    }
    let mut groups: Vec<SiteGrowth> = groups
        .into_iter()
        .map(|((site, label), (count, bytes))| SiteGrowth {
            site: site.map(str::to_string),
            label: label.map(str::to_string),
            count,
            bytes,
        })
        .collect();
    groups.sort_by(|a, b| {
        (b.bytes, b.count)
            .cmp(&(a.bytes, a.count))
            .then_with(|| (&a.site, &a.label).cmp(&(&b.site, &b.label)))
    });
    groups
}

impl fmt::Display for SnapshotDiff {
    /// A table: bytes, arrays, site and label per group, then the totals.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{:>12} {:>8}  site  [label]", "bytes", "arrays")?;
        for g in &self.groups {
            write!(
                f,
                "{:>12} {:>8}  {}",
                Bytes(g.bytes).to_string(),
                g.count,
                g.site.as_deref().unwrap_or("(unknown site)")
            )?;
            match &g.label {
                Some(label) => writeln!(f, "  [{label}]")?,
                None => writeln!(f)?,
            }
        }
        writeln!(
            f,
            "{:>12} {:>8}  born since the earlier snapshot and still alive; bytes in use changed by {}{}",
            Bytes(self.bytes).to_string(),
            self.count,
            if self.bytes_in_use_change < 0 { "-" } else { "+" },
            Bytes(self.bytes_in_use_change.unsigned_abs())
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arena::{ChunkRecord, RegionId};
    use crate::profile::snapshot::{SnapshotChunk, SnapshotRegion};

    fn array(id: u64, size: u64, site: &str, label: Option<&str>) -> SnapshotChunk {
        SnapshotChunk {
            record: ChunkRecord {
                offset: id * 4096,
                size,
                state: ChunkState::InUse,
                allocation: Some(AllocationId(id)),
                label: label.map(str::to_string),
                requested: size,
            },
            age_allocs: 0,
            age_seconds: None,
            dtype: Some("f32".into()),
            shape: Some(vec![size as usize / 4]),
            site: Some(site.to_string()),
            frontier: None,
        }
    }

    fn snapshot(chunks: Vec<SnapshotChunk>) -> MemorySnapshot {
        let mut s =
            MemorySnapshot::from_arena(crate::arena::Arena::new(Default::default()).snapshot(), 0);
        s.stats.arena.bytes_in_use = chunks.iter().map(|c| c.size).sum();
        s.regions = vec![SnapshotRegion {
            id: RegionId(0),
            size: 1 << 20,
            chunks,
        }];
        s
    }

    #[test]
    fn arrays_born_after_the_earlier_snapshot_and_alive_are_grouped_by_site_and_label() {
        let before = snapshot(vec![array(1, 1024, "a.rs:1:1", None)]);
        let mut freed = array(9, 4096, "c.rs:3:3", None);
        freed.state = ChunkState::PendingFree;
        let after = snapshot(vec![
            array(1, 1024, "a.rs:1:1", None),
            array(2, 256, "b.rs:2:2", None),
            array(3, 256, "b.rs:2:2", None),
            array(4, 256, "b.rs:2:2", Some("kv")),
            array(5, 512, "a.rs:1:1", None),
            freed,
        ]);
        let diff = after.diff(&before);
        let rows: Vec<(Option<&str>, Option<&str>, u64, u64)> = diff
            .groups
            .iter()
            .map(|g| (g.site.as_deref(), g.label.as_deref(), g.count, g.bytes))
            .collect();
        assert_eq!(
            rows,
            [
                // Equal bytes: more arrays first.
                (Some("b.rs:2:2"), None, 2, 512),
                (Some("a.rs:1:1"), None, 1, 512),
                (Some("b.rs:2:2"), Some("kv"), 1, 256),
            ]
        );
        assert_eq!((diff.count, diff.bytes), (4, 1280));
        assert_eq!(diff.bytes_in_use_change, 1280 + 4096);
        let text = diff.to_string();
        assert!(text.contains("b.rs:2:2  [kv]"), "{text}");
        assert!(text.contains("1.25 KiB"), "{text}");
    }

    #[test]
    fn a_snapshot_compared_with_itself_shows_nothing_new() {
        let s = snapshot(vec![array(1, 1024, "a.rs:1:1", None)]);
        let diff = s.diff(&s);
        assert!(diff.groups.is_empty());
        assert_eq!(
            (diff.count, diff.bytes, diff.bytes_in_use_change),
            (0, 0, 0)
        );
    }

    #[test]
    fn memory_that_went_back_shows_as_a_negative_change() {
        let before = snapshot(vec![array(1, 1024, "a.rs:1:1", None)]);
        let after = snapshot(Vec::new());
        let diff = after.diff(&before);
        assert!(diff.groups.is_empty());
        assert_eq!(diff.bytes_in_use_change, -1024);
        assert!(diff.to_string().contains("changed by -1.00 KiB"));
    }
}
