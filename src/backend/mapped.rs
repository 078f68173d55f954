//! Host access to persistently mapped device memory (UMA arenas, BAR and staging buffers).
//!
//! This is where every host read and write of mapped memory happens, so that the raw-pointer
//! code of the crate stays in the backend. A [`MappedRange`] starts as a whole mapping (a
//! pointer, its length and the owner of the memory); [`MappedRange::sub`] cuts the checked range
//! of one array or one staging slot out of it, and the range's methods copy in and out with
//! slices, never past its end.
//!
//! # Why these methods are safe to call
//! Three things must hold for a host access through a raw pointer into device memory:
//! - **The memory is alive and mapped.** Every range holds its memory's owner (for Vulkan the
//!   gpu-allocator allocation, see `vulkan.rs`), which frees the memory only when the last
//!   holder is gone: the region, every array and staging buffer that maps it, and wgpu's
//!   buffer. wgpu can destroy its `VkBuffer` early (`Buffer::destroy`, `Device::destroy`, a
//!   lost device: all reachable from safe code), but not the memory, so a range never points
//!   at freed memory. This is held by construction.
//! - **The bytes lie inside the mapping.** Checked by [`MappedRange::sub`] and by each method
//!   against its slice; held by construction.
//! - **Nobody else uses the bytes meanwhile.** That is the arena's and the context's job: the
//!   arena never hands out overlapping ranges; the crate writes a range only while its array
//!   is fresh from the arena or donated (no other handle), or a staging buffer it has acquired
//!   (no GPU work uses it); it reads after waiting for the GPU work that writes the bytes; and
//!   host slices never alias mapped memory (the crate never lends mapped memory out as a slice
//!   or reference, only copies through raw pointers; MPI, under the `mpi` feature, gets a
//!   pointer and a count too, see `mpi_buffer.rs`). Memory the GPU writes while a stale
//!   range reads it (a user's `raw_submit` left an array out of `uses`) gives wrong bytes, as
//!   shared memory with another process does, never a pointer outside live memory.
//!
//! Large copies are split across threads: one thread writes mapped memory at about 8-9 GB/s,
//! and the hosts of big GPUs can do several times that.
//!
//! On memory that is not HOST_COHERENT (or under `ArenaConfig::force_non_coherent`) a range
//! carries a [`HostSync`], and every method keeps the memory in step by itself: methods that
//! read invalidate their bytes first, methods that write flush them afterwards (see
//! `host_sync`). Every path through mapped memory (staging, zero-copy puts and gets, host-path
//! kernels, zeroing) gets this without asking for it.

use super::host_sync::HostSync;
use std::ptr::NonNull;
use std::sync::Arc;

/// Whatever keeps a mapping's memory allocated and mapped: dropped with the last range of it.
pub(crate) type MappingOwner = Arc<dyn Send + Sync>;

/// Copies below this size run on the calling thread; above it, several threads share the
/// memcpy (one thread writes mapped memory at ~8-9 GB/s; the H200 host can do much more).
const PARALLEL_COPY_MIN_BYTES: usize = 4 << 20;
/// The most threads one memcpy uses.
const PARALLEL_COPY_MAX_THREADS: usize = 8;

/// How many threads a copy of `bytes` should use: one below [`PARALLEL_COPY_MIN_BYTES`], then
/// one per quarter of that, up to the cores and [`PARALLEL_COPY_MAX_THREADS`].
pub(crate) fn copy_threads(bytes: usize) -> usize {
    if bytes < PARALLEL_COPY_MIN_BYTES {
        return 1;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    cores
        .min(PARALLEL_COPY_MAX_THREADS)
        .min(bytes / (PARALLEL_COPY_MIN_BYTES / 4))
        .max(1)
}

/// A checked byte range of persistently mapped device memory: a whole mapping (as the memory
/// allocator reported it), one array's allocation in it, or one piece of a staging buffer.
///
/// Cloning it (and cutting [`MappedRange::sub`] ranges) shares the owner of the memory, so the
/// memory stays allocated and mapped while any range of it exists.
#[derive(Clone)]
pub(crate) struct MappedRange {
    ptr: NonNull<u8>,
    len: usize,
    /// Flush and invalidate for non-coherent memory; `None` on coherent memory.
    sync: Option<HostSync>,
    /// Where `ptr` lies in the `VkDeviceMemory` that `sync` names (unused without it).
    memory_offset: u64,
    /// Keeps the memory behind `ptr` allocated and mapped (and the device it belongs to alive)
    /// for as long as this range exists.
    owner: MappingOwner,
}

impl std::fmt::Debug for MappedRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedRange")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .field("sync", &self.sync)
            .field("memory_offset", &self.memory_offset)
            .finish()
    }
}

