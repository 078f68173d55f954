//! Every variable the configuration reads, ours and JAX's: one list for the tests that set each
//! of them, in `tests/host/` and in `tests/config_env.rs` (which includes this file by path);
//! `adversary_config.rs` checks that it names every variable the reader spells out, and no other.

/// Every variable the configuration reads, the transfer guard's per-direction ones included.
pub const EVERY_VARIABLE: [&str; 32] = [
    "GPU_ARENA_PREALLOCATE",
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "GPU_ARENA_MEM_FRACTION",
    "XLA_CLIENT_MEM_FRACTION",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "GPU_ARENA_ALLOCATOR",
    "XLA_PYTHON_CLIENT_ALLOCATOR",
    "GPU_ARENA_MAX_REGION_MB",
    "GPU_ARENA_ADAPTER",
    "GPU_ARENA_BACKEND",
    "GPU_ARENA_ZERO_COPY",
    "GPU_ARENA_BAR_WRITES",
    "GPU_ARENA_FORCE_NONCOHERENT",
    "GPU_ARENA_STAGING_MB",
    "GPU_ARENA_VALIDATION",
    "GPU_ARENA_DEVICE_MEMORY_MB",
    "GPU_ARENA_TRANSFER_GUARD",
    "JAX_TRANSFER_GUARD",
    "GPU_ARENA_TRANSFER_GUARD_HOST_TO_DEVICE",
    "JAX_TRANSFER_GUARD_HOST_TO_DEVICE",
    "GPU_ARENA_TRANSFER_GUARD_DEVICE_TO_HOST",
    "JAX_TRANSFER_GUARD_DEVICE_TO_HOST",
    "GPU_ARENA_TRANSFER_GUARD_DEVICE_TO_DEVICE",
    "JAX_TRANSFER_GUARD_DEVICE_TO_DEVICE",
    "GPU_ARENA_TIMELINE",
    "GPU_ARENA_KERNEL_TIMES",
    "GPU_ARENA_DUMP_ON_OOM",
    "GPU_ARENA_FORCE_DEVICE_KERNELS",
    "GPU_ARENA_FORCE_PASS_PER_TIMED_DISPATCH",
    "GPU_ARENA_STRICT_STARTS",
    "GPU_ARENA_MAX_BINDING_BYTES",
    "GPU_ARENA_MAX_WORKGROUPS_PER_DIMENSION",
];
