//! [`Mutex`]: `std::sync::Mutex` with a [`LockRank`], checked against the locks the thread
//! holds in debug builds, and the same as `std`'s (poisoning included) otherwise.

use super::rank::LockRank;
use std::ops::{Deref, DerefMut};
use std::sync::{LockResult, PoisonError};

/// A mutex with a rank. [`Mutex::lock`] returns what `std::sync::Mutex::lock` returns, with a
/// [`MutexGuard`] of this module in place of `std`'s: a lock poisoned by a panic elsewhere is an
/// `Err` whose guard callers take back with `unwrap_or_else(|p| p.into_inner())`.
pub(crate) struct Mutex<T> {
    #[cfg(debug_assertions)]
    rank: LockRank,
    inner: std::sync::Mutex<T>,
}

/// The guard of a ranked [`Mutex`]: unlocks it and leaves the thread's record of held locks
/// when dropped.
pub(crate) struct MutexGuard<'a, T> {
    inner: std::sync::MutexGuard<'a, T>,
    #[cfg(debug_assertions)]
    _held: super::held::Held,
}

impl<T> Mutex<T> {
    /// A mutex of `rank` holding `value`. Without `debug_assertions` the rank is not kept.
    #[cfg_attr(not(debug_assertions), allow(unused_variables))]
    pub(crate) const fn new(rank: LockRank, value: T) -> Self {
        Mutex {
            #[cfg(debug_assertions)]
            rank,
            inner: std::sync::Mutex::new(value),
        }
    }

    /// Blocks until the lock is this thread's, as `std::sync::Mutex::lock`.
    ///
    /// Panics (with `debug_assertions` only): when the thread holds a lock of this rank or a
    /// higher one, naming both locks and the lines that took them.
    #[cfg_attr(debug_assertions, track_caller)]
    #[inline]
    pub(crate) fn lock(&self) -> LockResult<MutexGuard<'_, T>> {
        #[cfg(debug_assertions)]
        let held = super::held::acquire(self.rank, std::panic::Location::caller());
        let wrap = |inner| MutexGuard {
            inner,
            #[cfg(debug_assertions)]
            _held: held,
        };
        match self.inner.lock() {
            Ok(inner) => Ok(wrap(inner)),
            Err(poisoned) => Err(PoisonError::new(wrap(poisoned.into_inner()))),
        }
    }

    /// The value, through exclusive access (no lock is taken, so nothing is checked), as
    /// `std::sync::Mutex::get_mut`.
    pub(crate) fn get_mut(&mut self) -> LockResult<&mut T> {
        self.inner.get_mut()
    }

    /// Whether a thread panicked while holding the lock, as `std::sync::Mutex::is_poisoned`.
    #[cfg(test)]
    pub(crate) fn is_poisoned(&self) -> bool {
        self.inner.is_poisoned()
    }
}

impl<T> Deref for MutexGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.inner
    }
}

impl<T> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.inner
    }
}
