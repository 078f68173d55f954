//! The policy: from a device description to a memory plan.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::error::MemPlanError;
use super::pinned_host::{choose_pinned_host, PinnedHostPlan};
use super::placement::{
    first_on_heap, fmt_bytes, heap_first, heap_size, largest_heap, non_coherent_note,
    ranked_for_host_reads, Placement, SYSTEM_MEMORY,
};
use super::rank::{skip_reason, MemoryRequest, Skip, MAX_MEMORY_TYPES};
use super::table::{
    DeviceDescription, DeviceKind, HeapBudget, HeapFlags, MemoryProperties, MemoryTypeFlags as F,
    Vendor,
};

/// A CPU-visible device-local heap beside another device-local heap at least as large (the
/// VRAM) is a PCIe BAR window, not VRAM, when it is smaller than that heap, or as large and
/// under this size: the classic BAR is 256 MiB and NVIDIA reports 214-246 MiB; Resizable BAR
/// exposes all of VRAM. A CPU-visible device-local heap with no such heap beside it is the
/// device's memory itself, whatever its size ([`BarClass::Full`]).
pub const SMALL_BAR_MAX: u64 = 1 << 30;

/// On UMA, a host heap more than this many times the size of the largest device-local heap
/// makes that device-local heap a carve-out (AMD APUs on Windows: 256 MiB next to GiBs of GTT),
/// and the arena takes the host heap: it is the same DRAM and the GPU reads it as fast.
pub const UMA_CARVEOUT_RATIO: u64 = 2;

/// Without `VK_EXT_memory_budget`, the share of a heap the arena may take, in percent: VMA's
/// fallback in `vmaGetHeapBudgets` ("80% heuristics").
pub const NO_BUDGET_PERCENT: u64 = 80;

/// Preallocations are rounded down to a multiple of this: the arena's 256-byte granularity
/// (the largest `minStorageBufferOffsetAlignment` Vulkan allows).
pub const PREALLOC_ALIGN: u64 = 256;

/// How much of the device's memory the host can map directly (the PCIe BAR).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BarClass {
    /// No device-local memory is host-visible.
    None,
    /// Only a window of device-local memory is host-visible (typically 256 MiB): a
    /// CPU-visible heap beside a larger device-local one (see [`SMALL_BAR_MAX`]).
    Small,
    /// All of the main device-local heap is host-visible (Resizable BAR, full BAR, UMA): the
    /// CPU-visible heap has no larger device-local heap beside it.
    Full,
}

impl fmt::Display for BarClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::None => "none",
            Self::Small => "small",
            Self::Full => "full",
        })
    }
}

/// Which memory types and heap gpu-arena uses on one device, and why.
///
/// Types are Vulkan memory type indices, heaps are heap indices. Each `*_candidates` list is
/// ranked, best first, and starts with the chosen type; turn one into a `memory_type_bits`
/// mask with [`MemoryPlan::type_mask`]. gpu-allocator takes the *lowest* index in the mask
/// that has the flags of its `MemoryLocation`, so to get the plan's choice ask with
/// `MemoryLocation::Unknown` and a mask of one candidate at a time (`1 << candidate`), moving
/// to the next candidate when an allocation fails or the resource's own `memory_type_bits`
/// exclude it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryPlan {
    /// The device name.
    pub device: String,
    /// The vendor.
    pub vendor: Vendor,
    /// The device kind.
    pub device_kind: DeviceKind,
    /// Device memory is host memory (APUs, integrated GPUs, software devices): the arena is
    /// host-visible when it can be (a type flagged both `DEVICE_LOCAL` and `HOST_VISIBLE`), and
    /// puts/gets may map it instead of copying.
    pub uma: bool,
    /// How much device-local memory the host can map.
    pub bar: BarClass,
    /// The heap holding the host-visible device-local memory, when there is any.
    pub bar_heap: Option<u32>,
    /// The best host-visible device-local type on [`bar_heap`](Self::bar_heap): for small,
    /// direct writes into device memory. Bulk staging does not use it.
    pub bar_type: Option<u32>,
    /// The memory type that backs the arena.
    pub arena_type: u32,
    /// The heap of [`arena_type`](Self::arena_type).
    pub arena_heap: u32,
    /// Whether the arena's type is host-visible (UMA: zero-copy puts and gets).
    pub arena_host_visible: bool,
    /// Types that may back the arena, best first; types on the arena heap come first.
    pub arena_candidates: Vec<u32>,
    /// The memory type for upload staging buffers (host writes, device reads).
    pub upload_type: u32,
    /// Types for upload staging, best first.
    pub upload_candidates: Vec<u32>,
    /// Whether [`upload_type`](Self::upload_type) is HOST_COHERENT. True for every table that
    /// follows the Vulkan spec (it guarantees a HOST_VISIBLE|HOST_COHERENT type, and uploads
    /// rank coherent types first) unless its only coherent types are on a small BAR window,
    /// which bulk staging leaves alone; when false, every host write into upload staging is
    /// followed by `vkFlushMappedMemoryRanges`.
    pub upload_coherent: bool,
    /// The memory type for readback staging buffers (device writes, host reads).
    pub readback_type: u32,
    /// Types for readback staging, best first.
    pub readback_candidates: Vec<u32>,
    /// Whether [`readback_type`](Self::readback_type) is HOST_COHERENT. False where the best
    /// host-cached type is not coherent (Intel non-LLC iGPUs, ARM Mali and Adreno, Apple's
    /// managed memory through MoltenVK): readback prefers cached memory even then, as VMA does,
    /// and every host read of readback staging is preceded by `vkInvalidateMappedMemoryRanges`.
    pub readback_coherent: bool,
    /// Where arrays of the pinned-host memory kind live: the system heap on a discrete GPU
    /// (never a device-local heap), the arena's heap on UMA; `None` when a discrete device
    /// exposes no host-visible memory outside its device-local heaps.
    #[serde(default)]
    pub pinned_host: Option<PinnedHostPlan>,
    /// The heap the preallocation is sized from: always the arena's heap.
    pub prealloc_heap: u32,
    /// The size of [`prealloc_heap`](Self::prealloc_heap) in bytes.
    pub heap_bytes: u64,
    /// The heap's budget from `VK_EXT_memory_budget`, when the device reported one.
    pub budget_bytes: Option<u64>,
    /// The most the arena may take, in bytes: with a budget, the budget left
    /// (budget − usage) but never more than the heap; without one, VMA's fallback of
    /// [`NO_BUDGET_PERCENT`]% of the heap.
    pub reservable_bytes: u64,
    /// Short sentences saying why each choice was made, in the order the choices were made.
    pub reasons: Vec<String>,
}

