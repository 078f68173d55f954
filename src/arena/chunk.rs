//! Chunks: the pieces a region is cut into, kept in a slab of plain structs linked by index so
//! that allocating and freeing do no heap allocation once the slab has grown to its working size.

use super::allocation::ALLOCATION_ALIGNMENT;

/// "No chunk": the end of a neighbour list or an empty tree link.
pub(crate) const NIL: u32 = u32::MAX;

/// What a slab slot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Slot {
    /// Unused slot, linked into the vacant list through `next`.
    Vacant = 0,
    /// A free chunk, indexed in the bins.
    Free = 1,
    /// A live allocation.
    InUse = 2,
    /// Freed by the caller, waiting for a queue frontier.
    PendingFree = 3,
}

/// Bits of `Chunk::meta` holding the `Slot`.
const SLOT_MASK: u32 = 0b11;
/// Bit of `Chunk::meta` set when the slot's `ChunkInfo` holds a label.
const LABELLED_BIT: u32 = 0b100;
/// `Chunk::meta` keeps the rounding slack (`size - requested`, 0 to 256) above this bit.
const SLACK_SHIFT: u32 = 8;

/// The fields touched on every allocation and free, packed into 32 bytes: freeing a chunk reads
/// it and both its neighbours, and those reads are cache misses, so the slab's footprint sets
/// the speed. Everything an allocation records lives here too, so making one writes nowhere
/// else (labels aside).
#[derive(Clone, Copy, Debug)]
#[repr(C, align(32))]
pub(crate) struct Chunk {
    /// Start of the chunk in the arena's private address space: its region's `base_address`
    /// plus its offset. Ordering by `(size, address)` is the best-fit order with the
    /// lowest-address tie-break across all regions.
    pub address: u64,
    /// Size in 256-byte granules (chunks are below 2^30 granules; see `bins::MAX_CHUNK_BYTES`).
    granules: u32,
    /// The chunk just below in the same region, or `NIL`.
    pub prev: u32,
    /// The chunk just above in the same region, or `NIL`; for a vacant slot, the next vacant.
    pub next: u32,
    /// Index of the region in the arena's region table.
    pub region: u32,
    /// Slot state, the labelled flag and the rounding slack, packed.
    meta: u32,
    /// For an allocation: its sequence number modulo 2^32. Sequence numbers are unique, so
    /// this also tells a live allocation from an earlier one in the same slot: it is the
    /// generation half of the `AllocationId`.
    stamp: u32,
}

impl Chunk {
    /// Bytes, a multiple of 256.
    #[inline]
    pub fn size(&self) -> u64 {
        u64::from(self.granules) * ALLOCATION_ALIGNMENT
    }

    /// Size in granules.
    #[inline]
    pub fn granules(&self) -> u64 {
        u64::from(self.granules)
    }

    /// Sets the size (a multiple of 256 below 2^38 bytes).
    #[inline]
    pub fn set_size(&mut self, bytes: u64) {
        self.granules = (bytes / ALLOCATION_ALIGNMENT) as u32;
    }

    /// What the slot holds.
    #[inline]
    pub fn slot(&self) -> Slot {
        match self.meta & SLOT_MASK {
            0 => Slot::Vacant,
            1 => Slot::Free,
            2 => Slot::InUse,
            _ => Slot::PendingFree,
        }
    }

    /// True for a free chunk (one compare, no decoding).
    #[inline]
    pub fn is_free(&self) -> bool {
        self.meta & SLOT_MASK == Slot::Free as u32
    }

    /// True when this is the live allocation whose id carries `stamp`.
    #[inline]
    pub fn holds(&self, stamp: u32) -> bool {
        (self.meta & SLOT_MASK == Slot::InUse as u32) & (self.stamp == stamp)
    }

    #[inline]
    pub fn set_slot(&mut self, slot: Slot) {
        self.meta = (self.meta & !SLOT_MASK) | slot as u32;
    }

    /// The slot's `ChunkInfo` holds a label that must be dropped when the chunk is freed.
    /// Unlabelled chunks never touch `ChunkInfo` on free.
    #[inline]
    pub fn labelled(&self) -> bool {
        self.meta & LABELLED_BIT != 0
    }

    #[inline]
    fn set_labelled(&mut self, labelled: bool) {
        self.meta = (self.meta & !LABELLED_BIT) | if labelled { LABELLED_BIT } else { 0 };
    }

    /// Makes this free chunk the allocation with sequence number `sequence` of `requested`
    /// bytes (at most 256 below its size). Returns the stamp for its id.
    #[inline]
    pub fn hand_out(&mut self, sequence: u64, requested: u64) -> u32 {
        let slack = (self.size() - requested) as u32;
        self.meta = (slack << SLACK_SHIFT) | Slot::InUse as u32;
        self.stamp = sequence as u32;
        self.stamp
    }

    /// For an allocation: the bytes asked for.
    #[inline]
    pub fn requested(&self) -> u64 {
        self.size() - u64::from(self.meta >> SLACK_SHIFT)
    }

    /// For an allocation: its sequence number, given `latest`, the most recent one handed
    /// out. Exact unless the allocation is 2^32 allocations old.
    #[inline]
    pub fn sequence(&self, latest: u64) -> u64 {
        latest - (latest.wrapping_sub(u64::from(self.stamp)) & u64::from(u32::MAX))
    }

