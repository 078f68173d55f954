//! Where arrays of the pinned-host memory kind live: JAX's `pinned_host`, system memory the
//! device reaches directly (CUDA's zero-copy pinned memory), for data that does not fit the
//! device or waits there between uses (offloaded activations, optimizer state).
//!
//! A part of the plan of its own because its rule is not the arena's nor staging's: on a discrete
//! GPU it is the largest system heap and never a device-local heap (a small BAR window is too
//! scarce, and a full BAR is the VRAM the host kind exists to spare); on UMA it is the arena's own
//! heap, the same DRAM under a limit of its own. Within that, host-cached types come first, as for
//! readback, because the host reads such arrays back.

use serde::{Deserialize, Serialize};

use super::placement::{
    fmt_bytes, heap_first, heap_size, largest_heap, non_coherent_note, ranked_for_host_reads,
};
use super::table::{HeapFlags, MemoryProperties, MemoryTypeFlags as F};

/// The memory type and heap behind the pinned-host memory kind on one device.
///
/// ```
/// use gpu_arena::memplan::{plan_memory, DeviceDescription};
/// let text = std::fs::read_to_string("tests/data/memprops/nvidia-h200-linux-580.json")?;
/// let plan = plan_memory(&DeviceDescription::from_json(&text)?)?;
/// let host = plan.pinned_host.expect("the H200 has host-visible system memory");
/// // System RAM (heap 1), host-cached and coherent; VRAM is heap 0.
/// assert_eq!((host.memory_type, host.heap, host.cached, host.coherent), (3, 1, true, true));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PinnedHostPlan {
    /// The memory type that backs pinned-host arrays.
    pub memory_type: u32,
    /// The heap of [`memory_type`](Self::memory_type): the system heap on a discrete GPU, the
    /// arena's heap on UMA.
    pub heap: u32,
    /// The size of [`heap`](Self::heap) in bytes.
    pub heap_bytes: u64,
    /// Types that may back pinned-host arrays, best first; those on [`heap`](Self::heap) come
    /// first, and on a discrete GPU none is on a device-local heap.
    pub candidates: Vec<u32>,
    /// Whether [`memory_type`](Self::memory_type) is HOST_CACHED: host reads run at memory
    /// speed.
    pub cached: bool,
    /// Whether [`memory_type`](Self::memory_type) is HOST_COHERENT; when false, host writes
    /// are flushed and host reads invalidated, as for staging.
    pub coherent: bool,
}

/// The pinned-host placement on a device (`uma`, arena on `arena_heap`), or `None` when a
/// discrete device exposes no host-visible type outside its device-local heaps. Pushes one
/// reason starting with `"pinned host:"` either way.
pub(super) fn choose_pinned_host(
    memory: &MemoryProperties,
    uma: bool,
    arena_heap: u32,
    reasons: &mut Vec<String>,
) -> Option<PinnedHostPlan> {
    // Readback's ranking: the host reads these arrays back.
    let mut ranked = ranked_for_host_reads(memory, uma);
    if !uma {
        // Device-local by its heap or by its own flags (a BAR type is DEVICE_LOCAL even where
        // a malformed table puts it on a host heap).
        let device_local = |t: &u32| {
            let ty = &memory.types[*t as usize];
            ty.flags.contains(F::DEVICE_LOCAL)
                || memory.heaps[ty.heap as usize]
                    .flags
                    .contains(HeapFlags::DEVICE_LOCAL)
        };
        ranked.retain(|t| !device_local(t));
    }
    let on_arena_heap = |t: &u32| memory.types[*t as usize].heap == arena_heap;
    let heap = match uma && ranked.iter().any(on_arena_heap) {
        true => Some(arena_heap),
        false => largest_heap(memory, &ranked),
    };
    let Some(heap) = heap else {
        reasons.push(
            "pinned host: none: no host-visible type outside the device-local heaps, and \
             those are VRAM the host kind exists to spare"
                .to_string(),
        );
        return None;
    };
    let placement = heap_first(memory, ranked, heap);
    let ty = placement.ty;
    let flags = memory.types[ty as usize].flags;
    let cached = flags.contains(F::HOST_CACHED);
    let (where_, speed) = match (uma, cached) {
        (true, _) if heap == arena_heap => (
            "the arena's heap: the same DRAM, under a limit of its own",
            "",
        ),
        (true, _) => ("host memory: the arena's heap has no host-visible type", ""),
        (false, true) => (
            "system memory, off every device-local heap",
            ", host-cached",
        ),
        (false, false) => (
            "system memory, off every device-local heap",
            ", not host-cached: host reads are slow",
        ),
    };
    let note = non_coherent_note(
        flags,
        "host writes into pinned-host arrays are flushed and host reads invalidated",
    );
    reasons.push(format!(
        "pinned host: type {ty} ({flags}) on heap {heap} ({}), {where_}{speed}{note}",
        fmt_bytes(heap_size(memory, heap))
    ));
    Some(PinnedHostPlan {
        memory_type: ty,
        heap,
        heap_bytes: heap_size(memory, heap),
        candidates: placement.candidates,
        cached,
        coherent: flags.contains(F::HOST_COHERENT),
    })
}
