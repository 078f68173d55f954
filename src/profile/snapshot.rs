//! The memory snapshot: every region and chunk with what the caller knows about it (label,
//! element type, shape, age), the memory plan and the statistics, as one serde value.

use super::stats::ContextMemoryStats;
use crate::arena::{AllocationId, ArenaSnapshot, ChunkRecord, ChunkState, RegionId};
use crate::config::{AllocatorKind, MemFraction};
use crate::context::{Context, ContextInner};
use crate::memory_kind::MemoryKind;
use crate::memplan::MemoryPlan;
use crate::trace::array_info::ArrayRegistry;
use serde::{Deserialize, Serialize};

/// The value of [`MemorySnapshot::format`], bumped when the layout changes incompatibly.
pub const SNAPSHOT_FORMAT: &str = "gpu-arena-memory-snapshot/1";

/// One chunk of a region: a live array, a free gap, or memory waiting for the GPU. Its
/// [`ChunkRecord`] (where it lies and what holds it, whose fields it derefs to) is the one the
/// arena's [`ChunkSnapshot`](crate::arena::ChunkSnapshot) holds; this adds what the caller
/// knows of the array in it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SnapshotChunk {
    /// Where the chunk lies and what holds it (`allocation` as
    /// [`DeviceArray::allocation_id`](crate::DeviceArray::allocation_id) gives it, `label` as
    /// `with_label` or the [`label_scope`](super::label_scope) it was made in set it).
    #[serde(flatten)]
    pub record: ChunkRecord,
    /// Allocations made since this one (its age counted in allocations); 0 when free.
    pub age_allocs: u64,
    /// Seconds since the array was allocated, for arrays while the timeline is on (its clock
    /// dates them).
    pub age_seconds: Option<f64>,
    /// The element type of the array (`f32`, `u32`, ...), for arrays.
    pub dtype: Option<String>,
    /// The shape of the array, for arrays.
    pub shape: Option<Vec<usize>>,
    /// Where the array was made: the user's call that created it, as
    /// `std::panic::Location` displays it (`src/main.rs:12:5`), for arrays. Absent in
    /// snapshots written before gpu-arena recorded sites.
    #[serde(default)]
    pub site: Option<String>,
    /// For a pending free: the submission after which the chunk is reusable.
    pub frontier: Option<u64>,
}

/// `chunk.offset`, `chunk.size`, ...: the record's fields read through the chunk.
impl std::ops::Deref for SnapshotChunk {
    type Target = ChunkRecord;

    fn deref(&self) -> &ChunkRecord {
        &self.record
    }
}

/// `chunk.state = ...`: the record's fields written through the chunk.
impl std::ops::DerefMut for SnapshotChunk {
    fn deref_mut(&mut self) -> &mut ChunkRecord {
        &mut self.record
    }
}

/// One region (one GPU buffer) and its chunks in address order; they tile `0..size` exactly.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SnapshotRegion {
    /// The backend's id of the region.
    pub id: RegionId,
    /// Bytes.
    pub size: u64,
    /// Chunks in address order.
    pub chunks: Vec<SnapshotChunk>,
}

impl SnapshotRegion {
    /// Bytes of chunks in use.
    pub fn bytes_in_use(&self) -> u64 {
        self.bytes_in(ChunkState::InUse)
    }

    /// Bytes of free chunks.
    pub fn bytes_free(&self) -> u64 {
        self.bytes_in(ChunkState::Free)
    }

    /// The largest free chunk.
    pub fn largest_free_chunk(&self) -> u64 {
        self.chunks
            .iter()
            .filter(|c| c.state == ChunkState::Free)
            .map(|c| c.size)
            .max()
            .unwrap_or(0)
    }

    fn bytes_in(&self, state: ChunkState) -> u64 {
        // Saturating: a snapshot read from JSON may hold any sizes.
        self.chunks
            .iter()
            .filter(|c| c.state == state)
            .map(|c| c.size)
            .fold(0, u64::saturating_add)
    }
}

/// One memory heap of the device, with what the driver says this process may use of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SnapshotHeap {
    /// The heap's index in the device's memory table.
    pub index: u32,
    /// The heap's size in bytes, as the driver reports it.
    pub size: u64,
    /// Whether the heap is device-local (VRAM on a discrete GPU).
    pub device_local: bool,
    /// Bytes of the heap this process may use now (`VK_EXT_memory_budget`): less than `size`
    /// when other processes or the desktop hold some. `None` when the device does not report it.
    pub budget: Option<u64>,
    /// Bytes of the heap this process uses now (arena, staging, wgpu's own), same source.
    pub usage: Option<u64>,
}