impl MemoryPlan {
    /// How many bytes to preallocate for `fraction` of the heap (JAX's
    /// `XLA_PYTHON_CLIENT_MEM_FRACTION`, default 0.75): `fraction × heap_bytes`, never more than
    /// [`reservable_bytes`](Self::reservable_bytes), rounded down to [`PREALLOC_ALIGN`].
    ///
    /// `fraction` is clamped to `0.0..=1.0`; NaN counts as 0. Never panics.
    ///
    /// ```
    /// # use gpu_arena::memplan::*;
    /// # let text = std::fs::read_to_string("tests/data/memprops/nvidia-h200-linux-580.json").unwrap();
    /// let plan = plan_memory(&DeviceDescription::from_json(&text)?)?;
    /// assert_eq!(plan.prealloc_bytes(0.75), 150_754_820_096 / 4 * 3);
    /// assert_eq!(plan.prealloc_bytes(2.0), plan.reservable_bytes / 256 * 256);
    /// # Ok::<(), MemPlanError>(())
    /// ```
    pub fn prealloc_bytes(&self, fraction: f64) -> u64 {
        let fraction = if fraction.is_nan() {
            0.0
        } else {
            fraction.clamp(0.0, 1.0)
        };
        let wanted = fraction_of(self.heap_bytes, fraction);
        wanted.min(self.reservable_bytes) / PREALLOC_ALIGN * PREALLOC_ALIGN
    }

    /// The `memory_type_bits` mask of a candidate list; indices past 31 are ignored.
    pub fn type_mask(candidates: &[u32]) -> u32 {
        candidates
            .iter()
            .filter_map(|&i| 1u32.checked_shl(i))
            .fold(0, |mask, bit| mask | bit)
    }

    /// The mask of [`arena_candidates`](Self::arena_candidates).
    pub fn arena_type_bits(&self) -> u32 {
        Self::type_mask(&self.arena_candidates)
    }

    /// The mask of [`upload_candidates`](Self::upload_candidates).
    pub fn upload_type_bits(&self) -> u32 {
        Self::type_mask(&self.upload_candidates)
    }

    /// The mask of [`readback_candidates`](Self::readback_candidates).
    pub fn readback_type_bits(&self) -> u32 {
        Self::type_mask(&self.readback_candidates)
    }

    /// The arena's candidates for direct writes into device memory (`GPU_ARENA_BAR_WRITES`):
    /// the [`bar_type`](Self::bar_type) first, then the usual
    /// [`arena_candidates`](Self::arena_candidates), so a region the BAR type cannot hold still
    /// falls back to plain VRAM.
    ///
    /// `None` unless the device is not UMA (a discrete GPU, or a virtual or other device with a
    /// device-local heap of its own) and has a full BAR on the arena's heap (Resizable BAR, or
    /// a data-centre GPU such as the H200): on a small BAR the window cannot hold the arena,
    /// and on UMA the arena is host-visible already.
    ///
    /// ```
    /// use gpu_arena::memplan::{plan_memory, DeviceDescription};
    /// let text = std::fs::read_to_string("tests/data/memprops/nvidia-h200-linux-580.json")?;
    /// let plan = plan_memory(&DeviceDescription::from_json(&text)?)?;
    /// assert_eq!(plan.bar_write_candidates(), Some(vec![4, 1]));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn bar_write_candidates(&self) -> Option<Vec<u32>> {
        let bar_type = self.bar_type?;
        let full_bar_on_arena_heap =
            self.bar == BarClass::Full && self.bar_heap == Some(self.arena_heap);
        if self.uma || !full_bar_on_arena_heap {
            return None;
        }
        let mut candidates = vec![bar_type];
        candidates.extend(self.arena_candidates.iter().filter(|&&t| t != bar_type));
        Some(candidates)
    }
}

