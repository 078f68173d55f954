//! Buffer assignment: offsets for the temporaries of a captured step inside one block, by
//! liveness, as XLA's heap simulator gives a compiled program's temporaries offsets in one
//! allocation before it runs (`GlobalDecreasingSizeBestFitHeap`).
//!
//! A temporary is live from the first step that touches it to the last, inclusive. Two
//! temporaries whose live ranges share a step never share a byte; two that are never live
//! together may. Placement takes the largest first (ties: the one that starts first, then the
//! one given first), each at the best-fitting gap among the temporaries already placed that
//! overlap it in time: the smallest gap that holds it, the lowest offset among equals, the end
//! of the block when no gap does. Every offset is a multiple of the alignment.
//!
//! Pure CPU: sizes, step indices and offsets, no GPU types, tested on its own.

/// One temporary to place: its size and the steps it is live over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Temporary {
    /// Bytes (the arena's rounding is the caller's to apply).
    pub size: u64,
    /// The first step that touches it.
    pub first_step: usize,
    /// The last step that touches it (at least `first_step`).
    pub last_step: usize,
}

impl Temporary {
    /// The steps it is live over, first to last (a last step before the first is taken as
    /// live over both and the steps between).
    fn life(&self) -> (usize, usize) {
        (
            self.first_step.min(self.last_step),
            self.first_step.max(self.last_step),
        )
    }
}

/// The temporaries placed so far, found by the steps they live over in O(log n) plus what is
/// found (XLA's heap simulator keeps an interval tree for the same question), where comparing
/// each new temporary with every placed one grew with the square of the step. Steps are
/// numbered by rank among the lives' ends, so a step index of any size costs nothing.
struct PlacedByTime {
    /// Every first and last step, sorted, without repeats: a step's rank is its position.
    ends: Vec<usize>,
    /// A segment tree over the ranks (leaves from `leaves` on): each node, the placed
    /// temporaries whose life covers all of its ranks and not all of its parent's.
    covering: Vec<Vec<usize>>,
    leaves: usize,
    /// The placed temporaries by the rank of their first step.
    by_first: std::collections::BTreeMap<usize, Vec<usize>>,
}

impl PlacedByTime {
    fn new(temporaries: &[Temporary]) -> Self {
        let mut ends: Vec<usize> = temporaries
            .iter()
            .flat_map(|t| [t.life().0, t.life().1])
            .collect();
        ends.sort_unstable();
        ends.dedup();
        let leaves = ends.len().next_power_of_two().max(1);
        Self {
            ends,
            covering: vec![Vec::new(); 2 * leaves],
            leaves,
            by_first: Default::default(),
        }
    }

    fn rank(&self, step: usize) -> usize {
        self.ends.partition_point(|&end| end < step)
    }

    fn insert(&mut self, index: usize, temporary: &Temporary) {
        let (first, last) = temporary.life();
        let (first, last) = (self.rank(first), self.rank(last));
        self.by_first.entry(first).or_default().push(index);
        let (mut low, mut high) = (first + self.leaves, last + self.leaves + 1);
        while low < high {
            if low & 1 == 1 {
                self.covering[low].push(index);
                low += 1;
            }
            if high & 1 == 1 {
                high -= 1;
                self.covering[high].push(index);
            }
            low >>= 1;
            high >>= 1;
        }
    }

    /// The placed temporaries live at some step of `temporary`'s life: those live at its
    /// first step, and those that come in after it and by its last.
    fn overlapping(&self, temporary: &Temporary, found: &mut Vec<usize>) {
        let (first, last) = temporary.life();
        let (first, last) = (self.rank(first), self.rank(last));
        let mut node = first + self.leaves;
        while node >= 1 {
            found.extend_from_slice(&self.covering[node]);
            node >>= 1;
        }
        if last > first {
            for (_, starting) in self.by_first.range(first + 1..=last) {
                found.extend_from_slice(starting);
            }
        }
    }
}

/// Where every temporary lies in the block, and how the block compares with the least memory
/// any assignment could use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BufferAssignment {
    /// Each temporary's offset in the block, in the order given.
    pub offsets: Vec<u64>,
    /// The block's size: the end of the temporary that ends last.
    pub block_bytes: u64,
    /// The most bytes live at any one step (each temporary rounded up to the alignment): no
    /// assignment can use a smaller block.
    pub lower_bound_bytes: u64,
}

