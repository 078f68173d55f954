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
//! | [`ArenaConfig::bar_writes`] | `auto` (off for now) | `GPU_ARENA_BAR_WRITES` | |
//! | [`ArenaConfig::staging_bytes`] | 64 MiB | `GPU_ARENA_STAGING_MB` | |
//! | [`ArenaConfig::validation`] | `false` | `GPU_ARENA_VALIDATION` | |
//! | [`ArenaConfig::fallback_device_memory_bytes`] | 1 GiB | `GPU_ARENA_DEVICE_MEMORY_MB` | |
//! | [`ArenaConfig::transfer_guard`] | allow | `GPU_ARENA_TRANSFER_GUARD[_HOST_TO_DEVICE\|_DEVICE_TO_HOST\|_DEVICE_TO_DEVICE]` | `JAX_TRANSFER_GUARD[...]` |
//! | [`ArenaConfig::timeline_capacity`] | 0 (off) | `GPU_ARENA_TIMELINE` | |
//! | [`ArenaConfig::dump_on_oom`] | none | `GPU_ARENA_DUMP_ON_OOM` | |
//! | [`ArenaConfig::force_non_coherent`] | `false` (testing) | `GPU_ARENA_FORCE_NONCOHERENT` | |
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

/// Whether uploads write straight into device memory through a full Resizable BAR, as
/// `GPU_ARENA_BAR_WRITES` (`auto`, `on`, `off`).
///
/// With it on, the arena lives in the device-local host-visible memory type
/// ([`MemoryPlan::bar_type`](crate::memplan::MemoryPlan::bar_type)) and an upload is one
/// memcpy into the array's memory: no staging copy, no submission. Readbacks still go through
/// cached staging memory, never through the BAR (the CPU reads it a word at a time over PCIe).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BarWrites {
    /// Let gpu-arena decide (the default). For now that means **off** everywhere: whether a
    /// memcpy through the BAR beats staging and the copy engine has not been measured on a real
    /// GPU yet (`cargo run --release --example device_report` measures both on yours).
    #[default]
    Auto,
    /// Direct writes wherever the memory plan reports a full BAR on a discrete GPU
    /// ([`MemoryPlan::bar_write_candidates`](crate::memplan::MemoryPlan::bar_write_candidates));
    /// opening a context on a device with a small BAR or none is an error. On UMA devices (and
    /// lavapipe) it changes nothing: the arena is host-visible already and uploads are a
    /// memcpy anyway. Needs [`ArenaConfig::zero_copy`].
    On,
    /// Uploads to device-local memory always go through staging.
    Off,
}

impl BarWrites {
    /// Whether this setting turns direct writes on, `auto` resolved by the current rule
    /// (off until measured).
    pub fn enabled(self) -> bool {
        match self {
            Self::On => true,
            Self::Auto | Self::Off => false,
        }
    }
}

impl std::fmt::Display for BarWrites {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::On => "on",
            Self::Off => "off",
        })
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
    /// `false` forces the staging path that discrete GPUs take. Non-coherent memory is fine:
    /// host writes are flushed and host reads invalidated.
    pub zero_copy: bool,
    /// Direct writes into device memory on a full Resizable BAR (default [`BarWrites::Auto`],
    /// which is off until measured on real GPUs); `GPU_ARENA_BAR_WRITES`.
    pub bar_writes: BarWrites,
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
    /// Testing: treat every host-visible memory type as if it were not HOST_COHERENT, so every
    /// host access to mapped memory runs `vkFlushMappedMemoryRanges` /
    /// `vkInvalidateMappedMemoryRanges` (legal, and a no-op, on coherent memory). This runs
    /// the paths of Intel non-LLC, ARM and Apple GPUs on lavapipe under the validation layer.
    /// Default `false`; `GPU_ARENA_FORCE_NONCOHERENT`.
    pub force_non_coherent: bool,
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
            bar_writes: BarWrites::Auto,
            staging_bytes: DEFAULT_STAGING_BYTES,
            validation: false,
            fallback_device_memory_bytes: DEFAULT_FALLBACK_DEVICE_MEMORY_BYTES,
            transfer_guard: TransferGuardLevels::default(),
            timeline_capacity: 0,
            dump_on_oom: None,
            force_non_coherent: false,
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
        if let Some((var, value)) = env.first(&["GPU_ARENA_BAR_WRITES"])? {
            config.bar_writes = match value.trim().to_ascii_lowercase().as_str() {
                "auto" | "" => BarWrites::Auto,
                "on" | "true" | "1" | "yes" => BarWrites::On,
                "off" | "false" | "0" | "no" => BarWrites::Off,
                _ => {
                    return Err(Error::Config {
                        variable: var,
                        value,
                        expected: "auto, on or off".into(),
                    })
                }
            };
        }
        if let Some((var, value)) = env.first(&["GPU_ARENA_FORCE_NONCOHERENT"])? {
            config.force_non_coherent = parse_bool(&var, &value)?;
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
    fn bar_writes_read_auto_on_and_off_and_auto_means_off_for_now() {
        assert_eq!(config_from(&[]).unwrap().bar_writes, BarWrites::Auto);
        assert!(!BarWrites::Auto.enabled());
        for (value, want) in [
            ("auto", BarWrites::Auto),
            ("ON", BarWrites::On),
            ("true", BarWrites::On),
            (" off ", BarWrites::Off),
            ("0", BarWrites::Off),
        ] {
            let config = config_from(&[("GPU_ARENA_BAR_WRITES", value)]).unwrap();
            assert_eq!(config.bar_writes, want, "{value}");
        }
        assert!(BarWrites::On.enabled() && !BarWrites::Off.enabled());
        assert_eq!(BarWrites::On.to_string(), "on");
    }

    #[test]
    fn a_bad_bar_writes_value_names_the_variable_and_the_choices() {
        let msg = config_from(&[("GPU_ARENA_BAR_WRITES", "always")])
            .unwrap_err()
            .to_string();
        assert_eq!(
            msg,
            "GPU_ARENA_BAR_WRITES=\"always\" is not valid: expected auto, on or off"
        );
    }

    #[test]
    fn forcing_non_coherent_memory_is_off_unless_asked_for() {
        assert!(!config_from(&[]).unwrap().force_non_coherent);
        let config = config_from(&[("GPU_ARENA_FORCE_NONCOHERENT", "1")]).unwrap();
        assert!(config.force_non_coherent);
        let msg = config_from(&[("GPU_ARENA_FORCE_NONCOHERENT", "sometimes")])
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("GPU_ARENA_FORCE_NONCOHERENT") && msg.contains("true/false"),
            "{msg}"
        );
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
