//! Reading the configuration from the environment (or any lookup): the variables of the table
//! in the module docs, each parsed and then checked by the rules of `validate.rs`.
//!
//! Every variable is read as an `OsString`, so a value that is not UTF-8 is an error naming
//! the variable rather than a variable that looks unset; a blank value is refused too (unset
//! the variable to get the default).

use super::arena_config::{
    AdapterSelector, AllocatorKind, ArenaConfig, BackendChoice, BarWrites,
    DEFAULT_TIMELINE_CAPACITY,
};
use super::mem_fraction::MemFraction;
use super::validate::{
    binding_bytes_expected, workgroups_expected, ByteKnob, FALLBACK_MEMORY, MAX_REGION,
    MAX_TIMELINE_CAPACITY, MIB, MIN_KERNEL_BINDING_BYTES, PINNED_HOST, STAGING,
};
use crate::error::{Error, Result};
use crate::guard_levels::{TransferDirection, TransferGuardLevel, TransferGuardLevels};
use crate::kernel_tuning::{KernelShape, KernelTuning};
use std::ffi::OsString;
use std::path::PathBuf;

impl ArenaConfig {
    /// The defaults overridden by the process environment (see the module docs for the names).
    ///
    /// A bad value is an error that names the variable and what it accepts: text that is not
    /// UTF-8, a blank value, a word or number out of range (`*_MB` sizes whose bytes overflow
    /// 64 bits included).
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|name| std::env::var_os(name))
    }

    /// Like [`ArenaConfig::from_env`], with variables looked up through `lookup` (for tests and
    /// for programs that keep their settings elsewhere). `lookup` returns `None` for a variable
    /// that is unset, else its value (`String`, `&str` or `OsString`).
    pub fn from_lookup<V: Into<OsString>>(lookup: impl Fn(&str) -> Option<V>) -> Result<Self> {
        let lookup = |name: &str| lookup(name).map(Into::into);
        let env = EnvReader { lookup: &lookup };
        let mut config = Self::default();
        if let Some(preallocate) = env.read(
            &["GPU_ARENA_PREALLOCATE", "XLA_PYTHON_CLIENT_PREALLOCATE"],
            parse_bool,
        )? {
            config.preallocate = preallocate;
        }
        // JAX's two spellings agree when they name the same fraction (`0.5` and `5e-1`).
        let fraction_names = [
            "GPU_ARENA_MEM_FRACTION",
            "XLA_CLIENT_MEM_FRACTION",
            "XLA_PYTHON_CLIENT_MEM_FRACTION",
        ];
        if let Some(mem_fraction) = env.read(&fraction_names, parse_mem_fraction)? {
            config.mem_fraction = mem_fraction;
        }
        if let Some(allocator) = env.read(
            &["GPU_ARENA_ALLOCATOR", "XLA_PYTHON_CLIENT_ALLOCATOR"],
            parse_allocator,
        )? {
            config.allocator = allocator;
        }
        if let Some(max_region_bytes) = env.read(&[MAX_REGION.variable], |var, value| {
            parse_mib(&MAX_REGION, var, value)
        })? {
            config.max_region_bytes = Some(max_region_bytes);
        }
        if let Some(adapter) = env.read(&["GPU_ARENA_ADAPTER"], parse_adapter)? {
            config.adapter = Some(adapter);
        }
        if let Some(backend) = env.read(&["GPU_ARENA_BACKEND"], parse_backend)? {
            config.backend = backend;
        }
        if let Some(zero_copy) = env.read(&["GPU_ARENA_ZERO_COPY"], parse_bool)? {
            config.zero_copy = zero_copy;
        }
        if let Some(bar_writes) = env.read(&["GPU_ARENA_BAR_WRITES"], parse_bar_writes)? {
            config.bar_writes = bar_writes;
        }
        if let Some(force_non_coherent) = env.read(&["GPU_ARENA_FORCE_NONCOHERENT"], parse_bool)? {
            config.force_non_coherent = force_non_coherent;
        }
        if let Some(force_device_kernels) =
            env.read(&["GPU_ARENA_FORCE_DEVICE_KERNELS"], parse_bool)?
        {
            config.force_device_kernels = force_device_kernels;
        }
        if let Some(force_pass_per_timed_dispatch) =
            env.read(&["GPU_ARENA_FORCE_PASS_PER_TIMED_DISPATCH"], parse_bool)?
        {
            config.force_pass_per_timed_dispatch = force_pass_per_timed_dispatch;
        }
        if let Some(strict_starts) = env.read(&["GPU_ARENA_STRICT_STARTS"], parse_bool)? {
            config.strict_starts = strict_starts;
        }
        if let Some(kernel_tuning) = env.read(&["GPU_ARENA_KERNEL_TUNING"], parse_kernel_tuning)? {
            config.kernel_tuning = kernel_tuning;
        }
        if let Some(max_binding_bytes) = env
            .read(&["GPU_ARENA_MAX_BINDING_BYTES"], |var, value| {
                parse_count(var, value, MIN_KERNEL_BINDING_BYTES, binding_bytes_expected)
            })?
        {
            config.max_binding_bytes = Some(max_binding_bytes);
        }
        if let Some(max_workgroups_per_dimension) = env.read(
            &["GPU_ARENA_MAX_WORKGROUPS_PER_DIMENSION"],
            parse_workgroups,
        )? {
            config.max_workgroups_per_dimension = Some(max_workgroups_per_dimension);
        }
        if let Some(staging_bytes) = env.read(&[STAGING.variable], |var, value| {
            parse_mib(&STAGING, var, value)
        })? {
            config.staging_bytes = staging_bytes;
        }
        if let Some(pinned_host_bytes) = env.read(&[PINNED_HOST.variable], |var, value| {
            parse_mib(&PINNED_HOST, var, value)
        })? {
            config.pinned_host_bytes = Some(pinned_host_bytes);
        }
        if let Some(validation) = env.read(&["GPU_ARENA_VALIDATION"], parse_bool)? {
            config.validation = validation;
        }
        if let Some(fallback_device_memory_bytes) = env
            .read(&[FALLBACK_MEMORY.variable], |var, value| {
                parse_mib(&FALLBACK_MEMORY, var, value)
            })?
        {
            config.fallback_device_memory_bytes = fallback_device_memory_bytes;
        }
        config.transfer_guard = TransferGuardLevels::read(&env)?;
        if let Some(timeline_capacity) = env.read(&["GPU_ARENA_TIMELINE"], parse_timeline)? {
            config.timeline_capacity = timeline_capacity;
        }
        if let Some(kernel_times) = env.read(&["GPU_ARENA_KERNEL_TIMES"], parse_bool)? {
            config.kernel_times = kernel_times;
        }
        if let Some(dump_on_oom) = env.read(&["GPU_ARENA_DUMP_ON_OOM"], parse_dump_directory)? {
            config.dump_on_oom = Some(dump_on_oom);
        }
        // Two variables that contradict each other are named by the variable.
        if config.bar_writes == BarWrites::On && !config.zero_copy {
            return Err(super::validate::bar_writes_without_zero_copy(
                "GPU_ARENA_BAR_WRITES",
            ));
        }
        // Each value was checked above under its variable's name; this is the same set of
        // rules `Context::new` applies, so nothing read here can be refused there.
        config.validate()?;
        Ok(config)
    }
}