    /// The stamp of this allocation's id.
    #[inline]
    pub fn stamp(&self) -> u32 {
        self.stamp
    }
}

/// Fields only touched for labelled allocations and pending frees.
#[derive(Clone, Debug, Default)]
pub(crate) struct ChunkInfo {
    /// For a pending free, the queue position to wait for.
    pub frontier: u64,
    /// The caller's label; `None` costs no heap allocation.
    pub label: Option<Box<str>>,
}

/// The slab of chunks.
#[derive(Debug)]
pub(crate) struct Chunks {
    /// Hot fields, indexed by slot.
    pub hot: Vec<Chunk>,
    /// Cold fields, indexed by slot.
    pub info: Vec<ChunkInfo>,
    /// First vacant slot, or `NIL`.
    vacant: u32,
    /// Slots that are not vacant.
    live: usize,
}

impl Chunks {
    pub fn new() -> Chunks {
        Chunks {
            hot: Vec::new(),
            info: Vec::new(),
            vacant: NIL,
            live: 0,
        }
    }

    /// Takes a slot for a new free chunk and returns it. `None` once 2^32 − 1 chunks exist.
    #[inline]
    pub fn insert(&mut self, address: u64, size: u64, region: u32) -> Option<u32> {
        let slot = if self.vacant != NIL {
            let slot = self.vacant;
            self.vacant = self.hot[slot as usize].next;
            slot
        } else {
            let slot = u32::try_from(self.hot.len()).ok().filter(|&s| s != NIL)?;
            self.hot.push(Chunk {
                address: 0,
                granules: 0,
                prev: NIL,
                next: NIL,
                region: 0,
                meta: Slot::Vacant as u32,
                stamp: 0,
            });
            self.info.push(ChunkInfo::default());
            slot
        };
        let chunk = &mut self.hot[slot as usize];
        chunk.address = address;
        chunk.set_size(size);
        chunk.prev = NIL;
        chunk.next = NIL;
        chunk.region = region;
        chunk.meta = Slot::Free as u32;
        self.live += 1;
        Some(slot)
    }

    /// Returns a slot to the vacant list.
    #[inline]
    pub fn remove(&mut self, slot: u32) {
        self.clear_label(slot);
        let chunk = &mut self.hot[slot as usize];
        chunk.set_slot(Slot::Vacant);
        chunk.next = self.vacant;
        self.vacant = slot;
        self.live -= 1;
    }

    /// Drops the label of `slot`, touching the cold table only if there is one.
    #[inline]
    pub fn clear_label(&mut self, slot: u32) {
        let chunk = &mut self.hot[slot as usize];
        if chunk.labelled() {
            chunk.set_labelled(false);
            self.info[slot as usize].label = None;
        }
    }

    /// The label of `slot`, if it has one.
    pub fn label(&self, slot: u32) -> Option<&str> {
        if self.hot[slot as usize].labelled() {
            self.info[slot as usize].label.as_deref()
        } else {
            None
        }
    }

    /// Stores `label` for `slot` (a heap copy; only labelled allocations pay for it).
    pub fn set_label(&mut self, slot: u32, label: &str) {
        self.hot[slot as usize].set_labelled(true);
        self.info[slot as usize].label = Some(Box::from(label));
    }

    /// Makes every slot vacant, keeping capacity. Stamps survive, so ids handed out before
    /// stay recognisably stale.
    pub fn clear(&mut self) {
        self.vacant = NIL;
        for slot in (0..self.hot.len()).rev() {
            let chunk = &mut self.hot[slot];
            chunk.meta = Slot::Vacant as u32;
            chunk.next = self.vacant;
            self.vacant = slot as u32;
            self.info[slot].label = None;
        }
        self.live = 0;
    }

    /// True when `count` more chunks fit in the slab. Slots are `u32` (with `NIL` reserved),
    /// so the slab holds at most 2^32 − 1 chunks: some 128 GiB of bookkeeping, far beyond any
    /// real workload, but the arena reports out of memory rather than overflow.
    pub fn has_room(&self, count: usize) -> bool {
        self.live + count <= NIL as usize
    }

    /// Puts chunk `new` right after chunk `after` in its region's address order.
    #[inline]
    pub fn link_after(&mut self, after: u32, new: u32) {
        let next = self.hot[after as usize].next;
        self.hot[new as usize].prev = after;
        self.hot[new as usize].next = next;
        if next != NIL {
            self.hot[next as usize].prev = new;
        }
        self.hot[after as usize].next = new;
    }

    /// Chunk `slot` absorbs the free chunk just above it, whose slot becomes vacant. The
    /// absorbed chunk must already be out of the bins.
    #[inline]
    pub fn absorb_next(&mut self, slot: u32) {
        let next = self.hot[slot as usize].next;
        let absorbed = self.hot[next as usize];
        let chunk = &mut self.hot[slot as usize];
        chunk.granules += absorbed.granules;
        chunk.next = absorbed.next;
        if absorbed.next != NIL {
            self.hot[absorbed.next as usize].prev = slot;
        }
        self.remove(next);
    }

    /// The chunk in `slot`, or `None` if the slab never had it.
    #[inline]
    pub fn get(&self, slot: u32) -> Option<&Chunk> {
        self.hot.get(slot as usize)
    }
}
