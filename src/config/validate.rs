//! The rules a configuration must satisfy, in one place: [`ArenaConfig::validate`] applies them
//! to values set in code, and `env.rs` applies the same rules to values read from variables,
//! so a value is accepted or refused alike wherever it came from. Bounds are named constants
//! next to the reason for each.

use super::arena_config::{
    AdapterSelector, ArenaConfig, BarWrites, FORBIDDEN_ARRAY_USAGES, REQUIRED_ARRAY_USAGES,
};
use super::mem_fraction::FRACTION_GRAMMAR;
use crate::error::{flag_names, Error, Result};

/// Bytes in one MiB, the unit of the `*_MB` variables.
pub(crate) const MIB: u64 = 1 << 20;

/// The smallest `max_region_bytes`: one allocation of the arena's 256-byte granule (the cap is
/// rounded down to 256, so anything smaller would leave regions of no bytes).
pub const MIN_REGION_BYTES: u64 = 256;

/// The smallest staging buffer: one 4 KiB page. Smaller ones work but cut every transfer into
/// a copy command per few words.
pub const MIN_STAGING_BYTES: u64 = 4 << 10;

/// The largest staging buffer: 4 GiB, the `maxMemoryAllocationSize` of many Vulkan drivers.
/// The pool holds three buffers per direction, so this already asks for 24 GiB of
/// host-visible memory; a context also refuses sizes above its device's `max_buffer_size`.
pub const MAX_STAGING_BYTES: u64 = 4 << 30;

/// The smallest device memory to assume where the backend cannot report it: 1 MiB, the unit of
/// `GPU_ARENA_DEVICE_MEMORY_MB`; an arena over less holds next to nothing.
pub const MIN_FALLBACK_DEVICE_MEMORY_BYTES: u64 = MIB;

/// The most events a timeline keeps: 2^24 − 1, a ring of 2^24 slots of 64 bytes (1 GiB of
/// host memory, allocated when the context opens), 64 times the default.
pub const MAX_TIMELINE_CAPACITY: usize = (1 << 24) - 1;

/// The smallest [`ArenaConfig::max_binding_bytes`]: one 256-byte piece of an operand plus the
/// slack of rounding its binding out to the 256-byte offset alignment and to 16 bytes.
pub const MIN_KERNEL_BINDING_BYTES: u64 = 1024;

/// What `max_binding_bytes` and `GPU_ARENA_MAX_BINDING_BYTES` accept.
pub(crate) fn binding_bytes_expected() -> String {
    format!(
        "a number of bytes from {MIN_KERNEL_BINDING_BYTES} to {} (the device's limit applies when it is lower)",
        u64::MAX
    )
}

/// What `max_workgroups_per_dimension` and `GPU_ARENA_MAX_WORKGROUPS_PER_DIMENSION` accept.
pub(crate) fn workgroups_expected() -> String {
    format!(
        "a number of workgroups from 1 to {} (the device's limit applies when it is lower)",
        u32::MAX
    )
}

/// A knob holding a size in bytes, set in code in bytes and in its variable in MiB.
pub(crate) struct ByteKnob {
    /// The field of [`ArenaConfig`].
    pub(crate) field: &'static str,
    /// Its variable (in MiB).
    pub(crate) variable: &'static str,
    /// Fewest bytes accepted.
    pub(crate) min: u64,
    /// Most bytes accepted.
    pub(crate) max: u64,
    /// A further bound the device sets, for messages ("" for none).
    pub(crate) device_bound: &'static str,
}

/// [`ArenaConfig::max_region_bytes`].
pub(crate) const MAX_REGION: ByteKnob = ByteKnob {
    field: "max_region_bytes",
    variable: "GPU_ARENA_MAX_REGION_MB",
    min: MIN_REGION_BYTES,
    max: u64::MAX,
    device_bound: "",
};

/// [`ArenaConfig::staging_bytes`].
pub(crate) const STAGING: ByteKnob = ByteKnob {
    field: "staging_bytes",
    variable: "GPU_ARENA_STAGING_MB",
    min: MIN_STAGING_BYTES,
    max: MAX_STAGING_BYTES,
    device_bound: ", and at most the device's max_buffer_size",
};