impl TransferGuardLevels {
    /// Levels from the process environment (see the module docs); unset means `allow`.
    ///
    /// Errors: a value that is not one of the levels (or not UTF-8), naming the variable.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|name| std::env::var_os(name))
    }

    /// Like [`TransferGuardLevels::from_env`] through a lookup function. A direction's level
    /// comes from its own variable where one is set (`GPU_ARENA_TRANSFER_GUARD_<DIRECTION>`,
    /// else `JAX_TRANSFER_GUARD_<DIRECTION>`), else from the all-directions one
    /// (`GPU_ARENA_TRANSFER_GUARD`, else `JAX_TRANSFER_GUARD`): the scope decides first, then
    /// ours win over JAX's, so `JAX_TRANSFER_GUARD_HOST_TO_DEVICE` overrides
    /// `GPU_ARENA_TRANSFER_GUARD` for uploads.
    pub fn from_lookup<V: Into<OsString>>(lookup: impl Fn(&str) -> Option<V>) -> Result<Self> {
        let lookup = |name: &str| lookup(name).map(Into::into);
        Self::read(&EnvReader { lookup: &lookup })
    }

    fn read(env: &EnvReader<'_>) -> Result<Self> {
        let level = |names: [&str; 2]| {
            env.read(&names, |var, value| {
                TransferGuardLevel::parse(value)
                    .ok_or_else(|| refuse(var, value, TransferGuardLevel::SPELLINGS))
            })
        };
        let base = level(["GPU_ARENA_TRANSFER_GUARD", "JAX_TRANSFER_GUARD"])?.unwrap_or_default();
        let mut levels = Self::all(base);
        for direction in TransferDirection::ALL {
            let suffix = direction.env_suffix();
            let ours = format!("GPU_ARENA_TRANSFER_GUARD_{suffix}");
            let jax = format!("JAX_TRANSFER_GUARD_{suffix}");
            if let Some(level) = level([&ours, &jax])? {
                levels.set(direction, level);
            }
        }
        Ok(levels)
    }
}

