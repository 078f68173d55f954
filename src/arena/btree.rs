//! The free-chunk tree: an ordered set of `u64` keys with chunk slots as values, one per
//! size-class bin. The bins encode `(size, address)` into the key so that key order is best-fit
//! order (see `bins.rs`).
//!
//! Exact best fit with the lowest-address tie-break needs, within a bin, "the smallest key at
//! or above a bound". How the set is stored follows how bins are used:
//!
//! * Most bins hold a few chunks. A tree of up to [`INLINE`] keys lives in its handle, one
//!   cache line, so touching such a bin costs one line and no pointer chase.
//! * A bin of same-size chunks can hold thousands. Beyond `INLINE` keys the tree is a B+tree
//!   whose nodes hold up to [`CAPACITY`] keys side by side, drawn from one pool shared by all
//!   bins: a descent touches a handful of nodes and never the chunks, and once the pool has grown
//!   to its working size, inserting and removing allocate nothing. (A binary tree threaded
//!   through the chunks was the first design; it cost a cache miss per level.)
//!
//! Leaves (and inline handles) keep their keys in descending order, so the smallest key (what
//! best fit takes) is the last entry and taking it shifts nothing; the handle also remembers the
//! leftmost leaf, so that take is O(1). Internal nodes keep keys in ascending order. Searches
//! within a node compare in two rounds of independent compares with no data-dependent branch.
//! Splits and merges are rare, so only they record the path from the root (by descending a
//! second time).
//!
//! Invariants, for every internal node: `keys[i]` is at most the smallest key under child `i`,
//! and every key under child `i` is below `keys[i + 1]`. Keys of internal nodes may be lower
//! than the subtree's current minimum after removals; that keeps both invariants. Every node but
//! the root holds at least [`MIN_FILL`] keys.

/// "No node" / "no value".
pub(crate) const NIL: u32 = u32::MAX;

/// Keys per node: 16 keys of 8 bytes are two cache lines. (8 and 64 were measured: 8 makes
/// large bins deeper, 64 makes every insert shift more.)
const CAPACITY: usize = 16;
/// A non-root node with fewer keys than this is merged with or refilled from a sibling.
const MIN_FILL: usize = CAPACITY / 4;
/// Deepest possible tree: non-root nodes hold at least `MIN_FILL` keys, so 2^32 values fit in
/// fewer than 17 levels.
const MAX_DEPTH: usize = 24;

/// The order of free chunks within a bin (see `bins::key`).
pub(crate) type Key = u64;

/// A node of a tree too large for its handle, aligned to a cache line.
#[derive(Clone, Debug)]
#[repr(C, align(64))]
struct Node {
    len: usize,
    leaf: bool,
    /// Leaf: the next leaf in key order, or `NIL`.
    next: u32,
    /// Leaf: chunk slots. Internal: child nodes.
    values: [u32; CAPACITY],
    keys: [Key; CAPACITY],
}

/// `a` if `condition` else `b`, by masking, so the compiler cannot turn it into a branch.
#[inline(always)]
fn pick(condition: bool, a: u64, b: u64) -> u64 {
    let mask = u64::from(condition).wrapping_neg();
    (a & mask) | (b & !mask)
}

/// Keys compared together in each round of [`partition`].
const GROUP: usize = 4;

/// How many of the first `len` keys satisfy `pred`, where those that do come first
/// (a partition point). A four-way search in two rounds: first the last key of each group of
/// four, then the keys of the one group where the answer lies. The compares within a round are
/// independent, so they overlap, where a binary search waits on each load in turn; and no
/// branch depends on the data, so nothing mispredicts.
#[inline(always)]
fn partition(keys: &[Key; CAPACITY], len: usize, pred: impl Fn(Key) -> bool) -> usize {
    let mut groups = 0;
    for last in (GROUP - 1..CAPACITY).step_by(GROUP) {
        groups += usize::from((last < len) & pred(keys[last]));
    }
    let base = groups * GROUP;
    let mut count = base;
    for i in base..base + GROUP - 1 {
        count += usize::from((i < len) & pred(keys[i.min(CAPACITY - 1)]));
    }
    count
}

impl Node {
    /// Internal: the child whose range holds `k`: the last `i` with `keys[i] <= k`, or 0
    /// when `k` is below them all.
    #[inline]
    fn child_for(&self, k: Key) -> usize {
        partition(&self.keys, self.len, |x| x <= k).saturating_sub(1)
    }

