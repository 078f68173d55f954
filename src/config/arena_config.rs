//! The knobs: [`ArenaConfig`], the choices its fields take ([`AllocatorKind`], [`AdapterSelector`],
//! [`BackendChoice`], [`BarWrites`]) and their defaults. A file of its own so that the rules
//! (`validate.rs`) and the variables (`env.rs`) read the knobs from here while `mod.rs` only
//! lists and re-exports.

use super::mem_fraction::MemFraction;
use crate::guard_levels::TransferGuardLevels;
use serde::{Deserialize, Serialize};

/// Default size of the reusable staging pool for transfers (64 MiB: big enough to keep the copy
/// engine busy, small next to any GPU's memory).
pub const DEFAULT_STAGING_BYTES: u64 = 64 << 20;
/// Device memory assumed on wgpu backends that cannot report it (GL, Metal, DX12).
pub const DEFAULT_FALLBACK_DEVICE_MEMORY_BYTES: u64 = 1 << 30;
/// Events kept when the timeline is turned on without a size (`GPU_ARENA_TIMELINE=on`): the
/// arena ring then has exactly 2^18 slots of 64 bytes (one is the writer's), 16 MiB of host
/// memory, enough for minutes of a training loop's allocations.
pub const DEFAULT_TIMELINE_CAPACITY: usize = (1 << 18) - 1;

/// The usages every arena buffer needs whatever else it allows: kernels bind arrays as storage,
/// transfers and ops copy into and out of them.
pub const REQUIRED_ARRAY_USAGES: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_SRC)
    .union(wgpu::BufferUsages::COPY_DST);

/// The usages of arena buffers by default: what the library needs ([`REQUIRED_ARRAY_USAGES`])
/// and what an app's own passes bind a buffer as (vertex, index, uniform, indirect), so that an
/// array computed by a kernel can be drawn with no copy
/// ([`Context::app_work`](crate::Context::app_work)). The extra usages cost nothing measurable
/// on the drivers we know (they are flags on the buffer, not a memory type).
pub const DEFAULT_ARRAY_USAGES: wgpu::BufferUsages = REQUIRED_ARRAY_USAGES
    .union(wgpu::BufferUsages::VERTEX)
    .union(wgpu::BufferUsages::INDEX)
    .union(wgpu::BufferUsages::UNIFORM)
    .union(wgpu::BufferUsages::INDIRECT);

/// Usages an arena buffer can never have: mapping is the arena's own business (zero-copy maps
/// it through gpu-allocator, and wgpu forbids MAP_* beside STORAGE without
/// `MAPPABLE_PRIMARY_BUFFERS`), and query resolves and acceleration-structure inputs are not
/// arrays.
pub const FORBIDDEN_ARRAY_USAGES: wgpu::BufferUsages = wgpu::BufferUsages::MAP_READ
    .union(wgpu::BufferUsages::MAP_WRITE)
    .union(wgpu::BufferUsages::QUERY_RESOLVE)
    .union(wgpu::BufferUsages::BLAS_INPUT)
    .union(wgpu::BufferUsages::TLAS_INPUT);

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