/// Reads one setting that may be spelled several ways: our name first, then JAX's aliases.
struct EnvReader<'a> {
    lookup: &'a dyn Fn(&str) -> Option<OsString>,
}

impl EnvReader<'_> {
    /// The value of `name` as text: `None` when unset, an error naming it when not UTF-8.
    fn get(&self, name: &str) -> Result<Option<String>> {
        match (self.lookup)(name) {
            None => Ok(None),
            Some(value) => value
                .into_string()
                .map(Some)
                .map_err(|value| Error::Config {
                    variable: name.into(),
                    value: value.to_string_lossy().into_owned(),
                    expected:
                        "UTF-8 text (the value holds bytes that are not UTF-8, shown as \u{fffd})"
                            .into(),
                }),
        }
    }

    /// The first of `names` that is set, parsed by `parse(variable, value)`. Ours (the first
    /// name) wins; where it is unset, the aliases that are set must agree before any is read
    /// (as JAX refuses two spellings set together), by their text or by the value each
    /// parses to. Every name that is set must be UTF-8 and not blank, even one that another
    /// overrides: a leftover `XLA_...=` is refused as it would be alone.
    fn read<T: PartialEq>(
        &self,
        names: &[&str],
        parse: impl Fn(&str, &str) -> Result<T>,
    ) -> Result<Option<T>> {
        let mut set = Vec::with_capacity(names.len());
        for &name in names {
            if let Some(value) = self.get(name)? {
                set.push((name, value));
            }
        }
        if let Some(at) = set.iter().position(|(_, value)| value.trim().is_empty()) {
            let (blank, value) = &set[at];
            let accepts = match parse(blank, value) {
                Err(Error::Config { expected, .. }) => expected,
                _ => "a value".to_string(),
            };
            let remedy = match at {
                0 => ": unset the variable instead".to_string(),
                _ => format!(", even where {} is set", set[0].0),
            };
            return Err(refuse(
                blank,
                value,
                format!("{accepts}; a blank value is not read as unset{remedy}"),
            ));
        }
        let Some(((first, first_value), aliases)) = set.split_first() else {
            return Ok(None);
        };
        if *first != names[0] {
            for (alias, value) in aliases {
                let agree = value.trim() == first_value.trim()
                    || matches!(
                        (parse(first, first_value), parse(alias, value)),
                        (Ok(a), Ok(b)) if a == b
                    );
                if !agree {
                    return Err(Error::ConflictingEnv {
                        first: format!("{first}={first_value}"),
                        second: format!("{alias}={value}"),
                    });
                }
            }
        }
        parse(first, first_value).map(Some)
    }
}

/// The refusal of `value` for `var`, saying what the variable accepts.
fn refuse(var: &str, value: &str, expected: impl Into<String>) -> Error {
    Error::Config {
        variable: var.into(),
        value: value.into(),
        expected: expected.into(),
    }
}

