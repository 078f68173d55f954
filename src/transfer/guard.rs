//! The transfer guard, as `jax.transfer_guard`: allow, log or refuse transfers per direction.
//!
//! Levels apply to *implicit* transfers (host data where a device array is expected,
//! `DeviceArray::to_vec`, `Display`, comparisons with host values); the `_explicit` levels apply
//! to explicit ones (`device_put`, `device_get`, batches, `copy`) too. The level in force is the
//! newest live [`TransferGuard`] on this thread for that direction, else the context's (from
//! the environment: `GPU_ARENA_TRANSFER_GUARD[_HOST_TO_DEVICE|_DEVICE_TO_HOST|_DEVICE_TO_DEVICE]`,
//! with `JAX_TRANSFER_GUARD[...]` accepted as aliases).
//!
//! The levels themselves are configuration data ([`crate::config::TransferGuardLevels`]); this
//! file holds what acts on them: the scoped overrides and the check each transfer makes.

use crate::config::{TransferDirection, TransferGuardLevel, TransferGuardLevels};
use crate::error::{Error, Result};
use std::cell::RefCell;

/// What the guard does with one transfer.
enum Verdict {
    Pass,
    Log,
    Refuse,
}

/// JAX's table: the plain levels watch implicit transfers, the `_explicit` ones every transfer.
fn verdict(level: TransferGuardLevel, explicit: bool) -> Verdict {
    use TransferGuardLevel::*;
    match (level, explicit) {
        (Allow, _) => Verdict::Pass,
        (Log, false) | (LogExplicit, _) => Verdict::Log,
        (Log, true) | (Disallow, true) => Verdict::Pass,
        (Disallow, false) | (DisallowExplicit, _) => Verdict::Refuse,
    }
}

/// One live scoped override.
struct Scoped {
    /// The guard's own number on this thread, so that dropping it removes exactly its entry.
    id: u64,
    /// The direction it sets, or `None` for all.
    direction: Option<TransferDirection>,
    level: TransferGuardLevel,
}

/// This thread's live overrides, oldest first, and the number of the next guard.
#[derive(Default)]
struct ScopedStack {
    live: Vec<Scoped>,
    next_id: u64,
}

thread_local! {
    static SCOPED: RefCell<ScopedStack> = RefCell::new(ScopedStack::default());
}

/// A scoped guard level on the current thread, in force until dropped (nestable).
///
/// The newest live guard wins for the directions it sets. Guards may be dropped in any order:
/// dropping one removes exactly its own level, and the newest of the guards still alive is in
/// force again (not the level that was in force when the dropped one was made).
///
/// ```no_run
/// use gpu_arena::{TransferGuard, TransferGuardLevel};
/// let _guard = TransferGuard::scoped(TransferGuardLevel::Disallow);
/// // implicit transfers on this thread now fail until `_guard` is dropped
/// ```
#[must_use = "the guard level holds only while the returned value lives"]
pub struct TransferGuard {
    id: u64,
    // Not Send: the override belongs to the thread that made it.
    _not_send: std::marker::PhantomData<*const ()>,
}

impl TransferGuard {
    /// Sets `level` for every direction until the guard is dropped.
    pub fn scoped(level: TransferGuardLevel) -> Self {
        Self::push(None, level)
    }

    /// Sets `level` for one direction until the guard is dropped.
    pub fn scoped_direction(direction: TransferDirection, level: TransferGuardLevel) -> Self {
        Self::push(Some(direction), level)
    }

    fn push(direction: Option<TransferDirection>, level: TransferGuardLevel) -> Self {
        let id = SCOPED.with(|s| {
            let mut s = s.borrow_mut();
            // A u64 counter of guards made on one thread cannot wrap in practice; wrapping
            // would still give distinct ids to any set of guards alive at once.
            let id = s.next_id;
            s.next_id = s.next_id.wrapping_add(1);
            s.live.push(Scoped {
                id,
                direction,
                level,
            });
            id
        });
        Self {
            id,
            _not_send: std::marker::PhantomData,
        }
    }
}

