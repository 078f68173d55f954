//! Chunks: the pieces a region is cut into, kept in a slab of plain structs linked by index so
//! that allocating and freeing do no heap allocation once the slab has grown to its working size.

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
/// Bit of `Chunk::meta` set when the chunk's `ChunkInfo` holds a label.
const LABELLED_BIT: u32 = 0b100;
/// `Chunk::meta` keeps the generation above this many low bits (24 bits of generation: a
/// stale id is recognised unless its slot was reused 16 million times since).
const GENERATION_SHIFT: u32 = 8;

/// The fields touched on every allocation and free, packed into 32 bytes: freeing a chunk reads
/// it and both its neighbours, and those reads are cache misses, so the slab's footprint sets
/// the speed.
#[derive(Clone, Copy, Debug)]
#[repr(align(32))]
pub(crate) struct Chunk {
    /// Start of the chunk in the arena's private address space: its region's `base_address`
    /// plus its offset. Ordering by `(size, address)` is the best-fit order with the
    /// lowest-address tie-break across all regions.
    pub address: u64,
    /// Bytes, a multiple of 256.
    pub size: u64,
    /// The chunk just below in the same region, or `NIL`.
    pub prev: u32,
    /// The chunk just above in the same region, or `NIL`; for a vacant slot, the next vacant.
    pub next: u32,
    /// Index of the region in the arena's region table.
    pub region: u32,
    /// Slot state, the labelled flag and the generation, packed.
    meta: u32,
}

impl Chunk {
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

    /// True when this is the live allocation handed out with `generation`.
    #[inline]
    pub fn holds(&self, generation: u32) -> bool {
        self.meta & !LABELLED_BIT == (generation << GENERATION_SHIFT) | Slot::InUse as u32
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

    /// Bumped each time the slot becomes an allocation, so stale ids are recognised.
    #[inline]
    pub fn generation(&self) -> u32 {
        self.meta >> GENERATION_SHIFT
    }

    /// Advances the generation (wrapping within its 24 bits) and returns the new one.
    #[inline]
    pub fn bump_generation(&mut self) -> u32 {
        let low = self.meta & ((1 << GENERATION_SHIFT) - 1);
        self.meta = low | (self.generation().wrapping_add(1) << GENERATION_SHIFT);
        self.generation()
    }
}

/// Bits of a stamp holding the rounding slack (`size - requested`, at most 256).
const SLACK_BITS: u32 = 16;

/// What an allocation records besides its chunk, packed into 8 bytes so that making an
/// allocation writes one small word outside the hot slab: the allocation's sequence number
/// (`num_allocs` after it, modulo 2^48) above the rounding slack.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Stamp(u64);

impl Stamp {
    /// Sequence numbers wrap after 2^48 allocations (nine years at one per microsecond).
    pub fn new(sequence: u64, size: u64, requested: u64) -> Stamp {
        Stamp((sequence << SLACK_BITS) | (size - requested))
    }

    /// The allocation's sequence number.
    pub fn sequence(self) -> u64 {
        self.0 >> SLACK_BITS
    }

    /// The bytes asked for by an allocation whose chunk has `size` bytes.
    pub fn requested(self, size: u64) -> u64 {
        size - (self.0 & ((1 << SLACK_BITS) - 1))
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
    /// What each allocation records, indexed by slot.
    pub stamps: Vec<Stamp>,
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
            stamps: Vec::new(),
            vacant: NIL,
            live: 0,
        }
    }

    /// Takes a slot for a new free chunk and returns it. `None` once 2^32 − 1 chunks exist.
    pub fn insert(&mut self, address: u64, size: u64, region: u32) -> Option<u32> {
        let slot = if self.vacant != NIL {
            let slot = self.vacant;
            self.vacant = self.hot[slot as usize].next;
            slot
        } else {
            let slot = u32::try_from(self.hot.len()).ok().filter(|&s| s != NIL)?;
            self.hot.push(Chunk {
                address: 0,
                size: 0,
                prev: NIL,
                next: NIL,
                region: 0,
                meta: Slot::Vacant as u32,
            });
            self.info.push(ChunkInfo::default());
            self.stamps.push(Stamp::default());
            slot
        };
        let chunk = &mut self.hot[slot as usize];
        chunk.address = address;
        chunk.size = size;
        chunk.prev = NIL;
        chunk.next = NIL;
        chunk.region = region;
        chunk.set_slot(Slot::Free);
        self.live += 1;
        Some(slot)
    }

    /// Returns a slot to the vacant list. Its generation survives, so ids handed out from it
    /// stay recognisably stale.
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

    /// Makes every slot vacant, keeping generations and capacity.
    pub fn clear(&mut self) {
        self.vacant = NIL;
        for slot in (0..self.hot.len()).rev() {
            let chunk = &mut self.hot[slot];
            chunk.set_slot(Slot::Vacant);
            chunk.set_labelled(false);
            chunk.next = self.vacant;
            self.vacant = slot as u32;
            self.info[slot].label = None;
        }
        self.live = 0;
    }

    /// True when `count` more chunks fit in the slab. Slots are `u32` (with `NIL` reserved),
    /// so the slab holds at most 2^32 − 1 chunks: some 190 GiB of bookkeeping, far beyond any
    /// real workload, but the arena reports out of memory rather than overflow.
    pub fn has_room(&self, count: usize) -> bool {
        self.live + count <= NIL as usize
    }

    /// Puts chunk `new` right after chunk `after` in its region's address order.
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
        let Chunk {
            size, next: after, ..
        } = self.hot[next as usize];
        let chunk = &mut self.hot[slot as usize];
        chunk.size += size;
        chunk.next = after;
        if after != NIL {
            self.hot[after as usize].prev = slot;
        }
        self.remove(next);
    }

    /// Stores `label` for `slot` (a heap copy; only labelled allocations pay for it).
    pub fn set_label(&mut self, slot: u32, label: &str) {
        self.hot[slot as usize].set_labelled(true);
        self.info[slot as usize].label = Some(Box::from(label));
    }

    /// The state of `slot`, or `None` if the slab never had it.
    pub fn get(&self, slot: u32) -> Option<&Chunk> {
        self.hot.get(slot as usize)
    }
}