/// The heaps of `memory` with the budget and usage of `budgets` (heap order), when given and
/// of the right length.
pub(crate) fn snapshot_heaps(
    memory: &crate::memplan::MemoryProperties,
    budgets: Option<&[crate::memplan::HeapBudget]>,
) -> Vec<SnapshotHeap> {
    let budgets = budgets.filter(|b| b.len() == memory.heaps.len());
    memory
        .heaps
        .iter()
        .enumerate()
        .map(|(i, heap)| SnapshotHeap {
            index: i as u32,
            size: heap.size,
            device_local: heap.flags.contains(crate::memplan::HeapFlags::DEVICE_LOCAL),
            budget: budgets.map(|b| b[i].budget),
            usage: budgets.map(|b| b[i].usage),
        })
        .collect()
}

/// The settings that shape the arena, as the context was opened with them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SnapshotSettings {
    /// BFC or platform.
    pub allocator: AllocatorKind,
    /// Whether the arena reserves its memory at the first allocation.
    pub preallocate: bool,
    /// The share of the device heap reserved and the share the arena may grow to.
    pub mem_fraction: MemFraction,
    /// The largest region (and array) in bytes.
    pub max_region_bytes: u64,
}

/// Every region and chunk of a context's arena, with labels, element types, shapes and ages,
/// the statistics and the memory plan, at one instant. Serialises to JSON
/// ([`MemorySnapshot::to_json`]) and back; [`crate::report::write_html`] draws it. Its floats
/// are finite in every snapshot a context takes; JSON has no NaN or infinity, so a value
/// built by hand with one writes it as `null`, which does not read back.
///
/// ```no_run
/// # let ctx = gpu_arena::Context::new(Default::default())?;
/// let kv = ctx.zeros::<f32>(&[8, 1024])?.with_label("kv-cache");
/// let snapshot = ctx.memory_snapshot();
/// let chunk = snapshot.chunk(kv.allocation_id()).unwrap();
/// assert_eq!(chunk.label.as_deref(), Some("kv-cache"));
/// std::fs::write("snapshot.json", snapshot.to_json())?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemorySnapshot {
    /// [`SNAPSHOT_FORMAT`].
    pub format: String,
    /// The adapter's name.
    pub device: String,
    /// The wgpu backend (`Vulkan`, `Gl`, ...).
    pub backend: String,
    /// When the snapshot was taken, in nanoseconds on the timeline's clock (when it is on), so
    /// the report can mark the instant on the curves.
    pub time_ns: Option<u64>,
    /// The arena's settings; `None` for snapshots of a bare arena.
    pub settings: Option<SnapshotSettings>,
    /// The statistics at the same instant.
    pub stats: ContextMemoryStats,
    /// Which memory types back the arena and staging, and why; `None` for a bare arena.
    pub plan: Option<MemoryPlan>,
    /// The device's heaps with their budget and usage at the same instant; empty for a bare
    /// arena and in snapshots written before gpu-arena recorded heaps.
    #[serde(default)]
    pub heaps: Vec<SnapshotHeap>,
    /// Regions in creation order.
    pub regions: Vec<SnapshotRegion>,
    /// The out-of-memory report this snapshot was taken for, when it was.
    pub out_of_memory: Option<String>,
    /// The arena of the pinned-host memory kind ([`MemoryKind::PinnedHost`]) at the same
    /// instant, as a snapshot of its own (its statistics, regions and arrays; no device, plan
    /// or transfers): `None` where the device has no such kind, for a bare arena, and in
    /// snapshots written before gpu-arena had memory kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned_host: Option<Box<MemorySnapshot>>,
}

impl MemorySnapshot {
    /// A snapshot of a bare [`Arena`](crate::arena::Arena) (no device, no plan, no arrays).
    pub fn from_arena(arena: ArenaSnapshot, pending_free_bytes: u64) -> MemorySnapshot {
        Self::build(arena, pending_free_bytes, &ArrayRegistry::default(), None)
    }

