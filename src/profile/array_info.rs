//! What the arena does not know about an allocation: the element type, the shape and the time
//! of the array that holds it, kept beside the arena for snapshots.

use crate::arena::AllocationId;
use crate::array::MAX_RANK;
use std::collections::HashMap;
use std::time::Instant;

/// The element type, shape and birth time of one live array. Fixed-size, so recording it
/// allocates nothing beyond the table's own growth.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ArrayInfo {
    /// `std::any::type_name` of the element type (`f32`, `u32`, `my_crate::Particle`).
    pub dtype: &'static str,
    rank: u8,
    dims: [usize; MAX_RANK],
    /// When the array was allocated.
    pub born: Instant,
}

impl ArrayInfo {
    /// The info of a new `T` array of `shape` (rank at most [`MAX_RANK`]; longer shapes are
    /// cut, which cannot happen for shapes that passed `check_shape`).
    pub fn new<T>(shape: &[usize]) -> ArrayInfo {
        let rank = shape.len().min(MAX_RANK);
        let mut dims = [0; MAX_RANK];
        dims[..rank].copy_from_slice(&shape[..rank]);
        ArrayInfo {
            dtype: std::any::type_name::<T>(),
            rank: rank as u8,
            dims,
            born: Instant::now(),
        }
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.dims[..self.rank as usize]
    }
}

/// Live arrays by allocation id. The context keeps it under the same lock as the arena, so an
/// entry is added and removed in the critical sections that allocate and free anyway.
#[derive(Debug, Default)]
pub(crate) struct ArrayRegistry {
    arrays: HashMap<AllocationId, ArrayInfo>,
}

impl ArrayRegistry {
    /// Records a new array.
    pub fn insert(&mut self, id: AllocationId, info: ArrayInfo) {
        self.arrays.insert(id, info);
    }

    /// Forgets an array whose memory went back to the arena.
    pub fn remove(&mut self, id: AllocationId) {
        self.arrays.remove(&id);
    }

    /// The info of a live array.
    pub fn get(&self, id: AllocationId) -> Option<&ArrayInfo> {
        self.arrays.get(&id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_keeps_the_element_type_and_shape() {
        let info = ArrayInfo::new::<f32>(&[2, 3, 4]);
        assert_eq!(info.dtype, "f32");
        assert_eq!(info.shape(), &[2, 3, 4]);
        assert!(ArrayInfo::new::<u8>(&[]).shape().is_empty());
    }
}
