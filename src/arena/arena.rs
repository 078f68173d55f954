//! The arena: XLA's best-fit-with-coalescing (BFC) allocator over regions a backend provides,
//! plus the platform (no caching) mode, pending frees and statistics.

use std::fmt;

use super::allocation::{
    align_up, round_down, rounded_size, Allocation, AllocationId, ALLOCATION_ALIGNMENT,
};
use super::bins::{Bins, ADDRESS_SPACE_BYTES, MAX_CHUNK_BYTES};
use super::bytes::Bytes;
use super::chunk::{Chunks, Slot, NIL};
use super::error::ArenaError;
use super::events::{ArenaEvent, EventSink, Events};
use super::frontier::PendingFrees;
use super::oom::{OomCause, OutOfMemory};
use super::options::{ArenaMode, ArenaOptions, MAX_RESERVED_REGIONS};
use super::region::{Region, RegionRefusal, RegionSource};
use super::snapshot::{ArenaSnapshot, ChunkRecord, ChunkSnapshot, ChunkState, RegionSnapshot};
use super::stats::{fragmentation, MemoryStats};
use crate::memory_kind::MemoryKind;

/// The most chunks one allocation can add to the slab: an alignment gap, the allocation and
/// the remainder after it.
const MAX_NEW_CHUNKS_PER_ALLOCATION: usize = 3;

/// The byte budgets of [`ArenaOptions`], rounded to the allocation granularity once.
#[derive(Clone, Copy, Debug)]
struct Budget {
    reserve: u64,
    limit: u64,
    max_region: u64,
    initial_growth: u64,
}

impl Budget {
    fn new(options: &ArenaOptions) -> Budget {
        let limit = round_down(options.limit_bytes);
        Budget {
            reserve: round_down(options.reserve_bytes).min(limit),
            limit,
            max_region: round_down(options.max_region_bytes).min(MAX_CHUNK_BYTES),
            initial_growth: rounded_size(options.initial_growth_region_bytes)
                .unwrap_or(round_down(u64::MAX)),
        }
    }
}

/// The running counters behind [`MemoryStats`].
#[derive(Clone, Copy, Debug, Default)]
struct Counters {
    num_allocs: u64,
    bytes_in_use: u64,
    peak_bytes_in_use: u64,
    largest_alloc_size: u64,
    bytes_reserved: u64,
    peak_bytes_reserved: u64,
    num_regions: u64,
}

/// A best-fit-with-coalescing sub-allocator of byte ranges inside regions (XLA's BFC
/// allocator), or in platform mode a pass-through that gives every allocation its own region.
///
/// The arena is pure bookkeeping: it never touches memory, and every call that may need a
/// region takes the [`RegionSource`] that provides them. Allocation picks the smallest free
/// chunk that fits (lowest address on ties, regions ordered by creation), splits off the rest,
/// and a free merges with both free neighbours. Both cost O(log n) in the free chunks of one
/// size class (O(1) when a class holds a few) and allocate nothing on the heap once the chunk
/// table has grown to its working size (a label is the exception: it is copied into a
/// `Box<str>`). A request aligned beyond 256 bytes may examine several candidates, in best-fit
/// order, before one fits with its alignment gap.
///
/// `Arena` is `Send + Sync`; the device layer keeps it in a `Mutex` with its source.
///
/// ```
/// use gpu_arena::arena::{Arena, ArenaOptions, RegionId, RegionRefusal, RegionSource};
///
/// struct Heap(u64);
/// impl RegionSource for Heap {
///     fn create_region(&mut self, _size: u64) -> Result<RegionId, RegionRefusal> {
///         self.0 += 1;
///         Ok(RegionId(self.0))
///     }
///     fn release_region(&mut self, _region: RegionId) {}
/// }
///
/// let mut source = Heap(0);
/// let mut arena = Arena::new(ArenaOptions::preallocated(1 << 20));
/// let a = arena.allocate(1000, 0, Some("weights"), &mut source)?;
/// assert_eq!((a.offset, a.size), (0, 1024));
/// arena.free(a.id, None, &mut source)?;
/// assert_eq!(arena.stats().bytes_in_use, 0);
/// # Ok::<(), gpu_arena::arena::ArenaError>(())
/// ```
pub struct Arena {
    options: ArenaOptions,
    budget: Budget,
    /// `reserve()` has run (and `release_all()` has not run since).
    reserved: bool,
    /// BFC mode and reserved: `allocate` may take its fast path straight from the bins.
    serves_from_bins: bool,
    chunks: Chunks,
    bins: Bins,
    /// Region table; chunks refer to regions by index. `None` marks a vacant entry.
    regions: Vec<Option<Region>>,
    vacant_regions: Vec<u32>,
    /// Where the next region starts in the arena's private address space.
    next_address: u64,
    pending: PendingFrees,
    /// Size of the next region grown on demand (doubles after each growth, as in XLA).
    growth_region_bytes: u64,
    counters: Counters,
    events: Events,
    /// Added to every stamp in the ids this arena hands out (and taken off when one comes
    /// back), different for every arena of the process: an id of another arena names no live
    /// allocation here, though every arena numbers its allocations from 1.
    id_salt: u32,
}

/// The arenas made so far in the process: [`Arena::new`] derives each one's `id_salt` from it.
static ARENAS_MADE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// The device layer shares the arena between threads behind a mutex.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Arena>();
};

impl Default for Arena {
    fn default() -> Arena {
        Arena::new(ArenaOptions::default())
    }
}