/// Plans which memory types back the arena, upload and readback on `device`, and how many
/// bytes the arena may preallocate.
///
/// A pure function of the table: it keys on flags and sizes rather than on device names, so
/// new GPUs get a sensible plan. Unusable types (PROTECTED, LAZILY_ALLOCATED, AMD's
/// device-coherent/uncached types, unknown flags, empty heaps) are never chosen.
///
/// # Errors
/// [`MemPlanError::NoMemoryTypes`], [`MemPlanError::TooManyTypes`] and
/// [`MemPlanError::HeapOutOfRange`] for malformed tables, and
/// [`MemPlanError::NoHostVisibleType`] when no usable type is host-visible (staging is then
/// impossible). Never panics.
///
/// ```
/// use gpu_arena::memplan::{plan_memory, BarClass, DeviceDescription};
/// let text = std::fs::read_to_string("tests/data/memprops/nvidia-rtx3090-linux-smallbar.json")?;
/// let plan = plan_memory(&DeviceDescription::from_json(&text)?)?;
/// assert_eq!(plan.bar, BarClass::Small);
/// assert!(!plan.uma && !plan.arena_host_visible);
/// assert_eq!((plan.arena_type, plan.upload_type, plan.readback_type), (1, 3, 4));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn plan_memory(device: &DeviceDescription) -> Result<MemoryPlan, MemPlanError> {
    let memory = &device.memory;
    check_table(device)?;

    let skipped = skipped_types(memory);
    let host_visible = MemoryRequest::requiring(F::HOST_VISIBLE);
    if host_visible.rank(memory).is_empty() {
        let skipped = if skipped.is_empty() {
            String::new()
        } else {
            format!("; {}", skipped.join("; "))
        };
        return Err(MemPlanError::NoHostVisibleType {
            device: device.name.clone(),
            skipped,
        });
    }

    let vendor = device.vendor();
    let mut reasons = Vec::new();
    let uma = classify_uma(device, &mut reasons);
    reasons.extend(skipped);
    let bar = classify_bar(device, uma, &mut reasons);
    let mut arena = choose_arena(memory, uma, &mut reasons);
    if bar.heap != Some(arena.heap) {
        arena.candidates = without_window(memory, arena.candidates, &bar);
    }
    let (upload_type, upload_candidates) = choose_upload(memory, uma, &bar, &mut reasons);
    let (readback_type, readback_candidates) = choose_readback(memory, uma, &bar, &mut reasons);
    let pinned_host = choose_pinned_host(memory, uma, arena.heap, &mut reasons);
    let reserve = reservable(device, arena.heap, &mut reasons);

    let flags = |ty: u32| memory.types[ty as usize].flags;
    Ok(MemoryPlan {
        device: device.name.clone(),
        vendor,
        device_kind: device.device_kind,
        uma,
        bar: bar.class,
        bar_heap: bar.heap,
        bar_type: bar.ty,
        arena_type: arena.ty,
        arena_heap: arena.heap,
        arena_host_visible: flags(arena.ty).contains(F::HOST_VISIBLE),
        arena_candidates: arena.candidates,
        upload_type,
        upload_candidates,
        upload_coherent: flags(upload_type).contains(F::HOST_COHERENT),
        readback_type,
        readback_candidates,
        readback_coherent: flags(readback_type).contains(F::HOST_COHERENT),
        pinned_host,
        prealloc_heap: arena.heap,
        heap_bytes: memory.heaps[arena.heap as usize].size,
        budget_bytes: reserve.budget,
        reservable_bytes: reserve.reservable,
        reasons,
    })
}

/// `floor(bytes × fraction)` exactly, for `fraction` in `0.0..=1.0`: the product in f64 would
/// round sizes above 2^53 bytes. `fraction` is `mantissa × 2^exponent`; the product of the
/// mantissa (53 bits) and `bytes` fits in 128 bits.
fn fraction_of(bytes: u64, fraction: f64) -> u64 {
    if fraction >= 1.0 {
        return bytes;
    }
    let bits = fraction.to_bits();
    let biased = (bits >> 52) & 0x7ff;
    let fraction_bits = bits & ((1 << 52) - 1);
    // Normal numbers carry the leading 1; subnormals (biased exponent 0) do not.
    let (mantissa, shift) = match biased {
        0 => (fraction_bits, 1074),
        _ => (fraction_bits | 1 << 52, 1075 - biased),
    };
    let product = u128::from(bytes) * u128::from(mantissa);
    // A fraction below 1 has an exponent below 0: `shift` is at least 53.
    u64::try_from(product.checked_shr(shift as u32).unwrap_or(0)).unwrap_or(u64::MAX)
}

/// Rejects tables no device can report: no types, more than 32, types on missing heaps.
fn check_table(device: &DeviceDescription) -> Result<(), MemPlanError> {
    let memory = &device.memory;
    if memory.types.is_empty() {
        return Err(MemPlanError::NoMemoryTypes {
            device: device.name.clone(),
        });
    }
    if memory.types.len() > MAX_MEMORY_TYPES {
        return Err(MemPlanError::TooManyTypes {
            device: device.name.clone(),
            count: memory.types.len(),
        });
    }
    for (i, ty) in memory.types.iter().enumerate() {
        if ty.heap as usize >= memory.heaps.len() {
            return Err(MemPlanError::HeapOutOfRange {
                device: device.name.clone(),
                type_index: i as u32,
                heap: ty.heap,
                heap_count: memory.heaps.len(),
            });
        }
    }
    Ok(())
}

/// One reason per cause for the types the filter drops, e.g. "skipped types 4-7: ...".
fn skipped_types(memory: &MemoryProperties) -> Vec<String> {
    let mut by_cause: BTreeMap<Skip, Vec<u32>> = BTreeMap::new();
    for i in 0..memory.types.len() {
        if let Some(skip) = skip_reason(memory, i) {
            by_cause.entry(skip).or_default().push(i as u32);
        }
    }
    by_cause
        .into_iter()
        .map(|(skip, types)| {
            let noun = if types.len() == 1 { "type" } else { "types" };
            format!("skipped {noun} {}: {}", index_list(&types), skip.why())
        })
        .collect()
}

