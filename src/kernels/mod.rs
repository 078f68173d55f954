//! Compute over arena arrays: users' own kernels ([`Kernel`], [`Launch`]), sequences of many
//! launches and ops in one submission ([`Sequence`]), the library's ops (`dynamic_update_slice`
//! in place when donated, `dynamic_update_slice_copy`, `dynamic_slice`, `fill`, `copy`), and
//! the cache of compiled pipelines. Every piece of GPU work, the library's and the user's, goes
//! through one path: compiled by `pipelines`, checked against `reflect`'s signature, recorded
//! as `sequence` steps, submitted inside error scopes, its arrays recorded as used.
//!
//! - `reflect`: what a kernel binds, read from its naga IR (pure).
//! - `pipelines`: compilation once per context and variant.
//! - `source_bounds`: what sources the compiler accepts, and its own thread, so that no source
//!   aborts or panics the caller.
//! - `limits`: every device limit a kernel's module can exceed, checked at `kernel()`.
//! - `disk_cache`: the driver pipeline cache on disk (`GPU_ARENA_CACHE_DIR`), where a damaged
//!   file costs speed, never the kernels, and nothing another user could have written is used
//!   (a private directory; no link followed, no FIFO waited on).
//! - `user_kernel`: [`Kernel`], [`KernelDesc`], `Context::kernel`.
//! - `launch`: [`Launch`], the checked launch of a user's kernel.
//! - `sequence`: [`Sequence`] and the one submission path.
//! - `error_scopes`: wgpu errors as `Result`s.
//! - `builtin`: the library's kernels as sequence steps (grids cut to the device's limits).
//! - `geometry`: which bytes move where, split to fit one binding and one dispatch (pure).
//! - `slicing`: XLA's index semantics (rank checks, clamped starts).
//! - `host`: on CPU adapters with zero-copy memory, the same ops as host `memcpy`s.
//! - one file per op: `update_slice`, `slice`, `fill`, `copy`.
//!
//! The library's kernels themselves are `shaders/*.wgsl`, one per file, built into the crate.
//!
//! # The recording model
//!
//! How gpu-arena orders GPU work and host access when work can be recorded now and submitted
//! later, by any number of threads sharing a [`Context`]:
//!
//! - **Recorders.** Work the user records and submits later goes into a *user recorder*:
//!   a [`Sequence`] from [`Context::sequence`] (and an [`UploadBatch`](crate::UploadBatch),
//!   whose arrays cannot be named until [`finish`](crate::UploadBatch::finish) submits them).
//!   Everything else is a *single op*: [`Context::launch`]`(..).run()`, `device_get`,
//!   `device_put_from` / `copy_to`, `copy`, `dynamic_slice`, `dynamic_update_slice(_copy)`,
//!   `fill_in_place`, `zeros`, [`gather`](crate::gather), ... Each is recorded and submitted
//!   within its call, as a library sequence of one step.
//! - **Pending.** An array is *pending* while a user's [`Sequence`] has recorded work on it and
//!   has not been submitted or dropped. Only user recorders make an array pending; the
//!   library's single ops never do, so two threads using one array through single ops (one
//!   launching kernels that read it, the other reading it back, copying or slicing it) both
//!   succeed, always.
//! - **Single ops refuse pending arrays.** Every single op, launches included, checks every
//!   array it is given the same way and refuses a pending one with
//!   [`Error::InvalidArgument`] naming the sequence (`Sequence #7`) and saying to submit it
//!   first: run now, the op would overtake the work recorded before it. Inside a sequence,
//!   its own arrays are used freely, in the order recorded; an array pending in *another*
//!   user sequence is accepted too: the two sequences run in the order they are submitted.
//! - **What fails records and marks nothing.** A launch or op checks all its arguments
//!   (context, sizes, alignment, element types, pending state) and compiles its kernels
//!   before it records a step or marks an array; a refused step leaves a sequence as it was.
//! - **All or nothing.** [`Sequence::submit`] encodes and validates every part of the
//!   sequence (more than 4096 dispatches are several command buffers) before it submits any,
//!   then submits them together: when it returns an error, no part of the sequence ran.
//! - **Marked in flight before the queue sees the work.** Every submission (sequences, single
//!   ops, transfers, [`Context::raw_submit`]) records itself on the arrays it uses *before*
//!   it is handed to the queue, so another thread's host read of such an array, or the reuse
//!   of its memory after a drop, waits for that work. On Vulkan each submission ends with a
//!   memory dependency to host reads, so that in-place reads see the device's writes.
//! - **Which call reports a device refusal.** The call that submits: `run()` of a single
//!   launch, the single op itself, [`Sequence::submit`] for recorded work, `raw_submit`.
//!   Single ops are submitted within their call (no deferred batching): an `Ok` means the
//!   device accepted the work.
#![deny(unsafe_code)]