    /// Leaf: how many keys are at or above `bound` (`strict`: above); they come first.
    #[inline]
    fn count_from(&self, bound: Key, strict: bool) -> usize {
        if strict {
            partition(&self.keys, self.len, |x| x > bound)
        } else {
            partition(&self.keys, self.len, |x| x >= bound)
        }
    }

    /// Inserts an entry at `i`, shifting the later ones up. The node has room.
    #[inline]
    fn insert_at(&mut self, i: usize, k: Key, value: u32) {
        if i < self.len {
            self.keys.copy_within(i..self.len, i + 1);
            self.values.copy_within(i..self.len, i + 1);
        }
        self.keys[i] = k;
        self.values[i] = value;
        self.len += 1;
    }
    /// Removes entry `i`, shifting the later ones down.
    #[inline]
    fn remove_at(&mut self, i: usize) {
        if i + 1 < self.len {
            self.keys.copy_within(i + 1..self.len, i);
            self.values.copy_within(i + 1..self.len, i);
        }
        self.len -= 1;
    }
    /// Leaf: the value of the smallest key.
    #[inline]
    fn min_value(&self) -> u32 {
        self.values[self.len - 1]
    }
}

/// Keys a tree keeps in its handle before it needs pool nodes. Most bins hold a few chunks;
/// with four inline, such a bin costs one cache line (its handle) per operation.
const INLINE: usize = 4;
/// A tree in nodes whose root leaf shrinks to this many keys moves back into its handle (below
/// `INLINE`, so a bin hovering at the boundary does not flip on every operation).
const DEMOTE_AT: usize = INLINE / 2;
/// `Tree::inline` of a tree that lives in pool nodes.
const IN_NODES: u32 = u32::MAX;

/// One tree of the forest, one cache line: up to [`INLINE`] keys held in the handle itself
/// (descending, like a leaf; unused slots hold 0), or the root and leftmost leaf of a tree of
/// pool nodes.
///
/// The leftmost leaf holds the smallest keys, which is where best fit takes from. It only
/// changes when the tree is created or emptied: a split keeps the smaller half in place and a
/// merge folds a right neighbour into its left one, so remembering it makes taking the
/// minimum O(1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, align(64))]
pub(crate) struct Tree {
    /// Keys held inline, or [`IN_NODES`].
    inline: u32,
    root: u32,
    first_leaf: u32,
    values: [u32; INLINE],
    keys: [Key; INLINE],
}

impl Tree {
    /// A tree with no keys.
    pub const EMPTY: Tree = Tree {
        inline: 0,
        root: NIL,
        first_leaf: NIL,
        values: [NIL; INLINE],
        keys: [0; INLINE],
    };

    /// True when the tree holds no key.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.inline == 0
    }

    /// True when the keys live in pool nodes rather than in the handle.
    #[inline]
    fn in_nodes(&self) -> bool {
        self.inline == IN_NODES
    }

    /// Inline: how many keys are at or above `bound` (`strict`: above); they come first.
    ///
    /// Unused slots hold 0, which never counts in a strict compare, so no slot needs masking;
    /// "at or above `b`" is "above `b − 1`", and every key is at or above 0.
    #[inline]
    fn count_from(&self, bound: Key, strict: bool) -> usize {
        let above = if strict { bound } else { bound.wrapping_sub(1) };
        let mut count = 0;
        for &k in &self.keys {
            count += usize::from(k > above);
        }
        // With a bound of 0, `above` wrapped to the maximum and nothing counted: all count.
        count + usize::from(!strict & (bound == 0)) * self.inline as usize
    }

    /// Inline: inserts at `i` (there is room).
    #[inline]
    fn insert_at(&mut self, i: usize, k: Key, value: u32) {
        // Four entries: a fixed shift with masks (no branch, no `memmove` call).
        let (keys, values) = (self.keys, self.values);
        for j in 1..INLINE {
            let shifted = j > i;
            self.keys[j] = pick(shifted, keys[j - 1], keys[j]);
            self.values[j] = pick(shifted, values[j - 1].into(), values[j].into()) as u32;
        }
        self.keys[i] = k;
        self.values[i] = value;
        self.inline += 1;
    }

    /// Inline: removes entry `i` and returns its value.
    #[inline]
    fn remove_at(&mut self, i: usize) -> u32 {
        let value = self.values[i];
        let (keys, values) = (self.keys, self.values);
        for j in 0..INLINE - 1 {
            let shifted = j >= i;
            self.keys[j] = pick(shifted, keys[j + 1], keys[j]);
            self.values[j] = pick(shifted, values[j + 1].into(), values[j].into()) as u32;
        }
        // At most INLINE − 1 keys remain: the last slot is unused, so it holds the sentinel.
        self.keys[INLINE - 1] = 0;
        self.inline -= 1;
        value
    }
}

