//! Chunks: the pieces a region is cut into, kept in a slab of plain structs linked by index so
//! that allocating and freeing do no heap allocation once the slab has grown to its working size.

/// "No chunk": the end of a neighbour list or an empty tree link.
pub(crate) const NIL: u32 = u32::MAX;

/// What a slab slot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    /// Unused slot, linked into the vacant list through `next`.
    Vacant,
    /// A free chunk, indexed in the bins.
    Free,
    /// A live allocation.
    InUse,
    /// Freed by the caller, waiting for a queue frontier.
    PendingFree,
}

/// The fields touched on every allocation and free, kept small so more of them share a cache
/// line.
#[derive(Clone, Copy, Debug)]
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
    /// Free-tree child with smaller keys (only meaningful while free).
    pub left: u32,
    /// Free-tree child with larger keys (only meaningful while free).
    pub right: u32,
    /// Treap priority of this slot, fixed when the slot is created.
    pub priority: u32,
    /// Index of the region in the arena's region table.
    pub region: u32,
    /// Bumped each time the slot becomes an allocation, so stale ids are recognised.
    pub generation: u32,
    /// What the slot holds.
    pub slot: Slot,
}

/// Fields only read when an allocation is made, freed or inspected.
#[derive(Clone, Debug, Default)]
pub(crate) struct ChunkInfo {
    /// Bytes the caller asked for.
    pub requested: u64,
    /// `num_allocs` after this allocation was made.
    pub sequence: u64,
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

/// Spreads slot numbers into treap priorities that look random with respect to chunk keys
/// (the 32-bit finaliser of MurmurHash3).
fn priority_of(slot: u32) -> u32 {
    let mut h = slot ^ 0x9E37_79B9;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85EB_CA6B);
    h ^= h >> 13;
    h = h.wrapping_mul(0xC2B2_AE35);
    h ^ (h >> 16)
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
                left: NIL,
                right: NIL,
                priority: priority_of(slot),
                region: 0,
                generation: 0,
                slot: Slot::Vacant,
            });
            self.info.push(ChunkInfo::default());
            slot
        };
        let chunk = &mut self.hot[slot as usize];
        chunk.address = address;
        chunk.size = size;
        chunk.prev = NIL;
        chunk.next = NIL;
        chunk.left = NIL;
        chunk.right = NIL;
        chunk.region = region;
        chunk.slot = Slot::Free;
        self.live += 1;
        Some(slot)
    }

    /// Returns a slot to the vacant list. Its generation survives, so ids handed out from it
    /// stay recognisably stale.
    pub fn remove(&mut self, slot: u32) {
        let chunk = &mut self.hot[slot as usize];
        chunk.slot = Slot::Vacant;
        chunk.next = self.vacant;
        self.vacant = slot;
        self.info[slot as usize].label = None;
        self.live -= 1;
    }

    /// Makes every slot vacant, keeping generations and capacity.
    pub fn clear(&mut self) {
        self.vacant = NIL;
        for slot in (0..self.hot.len()).rev() {
            let chunk = &mut self.hot[slot];
            chunk.slot = Slot::Vacant;
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

    /// Takes chunk `slot` out of its region's address order.
    pub fn unlink(&mut self, slot: u32) {
        let Chunk { prev, next, .. } = self.hot[slot as usize];
        if prev != NIL {
            self.hot[prev as usize].next = next;
        }
        if next != NIL {
            self.hot[next as usize].prev = prev;
        }
    }

    /// The state of `slot`, or `None` if the slab never had it.
    pub fn get(&self, slot: u32) -> Option<&Chunk> {
        self.hot.get(slot as usize)
    }
}