    fn build(
        arena: ArenaSnapshot,
        pending_free_bytes: u64,
        arrays: &ArrayRegistry,
        now_ns: Option<u64>,
    ) -> MemorySnapshot {
        let num_allocs = arena.stats.num_allocs;
        let regions = arena
            .regions
            .into_iter()
            .map(|region| SnapshotRegion {
                id: region.id,
                size: region.size,
                chunks: region
                    .chunks
                    .into_iter()
                    .map(|c| {
                        let info = c.allocation.and_then(|id| arrays.get(id));
                        SnapshotChunk {
                            record: c.record,
                            age_allocs: if c.sequence == 0 {
                                0
                            } else {
                                num_allocs.saturating_sub(c.sequence)
                            },
                            age_seconds: info.and_then(|i| {
                                Some(now_ns?.saturating_sub(i.born_ns?) as f64 / 1e9)
                            }),
                            dtype: info.map(|i| i.dtype.to_string()),
                            shape: info.map(|i| i.shape().to_vec()),
                            site: info.map(|i| i.site.to_string()),
                            frontier: c.frontier,
                        }
                    })
                    .collect(),
            })
            .collect();
        MemorySnapshot {
            format: SNAPSHOT_FORMAT.to_string(),
            device: String::new(),
            backend: String::new(),
            time_ns: None,
            settings: None,
            stats: ContextMemoryStats {
                arena: arena.stats,
                pending_free_bytes,
                transfers: Default::default(),
            },
            plan: None,
            heaps: Vec::new(),
            regions,
            out_of_memory: None,
            pinned_host: None,
        }
    }

    /// The snapshot of each memory kind the device has: this one's own arena
    /// ([`MemoryKind::Device`]), then [`pinned_host`](Self::pinned_host) when present.
    pub fn kinds(&self) -> impl Iterator<Item = (MemoryKind, &MemorySnapshot)> {
        let pinned = self.pinned_host.as_deref();
        std::iter::once((MemoryKind::Device, self))
            .chain(pinned.map(|snapshot| (MemoryKind::PinnedHost, snapshot)))
    }

    /// Every chunk with its region, in region then address order.
    pub fn chunks(&self) -> impl Iterator<Item = (&SnapshotRegion, &SnapshotChunk)> {
        self.regions
            .iter()
            .flat_map(|r| r.chunks.iter().map(move |c| (r, c)))
    }

    /// The chunk of allocation `id`, if it is live (or pending free).
    pub fn chunk(&self, id: AllocationId) -> Option<&SnapshotChunk> {
        self.chunks()
            .map(|(_, c)| c)
            .find(|c| c.allocation == Some(id))
    }

    /// The `n` largest chunks in use, largest first (ties: older first).
    pub fn top_allocations(&self, n: usize) -> Vec<(&SnapshotRegion, &SnapshotChunk)> {
        let mut live: Vec<_> = self
            .chunks()
            .filter(|(_, c)| c.state == ChunkState::InUse)
            .collect();
        live.sort_by(|a, b| {
            b.1.size
                .cmp(&a.1.size)
                .then(b.1.age_allocs.cmp(&a.1.age_allocs))
        });
        live.truncate(n);
        live
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a snapshot is plain data")
    }

    /// Reads a snapshot written by [`MemorySnapshot::to_json`].
    ///
    /// # Errors
    /// serde_json's error when the text is not such a snapshot, or is one of another layout
    /// (its `format` is not [`SNAPSHOT_FORMAT`]; the message names both).
    pub fn from_json(text: &str) -> serde_json::Result<MemorySnapshot> {
        let snapshot: MemorySnapshot = serde_json::from_str(text)?;
        if snapshot.format != SNAPSHOT_FORMAT {
            return Err(serde::de::Error::custom(format!(
                "the snapshot's format is {:?}, not {SNAPSHOT_FORMAT:?}: written by another \
                 version of gpu-arena, whose layout this one does not read",
                snapshot.format
            )));
        }
        Ok(snapshot)
    }
}

impl Context {
    /// Every region and chunk of the arena with labels, element types, shapes and ages, the
    /// statistics and the memory plan, taken under the arena's lock so it is consistent.
    ///
    /// Costs a walk over all chunks and a copy of their labels: meant for debugging and
    /// reports, not for every step of a hot loop.
    pub fn memory_snapshot(&self) -> MemorySnapshot {
        self.inner.memory_snapshot()
    }
}