/// JAX's reading of booleans: `false`, `False`, `0` (and `no`, `off`) mean off.
fn parse_bool(var: &str, value: &str) -> Result<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(refuse(var, value, "true/false (also 1/0, yes/no, on/off)")),
    }
}

/// A fraction of device memory in XLA's grammar (see [`MemFraction::parse`]).
fn parse_mem_fraction(var: &str, value: &str) -> Result<MemFraction> {
    if value.trim().is_empty() {
        return Err(refuse(var, value, super::mem_fraction::FRACTION_GRAMMAR));
    }
    MemFraction::parse(value).map_err(|why| {
        refuse(
            var,
            value,
            format!("{}: {why}", super::mem_fraction::FRACTION_GRAMMAR),
        )
    })
}

/// JAX's allocator names: `bfc` (or `default`) and `platform`, in any case.
fn parse_allocator(var: &str, value: &str) -> Result<AllocatorKind> {
    match value.trim().to_ascii_lowercase().as_str() {
        "bfc" | "default" => Ok(AllocatorKind::Bfc),
        "platform" => Ok(AllocatorKind::Platform),
        _ => Err(refuse(var, value, "bfc (or default) or platform")),
    }
}

/// A wgpu backend by its common names (`vk`, `gles`, `d3d12` and so on), or `auto`.
fn parse_backend(var: &str, value: &str) -> Result<BackendChoice> {
    match value.trim().to_ascii_lowercase().as_str() {
        "auto" => Ok(BackendChoice::Auto),
        "vulkan" | "vk" => Ok(BackendChoice::Vulkan),
        "gl" | "gles" | "opengl" => Ok(BackendChoice::Gl),
        "metal" => Ok(BackendChoice::Metal),
        "dx12" | "d3d12" => Ok(BackendChoice::Dx12),
        _ => Err(refuse(
            var,
            value,
            "one of auto, vulkan (vk), gl (gles, opengl), metal, dx12 (d3d12)",
        )),
    }
}

/// `auto`, or a boolean spelling (as [`parse_bool`] reads them) for on and off.
fn parse_bar_writes(var: &str, value: &str) -> Result<BarWrites> {
    match value.trim().to_ascii_lowercase().as_str() {
        "auto" => Ok(BarWrites::Auto),
        "on" | "true" | "1" | "yes" => Ok(BarWrites::On),
        "off" | "false" | "0" | "no" => Ok(BarWrites::Off),
        _ => Err(refuse(var, value, "auto, on or off")),
    }
}

/// `on`, `cached`, `off` (boolean spellings too), or a kernel shape such as `128x8`.
fn parse_kernel_tuning(var: &str, value: &str) -> Result<KernelTuning> {
    match value.trim().to_ascii_lowercase().as_str() {
        "on" | "true" | "1" | "yes" => Ok(KernelTuning::On),
        "cached" => Ok(KernelTuning::Cached),
        "off" | "false" | "0" | "no" => Ok(KernelTuning::Off),
        shape => shape
            .parse::<KernelShape>()
            .map(KernelTuning::Forced)
            .map_err(|expected| {
                refuse(
                    var,
                    value,
                    format!("on, cached, off (or true/false, 1/0, yes/no), or {expected}"),
                )
            }),
    }
}

/// A count of workgroups per dimension: at least 1, and within `u32` (wgpu's type for it).
fn parse_workgroups(var: &str, value: &str) -> Result<u32> {
    let groups = parse_count(var, value, 1, workgroups_expected)?;
    u32::try_from(groups).map_err(|_| refuse(var, value, workgroups_expected()))
}

/// A directory path, trimmed; a blank one is refused (unset the variable for no dump).
fn parse_dump_directory(var: &str, value: &str) -> Result<PathBuf> {
    if value.trim().is_empty() {
        return Err(refuse(var, value, "a directory path (no dump when unset)"));
    }
    Ok(value.trim().into())
}

