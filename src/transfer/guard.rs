//! The transfer guard, as `jax.transfer_guard`: allow, log or refuse transfers per direction.
//!
//! Levels apply to *implicit* transfers (host data where a device array is expected,
//! `DeviceArray::to_vec`, `Display`, comparisons with host values); the `_explicit` levels apply
//! to explicit ones (`device_put`, `device_get`, batches, `copy`) too. The level in force is the
//! innermost [`TransferGuard::scoped`] on this thread, else the context's (from the environment:
//! `GPU_ARENA_TRANSFER_GUARD[_HOST_TO_DEVICE|_DEVICE_TO_HOST|_DEVICE_TO_DEVICE]`, with
//! `JAX_TRANSFER_GUARD[...]` accepted as aliases).

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::cell::RefCell;

/// Which way data moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransferDirection {
    /// Host memory to device memory (uploads).
    HostToDevice,
    /// Device memory to host memory (readbacks).
    DeviceToHost,
    /// One device array to another.
    DeviceToDevice,
}

impl TransferDirection {
    /// All three directions, in a fixed order.
    pub const ALL: [TransferDirection; 3] = [
        TransferDirection::HostToDevice,
        TransferDirection::DeviceToHost,
        TransferDirection::DeviceToDevice,
    ];

    pub(crate) fn index(self) -> usize {
        self as usize
    }

    fn env_suffix(self) -> &'static str {
        match self {
            Self::HostToDevice => "HOST_TO_DEVICE",
            Self::DeviceToHost => "DEVICE_TO_HOST",
            Self::DeviceToDevice => "DEVICE_TO_DEVICE",
        }
    }
}

impl std::fmt::Display for TransferDirection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::HostToDevice => "host-to-device",
            Self::DeviceToHost => "device-to-host",
            Self::DeviceToDevice => "device-to-device",
        })
    }
}

/// What the guard does with a transfer (JAX's levels).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum TransferGuardLevel {
    /// Everything passes silently (the default).
    #[default]
    Allow,
    /// Implicit transfers pass with a `log::warn!`.
    Log,
    /// Implicit transfers fail; explicit ones pass.
    Disallow,
    /// Every transfer passes with a `log::warn!`.
    LogExplicit,
    /// Every transfer fails.
    DisallowExplicit,
}

impl TransferGuardLevel {
    /// Parses `allow`, `log`, `disallow`, `log_explicit`, `disallow_explicit`.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text.trim().to_ascii_lowercase().as_str() {
            "allow" => Self::Allow,
            "log" => Self::Log,
            "disallow" => Self::Disallow,
            "log_explicit" => Self::LogExplicit,
            "disallow_explicit" => Self::DisallowExplicit,
            _ => return None,
        })
    }

    fn verdict(self, explicit: bool) -> Verdict {
        match (self, explicit) {
            (Self::Allow, _) => Verdict::Pass,
            (Self::Log, false) | (Self::LogExplicit, _) => Verdict::Log,
            (Self::Log, true) | (Self::Disallow, true) => Verdict::Pass,
            (Self::Disallow, false) | (Self::DisallowExplicit, _) => Verdict::Refuse,
        }
    }
}

enum Verdict {
    Pass,
    Log,
    Refuse,
}

/// The guard level of each direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TransferGuardLevels {
    /// Host to device.
    pub host_to_device: TransferGuardLevel,
    /// Device to host.
    pub device_to_host: TransferGuardLevel,
    /// Device to device.
    pub device_to_device: TransferGuardLevel,
}

impl TransferGuardLevels {
    /// The same level for every direction.
    pub fn all(level: TransferGuardLevel) -> Self {
        Self {
            host_to_device: level,
            device_to_host: level,
            device_to_device: level,
        }
    }

    /// The level for one direction.
    pub fn get(&self, direction: TransferDirection) -> TransferGuardLevel {
        match direction {
            TransferDirection::HostToDevice => self.host_to_device,
            TransferDirection::DeviceToHost => self.device_to_host,
            TransferDirection::DeviceToDevice => self.device_to_device,
        }
    }

    fn set(&mut self, direction: TransferDirection, level: TransferGuardLevel) {
        match direction {
            TransferDirection::HostToDevice => self.host_to_device = level,
            TransferDirection::DeviceToHost => self.device_to_host = level,
            TransferDirection::DeviceToDevice => self.device_to_device = level,
        }
    }

