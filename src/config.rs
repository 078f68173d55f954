//! Configuration: JAX's memory knobs under our own names, read from code or the environment.
//!
//! | field | default | env var (ours) | JAX alias |
//! |---|---|---|---|
//! | [`ArenaConfig::preallocate`] | `true` | `GPU_ARENA_PREALLOCATE` | `XLA_PYTHON_CLIENT_PREALLOCATE` |
//! | [`ArenaConfig::mem_fraction`] | `0.75` | `GPU_ARENA_MEM_FRACTION` | `XLA_CLIENT_MEM_FRACTION`, `XLA_PYTHON_CLIENT_MEM_FRACTION` |
//! | [`ArenaConfig::allocator`] | `bfc` | `GPU_ARENA_ALLOCATOR` | `XLA_PYTHON_CLIENT_ALLOCATOR` |
//! | [`ArenaConfig::max_region_bytes`] | device limit | `GPU_ARENA_MAX_REGION_MB` | |
//! | [`ArenaConfig::adapter`] | best adapter | `GPU_ARENA_ADAPTER` | |
//! | [`ArenaConfig::backend`] | Vulkan, then others | `GPU_ARENA_BACKEND` | |
//! | [`ArenaConfig::zero_copy`] | `true` | `GPU_ARENA_ZERO_COPY` | |
//! | [`ArenaConfig::staging_bytes`] | 64 MiB | `GPU_ARENA_STAGING_MB` | |
//! | [`ArenaConfig::validation`] | `false` | `GPU_ARENA_VALIDATION` | |
//! | [`ArenaConfig::fallback_device_memory_bytes`] | 1 GiB | `GPU_ARENA_DEVICE_MEMORY_MB` | |
//! | [`ArenaConfig::transfer_guard`] | allow | `GPU_ARENA_TRANSFER_GUARD[_HOST_TO_DEVICE\|_DEVICE_TO_HOST\|_DEVICE_TO_DEVICE]` | `JAX_TRANSFER_GUARD[...]` |
//! | [`ArenaConfig::timeline_capacity`] | 0 (off) | `GPU_ARENA_TIMELINE` | |
//! | [`ArenaConfig::dump_on_oom`] | none | `GPU_ARENA_DUMP_ON_OOM` | |
//!
//! Our names win over the aliases; two aliases that disagree are an error, as in JAX.

use crate::error::{Error, Result};
use crate::transfer::TransferGuardLevels;
use serde::{Deserialize, Serialize};

/// JAX's default memory fraction: preallocate 75% of device memory.
pub const DEFAULT_MEM_FRACTION: f64 = 0.75;
/// Default size of the reusable staging pool for transfers (64 MiB: big enough to keep the copy
/// engine busy, small next to any GPU's memory).
pub const DEFAULT_STAGING_BYTES: u64 = 64 << 20;
/// Device memory assumed on wgpu backends that cannot report it (GL, Metal, DX12).
pub const DEFAULT_FALLBACK_DEVICE_MEMORY_BYTES: u64 = 1 << 30;

/// How the arena gets memory, as `XLA_PYTHON_CLIENT_ALLOCATOR`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AllocatorKind {
    /// Best-fit with coalescing over large regions (the default; fast, caches memory).
    Bfc,
    /// Every allocation goes straight to gpu-allocator and back on free: minimal footprint,
    /// slow. For debugging and for measuring what a program really needs.
    Platform,
}

/// The share of device memory the arena may hold, in XLA's grammar.
///
/// `"0.75"` reserves 75% and never grows; `"0.75+"` reserves 75% and may grow to 100%;
/// `"0.75-0.85"` reserves 75% and may grow to 85%.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemFraction {
    /// Fraction reserved up front (with preallocation on).
    pub reserve: f64,
    /// Fraction the arena may grow to; equal to `reserve` for a fixed fraction.
    pub limit: f64,
}

