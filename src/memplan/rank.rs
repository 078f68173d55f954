//! Which memory types may be used at all, and how the usable ones rank for a purpose.
//!
//! The filter follows wgpu-hal (`Adapter::open`: a type is valid only when its flags are among
//! the ones it knows, so PROTECTED, LAZILY_ALLOCATED and AMD's device-coherent/uncached types
//! drop out); the ranking follows VMA's `vmaFindMemoryTypeIndex`: among the types that have
//! every required flag, the cost is the number of preferred flags missing plus the number of
//! not-preferred flags present, and equal costs go to the lowest index.

use super::table::{MemoryProperties, MemoryTypeFlags as F};

/// The flags a usable memory type may carry: wgpu-hal's `known_memory_flags` without
/// LAZILY_ALLOCATED, which wgpu-hal also refuses for buffers. Anything else (PROTECTED,
/// DEVICE_COHERENT_AMD, DEVICE_UNCACHED_AMD, bits added by later extensions) makes a type
/// unusable for the arena and for staging.
pub const USABLE_FLAGS: F =
    F(F::DEVICE_LOCAL.0 | F::HOST_VISIBLE.0 | F::HOST_COHERENT.0 | F::HOST_CACHED.0);

/// Masks are `u32`: Vulkan's `VK_MAX_MEMORY_TYPES`.
pub const MAX_MEMORY_TYPES: usize = 32;

/// Why a memory type is not usable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Skip {
    /// DEVICE_COHERENT_AMD or DEVICE_UNCACHED_AMD.
    AmdCoherent,
    /// PROTECTED.
    Protected,
    /// LAZILY_ALLOCATED.
    Lazy,
    /// A flag bit this policy does not know.
    UnknownFlags,
    /// Its heap has size 0 or does not exist.
    EmptyHeap,
    /// Its index does not fit a 32-bit mask.
    BeyondMask,
}

impl Skip {
    /// A short phrase saying why, for the plan's reasons.
    pub(crate) fn why(self) -> &'static str {
        match self {
            Skip::AmdCoherent => {
                "DEVICE_COHERENT_AMD/DEVICE_UNCACHED_AMD need VK_AMD_device_coherent_memory \
                 and bypass the GPU caches (slow)"
            }
            Skip::Protected => "PROTECTED memory is only for protected resources",
            Skip::Lazy => "LAZILY_ALLOCATED memory is only for transient attachments",
            Skip::UnknownFlags => "flags outside DEVICE_LOCAL/HOST_* that wgpu-hal does not know",
            Skip::EmptyHeap => "their heap is empty",
            Skip::BeyondMask => "index beyond a 32-bit type mask",
        }
    }
}

/// Why memory type `index` is unusable, or `None` when it is usable.
pub(crate) fn skip_reason(memory: &MemoryProperties, index: usize) -> Option<Skip> {
    let ty = memory.types.get(index)?;
    if index >= MAX_MEMORY_TYPES {
        return Some(Skip::BeyondMask);
    }
    if ty
        .flags
        .intersects(F::DEVICE_COHERENT_AMD | F::DEVICE_UNCACHED_AMD)
    {
        return Some(Skip::AmdCoherent);
    }
    if ty.flags.contains(F::PROTECTED) {
        return Some(Skip::Protected);
    }
    if ty.flags.contains(F::LAZILY_ALLOCATED) {
        return Some(Skip::Lazy);
    }
    if !USABLE_FLAGS.contains(ty.flags) {
        return Some(Skip::UnknownFlags);
    }
    match memory.heaps.get(ty.heap as usize) {
        Some(heap) if heap.size > 0 => None,
        _ => Some(Skip::EmptyHeap),
    }
}

/// The mask of usable memory types: bit `i` is set when type `i` may back the arena or
/// staging (its flags are all in [`USABLE_FLAGS`] and its heap exists and is not empty).
///
/// The Vulkan backend can AND this into every `memory_type_bits` it hands gpu-allocator, as
/// wgpu-hal does with its `valid_ash_memory_types`.
pub fn usable_type_mask(memory: &MemoryProperties) -> u32 {
    (0..memory.types.len().min(MAX_MEMORY_TYPES))
        .filter(|&i| skip_reason(memory, i).is_none())
        .fold(0, |mask, i| mask | (1 << i))
}