// SAFETY: the pointer names memory that `owner` (itself `Send + Sync`) keeps allocated and
// mapped for as long as this value exists, whichever thread drops it last; mapped memory is
// not tied to the thread that mapped it. Who touches which bytes when is arranged by the arena
// and the context (see the module docs); the value itself is immutable.
unsafe impl Send for MappedRange {}
// SAFETY: as above: `&MappedRange` only reads the immutable fields and copies through the
// pointer, which is valid from any thread while `owner` lives.
unsafe impl Sync for MappedRange {}

impl MappedRange {
    /// The whole mapping of `len` bytes at `ptr`, of coherent memory, kept alive by `owner`.
    ///
    /// # Safety
    /// `ptr` must be valid for reads and writes of `len` bytes for as long as `owner` exists
    /// (the range and all ranges cut from it hold a clone of `owner`), and no Rust reference
    /// may point into those bytes meanwhile.
    pub(crate) unsafe fn new(ptr: NonNull<u8>, len: u64, owner: MappingOwner) -> Self {
        let len = usize::try_from(len).expect("a host mapping fits the host's address space");
        Self {
            ptr,
            len,
            sync: None,
            memory_offset: 0,
            owner,
        }
    }

    /// The same mapping of non-coherent memory: `ptr` is byte `memory_offset` of the memory
    /// that `sync` flushes and invalidates.
    pub(crate) fn non_coherent(self, sync: HostSync, memory_offset: u64) -> Self {
        Self {
            sync: Some(sync),
            memory_offset,
            ..self
        }
    }

    /// Whether host access here flushes and invalidates (the memory is not coherent).
    #[cfg(test)]
    pub(crate) fn is_non_coherent(&self) -> bool {
        self.sync.is_some()
    }

    /// Makes the host's writes to the first `len` bytes visible to the device (non-coherent
    /// memory only).
    fn flush(&self, len: usize) {
        if let Some(sync) = &self.sync {
            sync.flush(self.memory_offset, len as u64);
        }
    }

    /// Makes the device's writes to the first `len` bytes visible to the host (non-coherent
    /// memory only).
    fn invalidate(&self, len: usize) {
        if let Some(sync) = &self.sync {
            sync.invalidate(self.memory_offset, len as u64);
        }
    }

    /// Bytes `[offset, offset + len)` of this range.
    ///
    /// # Panics
    /// If they do not lie inside it: ranges come from arena allocations, staging plans and
    /// kernel geometry, never from user input, so that would be a bug in the crate.
    pub(crate) fn sub(&self, offset: u64, len: u64) -> MappedRange {
        assert!(
            offset
                .checked_add(len)
                .is_some_and(|end| end <= self.len as u64),
            "mapped range {offset}+{len} outside a range of {} bytes",
            self.len
        );
        MappedRange {
            // SAFETY: in bounds (checked above), so the offset stays inside one allocation.
            ptr: unsafe { self.ptr.add(offset as usize) },
            len: len as usize,
            sync: self.sync.clone(),
            memory_offset: self.memory_offset + offset,
            owner: Arc::clone(&self.owner),
        }
    }