impl MemFraction {
    /// A fixed fraction: reserve and limit are the same.
    pub fn fixed(fraction: f64) -> Self {
        Self {
            reserve: fraction,
            limit: fraction,
        }
    }

    /// Parses XLA's fraction grammar (`"0.75"`, `"0.75+"`, `"0.75-0.85"`).
    ///
    /// Errors name the grammar; fractions must lie in `(0, 1]` and the limit must not be below
    /// the reserve.
    pub fn parse(text: &str) -> std::result::Result<Self, String> {
        let text = text.trim();
        let number = |s: &str| -> std::result::Result<f64, String> {
            let v: f64 = s
                .trim()
                .parse()
                .map_err(|_| format!("'{s}' is not a number"))?;
            if !(v > 0.0 && v <= 1.0) {
                return Err(format!("{v} is not in (0, 1]"));
            }
            Ok(v)
        };
        let fraction = if let Some(base) = text.strip_suffix('+') {
            Self {
                reserve: number(base)?,
                limit: 1.0,
            }
        } else if let Some((base, cap)) = text.split_once('-') {
            Self {
                reserve: number(base)?,
                limit: number(cap)?,
            }
        } else {
            Self::fixed(number(text)?)
        };
        if fraction.limit < fraction.reserve {
            return Err(format!(
                "the limit {} is below the reserve {}",
                fraction.limit, fraction.reserve
            ));
        }
        Ok(fraction)
    }
}

impl Default for MemFraction {
    fn default() -> Self {
        Self::fixed(DEFAULT_MEM_FRACTION)
    }
}

impl std::fmt::Display for MemFraction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.limit == self.reserve {
            write!(f, "{}", self.reserve)
        } else if self.limit == 1.0 {
            write!(f, "{}+", self.reserve)
        } else {
            write!(f, "{}-{}", self.reserve, self.limit)
        }
    }
}

/// Which adapter to open, as `GPU_ARENA_ADAPTER`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdapterSelector {
    /// The n-th adapter in wgpu's enumeration order.
    Index(usize),
    /// The first adapter whose name contains this text, ignoring case.
    NameContains(String),
}

/// Which wgpu backend to use, as `GPU_ARENA_BACKEND`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendChoice {
    /// Vulkan if any Vulkan adapter exists, otherwise any other backend (the default).
    Auto,
    /// Vulkan only: memory comes from gpu-allocator under the vendor-aware policy.
    Vulkan,
    /// OpenGL / GLES (through Mesa on machines without a Vulkan driver).
    Gl,
    /// Metal (macOS).
    Metal,
    /// Direct3D 12 (Windows).
    Dx12,
}

impl BackendChoice {
    /// The wgpu backends this choice enables.
    pub fn backends(self) -> wgpu::Backends {
        match self {
            Self::Auto => wgpu::Backends::all(),
            Self::Vulkan => wgpu::Backends::VULKAN,
            Self::Gl => wgpu::Backends::GL,
            Self::Metal => wgpu::Backends::METAL,
            Self::Dx12 => wgpu::Backends::DX12,
        }
    }
}