impl fmt::Debug for Arena {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Arena")
            .field("options", &self.options)
            .field("reserved", &self.reserved)
            .field("stats", &self.stats())
            .field("pending_free_bytes", &self.pending.bytes())
            .field("event_sink", &self.events)
            .finish()
    }
}

/// An alignment the arena serves: a power of two, at least [`ALLOCATION_ALIGNMENT`] (every
/// chunk starts on that granule, so smaller alignments hold anyway).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Alignment(u64);

impl Alignment {
    /// `align` as the arena serves it: 0 asks for the default granule, a power of two is
    /// rounded up to the granule, anything else is [`ArenaError::InvalidAlignment`].
    fn new(align: u64) -> Result<Alignment, ArenaError> {
        match align {
            0 => Ok(Alignment(ALLOCATION_ALIGNMENT)),
            a if a.is_power_of_two() => Ok(Alignment(a.max(ALLOCATION_ALIGNMENT))),
            a => Err(ArenaError::InvalidAlignment(a)),
        }
    }
}

/// A salt for a new arena's ids: spread over 31 bits (the golden ratio's multiples), so that
/// a stamp plus its salt wraps to 0 only after 2^31 allocations, and 0 for the process's first
/// arena.
fn next_id_salt() -> u32 {
    let made = ARENAS_MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    made.wrapping_mul(0x9E37_79B9) >> 1
}

impl Arena {
    /// An arena with no regions yet; [`reserve`](Arena::reserve) (or the first allocation)
    /// creates the preallocated base.
    pub fn new(options: ArenaOptions) -> Arena {
        let budget = Budget::new(&options);
        Arena {
            options,
            budget,
            reserved: false,
            serves_from_bins: false,
            chunks: Chunks::new(),
            bins: Bins::new(),
            regions: Vec::new(),
            vacant_regions: Vec::new(),
            next_address: 0,
            pending: PendingFrees::default(),
            growth_region_bytes: budget.initial_growth,
            counters: Counters::default(),
            events: Events::default(),
            id_salt: next_id_salt(),
        }
    }

    /// The id of the allocation in chunk `slot` whose stamp is `stamp`.
    fn id_of(&self, slot: u32, stamp: u32) -> AllocationId {
        AllocationId::new(slot, stamp.wrapping_add(self.id_salt))
    }

    /// The stamp of the chunk that `id` names, if this arena handed it out.
    fn stamp_of(&self, id: AllocationId) -> u32 {
        id.stamp().wrapping_sub(self.id_salt)
    }

    /// The options the arena was created with (unrounded).
    pub fn options(&self) -> &ArenaOptions {
        &self.options
    }

    /// True once [`reserve`](Arena::reserve) has run (until [`release_all`](Arena::release_all)).
    pub fn is_reserved(&self) -> bool {
        self.reserved
    }

    /// Creates the preallocated base: `reserve_bytes` split into regions of at most
    /// `max_region_bytes`. Idempotent. [`allocate`](Arena::allocate) calls it when it has not
    /// run yet. In platform mode it creates nothing.
    ///
    /// # Errors
    /// [`ArenaError::ReserveRefused`] when the source refuses a base region (the regions created
    /// so far are given back, so a later call starts over; a region refused as too large for
    /// the device is not a refusal of the reserve: the reserve starts over in regions under the
    /// device's limit, as [`RegionRefusal::TooLarge`] says), [`ArenaError::DeviceLost`] when it
    /// refuses because the device is lost (given back the same way),
    /// [`ArenaError::NoRegionAllowed`] when `max_region_bytes` is below 256 bytes, and
    /// [`ArenaError::TooManyReservedRegions`] when the reserve would take more than
    /// [`MAX_RESERVED_REGIONS`] regions.
    pub fn reserve(&mut self, source: &mut dyn RegionSource) -> Result<(), ArenaError> {
        if self.reserved {
            return Ok(());
        }
        // A region refused as too large lowers the largest region; the reserve then starts
        // over in regions under that limit (the limit only falls, so this ends). A failed
        // reserve leaves the peaks as they were: the regions it held for a moment are gone.
        let peak = self.counters.peak_bytes_reserved;
        loop {
            match self.reserve_regions(source) {
                Ok(Some(limit)) => self.learn_region_limit(limit),
                Ok(None) => break,
                Err(error) => {
                    self.counters.peak_bytes_reserved = peak;
                    return Err(error);
                }
            };
        }
        self.reserved = true;
        self.serves_from_bins = self.options.mode == ArenaMode::Bfc;
        Ok(())
    }

    /// Creates the base regions; `Some(limit)` when the source refused one as larger than a
    /// `limit` under the region's size (the regions made are given back, and the reserve
    /// starts over under that limit).
    fn reserve_regions(
        &mut self,
        source: &mut dyn RegionSource,
    ) -> Result<Option<u64>, ArenaError> {
        self.check_regions_allowed()?;
        if self.options.mode != ArenaMode::Bfc || self.budget.reserve == 0 {
            return Ok(None);
        }
        let regions = self.budget.reserve.div_ceil(self.budget.max_region);
        if regions > MAX_RESERVED_REGIONS {
            return Err(ArenaError::TooManyReservedRegions {
                reserve_bytes: self.budget.reserve,
                max_region_bytes: self.budget.max_region,
                regions,
            });
        }
        let mut remaining = self.budget.reserve;
        let mut created = Vec::new();
        while remaining > 0 {
            let size = remaining.min(self.budget.max_region);
            let refusal = match self.create_region(size, true, source) {
                Ok(region) => {
                    created.push(region);
                    remaining -= size;
                    continue;
                }
                Err(refusal) => refusal,
            };
            for region in created {
                self.release_region(region, source);
            }
            return match refusal {
                RegionRefusal::DeviceLost { reason } => Err(ArenaError::DeviceLost { reason }),
                // A limit under the 256-byte granule allows no region: refused as it stands.
                RegionRefusal::TooLarge { limit, .. }
                    if round_down(limit) < size && round_down(limit) > 0 =>
                {
                    Ok(Some(limit))
                }
                refusal => Err(ArenaError::ReserveRefused {
                    reserve_bytes: self.budget.reserve,
                    region_bytes: size,
                    refusal,
                }),
            };
        }
        Ok(None)
    }

