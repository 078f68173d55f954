//! Host access to memory that is not HOST_COHERENT: flush after host writes, invalidate before
//! host reads, over ranges rounded out to `nonCoherentAtomSize`.
//!
//! On such memory (Intel non-LLC iGPUs, ARM Mali and Adreno, Apple's managed memory through
//! MoltenVK) the host's writes reach the device only after `vkFlushMappedMemoryRanges`, and
//! the device's writes reach the host only after `vkInvalidateMappedMemoryRanges`. Both take
//! ranges of the `VkDeviceMemory` whose offset is a multiple of the device's
//! `nonCoherentAtomSize` and whose size is one too, or ends at the end of the memory
//! ([`atom_range`]). Calling them on coherent memory is legal and changes nothing, which is how
//! `ArenaConfig::force_non_coherent` runs these paths on lavapipe.
//!
//! Rounding out never touches another array's bytes in a way that matters: arena allocations
//! and staging pieces of arrays start on 256-byte boundaries of dedicated allocations, and the
//! Vulkan spec caps `nonCoherentAtomSize` at 256. Flushing a neighbour's bytes writes back only
//! what the host wrote there (already flushed), and the crate flushes every host write at
//! once, so an invalidate never discards a write that was not flushed yet.

use ash::vk;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// How many flushes and invalidates a context's mapped memory has asked the driver for: zero
/// on coherent memory, one per host access on non-coherent memory (or with
/// `ArenaConfig::force_non_coherent`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HostSyncCounts {
    /// `vkFlushMappedMemoryRanges` calls (after host writes).
    pub flushes: u64,
    /// `vkInvalidateMappedMemoryRanges` calls (before host reads).
    pub invalidates: u64,
}

/// The live counters behind [`HostSyncCounts`], shared by every mapping of one context.
#[derive(Debug, Default)]
pub(crate) struct SyncCounters {
    flushes: AtomicU64,
    invalidates: AtomicU64,
}

impl SyncCounters {
    /// The counts so far.
    pub(crate) fn snapshot(&self) -> HostSyncCounts {
        HostSyncCounts {
            flushes: self.flushes.load(Ordering::Relaxed),
            invalidates: self.invalidates.load(Ordering::Relaxed),
        }
    }
}

/// Bytes `[offset, offset + len)` of a `VkDeviceMemory` of `memory_size` bytes, rounded out to
/// whole atoms of `atom` bytes: returns the `(offset, size)` of a `VkMappedMemoryRange` that
/// covers them and is valid (offset a multiple of `atom`; size a multiple of `atom` or reaching
/// exactly the end of the memory). `None` when there is nothing to cover (`len == 0`) or the
/// range does not lie inside the memory.
///
/// `atom` is `VkPhysicalDeviceLimits::nonCoherentAtomSize` (a power of two up to 256 by the
/// spec; any value is handled, 0 counts as 1). Pure arithmetic, never overflows.
pub(crate) fn atom_range(offset: u64, len: u64, atom: u64, memory_size: u64) -> Option<(u64, u64)> {
    let atom = atom.max(1);
    let end = offset.checked_add(len)?;
    if len == 0 || end > memory_size {
        return None;
    }
    let start = offset - offset % atom;
    // Round the end up to an atom, unless that passes the end of the memory: a range may stop
    // at the memory's end instead (VUID-VkMappedMemoryRange-size-01390).
    let rounded_end = match end % atom {
        0 => end,
        rest => end.saturating_add(atom - rest),
    };
    Some((start, rounded_end.min(memory_size) - start))
}

/// What flushing and invalidating one `VkDeviceMemory` needs: the device's entry points and
/// handles. It does not keep them alive: it lives inside a `MappedRange`, whose owner keeps
/// the memory allocated and the device open (see `mapped` and `vulkan`).
#[derive(Clone)]
pub(crate) struct HostSync {
    device: vk::Device,
    flush: vk::PFN_vkFlushMappedMemoryRanges,
    invalidate: vk::PFN_vkInvalidateMappedMemoryRanges,
    memory: vk::DeviceMemory,
    memory_size: u64,
    atom: u64,
    /// The context's counters.
    counters: Arc<SyncCounters>,
}

impl std::fmt::Debug for HostSync {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostSync")
            .field("memory", &self.memory)
            .field("memory_size", &self.memory_size)
            .field("atom", &self.atom)
            .finish()
    }
}