/// Everything that decides how gpu-arena takes and hands out device memory.
///
/// `ArenaConfig::default()` is JAX's default: a BFC arena that reserves 75% of device memory
/// at the first allocation. [`ArenaConfig::from_env`] reads the table in the module docs.
#[derive(Clone, Debug, PartialEq)]
pub struct ArenaConfig {
    /// Reserve `mem_fraction.reserve` of device memory at the first allocation (default `true`).
    /// Off: the arena starts empty and grows region by region up to `mem_fraction.limit`.
    pub preallocate: bool,
    /// Share of the device-local heap to reserve / grow to (default `0.75`).
    pub mem_fraction: MemFraction,
    /// BFC arena or platform pass-through (default [`AllocatorKind::Bfc`]).
    pub allocator: AllocatorKind,
    /// Upper bound on one region's size in bytes; `None` uses the device's own limits
    /// (`max_buffer_size`, `maxMemoryAllocationSize`).
    pub max_region_bytes: Option<u64>,
    /// Which adapter to open; `None` picks discrete > integrated > CPU.
    pub adapter: Option<AdapterSelector>,
    /// Which wgpu backend to use (default [`BackendChoice::Auto`]).
    pub backend: BackendChoice,
    /// Use zero-copy transfers when the arena's memory is host-visible (UMA). Default `true`;
    /// `false` forces the staging path that discrete GPUs take.
    pub zero_copy: bool,
    /// Size of the reusable staging pool in bytes (default 64 MiB).
    pub staging_bytes: u64,
    /// Turn on wgpu's validation (the Khronos layer on Vulkan, when installed). Default `false`.
    pub validation: bool,
    /// Device memory assumed where the backend cannot report it (non-Vulkan), default 1 GiB.
    pub fallback_device_memory_bytes: u64,
    /// Transfer-guard levels per direction (default: allow everything), from
    /// `GPU_ARENA_TRANSFER_GUARD*` / `JAX_TRANSFER_GUARD*`; scoped guards override them.
    pub transfer_guard: TransferGuardLevels,
    /// Events the memory timeline keeps (a ring: the newest win). Default 0: off, costing
    /// nothing. `GPU_ARENA_TIMELINE` takes a count, or `on` for
    /// [`crate::profile::DEFAULT_TIMELINE_CAPACITY`].
    pub timeline_capacity: usize,
    /// A directory where an out-of-memory error writes the memory snapshot and the HTML report
    /// (named in the error message). Default `None`; `GPU_ARENA_DUMP_ON_OOM=<dir>`.
    pub dump_on_oom: Option<std::path::PathBuf>,
}

impl Default for ArenaConfig {
    fn default() -> Self {
        Self {
            preallocate: true,
            mem_fraction: MemFraction::default(),
            allocator: AllocatorKind::Bfc,
            max_region_bytes: None,
            adapter: None,
            backend: BackendChoice::Auto,
            zero_copy: true,
            staging_bytes: DEFAULT_STAGING_BYTES,
            validation: false,
            fallback_device_memory_bytes: DEFAULT_FALLBACK_DEVICE_MEMORY_BYTES,
            transfer_guard: TransferGuardLevels::default(),
            timeline_capacity: 0,
            dump_on_oom: None,
        }
    }
}