/// Decides whether device memory is host memory.
fn classify_uma(device: &DeviceDescription, reasons: &mut Vec<String>) -> bool {
    let kind = match device.device_kind {
        DeviceKind::Discrete => "discrete GPU",
        DeviceKind::Integrated => "integrated GPU",
        DeviceKind::Cpu => "CPU device (software rasterizer)",
        DeviceKind::Virtual => "virtual GPU",
        DeviceKind::Other => "device of kind other",
    };
    let (uma, why) = match device.device_kind {
        DeviceKind::Discrete => (false, "VRAM is separate from host memory"),
        DeviceKind::Integrated | DeviceKind::Cpu => (true, "device memory is host memory (UMA)"),
        DeviceKind::Virtual | DeviceKind::Other => {
            // The kind says nothing; read the table. Only device-local heaps, all reachable
            // by a host-visible type, is what integrated GPUs and software devices report.
            let memory = &device.memory;
            let live = || memory.heaps.iter().filter(|h| h.size > 0);
            let mappable = MemoryRequest::requiring(F::DEVICE_LOCAL | F::HOST_VISIBLE);
            if !live().any(|h| h.flags.contains(HeapFlags::DEVICE_LOCAL)) {
                (
                    true,
                    "no device-local heap, so all memory is host memory (UMA)",
                )
            } else if live().all(|h| h.flags.contains(HeapFlags::DEVICE_LOCAL))
                && !mappable.rank(memory).is_empty()
            {
                (
                    true,
                    "every heap is device-local and host-visible types exist: treated as UMA",
                )
            } else {
                (
                    false,
                    "separate device-local and host heaps: treated as a discrete GPU",
                )
            }
        }
    };
    reasons.push(format!("{} {kind}: {why}", device.vendor()));
    uma
}

/// What the host can map of device-local memory.
struct Bar {
    class: BarClass,
    heap: Option<u32>,
    ty: Option<u32>,
}

/// Device-local memory the host can map (a BAR or an APU's memory), coherent types first (a
/// non-coherent one costs a driver call per host access), then among them write-combined
/// rather than cached ([`WRITE_COMBINED`]).
const MAPPABLE_DEVICE_LOCAL: MemoryRequest = MemoryRequest {
    required: F(F::DEVICE_LOCAL.0 | F::HOST_VISIBLE.0),
    preferred: F::HOST_COHERENT,
    not_preferred: F::empty(),
};

/// The tie-break of a ranking for memory the GPU reads and the host writes: uncached
/// (write-combined) first, what the GPU reads fastest where cached memory is snooped.
const WRITE_COMBINED: MemoryRequest = MemoryRequest {
    not_preferred: F::HOST_CACHED,
    ..MemoryRequest::ANY
};

fn classify_bar(device: &DeviceDescription, uma: bool, reasons: &mut Vec<String>) -> Bar {
    let memory = &device.memory;
    let ranked = MAPPABLE_DEVICE_LOCAL.rank_then(memory, &WRITE_COMBINED);
    let Some(heap) = largest_heap(memory, &ranked) else {
        reasons.push(
            "no BAR: no usable DEVICE_LOCAL|HOST_VISIBLE type, device memory is reached \
             only through copies"
                .to_string(),
        );
        return Bar {
            class: BarClass::None,
            heap: None,
            ty: None,
        };
    };
    let ty = first_on_heap(memory, &ranked, heap);
    let size = heap_size(memory, heap);
    // The largest other device-local heap at least as big: the VRAM the window sits beside.
    let vram = memory
        .heaps
        .iter()
        .enumerate()
        .filter(|&(i, h)| i != heap as usize && h.flags.contains(HeapFlags::DEVICE_LOCAL))
        .map(|(_, h)| h.size)
        .filter(|&s| s >= size)
        .max();
    let class = match vram {
        Some(vram) if vram > size || size < SMALL_BAR_MAX => {
            let hint = match (uma, device.vendor()) {
                (true, _) => "",
                (false, Vendor::Amd) => {
                    "; Smart Access Memory (Resizable BAR) in firmware would expose all of it"
                }
                (false, Vendor::Intel) => {
                    "; Intel Arc needs Resizable BAR in firmware for full speed"
                }
                (false, _) => "; Resizable BAR in firmware would expose all of it",
            };
            reasons.push(format!(
                "small BAR: heap {heap} ({}) is a CPU-visible window (type {ty}) next to {} of \
                 device-local memory, kept out of bulk staging{hint}",
                fmt_bytes(size),
                fmt_bytes(vram),
            ));
            BarClass::Small
        }
        _ => {
            let what = if uma { "full BAR (UMA)" } else { "full BAR" };
            reasons.push(format!(
                "{what}: all of device-local heap {heap} ({}) is CPU-visible through type {ty}",
                fmt_bytes(size)
            ));
            BarClass::Full
        }
    };
    Bar {
        class,
        heap: Some(heap),
        ty: Some(ty),
    }
}