/// Which way data moves over mapped memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Direction {
    /// Host writes, made visible to the device.
    Flush,
    /// Device writes, made visible to host reads.
    Invalidate,
}

impl HostSync {
    /// Flush and invalidate for `memory` (`memory_size` bytes, mapped whole) on `device`, with
    /// the device's `nonCoherentAtomSize`, counted in `counters`. The caller puts it only in
    /// ranges whose owner keeps `memory` allocated and mapped and `device` open.
    pub(crate) fn new(
        device: &ash::Device,
        memory: vk::DeviceMemory,
        memory_size: u64,
        atom: u64,
        counters: &Arc<SyncCounters>,
    ) -> Self {
        let fns = device.fp_v1_0();
        Self {
            device: device.handle(),
            flush: fns.flush_mapped_memory_ranges,
            invalidate: fns.invalidate_mapped_memory_ranges,
            memory,
            memory_size,
            atom,
            counters: Arc::clone(counters),
        }
    }

    /// Makes host writes to bytes `[offset, offset + len)` of the memory visible to the device.
    pub(crate) fn flush(&self, offset: u64, len: u64) {
        self.run(Direction::Flush, offset, len);
    }

    /// Makes device writes to bytes `[offset, offset + len)` of the memory visible to host
    /// reads that follow.
    pub(crate) fn invalidate(&self, offset: u64, len: u64) {
        self.run(Direction::Invalidate, offset, len);
    }