/// The path from the root to a leaf: `(node, child index taken)` per internal level.
struct Path {
    steps: [(u32, usize); MAX_DEPTH],
    depth: usize,
}

/// The node pool shared by every bin's tree. A tree is named by its root (`NIL` when empty).
#[derive(Debug, Default)]
pub(crate) struct Forest {
    nodes: Vec<Node>,
    vacant: Vec<u32>,
}

impl Forest {
    pub fn new() -> Forest {
        Forest::default()
    }

    /// Forgets every tree, keeping the pool's memory.
    pub fn clear(&mut self) {
        self.vacant.clear();
        self.vacant.extend((0..self.nodes.len() as u32).rev());
    }

    fn new_node(&mut self, leaf: bool) -> u32 {
        if let Some(index) = self.vacant.pop() {
            let node = &mut self.nodes[index as usize];
            node.len = 0;
            node.leaf = leaf;
            node.next = NIL;
            return index;
        }
        self.nodes.push(Node {
            keys: [0; CAPACITY],
            values: [NIL; CAPACITY],
            len: 0,
            leaf,
            next: NIL,
        });
        (self.nodes.len() - 1) as u32
    }

    fn two_nodes(&mut self, a: u32, b: u32) -> [&mut Node; 2] {
        self.nodes
            .get_disjoint_mut([a as usize, b as usize])
            .expect("two distinct pool nodes")
    }

    /// The leaf of the tree at `root` (not `NIL`) whose range holds `k`.
    #[inline]
    fn leaf_for(&self, root: u32, k: Key) -> u32 {
        let mut n = root;
        loop {
            let node = &self.nodes[n as usize];
            if node.leaf {
                return n;
            }
            n = node.values[node.child_for(k)];
        }
    }

    /// Like `leaf_for`, recording the path (for the rare splits and merges).
    fn path_to(&self, root: u32, k: Key) -> (Path, u32) {
        let mut path = Path {
            steps: [(0, 0); MAX_DEPTH],
            depth: 0,
        };
        let mut n = root;
        while !self.nodes[n as usize].leaf {
            let i = self.nodes[n as usize].child_for(k);
            path.steps[path.depth] = (n, i);
            path.depth += 1;
            n = self.nodes[n as usize].values[i];
        }
        (path, n)
    }

    /// Adds `k -> value` to the tree at `root`. Keys are unique (addresses are).
    pub fn insert(&mut self, tree: &mut Tree, k: Key, value: u32) {
        if !tree.in_nodes() {
            let len = tree.inline as usize;
            if len < INLINE {
                let i = tree.count_from(k, true);
                tree.insert_at(i, k, value);
                return;
            }
            // One key too many for the handle: move them all into a leaf.
            let leaf = self.new_node(true);
            let node = &mut self.nodes[leaf as usize];
            node.keys[..INLINE].copy_from_slice(&tree.keys);
            node.values[..INLINE].copy_from_slice(&tree.values);
            node.len = INLINE;
            let i = node.count_from(k, true);
            node.insert_at(i, k, value);
            *tree = Tree {
                inline: IN_NODES,
                root: leaf,
                first_leaf: leaf,
                ..Tree::EMPTY
            };
            return;
        }
        let mut n = tree.root;
        loop {
            let node = &mut self.nodes[n as usize];
            if node.leaf {
                break;
            }
            let i = node.child_for(k);
            // A key below everything lowers the first separator on its way down.
            if k < node.keys[i] {
                node.keys[i] = k;
            }
            n = node.values[i];
        }
        let node = &mut self.nodes[n as usize];
        if node.len < CAPACITY {
            let i = node.count_from(k, true);
            node.insert_at(i, k, value);
            return;
        }
        self.insert_splitting(&mut tree.root, k, value);
    }

