//! Size-class bins of free chunks with a two-level bitmap (as in TLSF), answering "the smallest
//! free chunk of at least this size, lowest address first" without scanning.
//!
//! Sizes are counted in 256-byte granules. Granule counts below 64 each have a bin of their own
//! (exact classes); above that, every power of two is cut into [`SUB_BINS`] equal classes, so a
//! bin spans at most 1/32 of its sizes. A bit per bin says whether it holds a chunk, and a bit per
//! power of two says whether any of its bins does, so the next non-empty class is two
//! `trailing_zeros`. Within a bin, chunks sit in an ordered set (`btree.rs`) keyed by [`key`]:
//! the size above the bin's floor in the high bits and the address in the low bits, so key
//! order is best-fit order with the lowest-address tie-break, in one `u64`.

use super::allocation::ALLOCATION_ALIGNMENT;
use super::btree::{Forest, Key, Tree};
use super::chunk::{Chunk, NIL};

/// log2 of the classes each power of two is split into. 32 classes keep the spread of sizes in a
/// bin at about 3% (TLSF uses 16 or 32).
const SUB_BIN_BITS: u32 = 5;
/// Classes per power of two.
const SUB_BINS: usize = 1 << SUB_BIN_BITS;
/// Powers of two tracked: one bit each in a `u64`, more than chunk sizes can reach.
const TOP_BINS: usize = 64;
/// All bins.
const BIN_COUNT: usize = TOP_BINS * SUB_BINS;

/// Bits of a key holding the chunk's address in granules. The arena's private address space
/// is therefore `2^40` granules (256 TiB), which it keeps regions within (see
/// [`ADDRESS_SPACE_BYTES`]).
const ADDRESS_BITS: u32 = 40;

/// Size of the arena's private address space, where regions are laid out in creation order.
pub(crate) const ADDRESS_SPACE_BYTES: u64 = ALLOCATION_ALIGNMENT << ADDRESS_BITS;

/// The largest chunk (and so region) the bins can index: the size above a bin's floor must fit
/// the 24 key bits above the address, and a bin spans 1/32 of its floor, so granule counts stay
/// below 2^30 (256 GiB). Far above any device's largest buffer.
pub(crate) const MAX_CHUNK_BYTES: u64 = ((1 << 30) - 1) * ALLOCATION_ALIGNMENT;

/// The bin of a chunk of `granules` granules, and the granules it has above the bin's floor
/// (its size's part of the key). Branch-free: sizes arrive in no predictable order.
#[inline]
fn locate(granules: u64) -> (usize, u64) {
    // Below 32 granules every count is its own bin (the `| 31` makes them all look like
    // the top of power-of-two group 0). Above, the SUB_BIN_BITS bits after the leading one
    // pick the class, and the bits below them are the size above the floor.
    let log2 = 63 - (granules | (SUB_BINS as u64 - 1)).leading_zeros();
    let shift = log2.max(SUB_BIN_BITS) - SUB_BIN_BITS;
    let top = (log2 + 1 - SUB_BIN_BITS) as usize;
    let sub = (granules >> shift) as usize & (SUB_BINS - 1);
    // Every u64 lands below BIN_COUNT; the mask tells the compiler so (no bounds checks).
    (
        (top * SUB_BINS + sub) & (BIN_COUNT - 1),
        granules & ((1 << shift) - 1),
    )
}

/// The key of a chunk of `granules` granules at byte `address`: order by size, then by
/// address, within one bin.
#[inline]
fn key(above_floor: u64, address: u64) -> Key {
    (above_floor << ADDRESS_BITS) | (address / ALLOCATION_ALIGNMENT)
}

/// Free chunks, indexed by size class.
#[derive(Debug)]
pub(crate) struct Bins {
    /// Bit `t` set: some bin in power-of-two group `t` is non-empty.
    top_bits: u64,
    /// Bit `s` of `sub_bits[t]` set: bin `t * SUB_BINS + s` is non-empty.
    sub_bits: [u32; TOP_BINS],
    /// Each bin's tree.
    roots: Box<[Tree; BIN_COUNT]>,
    /// The nodes of all the trees.
    forest: Forest,
}

impl Bins {
    pub fn new() -> Bins {
        Bins {
            top_bits: 0,
            sub_bits: [0; TOP_BINS],
            roots: vec![Tree::EMPTY; BIN_COUNT]
                .into_boxed_slice()
                .try_into()
                .expect("BIN_COUNT trees"),
            forest: Forest::new(),
        }
    }

    /// Forgets every free chunk.
    pub fn clear(&mut self) {
        self.top_bits = 0;
        self.sub_bits = [0; TOP_BINS];
        self.roots.fill(Tree::EMPTY);
        self.forest.clear();
    }

    /// Indexes free chunk `slot`.
    #[inline]
    pub fn insert(&mut self, chunks: &[Chunk], slot: u32) {
        let chunk = &chunks[slot as usize];
        let (bin, above_floor) = locate(chunk.granules());
        self.forest
            .insert(&mut self.roots[bin], key(above_floor, chunk.address), slot);
        self.sub_bits[bin / SUB_BINS % TOP_BINS] |= 1 << (bin % SUB_BINS);
        self.top_bits |= 1 << (bin / SUB_BINS);
    }

    /// Un-indexes free chunk `slot` (its size and address must be what they were at insert).
    #[inline]
    pub fn remove(&mut self, chunks: &[Chunk], slot: u32) {
        let chunk = &chunks[slot as usize];
        let (bin, above_floor) = locate(chunk.granules());
        let removed = self
            .forest
            .remove(&mut self.roots[bin], key(above_floor, chunk.address));
        debug_assert!(removed, "free chunk {slot} missing from bin {bin}");
        self.note_if_empty(bin);
    }