    fn run(&self, direction: Direction, offset: u64, len: u64) {
        let Some((offset, size)) = atom_range(offset, len, self.atom, self.memory_size) else {
            return;
        };
        let range = vk::MappedMemoryRange::default()
            .memory(self.memory)
            .offset(offset)
            .size(size);
        let counters = &self.counters;
        let (call, count) = match direction {
            Direction::Flush => (self.flush, &counters.flushes),
            Direction::Invalidate => (self.invalidate, &counters.invalidates),
        };
        count.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the entry point and handles come from the device that allocated and mapped
        // `memory` (whole, with offset 0); this value lives only inside mapped ranges, whose
        // owner keeps that memory allocated and mapped and the device open (it may be lost or
        // destroyed by wgpu, which leaves the `VkDevice` and mapped memory valid to flush);
        // the range lies inside the memory and is atom-aligned (`atom_range`); the pointer
        // names one range on this stack frame.
        let result = unsafe { call(self.device, 1, &range) };
        // These calls fail only when the driver runs out of host or device memory. The copy
        // methods that call them run on copy threads and return nothing, so say it loudly.
        if result != vk::Result::SUCCESS {
            log::error!(
                "gpu-arena: {direction:?} of mapped memory range {offset}+{size} failed: \
                 {result}; the data moved through it may be stale"
            );
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::lock::{rank, Mutex};

    /// Calls the fake entry points saw: (direction, offset, size), in order.
    static CALLS: Mutex<Vec<(&'static str, u64, u64)>> =
        Mutex::new(rank::HOST_SYNC_TEST_CALLS, Vec::new());
    /// Tests that read `CALLS` run one at a time.
    pub(crate) static SERIAL: Mutex<()> = Mutex::new(rank::HOST_SYNC_TEST_SERIAL, ());

    unsafe extern "system" fn fake_flush(
        _: vk::Device,
        count: u32,
        ranges: *const vk::MappedMemoryRange<'_>,
    ) -> vk::Result {
        record("flush", count, ranges)
    }

    unsafe extern "system" fn fake_invalidate(
        _: vk::Device,
        count: u32,
        ranges: *const vk::MappedMemoryRange<'_>,
    ) -> vk::Result {
        record("invalidate", count, ranges)
    }

    fn record(
        what: &'static str,
        count: u32,
        ranges: *const vk::MappedMemoryRange<'_>,
    ) -> vk::Result {
        // SAFETY: `HostSync::run` passes one valid range.
        let ranges = unsafe { std::slice::from_raw_parts(ranges, count as usize) };
        let mut calls = CALLS.lock().unwrap_or_else(|p| p.into_inner());
        calls.extend(ranges.iter().map(|r| (what, r.offset, r.size)));
        vk::Result::SUCCESS
    }

    /// Counters of the recording `HostSync`s, shared by every test.
    static COUNTERS: std::sync::LazyLock<Arc<SyncCounters>> =
        std::sync::LazyLock::new(Arc::default);

    /// A `HostSync` whose entry points record their ranges instead of calling a driver.
    pub(crate) fn recording(memory_size: u64, atom: u64) -> HostSync {
        CALLS.lock().unwrap_or_else(|p| p.into_inner()).clear();
        HostSync {
            device: vk::Device::null(),
            flush: fake_flush,
            invalidate: fake_invalidate,
            memory: vk::DeviceMemory::null(),
            memory_size,
            atom,
            counters: Arc::clone(&COUNTERS),
        }
    }

    /// The calls recorded since [`recording`], emptied.
    pub(crate) fn recorded() -> Vec<(&'static str, u64, u64)> {
        std::mem::take(&mut *CALLS.lock().unwrap_or_else(|p| p.into_inner()))
    }

    #[test]
    fn ranges_round_out_to_whole_atoms_of_1_64_and_256_bytes() {
        let memory = 1 << 20;
        // (offset, len, atom) -> (offset, size)
        let cases = [
            ((0, 1, 1), (0, 1)),
            ((13, 7, 1), (13, 7)),
            ((0, 64, 64), (0, 64)),
            ((1, 1, 64), (0, 64)),
            ((63, 2, 64), (0, 128)),
            ((64, 64, 64), (64, 64)),
            ((100, 1000, 64), (64, 1088)),
            ((0, 1, 256), (0, 256)),
            ((255, 2, 256), (0, 512)),
            ((256, 256, 256), (256, 256)),
            ((1000, 24, 256), (768, 256)),
        ];
        for ((offset, len, atom), want) in cases {
            let got = atom_range(offset, len, atom, memory);
            assert_eq!(got, Some(want), "{offset}+{len} in atoms of {atom}");
            let (start, size) = want;
            assert_eq!(start % atom, 0);
            assert_eq!(size % atom, 0);
            assert!(start <= offset && start + size >= offset + len);
        }
    }

    #[test]
    fn ranges_at_the_end_of_the_memory_stop_there_instead_of_rounding_past_it() {
        // A memory of 1000 bytes: not a multiple of 64 or 256.
        for atom in [1, 64, 256] {
            let (start, size) = atom_range(990, 10, atom, 1000).unwrap();
            assert_eq!(start + size, 1000, "atom {atom} ends at the memory's end");
            assert_eq!(start, 990 - 990 % atom);
            // The whole memory.
            assert_eq!(atom_range(0, 1000, atom, 1000), Some((0, 1000)));
        }
        // A memory that is a whole number of atoms rounds to its end as well.
        assert_eq!(atom_range(4000, 96, 64, 4096), Some((3968, 128)));
        assert_eq!(atom_range(4095, 1, 256, 4096), Some((3840, 256)));
    }

    #[test]
    fn empty_or_outside_ranges_need_no_call_and_extremes_do_not_overflow() {
        assert_eq!(atom_range(64, 0, 64, 1024), None);
        assert_eq!(atom_range(1000, 25, 64, 1024), None);
        assert_eq!(atom_range(u64::MAX, 1, 64, u64::MAX), None);
        assert_eq!(
            atom_range(u64::MAX - 10, 10, 256, u64::MAX),
            Some((
                u64::MAX - 10 - (u64::MAX - 10) % 256,
                (u64::MAX - 10) % 256 + 10
            ))
        );
        // An atom of 0 (a broken driver) counts as 1.
        assert_eq!(atom_range(5, 3, 0, 64), Some((5, 3)));
    }

    #[test]
    fn flush_and_invalidate_pass_the_rounded_range_to_the_driver() {
        let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let sync = recording(1000, 64);
        let before = COUNTERS.snapshot();
        sync.flush(70, 10);
        sync.invalidate(990, 10);
        sync.flush(5, 0);
        assert_eq!(
            recorded(),
            [("flush", 64, 64), ("invalidate", 960, 40)],
            "nothing for an empty range"
        );
        let after = COUNTERS.snapshot();
        assert_eq!(
            (
                after.flushes - before.flushes,
                after.invalidates - before.invalidates
            ),
            (1, 1),
            "the counters count driver calls"
        );
    }
}
