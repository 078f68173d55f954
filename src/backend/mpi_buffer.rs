//! MPI buffers over mapped device memory (cargo feature `mpi`): on zero-copy arenas MPI reads
//! an array's mapping and writes into it directly, through the pointer and count these
//! buffers give it, as C code would: no Rust reference into the mapping is made, so the
//! argument of `mapped.rs` (who may touch mapped bytes, and how) holds unchanged.
//!
//! Also the one MPI call rsmpi cannot make: an all-reduce in place (`MPI_IN_PLACE`, which
//! rsmpi does not export), so that MPI reduces a chunk where it lies instead of into a second
//! buffer that must then be copied back; see [`all_reduce_in_place`].

use super::mapped::MappedRange;
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

/// A group's communicator, shared by the thread that calls the group's collectives and the
/// group's progress thread, which runs the started ones. rsmpi's communicators are neither
/// `Send` nor `Sync` (an `MPI_Comm` is a raw handle), though MPI lets any thread use any
/// communicator at `MPI_THREAD_MULTIPLE`.
pub(crate) struct SharedComm(mpi::topology::SimpleCommunicator);

impl SharedComm {
    /// Wraps `comm`, which the group has made for itself (a duplicate of the user's).
    pub(crate) fn new(comm: mpi::topology::SimpleCommunicator) -> Self {
        Self(comm)
    }
}

impl std::ops::Deref for SharedComm {
    type Target = mpi::topology::SimpleCommunicator;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

// SAFETY: the handle is only an identifier of MPI state that MPI itself synchronizes at
// `MPI_THREAD_MULTIPLE`. A second thread (the progress thread) exists only at that level
// (checked before a started collective queues anything, in `started.rs`), and the two threads
// never run collectives on it at once: the calling thread waits until the progress thread has
// run every job queued (`Progress::quiet`) before it calls a collective, and queues nothing
// while it runs one. Point-to-point calls may run beside the progress thread's collectives,
// which MPI allows (collective and point-to-point traffic never match each other).
unsafe impl Send for SharedComm {}
// SAFETY: as for `Send`.
unsafe impl Sync for SharedComm {}

/// MPI's `MPI_IN_PLACE`, the send-buffer sentinel that makes a reduction read its input from
/// the receive buffer and overwrite it there. rsmpi does not export it, and its value is not
/// part of MPI's ABI: `(void*)1` in Open MPI, `(void*)-1` in MPICH and the libraries built
/// on it (Intel MPI, MVAPICH, Cray MPICH). So it is chosen from the library's own version
/// string (`MPI_Get_library_version`), once per process, and `None` for any other library:
/// callers then reduce through a separate host buffer, as rsmpi does. Every rank of a job
/// runs the same library, so every rank makes the same choice.
pub(crate) fn in_place_sentinel() -> Option<isize> {
    static SENTINEL: std::sync::OnceLock<Option<isize>> = std::sync::OnceLock::new();
    *SENTINEL.get_or_init(|| {
        mpi::environment::library_version()
            .ok()
            .and_then(|version| sentinel_for(&version))
    })
}

/// The `MPI_IN_PLACE` value of the library whose `MPI_Get_library_version` is `version`.
fn sentinel_for(version: &str) -> Option<isize> {
    let version = version.trim_start();
    if version.starts_with("Open MPI") {
        Some(1)
    } else if ["MPICH", "Intel(R) MPI", "MVAPICH", "Cray MPICH"]
        .iter()
        .any(|name| version.starts_with(name))
    {
        Some(-1)
    } else {
        None
    }
}

/// Reduces `buffer` with `op` across the ranks of `comm`, in place, with the blocking
/// `MPI_Allreduce` (Open MPI runs it with its tuned algorithms, where the immediate form goes
/// through a slower generic schedule); `None` (and nothing runs) when the library's
/// `MPI_IN_PLACE` is unknown. Every rank of `comm` must make the same call (blocking and
/// immediate collectives do not match each other).
pub(crate) fn all_reduce_in_place<B>(
    comm: &mpi::topology::SimpleCommunicator,
    buffer: &mut B,
    op: mpi::collective::SystemOperation,
) -> Option<()>
where
    B: BufferMut + ?Sized,
{
    use mpi::raw::AsRaw;
    let sentinel = in_place_sentinel()?;
    // SAFETY: `sentinel` is this library's `MPI_IN_PLACE` (the version string named it), which
    // MPI compares against and never dereferences. `buffer` gives a pointer valid for `count`
    // elements of its datatype (the `BufferMut` contract), mutably borrowed for the call,
    // which returns only when MPI is done with it. The communicator and operation handles
    // are live (borrowed / predefined); on failure MPI's default handler ends the job.
    unsafe {
        mpi::ffi::MPI_Allreduce(
            sentinel as *const c_void,
            buffer.pointer_mut(),
            buffer.count(),
            buffer.as_datatype().as_raw(),
            op.as_raw(),
            comm.as_raw(),
        );
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::sentinel_for;

    #[test]
    fn the_in_place_sentinel_follows_the_library_and_is_none_for_unknown_ones() {
        assert_eq!(
            sentinel_for("Open MPI v4.1.4, package: Debian OpenMPI"),
            Some(1)
        );
        assert_eq!(sentinel_for("MPICH Version:\t4.0.2\n"), Some(-1));
        assert_eq!(sentinel_for("Intel(R) MPI Library 2021.6"), Some(-1));
        assert_eq!(sentinel_for("MVAPICH2 Version 2.3.7"), Some(-1));
        assert_eq!(sentinel_for("Cray MPICH version 8.1"), Some(-1));
        for unknown in [
            "",
            "Spectrum MPI",
            "MS-MPI 10.1",
            "open mpi",
            "Some MPICH fork",
        ] {
            assert_eq!(sentinel_for(unknown), None, "{unknown:?}");
        }
    }
}