impl Drop for TransferGuard {
    fn drop(&mut self) {
        // `try_with`: a guard kept in another thread-local may drop after this thread's stack
        // is gone, when there is nothing left to restore.
        let _ = SCOPED.try_with(|s| {
            let mut s = s.borrow_mut();
            if let Some(at) = s.live.iter().rposition(|g| g.id == self.id) {
                s.live.remove(at);
            }
        });
    }
}

/// The level in force for `direction` on this thread, given the context's defaults.
pub(crate) fn effective_level(
    defaults: &TransferGuardLevels,
    direction: TransferDirection,
) -> TransferGuardLevel {
    let scoped = SCOPED.try_with(|s| {
        s.borrow()
            .live
            .iter()
            .rev()
            .find(|g| g.direction.is_none_or(|d| d == direction))
            .map(|g| g.level)
    });
    scoped
        .ok()
        .flatten()
        .unwrap_or_else(|| defaults.get(direction))
}

/// Checks one transfer against the guard: `Ok` to go ahead (after logging when asked), or the
/// error that JAX would raise. Nothing has been transferred when this fails.
pub(crate) fn check(
    defaults: &TransferGuardLevels,
    direction: TransferDirection,
    bytes: u64,
    operation: &'static str,
    explicit: bool,
) -> Result<()> {
    let explicitness = if explicit { "explicit" } else { "implicit" };
    match verdict(effective_level(defaults, direction), explicit) {
        Verdict::Pass => Ok(()),
        Verdict::Log => {
            let bytes = crate::count::count(bytes, "byte");
            log::warn!("{direction} transfer: {bytes} by {operation} ({explicitness})");
            Ok(())
        }
        Verdict::Refuse => Err(Error::TransferGuard {
            direction,
            bytes,
            operation,
            explicitness,
        }),
    }
}

