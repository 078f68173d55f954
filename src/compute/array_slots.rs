//! A captured step's array slots ([`crate::Capture::array_slot`]): which steps use each slot's
//! array, and the bind groups made for the arrays runs bind in its place. A run that binds
//! another array starts from the captured steps that use the slot, moves the slot's ranges
//! into the run's array and takes a bind group made once per distinct array (kept while that
//! array lives), as a CUDA graph's replay with updated kernel arguments does.

use crate::array::{Access, ArrayStorage};
use crate::step::Step;
use std::collections::HashMap;
use std::sync::{Arc, Weak};

/// One array slot of a step: the array it was made from, how the step uses that array, and
/// the steps that use it (sorted).
struct Slot {
    captured: Arc<ArrayStorage>,
    access: Option<Access>,
    steps: Vec<usize>,
}

/// A bind group made for a dispatch over the arrays a run bound to its slots: kept while
/// those arrays live (the weak references also keep their addresses, the cache's key, from
/// being reused).
struct SlotGroup {
    group: wgpu::BindGroup,
    arrays: Vec<Weak<ArrayStorage>>,
}

/// The array slots of a captured step (see the module docs).
#[derive(Default)]
pub(crate) struct ArraySlots {
    slots: Vec<Slot>,
    /// Every step some slot uses, as captured.
    captured_steps: Vec<(usize, Step)>,
    /// Bind groups by dispatch and the addresses of the arrays bound to its slots.
    groups: HashMap<(usize, Vec<usize>), SlotGroup>,
    /// Whether the steps point at arrays a run bound (else they are as captured, and a run
    /// that binds nothing has nothing to restore).
    moved: bool,
}

impl ArraySlots {
    /// The slots made from `arrays_of_slots`, over the finished `steps` of a step that uses
    /// `arrays` as they say.
    pub(crate) fn new(
        arrays_of_slots: &[Arc<ArrayStorage>],
        steps: &[Step],
        arrays: &[(Arc<ArrayStorage>, Access)],
    ) -> Self {
        let slots: Vec<Slot> = arrays_of_slots
            .iter()
            .map(|captured| {
                let (buffer, offset, size) = (
                    &captured.buffer,
                    captured.allocation.offset,
                    captured.allocation.size,
                );
                Slot {
                    captured: Arc::clone(captured),
                    access: arrays
                        .iter()
                        .find(|(s, _)| Arc::ptr_eq(s, captured))
                        .map(|(_, access)| *access),
                    steps: (0..steps.len())
                        .filter(|&i| steps[i].touches(buffer, offset, size))
                        .collect(),
                }
            })
            .collect();
        let mut used: Vec<usize> = slots.iter().flat_map(|s| s.steps.iter().copied()).collect();
        used.sort_unstable();
        used.dedup();
        Self {
            captured_steps: used.into_iter().map(|i| (i, steps[i].clone())).collect(),
            slots,
            groups: HashMap::new(),
            moved: false,
        }
    }

    /// How many slots were made from `array`: each holds it for the step.
    pub(crate) fn made_from(&self, array: &Arc<ArrayStorage>) -> usize {
        self.slots
            .iter()
            .filter(|s| Arc::ptr_eq(&s.captured, array))
            .count()
    }

    /// How the step uses slot `slot`'s array (`None`: no op uses it), and its array.
    pub(crate) fn slot(&self, slot: u32) -> Option<(Option<Access>, &Arc<ArrayStorage>)> {
        self.slots
            .get(slot as usize)
            .map(|s| (s.access, &s.captured))
    }

    /// Points the steps that use a slot at the array `bound` gives it for this run (the
    /// captured array for a slot it does not name), with a bind group made once per distinct
    /// array (`slot_of_uniform` gives a dispatch's slot of the parameter buffer). Returns the
    /// bind groups made.
    pub(crate) fn bind<'b>(
        &mut self,
        device: &wgpu::Device,
        steps: &mut [Step],
        bound: &[(u32, &Arc<ArrayStorage>)],
        slot_of_uniform: impl Fn(usize) -> Option<(&'b wgpu::Buffer, u64)>,
    ) -> u64 {
        if self.slots.is_empty() || (bound.is_empty() && !self.moved) {
            return 0;
        }
        self.moved = !bound.is_empty();
        if self.moved {
            self.groups
                .retain(|_, g| g.arrays.iter().all(|a| a.strong_count() > 0));
        }
        let array_of = |slot: usize| {
            bound
                .iter()
                .rev()
                .find(|(s, _)| *s as usize == slot)
                .map_or(&self.slots[slot].captured, |(_, array)| *array)
        };
        let mut made = 0;
        for (i, captured) in &self.captured_steps {
            let mut step = captured.clone();
            let mut key = Vec::new();
            let mut arrays = Vec::new();
            let mut moved_any = false;
            for (number, slot) in self.slots.iter().enumerate() {
                if slot.steps.binary_search(i).is_err() {
                    continue;
                }
                let array = array_of(number);
                key.push(Arc::as_ptr(array) as usize);
                arrays.push(Arc::downgrade(array));
                if Arc::ptr_eq(array, &slot.captured) {
                    continue;
                }
                moved_any = true;
                let from = &slot.captured;
                let (start, size) = (from.allocation.offset, from.allocation.size);
                step.relocate_ranges(|buffer, offset| {
                    if *buffer == from.buffer && (start..start + size).contains(offset) {
                        *offset = array.allocation.offset + (*offset - start);
                        *buffer = array.buffer.clone();
                    }
                });
            }
            let Step::Dispatch { bind_group, .. } = &mut steps[*i] else {
                // A copy or a clear: the moved step itself (it carries no per-run state).
                steps[*i] = step;
                continue;
            };
            if !moved_any {
                if let Step::Dispatch {
                    bind_group: group, ..
                } = captured
                {
                    bind_group.clone_from(group);
                }
                continue;
            }
            let key = (*i, key);
            if !self.groups.contains_key(&key) {
                step.make_bind_group(device, || slot_of_uniform(*i));
                if let Step::Dispatch {
                    bind_group: Some(group),
                    ..
                } = step
                {
                    made += 1;
                    self.groups.insert(key.clone(), SlotGroup { group, arrays });
                }
            }
            *bind_group = self.groups.get(&key).map(|g| g.group.clone());
        }
        made
    }
}