    /// Writes `src` at the start of the range, on several threads when it is large, then
    /// flushes it.
    ///
    /// # Panics
    /// If `src` is longer than the range.
    pub(crate) fn write(&self, src: &[u8]) {
        let to = self.sub(0, src.len() as u64).ptr.as_ptr() as usize;
        split_copy(src.len(), |at, part| {
            // SAFETY: `[at, at + part)` lies inside both `src` and this range (checked above),
            // whose memory `owner` keeps alive for this call; host slices never alias mapped
            // memory, and each thread gets its own piece.
            unsafe {
                std::ptr::copy_nonoverlapping(src.as_ptr().add(at), (to as *mut u8).add(at), part)
            }
        });
        self.flush(src.len());
    }

    /// Invalidates the start of the range, then reads it into `dst`, on several threads when
    /// it is large.
    ///
    /// # Panics
    /// If `dst` is longer than the range.
    pub(crate) fn read(&self, dst: &mut [u8]) {
        let from = self.sub(0, dst.len() as u64).ptr.as_ptr() as usize;
        self.invalidate(dst.len());
        let out = dst.as_mut_ptr() as usize;
        split_copy(dst.len(), |at, part| {
            // SAFETY: `[at, at + part)` lies inside both (checked above) and `owner` keeps the
            // mapped side alive; `dst` is borrowed mutably for the whole call and each thread
            // writes its own piece of it.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (from as *const u8).add(at),
                    (out as *mut u8).add(at),
                    part,
                )
            }
        });
    }

    /// Copies this range into `dst`, a range of the same length (another array's bytes):
    /// invalidates this range first and flushes `dst` afterwards.
    ///
    /// # Panics
    /// If the lengths differ.
    pub(crate) fn copy_to(&self, dst: MappedRange) {
        assert_eq!(
            self.len, dst.len,
            "mapped copy between ranges of unequal length"
        );
        self.invalidate(self.len);
        let (from, to) = (self.ptr.as_ptr() as usize, dst.ptr.as_ptr() as usize);
        if from.abs_diff(to) < self.len {
            // Overlapping ranges (one array onto itself) need memmove, on one thread.
            // SAFETY: both ranges are valid for `len` bytes (their owners keep the memory
            // alive); `copy` allows overlap.
            unsafe { std::ptr::copy(self.ptr.as_ptr(), dst.ptr.as_ptr(), self.len) };
            dst.flush(dst.len);
            return;
        }
        split_copy(self.len, |at, part| {
            // SAFETY: both ranges are valid for `len` bytes (their owners keep the memory
            // alive) and do not overlap (checked above); each thread copies its own piece.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (from as *const u8).add(at),
                    (to as *mut u8).add(at),
                    part,
                )
            }
        });
        dst.flush(dst.len);
    }

    /// The range's first byte and length, for MPI buffers over it (`mpi_buffer.rs`), which
    /// hand MPI a pointer and a count as C code does: no Rust reference into the mapping.
    #[cfg(feature = "mpi")]
    pub(super) fn raw_parts(&self) -> (*mut u8, usize) {
        (self.ptr.as_ptr(), self.len)
    }

    /// Makes the device's writes to the whole range visible to the host (before MPI reads it).
    #[cfg(feature = "mpi")]
    pub(super) fn invalidate_all(&self) {
        self.invalidate(self.len);
    }

    /// Makes the host's writes to the whole range visible to the device (after MPI wrote it).
    #[cfg(feature = "mpi")]
    pub(super) fn flush_all(&self) {
        self.flush(self.len);
    }

    /// Sets every byte of the range to zero, then flushes it.
    pub(crate) fn zero(&self) {
        // SAFETY: the range is valid for `len` bytes of writes while `owner` lives.
        unsafe { std::ptr::write_bytes(self.ptr.as_ptr(), 0, self.len) };
        self.flush(self.len);
    }

    /// Fills the range with copies of `pattern`, then flushes it.
    ///
    /// # Panics
    /// If the length is not a multiple of 16 bytes.
    pub(crate) fn fill(&self, pattern: [u8; 16]) {
        assert_eq!(
            self.len % 16,
            0,
            "pattern fill of a range not a multiple of 16"
        );
        for at in (0..self.len).step_by(16) {
            // SAFETY: `[at, at + 16)` lies inside the range, alive while `owner` lives;
            // unaligned writes are allowed.
            unsafe {
                self.ptr
                    .as_ptr()
                    .add(at)
                    .cast::<[u8; 16]>()
                    .write_unaligned(pattern)
            };
        }
        self.flush(self.len);
    }
}

