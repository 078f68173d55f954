//! # gpu-arena
//!
//! The memory discipline that JAX/XLA gives its users on CUDA, for portable GPU compute on
//! wgpu and Vulkan (NVIDIA, AMD, Intel, Apple, software Vulkan): a best-fit-with-coalescing
//! arena that reserves 75% of device memory at the first allocation, memory types chosen by a
//! vendor-aware policy, explicit transfers watched by a transfer guard, in-place updates of
//! donated arrays, your own kernels launched over arena arrays, and memory you can see
//! (statistics, snapshots, a timeline, an HTML report, out-of-memory errors that say why).
//!
//! ## A tour of the API
//!
//! - [`Context`] opens a GPU (cheap; memory is reserved at the first allocation), configured by
//!   [`ArenaConfig`] (in code, or from `GPU_ARENA_*` / `XLA_PYTHON_CLIENT_*` variables with
//!   [`ArenaConfig::from_env`]).
//! - [`DeviceArray<T>`] is a typed, shaped range of arena memory: [`Context::device_put`],
//!   [`Context::zeros`], [`Context::fill`], [`Context::alloc`]; back with
//!   [`Context::device_get`]. Many uploads at once: [`Context::upload_batch`].
//! - Your kernels: [`Context::kernel`] compiles WGSL (or SPIR-V via [`Context::kernel_with`])
//!   once per context; [`Context::launch`] runs it over arrays and [views](ArrayView), checked
//!   against the kernel's reflected [`KernelSignature`], every array recorded as used.
//! - The library's ops: [`Context::dynamic_update_slice`] (in place on a donated array, which
//!   comes back in [`Donated`] if the op fails), [`Context::dynamic_slice`],
//!   [`Context::fill_in_place`], [`Context::copy`]. Single launches and ops are gathered, up to
//!   [`kernels::MAX_GATHERED_OPS`] per submission, and sent before anything waits or submits
//!   ([`Context::flush`] sends them now): a loop of small ops costs about what a sequence does.
//! - [`Sequence`]: launches, uploads and ops recorded, then submitted as one submission. What
//!   is recorded and not yet submitted is the only thing that makes an array *pending*, by
//!   access (readers never refuse readers): [the recording model](kernels#the-recording-model).
//! - Steps compiled once: [`Context::capture`] records a step like a sequence, slots name what a
//!   run may change (a launch's parameters, an upload's data, a start, a read), and
//!   [`Capture::finish`] plans its memory (temporaries in a block by liveness, as XLA's buffer
//!   assignment, cut where the device's largest array is smaller: [`StepPlan`]) into a
//!   [`CapturedStep`] whose every run is one submission with no allocation and no bind group made
//!   (as `jax.jit` calls and CUDA-graph replays).
//! - Several devices: [`devices`] lists the adapters (as [`Context::new`] chooses among them),
//!   [`Context::on_device`] / [`Context::open_all`] open one context (one arena) per device,
//!   [`Context::device_put_from`] / [`DeviceArray::copy_to`] move arrays between them, and
//!   [`shard`] / [`gather`] split a host array across devices and bring it back.
//! - Your app's device: [`Context::from_wgpu`] opens the arena on a wgpu device the app
//!   already has (a renderer's, CubeCL's), checked against [`DeviceRequirements`], leaving the
//!   app's error handler and device-lost callback alone ([`DeviceLostNotifier`] forwards a
//!   loss); [`Context::app_work`] hands arrays to the app's own render and compute passes as
//!   vertex, index, uniform or storage buffers and submits them tracked ([`AppWork`]).
//! - [`TransferGuard`] refuses (or logs) implicit transfers, as `jax.transfer_guard`.
//! - Seeing memory: [`Context::memory_stats`] (XLA's keys), [`Context::memory_snapshot`],
//!   [`Context::memory_timeline`], [`report::write_html`]; every array carries the user's line
//!   that made it, and [`profile::MemorySnapshot::diff`] names what a loop keeps (leaks) by
//!   that line; [`profile::MemorySnapshot::to_pprof`] writes a pprof profile;
//!   [`Context::kernel_times`] gives each kernel's GPU time (calls, total, mean, max) with the
//!   timeline on; [`remat`] plans gradient
//!   checkpointing that fits a memory budget and [`backprop`] runs the plan with your kernels.
//! - Errors: one [`Error`] enum; the library does not panic on user input.
//! - Threads: [`Context`] (a cheap handle: clone it), [`DeviceArray`], [`ArrayView`],
//!   [`Kernel`], [`Sequence`], [`Capture`], [`CapturedStep`], its slots, [`AppWork`],
//!   [`UploadBatch`], [`Error`] and [`Donated`] are `Send + Sync`: share a context between
//!   threads, and single ops on one array from several threads never refuse each other (the
//!   recording model, in [`kernels`], says when a recorder's pending work does). A
//!   [`TransferGuard`] is a scope of the thread that made it, and is neither; so is a
//!   `distributed::Collectives` (feature `mpi`), as its MPI communicator is, while a
//!   `distributed::PendingCollective` may be waited on another thread (`Send`).
//! - Reads into your own memory: [`Context::device_get_into`] (an array or a view, no
//!   allocation: a reused buffer skips the page faults of fresh memory).
//! - Dependencies: [`bytemuck`] and [`wgpu`] are re-exported, so a dependent needs gpu-arena
//!   alone (`#[derive(gpu_arena::bytemuck::Pod, ..)]` with
//!   `#[bytemuck(crate = "gpu_arena::bytemuck")]`).
//!
//! ```no_run
//! use gpu_arena::{ArenaConfig, Context};
//!
//! let ctx = Context::new(ArenaConfig::from_env()?)?;
//! let double = ctx.kernel(
//!     "@group(0) @binding(0) var<storage, read> x: array<f32>;
//!      @group(0) @binding(1) var<storage, read_write> y: array<f32>;
//!      @compute @workgroup_size(64)
//!      fn main(@builtin(global_invocation_id) i: vec3<u32>) {
//!          if (i.x < arrayLength(&y)) { y[i.x] = 2.0 * x[i.x]; }
//!      }",
//!     "main",
//! )?;
//! let x = ctx.device_put(&[1.0f32, 2.0, 3.0], &[3])?; // reserves the arena
//! let mut y = ctx.zeros::<f32>(&[3])?;
//! ctx.launch(&double).arg(&x).arg_mut(&mut y).grid_for(3).run()?;
//! assert_eq!(ctx.device_get(&y)?, [2.0, 4.0, 6.0]);
//!
//! // A KV cache updated in place: the cache is donated (moved in) and given back.
//! let cache = ctx.zeros::<f32>(&[16, 3])?;
//! let cache = ctx.dynamic_update_slice(cache, &y.reshape(&[1, 3])?, &[5, 0])?;
//! println!("{:?}", ctx.memory_stats());
//! # Ok::<(), gpu_arena::Error>(())
//! ```
//!
//! ## Things worth knowing
//!
//! - **When a free is reusable**: a dropped array leaves `bytes_in_use` of
//!   [`Context::memory_stats`] at once, but its memory is handed out again only after the GPU
//!   work that used it has completed (XLA's safe frontier). Until then it is neither in use nor
//!   free: `pending_free_bytes` of [`Context::memory_stats_with_transfers`] counts it, and
//!   snapshots show it as pending. An array no submitted work used is free at once; otherwise
//!   its memory becomes free when gpu-arena learns that the work completed: at
//!   [`Context::synchronize`] (which waits for it), or at a later allocation or readback that
//!   polls the device. Call `ctx.synchronize()` before reading the statistics when the free
//!   bytes must reflect every drop so far.
//! - **`arrayLength` of an empty array is 1**: WebGPU binds no empty range, so a launch binds
//!   an array's bytes rounded up to a 4-byte word and to at least one element of the WGSL
//!   type. An empty array reads `arrayLength` 1 (and an odd-length array of 2-byte elements,
//!   `array<f16>` with `SHADER_F16`, one more than its length). When a length can be 0, pass
//!   it in the parameter block and test against it (`if (i.x < p.n)`), as the examples do.
//! - **One escape hatch**: [`DeviceArray::raw_binding`], [`DeviceArray::buffer`] (with
//!   [`DeviceArray::byte_offset`]), [`Context::device`], [`Context::queue`] and
//!   [`Context::raw_submit`] reach arena memory or the queue past gpu-arena's use tracking
//!   (for arrays in your own render or compute passes, [`Context::app_work`] is the tracked
//!   way).
//!   Each says under **Escape hatch** what the caller must do: name every array such work
//!   touches in `raw_submit`'s `uses`, or keep it alive until [`Context::synchronize`].
//! - **Device refusals** ([`Error::Device`], and [`Error::KernelCompile`] where the device
//!   refused a pipeline) carry wgpu's message on one line, each cause once; a kernel that does
//!   not parse or validate carries the compiler's message instead, which points at the source
//!   line over several lines.
//!
//! ## Modules
//!
//! - [`arena`]: the BFC allocator itself (offsets and sizes only, no GPU types).
//! - [`memplan`]: the vendor-aware memory-type policy, a pure function of a memory table.
//! - [`config`]: [`ArenaConfig`], its validation and the `GPU_ARENA_*` / JAX variables.
//! - `backend` (private): everything that touches the driver or the OS through raw handles
//!   and pointers, all of the crate's `unsafe`: where regions come from (gpu-allocator on
//!   Vulkan, plain wgpu buffers), host access to mapped memory (flush, invalidate, the host
//!   read barrier), the files the crate writes and the driver's pipeline cache, MPI buffers.
//! - `context`, `devices` (private): [`Context`], [`GpuUse`], adapters, [`devices()`], and
//!   contexts on the app's device ([`AppDevice`], [`DeviceRequirements`]).
//! - `array`, `view`, `donated` (private): [`DeviceArray`], [`ArrayView`], [`Donated`].
//! - `shape` (private): the limits every shape obeys ([`MAX_RANK`], [`MAX_ARRAY_SPAN_BYTES`])
//!   and the check each shape passes, below arrays, views, transfers and profiling.
//! - `app_work` (private): [`AppWork`], arrays in the app's own passes, tracked.
//! - [`transfer`]: puts, gets, batches, transfers between devices, the guard.
//! - `host_link` (private): how host bytes reach a context's arrays, chosen once when it
//!   opens: the staging pool, the gathered batch's staging, the transfer counters; held by the
//!   context, below it.
//! - `trace` (private): what a context records as it runs (the timeline, each array's type,
//!   shape and call site, label scopes, kernel times), below the context that writes it and
//!   the [`profile`] that reads it.
//! - [`kernels`]: the public names of compute ([`Kernel`], [`Launch`], [`Sequence`],
//!   [`Capture`], [`CapturedStep`],
//!   [`KernelSignature`], the compile cache's statistics); a facade over three private rooms:
//! - `compute` (private): what users call to run kernels: `Kernel`, `Launch`, `Sequence`.
//! - `ops` (private): the library's ops over arrays ([`Context::dynamic_update_slice`],
//!   [`Context::dynamic_slice`], [`Context::fill_in_place`], [`Context::copy`]) and their WGSL.
//! - `pipelines` (private): compilation, reflection, limits, the pipeline and disk caches and
//!   error scopes, below `compute`, `ops` and `context`.
//! - `step`, `submission` (private): a recorded step (of a sequence or of the context's
//!   gathered single ops) and its encoding; submission numbers.
//! - `sharding` (private): [`shard`] and [`gather`] over several contexts.
//! - `distributed` (cargo feature `mpi`): collectives over arrays across MPI ranks
//!   (all-reduce, broadcast, all-gather, reduce-scatter, send/recv) on your communicator;
//!   fused over lists of arrays and started on a progress thread, for gradients.
//! - [`profile`]: statistics, snapshots, the timeline, Perfetto export, the HTML report.
//! - [`remat`] and [`backprop`]: checkpointing plans and the driver that runs them.
//! - [`error`]: [`Error`] and [`Result`]; `recorder` and `shortfall` (private): the values
//!   errors carry that arrays and contexts make (an access and its recorder, an array's
//!   description; what an app's device lacks), below both.
//! - `lock` (private): the crate's locks, each with a rank; the order they may be taken in,
//!   checked in debug builds.
//!
//! The [`guide`] has a chapter per topic (kernels, captured steps, your app's device, the
//! configuration table and the memory policy, seeing memory, checkpointing, several devices,
//! MPI, and the changes since the last release); the README (on the repository and
//! crates.io) is its front page, with the set-up commands and the benchmarks.
#![warn(missing_docs)]
#![deny(unsafe_code)]