    /// Errors when the options allow no region at all (`max_region_bytes` below a granule):
    /// no request could ever be served.
    fn check_regions_allowed(&self) -> Result<(), ArenaError> {
        match self.budget.max_region {
            0 => Err(ArenaError::NoRegionAllowed {
                max_region_bytes: self.options.max_region_bytes,
            }),
            _ => Ok(()),
        }
    }

    /// Allocates `size` bytes (0 is allowed and takes one 256-byte granule, as in XLA).
    ///
    /// `align` is 0 or 256 for the default 256-byte alignment; a larger power of two aligns
    /// the offset inside the region to it. `label` is kept with the allocation for snapshots
    /// and out-of-memory reports.
    ///
    /// # Errors
    /// [`ArenaError::InvalidAlignment`] for an alignment that is not a power of two;
    /// [`ArenaError::OutOfMemory`] when no free chunk fits and no region can be added (the
    /// report says why and what to change); [`ArenaError::DeviceLost`] when the source reports
    /// the device lost; the errors of [`reserve`](Arena::reserve) when the first call reserves
    /// the base and that fails. A failed call leaves every allocation as it was; wholly free
    /// growth regions that it gave back to make room for the request, after the source refused
    /// a new region, stay given back.
    #[inline]
    pub fn allocate(
        &mut self,
        size: u64,
        align: u64,
        label: Option<&str>,
        source: &mut dyn RegionSource,
    ) -> Result<Allocation, ArenaError> {
        // The common case, kept small: a default-aligned request that a free chunk serves.
        if self.serves_from_bins && (align == 0 || align == ALLOCATION_ALIGNMENT) {
            if let Some(rounded) = rounded_size(size) {
                if self.chunks.has_room(MAX_NEW_CHUNKS_PER_ALLOCATION) {
                    let slot = self.bins.take_best_fit(rounded);
                    if slot != NIL {
                        return Ok(self.carve(slot, rounded, size, label));
                    }
                }
            }
        }
        let align = Alignment::new(align)?;
        self.allocate_slow(size, align, label, source)
    }

    /// Everything `allocate` does beyond the common case: reserving, aligned fits, growth,
    /// platform regions and out-of-memory reports.
    #[inline(never)]
    fn allocate_slow(
        &mut self,
        size: u64,
        Alignment(align): Alignment,
        label: Option<&str>,
        source: &mut dyn RegionSource,
    ) -> Result<Allocation, ArenaError> {
        let Some(rounded) = rounded_size(size) else {
            return Err(self.out_of_memory(size, u64::MAX, OomCause::LargerThanAnyRegion, label));
        };
        if !self.reserved {
            self.check_regions_allowed()?;
            if let Some(never) = self.never_holds(size, label) {
                return Err(never);
            }
            self.reserve(source)?;
        }
        if !self.chunks.has_room(MAX_NEW_CHUNKS_PER_ALLOCATION) {
            return Err(self.out_of_memory(size, rounded, OomCause::LimitReached, label));
        }
        let fit = match self.options.mode {
            ArenaMode::Bfc => self.find_fit(rounded, align),
            ArenaMode::Platform => None,
        };
        let (slot, padding) = match fit {
            Some(fit) => fit,
            None => {
                let grown = match self.options.mode {
                    ArenaMode::Bfc => self.grow(rounded, source),
                    ArenaMode::Platform => self.create_platform_region(rounded, source),
                };
                match grown {
                    // Offset 0 of a new region satisfies any alignment.
                    Ok(region) => {
                        let first = self.region(region).first_chunk;
                        self.bins.remove(&self.chunks.hot, first);
                        (first, 0)
                    }
                    Err(OomCause::SourceExhausted(RegionRefusal::DeviceLost { reason })) => {
                        return Err(ArenaError::DeviceLost { reason })
                    }
                    Err(cause) => return Err(self.out_of_memory(size, rounded, cause, label)),
                }
            }
        };
        let slot = if padding > 0 {
            self.split_off_gap(slot, padding)
        } else {
            slot
        };
        Ok(self.carve(slot, rounded, size, label))
    }

    /// The refusal of a request of `size` bytes that no region, or no arena under the limit,
    /// could ever hold, whatever is freed: what a first allocation refuses before it reserves
    /// anything, so that a failed call changes nothing. `None` when the request may fit.
    pub(crate) fn never_holds(&self, size: u64, label: Option<&str>) -> Option<ArenaError> {
        let (rounded, cause) = match rounded_size(size) {
            None => (u64::MAX, OomCause::LargerThanAnyRegion),
            Some(rounded) if rounded > self.budget.max_region => {
                (rounded, OomCause::LargerThanAnyRegion)
            }
            Some(rounded) if rounded > self.budget.limit => (rounded, OomCause::LimitReached),
            Some(_) => return None,
        };
        Some(self.out_of_memory(size, rounded, cause, label))
    }

