//! The public names of compute: users' kernels ([`Kernel`], [`KernelDesc`], [`Launch`],
//! [`Sequence`]), what reflection reads from a kernel ([`KernelSignature`] and its parts), the
//! compiler's bounds and the compile cache ([`KernelCacheStats`], [`DiskCacheLoad`],
//! [`CACHE_DIR_ENV`]).
//!
//! A facade: the code lives in three private modules by what it is for, `compute/` (what users
//! call), `ops/` (the library's ops over arrays) and `pipelines/` (compilation, caches, error
//! scopes, below both and below `Context`). The public path stays `gpu_arena::kernels::*`
//! because that is where users' code names these items (and the most used are also at the crate
//! root); the rooms behind it stay private, so the next change of layout changes no user's
//! code. This module only re-exports and is imported by nothing inside the crate.

pub use crate::compute::{Kernel, Launch, Sequence};
pub use crate::pipelines::{
    DiskCacheLoad, KernelCacheStats, KernelDesc, KernelSignature, KernelSource, ParamsBlock,
    ParamsKind, StorageBinding, CACHE_DIR_ENV, KERNEL_BIND_GROUP, MAX_SPIRV_WORDS,
    MAX_WGSL_EXPRESSION_DEPTH, MAX_WGSL_SOURCE_BYTES,
};