    /// Insert into a full leaf: split it, and its ancestors as far as needed.
    fn insert_splitting(&mut self, root: &mut u32, k: Key, value: u32) {
        let (mut path, leaf) = self.path_to(*root, k);
        // The right node takes the larger half: the first half of the descending leaf.
        let right = self.new_node(true);
        let half = CAPACITY / 2;
        let [l, r] = self.two_nodes(leaf, right);
        r.keys[..half].copy_from_slice(&l.keys[..half]);
        r.values[..half].copy_from_slice(&l.values[..half]);
        r.len = half;
        l.keys.copy_within(half.., 0);
        l.values.copy_within(half.., 0);
        l.len = CAPACITY - half;
        r.next = l.next;
        l.next = right;
        let separator = r.keys[half - 1];
        // The smallest key of the left half once `k` is in (for a new root).
        let low = l.keys[l.len - 1].min(k);
        let target = if k > separator { r } else { l };
        let i = target.count_from(k, true);
        target.insert_at(i, k, value);

        let mut split = Some((separator, right));
        while let Some((separator, right)) = split {
            if path.depth == 0 {
                // The root split: grow the tree by one level.
                let old_root = *root;
                let low = if self.nodes[old_root as usize].leaf {
                    low
                } else {
                    self.nodes[old_root as usize].keys[0]
                };
                let new_root = self.new_node(false);
                let node = &mut self.nodes[new_root as usize];
                node.keys[0] = low;
                node.values[0] = old_root;
                node.keys[1] = separator;
                node.values[1] = right;
                node.len = 2;
                *root = new_root;
                return;
            }
            path.depth -= 1;
            let (parent, i) = path.steps[path.depth];
            split = self.insert_internal(parent, i + 1, separator, right);
        }
    }

    /// Inserts a child entry at `position` of internal node `n`, splitting it when full.
    /// Returns the new right node and its first key when it split.
    fn insert_internal(
        &mut self,
        n: u32,
        position: usize,
        k: Key,
        child: u32,
    ) -> Option<(Key, u32)> {
        if self.nodes[n as usize].len < CAPACITY {
            self.nodes[n as usize].insert_at(position, k, child);
            return None;
        }
        let right = self.new_node(false);
        let half = CAPACITY / 2;
        let [l, r] = self.two_nodes(n, right);
        r.keys[..CAPACITY - half].copy_from_slice(&l.keys[half..]);
        r.values[..CAPACITY - half].copy_from_slice(&l.values[half..]);
        r.len = CAPACITY - half;
        l.len = half;
        if position <= half {
            l.insert_at(position, k, child);
        } else {
            r.insert_at(position - half, k, child);
        }
        Some((r.keys[0], right))
    }

    /// Removes key `k` from the tree at `root`. Returns false (changing nothing) if absent.
    pub fn remove(&mut self, tree: &mut Tree, k: Key) -> bool {
        if !tree.in_nodes() {
            let i = tree.count_from(k, true);
            if i >= tree.inline as usize || tree.keys[i] != k {
                return false;
            }
            tree.remove_at(i);
            return true;
        }
        let leaf = self.leaf_for(tree.root, k);
        let node = &mut self.nodes[leaf as usize];
        let i = node.count_from(k, true);
        if i >= node.len || node.keys[i] != k {
            return false;
        }
        node.remove_at(i);
        self.after_removal(tree, leaf, k);
        true
    }

    /// Removes and returns the value of the smallest key at or above `bound`, or `NIL`.
    #[inline]
    pub fn take_lower_bound(&mut self, tree: &mut Tree, bound: Key) -> u32 {
        if !tree.in_nodes() {
            let count = tree.count_from(bound, false);
            if count == 0 {
                return NIL;
            }
            return tree.remove_at(count - 1);
        }
        // Usually the smallest key of all is at or above the bound (always in an exact-size
        // bin or a bin above the request's): take it from the leftmost leaf without a search.
        let first = &mut self.nodes[tree.first_leaf as usize];
        let k = first.keys[first.len - 1];
        if k >= bound {
            let value = first.min_value();
            first.len -= 1;
            let leaf = tree.first_leaf;
            self.after_removal(tree, leaf, k);
            return value;
        }
        let leaf = self.leaf_for(tree.root, bound);
        let node = &mut self.nodes[leaf as usize];
        let count = node.count_from(bound, false);
        if count > 0 {
            let i = count - 1;
            let (k, value) = (node.keys[i], node.values[i]);
            node.remove_at(i);
            self.after_removal(tree, leaf, k);
            return value;
        }
        // Every key in this leaf is below the bound; the answer is the next leaf's smallest.
        let next = node.next;
        if next == NIL {
            return NIL;
        }
        let next = &self.nodes[next as usize];
        let (k, value) = (next.keys[next.len - 1], next.min_value());
        self.remove(tree, k);
        value
    }

