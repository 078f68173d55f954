//! The locks this thread holds, by rank and by where they were taken: the debug-build check of
//! the lock order (compiled only with `debug_assertions`).

use super::rank::LockRank;
use std::cell::RefCell;
use std::panic::Location;

thread_local! {
    /// This thread's held locks, in the order they were taken (at most one per rank: equal
    /// ranks never nest).
    static HELD: RefCell<Vec<(LockRank, &'static Location<'static>)>> =
        const { RefCell::new(Vec::new()) };
}

/// One entry of this thread's record: made by [`acquire`] before the lock is taken, removed
/// when dropped (guards drop in any order).
pub(super) struct Held {
    rank: LockRank,
}

/// Checks that this thread holds no lock of `rank` or above, then records `rank` as held,
/// taken at `at`. Called before the lock is taken, so that an inverted order panics here
/// instead of deadlocking later.
///
/// Panics: when a lock of equal or higher rank is held, naming both locks and where each was
/// taken. While the thread already unwinds from another panic (a guard's drop taking a lock),
/// the violation is logged instead: a second panic would abort the process.
pub(super) fn acquire(rank: LockRank, at: &'static Location<'static>) -> Held {
    let conflict = HELD.with_borrow_mut(|held| {
        let conflict = held
            .iter()
            .filter(|(other, _)| other.order >= rank.order)
            .max_by_key(|(other, _)| other.order)
            .copied();
        held.push((rank, at));
        conflict
    });
    if let Some((other, other_at)) = conflict {
        let message = format!(
            "lock order violated: {} (rank {}) taken at {at} while {} (rank {}) is held, \
             taken at {other_at}; locks are taken in increasing rank (src/lock/rank.rs)",
            rank.name, rank.order, other.name, other.order
        );
        if std::thread::panicking() {
            log::error!("gpu-arena: {message}");
        } else {
            // The entry just pushed goes with the guard that is never made.
            drop(Held { rank });
            panic!("{message}");
        }
    }
    Held { rank }
}

impl Drop for Held {
    fn drop(&mut self) {
        // `try_with`: a guard dropped by a thread-local's destructor may outlive the record.
        let _ = HELD.try_with(|held| {
            let mut held = held.borrow_mut();
            if let Some(at) = held.iter().rposition(|(rank, _)| *rank == self.rank) {
                held.remove(at);
            }
        });
    }
}

/// The ranks this thread holds now, in the order they were taken (for tests).
#[cfg(test)]
pub(super) fn held_ranks() -> Vec<LockRank> {
    HELD.with_borrow(|held| held.iter().map(|(rank, _)| *rank).collect())
}