/// Places `temporaries` in one block at multiples of `alignment` (at least 1), best fit by
/// decreasing size (see the module docs). Sizes are rounded up to the alignment; a size whose
/// rounding or placement would pass `u64::MAX` is placed at `u64::MAX` saturated (the caller's
/// allocation of such a block fails).
pub fn assign_buffers(temporaries: &[Temporary], alignment: u64) -> BufferAssignment {
    let alignment = alignment.max(1);
    let round = |size: u64| size.div_ceil(alignment).saturating_mul(alignment);
    let mut order: Vec<usize> = (0..temporaries.len()).collect();
    order.sort_by(|&a, &b| {
        let (ta, tb) = (&temporaries[a], &temporaries[b]);
        round(tb.size)
            .cmp(&round(ta.size))
            .then(ta.life().0.cmp(&tb.life().0))
            .then(a.cmp(&b))
    });
    let mut offsets = vec![0u64; temporaries.len()];
    let mut placed = PlacedByTime::new(temporaries);
    let mut live_together = Vec::new();
    let mut block_bytes = 0u64;
    for &index in &order {
        let temporary = &temporaries[index];
        let size = round(temporary.size);
        // The byte ranges of placed temporaries live at the same time, by offset.
        live_together.clear();
        placed.overlapping(temporary, &mut live_together);
        let mut busy: Vec<(u64, u64)> = live_together
            .iter()
            .map(|&p| {
                (
                    offsets[p],
                    offsets[p].saturating_add(round(temporaries[p].size)),
                )
            })
            .collect();
        busy.sort_unstable();
        let mut best: Option<(u64, u64)> = None; // (gap size, offset)
        let mut cursor = 0u64;
        for &(start, end) in &busy {
            if start > cursor {
                let gap = start - cursor;
                if gap >= size && best.is_none_or(|(g, _)| gap < g) {
                    best = Some((gap, cursor));
                }
            }
            cursor = cursor.max(end);
        }
        let offset = best.map_or(cursor, |(_, offset)| offset);
        offsets[index] = offset;
        block_bytes = block_bytes.max(offset.saturating_add(size));
        placed.insert(index, temporary);
    }
    BufferAssignment {
        offsets,
        block_bytes,
        lower_bound_bytes: lower_bound(temporaries, alignment),
    }
}

/// An assignment cut into blocks of at most a given size, for a device whose largest buffer is
/// smaller than the whole block ([`BufferAssignment::split`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitAssignment {
    /// Each block's first byte in the assignment's block, and its size.
    pub blocks: Vec<(u64, u64)>,
    /// Each temporary's block, in the order given.
    pub block_of: Vec<usize>,
}

impl BufferAssignment {
    /// The block cut into blocks of at most `max_block_bytes` (sizes of `temporaries` rounded
    /// up to `alignment`, as placed): the temporaries by offset, a new block starting at the
    /// first one that would end past `max_block_bytes` from the current block's start. Each
    /// temporary lies whole in one block, at its offset less the block's start, so two
    /// temporaries of one block keep their places, and two of different blocks share no memory:
    /// no live pair overlaps. One block, the whole, where it fits; none without temporaries.
    /// A temporary larger than `max_block_bytes` makes its block larger than that.
    pub fn split(
        &self,
        temporaries: &[Temporary],
        alignment: u64,
        max_block_bytes: u64,
    ) -> SplitAssignment {
        let alignment = alignment.max(1);
        let end = |i: usize| {
            let size = temporaries[i]
                .size
                .div_ceil(alignment)
                .saturating_mul(alignment);
            self.offsets[i].saturating_add(size)
        };
        let mut order: Vec<usize> = (0..temporaries.len()).collect();
        order.sort_by_key(|&i| (self.offsets[i], i));
        let mut split = SplitAssignment {
            blocks: Vec::new(),
            block_of: vec![0; temporaries.len()],
        };
        for i in order {
            let fits = split
                .blocks
                .last()
                .is_some_and(|&(start, _)| end(i).saturating_sub(start) <= max_block_bytes);
            if !fits {
                split.blocks.push((self.offsets[i], 0));
            }
            let last = split.blocks.len() - 1;
            let (start, bytes) = &mut split.blocks[last];
            *bytes = (*bytes).max(end(i) - *start);
            split.block_of[i] = last;
        }
        split
    }
}

