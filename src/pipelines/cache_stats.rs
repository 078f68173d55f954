//! What the kernel cache reports: [`KernelCacheStats`] and [`DiskCacheLoad`], what became of the
//! pipeline-cache file. The compile cache (`cache.rs`) and the driver cache on disk
//! (`disk_cache.rs`) both fill them in, so they sit below both.

use std::path::PathBuf;
use std::time::Duration;

/// How this context's kernels were compiled: what a first call pays and a later one does not.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KernelCacheStats {
    /// Pipelines compiled so far (each kernel variant, and each user kernel per source, entry
    /// point and constants, at most once per context).
    pub pipelines_compiled: u64,
    /// Look-ups that found their pipeline already compiled (one per library op dispatch kind,
    /// one per repeated [`crate::Context::kernel`] call).
    pub pipeline_hits: u64,
    /// Wall time of every compilation together (reflection, shader module and pipeline).
    pub compile_time: Duration,
    /// Each compilation in order: the kernel's name and how long it took.
    pub compiles: Vec<(String, Duration)>,
    /// The driver pipeline-cache file, when `GPU_ARENA_CACHE_DIR` is set and the device has
    /// `Features::PIPELINE_CACHE` (Vulkan).
    pub disk_cache_file: Option<PathBuf>,
    /// Bytes of that file whose data seeded the driver cache at the first compilation (0 when
    /// there was no file or its data was discarded).
    pub disk_cache_loaded_bytes: u64,
    /// Whether the file's data was used, missing or discarded (and why), decided at the first
    /// compilation; [`DiskCacheLoad::Off`] without a cache file.
    pub disk_cache_load: DiskCacheLoad,
    /// Bytes of the file as last written (after each compilation; 0 before the first write).
    pub disk_cache_written_bytes: u64,
    /// Why the last write of the file failed (a directory in its place, a read-only or
    /// impossible path); `None` once a write succeeds. Kernels work either way.
    pub disk_cache_write_error: Option<String>,
    /// Pipelines kernel tuning compiled only to time them that the context still holds
    /// (counted nowhere above): a kernel's shapes that no size class chose go once every class
    /// of that kernel has its shape, and a chosen one moves to `pipelines_compiled` when an op
    /// first runs it.
    pub tuning_pipelines_held: u64,
}

/// What became of the pipeline-cache file when the driver cache was opened (at a context's
/// first kernel compilation).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum DiskCacheLoad {
    /// No file is involved: `GPU_ARENA_CACHE_DIR` is unset, the device has no pipeline
    /// cache (`wgpu::Features::PIPELINE_CACHE`: Vulkan only), or nothing has compiled yet.
    #[default]
    Off,
    /// There was no file yet: the cache started empty and the first compilation writes one.
    NoFile,
    /// The file's data seeded the driver cache: wgpu accepted its header. (The driver may
    /// still skip data that an older driver wrote; that costs one compilation per kernel,
    /// nothing else.)
    Used,
    /// The file could not be used: the cache started empty, a warning was logged, and the
    /// next compilation overwrites the file where it can be written.
    Discarded {
        /// Why, in words: empty, too short or without this crate's trailer, a checksum that does
        /// not match, a symbolic link (never followed), not a regular file, another user's or
        /// writable by others, unreadable, or wgpu's own reason (a header that is damaged,
        /// truncated, outdated or written for another device).
        reason: String,
    },
    /// `GPU_ARENA_CACHE_DIR` names a directory the crate does not use: it belongs to another
    /// user, its group or other users may write to it (they could plant links or forged
    /// files), it is not a directory, or it could not be created. Nothing is read or written
    /// there by this context, a warning was logged, and kernels compile as without a cache.
    DirectoryRefused {
        /// Why, in words that say what to change.
        reason: String,
    },
}

impl DiskCacheLoad {
    /// The case in a word: `off`, `no file`, `used`, `discarded`, `directory refused`.
    pub fn name(&self) -> &'static str {
        match self {
            DiskCacheLoad::Off => "off",
            DiskCacheLoad::NoFile => "no file",
            DiskCacheLoad::Used => "used",
            DiskCacheLoad::Discarded { .. } => "discarded",
            DiskCacheLoad::DirectoryRefused { .. } => "directory refused",
        }
    }
}

impl std::fmt::Display for DiskCacheLoad {
    /// [`DiskCacheLoad::name`], then the reason where there is one (`discarded: a checksum
    /// that does not match`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())?;
        match self {
            DiskCacheLoad::Discarded { reason } | DiskCacheLoad::DirectoryRefused { reason } => {
                write!(f, ": {reason}")
            }
            _ => Ok(()),
        }
    }
}