    /// Frees an allocation.
    ///
    /// `frontier` is the queue position after which the GPU no longer touches the memory:
    /// `None` makes the chunk reusable now; `Some(n)` keeps it pending until
    /// [`advance_frontier`](Arena::advance_frontier) reports `n` (or later) as completed, or
    /// frees it now if that was already reported. In platform mode the region goes back to the
    /// source when the chunk becomes reusable.
    ///
    /// # Errors
    /// [`ArenaError::UnknownAllocation`] for an id already freed (double free), forgotten by
    /// [`release_all`](Arena::release_all), or not from this arena.
    #[inline]
    pub fn free(
        &mut self,
        id: AllocationId,
        frontier: Option<u64>,
        source: &mut dyn RegionSource,
    ) -> Result<(), ArenaError> {
        let slot = id.slot();
        let size = match self.chunks.get(slot) {
            Some(chunk) if chunk.holds(self.stamp_of(id)) => chunk.size(),
            _ => return Err(ArenaError::UnknownAllocation(id)),
        };
        self.counters.bytes_in_use -= size;
        if let Some(frontier) = frontier {
            if !self.pending.is_complete(frontier) {
                self.park(id, frontier);
                return Ok(());
            }
        }
        self.emit_free(id, false);
        self.make_free(slot, source);
        Ok(())
    }

    /// Keeps freed chunk `id` out of circulation until `frontier` completes.
    #[inline(never)]
    fn park(&mut self, id: AllocationId, frontier: u64) {
        let slot = id.slot();
        self.chunks.hot[slot as usize].set_slot(Slot::PendingFree);
        self.chunks.info[slot as usize].frontier = frontier;
        self.pending
            .push(frontier, slot, self.chunks.hot[slot as usize].size());
        self.emit_free(id, true);
    }

    /// Reports a free to the event sink, if there is one.
    #[inline]
    fn emit_free(&self, id: AllocationId, pending: bool) {
        self.events.emit(|| {
            let chunk = &self.chunks.hot[id.slot() as usize];
            let region = self.region(chunk.region);
            ArenaEvent::Free {
                id,
                region: region.id,
                offset: chunk.address - region.base_address,
                size: chunk.size(),
                pending,
                bytes_in_use: self.counters.bytes_in_use,
                bytes_reserved: self.counters.bytes_reserved,
            }
        });
    }

    /// Reports that queued GPU work up to position `completed` is done: every pending chunk
    /// whose frontier is at or below it becomes free (and coalesces with its neighbours).
    pub fn advance_frontier(&mut self, completed: u64, source: &mut dyn RegionSource) {
        self.pending.complete(completed);
        while let Some(slot) = self.pending.pop_ready() {
            debug_assert_eq!(self.chunks.hot[slot as usize].slot(), Slot::PendingFree);
            self.pending.released(self.chunks.hot[slot as usize].size());
            self.make_free(slot, source);
        }
    }

    /// Bytes freed by the caller that wait for the GPU before they can be reused. They count
    /// neither in `bytes_in_use` nor as free.
    pub fn pending_free_bytes(&self) -> u64 {
        self.pending.bytes()
    }

    /// The queue position whose completion makes every pending free take effect, while any
    /// free is pending: what a caller that needs the freed memory back waits for.
    pub fn pending_free_frontier(&self) -> Option<u64> {
        self.pending.latest()
    }

    /// Gives back every region that is wholly free, except the preallocated base. Returns the
    /// bytes released. The arena does this by itself before failing for want of room under the
    /// limit (XLA's "garbage collection" of free regions).
    pub fn release_free_regions(&mut self, source: &mut dyn RegionSource) -> u64 {
        let mut released = 0;
        for index in 0..self.regions.len() as u32 {
            if let Some(size) = self.free_growth_region(index) {
                released += size;
                self.release_region(index, source);
            }
        }
        released
    }

    /// The size of region `index` when it is a growth region (not the preallocated base) with
    /// nothing in it: what [`release_free_regions`](Arena::release_free_regions) gives back.
    fn free_growth_region(&self, index: u32) -> Option<u64> {
        let region = self.regions[index as usize].as_ref()?;
        let first = &self.chunks.hot[region.first_chunk as usize];
        let free = !region.is_base && first.slot() == Slot::Free && first.size() == region.size;
        free.then_some(region.size)
    }

    /// The bytes [`release_free_regions`](Arena::release_free_regions) would give back now.
    fn free_growth_bytes(&self) -> u64 {
        (0..self.regions.len() as u32)
            .filter_map(|index| self.free_growth_region(index))
            .sum()
    }

    /// Teardown: gives every region back to the source. Live and pending allocations are
    /// forgotten (their ids become unknown; no `Free` event is emitted for them: each region's
    /// `RegionReleased` ends what it held), the counters of current use drop to zero, no free
    /// is pending ([`pending_free_frontier`](Arena::pending_free_frontier) is `None` until the
    /// next one), and the next allocation reserves the base again.
    pub fn release_all(&mut self, source: &mut dyn RegionSource) {
        for index in 0..self.regions.len() {
            if let Some(region) = self.regions[index].take() {
                self.counters.bytes_reserved -= region.size;
                source.release_region(region.id);
                let bytes_reserved = self.counters.bytes_reserved;
                self.events.emit(|| ArenaEvent::RegionReleased {
                    region: region.id,
                    size: region.size,
                    bytes_in_use: 0,
                    bytes_reserved,
                });
            }
        }
        self.regions.clear();
        self.vacant_regions.clear();
        self.chunks.clear();
        self.bins.clear();
        self.pending.clear();
        self.next_address = 0;
        self.counters.bytes_in_use = 0;
        self.counters.num_regions = 0;
        self.growth_region_bytes = self.budget.initial_growth;
        self.reserved = false;
        self.serves_from_bins = false;
    }

