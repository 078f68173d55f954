//! Where a use of memory goes: its type, that type's heap and the ranked candidates
//! ([`Placement`]), the heap helpers every choice of the plan shares (the largest heap among
//! ranked types, a heap's types first), and the phrases their reasons share (byte sizes, what a
//! non-coherent type costs). Below both the plan and the pinned-host choice.

use super::rank::MemoryRequest;
use super::table::{MemoryProperties, MemoryTypeFlags as F};

/// Host-visible types ranked for memory the host reads (readback staging, pinned-host arrays):
/// host-cached, coherent or not (VMA's GPU_TO_CPU ranking), since the CPU reads cached memory
/// at memory speed where uncached or BAR memory is read a word at a time, an order of magnitude
/// slower, and an invalidate before each read costs one driver call; among equally good types,
/// coherent ones first. On a discrete device (not `uma`) system memory comes before all of
/// that: a device-local type, cached or not, is read through the BAR, across PCIe.
pub(super) fn ranked_for_host_reads(memory: &MemoryProperties, uma: bool) -> Vec<u32> {
    let cached = MemoryRequest {
        required: F::HOST_VISIBLE,
        preferred: F::HOST_CACHED,
        not_preferred: F::DEVICE_LOCAL,
    };
    let coherent = MemoryRequest {
        preferred: F::HOST_COHERENT,
        ..MemoryRequest::ANY
    };
    match uma {
        true => cached.rank_then(memory, &coherent),
        false => SYSTEM_MEMORY.rank_by(memory, &[cached, coherent]),
    }
}

/// Host-visible types outside device-local memory first: on a discrete device, system memory
/// rather than VRAM through the BAR.
pub(super) const SYSTEM_MEMORY: MemoryRequest = MemoryRequest {
    required: F::HOST_VISIBLE,
    preferred: F::empty(),
    not_preferred: F::DEVICE_LOCAL,
};

/// Where a use of memory goes (the arena, the pinned-host kind): its memory type, that type's
/// heap, and the ranked candidate types.
pub(super) struct Placement {
    pub(super) ty: u32,
    pub(super) heap: u32,
    pub(super) candidates: Vec<u32>,
}

/// For a host-visible type without HOST_COHERENT, what host access costs there (`access` says
/// which driver call runs when); empty for coherent or unmappable types.
pub(super) fn non_coherent_note(flags: F, access: &str) -> String {
    if !flags.contains(F::HOST_VISIBLE) || flags.contains(F::HOST_COHERENT) {
        return String::new();
    }
    format!(
        "; not HOST_COHERENT, so {access} over the range rounded out to nonCoherentAtomSize \
         (one driver call per access)"
    )
}

/// The heap, among those of `ranked` types, with the most bytes; of equal heaps, the one
/// holding the best-ranked type.
pub(super) fn largest_heap(memory: &MemoryProperties, ranked: &[u32]) -> Option<u32> {
    let heap_of = |t: u32| memory.types[t as usize].heap;
    let max = ranked
        .iter()
        .map(|&t| heap_size(memory, heap_of(t)))
        .max()?;
    ranked
        .iter()
        .map(|&t| heap_of(t))
        .find(|&h| heap_size(memory, h) == max)
}

/// The best-ranked type on `heap` (the caller knows there is one).
pub(super) fn first_on_heap(memory: &MemoryProperties, ranked: &[u32], heap: u32) -> u32 {
    ranked
        .iter()
        .copied()
        .find(|&t| memory.types[t as usize].heap == heap)
        .unwrap_or(0)
}

/// `ranked` reordered so the types on `heap` come first (each part keeps its order).
pub(super) fn heap_first(memory: &MemoryProperties, ranked: Vec<u32>, heap: u32) -> Placement {
    let (mut candidates, others): (Vec<u32>, Vec<u32>) = ranked
        .into_iter()
        .partition(|&t| memory.types[t as usize].heap == heap);
    candidates.extend(others);
    Placement {
        ty: candidates.first().copied().unwrap_or(0),
        heap,
        candidates,
    }
}

/// The size of `heap` in bytes (0 for a heap the table does not have).
pub(super) fn heap_size(memory: &MemoryProperties, heap: u32) -> u64 {
    memory.heaps.get(heap as usize).map_or(0, |h| h.size)
}

/// Bytes for people: "246 MiB", "7.84 GiB".
pub(super) fn fmt_bytes(bytes: u64) -> String {
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    if bytes >= GIB {
        format!("{:.2} GiB", bytes as f64 / GIB as f64)
    } else if bytes >= MIB {
        format!("{:.0} MiB", bytes as f64 / MIB as f64)
    } else {
        format!("{bytes} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes_read_as_mib_or_gib() {
        assert_eq!(fmt_bytes(257_949_696), "246 MiB");
        assert_eq!(fmt_bytes(8 << 30), "8.00 GiB");
        assert_eq!(fmt_bytes(100), "100 bytes");
    }
}