/// Which adapter to open, as `GPU_ARENA_ADAPTER`: a value of ASCII digits only is an index
/// (one too large for `usize` is refused), anything else a part of a name (`-1` and `+1`
/// included, which no adapter's name holds).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdapterSelector {
    /// The n-th adapter in gpu-arena's order, as [`crate::devices`] lists them (Vulkan first,
    /// then discrete > integrated > virtual > CPU, wgpu's order within a class).
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
    /// opening a context on a discrete device with a small BAR or none is an error (on GL,
    /// Metal and DX12, which report no memory table, a discrete GPU has none). On UMA devices
    /// (lavapipe, and CPU or integrated adapters on every backend) it changes nothing: the
    /// arena is host-visible already and uploads are a memcpy anyway, or, on GL, go through
    /// wgpu's staging. Needs [`ArenaConfig::zero_copy`].
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
    /// Reserve `mem_fraction.reserve` of device memory at the first allocation (default `true`):
    /// the context's first of any memory kind (an array in
    /// [`MemoryKind::PinnedHost`](crate::memory_kind::MemoryKind) made first reserves the device
    /// arena too, as JAX preallocates when its backend first runs), or
    /// [`Context::reserve`](crate::Context::reserve). A first allocation that no region or
    /// limit could hold is refused before anything is reserved.
    /// Off: the arena starts empty and grows region by region up to `mem_fraction.limit`.
    pub preallocate: bool,
    /// Share of the device-local heap to reserve / grow to (default `0.75`); both fractions in
    /// `(0, 1]`, the limit not below the reserve; a context refuses a limit that rounds to no
    /// byte of its device's heap (under 256 bytes).
    pub mem_fraction: MemFraction,
    /// BFC arena or platform pass-through (default [`AllocatorKind::Bfc`]).
    pub allocator: AllocatorKind,
    /// Upper bound on one region's size in bytes, at least [`MIN_REGION_BYTES`](super::MIN_REGION_BYTES) (it is rounded
    /// down to 256); `None` uses the device's own limits (`max_buffer_size`,
    /// `maxMemoryAllocationSize`), as does a value above them. One reservation takes at most
    /// [`MAX_RESERVED_REGIONS`](crate::arena::MAX_RESERVED_REGIONS) (65,536) regions: regions
    /// so small that the preallocation would need more make allocations fail with
    /// [`ArenaError::TooManyReservedRegions`](crate::arena::ArenaError::TooManyReservedRegions)
    /// (in [`Error::Arena`](crate::Error::Arena)), nothing reserved.
    pub max_region_bytes: Option<u64>,
    /// Which adapter to open; `None` picks the first of [`crate::devices`]' order (Vulkan
    /// first, then discrete > integrated > virtual > CPU). A name to look for must not be
    /// blank (it would match every adapter); [`crate::Context::on_device`] and
    /// [`crate::Context::from_wgpu`], whose device is given, ignore it.
    pub adapter: Option<AdapterSelector>,
    /// Which wgpu backend to use (default [`BackendChoice::Auto`]).
    pub backend: BackendChoice,
    /// Use zero-copy transfers when the arena's memory is host-visible (UMA). Default `true`;
    /// `false` forces the staging path that discrete GPUs take. Non-coherent memory is fine:
    /// host writes are flushed and host reads invalidated.
    pub zero_copy: bool,
    /// Direct writes into device memory on a full Resizable BAR (default [`BarWrites::Auto`],
    /// which is off until measured on real GPUs); `GPU_ARENA_BAR_WRITES`. `On` needs
    /// `zero_copy`.
    pub bar_writes: BarWrites,
    /// Size of each buffer of the reusable staging pool in bytes (default 64 MiB), from
    /// [`MIN_STAGING_BYTES`](super::MIN_STAGING_BYTES) to
    /// [`MAX_STAGING_BYTES`](super::MAX_STAGING_BYTES) and at most the device's
    /// `max_buffer_size` rounded down to whole 4-byte words (staging buffers are whole words).
    pub staging_bytes: u64,
    /// The most bytes the arena of the pinned-host memory kind
    /// ([`MemoryKind::PinnedHost`](crate::memory_kind::MemoryKind)) may hold, at least
    /// [`MIN_REGION_BYTES`](super::MIN_REGION_BYTES) (it is rounded down to 256, the arenas'
    /// allocation unit: the kind's `bytes_limit` reports the rounded value);
    /// `GPU_ARENA_PINNED_HOST_MB`. Default
    /// `None`: [`DEFAULT_PINNED_HOST_PERCENT`](super::DEFAULT_PINNED_HOST_PERCENT)% of the heap
    /// the memory plan places the kind on (on UMA the device arena's heap, whose default
    /// `mem_fraction` of 75% leaves that share free). The kind's arena reserves nothing up
    /// front: it grows by regions as arrays are made, up to this limit (with
    /// [`AllocatorKind::Platform`](super::AllocatorKind), one region per array, as the device
    /// arena).
    pub pinned_host_bytes: Option<u64>,
    /// Turn on wgpu's validation (the Khronos layer on Vulkan, when installed). Default `false`.
    /// Its checks make every submission's host work several times heavier, so the started
    /// collectives of a context with it wait for the other ranks by sleeping, never in MPI's
    /// busy wait (the MPI guide says why).
    pub validation: bool,
    /// Device memory assumed where the backend cannot report it (non-Vulkan), default 1 GiB,
    /// at least [`MIN_FALLBACK_DEVICE_MEMORY_BYTES`](super::MIN_FALLBACK_DEVICE_MEMORY_BYTES).
    pub fallback_device_memory_bytes: u64,
    /// Transfer-guard levels per direction (default: allow everything), from
    /// `GPU_ARENA_TRANSFER_GUARD*` / `JAX_TRANSFER_GUARD*`; scoped guards override them.
    pub transfer_guard: TransferGuardLevels,
    /// Events the memory timeline keeps (a ring: the newest win). Default 0: off, costing
    /// nothing. At most [`MAX_TIMELINE_CAPACITY`](super::MAX_TIMELINE_CAPACITY). `GPU_ARENA_TIMELINE` takes a count, or `on`
    /// (also `true`, `yes` and `1`, as booleans are read) for [`DEFAULT_TIMELINE_CAPACITY`]:
    /// a ring of one event is set in code.
    pub timeline_capacity: usize,
    /// With the timeline on, time every dispatch on the GPU where the device has timestamp
    /// queries (see [`Context::kernel_times`](crate::Context::kernel_times)). Default `true`;
    /// `false` asks the device for no timestamp queries and records no kernel times (the
    /// dispatches still appear as instants). Without the timeline nothing is timed either way.
    /// `GPU_ARENA_KERNEL_TIMES`.
    pub kernel_times: bool,
    /// A directory where an out-of-memory error writes the memory snapshot and the HTML report,
    /// and with the timeline on its Chrome trace too (each named in the error message). Default `None`; `GPU_ARENA_DUMP_ON_OOM=<dir>` (a setuid
    /// or setgid process writes no dump, and its error says so). A path that is empty or blank is
    /// refused. The directory is created private (0700); one that belongs to another user or
    /// that its group or others may write gets no dump (the error says why), and each dump file
    /// is created new, with mode 0600, under an unguessable name.
    pub dump_on_oom: Option<std::path::PathBuf>,
    /// Testing: treat every host-visible memory type as if it were not HOST_COHERENT, so every
    /// host access to mapped memory runs `vkFlushMappedMemoryRanges` /
    /// `vkInvalidateMappedMemoryRanges` (legal, and a no-op, on coherent memory). This runs
    /// the paths of Intel non-LLC, ARM and Apple GPUs on lavapipe under the validation layer.
    /// Default `false`; `GPU_ARENA_FORCE_NONCOHERENT`.
    pub force_non_coherent: bool,
    /// Testing: run the library's ops (copies, fills, slices, updates, and captured runs'
    /// moving copies) as their WGSL kernels on CPU adapters too, where they otherwise copy on
    /// the host when the arrays are idle (faster there), so that tests on lavapipe exercise
    /// the kernels. Default `false`;
    /// `GPU_ARENA_FORCE_DEVICE_KERNELS`.
    pub force_device_kernels: bool,
    /// Testing: time each dispatch by a compute pass of its own (the pass's begin and end
    /// timestamps), as on a device without `TIMESTAMP_QUERY_INSIDE_PASSES`, so that tests on
    /// lavapipe exercise that path; it changes nothing unless kernels are timed (the timeline
    /// on, [`kernel_times`](Self::kernel_times) on, a device with timestamp queries). Default
    /// `false`; `GPU_ARENA_FORCE_PASS_PER_TIMED_DISPATCH`.
    pub force_pass_per_timed_dispatch: bool,
    /// Debugging: refuse a start index of `dynamic_slice` / `dynamic_update_slice` that lies
    /// outside `[0, operand_dim - slice_dim]` with [`Error::Index`](crate::Error::Index)
    /// ([`IndexRefusal::StartOutOfRange`](crate::error::IndexRefusal::StartOutOfRange), naming
    /// the dimension and where XLA would clamp it), instead of clamping it as XLA does;
    /// for single ops, sequences, captures and every run of a captured step alike. An index
    /// that runs past the end is usually a bug that clamping hides. Default `false` (clamp,
    /// XLA's semantics); `GPU_ARENA_STRICT_STARTS`.
    pub strict_starts: bool,
    /// Whether the library's kernels are tuned to the device by measurement (default
    /// [`KernelTuning::On`](super::KernelTuning::On)); `GPU_ARENA_KERNEL_TUNING` (`on`,
    /// `cached`, `off`, or a shape such as `128x8` for
    /// [`KernelTuning::Forced`](super::KernelTuning::Forced); any case, and the boolean
    /// spellings `true`/`1`/`yes` and `false`/`0`/`no`). Results are byte-identical
    /// under every setting.
    pub kernel_tuning: crate::kernel_tuning::KernelTuning,
    /// The most bytes one binding of the library's kernels covers, below the device's
    /// `max_storage_buffer_binding_size` (a larger value changes nothing). Default `None`: the
    /// device's limit. At least [`MIN_KERNEL_BINDING_BYTES`](super::MIN_KERNEL_BINDING_BYTES). A lower value makes ops on small
    /// arrays take the paths large arrays take on a real GPU (an operand cut into several
    /// bindings), or shows how an app fares on a device with a smaller limit.
    /// `GPU_ARENA_MAX_BINDING_BYTES` (bytes).
    pub max_binding_bytes: Option<u64>,
    /// The most workgroups per grid dimension the library's kernels launch, below the device's
    /// `max_compute_workgroups_per_dimension` (a larger value changes nothing). Default `None`:
    /// the device's limit. At least 1. A lower value makes small grids take the paths large
    /// ones take (2-D and 3-D grids, dispatches split past the grid's size).
    /// `GPU_ARENA_MAX_WORKGROUPS_PER_DIMENSION`.
    pub max_workgroups_per_dimension: Option<u32>,
    /// The wgpu usages of every arena buffer, so what an app's own passes may bind an array as
    /// ([`Context::app_work`](crate::Context::app_work) refuses a use whose flag is missing
    /// here, naming it). Default [`DEFAULT_ARRAY_USAGES`] (storage, copies, vertex, index,
    /// uniform, indirect); it must contain [`REQUIRED_ARRAY_USAGES`] and none of
    /// [`FORBIDDEN_ARRAY_USAGES`]. No variable: it is the app's code that binds arrays.
    pub array_usages: wgpu::BufferUsages,
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
            pinned_host_bytes: None,
            validation: false,
            fallback_device_memory_bytes: DEFAULT_FALLBACK_DEVICE_MEMORY_BYTES,
            transfer_guard: TransferGuardLevels::default(),
            timeline_capacity: 0,
            kernel_times: true,
            dump_on_oom: None,
            force_non_coherent: false,
            force_device_kernels: false,
            force_pass_per_timed_dispatch: false,
            strict_starts: false,
            kernel_tuning: crate::kernel_tuning::KernelTuning::On,
            max_binding_bytes: None,
            max_workgroups_per_dimension: None,
            array_usages: DEFAULT_ARRAY_USAGES,
        }
    }
}