/// `on`/`true`/`yes`/`1` mean the default capacity (a one-event ring would be useless, so 1
/// reads as JAX's "true"); `off`/`false`/`no`/`0` mean off; any other number is a capacity up
/// to [`MAX_TIMELINE_CAPACITY`].
fn parse_timeline(var: &str, value: &str) -> Result<usize> {
    let capacity = match value.trim().to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" | "1" => Some(DEFAULT_TIMELINE_CAPACITY),
        "off" | "false" | "no" | "0" => Some(0),
        number => whole_number(number)
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n <= MAX_TIMELINE_CAPACITY),
    };
    capacity.ok_or_else(|| {
        let expected = format!(
            "on, off, or a number of events from 2 to {MAX_TIMELINE_CAPACITY} (the largest ring \
             gpu-arena makes; 1 reads as on and 0 as off, as booleans do)"
        );
        refuse(var, value, expected)
    })
}

/// A whole number of MiB, converted to bytes without wrapping and checked against the knob's
/// bounds; the error gives the range, the largest accepted value included.
fn parse_mib(knob: &ByteKnob, var: &str, value: &str) -> Result<u64> {
    whole_number(value.trim())
        .and_then(|mib| mib.checked_mul(MIB))
        .filter(|&bytes| bytes > 0 && knob.accepts(bytes))
        .ok_or_else(|| refuse(var, value, knob.expected_mib()))
}

/// `text` as a whole number when it is digits only: no sign (Rust's `parse` would take a
/// leading `+`), no unit, no spaces inside. Every numeric variable reads its number this way.
fn whole_number(text: &str) -> Option<u64> {
    text.bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| text.parse::<u64>().ok())
        .flatten()
}

/// A whole number of at least `min` (see [`whole_number`]), or the error that says what the
/// variable accepts.
fn parse_count(var: &str, value: &str, min: u64, expected: fn() -> String) -> Result<u64> {
    whole_number(value.trim())
        .filter(|&n| n >= min)
        .ok_or_else(|| refuse(var, value, expected()))
}