    /// Restores the invariants after removing `k` from `leaf`: refills or merges underfull
    /// nodes and shrinks the root.
    #[inline]
    fn after_removal(&mut self, tree: &mut Tree, leaf: u32, k: Key) {
        let node = &self.nodes[leaf as usize];
        let len = node.len;
        if leaf == tree.root {
            // A root leaf down to a few keys moves them back into the handle.
            if len <= DEMOTE_AT {
                let mut inline = Tree::EMPTY;
                inline.keys[..len].copy_from_slice(&node.keys[..len]);
                inline.values[..len].copy_from_slice(&node.values[..len]);
                inline.inline = len as u32;
                *tree = inline;
                self.vacant.push(leaf);
            }
            return;
        }
        if len < MIN_FILL {
            self.refill(&mut tree.root, k);
        }
    }

    /// The leaf holding `k`'s range is underfull: rebalance from the bottom up, then let an
    /// internal root with a single child hand over to it.
    fn refill(&mut self, root: &mut u32, k: Key) {
        let (mut path, leaf) = self.path_to(*root, k);
        let mut child_len = self.nodes[leaf as usize].len;
        while path.depth > 0 && child_len < MIN_FILL {
            path.depth -= 1;
            let (parent, i) = path.steps[path.depth];
            self.rebalance(parent, i);
            child_len = self.nodes[parent as usize].len;
        }
        loop {
            let node = &self.nodes[*root as usize];
            if node.leaf || node.len > 1 {
                return;
            }
            let only_child = node.values[0];
            self.vacant.push(*root);
            *root = only_child;
        }
    }

    /// Child `i` of `parent` is underfull: merge it with a neighbour when both fit in one
    /// node, otherwise share the keys of both evenly.
    fn rebalance(&mut self, parent: u32, i: usize) {
        let p = &self.nodes[parent as usize];
        if p.len < 2 {
            return; // Only the root can have a single child; `refill` collapses it.
        }
        let (left_index, right_index) = if i + 1 < p.len {
            (i, i + 1)
        } else {
            (i - 1, i)
        };
        let (left, right) = (p.values[left_index], p.values[right_index]);
        let [l, r] = self.two_nodes(left, right);
        let total = l.len + r.len;
        // In key order the right node's keys come after the left's. Leaves list keys in
        // descending order, so there the combined sequence is right then left.
        let (first, second) = if l.leaf { (&*r, &*l) } else { (&*l, &*r) };
        let mut keys = [0 as Key; 2 * CAPACITY];
        let mut values = [NIL; 2 * CAPACITY];
        keys[..first.len].copy_from_slice(&first.keys[..first.len]);
        keys[first.len..total].copy_from_slice(&second.keys[..second.len]);
        values[..first.len].copy_from_slice(&first.values[..first.len]);
        values[first.len..total].copy_from_slice(&second.values[..second.len]);
        if total <= CAPACITY {
            // Merge into the left node; the right one goes back to the pool.
            l.keys[..total].copy_from_slice(&keys[..total]);
            l.values[..total].copy_from_slice(&values[..total]);
            l.len = total;
            if l.leaf {
                l.next = r.next;
            }
            self.vacant.push(right);
            self.nodes[parent as usize].remove_at(right_index);
            return;
        }
        // Share evenly: the left node takes the smaller half.
        let left_len = total / 2;
        let right_len = total - left_len;
        let separator = if l.leaf {
            r.keys[..right_len].copy_from_slice(&keys[..right_len]);
            r.values[..right_len].copy_from_slice(&values[..right_len]);
            l.keys[..left_len].copy_from_slice(&keys[right_len..total]);
            l.values[..left_len].copy_from_slice(&values[right_len..total]);
            keys[right_len - 1]
        } else {
            l.keys[..left_len].copy_from_slice(&keys[..left_len]);
            l.values[..left_len].copy_from_slice(&values[..left_len]);
            r.keys[..right_len].copy_from_slice(&keys[left_len..total]);
            r.values[..right_len].copy_from_slice(&values[left_len..total]);
            keys[left_len]
        };
        l.len = left_len;
        r.len = right_len;
        self.nodes[parent as usize].keys[right_index] = separator;
    }