fn choose_arena(memory: &MemoryProperties, uma: bool, reasons: &mut Vec<String>) -> Placement {
    let ranked = if uma {
        // Host-visible first, so puts and gets can map the arena; then coherent, and among
        // those write-combined (not cached): what the GPU reads fastest on APUs, where cached
        // memory is snooped. Device-local types the host cannot map come last.
        let device_local = MemoryRequest::requiring(F::DEVICE_LOCAL);
        let mut ranked = MAPPABLE_DEVICE_LOCAL.rank_then(memory, &WRITE_COMBINED);
        let rest: Vec<u32> = device_local
            .rank(memory)
            .into_iter()
            .filter(|t| !ranked.contains(t))
            .collect();
        ranked.extend(rest);
        ranked
    } else {
        // Plain VRAM: a host-visible type costs BAR space, or is the BAR window itself.
        MemoryRequest {
            required: F::DEVICE_LOCAL,
            preferred: F::empty(),
            not_preferred: F::HOST_VISIBLE,
        }
        .rank(memory)
    };

    if let Some(heap) = largest_heap(memory, &ranked) {
        let size = heap_size(memory, heap);
        if uma {
            if let Some(host) = carve_out_host_heap(memory, size) {
                let host_memory = MemoryRequest {
                    required: F::HOST_VISIBLE,
                    preferred: F::HOST_COHERENT,
                    not_preferred: F::empty(),
                };
                let uncached_host = MemoryRequest {
                    not_preferred: F::HOST_CACHED | F::DEVICE_LOCAL,
                    ..MemoryRequest::ANY
                };
                let ranked = host_memory.rank_then(memory, &uncached_host);
                let arena = heap_first(memory, ranked, host);
                let note =
                    non_coherent_note(memory.types[arena.ty as usize].flags, ARENA_HOST_ACCESS);
                reasons.push(format!(
                    "arena: type {} on host heap {host} ({}): the device-local heap {heap} is \
                     only a {} carve-out of the same DRAM, which the GPU reads as fast{note}",
                    arena.ty,
                    fmt_bytes(heap_size(memory, host)),
                    fmt_bytes(size),
                ));
                return arena;
            }
        }
        let arena = heap_first(memory, ranked, heap);
        let flags = memory.types[arena.ty as usize].flags;
        let note = non_coherent_note(flags, ARENA_HOST_ACCESS);
        let what = match (uma, flags.contains(F::HOST_VISIBLE)) {
            (false, false) => "plain VRAM (device-local, not host-visible)".to_string(),
            (false, true) => format!("{flags}: no plain device-local type on this heap"),
            (true, true) => format!("{flags}: UMA, so puts and gets can map it instead of copying"),
            (true, false) => format!(
                "{flags}: UMA, but no type of this heap is both DEVICE_LOCAL and HOST_VISIBLE"
            ),
        };
        reasons.push(format!(
            "arena: type {} on heap {heap} ({}), the largest device-local heap: {what}{note}",
            arena.ty,
            fmt_bytes(size)
        ));
        return arena;
    }

    // No usable device-local type at all: every byte is host memory, so take the largest heap;
    // on it a coherent host-visible type first, then (as on a carve-out) an uncached one.
    let any = MemoryRequest {
        required: F::empty(),
        preferred: F::HOST_VISIBLE | F::HOST_COHERENT,
        not_preferred: F::empty(),
    };
    let uncached = MemoryRequest {
        not_preferred: F::HOST_CACHED,
        ..MemoryRequest::ANY
    };
    let ranked = any.rank_then(memory, &uncached);
    // plan_memory checked that a usable host-visible type exists, so `ranked` is not empty.
    let heap = largest_heap(memory, &ranked).unwrap_or(0);
    let arena = heap_first(memory, ranked, heap);
    let note = non_coherent_note(memory.types[arena.ty as usize].flags, ARENA_HOST_ACCESS);
    reasons.push(format!(
        "arena: type {} on heap {heap} ({}): no usable device-local type, so the arena lives in \
         host memory{note}",
        arena.ty,
        fmt_bytes(heap_size(memory, heap))
    ));
    arena
}

/// On UMA, the host heap that dwarfs a device-local carve-out of `device_local_size` bytes.
fn carve_out_host_heap(memory: &MemoryProperties, device_local_size: u64) -> Option<u32> {
    let host_visible = MemoryRequest::requiring(F::HOST_VISIBLE);
    let on_host_heaps: Vec<u32> = host_visible
        .rank(memory)
        .into_iter()
        .filter(|&t| {
            let heap = memory.types[t as usize].heap;
            !memory.heaps[heap as usize]
                .flags
                .contains(HeapFlags::DEVICE_LOCAL)
        })
        .collect();
    let host = largest_heap(memory, &on_host_heaps)?;
    let dwarfs = u128::from(heap_size(memory, host))
        > u128::from(device_local_size) * u128::from(UMA_CARVEOUT_RATIO);
    dwarfs.then_some(host)
}

fn choose_upload(
    memory: &MemoryProperties,
    uma: bool,
    bar: &Bar,
    reasons: &mut Vec<String>,
) -> (u32, Vec<u32>) {
    // Coherent first: a non-coherent type costs a flush (a driver call) after every write,
    // and the Vulkan spec guarantees a coherent host-visible type. Then system memory:
    // keeping staging off device-local heaps leaves a small BAR window alone and does not eat
    // into the arena's heap on full BAR. Then write-combined: uncached is faster to write.
    let coherent = MemoryRequest {
        required: F::HOST_VISIBLE,
        preferred: F::HOST_COHERENT,
        not_preferred: F::empty(),
    };
    let write_combined = MemoryRequest {
        required: F::HOST_VISIBLE,
        preferred: F::empty(),
        not_preferred: F::HOST_CACHED,
    };
    let ranked = coherent.rank_by(memory, &[SYSTEM_MEMORY, write_combined]);
    let ranked = without_window(memory, ranked, bar);
    // plan_memory checked that a usable host-visible type exists.
    let ty = ranked.first().copied().unwrap_or(0);
    let flags = memory.types[ty as usize].flags;
    let heap = memory.types[ty as usize].heap;
    let device_local = |t: u32| memory.types[t as usize].flags.contains(F::DEVICE_LOCAL);
    let context = match (flags.contains(F::DEVICE_LOCAL), bar.class, uma) {
        (false, BarClass::Small, _) => "host memory, which keeps the small BAR window free",
        (false, BarClass::Full, false) => {
            "host memory: bulk staging stays out of VRAM so it does not eat into the arena's \
             heap; the full BAR type is left for direct writes"
        }
        (false, _, _) => "host memory",
        (true, _, true) => "UMA: the only host-visible memory is device-local",
        (true, _, false) if ranked.iter().any(|&t| !device_local(t)) => {
            "the only coherent host-visible types are device-local (system memory here is not \
             coherent, and would cost a flush after every write)"
        }
        (true, _, false) => "no host-visible type outside device-local memory",
    };
    let cached = if flags.contains(F::HOST_CACHED) {
        "host-cached"
    } else {
        "write-combined"
    };
    let note = non_coherent_note(
        flags,
        "every write into upload staging is followed by vkFlushMappedMemoryRanges",
    );
    reasons.push(format!(
        "upload: type {ty} ({flags}) on heap {heap}, {cached}: {context}{note}"
    ));
    (ty, ranked)
}