    /// The live allocation `id`, or `None` if it was freed or never existed.
    pub fn allocation(&self, id: AllocationId) -> Option<Allocation> {
        let chunk = self.chunks.get(id.slot())?;
        if !chunk.holds(self.stamp_of(id)) {
            return None;
        }
        let region = self.region(chunk.region);
        Some(Allocation {
            id,
            region: region.id,
            offset: chunk.address - region.base_address,
            size: chunk.size(),
            requested: chunk.requested(),
        })
    }

    /// The label of the live allocation `id`, if it has one.
    pub fn label(&self, id: AllocationId) -> Option<&str> {
        self.allocation(id)?;
        self.chunks.label(id.slot())
    }

    /// Renames a live allocation (for snapshots and OOM reports). Errors if `id` is not live.
    pub fn set_label(&mut self, id: AllocationId, label: Option<&str>) -> Result<(), ArenaError> {
        if self.allocation(id).is_none() {
            return Err(ArenaError::UnknownAllocation(id));
        }
        match label {
            Some(label) => self.chunks.set_label(id.slot(), label),
            None => self.chunks.clear_label(id.slot()),
        }
        Ok(())
    }

    /// The statistics, keyed as JAX's `Device.memory_stats()`. Cheap: counters plus one
    /// descent of the bin index for the largest free block.
    pub fn stats(&self) -> MemoryStats {
        let c = &self.counters;
        let largest_free = self.largest_free_block();
        let total_free = self.total_free();
        MemoryStats {
            num_allocs: c.num_allocs,
            bytes_in_use: c.bytes_in_use,
            peak_bytes_in_use: c.peak_bytes_in_use,
            largest_alloc_size: c.largest_alloc_size,
            bytes_limit: Some(self.budget.limit),
            bytes_reserved: c.bytes_reserved,
            peak_bytes_reserved: c.peak_bytes_reserved,
            bytes_reservable_limit: Some(self.budget.limit),
            largest_free_block_bytes: largest_free,
            pool_bytes: Some(c.bytes_reserved),
            peak_pool_bytes: Some(c.peak_bytes_reserved),
            num_regions: c.num_regions,
            fragmentation: fragmentation(largest_free, total_free),
        }
    }

    /// Starts a new measurement window: `peak_bytes_in_use` and `peak_bytes_reserved` (and so
    /// `peak_pool_bytes`) drop to their current values, and `largest_alloc_size` to the
    /// largest allocation live now. `num_allocs` keeps counting.
    pub fn reset_peaks(&mut self) {
        self.counters.peak_bytes_in_use = self.counters.bytes_in_use;
        self.counters.peak_bytes_reserved = self.counters.bytes_reserved;
        self.counters.largest_alloc_size = self
            .chunks
            .hot
            .iter()
            .filter(|c| c.slot() == Slot::InUse)
            .map(|c| c.size())
            .max()
            .unwrap_or(0);
    }

    /// Every region (in creation order) with every chunk, and the statistics. O(chunks).
    pub fn snapshot(&self) -> ArenaSnapshot {
        let mut regions: Vec<&Region> = self.regions.iter().flatten().collect();
        regions.sort_by_key(|r| r.base_address);
        let regions = regions
            .into_iter()
            .map(|region| {
                let mut chunks = Vec::new();
                let mut slot = region.first_chunk;
                while slot != NIL {
                    let chunk = &self.chunks.hot[slot as usize];
                    let info = &self.chunks.info[slot as usize];
                    let state = match chunk.slot() {
                        Slot::InUse => ChunkState::InUse,
                        Slot::PendingFree => ChunkState::PendingFree,
                        Slot::Free | Slot::Vacant => ChunkState::Free,
                    };
                    let held = state != ChunkState::Free;
                    chunks.push(ChunkSnapshot {
                        record: ChunkRecord {
                            offset: chunk.address - region.base_address,
                            size: chunk.size(),
                            state,
                            allocation: held.then(|| self.id_of(slot, chunk.stamp())),
                            label: self.chunks.label(slot).filter(|_| held).map(String::from),
                            requested: if held { chunk.requested() } else { 0 },
                        },
                        sequence: if held {
                            chunk.sequence(self.counters.num_allocs)
                        } else {
                            0
                        },
                        frontier: (state == ChunkState::PendingFree).then_some(info.frontier),
                    });
                    slot = chunk.next;
                }
                RegionSnapshot {
                    id: region.id,
                    size: region.size,
                    chunks,
                }
            })
            .collect();
        ArenaSnapshot {
            regions,
            stats: self.stats(),
        }
    }

    /// Installs (or with `None` removes) a callback that sees every allocation, free and
    /// region change. Without one, events cost a branch each.
    pub fn set_event_sink(&mut self, sink: Option<EventSink>) {
        self.events.set(sink);
    }

    // ----- internals -----

    #[inline]
    fn region(&self, index: u32) -> &Region {
        self.regions[index as usize]
            .as_ref()
            .expect("a chunk always belongs to a live region")
    }