    /// The first non-empty bin at or above `bin`, if any.
    #[inline]
    fn nonempty_from(&self, bin: usize) -> Option<usize> {
        if bin >= BIN_COUNT {
            return None;
        }
        let top = bin / SUB_BINS;
        let here = self.sub_bits[top] & (u32::MAX << (bin % SUB_BINS));
        if here != 0 {
            return Some(top * SUB_BINS + here.trailing_zeros() as usize);
        }
        let above = if top + 1 < TOP_BINS {
            self.top_bits & (u64::MAX << (top + 1))
        } else {
            0
        };
        if above == 0 {
            return None;
        }
        let top = above.trailing_zeros() as usize;
        Some(top * SUB_BINS + self.sub_bits[top].trailing_zeros() as usize)
    }

    /// Exact best fit: the free chunk with the smallest `(size, address)` among those of at
    /// least `size` bytes, or `NIL`.
    #[inline]
    pub fn best_fit(&self, size: u64) -> u32 {
        let (bin, above_floor) = locate(size / ALLOCATION_ALIGNMENT);
        // The bin of the size itself may hold chunks both below and above it.
        let found = self
            .forest
            .lower_bound(&self.roots[bin], key(above_floor, 0));
        if found != NIL {
            return found;
        }
        // Every chunk in a higher bin is large enough; the smallest key there wins.
        match self.nonempty_from(bin + 1) {
            Some(bin) => self.forest.first(&self.roots[bin]),
            None => NIL,
        }
    }

    /// Like [`best_fit`](Bins::best_fit), but also takes the chunk out of the index, in one
    /// descent.
    #[inline]
    pub fn take_best_fit(&mut self, size: u64) -> u32 {
        let (bin, above_floor) = locate(size / ALLOCATION_ALIGNMENT);
        // The bitmap says whether the request's own bin is empty without touching its tree.
        if self.sub_bits[bin / SUB_BINS % TOP_BINS] & (1 << (bin % SUB_BINS)) != 0 {
            let found = self
                .forest
                .take_lower_bound(&mut self.roots[bin], key(above_floor, 0));
            if found != NIL {
                self.note_if_empty(bin);
                return found;
            }
        }
        match self.nonempty_from(bin + 1) {
            Some(bin) => {
                let found = self.forest.take_lower_bound(&mut self.roots[bin], 0);
                self.note_if_empty(bin);
                found
            }
            None => NIL,
        }
    }

    /// Clears the bitmap bits of `bin` if it has become empty.
    #[inline]
    fn note_if_empty(&mut self, bin: usize) {
        // Branch-free: whether a bin just emptied is as unpredictable as the workload.
        let top = bin / SUB_BINS;
        let emptied = u32::from(self.roots[bin].is_empty());
        self.sub_bits[top] &= !(emptied << (bin % SUB_BINS));
        self.top_bits &= !(u64::from(self.sub_bits[top] == 0) << top);
    }

    /// The free chunk just after `(size, address)` in best-fit order, or `NIL`. Used to walk
    /// candidates when an alignment larger than 256 bytes rules some out.
    pub fn next_after(&self, size: u64, address: u64) -> u32 {
        let (bin, above_floor) = locate(size / ALLOCATION_ALIGNMENT);
        let found = self
            .forest
            .upper_bound(&self.roots[bin], key(above_floor, address));
        if found != NIL {
            return found;
        }
        match self.nonempty_from(bin + 1) {
            Some(bin) => self.forest.first(&self.roots[bin]),
            None => NIL,
        }
    }

    /// The largest free chunk, or `NIL` when nothing is free.
    pub fn largest(&self) -> u32 {
        if self.top_bits == 0 {
            return NIL;
        }
        let top = 63 - self.top_bits.leading_zeros() as usize;
        let sub = 31 - self.sub_bits[top].leading_zeros() as usize;
        self.forest.last(&self.roots[top * SUB_BINS + sub])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bin computation spelled out with branches, to check the branch-free one.
    fn bin_of(granules: u64) -> usize {
        if granules < SUB_BINS as u64 {
            return granules as usize;
        }
        let log2 = 63 - granules.leading_zeros();
        let top = (log2 - SUB_BIN_BITS + 1) as usize;
        let sub = (granules >> (log2 - SUB_BIN_BITS)) as usize & (SUB_BINS - 1);
        top * SUB_BINS + sub
    }

    #[test]
    fn keys_order_chunks_by_size_then_address_within_a_bin() {
        let largest = MAX_CHUNK_BYTES / ALLOCATION_ALIGNMENT;
        let top_address = ADDRESS_SPACE_BYTES - ALLOCATION_ALIGNMENT;
        for granules in (1..1u64 << 20).step_by(89).chain([largest - 1, largest]) {
            let (bin, above) = locate(granules);
            assert_eq!(bin, bin_of(granules));
            assert_eq!(
                locate(granules - above),
                (bin, 0),
                "the floor is in the same bin"
            );
            assert!(
                above < 1 << (64 - ADDRESS_BITS),
                "the size part fits its key bits"
            );
            // Same size: the lower address comes first; larger size in the same bin: after.
            assert!(key(above, 0) < key(above, top_address));
            let (next_bin, next_above) = locate(granules + 1);
            if next_bin == bin {
                assert!(key(above, top_address) < key(next_above, 0));
            }
        }
    }

    #[test]
    fn bins_grow_with_size_and_small_sizes_have_exact_bins() {
        for granules in 1..64 {
            assert_eq!(locate(granules), (granules as usize, 0));
        }
        let mut previous = 0;
        for granules in (1..1u64 << 20).step_by(97).chain([u64::MAX / 256]) {
            let (bin, _) = locate(granules);
            assert!(bin >= previous && bin < BIN_COUNT);
            previous = bin;
        }
    }
}