mod app_work;
mod app_work_refusal;
pub mod arena;
mod argument_refusal;
mod array;
mod backend;
pub mod backprop;
mod capture_refusal;
mod collective_failure;
mod compute;
pub mod config;
mod context;
mod count;
mod devices;
#[cfg(feature = "mpi")]
pub mod distributed;
mod donated;
pub mod error;
mod guard_levels;
pub mod guide;
mod host_link;
mod kernel_tuning;
pub mod kernels;
mod lock;
mod memory_kind;
pub mod memplan;
mod ops;
mod pipelines;
pub mod profile;
mod recorder;
pub mod remat;
mod shape;
mod sharding;
mod shortfall;
mod step;
mod submission;
mod trace;
pub mod transfer;
mod view;

pub use app_work::AppWork;
pub use arena::{MemoryStats, ALLOCATION_ALIGNMENT};
pub use array::DeviceArray;
pub use backend::{HostSyncCounts, VulkanLimits};
pub use config::{
    AdapterSelector, AllocatorKind, ArenaConfig, BackendChoice, BarWrites, KernelTuning,
    MemFraction,
};
pub use context::{
    AppDevice, Context, DeviceLostNotifier, DeviceRequirements, DeviceShortfall, GpuUse,
};
pub use devices::{devices, DeviceInfo};
pub use donated::{Donated, DonatedResult};
pub use error::{Error, Result};
pub use kernels::{
    ArraySlot, Capture, CaptureMode, CapturedStep, IndexSlot, InputSlot, ItemCount, Kernel,
    KernelCacheStats, KernelDesc, KernelShape, KernelSignature, KernelSource, KernelTuningReport,
    Launch, ParamsSlot, ReadSlot, Sequence, StepPlan, StepRun,
};
pub use memory_kind::MemoryKind;
pub use memplan::{BarClass, MemoryPlan};
pub use profile::{
    label_scope, report, ContextMemoryStats, MemorySnapshot, MemoryTimeline, Timeline,
};
pub use shape::{MAX_ARRAY_SPAN_BYTES, MAX_RANK};
pub use sharding::{gather, shard, shard_rows, ShardRows};
pub use submission::SubmissionId;
pub use transfer::{
    FinishedUpload, Operand, PendingArray, TransferDirection, TransferGuard, TransferGuardLevel,
    TransferGuardLevels, TransferStats, UploadBatch,
};
pub use view::{ArrayView, ArrayViewMut, KernelArg, KernelArgMut};

/// The `bytemuck` this crate is built with, so a dependent needs gpu-arena alone: element
/// types and parameter blocks are `Pod`. Its derives work through this path with bytemuck's
/// `crate` attribute:
///
/// ```
/// #[repr(C)]
/// #[derive(Clone, Copy, gpu_arena::bytemuck::Pod, gpu_arena::bytemuck::Zeroable)]
/// #[bytemuck(crate = "gpu_arena::bytemuck")]
/// struct Params { n: u32, a: f32 }
///
/// let bytes = gpu_arena::bytemuck::bytes_of(&Params { n: 3, a: 2.0 });
/// assert_eq!(bytes.len(), 8);
/// ```
pub use bytemuck;
/// The `wgpu` this crate is built with (its exact version), for [`Context::adapter_info`],
/// [`Context::limits`] and the escape hatch ([`DeviceArray::raw_binding`],
/// [`Context::raw_submit`]) without a second, mismatched `wgpu` in the dependency tree.
pub use wgpu;

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