    fn largest_free_block(&self) -> u64 {
        match self.bins.largest() {
            NIL => 0,
            slot => self.chunks.hot[slot as usize].size(),
        }
    }

    fn total_free(&self) -> u64 {
        self.counters.bytes_reserved - self.counters.bytes_in_use - self.pending.bytes()
    }

    /// Takes the best-fit free chunk for `rounded` bytes at alignment `align` out of the bins;
    /// returns it with the gap before the aligned offset inside it.
    fn find_fit(&mut self, rounded: u64, align: u64) -> Option<(u32, u64)> {
        if align == ALLOCATION_ALIGNMENT {
            let found = self.bins.take_best_fit(rounded);
            return (found != NIL).then_some((found, 0));
        }
        let (slot, padding) = self.find_aligned_fit(rounded, align)?;
        self.bins.remove(&self.chunks.hot, slot);
        Some((slot, padding))
    }

    /// The best-fit free chunk for `rounded` bytes at an alignment above 256 bytes, and the
    /// gap before the aligned offset inside it.
    fn find_aligned_fit(&self, rounded: u64, align: u64) -> Option<(u32, u64)> {
        let chunks = &self.chunks.hot;
        let mut candidate = self.bins.best_fit(rounded);
        // Larger alignments: walk chunks in best-fit order until one fits with its gap. Any
        // chunk of at least `rounded + align - 256` bytes fits, which bounds the walk to the
        // chunks whose sizes fall in that window.
        while candidate != NIL {
            let chunk = &chunks[candidate as usize];
            let offset = chunk.address - self.region(chunk.region).base_address;
            if let Some(aligned) = align_up(offset, align) {
                let padding = aligned - offset;
                if padding <= chunk.size() - rounded {
                    return Some((candidate, padding));
                }
            }
            candidate = self.bins.next_after(chunk.size(), chunk.address);
        }
        None
    }

    /// Free chunk `slot` is out of the bins and an aligned allocation starts `padding` bytes
    /// into it: keep the gap as a free chunk and return the chunk after it.
    fn split_off_gap(&mut self, slot: u32, padding: u64) -> u32 {
        let upper = self.split(slot, padding);
        self.bins.insert(&self.chunks.hot, slot);
        upper
    }

    /// Cuts chunk `slot` at `at` bytes: `slot` keeps the first `at`, a new chunk linked after
    /// it takes the rest, and is returned. Neither half is put in the bins here.
    #[inline]
    fn split(&mut self, slot: u32, at: u64) -> u32 {
        let chunk = self.chunks.hot[slot as usize];
        let upper = self.new_chunk(chunk.address + at, chunk.size() - at, chunk.region);
        self.chunks.link_after(slot, upper);
        self.chunks.hot[slot as usize].set_size(at);
        upper
    }

    /// Turns free chunk `slot`, already out of the bins, into an allocation of `rounded` bytes
    /// at its start, keeping the remainder after it as a free chunk.
    #[inline]
    fn carve(
        &mut self,
        slot: u32,
        rounded: u64,
        requested: u64,
        label: Option<&str>,
    ) -> Allocation {
        let chunk = self.chunks.hot[slot as usize];
        // Every remainder is a whole number of granules, so it is always worth keeping as a
        // free chunk (XLA keeps small tails inside the allocation; splitting keeps
        // `bytes_in_use` exact and the memory usable).
        if chunk.size() > rounded {
            let rest = self.split(slot, rounded);
            self.bins.insert(&self.chunks.hot, rest);
        }
        let c = &mut self.counters;
        c.num_allocs += 1;
        c.bytes_in_use += rounded;
        c.peak_bytes_in_use = c.peak_bytes_in_use.max(c.bytes_in_use);
        c.largest_alloc_size = c.largest_alloc_size.max(rounded);
        let sequence = c.num_allocs;

        let stamp = self.chunks.hot[slot as usize].hand_out(sequence, requested);
        let id = self.id_of(slot, stamp);
        if let Some(label) = label {
            self.chunks.set_label(slot, label);
        }
        self.emit_alloc(id, slot, rounded, requested, label);
        let region = self.region(chunk.region);
        Allocation {
            id,
            region: region.id,
            offset: chunk.address - region.base_address,
            size: rounded,
            requested,
        }
    }

    /// Reports an allocation to the event sink, if there is one.
    #[inline]
    fn emit_alloc(
        &self,
        id: AllocationId,
        slot: u32,
        rounded: u64,
        requested: u64,
        label: Option<&str>,
    ) {
        self.events.emit(|| {
            let chunk = &self.chunks.hot[slot as usize];
            let region = self.region(chunk.region);
            ArenaEvent::Alloc {
                id,
                region: region.id,
                offset: chunk.address - region.base_address,
                size: rounded,
                requested,
                label,
                sequence: self.counters.num_allocs,
                bytes_in_use: self.counters.bytes_in_use,
                bytes_reserved: self.counters.bytes_reserved,
            }
        });
    }

    /// A slab slot for a new free chunk. `allocate` checked for room up front.
    #[inline]
    fn new_chunk(&mut self, address: u64, size: u64, region: u32) -> u32 {
        self.chunks
            .insert(address, size, region)
            .expect("allocate checks for room in the chunk table first")
    }