impl ArenaConfig {
    /// The defaults overridden by the process environment (see the module docs for the names).
    ///
    /// A bad value is an error that names the variable and what it accepts.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Like [`ArenaConfig::from_env`], with variables looked up through `lookup` (for tests and
    /// for programs that keep their settings elsewhere).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let env = EnvReader { lookup: &lookup };
        let mut config = Self::default();
        if let Some((var, value)) =
            env.first(&["GPU_ARENA_PREALLOCATE", "XLA_PYTHON_CLIENT_PREALLOCATE"])?
        {
            config.preallocate = parse_bool(&var, &value)?;
        }
        if let Some((var, value)) = env.first(&[
            "GPU_ARENA_MEM_FRACTION",
            "XLA_CLIENT_MEM_FRACTION",
            "XLA_PYTHON_CLIENT_MEM_FRACTION",
        ])? {
            config.mem_fraction = MemFraction::parse(&value).map_err(|why| Error::Config {
                variable: var.clone(),
                value: value.clone(),
                expected: format!(
                    "a fraction in (0, 1] as \"0.75\", \"0.75+\" or \"0.75-0.85\" ({why})"
                ),
            })?;
        }
        if let Some((var, value)) =
            env.first(&["GPU_ARENA_ALLOCATOR", "XLA_PYTHON_CLIENT_ALLOCATOR"])?
        {
            config.allocator = match value.trim().to_ascii_lowercase().as_str() {
                "bfc" | "default" => AllocatorKind::Bfc,
                "platform" => AllocatorKind::Platform,
                _ => {
                    return Err(Error::Config {
                        variable: var,
                        value,
                        expected: "\"bfc\" or \"platform\"".into(),
                    })
                }
            };
        }
        if let Some((var, value)) = env.first(&["GPU_ARENA_MAX_REGION_MB"])? {
            config.max_region_bytes = Some(parse_mib(&var, &value)?);
        }
        if let Some((_, value)) = env.first(&["GPU_ARENA_ADAPTER"])? {
            let value = value.trim();
            config.adapter = Some(match value.parse::<usize>() {
                Ok(index) => AdapterSelector::Index(index),
                Err(_) => AdapterSelector::NameContains(value.to_string()),
            });
        }
        if let Some((var, value)) = env.first(&["GPU_ARENA_BACKEND"])? {
            config.backend = match value.trim().to_ascii_lowercase().as_str() {
                "auto" | "" => BackendChoice::Auto,
                "vulkan" | "vk" => BackendChoice::Vulkan,
                "gl" | "gles" | "opengl" => BackendChoice::Gl,
                "metal" => BackendChoice::Metal,
                "dx12" | "d3d12" => BackendChoice::Dx12,
                _ => {
                    return Err(Error::Config {
                        variable: var,
                        value,
                        expected: "one of auto, vulkan, gl, metal, dx12".into(),
                    })
                }
            };
        }
        if let Some((var, value)) = env.first(&["GPU_ARENA_ZERO_COPY"])? {
            config.zero_copy = parse_bool(&var, &value)?;
        }
        if let Some((var, value)) = env.first(&["GPU_ARENA_STAGING_MB"])? {
            config.staging_bytes = parse_mib(&var, &value)?;
        }
        if let Some((var, value)) = env.first(&["GPU_ARENA_VALIDATION"])? {
            config.validation = parse_bool(&var, &value)?;
        }
        if let Some((var, value)) = env.first(&["GPU_ARENA_DEVICE_MEMORY_MB"])? {
            config.fallback_device_memory_bytes = parse_mib(&var, &value)?;
        }
        config.transfer_guard = TransferGuardLevels::from_lookup(&lookup)?;
        if let Some((var, value)) = env.first(&["GPU_ARENA_TIMELINE"])? {
            config.timeline_capacity = parse_timeline(&var, &value)?;
        }
        if let Some((_, value)) = env.first(&["GPU_ARENA_DUMP_ON_OOM"])? {
            let dir = value.trim();
            config.dump_on_oom = (!dir.is_empty()).then(|| dir.into());
        }
        Ok(config)
    }
}

/// Reads one setting that may be spelled several ways: our name first, then JAX's aliases.
struct EnvReader<'a> {
    lookup: &'a dyn Fn(&str) -> Option<String>,
}

impl EnvReader<'_> {
    /// The first name in `names` that is set (ours win); aliases after the first name must agree
    /// with each other when ours is unset.
    fn first(&self, names: &[&str]) -> Result<Option<(String, String)>> {
        let (ours, aliases) = names.split_first().expect("at least one name");
        if let Some(value) = (self.lookup)(ours) {
            return Ok(Some((ours.to_string(), value)));
        }
        let mut found: Option<(String, String)> = None;
        for alias in aliases {
            if let Some(value) = (self.lookup)(alias) {
                match &found {
                    Some((first, first_value)) if first_value.trim() != value.trim() => {
                        return Err(Error::ConflictingEnv {
                            first: format!("{first}={first_value}"),
                            second: format!("{alias}={value}"),
                        })
                    }
                    Some(_) => {}
                    None => found = Some((alias.to_string(), value)),
                }
            }
        }
        Ok(found)
    }
}

/// JAX's reading of booleans: `false`, `False`, `0` (and `no`, `off`) mean off.
fn parse_bool(var: &str, value: &str) -> Result<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(Error::Config {
            variable: var.into(),
            value: value.into(),
            expected: "true/false (also 1/0, yes/no, on/off)".into(),
        }),
    }
}