/// [`ArenaConfig::pinned_host_bytes`].
pub(crate) const PINNED_HOST: ByteKnob = ByteKnob {
    field: "pinned_host_bytes",
    variable: "GPU_ARENA_PINNED_HOST_MB",
    min: MIN_REGION_BYTES,
    max: u64::MAX,
    device_bound: "",
};

/// The share of its heap the pinned-host kind may hold when
/// [`ArenaConfig::pinned_host_bytes`] is not set, in percent: on UMA what the device arena's
/// default 75% leaves of the same heap; on a discrete GPU a quarter of the system heap, leaving
/// the rest to the operating system and the app's own pages.
pub const DEFAULT_PINNED_HOST_PERCENT: u64 = 25;

/// [`ArenaConfig::fallback_device_memory_bytes`].
pub(crate) const FALLBACK_MEMORY: ByteKnob = ByteKnob {
    field: "fallback_device_memory_bytes",
    variable: "GPU_ARENA_DEVICE_MEMORY_MB",
    min: MIN_FALLBACK_DEVICE_MEMORY_BYTES,
    max: u64::MAX,
    device_bound: "",
};

impl ByteKnob {
    /// True when `bytes` is in range.
    pub(crate) fn accepts(&self, bytes: u64) -> bool {
        (self.min..=self.max).contains(&bytes)
    }

    /// The MiB counts the variable accepts: at least 1, and at most what fits the bounds (and
    /// 64 bits) once multiplied by 2^20.
    pub(crate) fn mib_range(&self) -> (u64, u64) {
        (self.min.div_ceil(MIB).max(1), self.max / MIB)
    }

    /// What the variable accepts, for its errors.
    pub(crate) fn expected_mib(&self) -> String {
        let (min, max) = self.mib_range();
        format!(
            "a whole number of MiB from {min} to {max} (the largest accepted value){}",
            self.device_bound
        )
    }

    /// Errors unless the field's `bytes` are in range.
    fn check_field(&self, bytes: u64) -> Result<()> {
        if self.accepts(bytes) {
            return Ok(());
        }
        Err(field_error(
            self.field,
            bytes.to_string(),
            format!(
                "a size {}{} (env {}: {})",
                match self.max {
                    u64::MAX => format!("of at least {} bytes", self.min),
                    max => format!("from {} to {max} bytes", self.min),
                },
                self.device_bound,
                self.variable,
                self.expected_mib()
            ),
        ))
    }
}

/// What `timeline_capacity` accepts (`GPU_ARENA_TIMELINE` reads on/off and 1 as well).
pub(crate) fn timeline_expected() -> String {
    format!(
        "a number of events from 0 (off) to {MAX_TIMELINE_CAPACITY} (the largest ring gpu-arena makes)"
    )
}

/// The error for a field set in code.
fn field_error(field: &str, value: String, expected: String) -> Error {
    Error::Config {
        variable: format!("ArenaConfig::{field}"),
        value,
        expected,
    }
}

impl ArenaConfig {
    /// Checks every field against the rules in the module docs' table: the check
    /// [`Context::new`](crate::Context::new) makes before it opens a device (and
    /// [`ArenaConfig::from_env`] makes on what it read).
    ///
    /// Errors: [`Error::Config`] naming the first field that breaks a rule
    /// (`ArenaConfig::staging_bytes`, ...), its value and what it accepts.
    ///
    /// ```
    /// use gpu_arena::ArenaConfig;
    /// let config = ArenaConfig { staging_bytes: 0, ..ArenaConfig::default() };
    /// let error = config.validate().unwrap_err();
    /// assert!(error.to_string().contains("ArenaConfig::staging_bytes"));
    /// ```
    pub fn validate(&self) -> Result<()> {
        if let Some(AdapterSelector::NameContains(name)) = &self.adapter {
            if name.trim().is_empty() {
                return Err(field_error(
                    "adapter",
                    name.clone(),
                    "an adapter index, or a part of an adapter's name that is not blank (a blank name would match every adapter; use None for the best one)".into(),
                ));
            }
        }
        self.validate_but_the_adapter()
    }