/// What a use of memory asks of a memory type, in VMA's terms.
///
/// ```
/// use gpu_arena::memplan::{MemoryRequest, MemoryTypeFlags as F};
/// let readback = MemoryRequest {
///     required: F::HOST_VISIBLE,
///     preferred: F::HOST_CACHED,
///     not_preferred: F::DEVICE_LOCAL,
/// };
/// assert_eq!(readback.cost(F::HOST_VISIBLE | F::HOST_CACHED), Some(0));
/// assert_eq!(readback.cost(F::DEVICE_LOCAL | F::HOST_VISIBLE), Some(2));
/// assert_eq!(readback.cost(F::DEVICE_LOCAL), None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryRequest {
    /// A type without all of these is not a candidate.
    pub required: F,
    /// Each of these a type lacks costs 1.
    pub preferred: F,
    /// Each of these a type has costs 1.
    pub not_preferred: F,
}

impl MemoryRequest {
    /// VMA's cost of a type with `flags`: preferred flags missing plus not-preferred flags
    /// present; `None` when a required flag is missing.
    pub fn cost(&self, flags: F) -> Option<u32> {
        if !flags.contains(self.required) {
            return None;
        }
        let missing = (self.preferred.0 & !flags.0).count_ones();
        let unwanted = (self.not_preferred.0 & flags.0).count_ones();
        Some(missing + unwanted)
    }

    /// The usable types (see [`usable_type_mask`]) that have every required flag, cheapest
    /// first, equal costs by lowest index.
    pub fn rank(&self, memory: &MemoryProperties) -> Vec<u32> {
        self.rank_then(memory, &MemoryRequest::ANY)
    }

    /// Like [`rank`](Self::rank), with equal costs ordered by `tie_break`'s cost before the
    /// index. Types must have the required flags of both requests.
    ///
    /// VMA breaks ties by index alone; the policy uses this where two types are equally good
    /// for a purpose but one costs a driver call per access (a non-coherent type needs
    /// `vkFlushMappedMemoryRanges` / `vkInvalidateMappedMemoryRanges`).
    ///
    /// ```
    /// use gpu_arena::memplan::{MemoryRequest, MemoryTypeFlags as F};
    /// # use gpu_arena::memplan::{HeapFlags, MemoryHeap, MemoryProperties, MemoryType};
    /// # let memory = MemoryProperties {
    /// #     heaps: vec![MemoryHeap { size: 1 << 30, flags: HeapFlags::DEVICE_LOCAL }],
    /// #     types: [F::DEVICE_LOCAL | F::HOST_VISIBLE | F::HOST_CACHED,
    /// #             F::DEVICE_LOCAL | F::HOST_VISIBLE | F::HOST_COHERENT | F::HOST_CACHED]
    /// #         .into_iter().map(|flags| MemoryType { heap: 0, flags }).collect(),
    /// # };
    /// // Type 0 is cached but not coherent, type 1 cached and coherent.
    /// let readback = MemoryRequest {
    ///     required: F::HOST_VISIBLE,
    ///     preferred: F::HOST_CACHED,
    ///     not_preferred: F::empty(),
    /// };
    /// let coherent = MemoryRequest { preferred: F::HOST_COHERENT, ..MemoryRequest::ANY };
    /// assert_eq!(readback.rank(&memory), [0, 1]);
    /// assert_eq!(readback.rank_then(&memory, &coherent), [1, 0]);
    /// ```
    pub fn rank_then(&self, memory: &MemoryProperties, tie_break: &MemoryRequest) -> Vec<u32> {
        self.rank_by(memory, std::slice::from_ref(tie_break))
    }

    /// Like [`rank`](Self::rank), with equal costs ordered by each of `tie_breaks` in turn
    /// (the first decides, the next only among types the first finds equal), then by index.
    /// Types must have the required flags of every request.
    ///
    /// ```
    /// use gpu_arena::memplan::{MemoryRequest, MemoryTypeFlags as F};
    /// # use gpu_arena::memplan::{HeapFlags, MemoryHeap, MemoryProperties, MemoryType};
    /// # let memory = MemoryProperties {
    /// #     heaps: vec![MemoryHeap { size: 1 << 30, flags: HeapFlags::DEVICE_LOCAL },
    /// #                 MemoryHeap { size: 1 << 30, flags: HeapFlags::empty() }],
    /// #     types: vec![
    /// #         MemoryType { heap: 0, flags: F::DEVICE_LOCAL | F::HOST_VISIBLE | F::HOST_COHERENT },
    /// #         MemoryType { heap: 1, flags: F::HOST_VISIBLE | F::HOST_COHERENT | F::HOST_CACHED },
    /// #     ],
    /// # };
    /// // Type 0 is the full BAR (device-local), type 1 cached system memory.
    /// let coherent = MemoryRequest { required: F::HOST_VISIBLE, preferred: F::HOST_COHERENT, not_preferred: F::empty() };
    /// let host = MemoryRequest { not_preferred: F::DEVICE_LOCAL, ..MemoryRequest::ANY };
    /// let uncached = MemoryRequest { not_preferred: F::HOST_CACHED, ..MemoryRequest::ANY };
    /// assert_eq!(coherent.rank_by(&memory, &[uncached, host]), [0, 1]);
    /// assert_eq!(coherent.rank_by(&memory, &[host, uncached]), [1, 0]);
    /// ```
    pub fn rank_by(&self, memory: &MemoryProperties, tie_breaks: &[MemoryRequest]) -> Vec<u32> {
        let usable = usable_type_mask(memory);
        let mut ranked: Vec<(Vec<u32>, u32)> = memory
            .types
            .iter()
            .enumerate()
            .take(MAX_MEMORY_TYPES)
            .filter(|&(i, _)| usable & (1 << i) != 0)
            .filter_map(|(i, ty)| {
                let costs = std::iter::once(self)
                    .chain(tie_breaks)
                    .map(|request| request.cost(ty.flags))
                    .collect::<Option<Vec<u32>>>()?;
                Some((costs, i as u32))
            })
            .collect();
        ranked.sort_unstable();
        ranked.into_iter().map(|(_, i)| i).collect()
    }