    /// Levels from the process environment (see the module docs); unset means `allow`.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Like [`TransferGuardLevels::from_env`] through a lookup function. The per-direction
    /// variables override the all-directions one; ours win over JAX's.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let read = |names: [String; 2]| -> Result<Option<TransferGuardLevel>> {
            for name in names {
                if let Some(value) = lookup(&name) {
                    return TransferGuardLevel::parse(&value).map(Some).ok_or_else(|| {
                        Error::Config {
                            variable: name,
                            value,
                            expected:
                                "one of allow, log, disallow, log_explicit, disallow_explicit"
                                    .into(),
                        }
                    });
                }
            }
            Ok(None)
        };
        let base = read([
            "GPU_ARENA_TRANSFER_GUARD".into(),
            "JAX_TRANSFER_GUARD".into(),
        ])?
        .unwrap_or_default();
        let mut levels = Self::all(base);
        for direction in TransferDirection::ALL {
            let suffix = direction.env_suffix();
            if let Some(level) = read([
                format!("GPU_ARENA_TRANSFER_GUARD_{suffix}"),
                format!("JAX_TRANSFER_GUARD_{suffix}"),
            ])? {
                levels.set(direction, level);
            }
        }
        Ok(levels)
    }
}

thread_local! {
    /// Scoped overrides of this thread, innermost last: (direction or all, level).
    static SCOPED: RefCell<Vec<(Option<TransferDirection>, TransferGuardLevel)>> =
        const { RefCell::new(Vec::new()) };
}

/// A scoped guard level on the current thread, restored when dropped (nestable).
///
/// ```no_run
/// use gpu_arena::{TransferGuard, TransferGuardLevel};
/// let _guard = TransferGuard::scoped(TransferGuardLevel::Disallow);
/// // implicit transfers on this thread now fail until `_guard` is dropped
/// ```
#[must_use = "the guard level holds only while the returned value lives"]
pub struct TransferGuard {
    depth: usize,
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
        let depth = SCOPED.with(|s| {
            let mut s = s.borrow_mut();
            s.push((direction, level));
            s.len()
        });
        Self {
            depth,
            _not_send: std::marker::PhantomData,
        }
    }
}

impl Drop for TransferGuard {
    fn drop(&mut self) {
        // Guards drop in reverse order in normal code; if one outlives an inner one we still
        // cut back to the level that was in force when it was made.
        SCOPED.with(|s| s.borrow_mut().truncate(self.depth - 1));
    }
}

/// The level in force for `direction` on this thread, given the context's defaults.
pub(crate) fn effective_level(
    defaults: &TransferGuardLevels,
    direction: TransferDirection,
) -> TransferGuardLevel {
    SCOPED.with(|s| {
        s.borrow()
            .iter()
            .rev()
            .find(|(d, _)| d.is_none_or(|d| d == direction))
            .map(|&(_, level)| level)
            .unwrap_or_else(|| defaults.get(direction))
    })
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
    match effective_level(defaults, direction).verdict(explicit) {
        Verdict::Pass => Ok(()),
        Verdict::Log => {
            log::warn!("{direction} transfer: {bytes} bytes by {operation} ({explicitness})");
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn levels_from(pairs: &[(&str, &str)]) -> Result<TransferGuardLevels> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        TransferGuardLevels::from_lookup(|n| map.get(n).cloned())
    }

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
    fn env_reads_all_directions_then_per_direction_with_jax_aliases() {
        let levels = levels_from(&[
            ("JAX_TRANSFER_GUARD", "disallow"),
            ("GPU_ARENA_TRANSFER_GUARD_DEVICE_TO_HOST", "log_explicit"),
            ("JAX_TRANSFER_GUARD_DEVICE_TO_DEVICE", "allow"),
        ])
        .unwrap();
        assert_eq!(levels.host_to_device, TransferGuardLevel::Disallow);
        assert_eq!(levels.device_to_host, TransferGuardLevel::LogExplicit);
        assert_eq!(levels.device_to_device, TransferGuardLevel::Allow);
        let ours = levels_from(&[
            ("GPU_ARENA_TRANSFER_GUARD", "log"),
            ("JAX_TRANSFER_GUARD", "disallow"),
        ])
        .unwrap();
        assert_eq!(ours, TransferGuardLevels::all(TransferGuardLevel::Log));
        assert_eq!(levels_from(&[]).unwrap(), TransferGuardLevels::default());
    }

    #[test]
    fn bad_guard_value_names_variable_and_levels() {
        let msg = levels_from(&[("GPU_ARENA_TRANSFER_GUARD_HOST_TO_DEVICE", "never")])
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("GPU_ARENA_TRANSFER_GUARD_HOST_TO_DEVICE"),
            "{msg}"
        );
        assert!(msg.contains("disallow_explicit"), "{msg}");
    }
}