/// The refusal [`check`] would give, without its log: for an operation that checks every
/// transfer it will make before it makes the first.
pub(crate) fn check_ahead(
    defaults: &TransferGuardLevels,
    direction: TransferDirection,
    bytes: u64,
    operation: &'static str,
    explicit: bool,
) -> Result<()> {
    match verdict(effective_level(defaults, direction), explicit) {
        Verdict::Refuse => check(defaults, direction, bytes, operation, explicit),
        Verdict::Pass | Verdict::Log => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_level_treats_implicit_and_explicit_as_jax_does() {
        use TransferGuardLevel::*;
        let table = [
            (Allow, true, true),
            (Log, true, true),
            (Disallow, false, true),
            (LogExplicit, true, true),
            (DisallowExplicit, false, false),
        ];
        for (level, implicit_ok, explicit_ok) in table {
            let levels = TransferGuardLevels::all(level);
            for direction in TransferDirection::ALL {
                assert_eq!(
                    check(&levels, direction, 8, "t", false).is_ok(),
                    implicit_ok,
                    "{level:?}"
                );
                assert_eq!(
                    check(&levels, direction, 8, "t", true).is_ok(),
                    explicit_ok,
                    "{level:?}"
                );
            }
        }
    }

    #[test]
    fn refusal_reads_like_jax_and_names_direction_bytes_and_operation() {
        let levels = TransferGuardLevels::all(TransferGuardLevel::Disallow);
        let msg = check(
            &levels,
            TransferDirection::HostToDevice,
            4096,
            "dynamic_update_slice",
            false,
        )
        .unwrap_err()
        .to_string();
        assert!(
            msg.starts_with("Disallowed host-to-device transfer"),
            "{msg}"
        );
        assert!(
            msg.contains("4096 bytes") && msg.contains("dynamic_update_slice"),
            "{msg}"
        );
        assert!(msg.contains("implicit"), "{msg}");
    }

    #[test]
    fn scoped_guards_nest_per_direction_and_restore_on_drop() {
        let defaults = TransferGuardLevels::default();
        let d2h = TransferDirection::DeviceToHost;
        let h2d = TransferDirection::HostToDevice;
        {
            let _all = TransferGuard::scoped(TransferGuardLevel::Disallow);
            assert_eq!(
                effective_level(&defaults, h2d),
                TransferGuardLevel::Disallow
            );
            {
                let _one = TransferGuard::scoped_direction(d2h, TransferGuardLevel::Log);
                assert_eq!(effective_level(&defaults, d2h), TransferGuardLevel::Log);
                assert_eq!(
                    effective_level(&defaults, h2d),
                    TransferGuardLevel::Disallow
                );
            }
            assert_eq!(
                effective_level(&defaults, d2h),
                TransferGuardLevel::Disallow
            );
        }
        assert_eq!(effective_level(&defaults, d2h), TransferGuardLevel::Allow);
    }

    #[test]
    fn scoped_guard_is_thread_local() {
        let _g = TransferGuard::scoped(TransferGuardLevel::DisallowExplicit);
        let other = std::thread::spawn(|| {
            effective_level(
                &TransferGuardLevels::default(),
                TransferDirection::HostToDevice,
            )
        })
        .join()
        .unwrap();
        assert_eq!(other, TransferGuardLevel::Allow);
    }

    #[test]
    fn dropping_a_stale_guard_leaves_a_newer_live_guard_in_force() {
        // Guards dropped out of order: g1, g2; drop g1; g3, g4 (disallow_explicit); drop g2.
        let defaults = TransferGuardLevels::default();
        let d2h = TransferDirection::DeviceToHost;
        let g1 = TransferGuard::scoped(TransferGuardLevel::Log);
        let g2 = TransferGuard::scoped(TransferGuardLevel::Allow);
        drop(g1);
        let g3 = TransferGuard::scoped(TransferGuardLevel::Log);
        let g4 = TransferGuard::scoped(TransferGuardLevel::DisallowExplicit);
        drop(g2);
        assert_eq!(
            effective_level(&defaults, d2h),
            TransferGuardLevel::DisallowExplicit
        );
        assert!(check(&defaults, d2h, 4, "device_get", true).is_err());
        drop(g4);
        assert_eq!(effective_level(&defaults, d2h), TransferGuardLevel::Log);
        drop(g3);
        assert_eq!(effective_level(&defaults, d2h), TransferGuardLevel::Allow);
    }

    mod model {
        use super::*;
        use proptest::prelude::*;

        #[derive(Clone, Debug)]
        enum Op {
            /// A new guard for one direction (index into ALL) or all of them.
            Push(Option<usize>, usize),
            /// Drop the live guard at this position (modulo the number alive).
            Drop(usize),
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                (proptest::option::of(0..3usize), 0..5usize).prop_map(|(d, l)| Op::Push(d, l)),
                any::<usize>().prop_map(Op::Drop),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            /// The level in force is always the newest live guard for the direction (else the
            /// context's default), whatever order guards are made and dropped in.
            #[test]
            fn guards_dropped_in_any_order_leave_exactly_the_live_ones_in_force(
                ops in proptest::collection::vec(op(), 0..40),
                default in 0..5usize,
            ) {
                let defaults = TransferGuardLevels::all(TransferGuardLevel::ALL[default]);
                // Guards alive, oldest first, next to the model's (direction, level).
                let mut live: Vec<(TransferGuard, Option<TransferDirection>, TransferGuardLevel)> =
                    Vec::new();
                for op in ops {
                    match op {
                        Op::Push(direction, level) => {
                            let direction = direction.map(|d| TransferDirection::ALL[d]);
                            let level = TransferGuardLevel::ALL[level];
                            let guard = match direction {
                                Some(d) => TransferGuard::scoped_direction(d, level),
                                None => TransferGuard::scoped(level),
                            };
                            live.push((guard, direction, level));
                        }
                        Op::Drop(at) if !live.is_empty() => {
                            let at = at % live.len();
                            drop(live.remove(at));
                        }
                        Op::Drop(_) => {}
                    }
                    for direction in TransferDirection::ALL {
                        let expected = live
                            .iter()
                            .rev()
                            .find(|(_, d, _)| d.is_none_or(|d| d == direction))
                            .map_or(defaults.get(direction), |&(_, _, level)| level);
                        prop_assert_eq!(effective_level(&defaults, direction), expected);
                    }
                }
                drop(live);
                for direction in TransferDirection::ALL {
                    prop_assert_eq!(effective_level(&defaults, direction), defaults.get(direction));
                }
            }
        }
    }
}