/// The most bytes live at any one step, each temporary rounded up to `alignment`.
fn lower_bound(temporaries: &[Temporary], alignment: u64) -> u64 {
    let round = |size: u64| size.div_ceil(alignment).saturating_mul(alignment);
    // A sweep over the steps: each temporary comes in at its first step and leaves after its
    // last; leaving sorts before coming in at the same step, and only a step where one comes
    // in can hold a new maximum.
    let mut events: Vec<(usize, bool, u64)> = Vec::with_capacity(2 * temporaries.len());
    for t in temporaries {
        let (first, last) = t.life();
        events.push((first, true, round(t.size)));
        // After the last step; one that ends at the last index never leaves.
        if let Some(after) = last.checked_add(1) {
            events.push((after, false, round(t.size)));
        }
    }
    events.sort_unstable();
    let (mut live, mut most) = (0u64, 0u64);
    for (_, comes_in, size) in events {
        if comes_in {
            live = live.saturating_add(size);
            most = most.max(live);
        } else {
            live = live.saturating_sub(size);
        }
    }
    most
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(size: u64, first_step: usize, last_step: usize) -> Temporary {
        Temporary {
            size,
            first_step,
            last_step,
        }
    }

    /// The assignment by its definition, comparing every temporary with every placed one and
    /// every step with every temporary: what the interval lookups and the sweep must equal.
    fn reference(temporaries: &[Temporary], alignment: u64) -> BufferAssignment {
        let alignment = alignment.max(1);
        let round = |size: u64| size.div_ceil(alignment).saturating_mul(alignment);
        let together = |a: &Temporary, b: &Temporary| {
            let ((fa, la), (fb, lb)) = (a.life(), b.life());
            fa <= lb && fb <= la
        };
        let mut order: Vec<usize> = (0..temporaries.len()).collect();
        order.sort_by(|&a, &b| {
            let (ta, tb) = (&temporaries[a], &temporaries[b]);
            round(tb.size)
                .cmp(&round(ta.size))
                .then(ta.life().0.cmp(&tb.life().0))
                .then(a.cmp(&b))
        });
        let mut offsets = vec![0u64; temporaries.len()];
        let mut placed: Vec<usize> = Vec::new();
        let mut block_bytes = 0u64;
        for &index in &order {
            let size = round(temporaries[index].size);
            let mut busy: Vec<(u64, u64)> = placed
                .iter()
                .filter(|&&p| together(&temporaries[p], &temporaries[index]))
                .map(|&p| {
                    (
                        offsets[p],
                        offsets[p].saturating_add(round(temporaries[p].size)),
                    )
                })
                .collect();
            busy.sort_unstable();
            let (mut best, mut cursor): (Option<(u64, u64)>, u64) = (None, 0);
            for &(start, end) in &busy {
                if start > cursor {
                    let gap = start - cursor;
                    if gap >= size && best.is_none_or(|(g, _)| gap < g) {
                        best = Some((gap, cursor));
                    }
                }
                cursor = cursor.max(end);
            }
            offsets[index] = best.map_or(cursor, |(_, offset)| offset);
            block_bytes = block_bytes.max(offsets[index].saturating_add(size));
            placed.push(index);
        }
        let lower_bound_bytes = temporaries
            .iter()
            .map(|t| {
                temporaries
                    .iter()
                    .filter(|o| o.life().0 <= t.life().0 && t.life().0 <= o.life().1)
                    .fold(0u64, |sum, o| sum.saturating_add(round(o.size)))
            })
            .max()
            .unwrap_or(0);
        BufferAssignment {
            offsets,
            block_bytes,
            lower_bound_bytes,
        }
    }

    proptest! {
        #[test]
        fn the_assignment_equals_its_definition(
            raw in proptest::collection::vec((0u64..5000, 0usize..40, 0usize..12), 0..64),
            alignment in prop_oneof![Just(1u64), Just(256u64), 1u64..700],
        ) {
            let temporaries: Vec<Temporary> = raw
                .iter()
                .map(|&(size, first, len)| t(size, first, first + len))
                .collect();
            prop_assert_eq!(
                assign_buffers(&temporaries, alignment),
                reference(&temporaries, alignment)
            );
        }
    }

    /// Every pair live together lies apart, every offset is aligned, the block holds them all
    /// and is at least the lower bound.
    fn check(temporaries: &[Temporary], alignment: u64, plan: &BufferAssignment) {
        let round = |s: u64| s.div_ceil(alignment) * alignment;
        for (i, a) in temporaries.iter().enumerate() {
            assert_eq!(plan.offsets[i] % alignment, 0);
            assert!(plan.offsets[i] + round(a.size) <= plan.block_bytes);
            for (j, b) in temporaries.iter().enumerate().skip(i + 1) {
                let ((fa, la), (fb, lb)) = (a.life(), b.life());
                if fa <= lb && fb <= la && a.size > 0 && b.size > 0 {
                    let (a0, a1) = (plan.offsets[i], plan.offsets[i] + round(a.size));
                    let (b0, b1) = (plan.offsets[j], plan.offsets[j] + round(b.size));
                    assert!(a1 <= b0 || b1 <= a0, "{i} and {j} overlap: {plan:?}");
                }
            }
        }
        assert!(plan.block_bytes >= plan.lower_bound_bytes);
    }

    #[test]
    fn temporaries_never_live_together_share_one_offset() {
        let temporaries = [t(1024, 0, 1), t(1024, 2, 3), t(1024, 4, 5)];
        let plan = assign_buffers(&temporaries, 256);
        assert_eq!(plan.offsets, [0, 0, 0]);
        assert_eq!(plan.block_bytes, 1024);
        assert_eq!(plan.lower_bound_bytes, 1024);
    }

    #[test]
    fn of_equal_sizes_the_one_whose_life_starts_first_is_placed_first_a_reversed_life_included() {
        // The second is given as steps 5 back to 0: live from 0, before the first's 2.
        let temporaries = [t(512, 2, 3), t(512, 5, 0)];
        let plan = assign_buffers(&temporaries, 256);
        assert_eq!(plan.offsets, [512, 0]);
        assert_eq!(plan, reference(&temporaries, 256));
    }

    #[test]
    fn temporaries_live_together_lie_side_by_side_largest_first() {
        let temporaries = [t(256, 0, 2), t(1024, 1, 2)];
        let plan = assign_buffers(&temporaries, 256);
        assert_eq!(plan.offsets, [1024, 0]);
        assert_eq!(plan.block_bytes, 1280);
        assert_eq!(plan.lower_bound_bytes, 1280);
    }

    #[test]
    fn a_small_temporary_takes_the_best_fitting_gap() {
        // 0 and 2 are long-lived with a 512-byte hole between them once 1 has died; 3 is
        // live only after 1: it takes the hole, not a new end.
        let temporaries = [t(1024, 0, 9), t(512, 0, 1), t(2048, 0, 9), t(512, 5, 9)];
        let plan = assign_buffers(&temporaries, 256);
        check(&temporaries, 256, &plan);
        assert_eq!(plan.block_bytes, 1024 + 512 + 2048);
        assert_eq!(plan.offsets[3], plan.offsets[1]);
    }

    #[test]
    fn sizes_are_rounded_to_the_alignment() {
        let temporaries = [t(1, 0, 0), t(300, 0, 0)];
        let plan = assign_buffers(&temporaries, 256);
        check(&temporaries, 256, &plan);
        assert_eq!(plan.block_bytes, 256 + 512);
        assert_eq!(plan.lower_bound_bytes, 768);
    }

    #[test]
    fn no_temporaries_need_no_block() {
        let plan = assign_buffers(&[], 256);
        assert_eq!(plan.block_bytes, 0);
        assert_eq!(plan.lower_bound_bytes, 0);
        assert!(plan.offsets.is_empty());
    }

    #[test]
    fn huge_sizes_saturate_rather_than_wrap() {
        let temporaries = [t(u64::MAX - 3, 0, 1), t(u64::MAX / 2, 0, 1)];
        let plan = assign_buffers(&temporaries, 256);
        assert_eq!(plan.block_bytes, u64::MAX);
        assert_eq!(plan.lower_bound_bytes, u64::MAX);
    }

    proptest! {
        #[test]
        fn random_temporaries_never_overlap_while_live(
            raw in proptest::collection::vec((1u64..5000, 0usize..20, 0usize..8), 0..24),
            alignment in prop_oneof![Just(1u64), Just(16), Just(256)],
        ) {
            let temporaries: Vec<Temporary> =
                raw.iter().map(|&(size, first, len)| t(size, first, first + len)).collect();
            let plan = assign_buffers(&temporaries, alignment);
            check(&temporaries, alignment, &plan);
            // Never worse than laying every temporary end to end.
            let total: u64 = temporaries.iter().map(|t| t.size.div_ceil(alignment) * alignment).sum();
            prop_assert!(plan.block_bytes <= total);
        }
    }
}