    /// Makes chunk `slot` (in use or pending) free, merging it with free neighbours. In
    /// platform mode its region goes back to the source.
    #[inline]
    fn make_free(&mut self, slot: u32, source: &mut dyn RegionSource) {
        self.chunks.clear_label(slot);
        let chunk = &mut self.chunks.hot[slot as usize];
        chunk.set_slot(Slot::Free);
        let (prev, next) = (chunk.prev, chunk.next);
        let mut slot = slot;
        if next != NIL && self.chunks.hot[next as usize].is_free() {
            self.bins.remove(&self.chunks.hot, next);
            self.chunks.absorb_next(slot);
        }
        // The lower chunk absorbs the upper one, so a region's first chunk never goes away.
        if prev != NIL && self.chunks.hot[prev as usize].is_free() {
            self.bins.remove(&self.chunks.hot, prev);
            self.chunks.absorb_next(prev);
            slot = prev;
        }
        self.bins.insert(&self.chunks.hot, slot);
        if self.options.mode == ArenaMode::Platform {
            let region = self.chunks.hot[slot as usize].region;
            self.release_region(region, source);
        }
    }

    /// Adds a region for a request of `rounded` bytes that no free chunk fits (BFC growth).
    ///
    /// As in XLA: the region is the current growth size (doubled until it covers the request,
    /// and doubled again after a growth that did not need that), cut to the room left under
    /// the limit and to the largest region allowed, but never below the request. The source's
    /// refusal decides what happens next:
    /// - out of memory (or another failure): a refused large region is retried at the
    ///   request's size, then wholly free regions are released and the growth retried once;
    /// - too large: the device's limit becomes the largest region asked for from now on, and
    ///   the growth is retried under it if the request still fits there;
    /// - device lost: growth stops at once.
    ///
    /// When the room under the limit is too small, wholly free regions are released first.
    fn grow(&mut self, rounded: u64, source: &mut dyn RegionSource) -> Result<u32, OomCause> {
        if rounded > self.budget.max_region {
            return Err(OomCause::LargerThanAnyRegion);
        }
        let mut target = self.growth_region_bytes;
        let mut enlarged = false;
        while target < rounded {
            target = target.saturating_mul(2);
            enlarged = true;
        }
        let mut collected = false;
        loop {
            let room = self.budget.limit - self.counters.bytes_reserved;
            if room < rounded {
                // Wholly free growth regions go back only when that makes room: a request
                // that fails anyway changes nothing.
                if !collected && room + self.free_growth_bytes() >= rounded {
                    collected = true;
                    if self.release_free_regions(source) > 0 {
                        continue;
                    }
                }
                return Err(OomCause::LimitReached);
            }
            let size = target.min(self.budget.max_region).min(room);
            let refusal = match self.create_region(size, false, source) {
                Ok(region) => {
                    self.growth_region_bytes = if enlarged {
                        target
                    } else {
                        target.saturating_mul(2)
                    };
                    return Ok(region);
                }
                Err(refusal) => refusal,
            };
            let refusal = match refusal {
                RegionRefusal::DeviceLost { .. } => return Err(OomCause::SourceExhausted(refusal)),
                RegionRefusal::TooLarge { limit, .. } => {
                    // Each retry asks for less than the refused size, so this ends.
                    if self.learn_region_limit(limit) < size && rounded <= self.budget.max_region {
                        continue;
                    }
                    return Err(OomCause::SourceExhausted(refusal));
                }
                refusal if size > rounded => {
                    // XLA backs off to smaller regions when the device refuses; the request's
                    // own size is the smallest that helps.
                    match self.create_region(rounded, false, source) {
                        Ok(region) => return Ok(region),
                        Err(lost @ RegionRefusal::DeviceLost { .. }) => {
                            return Err(OomCause::SourceExhausted(lost))
                        }
                        Err(too_large @ RegionRefusal::TooLarge { limit, .. }) => {
                            self.learn_region_limit(limit);
                            return Err(OomCause::SourceExhausted(too_large));
                        }
                        Err(_) => refusal,
                    }
                }
                refusal => refusal,
            };
            if !collected {
                collected = true;
                if self.release_free_regions(source) > 0 {
                    continue;
                }
            }
            return Err(OomCause::SourceExhausted(refusal));
        }
    }

    /// Lowers the largest region the arena asks for to `limit` (rounded down to the 256-byte
    /// granule), a size the source said it can never exceed; returns the new largest region.
    fn learn_region_limit(&mut self, limit: u64) -> u64 {
        self.budget.max_region = self.budget.max_region.min(round_down(limit));
        self.budget.max_region
    }

    /// Platform mode: a region of exactly `rounded` bytes for one allocation.
    fn create_platform_region(
        &mut self,
        rounded: u64,
        source: &mut dyn RegionSource,
    ) -> Result<u32, OomCause> {
        if rounded > self.budget.max_region {
            return Err(OomCause::LargerThanAnyRegion);
        }
        if self.budget.limit - self.counters.bytes_reserved < rounded {
            return Err(OomCause::LimitReached);
        }
        self.create_region(rounded, false, source)
            .map_err(|refusal| {
                if let RegionRefusal::TooLarge { limit, .. } = refusal {
                    self.learn_region_limit(limit);
                }
                OomCause::SourceExhausted(refusal)
            })
    }

