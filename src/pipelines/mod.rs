//! Pipeline plumbing: how a kernel's source becomes a compute pipeline, once per context, and
//! how wgpu's errors become `Result`s. The library's ops (`ops/`) and users' kernels
//! (`compute/`) compile through this one path, so a guarantee proven for one holds for the
//! other; [`Context`](crate::Context) owns the cache ([`KernelCache`]) and uses the error
//! scopes, so this module sits below `context.rs` as well.
//!
//! - `source`: what is compiled: [`KernelSource`] (WGSL or SPIR-V) and [`KernelDesc`].
//! - `library_kernels`: the library's own kernels (`shaders/*.wgsl`) as [`Builtin`]s, each
//!   in any [`KernelShape`](crate::KernelShape).
//! - `cache`: [`KernelCache`], the compiled pipelines of one context (keyed by source, entry
//!   point and constants, or by [`Builtin`] variant), and the one compilation path.
//! - `cache_stats`: what the cache reports, [`KernelCacheStats`] and [`DiskCacheLoad`], filled
//!   in by `cache` and `disk_cache` alike.
//! - `source_bounds`: what sources the compiler accepts, and its own thread, so that no source
//!   aborts or panics the caller.
//! - `reflect`: what a kernel binds, read from its naga IR (pure). Compilation reflects every
//!   module, the library's too, and lays out its bind group from the result, so reflection
//!   lives here rather than with the users' API that shows its [`KernelSignature`].
//! - `limits`: every device limit a kernel's module can exceed, checked as it is compiled.
//! - `buffer_layouts`: the buffer layouts naga would not keep (a struct with `@align` nested in
//!   another, a `matCx2` nested in a uniform on Vulkan, what GLSL's block rules move on GL),
//!   refused as a kernel is compiled.
//! - `disk_cache`: the driver pipeline cache on disk (`GPU_ARENA_CACHE_DIR`), where a damaged
//!   file costs speed, never the kernels, and nothing another user could have written is used
//!   (a private directory; no link followed, no FIFO waited on).
//! - `tuned_choices`: the kernel shapes tuning chose, per device, for the process and on disk
//!   beside the pipeline cache (hardened as it is).
//! - `error_scopes`: wgpu errors as `Result`s.
//!
//! **May import**: `error`, `backend`, `config` (kernel shapes), `arena` (constants) and
//! wgpu/naga; never what is above
//! it (`context`, `array`, `transfer`, `step`, `compute`, `ops`, `kernels`): it knows sources,
//! devices and pipelines, not arrays or contexts. `tests/module_flow.rs` checks this.
#![deny(unsafe_code)]

mod buffer_layouts;
mod cache;
mod cache_stats;
mod disk_cache;
mod error_scopes;
mod library_kernels;
mod limits;
mod reflect;
mod source;
mod source_bounds;
mod tuned_choices;

pub use cache_stats::{DiskCacheLoad, KernelCacheStats};
pub use disk_cache::CACHE_DIR_ENV;
pub use reflect::{KernelSignature, ParamsBlock, ParamsKind, StorageBinding, KERNEL_BIND_GROUP};
pub use source::{KernelDesc, KernelSource};
pub use source_bounds::{
    MAX_BINDING_NUMBERS, MAX_ENTRY_POINT_BYTES, MAX_SPIRV_WORDS, MAX_WGSL_EXPRESSION_DEPTH,
    MAX_WGSL_SOURCE_BYTES,
};
pub use tuned_choices::{
    KernelTuningReport, SizeClass, TunedKernel, TunedUserKernel, TuningOrigin,
};

pub(crate) use cache::{kernel_name, Compiled, KernelCache, KernelState, ParamsBuffer};
pub(crate) use error_scopes::{describe_wgpu_error, DeviceRefusal, ErrorScopes};
pub(crate) use library_kernels::Builtin;
pub(crate) use tuned_choices::{
    candidates, chosen, chosen_user, host_link, record, record_host_link, record_user, report,
    tuning_clock, user_key, TUNING_JOB,
};
