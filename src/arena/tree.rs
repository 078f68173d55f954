//! The free-chunk tree: an intrusive treap of free chunks ordered by `(size, address)`.
//!
//! Each size-class bin holds one. Its nodes are the chunks themselves (their `left`/`right`
//! fields), so inserting and removing allocate nothing, and the smallest chunk at or above a
//! size with the lowest address, which exact best fit needs, is one descent from the root.
//! Priorities are fixed per slab slot, so the tree's shape is a pure function of its contents
//! and slots: balanced in expectation, deterministic across runs.

use super::chunk::{Chunk, NIL};

/// The order of free chunks: by size, then by address (the best-fit tie-break).
#[inline]
fn key(chunks: &[Chunk], slot: u32) -> (u64, u64) {
    let c = &chunks[slot as usize];
    (c.size, c.address)
}

/// A place that holds a tree link: the root, or a child field of a chunk.
#[derive(Clone, Copy)]
enum Link {
    Root,
    Left(u32),
    Right(u32),
}

#[inline]
fn set(root: &mut u32, chunks: &mut [Chunk], link: Link, value: u32) {
    match link {
        Link::Root => *root = value,
        Link::Left(slot) => chunks[slot as usize].left = value,
        Link::Right(slot) => chunks[slot as usize].right = value,
    }
}

/// Adds free chunk `x` to the tree at `root`.
pub(crate) fn insert(root: &mut u32, chunks: &mut [Chunk], x: u32) {
    let k = key(chunks, x);
    let priority = chunks[x as usize].priority;
    // Walk down while the nodes outrank x; x goes where the first lower-priority node was.
    let mut link = Link::Root;
    let mut cur = *root;
    while cur != NIL && chunks[cur as usize].priority >= priority {
        if k < key(chunks, cur) {
            link = Link::Left(cur);
            cur = chunks[cur as usize].left;
        } else {
            link = Link::Right(cur);
            cur = chunks[cur as usize].right;
        }
    }
    // Split the subtree that was there into keys below x (x's left) and above x (x's right).
    let mut below = Link::Left(x);
    let mut above = Link::Right(x);
    while cur != NIL {
        if key(chunks, cur) < k {
            set(root, chunks, below, cur);
            below = Link::Right(cur);
            cur = chunks[cur as usize].right;
        } else {
            set(root, chunks, above, cur);
            above = Link::Left(cur);
            cur = chunks[cur as usize].left;
        }
    }
    set(root, chunks, below, NIL);
    set(root, chunks, above, NIL);
    set(root, chunks, link, x);
}

/// Takes free chunk `x` out of the tree at `root`. Returns false (and changes nothing) if `x`
/// is not in it, which would be a bug in the arena.
pub(crate) fn remove(root: &mut u32, chunks: &mut [Chunk], x: u32) -> bool {
    let k = key(chunks, x);
    let mut link = Link::Root;
    let mut cur = *root;
    while cur != x {
        if cur == NIL {
            return false;
        }
        if k < key(chunks, cur) {
            link = Link::Left(cur);
            cur = chunks[cur as usize].left;
        } else {
            link = Link::Right(cur);
            cur = chunks[cur as usize].right;
        }
    }
    // Zip x's two subtrees together by priority into x's place.
    let mut a = chunks[x as usize].left;
    let mut b = chunks[x as usize].right;
    loop {
        if a == NIL {
            set(root, chunks, link, b);
            return true;
        }
        if b == NIL {
            set(root, chunks, link, a);
            return true;
        }
        if chunks[a as usize].priority >= chunks[b as usize].priority {
            set(root, chunks, link, a);
            link = Link::Right(a);
            a = chunks[a as usize].right;
        } else {
            set(root, chunks, link, b);
            link = Link::Left(b);
            b = chunks[b as usize].left;
        }
    }
}

/// The first chunk whose key is at or above `(size, address)`, or `NIL`.
#[inline]
pub(crate) fn lower_bound(root: u32, chunks: &[Chunk], bound: (u64, u64)) -> u32 {
    let mut best = NIL;
    let mut cur = root;
    while cur != NIL {
        if key(chunks, cur) >= bound {
            best = cur;
            cur = chunks[cur as usize].left;
        } else {
            cur = chunks[cur as usize].right;
        }
    }
    best
}

/// The first chunk whose key is strictly above `(size, address)`, or `NIL`.
pub(crate) fn upper_bound(root: u32, chunks: &[Chunk], bound: (u64, u64)) -> u32 {
    let mut best = NIL;
    let mut cur = root;
    while cur != NIL {
        if key(chunks, cur) > bound {
            best = cur;
            cur = chunks[cur as usize].left;
        } else {
            cur = chunks[cur as usize].right;
        }
    }
    best
}

/// The chunk with the smallest key, or `NIL` for an empty tree.
#[inline]
pub(crate) fn first(root: u32, chunks: &[Chunk]) -> u32 {
    let mut cur = root;
    if cur == NIL {
        return NIL;
    }
    while chunks[cur as usize].left != NIL {
        cur = chunks[cur as usize].left;
    }
    cur
}

/// The chunk with the largest key, or `NIL` for an empty tree.
pub(crate) fn last(root: u32, chunks: &[Chunk]) -> u32 {
    let mut cur = root;
    if cur == NIL {
        return NIL;
    }
    while chunks[cur as usize].right != NIL {
        cur = chunks[cur as usize].right;
    }
    cur
}