    /// Asks the source for a region of `size` bytes and makes it one free chunk.
    fn create_region(
        &mut self,
        size: u64,
        is_base: bool,
        source: &mut dyn RegionSource,
    ) -> Result<u32, RegionRefusal> {
        let Some(base_address) = self.address_range_for(size) else {
            return Err(RegionRefusal::other(format!(
                "the arena's private address space of {} is taken by the regions it holds",
                Bytes(ADDRESS_SPACE_BYTES)
            )));
        };
        let id = source.create_region(size)?;
        self.next_address = base_address + size;
        let index = match self.vacant_regions.pop() {
            Some(index) => index,
            None => {
                self.regions.push(None);
                (self.regions.len() - 1) as u32
            }
        };
        let first_chunk = self.new_chunk(base_address, size, index);
        self.regions[index as usize] = Some(Region {
            id,
            size,
            base_address,
            first_chunk,
            is_base,
        });
        self.bins.insert(&self.chunks.hot, first_chunk);
        let c = &mut self.counters;
        c.bytes_reserved += size;
        c.peak_bytes_reserved = c.peak_bytes_reserved.max(c.bytes_reserved);
        c.num_regions += 1;
        let (bytes_in_use, bytes_reserved) = (c.bytes_in_use, c.bytes_reserved);
        self.events.emit(|| ArenaEvent::RegionCreated {
            region: id,
            size,
            bytes_in_use,
            bytes_reserved,
        });
        Ok(index)
    }

    /// Gives wholly free region `index` back to the source.
    fn release_region(&mut self, index: u32, source: &mut dyn RegionSource) {
        let Some(region) = self.regions[index as usize].take() else {
            return;
        };
        self.bins.remove(&self.chunks.hot, region.first_chunk);
        self.chunks.remove(region.first_chunk);
        self.vacant_regions.push(index);
        let c = &mut self.counters;
        c.bytes_reserved -= region.size;
        c.num_regions -= 1;
        source.release_region(region.id);
        let (bytes_in_use, bytes_reserved) = (c.bytes_in_use, c.bytes_reserved);
        self.events.emit(|| ArenaEvent::RegionReleased {
            region: region.id,
            size: region.size,
            bytes_in_use,
            bytes_reserved,
        });
    }

    /// Where a new region of `size` bytes would start in the private address space: after all
    /// others. `None` if the live regions leave no room (256 TiB of them).
    ///
    /// Addresses only grow, so after 256 TiB of regions created over the arena's life the
    /// space runs out; then the live regions are packed down from 0 in their order, which keeps
    /// every key's relative order and so every tree valid.
    fn address_range_for(&mut self, size: u64) -> Option<u64> {
        let fits = |start: u64| {
            start
                .checked_add(size)
                .is_some_and(|end| end <= ADDRESS_SPACE_BYTES)
        };
        if !fits(self.next_address) {
            self.compact_addresses();
        }
        fits(self.next_address).then_some(self.next_address)
    }

    fn compact_addresses(&mut self) {
        let mut order: Vec<u32> = (0..self.regions.len() as u32)
            .filter(|&i| self.regions[i as usize].is_some())
            .collect();
        order.sort_by_key(|&i| self.region(i).base_address);
        let mut next = 0u64;
        for index in order {
            let region = self.regions[index as usize]
                .as_mut()
                .expect("filtered to live regions");
            let shift = region.base_address - next;
            region.base_address = next;
            next += region.size;
            let mut slot = region.first_chunk;
            while slot != NIL {
                self.chunks.hot[slot as usize].address -= shift;
                slot = self.chunks.hot[slot as usize].next;
            }
        }
        self.next_address = next;
    }

    /// Builds the out-of-memory report. When the free bytes would cover the request but no
    /// single block does, fragmentation is named as the cause, whatever stopped growth.
    fn out_of_memory(
        &self,
        requested: u64,
        rounded: u64,
        cause: OomCause,
        label: Option<&str>,
    ) -> ArenaError {
        let largest_free_block = self.largest_free_block();
        let total_free = self.total_free();
        // A region the device can never give is not helped by defragmenting.
        let cause = match cause {
            OomCause::LimitReached if total_free >= rounded => OomCause::Fragmentation,
            OomCause::SourceExhausted(ref refusal)
                if total_free >= rounded && !matches!(refusal, RegionRefusal::TooLarge { .. }) =>
            {
                OomCause::Fragmentation
            }
            cause => cause,
        };
        ArenaError::OutOfMemory(Box::new(OutOfMemory {
            requested,
            rounded,
            bytes_in_use: self.counters.bytes_in_use,
            bytes_reserved: self.counters.bytes_reserved,
            bytes_limit: self.budget.limit,
            reserve_bytes: self.budget.reserve,
            largest_free_block,
            total_free,
            pending_free_bytes: self.pending.bytes(),
            fragmentation: fragmentation(largest_free_block, total_free),
            max_region_bytes: self.budget.max_region,
            cause,
            mode: self.options.mode,
            label: label.map(String::from),
            memory_kind: MemoryKind::Device,
            pinned_host_room: None,
            assumed_device_memory: None,
            max_limit_bytes: None,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_alignment_is_the_granule_at_least_and_a_power_of_two_always() {
        let served = |align| Alignment::new(align).map(|Alignment(a)| a);
        assert_eq!(served(0), Ok(ALLOCATION_ALIGNMENT));
        assert_eq!(served(1), Ok(ALLOCATION_ALIGNMENT));
        assert_eq!(served(ALLOCATION_ALIGNMENT), Ok(ALLOCATION_ALIGNMENT));
        assert_eq!(served(1 << 20), Ok(1 << 20));
        assert_eq!(served(1 << 63), Ok(1 << 63));
        for bad in [3, 768, u64::MAX, (1 << 63) + 1] {
            assert_eq!(served(bad), Err(ArenaError::InvalidAlignment(bad)));
        }
    }
}
