//! Configuration: JAX's memory knobs under our own names, read from code or the environment.
//!
//! | field | default | accepted | env var (ours) | JAX alias |
//! |---|---|---|---|---|
//! | [`ArenaConfig::preallocate`] | `true` | | `GPU_ARENA_PREALLOCATE` | `XLA_PYTHON_CLIENT_PREALLOCATE` |
//! | [`ArenaConfig::mem_fraction`] | `0.75` | (0, 1], limit ≥ reserve, and a limit of at least 256 bytes of the device's heap (checked when a context opens) | `GPU_ARENA_MEM_FRACTION` | `XLA_CLIENT_MEM_FRACTION`, `XLA_PYTHON_CLIENT_MEM_FRACTION` |
//! | [`ArenaConfig::allocator`] | `bfc` | | `GPU_ARENA_ALLOCATOR` | `XLA_PYTHON_CLIENT_ALLOCATOR` |
//! | [`ArenaConfig::max_region_bytes`] | device limit | ≥ 256 bytes | `GPU_ARENA_MAX_REGION_MB` | |
//! | [`ArenaConfig::adapter`] | best adapter | a name part is not blank | `GPU_ARENA_ADAPTER` | |
//! | [`ArenaConfig::backend`] | Vulkan, then others | `auto`, `vulkan`/`vk`, `gl`/`gles`/`opengl`, `metal`, `dx12`/`d3d12` (any case) | `GPU_ARENA_BACKEND` | |
//! | [`ArenaConfig::zero_copy`] | `true` | | `GPU_ARENA_ZERO_COPY` | |
//! | [`ArenaConfig::bar_writes`] | `auto` (off for now) | `on` needs `zero_copy` | `GPU_ARENA_BAR_WRITES` | |
//! | [`ArenaConfig::staging_bytes`] | 64 MiB | 4 KiB to 4 GiB, and the device's `max_buffer_size` in whole words | `GPU_ARENA_STAGING_MB` | |
//! | [`ArenaConfig::pinned_host_bytes`] | [`DEFAULT_PINNED_HOST_PERCENT`]% of its heap | ≥ 256 bytes, rounded down to 256 | `GPU_ARENA_PINNED_HOST_MB` | |
//! | [`ArenaConfig::validation`] | `false` | | `GPU_ARENA_VALIDATION` | |
//! | [`ArenaConfig::fallback_device_memory_bytes`] | 1 GiB | ≥ 1 MiB | `GPU_ARENA_DEVICE_MEMORY_MB` | |
//! | [`ArenaConfig::transfer_guard`] | allow | | `GPU_ARENA_TRANSFER_GUARD[_HOST_TO_DEVICE\|_DEVICE_TO_HOST\|_DEVICE_TO_DEVICE]` | `JAX_TRANSFER_GUARD[...]` |
//! | [`ArenaConfig::timeline_capacity`] | 0 (off) | at most [`MAX_TIMELINE_CAPACITY`] | `GPU_ARENA_TIMELINE` | |
//! | [`ArenaConfig::kernel_times`] | `true` (with the timeline on) | | `GPU_ARENA_KERNEL_TIMES` | |
//! | [`ArenaConfig::dump_on_oom`] | none | a path that is not blank | `GPU_ARENA_DUMP_ON_OOM` | |
//! | [`ArenaConfig::force_non_coherent`] | `false` (testing) | | `GPU_ARENA_FORCE_NONCOHERENT` | |
//! | [`ArenaConfig::force_device_kernels`] | `false` (testing) | | `GPU_ARENA_FORCE_DEVICE_KERNELS` | |
//! | [`ArenaConfig::force_pass_per_timed_dispatch`] | `false` (testing) | | `GPU_ARENA_FORCE_PASS_PER_TIMED_DISPATCH` | |
//! | [`ArenaConfig::strict_starts`] | `false` (debugging) | | `GPU_ARENA_STRICT_STARTS` | |
//! | [`ArenaConfig::kernel_tuning`] | `on` | `on`, `cached`, `off` (any case; `true`/`1`/`yes` and `false`/`0`/`no` too), or a shape `WxN` ([`KernelShape`](crate::KernelShape)) | `GPU_ARENA_KERNEL_TUNING` | |
//! | [`ArenaConfig::max_binding_bytes`] | device limit | ≥ [`MIN_KERNEL_BINDING_BYTES`] | `GPU_ARENA_MAX_BINDING_BYTES` | |
//! | [`ArenaConfig::max_workgroups_per_dimension`] | device limit | ≥ 1 | `GPU_ARENA_MAX_WORKGROUPS_PER_DIMENSION` | |
//! | [`ArenaConfig::array_usages`] | [`DEFAULT_ARRAY_USAGES`] | contains [`REQUIRED_ARRAY_USAGES`], no map or query usage | (code only) | |
//!
//! Our names win over the aliases; two aliases that disagree are an error, as in JAX (two
//! spellings of one fraction, `0.5` and `5e-1`, agree). Every
//! value is checked by one set of rules ([`ArenaConfig::validate`], which
//! [`Context::new`](crate::Context::new) calls before it touches a device), whether it was set
//! in code or read from a variable, and a value a rule refuses is an
//! [`Error::Config`](crate::Error::Config) that names the field or the variable and what it
//! accepts. Variables must hold UTF-8 text that is not blank (unset a variable to get its
//! default); `*_MB` variables take whole MiB, and a number whose bytes would not fit in 64 bits
//! is refused with the largest accepted one.
//!
//! Files: `mod.rs` (this table and the re-exports), `arena_config.rs` (the knobs and their
//! defaults), `mem_fraction.rs` (XLA's fraction
//! grammar), `env.rs`
//! (reading the variables), `validate.rs` (the rules and their bounds).

// Configuration handles user numbers: no arithmetic here may wrap or panic.
#![deny(clippy::arithmetic_side_effects)]

mod arena_config;
mod env;
mod mem_fraction;
mod validate;

pub use crate::guard_levels::{TransferDirection, TransferGuardLevel, TransferGuardLevels};
pub use crate::kernel_tuning::KernelTuning;
pub use arena_config::{
    AdapterSelector, AllocatorKind, ArenaConfig, BackendChoice, BarWrites, DEFAULT_ARRAY_USAGES,
    DEFAULT_FALLBACK_DEVICE_MEMORY_BYTES, DEFAULT_STAGING_BYTES, DEFAULT_TIMELINE_CAPACITY,
    FORBIDDEN_ARRAY_USAGES, REQUIRED_ARRAY_USAGES,
};
pub use mem_fraction::{MemFraction, MemFractionError, DEFAULT_MEM_FRACTION};
pub use validate::{
    DEFAULT_PINNED_HOST_PERCENT, MAX_STAGING_BYTES, MAX_TIMELINE_CAPACITY,
    MIN_FALLBACK_DEVICE_MEMORY_BYTES, MIN_KERNEL_BINDING_BYTES, MIN_REGION_BYTES,
    MIN_STAGING_BYTES,
};

pub(crate) use validate::check_staging_fits_device;