    /// The value of the smallest key at or above `bound` (`strict`: above), or `NIL`.
    #[inline]
    fn search(&self, tree: &Tree, bound: Key, strict: bool) -> u32 {
        if !tree.in_nodes() {
            return match tree.count_from(bound, strict) {
                0 => NIL,
                count => tree.values[count - 1],
            };
        }
        let leaf = &self.nodes[self.leaf_for(tree.root, bound) as usize];
        let count = leaf.count_from(bound, strict);
        if count > 0 {
            return leaf.values[count - 1];
        }
        // Every key in this leaf is below the bound; the next leaf starts above it.
        match leaf.next {
            NIL => NIL,
            next => self.nodes[next as usize].min_value(),
        }
    }

    /// The value of the smallest key at or above `bound`, or `NIL`.
    #[inline]
    pub fn lower_bound(&self, tree: &Tree, bound: Key) -> u32 {
        self.search(tree, bound, false)
    }

    /// The value of the smallest key strictly above `bound`, or `NIL`.
    pub fn upper_bound(&self, tree: &Tree, bound: Key) -> u32 {
        self.search(tree, bound, true)
    }

    /// The value of the smallest key, or `NIL` for an empty tree.
    #[inline]
    pub fn first(&self, tree: &Tree) -> u32 {
        if !tree.in_nodes() {
            return match tree.inline {
                0 => NIL,
                len => tree.values[len as usize - 1],
            };
        }
        self.nodes[tree.first_leaf as usize].min_value()
    }

    /// The value of the largest key, or `NIL` for an empty tree.
    pub fn last(&self, tree: &Tree) -> u32 {
        if !tree.in_nodes() {
            return match tree.inline {
                0 => NIL,
                _ => tree.values[0],
            };
        }
        let mut n = tree.root;
        loop {
            let node = &self.nodes[n as usize];
            if node.leaf {
                return node.values[0];
            }
            n = node.values[node.len - 1];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A small deterministic generator for the test.
    fn next(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    #[test]
    fn tree_answers_like_a_btreemap_under_random_inserts_and_removes() {
        let mut forest = Forest::new();
        let mut roots = [Tree::EMPTY; 3];
        let mut models = [BTreeMap::new(), BTreeMap::new(), BTreeMap::new()];
        let mut state = 0x1234_5678_9ABC_DEF1u64;
        for step in 0..60_000u32 {
            let t = (next(&mut state) % 3) as usize;
            // Few distinct keys so removals hit and trees shrink back to nothing.
            let spread = [40, 400, 4000][t];
            let k = (next(&mut state) % spread) << 8 | u64::from(step % 7);
            let coin = next(&mut state) % 4;
            if coin == 3 {
                let bound = (next(&mut state) % spread) << 8;
                let want = models[t].range(bound..).next().map(|(&k, &v)| (k, v));
                let got = forest.take_lower_bound(&mut roots[t], bound);
                assert_eq!(Some(got).filter(|&v| v != NIL), want.map(|(_, v)| v));
                if let Some((k, _)) = want {
                    models[t].remove(&k);
                }
            } else if coin < 2 && !models[t].contains_key(&k) {
                forest.insert(&mut roots[t], k, step);
                models[t].insert(k, step);
            } else {
                let present = models[t].remove(&k).is_some();
                assert_eq!(forest.remove(&mut roots[t], k), present);
            }
            let bound = (next(&mut state) % spread) << 8;
            let want = |r: std::ops::RangeFrom<Key>| models[t].range(r).next().map(|(_, &v)| v);
            assert_eq!(
                Some(forest.lower_bound(&roots[t], bound)).filter(|&v| v != NIL),
                want(bound..)
            );
            assert_eq!(
                Some(forest.upper_bound(&roots[t], bound)).filter(|&v| v != NIL),
                want(bound + 1..)
            );
            let first = models[t].values().next().copied();
            let last = models[t].values().next_back().copied();
            assert_eq!(Some(forest.first(&roots[t])).filter(|&v| v != NIL), first);
            assert_eq!(Some(forest.last(&roots[t])).filter(|&v| v != NIL), last);
        }
        for t in 0..3 {
            for k in models[t].keys().copied().collect::<Vec<_>>() {
                assert!(forest.remove(&mut roots[t], k));
            }
            assert!(roots[t].is_empty());
        }
        assert_eq!(
            forest.vacant.len(),
            forest.nodes.len(),
            "every node back in the pool"
        );
    }
}