/// `on`/`true`/`yes`/`1` mean the default capacity (a one-event ring would be useless, so 1
/// reads as JAX's "true"); `off`/`false`/`no`/`0` mean off; any other number is a capacity.
fn parse_timeline(var: &str, value: &str) -> Result<usize> {
    match value.trim().to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" | "1" => Ok(crate::profile::DEFAULT_TIMELINE_CAPACITY),
        "off" | "false" | "no" | "0" | "" => Ok(0),
        number => number.parse::<usize>().map_err(|_| Error::Config {
            variable: var.into(),
            value: value.into(),
            expected: "on/off or a number of events".into(),
        }),
    }
}

fn parse_mib(var: &str, value: &str) -> Result<u64> {
    value
        .trim()
        .parse::<u64>()
        .ok()
        .filter(|&mib| mib > 0)
        .map(|mib| mib << 20)
        .ok_or_else(|| Error::Config {
            variable: var.into(),
            value: value.into(),
            expected: "a whole number of MiB greater than 0".into(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn config_from(pairs: &[(&str, &str)]) -> Result<ArenaConfig> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        ArenaConfig::from_lookup(|name| map.get(name).cloned())
    }

    #[test]
    fn fraction_grammar_covers_fixed_plus_and_range() {
        assert_eq!(
            MemFraction::parse("0.75").unwrap(),
            MemFraction::fixed(0.75)
        );
        assert_eq!(
            MemFraction::parse("0.5+").unwrap(),
            MemFraction {
                reserve: 0.5,
                limit: 1.0
            }
        );
        assert_eq!(
            MemFraction::parse("0.75-0.85").unwrap(),
            MemFraction {
                reserve: 0.75,
                limit: 0.85
            }
        );
        assert!(MemFraction::parse("0.9-0.8").unwrap_err().contains("below"));
        assert!(MemFraction::parse("1.5").unwrap_err().contains("(0, 1]"));
        assert!(MemFraction::parse("abc")
            .unwrap_err()
            .contains("not a number"));
        assert_eq!(
            MemFraction::parse("0.75-0.85").unwrap().to_string(),
            "0.75-0.85"
        );
        assert_eq!(MemFraction::parse("0.6+").unwrap().to_string(), "0.6+");
    }

    #[test]
    fn empty_environment_gives_jax_defaults() {
        let config = config_from(&[]).unwrap();
        assert_eq!(config, ArenaConfig::default());
        assert!(config.preallocate);
        assert_eq!(config.mem_fraction, MemFraction::fixed(0.75));
        assert_eq!(config.allocator, AllocatorKind::Bfc);
    }

    #[test]
    fn jax_false_spellings_turn_preallocation_off() {
        for spelling in ["false", "False", "0"] {
            let config = config_from(&[("XLA_PYTHON_CLIENT_PREALLOCATE", spelling)]).unwrap();
            assert!(!config.preallocate, "{spelling}");
        }
    }

    #[test]
    fn our_names_win_over_jax_aliases() {
        let config = config_from(&[
            ("GPU_ARENA_MEM_FRACTION", "0.5"),
            ("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.9"),
        ])
        .unwrap();
        assert_eq!(config.mem_fraction, MemFraction::fixed(0.5));
    }

    #[test]
    fn disagreeing_aliases_are_an_error_naming_both() {
        let err = config_from(&[
            ("XLA_CLIENT_MEM_FRACTION", "0.5"),
            ("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.9"),
        ])
        .unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("XLA_CLIENT_MEM_FRACTION=0.5"), "{msg}");
        assert!(msg.contains("XLA_PYTHON_CLIENT_MEM_FRACTION=0.9"), "{msg}");
        // Agreeing aliases are fine.
        let ok = config_from(&[
            ("XLA_CLIENT_MEM_FRACTION", "0.5"),
            ("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.5"),
        ])
        .unwrap();
        assert_eq!(ok.mem_fraction, MemFraction::fixed(0.5));
    }

    #[test]
    fn bad_values_name_the_variable_and_accepted_values() {
        let msg = config_from(&[("GPU_ARENA_ALLOCATOR", "cuda_async")])
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("GPU_ARENA_ALLOCATOR") && msg.contains("platform"),
            "{msg}"
        );
        let msg = config_from(&[("GPU_ARENA_PREALLOCATE", "maybe")])
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("GPU_ARENA_PREALLOCATE") && msg.contains("true/false"),
            "{msg}"
        );
        let msg = config_from(&[("XLA_PYTHON_CLIENT_MEM_FRACTION", "2")])
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("XLA_PYTHON_CLIENT_MEM_FRACTION") && msg.contains("0.75+"),
            "{msg}"
        );
        let msg = config_from(&[("GPU_ARENA_BACKEND", "cuda")])
            .unwrap_err()
            .to_string();
        assert!(msg.contains("vulkan"), "{msg}");
        let msg = config_from(&[("GPU_ARENA_STAGING_MB", "-3")])
            .unwrap_err()
            .to_string();
        assert!(msg.contains("GPU_ARENA_STAGING_MB"), "{msg}");
    }

    #[test]
    fn every_knob_is_read_from_its_variable() {
        let config = config_from(&[
            ("GPU_ARENA_ALLOCATOR", "platform"),
            ("GPU_ARENA_MAX_REGION_MB", "64"),
            ("GPU_ARENA_ADAPTER", "llvmpipe"),
            ("GPU_ARENA_BACKEND", "vulkan"),
            ("GPU_ARENA_ZERO_COPY", "off"),
            ("GPU_ARENA_STAGING_MB", "8"),
            ("GPU_ARENA_VALIDATION", "1"),
            ("GPU_ARENA_DEVICE_MEMORY_MB", "512"),
            ("GPU_ARENA_MEM_FRACTION", "0.5-0.6"),
        ])
        .unwrap();
        assert_eq!(config.allocator, AllocatorKind::Platform);
        assert_eq!(config.max_region_bytes, Some(64 << 20));
        assert_eq!(
            config.adapter,
            Some(AdapterSelector::NameContains("llvmpipe".into()))
        );
        assert_eq!(config.backend, BackendChoice::Vulkan);
        assert!(!config.zero_copy);
        assert_eq!(config.staging_bytes, 8 << 20);
        assert!(config.validation);
        assert_eq!(config.fallback_device_memory_bytes, 512 << 20);
        assert_eq!(config.mem_fraction.limit, 0.6);
        let config = config_from(&[("GPU_ARENA_ADAPTER", "1")]).unwrap();
        assert_eq!(config.adapter, Some(AdapterSelector::Index(1)));
    }

    #[test]
    fn timeline_and_oom_dump_are_off_unless_asked_for() {
        let config = config_from(&[]).unwrap();
        assert_eq!(config.timeline_capacity, 0);
        assert_eq!(config.dump_on_oom, None);
        let config = config_from(&[
            ("GPU_ARENA_TIMELINE", "on"),
            ("GPU_ARENA_DUMP_ON_OOM", "/tmp/oom"),
        ])
        .unwrap();
        assert_eq!(
            config.timeline_capacity,
            crate::profile::DEFAULT_TIMELINE_CAPACITY
        );
        assert_eq!(config.dump_on_oom, Some("/tmp/oom".into()));
        let config = config_from(&[("GPU_ARENA_TIMELINE", "5000")]).unwrap();
        assert_eq!(config.timeline_capacity, 5000);
        let config = config_from(&[("GPU_ARENA_TIMELINE", "off")]).unwrap();
        assert_eq!(config.timeline_capacity, 0);
        let msg = config_from(&[("GPU_ARENA_TIMELINE", "lots")])
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("GPU_ARENA_TIMELINE") && msg.contains("number of events"),
            "{msg}"
        );
    }
}