impl ContextInner {
    pub(crate) fn memory_snapshot(&self) -> MemorySnapshot {
        let now_ns = self.timeline().map(|t| t.tick());
        let mut snapshot = {
            let memory = self.lock_memory();
            let of = |kind| {
                let arena = memory.arena_of(kind)?;
                Some(MemorySnapshot::build(
                    arena.snapshot(),
                    arena.pending_free_bytes(),
                    memory.arrays_of(kind)?,
                    now_ns,
                ))
            };
            let mut snapshot = of(MemoryKind::Device).expect("every device has device memory");
            snapshot.pinned_host = of(MemoryKind::PinnedHost).map(Box::new);
            snapshot
        };
        let config = self.config();
        let info = self.adapter_info();
        snapshot.device = info.name.clone();
        snapshot.backend = format!("{:?}", info.backend);
        snapshot.time_ns = now_ns;
        snapshot.settings = Some(SnapshotSettings {
            allocator: config.allocator,
            preallocate: config.preallocate,
            mem_fraction: config.mem_fraction,
            max_region_bytes: self.max_region_bytes(),
        });
        snapshot.stats.transfers = self.transfer_counters().snapshot();
        snapshot.plan = Some(self.plan().clone());
        let budgets = crate::backend::heap_budgets(self.device());
        snapshot.heaps = snapshot_heaps(&self.description().memory, budgets.as_deref());
        snapshot
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memplan::{vram_and_host_heaps, HeapBudget, MemoryProperties};

    fn two_heaps() -> MemoryProperties {
        MemoryProperties {
            heaps: vram_and_host_heaps(),
            types: Vec::new(),
        }
    }

    #[test]
    fn both_chunk_snapshots_serialise_as_flat_objects_with_their_keys_in_order() {
        let record = ChunkRecord {
            offset: 256,
            size: 512,
            state: ChunkState::InUse,
            allocation: Some(AllocationId(3)),
            label: Some("w".into()),
            requested: 500,
        };
        let arena = crate::arena::ChunkSnapshot {
            record: record.clone(),
            sequence: 2,
            frontier: None,
        };
        let text = serde_json::to_string(&arena).unwrap();
        assert_eq!(
            text,
            r#"{"offset":256,"size":512,"state":"InUse","allocation":3,"label":"w","requested":500,"sequence":2,"frontier":null}"#
        );
        assert_eq!(
            serde_json::from_str::<crate::arena::ChunkSnapshot>(&text).unwrap(),
            arena
        );
        let chunk = SnapshotChunk {
            record,
            age_allocs: 1,
            age_seconds: None,
            dtype: Some("f32".into()),
            shape: Some(vec![125]),
            site: Some("src/main.rs:1:1".into()),
            frontier: None,
        };
        let text = serde_json::to_string(&chunk).unwrap();
        assert_eq!(
            text,
            r#"{"offset":256,"size":512,"state":"InUse","allocation":3,"label":"w","requested":500,"age_allocs":1,"age_seconds":null,"dtype":"f32","shape":[125],"site":"src/main.rs:1:1","frontier":null}"#
        );
        assert_eq!(serde_json::from_str::<SnapshotChunk>(&text).unwrap(), chunk);
    }

    #[test]
    fn heaps_carry_their_budget_and_usage_when_the_device_reports_them() {
        let budgets = [
            HeapBudget {
                budget: 7 << 30,
                usage: 1 << 20,
            },
            HeapBudget {
                budget: 12 << 30,
                usage: 0,
            },
        ];
        let heaps = snapshot_heaps(&two_heaps(), Some(&budgets));
        assert_eq!(heaps.len(), 2);
        assert_eq!((heaps[0].index, heaps[0].size), (0, 8 << 30));
        assert!(heaps[0].device_local && !heaps[1].device_local);
        assert_eq!(
            (heaps[0].budget, heaps[0].usage),
            (Some(7 << 30), Some(1 << 20))
        );
        assert_eq!(heaps[1].budget, Some(12 << 30));
    }

    #[test]
    fn heaps_without_a_budget_or_with_a_mismatched_one_show_none() {
        for budgets in [
            None,
            Some(
                &[HeapBudget {
                    budget: 1,
                    usage: 0,
                }][..],
            ),
        ] {
            let heaps = snapshot_heaps(&two_heaps(), budgets);
            assert_eq!(heaps.len(), 2);
            assert!(heaps
                .iter()
                .all(|h| h.budget.is_none() && h.usage.is_none()));
        }
    }

    #[test]
    fn a_snapshot_written_before_heaps_were_recorded_still_reads() {
        let mut snapshot =
            MemorySnapshot::from_arena(crate::arena::Arena::new(Default::default()).snapshot(), 0);
        snapshot.heaps = snapshot_heaps(&two_heaps(), None);
        let mut value: serde_json::Value = serde_json::from_str(&snapshot.to_json()).unwrap();
        value.as_object_mut().unwrap().remove("heaps");
        let old = MemorySnapshot::from_json(&value.to_string()).unwrap();
        assert!(old.heaps.is_empty());
        assert_eq!(old.regions, snapshot.regions);
        // And the new field reads back as written.
        let back = MemorySnapshot::from_json(&snapshot.to_json()).unwrap();
        assert_eq!(back, snapshot);
    }
}
