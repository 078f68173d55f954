//! The free-chunk tree: a B+tree of `(size, address)` keys with chunk slots as values, one per
//! size-class bin, all drawing nodes from one pool.
//!
//! Why a B+tree: exact best fit with the lowest-address tie-break needs, within a bin, "the
//! smallest key at or above a bound", and a bin of same-size chunks can hold thousands of them.
//! A binary tree over the chunks themselves costs a cache miss per level; here a node holds up
//! to [`CAPACITY`] keys side by side, so a descent touches a handful of nodes and never the
//! chunks. Nodes come from a pool and go back to it, so once the pool has grown to its working
//! size, inserting and removing allocate nothing.
//!
//! Leaves keep their keys unsorted: a search scans all of a leaf's keys anyway, so order buys
//! nothing there, while unsorted leaves insert by appending and remove by swapping in the last
//! key, with no shifting. Internal nodes stay sorted; they change only when nodes split or
//! merge.
//!
//! Invariants, for every internal node: `keys[i]` is at most the smallest key under child `i`,
//! and every key under child `i` is below `keys[i + 1]`. Keys of internal nodes may be lower
//! than the subtree's current minimum after removals; that keeps both invariants.

/// "No node" / "no value".
pub(crate) const NIL: u32 = u32::MAX;

/// Keys per node: 16 keys of 16 bytes are four cache lines, scanned linearly.
const CAPACITY: usize = 16;
/// A non-root node with fewer keys than this is merged with or refilled from a sibling.
const MIN_FILL: usize = CAPACITY / 4;
/// Deepest possible tree: non-root nodes hold at least `MIN_FILL` keys, so 2^32 values fit in
/// fewer than 17 levels.
const MAX_DEPTH: usize = 24;

/// A free chunk's key: size in the high half, address in the low half, so plain `u128` order is
/// best-fit order with the lowest-address tie-break.
#[inline]
pub(crate) fn key(size: u64, address: u64) -> u128 {
    (u128::from(size) << 64) | u128::from(address)
}

#[derive(Clone, Debug)]
struct Node {
    keys: [u128; CAPACITY],
    /// Leaf: chunk slots. Internal: child nodes.
    values: [u32; CAPACITY],
    len: usize,
    leaf: bool,
    /// Leaf: the next leaf in key order, or `NIL`.
    next: u32,
}

impl Node {
    /// Leaf: the index of the smallest key at or above `bound` (`strict`: above).
    #[inline]
    fn smallest_from(&self, bound: u128, strict: bool) -> Option<usize> {
        let mut best: Option<(u128, usize)> = None;
        for (i, &k) in self.keys[..self.len].iter().enumerate() {
            let fits = if strict { k > bound } else { k >= bound };
            if fits && best.is_none_or(|(b, _)| k < b) {
                best = Some((k, i));
            }
        }
        best.map(|(_, i)| i)
    }

    /// Leaf: the index of the largest key.
    fn largest(&self) -> usize {
        (0..self.len).max_by_key(|&i| self.keys[i]).unwrap_or(0)
    }

    /// Leaf: removes entry `i` by moving the last entry into its place.
    #[inline]
    fn swap_remove(&mut self, i: usize) {
        self.len -= 1;
        self.keys[i] = self.keys[self.len];
        self.values[i] = self.values[self.len];
    }

    /// Leaf: puts the entries in key order (before a split or a redistribution).
    fn sort(&mut self) {
        let mut entries = [(0u128, 0u32); CAPACITY];
        for (i, entry) in entries[..self.len].iter_mut().enumerate() {
            *entry = (self.keys[i], self.values[i]);
        }
        entries[..self.len].sort_unstable_by_key(|&(k, _)| k);
        for (i, &(k, v)) in entries[..self.len].iter().enumerate() {
            self.keys[i] = k;
            self.values[i] = v;
        }
    }