    /// [`ArenaConfig::validate`] but for `adapter`: for a context on a device already chosen
    /// ([`crate::Context::on_device`], [`crate::Context::from_wgpu`]), which ignores it.
    pub(crate) fn validate_but_the_adapter(&self) -> Result<()> {
        self.mem_fraction.check().map_err(|why| {
            field_error(
                "mem_fraction",
                self.mem_fraction.to_string(),
                format!("{FRACTION_GRAMMAR}: {why}"),
            )
        })?;
        if let Some(bytes) = self.max_region_bytes {
            MAX_REGION.check_field(bytes)?;
        }
        if self.bar_writes == BarWrites::On && !self.zero_copy {
            return Err(bar_writes_without_zero_copy("ArenaConfig::bar_writes"));
        }
        STAGING.check_field(self.staging_bytes)?;
        if let Some(bytes) = self.pinned_host_bytes {
            PINNED_HOST.check_field(bytes)?;
        }
        FALLBACK_MEMORY.check_field(self.fallback_device_memory_bytes)?;
        if self.timeline_capacity > MAX_TIMELINE_CAPACITY {
            return Err(field_error(
                "timeline_capacity",
                self.timeline_capacity.to_string(),
                timeline_expected(),
            ));
        }
        if let Some(bytes) = self.max_binding_bytes {
            if bytes < MIN_KERNEL_BINDING_BYTES {
                return Err(field_error(
                    "max_binding_bytes",
                    bytes.to_string(),
                    binding_bytes_expected(),
                ));
            }
        }
        if self.max_workgroups_per_dimension == Some(0) {
            return Err(field_error(
                "max_workgroups_per_dimension",
                "0".into(),
                workgroups_expected(),
            ));
        }
        if let crate::kernel_tuning::KernelTuning::Forced(shape) = self.kernel_tuning {
            if !shape.is_valid() {
                let expected = crate::kernel_tuning::shape_expected();
                return Err(field_error("kernel_tuning", shape.to_string(), expected));
            }
        }
        let missing = REQUIRED_ARRAY_USAGES.difference(self.array_usages);
        let forbidden = self.array_usages & FORBIDDEN_ARRAY_USAGES;
        if !missing.is_empty() || !forbidden.is_empty() {
            return Err(field_error(
                "array_usages",
                flag_names(self.array_usages.iter_names()),
                format!(
                    "usages that contain {}{} and none of {}{}; start from gpu_arena::config::DEFAULT_ARRAY_USAGES",
                    flag_names(REQUIRED_ARRAY_USAGES.iter_names()),
                    match missing.is_empty() {
                        true => String::new(),
                        false => format!(" (missing: {})", flag_names(missing.iter_names())),
                    },
                    flag_names(FORBIDDEN_ARRAY_USAGES.iter_names()),
                    match forbidden.is_empty() {
                        true => String::new(),
                        false => format!(" (present: {})", flag_names(forbidden.iter_names())),
                    },
                ),
            ));
        }
        if let Some(dir) = &self.dump_on_oom {
            if dir.as_os_str().to_string_lossy().trim().is_empty() {
                return Err(field_error(
                    "dump_on_oom",
                    dir.display().to_string(),
                    "a directory path that is not blank (leave the field None for no dump)".into(),
                ));
            }
        }
        Ok(())
    }
}

/// The refusal of direct BAR writes with zero-copy off, two settings that contradict each
/// other, naming `named` (the field, or the variable `from_env` read) with both settings in
/// the text.
pub(crate) fn bar_writes_without_zero_copy(named: &str) -> Error {
    Error::Config {
        variable: named.into(),
        value: BarWrites::On.to_string(),
        expected: "auto or off: direct writes (ArenaConfig::bar_writes, GPU_ARENA_BAR_WRITES) map \
                   the arena, which zero-copy off (ArenaConfig::zero_copy, \
                   GPU_ARENA_ZERO_COPY=off) forbids; turn one of them off"
            .into(),
    }
}