fn choose_readback(
    memory: &MemoryProperties,
    uma: bool,
    bar: &Bar,
    reasons: &mut Vec<String>,
) -> (u32, Vec<u32>) {
    let ranked = without_window(memory, ranked_for_host_reads(memory, uma), bar);
    let ty = ranked.first().copied().unwrap_or(0);
    let flags = memory.types[ty as usize].flags;
    let heap = memory.types[ty as usize].heap;
    let cached = |t: u32| memory.types[t as usize].flags.contains(F::HOST_CACHED);
    let why = match (cached(ty), flags.contains(F::DEVICE_LOCAL) && !uma) {
        (true, false) => "host-cached, so CPU reads are fast",
        (true, true) => "host-cached, but device-local: no host-visible type in system memory",
        (false, true) => "device-local and uncached: no host-visible type in system memory",
        (false, false) if ranked.iter().any(|&t| cached(t)) => {
            "system memory, uncached: the host-cached types are device-local, read through \
             the BAR across PCIe"
        }
        (false, false) => "no host-cached type: CPU reads are uncached and slow",
    };
    let note = non_coherent_note(
        flags,
        "every read of readback staging first runs vkInvalidateMappedMemoryRanges",
    );
    reasons.push(format!(
        "readback: type {ty} ({flags}) on heap {heap}, {why}{note}"
    ));
    (ty, ranked)
}

/// What host access to a non-coherent arena costs (zero-copy puts and gets, direct writes).
const ARENA_HOST_ACCESS: &str =
    "host writes into the arena are followed by vkFlushMappedMemoryRanges and host reads \
     preceded by vkInvalidateMappedMemoryRanges";

/// `candidates` without the types on a small BAR window, unless nothing else is left.
///
/// A small window is no fallback for bulk memory: an arena or a staging pool that spills into
/// 256 MiB of scarce CPU-visible VRAM only fails later. [`MemoryPlan::bar_type`] names it.
fn without_window(memory: &MemoryProperties, candidates: Vec<u32>, bar: &Bar) -> Vec<u32> {
    let (BarClass::Small, Some(window)) = (bar.class, bar.heap) else {
        return candidates;
    };
    let on_window = |t: &u32| memory.types[*t as usize].heap == window;
    if candidates.iter().all(on_window) {
        return candidates;
    }
    candidates.into_iter().filter(|t| !on_window(t)).collect()
}

/// The preallocation bound for the arena's heap.
struct Reserve {
    budget: Option<u64>,
    reservable: u64,
}

fn reservable(device: &DeviceDescription, heap: u32, reasons: &mut Vec<String>) -> Reserve {
    let size = heap_size(&device.memory, heap);
    let budget: Option<HeapBudget> = match &device.heap_budgets {
        Some(budgets) if budgets.len() == device.memory.heaps.len() => Some(budgets[heap as usize]),
        Some(budgets) => {
            reasons.push(format!(
                "ignored the memory budget: {} entries for {} heaps",
                budgets.len(),
                device.memory.heaps.len()
            ));
            None
        }
        None => None,
    };
    match budget {
        Some(b) => {
            let left = b.budget.saturating_sub(b.usage);
            let reservable = size.min(left);
            reasons.push(format!(
                "preallocate from heap {heap} ({}): budget {}, {} in use, so at most {}",
                fmt_bytes(size),
                fmt_bytes(b.budget),
                fmt_bytes(b.usage),
                fmt_bytes(reservable)
            ));
            Reserve {
                budget: Some(b.budget),
                reservable,
            }
        }
        None => {
            let reservable = (u128::from(size) * u128::from(NO_BUDGET_PERCENT) / 100) as u64;
            reasons.push(format!(
                "preallocate from heap {heap} ({}): no memory budget, so at most \
                 {NO_BUDGET_PERCENT}% of it (VMA's fallback)",
                fmt_bytes(size)
            ));
            Reserve {
                budget: None,
                reservable,
            }
        }
    }
}