    /// Internal: the child whose range holds `k`: the last `i` with `keys[i] <= k`, or 0
    /// when `k` is below them all.
    #[inline]
    fn child_for(&self, k: u128) -> usize {
        let at_or_below = self.keys[..self.len].iter().filter(|&&x| x <= k).count();
        at_or_below.saturating_sub(1)
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

    /// Walks from `root` (not `NIL`) to the leaf whose range holds `k`, recording the path.
    #[inline]
    fn descend(&self, root: u32, k: u128, path: &mut Path) -> u32 {
        let mut n = root;
        while !self.nodes[n as usize].leaf {
            let node = &self.nodes[n as usize];
            let i = node.child_for(k);
            path.steps[path.depth] = (n, i);
            path.depth += 1;
            n = node.values[i];
        }
        n
    }

    /// Adds `k -> value` to the tree at `root`. Keys are unique (addresses are).
    pub fn insert(&mut self, root: &mut u32, k: u128, value: u32) {
        if *root == NIL {
            let leaf = self.new_node(true);
            let node = &mut self.nodes[leaf as usize];
            node.keys[0] = k;
            node.values[0] = value;
            node.len = 1;
            *root = leaf;
            return;
        }
        let mut path = Path {
            steps: [(0, 0); MAX_DEPTH],
            depth: 0,
        };
        let leaf = self.descend(*root, k, &mut path);
        // A key below everything lowers the first separator on its way down.
        for &(n, i) in &path.steps[..path.depth] {
            let node = &mut self.nodes[n as usize];
            if k < node.keys[i] {
                node.keys[i] = k;
            }
        }
        let node = &mut self.nodes[leaf as usize];
        if node.len < CAPACITY {
            node.keys[node.len] = k;
            node.values[node.len] = value;
            node.len += 1;
            return;
        }
        // Split the full leaf around its median, then add the key to its half.
        node.sort();
        let right = self.new_node(true);
        let half = CAPACITY / 2;
        let [l, r] = self.two_nodes(leaf, right);
        r.keys[..CAPACITY - half].copy_from_slice(&l.keys[half..]);
        r.values[..CAPACITY - half].copy_from_slice(&l.values[half..]);
        r.len = CAPACITY - half;
        l.len = half;
        r.next = l.next;
        l.next = right;
        let separator = r.keys[0];
        let target = if k < separator { l } else { r };
        target.keys[target.len] = k;
        target.values[target.len] = value;
        target.len += 1;
        let mut split = Some((separator, right));
        while let Some((separator, right)) = split {
            if path.depth == 0 {
                // The root split: grow the tree by one level.
                let old_root = *root;
                let low = if self.nodes[old_root as usize].leaf {
                    k.min(
                        self.nodes[old_root as usize].keys[..half]
                            .iter()
                            .copied()
                            .min()
                            .unwrap_or(k),
                    )
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
        k: u128,
        child: u32,
    ) -> Option<(u128, u32)> {
        if self.nodes[n as usize].len == CAPACITY {
            let right = self.new_node(false);
            let half = CAPACITY / 2;
            let [l, r] = self.two_nodes(n, right);
            r.keys[..CAPACITY - half].copy_from_slice(&l.keys[half..]);
            r.values[..CAPACITY - half].copy_from_slice(&l.values[half..]);
            r.len = CAPACITY - half;
            l.len = half;
            let (target, position) = if position <= half {
                (l, position)
            } else {
                (r, position - half)
            };
            insert_sorted(target, position, k, child);
            return Some((self.nodes[right as usize].keys[0], right));
        }
        insert_sorted(&mut self.nodes[n as usize], position, k, child);
        None
    }

    /// Removes key `k` from the tree at `root`. Returns false (changing nothing) if absent.
    pub fn remove(&mut self, root: &mut u32, k: u128) -> bool {
        if *root == NIL {
            return false;
        }
        let mut path = Path {
            steps: [(0, 0); MAX_DEPTH],
            depth: 0,
        };
        let leaf = self.descend(*root, k, &mut path);
        let node = &self.nodes[leaf as usize];
        let Some(i) = node.keys[..node.len].iter().position(|&x| x == k) else {
            return false;
        };
        self.remove_entry(root, path, leaf, i);
        true
    }

    /// Removes and returns the value of the smallest key at or above `bound`, or `NIL`.
    #[inline]
    pub fn take_lower_bound(&mut self, root: &mut u32, bound: u128) -> u32 {
        if *root == NIL {
            return NIL;
        }
        let mut path = Path {
            steps: [(0, 0); MAX_DEPTH],
            depth: 0,
        };
        let leaf = self.descend(*root, bound, &mut path);
        let node = &self.nodes[leaf as usize];
        if let Some(i) = node.smallest_from(bound, false) {
            let value = node.values[i];
            self.remove_entry(root, path, leaf, i);
            return value;
        }
        // Every key in this leaf is below the bound; the answer opens the next leaf.
        let next = node.next;
        if next == NIL {
            return NIL;
        }
        let next_node = &self.nodes[next as usize];
        let i = next_node.smallest_from(0, false).unwrap_or(0);
        let (k, value) = (next_node.keys[i], next_node.values[i]);
        self.remove(root, k);
        value
    }

    /// Removes entry `i` of `leaf` (reached through `path`) and restores the fill invariants.
    fn remove_entry(&mut self, root: &mut u32, mut path: Path, leaf: u32, i: usize) {
        let node = &mut self.nodes[leaf as usize];
        node.swap_remove(i);
        // Refill underfull nodes from the bottom up.
        let mut child_len = node.len;
        while path.depth > 0 && child_len < MIN_FILL {
            path.depth -= 1;
            let (parent, i) = path.steps[path.depth];
            self.rebalance(parent, i);
            child_len = self.nodes[parent as usize].len;
        }
        // Shrink the root: an internal root with one child hands over to it; an empty leaf
        // root empties the tree.
        loop {
            let node = &self.nodes[*root as usize];
            if node.leaf {
                if node.len == 0 {
                    self.vacant.push(*root);
                    *root = NIL;
                }
                return;
            }
            if node.len > 1 {
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
            return; // Only the root can have a single child; `remove_entry` collapses it.
        }
        let (left_index, right_index) = if i + 1 < p.len {
            (i, i + 1)
        } else {
            (i - 1, i)
        };
        let (left, right) = (p.values[left_index], p.values[right_index]);
        let [l, r] = self.two_nodes(left, right);
        let total = l.len + r.len;
        if total <= CAPACITY {
            l.keys[l.len..total].copy_from_slice(&r.keys[..r.len]);
            l.values[l.len..total].copy_from_slice(&r.values[..r.len]);
            l.len = total;
            if l.leaf {
                l.next = r.next;
            }
            self.vacant.push(right);
            let p = &mut self.nodes[parent as usize];
            p.keys.copy_within(right_index + 1..p.len, right_index);
            p.values.copy_within(right_index + 1..p.len, right_index);
            p.len -= 1;
            return;
        }
        if l.leaf {
            l.sort();
            r.sort();
        }
        let target_left = total / 2;
        if l.len < target_left {
            // Move the first keys of the right node to the end of the left one.
            let moved = target_left - l.len;
            l.keys[l.len..target_left].copy_from_slice(&r.keys[..moved]);
            l.values[l.len..target_left].copy_from_slice(&r.values[..moved]);
            r.keys.copy_within(moved..r.len, 0);
            r.values.copy_within(moved..r.len, 0);
            l.len = target_left;
            r.len -= moved;
        } else {
            // Move the last keys of the left node to the front of the right one.
            let moved = l.len - target_left;
            r.keys.copy_within(0..r.len, moved);
            r.values.copy_within(0..r.len, moved);
            r.keys[..moved].copy_from_slice(&l.keys[target_left..l.len]);
            r.values[..moved].copy_from_slice(&l.values[target_left..l.len]);
            l.len = target_left;
            r.len += moved;
        }
        let separator = r.keys[0];
        self.nodes[parent as usize].keys[right_index] = separator;
    }

    /// The value of the smallest key at or above `bound` (`strict`: above), or `NIL`.
    #[inline]
    fn search(&self, root: u32, bound: u128, strict: bool) -> u32 {
        if root == NIL {
            return NIL;
        }
        let mut n = root;
        while !self.nodes[n as usize].leaf {
            let node = &self.nodes[n as usize];
            n = node.values[node.child_for(bound)];
        }
        let leaf = &self.nodes[n as usize];
        if let Some(i) = leaf.smallest_from(bound, strict) {
            return leaf.values[i];
        }
        // Every key in this leaf is below the bound; the next leaf starts above it.
        match leaf.next {
            NIL => NIL,
            next => {
                let next = &self.nodes[next as usize];
                next.values[next.smallest_from(0, false).unwrap_or(0)]
            }
        }
    }

    /// The value of the smallest key at or above `bound`, or `NIL`.
    #[inline]
    pub fn lower_bound(&self, root: u32, bound: u128) -> u32 {
        self.search(root, bound, false)
    }

    /// The value of the smallest key strictly above `bound`, or `NIL`.
    pub fn upper_bound(&self, root: u32, bound: u128) -> u32 {
        self.search(root, bound, true)
    }

    /// The value of the smallest key, or `NIL` for an empty tree.
    #[inline]
    pub fn first(&self, root: u32) -> u32 {
        self.search(root, 0, false)
    }

    /// The value of the largest key, or `NIL` for an empty tree.
    pub fn last(&self, root: u32) -> u32 {
        if root == NIL {
            return NIL;
        }
        let mut n = root;
        loop {
            let node = &self.nodes[n as usize];
            if node.leaf {
                return node.values[node.largest()];
            }
            n = node.values[node.len - 1];
        }
    }
}

/// Inserts an entry at `position` of a sorted internal node with room for it.
fn insert_sorted(node: &mut Node, position: usize, k: u128, child: u32) {
    node.keys.copy_within(position..node.len, position + 1);
    node.values.copy_within(position..node.len, position + 1);
    node.keys[position] = k;
    node.values[position] = child;
    node.len += 1;
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
        let mut roots = [NIL; 3];
        let mut models = [BTreeMap::new(), BTreeMap::new(), BTreeMap::new()];
        let mut state = 0x1234_5678_9ABC_DEF1u64;
        for step in 0..60_000u32 {
            let t = (next(&mut state) % 3) as usize;
            // Few distinct keys so removals hit and trees shrink back to nothing.
            let spread = [40, 400, 4000][t];
            let k = u128::from(next(&mut state) % spread) << 60 | u128::from(step % 7);
            let coin = next(&mut state) % 4;
            if coin == 3 {
                let bound = u128::from(next(&mut state) % spread) << 60;
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
            let bound = u128::from(next(&mut state) % spread) << 60;
            let want = |r: std::ops::RangeFrom<u128>| models[t].range(r).next().map(|(_, &v)| v);
            assert_eq!(
                Some(forest.lower_bound(roots[t], bound)).filter(|&v| v != NIL),
                want(bound..)
            );
            assert_eq!(
                Some(forest.upper_bound(roots[t], bound)).filter(|&v| v != NIL),
                want(bound + 1..)
            );
            let first = models[t].values().next().copied();
            let last = models[t].values().next_back().copied();
            assert_eq!(Some(forest.first(roots[t])).filter(|&v| v != NIL), first);
            assert_eq!(Some(forest.last(roots[t])).filter(|&v| v != NIL), last);
        }
        for t in 0..3 {
            for k in models[t].keys().copied().collect::<Vec<_>>() {
                assert!(forest.remove(&mut roots[t], k));
            }
            assert_eq!(roots[t], NIL);
        }
        assert_eq!(
            forest.vacant.len(),
            forest.nodes.len(),
            "every node back in the pool"
        );
    }
}
