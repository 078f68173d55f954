//! The transfer guard's vocabulary: the directions data moves in, JAX's five levels, and one
//! level per direction ([`crate::ArenaConfig::transfer_guard`]).
//!
//! Plain data with no behaviour of the guard's: the configuration holds a level per direction,
//! the guard itself (`crate::transfer::guard`: the scoped overrides and the check every
//! transfer makes) compares them, and a refusal ([`crate::Error::TransferGuard`]) names the
//! direction. Parsing the levels from the environment is in `config/env.rs`.

use serde::{Deserialize, Serialize};

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

    /// Position in [`TransferDirection::ALL`] (for per-direction counters).
    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// The suffix of this direction's guard variable (`GPU_ARENA_TRANSFER_GUARD_<SUFFIX>`).
    pub(crate) fn env_suffix(self) -> &'static str {
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
    /// All five levels, from the most permissive to the strictest.
    pub const ALL: [TransferGuardLevel; 5] = [
        TransferGuardLevel::Allow,
        TransferGuardLevel::Log,
        TransferGuardLevel::Disallow,
        TransferGuardLevel::LogExplicit,
        TransferGuardLevel::DisallowExplicit,
    ];

    /// The spellings [`TransferGuardLevel::parse`] accepts, for error messages.
    pub const SPELLINGS: &'static str =
        "one of allow, log, disallow, log_explicit, disallow_explicit";

    /// Parses `allow`, `log`, `disallow`, `log_explicit`, `disallow_explicit` (any case,
    /// surrounding blanks ignored); `None` for anything else.
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

    /// Sets the level for one direction.
    pub fn set(&mut self, direction: TransferDirection, level: TransferGuardLevel) {
        match direction {
            TransferDirection::HostToDevice => self.host_to_device = level,
            TransferDirection::DeviceToHost => self.device_to_host = level,
            TransferDirection::DeviceToDevice => self.device_to_device = level,
        }
    }
}
