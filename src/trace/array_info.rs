//! What the arena does not know about an allocation: the element type, the shape, the birth
//! time and the allocation site of the array that holds it, kept beside the arena for
//! snapshots.
//!
//! The site is the user's line that made the array, as `#[track_caller]` hands it down through
//! every public call that creates one (`alloc`, `zeros`, `device_put`, ops, sequences, upload
//! batches): a `&'static Location` the compiler places in the binary, so recording it costs a
//! pointer copy, where PyTorch's `_record_memory_history` walks a stack per allocation.

use crate::arena::AllocationId;
use crate::shape::MAX_RANK;
use std::panic::Location;

/// The element type, shape, birth time and allocation site of one live array. Fixed-size, so recording it
/// allocates nothing beyond the table's own growth.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ArrayInfo {
    /// `std::any::type_name` of the element type (`f32`, `u32`, `my_crate::Particle`).
    pub dtype: &'static str,
    pub(super) rank: u8,
    pub(super) dims: [usize; MAX_RANK],
    /// When the array was allocated, in ns on the timeline's clock; `None` with the timeline
    /// off (a clock read per array would cost as much as the rest of the bookkeeping).
    pub born_ns: Option<u64>,
    /// The user's call that made the array (`src/main.rs:12:5`).
    pub site: &'static Location<'static>,
}

impl ArrayInfo {
    /// The info of a new `T` array of `shape` (rank at most [`MAX_RANK`]; longer shapes are
    /// cut, which cannot happen for shapes that passed `check_shape`) made at `site`, not
    /// dated yet.
    pub fn new<T>(shape: &[usize], site: &'static Location<'static>) -> ArrayInfo {
        let rank = shape.len().min(MAX_RANK);
        let mut dims = [0; MAX_RANK];
        dims[..rank].copy_from_slice(&shape[..rank]);
        ArrayInfo {
            dtype: std::any::type_name::<T>(),
            rank: rank as u8,
            dims,
            born_ns: None,
            site,
        }
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.dims[..self.rank as usize]
    }
}

/// Live arrays by allocation. Indexed by the allocation's chunk slot (ids are slot and
/// generation), so recording and forgetting an array is an index, not a hash; the context keeps
/// it under the arena's lock, in the critical sections that allocate and free anyway.
#[derive(Debug, Default)]
pub(crate) struct ArrayRegistry {
    slots: Vec<Option<(AllocationId, ArrayInfo)>>,
}

impl ArrayRegistry {
    /// Records a new array.
    pub fn insert(&mut self, id: AllocationId, info: ArrayInfo) {
        let slot = id.slot() as usize;
        if slot >= self.slots.len() {
            self.slots.resize(slot + 1, None);
        }
        self.slots[slot] = Some((id, info));
    }

    /// Forgets an array whose memory went back to the arena.
    pub fn remove(&mut self, id: AllocationId) {
        if let Some(entry) = self.slots.get_mut(id.slot() as usize) {
            if entry.is_some_and(|(live, _)| live == id) {
                *entry = None;
            }
        }
    }

    /// The info of a live array.
    pub fn get(&self, id: AllocationId) -> Option<&ArrayInfo> {
        match self.slots.get(id.slot() as usize)? {
            Some((live, info)) if *live == id => Some(info),
            _ => None,
        }
    }

    /// Describes a live array as elements of `U` in `shape` from now on (a reshape or a
    /// bitcast: the same memory, born at the same site and time).
    pub fn retype<U>(&mut self, id: AllocationId, shape: &[usize]) {
        if let Some(Some((live, info))) = self.slots.get_mut(id.slot() as usize) {
            if *live == id {
                *info = ArrayInfo {
                    born_ns: info.born_ns,
                    ..ArrayInfo::new::<U>(shape, info.site)
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_keeps_the_element_type_and_shape() {
        let info = ArrayInfo::new::<f32>(&[2, 3, 4], Location::caller());
        assert_eq!(info.dtype, "f32");
        assert_eq!(info.shape(), &[2, 3, 4]);
        assert!(ArrayInfo::new::<u8>(&[], Location::caller())
            .shape()
            .is_empty());
    }

    #[test]
    fn a_reused_slot_does_not_answer_for_the_old_allocation() {
        let mut registry = ArrayRegistry::default();
        let old = AllocationId::new(5, 1);
        let new = AllocationId::new(5, 2);
        registry.insert(old, ArrayInfo::new::<u8>(&[1], Location::caller()));
        registry.insert(new, ArrayInfo::new::<f32>(&[2], Location::caller()));
        assert!(registry.get(old).is_none());
        registry.remove(old);
        assert_eq!(registry.get(new).unwrap().dtype, "f32");
        registry.remove(new);
        assert!(registry.get(new).is_none());
    }
}