/// An index (digits only) or a part of a name (anything else that is not blank).
fn parse_adapter(var: &str, value: &str) -> Result<AdapterSelector> {
    let text = value.trim();
    let refused = || {
        refuse(
            var,
            value,
            format!(
                "an adapter index from 0 to {} or a part of an adapter's name (not blank)",
                usize::MAX
            ),
        )
    };
    if text.is_empty() {
        return Err(refused());
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        return whole_number(text)
            .and_then(|index| usize::try_from(index).ok())
            .map(AdapterSelector::Index)
            .ok_or_else(refused);
    }
    Ok(AdapterSelector::NameContains(text.to_string()))
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

    /// Asserts that `pairs` are refused with an [`Error::Config`] naming `var` and `value`,
    /// and returns what it says the variable accepts.
    #[track_caller]
    fn refused_naming(pairs: &[(&str, &str)], var: &str, value: &str) -> String {
        match config_from(pairs).unwrap_err() {
            Error::Config {
                variable,
                value: seen,
                expected,
            } => {
                assert_eq!((variable.as_str(), seen.as_str()), (var, value));
                expected
            }
            other => panic!("{var}={value}: {other:?}"),
        }
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
    fn aliases_that_spell_the_same_fraction_apart_agree_and_a_different_one_does_not() {
        for (a, b) in [
            ("0.5", "5e-1"),
            ("0.5+", "0.50+"),
            ("0.25-0.5", "2.5e-1-0.5"),
        ] {
            let ok = config_from(&[
                ("XLA_CLIENT_MEM_FRACTION", a),
                ("XLA_PYTHON_CLIENT_MEM_FRACTION", b),
            ])
            .unwrap_or_else(|e| panic!("{a} and {b}: {e}"));
            assert_eq!(ok.mem_fraction, MemFraction::parse(a).unwrap());
        }
        for (a, b) in [("0.5", "0.5+"), ("0.5", "0.50001"), ("0.5", "half")] {
            let err = config_from(&[
                ("XLA_CLIENT_MEM_FRACTION", a),
                ("XLA_PYTHON_CLIENT_MEM_FRACTION", b),
            ])
            .unwrap_err();
            assert!(
                matches!(err, Error::ConflictingEnv { ref second, .. } if *second == format!("XLA_PYTHON_CLIENT_MEM_FRACTION={b}")),
                "{a} and {b}: {err:?}"
            );
        }
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
            ("GPU_ARENA_PINNED_HOST_MB", "96"),
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
        assert_eq!(config.pinned_host_bytes, Some(96 << 20));
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
    fn kernel_tuning_reads_on_cached_off_and_shapes_and_names_bad_values() {
        use crate::kernel_tuning::{KernelShape, KernelTuning};
        assert_eq!(config_from(&[]).unwrap().kernel_tuning, KernelTuning::On);
        for (value, want) in [
            ("on", KernelTuning::On),
            (" Cached ", KernelTuning::Cached),
            ("OFF", KernelTuning::Off),
            ("0", KernelTuning::Off),
            (
                "128x8",
                KernelTuning::Forced(KernelShape {
                    workgroup: 128,
                    per_invocation: 8,
                }),
            ),
            (
                " 32X1 ",
                KernelTuning::Forced(KernelShape {
                    workgroup: 32,
                    per_invocation: 1,
                }),
            ),
        ] {
            let config = config_from(&[("GPU_ARENA_KERNEL_TUNING", value)]).unwrap();
            assert_eq!(config.kernel_tuning, want, "{value}");
            if let KernelTuning::Forced(shape) = want {
                assert_eq!(shape.to_string().parse::<KernelShape>(), Ok(shape));
            }
        }
        for bad in [
            "always", "256", "256x3", "48x4", "512x4", "x4", "256x", "-64x4", "256x4x1", "32 x 1",
        ] {
            match config_from(&[("GPU_ARENA_KERNEL_TUNING", bad)]) {
                Err(Error::Config {
                    variable,
                    value,
                    expected,
                }) => {
                    assert_eq!(
                        (variable.as_str(), value.as_str()),
                        ("GPU_ARENA_KERNEL_TUNING", bad)
                    );
                    assert!(
                        expected.starts_with(
                            "on, cached, off (or true/false, 1/0, yes/no), or a kernel shape"
                        ) && expected.contains("e.g. 256x4"),
                        "{expected}"
                    );
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    #[test]
    fn kernel_limits_and_device_kernels_are_read_and_bad_values_are_named() {
        let config = config_from(&[
            ("GPU_ARENA_FORCE_DEVICE_KERNELS", "on"),
            ("GPU_ARENA_FORCE_PASS_PER_TIMED_DISPATCH", "yes"),
            ("GPU_ARENA_MAX_BINDING_BYTES", "4096"),
            ("GPU_ARENA_MAX_WORKGROUPS_PER_DIMENSION", " 7 "),
        ])
        .unwrap();
        assert!(config.force_device_kernels);
        assert!(config.force_pass_per_timed_dispatch);
        assert!(!ArenaConfig::default().force_pass_per_timed_dispatch);
        assert_eq!(config.max_binding_bytes, Some(4096));
        assert_eq!(config.max_workgroups_per_dimension, Some(7));
        for (var, value) in [
            ("GPU_ARENA_MAX_BINDING_BYTES", "1023"),
            ("GPU_ARENA_MAX_BINDING_BYTES", "-4096"),
            ("GPU_ARENA_MAX_BINDING_BYTES", "+4096"),
            ("GPU_ARENA_MAX_BINDING_BYTES", "4k"),
            ("GPU_ARENA_MAX_BINDING_BYTES", "18446744073709551616"),
            ("GPU_ARENA_MAX_WORKGROUPS_PER_DIMENSION", "0"),
            ("GPU_ARENA_MAX_WORKGROUPS_PER_DIMENSION", "4294967296"),
            ("GPU_ARENA_FORCE_DEVICE_KERNELS", "sometimes"),
            ("GPU_ARENA_FORCE_PASS_PER_TIMED_DISPATCH", "per dispatch"),
        ] {
            refused_naming(&[(var, value)], var, value);
        }
    }

    #[test]
    fn every_number_is_digits_only_so_a_sign_is_refused_by_byte_sizes_and_the_timeline_too() {
        let config = config_from(&[
            ("GPU_ARENA_STAGING_MB", " 64 "),
            ("GPU_ARENA_TIMELINE", "4096"),
        ])
        .unwrap();
        assert_eq!(config.staging_bytes, 64 * MIB);
        assert_eq!(config.timeline_capacity, 4096);
        for var in [
            "GPU_ARENA_MAX_REGION_MB",
            "GPU_ARENA_DEVICE_MEMORY_MB",
            "GPU_ARENA_STAGING_MB",
            "GPU_ARENA_TIMELINE",
        ] {
            for value in ["+64", "-64", "6 4", "64MB", "0x40"] {
                refused_naming(&[(var, value)], var, value);
            }
        }
    }

    #[test]
    fn kernel_times_are_on_unless_turned_off() {
        assert!(config_from(&[]).unwrap().kernel_times);
        assert!(
            !config_from(&[("GPU_ARENA_KERNEL_TIMES", "off")])
                .unwrap()
                .kernel_times
        );
        let msg = config_from(&[("GPU_ARENA_KERNEL_TIMES", "later")])
            .unwrap_err()
            .to_string();
        assert!(msg.contains("GPU_ARENA_KERNEL_TIMES"), "{msg}");
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
        assert_eq!(config.timeline_capacity, DEFAULT_TIMELINE_CAPACITY);
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

    // Every variable with a value that is not UTF-8, or blank: tests/config_env.rs, through
    // the real process environment.

    #[cfg(unix)]
    #[test]
    fn an_alias_that_is_not_utf8_is_an_error_even_where_our_variable_wins() {
        use std::os::unix::ffi::OsStringExt;
        let error = ArenaConfig::from_lookup(|name| match name {
            "GPU_ARENA_MEM_FRACTION" => Some(OsString::from("0.5")),
            "XLA_PYTHON_CLIENT_MEM_FRACTION" => Some(OsString::from_vec(vec![0xc3])),
            _ => None,
        })
        .unwrap_err();
        let msg = error.to_string();
        assert!(msg.starts_with("XLA_PYTHON_CLIENT_MEM_FRACTION"), "{msg}");
        assert!(msg.contains("not UTF-8"), "{msg}");
    }

    #[test]
    fn a_blank_alias_is_an_error_even_where_another_variable_wins() {
        for (ours, alias) in [
            ("GPU_ARENA_PREALLOCATE", "XLA_PYTHON_CLIENT_PREALLOCATE"),
            ("GPU_ARENA_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION"),
            ("XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION"),
            ("GPU_ARENA_TRANSFER_GUARD", "JAX_TRANSFER_GUARD"),
        ] {
            let good = if ours.contains("GUARD") { "log" } else { "0.5" };
            let good = if ours.contains("PREALLOCATE") {
                "false"
            } else {
                good
            };
            assert!(config_from(&[(ours, good)]).is_ok(), "{ours}={good}");
            for blank in ["", "  "] {
                let expected = refused_naming(&[(ours, good), (alias, blank)], alias, blank);
                assert!(expected.contains(ours), "{expected}");
            }
        }
    }

    #[test]
    fn a_blank_alias_is_refused_as_blank_not_as_a_disagreement() {
        let (first, second) = ("XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION");
        // Either alias blank: refused naming it, with the grammar and the remedy that works.
        for blank in ["", "  "] {
            let expected = refused_naming(&[(first, blank), (second, "0.5")], first, blank);
            assert!(
                expected.starts_with(super::super::mem_fraction::FRACTION_GRAMMAR)
                    && expected.ends_with(
                        "a blank value is not read as unset: unset the variable instead"
                    ),
                "{expected}"
            );
            let expected = refused_naming(&[(first, "0.5"), (second, blank)], second, blank);
            assert!(
                expected.ends_with(&format!("even where {first} is set")),
                "{expected}"
            );
        }
        let unset = config_from(&[(second, "0.5")]).unwrap();
        assert_eq!(unset.mem_fraction, MemFraction::fixed(0.5));
    }

    #[test]
    fn mib_values_whose_bytes_overflow_are_refused_with_the_largest_accepted_value() {
        let largest = u64::MAX >> 20;
        for value in [
            "17592186044416",       // 2^44: 2^64 bytes, which wrapped to 0
            "18446744073709551615", // u64::MAX, which wrapped
            "18446744073709551616", // not even a u64
        ] {
            for variable in ["GPU_ARENA_MAX_REGION_MB", "GPU_ARENA_DEVICE_MEMORY_MB"] {
                let expected = refused_naming(&[(variable, value)], variable, value);
                assert!(expected.contains(&format!("to {largest}")), "{expected}");
            }
        }
        let config = config_from(&[("GPU_ARENA_MAX_REGION_MB", &largest.to_string())]).unwrap();
        assert_eq!(config.max_region_bytes, Some(largest << 20));
        // Staging has a lower bound of its own, and says so.
        let expected = refused_naming(
            &[("GPU_ARENA_STAGING_MB", "4097")],
            "GPU_ARENA_STAGING_MB",
            "4097",
        );
        assert!(expected.contains("from 1 to 4096"), "{expected}");
        assert_eq!(
            config_from(&[("GPU_ARENA_STAGING_MB", "4096")])
                .unwrap()
                .staging_bytes,
            4 << 30
        );
        let msg = config_from(&[("GPU_ARENA_STAGING_MB", "0")])
            .unwrap_err()
            .to_string();
        assert!(msg.contains("GPU_ARENA_STAGING_MB"), "{msg}");
        // The pinned-host limit takes whole MiB, at least one.
        for value in ["0", "-1", "1.5", "17592186044416"] {
            refused_naming(
                &[("GPU_ARENA_PINNED_HOST_MB", value)],
                "GPU_ARENA_PINNED_HOST_MB",
                value,
            );
        }
    }

    #[test]
    fn a_timeline_larger_than_the_bound_is_refused_stating_the_bound() {
        for value in ["68719476736", "16777216", "18446744073709551616", "-1"] {
            let msg = config_from(&[("GPU_ARENA_TIMELINE", value)])
                .unwrap_err()
                .to_string();
            assert!(msg.starts_with("GPU_ARENA_TIMELINE"), "{msg}");
            assert!(msg.contains("16777215"), "{msg}");
        }
        let config = config_from(&[("GPU_ARENA_TIMELINE", "16777215")]).unwrap();
        assert_eq!(config.timeline_capacity, MAX_TIMELINE_CAPACITY);
    }

    #[test]
    fn an_adapter_index_too_large_for_usize_is_refused_not_taken_as_a_name() {
        let msg = config_from(&[("GPU_ARENA_ADAPTER", "99999999999999999999999")])
            .unwrap_err()
            .to_string();
        assert!(msg.starts_with("GPU_ARENA_ADAPTER"), "{msg}");
    }

    #[test]
    fn guard_env_reads_all_directions_then_per_direction_with_jax_aliases() {
        let levels = |pairs: &[(&str, &str)]| {
            let map: HashMap<&str, &str> = pairs.iter().copied().collect();
            TransferGuardLevels::from_lookup(|n| map.get(n).copied())
        };
        let read = levels(&[
            ("JAX_TRANSFER_GUARD", "disallow"),
            ("GPU_ARENA_TRANSFER_GUARD_DEVICE_TO_HOST", "log_explicit"),
            ("JAX_TRANSFER_GUARD_DEVICE_TO_DEVICE", "allow"),
        ])
        .unwrap();
        assert_eq!(read.host_to_device, TransferGuardLevel::Disallow);
        assert_eq!(read.device_to_host, TransferGuardLevel::LogExplicit);
        assert_eq!(read.device_to_device, TransferGuardLevel::Allow);
        let ours = levels(&[
            ("GPU_ARENA_TRANSFER_GUARD", "log"),
            ("JAX_TRANSFER_GUARD", "disallow"),
        ])
        .unwrap();
        assert_eq!(ours, TransferGuardLevels::all(TransferGuardLevel::Log));
        assert_eq!(levels(&[]).unwrap(), TransferGuardLevels::default());
        let msg = levels(&[("GPU_ARENA_TRANSFER_GUARD_HOST_TO_DEVICE", "never")])
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("GPU_ARENA_TRANSFER_GUARD_HOST_TO_DEVICE"),
            "{msg}"
        );
        assert!(msg.contains("disallow_explicit"), "{msg}");
    }
}
