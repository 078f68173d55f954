//! A captured step's temporaries found by buffer and offset: which steps touch each one (its
//! life, for the buffer assignment) and the move of every range of a temporary into the block
//! the assignment lays them out in. Both are one pass over the steps with a logarithmic lookup
//! per range, where comparing every temporary with every step grew with the square of the step
//! (26 s to finish a capture of 50,000 launches).

// A `wgpu::Buffer` hashes and compares by its id, which never changes: clippy's
// `mutable_key_type` sees the interior mutability of wgpu's handle, not of the key.
#![allow(clippy::mutable_key_type)]

use crate::step::Step;
use std::collections::{BTreeMap, HashMap};

/// The temporaries by the region buffer they lie in, each by its start offset: its size and
/// its number (its position in the list the index was made from). Arena allocations never
/// overlap, so the temporary that holds a byte is the last one starting at or before it.
pub(crate) struct TemporaryIndex {
    by_buffer: HashMap<wgpu::Buffer, BTreeMap<u64, (u64, usize)>>,
}

impl TemporaryIndex {
    /// The index of `temporaries` (buffer, offset, size), numbered in order.
    pub(crate) fn new<'a>(temporaries: impl Iterator<Item = (&'a wgpu::Buffer, u64, u64)>) -> Self {
        let mut by_buffer: HashMap<wgpu::Buffer, BTreeMap<u64, (u64, usize)>> = HashMap::new();
        for (number, (buffer, offset, size)) in temporaries.enumerate() {
            by_buffer
                .entry(buffer.clone())
                .or_default()
                .insert(offset, (size, number));
        }
        Self { by_buffer }
    }

    /// The temporaries with a byte in `offset..offset + size` of `buffer`, by number.
    pub(crate) fn overlapping(
        &self,
        buffer: &wgpu::Buffer,
        offset: u64,
        size: u64,
        mut found: impl FnMut(usize),
    ) {
        let Some(starts) = self.by_buffer.get(buffer) else {
            return;
        };
        let end = offset.saturating_add(size);
        for (&start, &(length, number)) in starts.range(..end).rev() {
            if start.saturating_add(length) <= offset {
                break;
            }
            found(number);
        }
    }

    /// The first and last step that reads or writes each temporary, by number (`None` for one
    /// that no step touches).
    pub(crate) fn lives(&self, steps: &[Step], count: usize) -> Vec<Option<(usize, usize)>> {
        let mut lives: Vec<Option<(usize, usize)>> = vec![None; count];
        for (i, step) in steps.iter().enumerate() {
            step.for_each_range(|buffer, offset, size| {
                self.overlapping(buffer, offset, size, |number| {
                    let life = lives[number].get_or_insert((i, i));
                    life.1 = i;
                });
            });
        }
        lives
    }

    /// Moves every range that starts in a temporary to its place: a temporary numbered `n`
    /// starts at `place(n)`, a buffer and an offset in it (`None`: it stays where it is).
    pub(crate) fn relocate<'b>(
        &self,
        steps: &mut [Step],
        place: impl Fn(usize) -> Option<(&'b wgpu::Buffer, u64)>,
    ) {
        for step in steps {
            step.relocate_ranges(|buffer, offset| {
                let Some(starts) = self.by_buffer.get(buffer) else {
                    return;
                };
                let Some((&start, &(size, number))) = starts.range(..=*offset).next_back() else {
                    return;
                };
                if *offset >= start + size {
                    return;
                }
                if let Some((block, at)) = place(number) {
                    *offset = at + (*offset - start);
                    *buffer = block.clone();
                }
            });
        }
    }
}