/// Runs `copy(at, bytes)` over `[0, len)`: in one call for small copies, or in equal pieces
/// on [`copy_threads`] threads. A piece whose thread cannot start (the process is at its
/// thread limit) is copied on the calling thread.
fn split_copy(len: usize, copy: impl Fn(usize, usize) + Sync) {
    let threads = copy_threads(len);
    if threads <= 1 {
        copy(0, len);
        return;
    }
    let part = len.div_ceil(threads);
    let copy = &copy;
    std::thread::scope(|scope| {
        for at in (0..len).step_by(part) {
            let piece = move || copy(at, part.min(len - at));
            if std::thread::Builder::new()
                .spawn_scoped(scope, piece)
                .is_err()
            {
                piece();
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::super::host_sync::tests as host_sync;
    use super::*;

    /// A mapping over a plain host buffer, standing in for device memory.
    fn mapping(buffer: &mut [u8]) -> MappedRange {
        // SAFETY: each test keeps `buffer` alive, and holds no reference into it, while it
        // uses the ranges; it reads `buffer` only once it is done with them.
        unsafe {
            MappedRange::new(
                NonNull::new(buffer.as_mut_ptr()).unwrap(),
                buffer.len() as u64,
                Arc::new(()),
            )
        }
    }

    #[test]
    fn writes_and_reads_land_at_the_range_offset() {
        let mut buffer = vec![0u8; 1024];
        let memory = mapping(&mut buffer);
        let range = memory.sub(100, 50);
        range.write(&[7; 20]);
        range.sub(20, 4).write(&[9; 4]);
        let mut back = [0u8; 24];
        range.read(&mut back);
        assert_eq!(&back[..20], &[7; 20]);
        assert_eq!(&back[20..], &[9; 4]);
        assert!(buffer[..100].iter().all(|&b| b == 0));
        assert_eq!(buffer[100], 7);
        assert!(buffer[124..].iter().all(|&b| b == 0));
    }

    #[test]
    fn ranges_keep_their_memory_owner_alive_until_the_last_one_is_dropped() {
        use std::sync::atomic::{AtomicBool, Ordering};
        struct Owner(Arc<AtomicBool>);
        impl Drop for Owner {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let freed = Arc::new(AtomicBool::new(false));
        let mut buffer = vec![0u8; 64];
        // SAFETY: `buffer` outlives the ranges, and no reference into it is held meanwhile.
        let whole = unsafe {
            MappedRange::new(
                NonNull::new(buffer.as_mut_ptr()).unwrap(),
                64,
                Arc::new(Owner(Arc::clone(&freed))),
            )
        };
        let piece = whole.sub(8, 8);
        let copy = piece.clone();
        drop(whole);
        drop(piece);
        assert!(
            !freed.load(Ordering::SeqCst),
            "a range of it is still alive"
        );
        copy.write(&[1; 8]);
        drop(copy);
        assert!(freed.load(Ordering::SeqCst), "the last range frees it");
        assert_eq!(&buffer[8..16], &[1; 8]);
    }

    #[test]
    fn large_copies_split_across_threads_arrive_whole() {
        let len = PARALLEL_COPY_MIN_BYTES * 2 + 13;
        let src: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
        let mut buffer = vec![0u8; 2 * len];
        let memory = mapping(&mut buffer);
        let (a, b) = (
            memory.sub(0, len as u64),
            memory.sub(len as u64, len as u64),
        );
        a.write(&src);
        a.copy_to(b.clone());
        let mut out = vec![0u8; len];
        b.read(&mut out);
        assert!(out == src, "copied bytes differ");
    }

    #[test]
    fn overlapping_copies_behave_like_memmove() {
        let mut buffer: Vec<u8> = (0..64).collect();
        let memory = mapping(&mut buffer);
        memory.sub(0, 32).copy_to(memory.sub(8, 32));
        let expected: Vec<u8> = (0..8).chain(0..32).chain(40..64).collect();
        assert_eq!(buffer, expected);
    }

    #[test]
    fn pattern_fills_and_zeroing_cover_exactly_the_range() {
        let mut buffer = vec![1u8; 96];
        let memory = mapping(&mut buffer);
        let pattern: [u8; 16] = std::array::from_fn(|i| i as u8 + 10);
        memory.sub(16, 32).fill(pattern);
        memory.sub(64, 16).zero();
        assert!(buffer[..16].iter().all(|&b| b == 1));
        assert_eq!(&buffer[16..32], &pattern);
        assert_eq!(&buffer[32..48], &pattern);
        assert!(buffer[48..64].iter().all(|&b| b == 1));
        assert!(buffer[64..80].iter().all(|&b| b == 0));
        assert!(buffer[80..].iter().all(|&b| b == 1));
    }

    #[test]
    fn coherent_ranges_make_no_driver_calls() {
        let _serial = host_sync::SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let _ = host_sync::recording(0, 64);
        let mut buffer = vec![0u8; 256];
        let memory = mapping(&mut buffer);
        assert!(!memory.is_non_coherent());
        memory.sub(3, 10).write(&[1; 10]);
        memory.sub(3, 10).read(&mut [0; 10]);
        assert_eq!(host_sync::recorded(), []);
    }

    #[test]
    fn every_write_flushes_and_every_read_invalidates_its_bytes_at_their_place_in_the_memory() {
        let _serial = host_sync::SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let mut buffer = vec![0u8; 1000];
        // The mapping starts at byte 1024 of a memory of 2024 bytes; atoms of 64.
        let sync = host_sync::recording(2024, 64);
        let memory = mapping(&mut buffer).non_coherent(sync, 1024);
        assert!(memory.is_non_coherent());
        let range = memory.sub(100, 300);
        assert!(range.is_non_coherent(), "sub-ranges keep the sync");
        range.write(&[7; 5]); // bytes 1124..1129 of the memory
        let mut back = [0u8; 5];
        range.read(&mut back);
        assert_eq!(back, [7; 5]);
        range.sub(0, 16).zero(); // 1124..1140
        range.sub(16, 32).fill([3; 16]); // 1140..1172
        memory.sub(0, 8).copy_to(memory.sub(992, 8)); // read 1024..1032, write 2016..2024
        memory.sub(0, 16).copy_to(memory.sub(8, 16)); // overlapping: memmove
        assert_eq!(
            host_sync::recorded(),
            [
                ("flush", 1088, 64),
                ("invalidate", 1088, 64),
                ("flush", 1088, 64),
                ("flush", 1088, 128),
                ("invalidate", 1024, 64),
                ("flush", 1984, 40),
                ("invalidate", 1024, 64),
                ("flush", 1024, 64),
            ]
        );
        assert_eq!(&buffer[100..105], &[0; 5], "zeroed after the write");
        assert_eq!(&buffer[116..148], &[3; 32]);
    }

    #[test]
    #[should_panic(expected = "outside a range of 64 bytes")]
    fn a_range_past_the_mapping_is_refused() {
        let mut buffer = vec![0u8; 64];
        mapping(&mut buffer).sub(32, 33);
    }

    #[test]
    #[should_panic(expected = "outside a range of 16 bytes")]
    fn a_write_longer_than_its_range_is_refused() {
        let mut buffer = vec![0u8; 64];
        mapping(&mut buffer).sub(0, 16).write(&[0; 17]);
    }
}
