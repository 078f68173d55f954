//! MPI buffers over mapped device memory (cargo feature `mpi`): on zero-copy arenas MPI reads
//! an array's mapping and writes into it directly, through the pointer and count these
//! buffers give it, as C code would: no Rust reference into the mapping is made, so the
//! argument of `mapped.rs` (who may touch mapped bytes, and how) holds unchanged.

use super::MappedRange;
use mpi::datatype::{AsDatatype, Buffer, BufferMut, Collection, Equivalence, Pointer, PointerMut};
use mpi::Count;
use std::ffi::c_void;
use std::marker::PhantomData;

/// A range of mapped memory seen by MPI as `count` elements of `T`.
pub(crate) struct MappedElements<T> {
    range: MappedRange,
    count: Count,
    _element: PhantomData<T>,
}

impl<T: Equivalence + bytemuck::Pod> MappedElements<T> {
    /// The elements of `range`, or `None` when the range is not aligned to `T`, is not a
    /// whole number of elements, or holds more than an MPI count (a C `int`) can say.
    pub(crate) fn new(range: MappedRange) -> Option<Self> {
        let (ptr, len) = range.raw_parts();
        let size = std::mem::size_of::<T>();
        if size == 0
            || !(ptr as usize).is_multiple_of(std::mem::align_of::<T>())
            || !len.is_multiple_of(size)
        {
            return None;
        }
        let count = Count::try_from(len / size).ok()?;
        Some(Self {
            range,
            count,
            _element: PhantomData,
        })
    }

    /// Runs `read` (an MPI call that reads the elements) after invalidating the range.
    pub(crate) fn read_with<R>(&self, read: impl FnOnce(&Self) -> R) -> R {
        self.range.invalidate_all();
        read(self)
    }

    /// Runs `write` (an MPI call that writes the elements), then flushes the range.
    pub(crate) fn write_with<R>(&mut self, write: impl FnOnce(&mut Self) -> R) -> R {
        self.range.invalidate_all();
        let result = write(self);
        self.range.flush_all();
        result
    }
}

// SAFETY: the pointer is the start of `range`, valid for `count` elements of `T` while the
// range (which holds the memory's owner) lives, which is as long as `self`; `new` checked the
// alignment and that the count covers the range exactly.
unsafe impl<T> Pointer for MappedElements<T> {
    fn pointer(&self) -> *const c_void {
        self.range.raw_parts().0 as *const c_void
    }
}

// SAFETY: as for `Pointer`; MPI writes through it only while `self` is borrowed mutably, and
// the caller holds the array these bytes belong to (owned or mutably borrowed), after waiting
// for the GPU work that uses it.
unsafe impl<T> PointerMut for MappedElements<T> {
    fn pointer_mut(&mut self) -> *mut c_void {
        self.range.raw_parts().0 as *mut c_void
    }
}

// SAFETY: `count` elements of `T` fill the range exactly (checked in `new`).
unsafe impl<T> Collection for MappedElements<T> {
    fn count(&self) -> Count {
        self.count
    }
}

// SAFETY: the elements are `T`s, and `T`'s MPI datatype is the one rsmpi maps it to.
unsafe impl<T: Equivalence> AsDatatype for MappedElements<T> {
    type Out = <T as Equivalence>::Out;
    fn as_datatype(&self) -> Self::Out {
        T::equivalent_datatype()
    }
}

// SAFETY: pointer, count and datatype describe the same elements (see the impls above).
unsafe impl<T: Equivalence> Buffer for MappedElements<T> {}
// SAFETY: as for `Buffer`.
unsafe impl<T: Equivalence> BufferMut for MappedElements<T> {}