/// The device-dependent rule: a staging buffer must be a buffer the device can make, and
/// staging buffers are whole 4-byte words, so the largest size accepted is the device's
/// `max_buffer_size` rounded down to a word (the refusal names that size).
/// Checked by the context once it knows the device's limits, before it creates any buffer.
pub(crate) fn check_staging_fits_device(staging_bytes: u64, max_buffer_size: u64) -> Result<()> {
    let largest = max_buffer_size & !(wgpu::COPY_BUFFER_ALIGNMENT - 1);
    if staging_bytes <= largest {
        return Ok(());
    }
    let words = match largest == max_buffer_size {
        true => String::new(),
        false => format!(
            " rounded down to whole {}-byte words",
            wgpu::COPY_BUFFER_ALIGNMENT
        ),
    };
    let expected = format!(
        "at most {largest} bytes ({} MiB; env {}): this device's max_buffer_size, \
         {max_buffer_size} bytes{words}",
        largest / MIB,
        STAGING.variable
    );
    Err(field_error(
        STAGING.field,
        staging_bytes.to_string(),
        expected,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_field_s_value_is_written_as_it_was_set() {
        let fraction = super::super::mem_fraction::MemFraction {
            reserve: 1.5,
            limit: 1.5,
        };
        for (config, field, value) in [
            (
                ArenaConfig {
                    adapter: Some(AdapterSelector::NameContains("  ".into())),
                    ..ArenaConfig::default()
                },
                "ArenaConfig::adapter",
                "  ",
            ),
            (
                ArenaConfig {
                    mem_fraction: fraction,
                    ..ArenaConfig::default()
                },
                "ArenaConfig::mem_fraction",
                "1.5",
            ),
            (
                ArenaConfig {
                    dump_on_oom: Some(" ".into()),
                    ..ArenaConfig::default()
                },
                "ArenaConfig::dump_on_oom",
                " ",
            ),
        ] {
            match config.validate().unwrap_err() {
                Error::Config {
                    variable,
                    value: given,
                    ..
                } => assert_eq!((variable.as_str(), given.as_str()), (field, value)),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn kernel_limits_below_their_minimum_are_refused_by_field() {
        for (config, field) in [
            (
                ArenaConfig {
                    max_binding_bytes: Some(MIN_KERNEL_BINDING_BYTES - 1),
                    ..ArenaConfig::default()
                },
                "ArenaConfig::max_binding_bytes",
            ),
            (
                ArenaConfig {
                    max_workgroups_per_dimension: Some(0),
                    ..ArenaConfig::default()
                },
                "ArenaConfig::max_workgroups_per_dimension",
            ),
        ] {
            match config.validate().unwrap_err() {
                Error::Config { variable, .. } => assert_eq!(variable, field),
                other => panic!("{other:?}"),
            }
        }
        ArenaConfig {
            max_binding_bytes: Some(MIN_KERNEL_BINDING_BYTES),
            max_workgroups_per_dimension: Some(1),
            ..ArenaConfig::default()
        }
        .validate()
        .unwrap();
    }

    #[test]
    fn the_default_configuration_is_valid() {
        ArenaConfig::default().validate().unwrap();
    }

    #[test]
    fn a_pinned_host_limit_below_one_granule_is_refused_naming_the_field() {
        for bytes in [0, MIN_REGION_BYTES - 1] {
            let error = ArenaConfig {
                pinned_host_bytes: Some(bytes),
                ..ArenaConfig::default()
            }
            .validate()
            .unwrap_err();
            let msg = error.to_string();
            assert!(msg.contains("ArenaConfig::pinned_host_bytes"), "{msg}");
            assert!(msg.contains("GPU_ARENA_PINNED_HOST_MB"), "{msg}");
        }
        let fine = ArenaConfig {
            pinned_host_bytes: Some(MIN_REGION_BYTES),
            ..ArenaConfig::default()
        };
        fine.validate().unwrap();
    }

    #[test]
    fn zero_staging_bytes_set_in_code_are_refused_naming_the_field() {
        let error = ArenaConfig {
            staging_bytes: 0,
            ..ArenaConfig::default()
        }
        .validate()
        .unwrap_err();
        let msg = error.to_string();
        assert!(msg.contains("ArenaConfig::staging_bytes"), "{msg}");
        assert!(msg.contains("from 4096 to 4294967296 bytes"), "{msg}");
        assert!(msg.contains("GPU_ARENA_STAGING_MB"), "{msg}");
    }

    #[test]
    fn every_field_out_of_range_in_code_is_an_error_naming_it() {
        let cases: Vec<(ArenaConfig, &str)> = vec![
            (
                ArenaConfig {
                    staging_bytes: MAX_STAGING_BYTES + 1,
                    ..Default::default()
                },
                "ArenaConfig::staging_bytes",
            ),
            (
                ArenaConfig {
                    staging_bytes: u64::MAX,
                    ..Default::default()
                },
                "ArenaConfig::staging_bytes",
            ),
            (
                ArenaConfig {
                    max_region_bytes: Some(255),
                    ..Default::default()
                },
                "ArenaConfig::max_region_bytes",
            ),
            (
                ArenaConfig {
                    max_region_bytes: Some(0),
                    ..Default::default()
                },
                "ArenaConfig::max_region_bytes",
            ),
            (
                ArenaConfig {
                    fallback_device_memory_bytes: 0,
                    ..Default::default()
                },
                "ArenaConfig::fallback_device_memory_bytes",
            ),
            (
                ArenaConfig {
                    timeline_capacity: MAX_TIMELINE_CAPACITY + 1,
                    ..Default::default()
                },
                "ArenaConfig::timeline_capacity",
            ),
            (
                ArenaConfig {
                    timeline_capacity: usize::MAX,
                    ..Default::default()
                },
                "16777215",
            ),
            (
                ArenaConfig {
                    mem_fraction: super::super::mem_fraction::MemFraction::fixed(f64::NAN),
                    ..Default::default()
                },
                "ArenaConfig::mem_fraction",
            ),
            (
                ArenaConfig {
                    mem_fraction: super::super::mem_fraction::MemFraction {
                        reserve: 0.5,
                        limit: f64::INFINITY,
                    },
                    ..Default::default()
                },
                "limit inf is not in (0, 1]",
            ),
            (
                ArenaConfig {
                    mem_fraction: super::super::mem_fraction::MemFraction {
                        reserve: 0.8,
                        limit: 0.5,
                    },
                    ..Default::default()
                },
                "below the reserve",
            ),
            (
                ArenaConfig {
                    adapter: Some(AdapterSelector::NameContains("  ".into())),
                    ..Default::default()
                },
                "ArenaConfig::adapter",
            ),
            (
                ArenaConfig {
                    dump_on_oom: Some("".into()),
                    ..Default::default()
                },
                "ArenaConfig::dump_on_oom",
            ),
            (
                ArenaConfig {
                    bar_writes: BarWrites::On,
                    zero_copy: false,
                    ..Default::default()
                },
                "GPU_ARENA_ZERO_COPY=off",
            ),
        ];
        for (config, needle) in cases {
            let msg = config.validate().unwrap_err().to_string();
            assert!(msg.contains(needle), "{needle}: {msg}");
        }
    }

    #[test]
    fn the_bounds_themselves_are_accepted() {
        for config in [
            ArenaConfig {
                staging_bytes: MIN_STAGING_BYTES,
                max_region_bytes: Some(MIN_REGION_BYTES),
                fallback_device_memory_bytes: MIN_FALLBACK_DEVICE_MEMORY_BYTES,
                timeline_capacity: MAX_TIMELINE_CAPACITY,
                ..Default::default()
            },
            ArenaConfig {
                staging_bytes: MAX_STAGING_BYTES,
                max_region_bytes: Some(u64::MAX),
                fallback_device_memory_bytes: u64::MAX,
                mem_fraction: super::super::mem_fraction::MemFraction::fixed(1.0),
                ..Default::default()
            },
        ] {
            config.validate().unwrap();
        }
    }

    #[test]
    fn a_staging_buffer_larger_than_the_device_allows_is_refused_with_the_limit() {
        check_staging_fits_device(64 << 20, 64 << 20).unwrap();
        let msg = check_staging_fits_device((64 << 20) + 1, 64 << 20)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("GPU_ARENA_STAGING_MB"), "{msg}");
        assert!(msg.starts_with("ArenaConfig::staging_bytes="), "{msg}");
        assert!(msg.contains("67108864 bytes (64 MiB; env"), "{msg}");
        assert!(!msg.contains("rounded"), "{msg}");
        // Staging buffers are whole words: a limit between two words admits the word below.
        let odd = (1u64 << 31) - 1;
        check_staging_fits_device(odd - 3, odd).unwrap();
        let msg = check_staging_fits_device(odd, odd).unwrap_err().to_string();
        assert!(
            msg.ends_with(
                "expected at most 2147483644 bytes (2047 MiB; env GPU_ARENA_STAGING_MB): this \
                 device's max_buffer_size, 2147483647 bytes rounded down to whole 4-byte words"
            ),
            "{msg}"
        );
    }
}