    /// A request every type meets at cost 0: no required, preferred or unwanted flags.
    pub const ANY: MemoryRequest = MemoryRequest {
        required: F::empty(),
        preferred: F::empty(),
        not_preferred: F::empty(),
    };

    /// A request for types with every flag of `required` and no preference beyond it.
    pub(crate) const fn requiring(required: F) -> MemoryRequest {
        MemoryRequest {
            required,
            ..MemoryRequest::ANY
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::table::{vram_and_host_heaps, HeapFlags, MemoryHeap, MemoryType};
    use super::*;

    /// `types` on VRAM (heap 0), host memory (heap 1) and an empty heap (heap 2).
    fn table(types: &[(u32, F)]) -> MemoryProperties {
        let mut heaps = vram_and_host_heaps();
        heaps.push(MemoryHeap {
            size: 0,
            flags: HeapFlags::empty(),
        });
        MemoryProperties {
            heaps,
            types: types
                .iter()
                .map(|&(heap, flags)| MemoryType { heap, flags })
                .collect(),
        }
    }

    #[test]
    fn amd_protected_lazy_unknown_and_empty_heap_types_are_unusable() {
        let memory = table(&[
            (0, F::DEVICE_LOCAL),
            (0, F::DEVICE_LOCAL | F::DEVICE_COHERENT_AMD),
            (0, F::DEVICE_LOCAL | F::DEVICE_UNCACHED_AMD),
            (0, F::DEVICE_LOCAL | F::PROTECTED),
            (0, F::DEVICE_LOCAL | F::LAZILY_ALLOCATED),
            (0, F::DEVICE_LOCAL | F(0x100)),
            (2, F::HOST_VISIBLE | F::HOST_COHERENT),
            (1, F::empty()),
        ]);
        assert_eq!(usable_type_mask(&memory), 0b1000_0001);
        let causes: Vec<_> = (0..8).map(|i| skip_reason(&memory, i)).collect();
        assert_eq!(
            causes,
            [
                None,
                Some(Skip::AmdCoherent),
                Some(Skip::AmdCoherent),
                Some(Skip::Protected),
                Some(Skip::Lazy),
                Some(Skip::UnknownFlags),
                Some(Skip::EmptyHeap),
                None
            ]
        );
    }

    #[test]
    fn ranking_counts_missing_preferred_and_present_unwanted_flags_and_ties_go_to_the_lowest_index()
    {
        let memory = table(&[
            (1, F::HOST_VISIBLE | F::HOST_COHERENT | F::HOST_CACHED),
            (0, F::DEVICE_LOCAL | F::HOST_VISIBLE | F::HOST_COHERENT),
            (1, F::HOST_VISIBLE | F::HOST_COHERENT),
            (1, F::HOST_VISIBLE | F::HOST_COHERENT),
            (0, F::DEVICE_LOCAL),
        ]);
        let upload = MemoryRequest {
            required: F::HOST_VISIBLE | F::HOST_COHERENT,
            preferred: F::empty(),
            not_preferred: F::DEVICE_LOCAL | F::HOST_CACHED,
        };
        assert_eq!(upload.rank(&memory), [2, 3, 0, 1]);
        let readback = MemoryRequest {
            required: F::HOST_VISIBLE,
            preferred: F::HOST_CACHED,
            not_preferred: F::DEVICE_LOCAL,
        };
        assert_eq!(readback.rank(&memory), [0, 2, 3, 1]);
    }
}
