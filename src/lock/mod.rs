//! Locks with a rank: the order in which the crate's locks may be taken, written down once
//! ([`rank`]) and checked in debug builds, as wgpu-core's `lock/rank.rs` does.
//!
//! The module holds [`LockRank`] and the rank of every lock of the crate (`rank.rs`), the
//! ranked [`Mutex`] and its [`MutexGuard`] (`mutex.rs`), and the thread's record of held locks
//! that checks each acquisition (`held.rs`). With `debug_assertions` (on for this crate in the
//! release test build too: see `Cargo.toml`), taking a lock while the thread holds one of equal
//! or higher rank panics, naming both locks and the lines that took them: an order that two
//! threads could take in opposite ways (a deadlock) fails a test on one thread instead of
//! hanging the suite now and then. Without `debug_assertions` the rank is not kept and a lock
//! is `std`'s, poisoning included.
//!
//! The crate's only ranked lock kind is the mutex (no read-write lock, no `try_lock`), so only
//! it is wrapped; another kind wraps the same way, its guards holding a `held` entry. Leaf
//! locks, held only to read or change a small state and never while taking another lock (an
//! array's pending marks, the open captures, the users' measurements and their condition
//! variable in `compute/tuned_kernel.rs`), are `std`'s and have no rank.
//!
//! # The order
//!
//! A thread holding a lock may take only locks below it in this table. Locks that never nest
//! still get distinct ranks, so that a new nesting is a decision made here.
//!
//! | rank | lock | what it guards | taken under it |
//! |-----:|------|----------------|----------------|
//! | 10 | host_sync tests' `SERIAL` (tests only) | one reader of the recorded calls at a time | everything a test does |
//! | 20 | `KernelCache::state` | compiled kernels, parameter buffer | a sequence's submission (a single op's gathering), a captured run, host-path checks |
//! | 30 | `ContextInner::gathered` | gathered single ops and their staging | every submission, the arena, timing, the timeline |
//! | 40 | `Submissions::last_submitted` | submission ids in queue order | `queue.submit`, the recent indices, a user's `GpuUse::record_use` |
//! | 50 | `Submissions::recent` | wgpu's indices of recent submissions | nothing of ours |
//! | 60 | `KernelTiming::state` | timestamp timers and their readbacks | the timeline |
//! | 70 | `ContextInner::memory` | the arena, its regions, live arrays | the allocator, the timeline |
//! | 80 | `StagingPool` free lists | free staging buffers of one direction | the staging count |
//! | 90 | `StagingPool::created` | staging buffers per direction | nothing of ours |
//! | 100 | `Scratch::free` (feature `mpi`) | host buffers kept between collectives | nothing of ours |
//! | 110 | gpu-allocator's `Allocator` | Vulkan device memory | nothing of ours |
//! | 120 | `Timeline::descriptions` | allocation sites, types and shapes | nothing of ours |
//! | 130 | `Timeline::labels` | interned labels and kernel names | nothing of ours |
//! | 140 | `Timeline::kernels` | kernel times by name | nothing of ours |
//! | 150 | `Timeline::context` | the ring of context events | nothing of ours |
//! | 160 | host_sync tests' `CALLS` (tests only) | the fake driver's flush and invalidate calls | nothing of ours |

#[cfg(debug_assertions)]
mod held;
mod mutex;
pub(crate) mod rank;

pub(crate) use mutex::{Mutex, MutexGuard};

#[cfg(test)]
mod tests {
    use super::rank::LockRank;
    use super::Mutex;

    const OUTER: LockRank = LockRank {
        name: "test outer lock",
        order: 1,
    };
    const INNER: LockRank = LockRank {
        name: "test inner lock",
        order: 2,
    };
    const LAST: LockRank = LockRank {
        name: "test last lock",
        order: 3,
    };

    fn lock<T>(mutex: &Mutex<T>) -> super::MutexGuard<'_, T> {
        mutex.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a lock of rank `held`, then, still holding it, one of rank `taken`: the order the
    /// refusal tests break, each reading another part of the panic message. Both locks are
    /// taken here, in `src/lock/mod.rs`, the file the messages name.
    fn take_one_lock_under_another(held: LockRank, taken: LockRank) {
        let first = Mutex::new(held, ());
        let second = Mutex::new(taken, ());
        let _first = lock(&first);
        let _second = lock(&second);
    }

    #[test]
    fn locks_taken_in_increasing_rank_are_fine() {
        let outer = Mutex::new(OUTER, 1);
        let inner = Mutex::new(INNER, 2);
        let a = lock(&outer);
        let b = lock(&inner);
        assert_eq!(*a + *b, 3);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(
        expected = "lock order violated: test outer lock (rank 1) taken at src/lock/mod.rs"
    )]
    fn a_lock_taken_under_a_higher_rank_panics_naming_the_lower_one() {
        take_one_lock_under_another(INNER, OUTER);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "while test inner lock (rank 2) is held, taken at src/lock/mod.rs")]
    fn a_lock_taken_under_a_higher_rank_panics_naming_the_held_one() {
        take_one_lock_under_another(INNER, OUTER);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "test inner lock (rank 2) taken at")]
    fn a_lock_of_a_rank_already_held_panics() {
        take_one_lock_under_another(INNER, INNER);
    }

    #[test]
    #[cfg(debug_assertions)]
    fn guards_dropped_out_of_order_leave_the_record_right() {
        let outer = Mutex::new(OUTER, ());
        let inner = Mutex::new(INNER, ());
        let last = Mutex::new(LAST, ());
        let a = lock(&outer);
        let b = lock(&inner);
        // The outer guard goes first: the inner one stays recorded, alone.
        drop(a);
        assert_eq!(super::held::held_ranks(), [INNER]);
        // The last rank is still above what is held; the outer one is not.
        let c = lock(&last);
        drop(b);
        drop(c);
        assert_eq!(super::held::held_ranks(), []);
        // Nothing is held: every rank may be taken again, the lowest first.
        let _a = lock(&outer);
        let _b = lock(&inner);
    }

    #[test]
    #[cfg(debug_assertions)]
    fn a_refused_lock_leaves_the_record_as_it_was() {
        let outer = Mutex::new(OUTER, ());
        let inner = Mutex::new(INNER, ());
        let held = lock(&inner);
        let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            drop(lock(&outer));
        }));
        assert!(refused.is_err());
        assert_eq!(super::held::held_ranks(), [INNER]);
        drop(held);
        assert_eq!(super::held::held_ranks(), []);
    }

    #[test]
    fn a_poisoned_lock_hands_its_value_back() {
        let mutex = std::sync::Arc::new(Mutex::new(OUTER, 7));
        let held = std::sync::Arc::clone(&mutex);
        let _ = std::thread::spawn(move || {
            let _guard = held.lock();
            panic!("poisoning the lock on purpose");
        })
        .join();
        assert!(mutex.is_poisoned());
        assert!(mutex.lock().is_err());
        assert_eq!(*lock(&mutex), 7);
    }
}