/// `[4, 5, 6, 7, 12]` as `"4-7, 12"`.
fn index_list(indices: &[u32]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < indices.len() {
        let start = indices[i];
        let mut end = start;
        while i + 1 < indices.len() && indices[i + 1] == end + 1 {
            end += 1;
            i += 1;
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::super::table::{MemoryHeap, MemoryType};
    use super::*;

    fn device(heaps: &[(u64, HeapFlags)], types: &[(u32, F)]) -> DeviceDescription {
        DeviceDescription {
            name: "Test GPU".to_string(),
            vendor_id: 0x1002,
            device_kind: DeviceKind::Discrete,
            memory: MemoryProperties {
                heaps: heaps
                    .iter()
                    .map(|&(size, flags)| MemoryHeap { size, flags })
                    .collect(),
                types: types
                    .iter()
                    .map(|&(heap, flags)| MemoryType { heap, flags })
                    .collect(),
            },
            heap_budgets: None,
        }
    }

    /// The plan's reason for the choice that starts with `prefix` (`"upload:"`, ...).
    fn reason<'a>(plan: &'a MemoryPlan, prefix: &str) -> &'a str {
        plan.reasons
            .iter()
            .find(|r| r.starts_with(prefix))
            .unwrap_or_else(|| panic!("a reason starts with {prefix}: {:#?}", plan.reasons))
    }

    fn error_of(device: &DeviceDescription) -> String {
        plan_memory(device)
            .expect_err("planning should fail")
            .to_string()
    }

    const VRAM: (u64, HeapFlags) = (8 << 30, HeapFlags::DEVICE_LOCAL);
    const HOST: (u64, HeapFlags) = (16 << 30, HeapFlags::empty());
    const STAGING: (u32, F) = (1, F(F::HOST_VISIBLE.0 | F::HOST_COHERENT.0));

    #[test]
    fn a_table_without_types_is_refused() {
        let message = error_of(&device(&[VRAM], &[]));
        assert_eq!(
            message,
            "Test GPU: the memory table has no memory types, so nothing can be allocated"
        );
    }

    #[test]
    fn a_table_with_more_than_32_types_is_refused() {
        let message = error_of(&device(&[VRAM, HOST], &[STAGING; 33]));
        assert!(message.contains("has 33 memory types"), "{message}");
        assert!(message.contains("at most 32"), "{message}");
    }

    #[test]
    fn a_type_on_a_missing_heap_is_refused() {
        let message = error_of(&device(&[VRAM, HOST], &[STAGING, (2, F::DEVICE_LOCAL)]));
        assert_eq!(
            message,
            "Test GPU: memory type 1 is on heap 2, but the table has only 2 heaps"
        );
    }

    #[test]
    fn a_table_without_a_usable_host_visible_type_is_refused_and_says_what_was_skipped() {
        let amd_only = F::HOST_VISIBLE | F::HOST_COHERENT | F::DEVICE_COHERENT_AMD;
        let message = error_of(&device(
            &[VRAM, HOST],
            &[(0, F::DEVICE_LOCAL), (1, amd_only)],
        ));
        assert!(
            message.starts_with("Test GPU: no usable HOST_VISIBLE memory type"),
            "{message}"
        );
        assert!(message.contains("cannot be staged"), "{message}");
        assert!(
            message.contains("skipped type 1: DEVICE_COHERENT_AMD"),
            "{message}"
        );

        let message = error_of(&device(&[VRAM], &[(0, F::DEVICE_LOCAL)]));
        assert!(message.ends_with("cannot be staged"), "{message}");
    }

    #[test]
    fn a_table_without_device_local_memory_puts_the_arena_in_host_memory() {
        let plan = plan_memory(&device(&[(0, HeapFlags::DEVICE_LOCAL), HOST], &[STAGING])).unwrap();
        assert_eq!(
            (plan.arena_type, plan.arena_heap, plan.bar),
            (0, 1, BarClass::None)
        );
        assert!(plan.arena_host_visible);
        assert!(plan
            .reasons
            .iter()
            .any(|r| r.contains("no usable device-local type")));
    }

    #[test]
    fn a_uma_heap_without_a_mappable_device_local_type_keeps_the_arena_unmapped_and_says_why() {
        // The table made for GL: the staging type is on the heap but not flagged DEVICE_LOCAL.
        let mut gl = device(
            &[(1 << 30, HeapFlags::DEVICE_LOCAL)],
            &[
                (0, F::DEVICE_LOCAL),
                (0, F::HOST_VISIBLE | F::HOST_COHERENT),
            ],
        );
        gl.device_kind = DeviceKind::Cpu;
        let plan = plan_memory(&gl).unwrap();
        assert_eq!((plan.arena_type, plan.arena_host_visible), (0, false));
        assert_eq!((plan.upload_type, plan.readback_type), (1, 1));
        assert!(reason(&plan, "arena:")
            .ends_with("UMA, but no type of this heap is both DEVICE_LOCAL and HOST_VISIBLE"));
    }

    #[test]
    fn an_arena_in_host_memory_takes_a_coherent_type_before_the_first_one_listed() {
        // An APU whose only device-local type is protected: every usable byte is host memory.
        let protected = F::DEVICE_LOCAL | F::PROTECTED;
        let coherent = F::HOST_VISIBLE | F::HOST_COHERENT | F::HOST_CACHED;
        let mut apu = device(
            &[(256 << 20, HeapFlags::DEVICE_LOCAL), HOST],
            &[(0, protected), (1, F::HOST_VISIBLE), (1, coherent)],
        );
        apu.device_kind = DeviceKind::Integrated;
        let plan = plan_memory(&apu).unwrap();
        assert_eq!((plan.arena_type, plan.arena_heap), (2, 1));
        assert!(!reason(&plan, "arena:").contains("not HOST_COHERENT"));
        // Among coherent types, the uncached one, as on a carve-out.
        let uncached = F::HOST_VISIBLE | F::HOST_COHERENT;
        apu.memory.types.push(MemoryType {
            heap: 1,
            flags: uncached,
        });
        assert_eq!(plan_memory(&apu).unwrap().arena_type, 3);
    }

    #[test]
    fn a_non_coherent_table_still_plans_and_says_staging_needs_flushes() {
        let plan = plan_memory(&device(
            &[VRAM, HOST],
            &[(0, F::DEVICE_LOCAL), (1, F::HOST_VISIBLE | F::HOST_CACHED)],
        ))
        .unwrap();
        assert_eq!((plan.upload_type, plan.readback_type), (1, 1));
        assert!(!plan.upload_coherent && !plan.readback_coherent);
        for prefix in ["upload:", "readback:"] {
            let reason = reason(&plan, prefix);
            assert!(reason.contains("not HOST_COHERENT"), "{reason}");
            assert!(reason.contains("nonCoherentAtomSize"), "{reason}");
        }
        let upload = reason(&plan, "upload:");
        assert!(upload.contains("vkFlushMappedMemoryRanges"), "{upload}");
        let readback = reason(&plan, "readback:");
        assert!(
            readback.contains("vkInvalidateMappedMemoryRanges"),
            "{readback}"
        );
    }

    /// Host memory as Intel non-LLC iGPUs and ARM Mali report it: one coherent write-combined
    /// type and one cached type that is not coherent.
    const GEMINI_LAKE_LIKE: [(u32, F); 3] = [
        (0, F::DEVICE_LOCAL),
        (
            0,
            F(F::DEVICE_LOCAL.0 | F::HOST_VISIBLE.0 | F::HOST_COHERENT.0),
        ),
        (
            0,
            F(F::DEVICE_LOCAL.0 | F::HOST_VISIBLE.0 | F::HOST_CACHED.0),
        ),
    ];

    #[test]
    fn readback_takes_a_cached_type_even_when_it_is_not_coherent() {
        let mut uma = device(&[VRAM], &GEMINI_LAKE_LIKE);
        uma.device_kind = DeviceKind::Integrated;
        let plan = plan_memory(&uma).unwrap();
        assert_eq!(plan.readback_candidates, [2, 1]);
        assert!(!plan.readback_coherent);
        let reason = reason(&plan, "readback:");
        assert!(
            reason.contains("host-cached, so CPU reads are fast"),
            "{reason}"
        );
        assert!(
            reason.contains("vkInvalidateMappedMemoryRanges"),
            "{reason}"
        );
    }

    #[test]
    fn upload_takes_the_coherent_write_combined_type_before_a_cached_non_coherent_one() {
        let mut uma = device(&[VRAM], &GEMINI_LAKE_LIKE);
        uma.device_kind = DeviceKind::Integrated;
        let plan = plan_memory(&uma).unwrap();
        assert_eq!(plan.upload_candidates, [1, 2]);
        assert!(plan.upload_coherent);
        let reason = reason(&plan, "upload:");
        assert!(!reason.contains("HOST_COHERENT, so"), "{reason}");
        // The arena stays coherent and write-combined: what the GPU reads fastest on UMA.
        assert_eq!(plan.arena_type, 1);
    }

    /// On a discrete GPU with a full BAR, staging stays in system memory whatever the order
    /// of the types: upload takes coherent system memory though it is cached and the BAR type
    /// is write-combined, and readback never reads through the BAR, though the BAR type is
    /// cached (then the reason says why the host-cached type was passed over).
    #[test]
    fn full_bar_staging_stays_in_system_memory_whatever_the_type_order() {
        let bar = |extra: F| {
            (
                0,
                F(F::DEVICE_LOCAL.0 | F::HOST_VISIBLE.0 | F::HOST_COHERENT.0 | extra.0),
            )
        };
        let host = |extra: F| (1, F(STAGING.1 .0 | extra.0));
        let dl = (0, F::DEVICE_LOCAL);
        for (types, uploads, reads) in [
            (vec![dl, bar(F::empty()), host(F::HOST_CACHED)], 2, 2),
            (vec![dl, host(F::HOST_CACHED), bar(F::empty())], 1, 1),
            (vec![dl, bar(F::HOST_CACHED), host(F::empty())], 2, 2),
            (vec![dl, host(F::empty()), bar(F::HOST_CACHED)], 1, 1),
        ] {
            let plan = plan_memory(&device(&[VRAM, HOST], &types)).unwrap();
            assert_eq!(plan.bar, BarClass::Full);
            assert_eq!(
                (plan.upload_type, plan.readback_type),
                (uploads, reads),
                "{types:?}"
            );
            assert!(!reason(&plan, "upload:").contains("no host-visible type outside"));
            let readback = reason(&plan, "readback:");
            if !types[reads as usize].1.contains(F::HOST_CACHED) {
                assert!(
                    readback.contains("the host-cached types are device-local"),
                    "{readback}"
                );
            }
        }
    }

    #[test]
    fn a_non_coherent_uma_arena_says_what_host_access_costs() {
        let mut uma = device(
            &[VRAM],
            &[(0, F::DEVICE_LOCAL | F::HOST_VISIBLE | F::HOST_CACHED)],
        );
        uma.device_kind = DeviceKind::Integrated;
        let plan = plan_memory(&uma).unwrap();
        assert!(plan.arena_host_visible);
        let reason = reason(&plan, "arena:");
        assert!(reason.contains("not HOST_COHERENT"), "{reason}");
        assert!(reason.contains("vkFlushMappedMemoryRanges"), "{reason}");
    }

    #[test]
    fn coherent_types_carry_no_non_coherent_note() {
        let plan = plan_memory(&device(&[VRAM, HOST], &[(0, F::DEVICE_LOCAL), STAGING])).unwrap();
        assert!(
            plan.reasons
                .iter()
                .all(|r| !r.contains("not HOST_COHERENT")),
            "{:#?}",
            plan.reasons
        );
    }

    #[test]
    fn bar_write_candidates_exist_only_for_a_full_bar_on_the_arena_heap_of_a_discrete_gpu() {
        let bar = F::DEVICE_LOCAL | F::HOST_VISIBLE | F::HOST_COHERENT;
        // Resizable BAR: the host-visible type sits on the VRAM heap.
        let rebar = plan_memory(&device(
            &[VRAM, HOST],
            &[(0, F::DEVICE_LOCAL), STAGING, (0, bar)],
        ))
        .unwrap();
        assert_eq!(rebar.bar, BarClass::Full);
        assert_eq!(rebar.bar_write_candidates(), Some(vec![2, 0]));
        // A 256 MiB window beside the VRAM.
        let small = plan_memory(&device(
            &[VRAM, HOST, (256 << 20, HeapFlags::DEVICE_LOCAL)],
            &[(0, F::DEVICE_LOCAL), STAGING, (2, bar)],
        ))
        .unwrap();
        assert_eq!(small.bar, BarClass::Small);
        assert_eq!(small.bar_write_candidates(), None);
        // No BAR at all.
        let none = plan_memory(&device(&[VRAM, HOST], &[(0, F::DEVICE_LOCAL), STAGING])).unwrap();
        assert_eq!(none.bar_write_candidates(), None);
        // UMA: the arena is host-visible already.
        let mut uma = device(&[VRAM], &[(0, bar)]);
        uma.device_kind = DeviceKind::Integrated;
        let uma = plan_memory(&uma).unwrap();
        assert_eq!((uma.uma, uma.bar), (true, BarClass::Full));
        assert_eq!(uma.bar_write_candidates(), None);
    }

    #[test]
    fn index_lists_collapse_runs() {
        assert_eq!(index_list(&[4, 5, 6, 7, 12, 13, 15]), "4-7, 12-13, 15");
        assert_eq!(index_list(&[]), "");
        assert_eq!(index_list(&[3]), "3");
    }
}