mod builtin;
mod copy;
mod disk_cache;
mod error_scopes;
mod fill;
mod geometry;
mod host;
mod launch;
mod limits;
mod pipelines;
mod reflect;
mod sequence;
mod slice;
mod slicing;
mod source_bounds;
mod update_slice;
mod user_kernel;

pub use disk_cache::{DiskCacheLoad, CACHE_DIR_ENV};
pub use launch::Launch;
pub use pipelines::{KernelCacheStats, KernelSource};
pub use reflect::{KernelSignature, ParamsBlock, ParamsKind, StorageBinding, KERNEL_BIND_GROUP};
pub use sequence::Sequence;
pub use source_bounds::{MAX_SPIRV_WORDS, MAX_WGSL_EXPRESSION_DEPTH, MAX_WGSL_SOURCE_BYTES};
pub use user_kernel::{Kernel, KernelDesc};

pub(crate) use error_scopes::{describe_wgpu_error, ErrorScopes};
pub(crate) use sequence::Step;

pub(crate) use pipelines::KernelCache;

use crate::context::Context;
use crate::error::{Error, Result};

/// The smallest binding [`Context::limit_kernel_resources`] accepts: a piece of 256 bytes plus
/// the slack of rounding its binding out to the 256-byte offset alignment and to 16 bytes.
const MIN_TEST_BINDING_BYTES: u64 = 1024;

impl Context {
    /// How this context's kernels were compiled: pipelines compiled, cache hits, compile times,
    /// the driver pipeline-cache file (`GPU_ARENA_CACHE_DIR`).
    pub fn kernel_cache_stats(&self) -> KernelCacheStats {
        self.inner.kernels.lock().stats()
    }

    /// Makes kernels act as if bindings held at most `max_binding_bytes` and grids had at most
    /// `max_workgroups_per_dimension` workgroups per dimension, so that tests on small arrays
    /// take the paths that large arrays take on a real GPU (chunked bindings, 2-D/3-D grids and
    /// dispatches split past the grid's size). Not for production use.
    ///
    /// Errors: [`Error::InvalidArgument`] for a binding under 1024 bytes or zero workgroups.
    #[doc(hidden)]
    pub fn limit_kernel_resources(
        &self,
        max_binding_bytes: u64,
        max_workgroups_per_dimension: u32,
    ) -> Result<()> {
        if max_binding_bytes < MIN_TEST_BINDING_BYTES || max_workgroups_per_dimension == 0 {
            return Err(Error::InvalidArgument {
                operation: "limit_kernel_resources",
                reason: format!(
                    "bindings of at least {MIN_TEST_BINDING_BYTES} bytes and one workgroup are needed"
                ),
            });
        }
        self.inner.kernels.lock().limits_override = Some((
            max_binding_bytes.min(self.inner.limits.max_storage_buffer_binding_size),
            max_workgroups_per_dimension
                .min(self.inner.limits.max_compute_workgroups_per_dimension),
        ));
        Ok(())
    }

    /// Runs the WGSL kernels even on CPU adapters, where ops otherwise copy on the host
    /// (faster there), so that tests on lavapipe exercise the kernels. Not for production use.
    #[doc(hidden)]
    pub fn force_device_kernels(&self, force: bool) {
        self.inner.kernels.lock().force_device_kernels = force;
    }
}
