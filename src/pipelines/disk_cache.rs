//! The driver pipeline cache on disk: with `GPU_ARENA_CACHE_DIR` set, the Vulkan driver's
//! compiled pipelines are saved to a file after each compilation and seed the next process's
//! cache, so its first kernel launches skip most of the compiling.
//!
//! A damaged, foreign or unreadable file costs speed, never the kernels: whatever is wrong with
//! it, the driver cache starts empty, a warning names the file and the reason,
//! [`KernelCacheStats::disk_cache_load`] says so, and the next compilation overwrites the file.
//!
//! The file is the bytes of `wgpu::PipelineCache::get_data` (wgpu's 64-byte header, then the
//! driver's data) followed by a [`TRAILER_BYTES`]-byte trailer of our own: an FNV-1a checksum
//! of those bytes and [`TRAILER_MAGIC`]. wgpu checks its header but trusts the driver's data
//! behind it, and a driver may trust it too; the checksum keeps a damaged body (a torn write,
//! a bad disk, a truncated copy) away from both. The checksum catches accidents, not forgery:
//! what keeps forged files out is that nobody but the user can write where the file lives.
//! So, as Mesa's disk cache does (the operating-system side is `backend/private_files.rs`):
//! - a setuid or setgid process ignores `GPU_ARENA_CACHE_DIR` (with a warning);
//! - the directory is created private (0700), and one that belongs to another user or that its
//!   group or others may write is refused: a warning, [`DiskCacheLoad::DirectoryRefused`], no
//!   cache on disk for that context, kernels compile as without one;
//! - the file is opened without following a link or blocking on a FIFO, and used only if what
//!   was opened is a regular file of the user's that only the user may write;
//! - it is written to a new file of an unguessable name (mode 0600), then renamed into place,
//!   so a link planted at the file's name or any temporary name is replaced, never followed.

use super::cache_stats::{DiskCacheLoad, KernelCacheStats};
use super::error_scopes::{wgpu_error_causes, ErrorScopes};
use crate::backend::{private_dir, read_private_file, replace_private_file, PrivateFileRefusal};
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// Where the driver pipeline cache (and the kernel tuning file) is kept across processes
/// (unset: not persisted; empty or blank: refused as [`Error::Config`]).
pub const CACHE_DIR_ENV: &str = "GPU_ARENA_CACHE_DIR";

/// The label of the driver cache (it appears in wgpu's messages).
const CACHE_LABEL: &str = "gpu-arena kernels";

/// Marks the end of a file this crate wrote (changes with the trailer's layout).
const TRAILER_MAGIC: [u8; 8] = *b"gpuarena";

/// The trailer: the checksum (`u64`, little-endian), then [`TRAILER_MAGIC`].
const TRAILER_BYTES: usize = 16;

/// The largest cache file read or written. The crate's own kernels make kilobytes of driver
/// data and large user-kernel sets a few MiB; a file far beyond that is damage, and reading
/// it whole would cost memory for nothing.
const MAX_FILE_BYTES: u64 = 256 << 20;

/// FNV-1a 64-bit parameters (the offset basis and prime of the published algorithm).
const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// The driver cache of one context and its file: opened at the first compilation, written
/// after each. Lives behind the kernel lock.
pub(crate) struct DiskCache {
    /// `GPU_ARENA_CACHE_DIR` when the context opened.
    dir: Option<PathBuf>,
    /// `None` until the first compilation, then the cache (if the device has one).
    opened: Option<Option<wgpu::PipelineCache>>,
    /// Whether a failed write was already logged (one warning per context, not per kernel).
    write_failure_logged: bool,
}

impl DiskCache {
    /// Not opened yet; the directory comes from `GPU_ARENA_CACHE_DIR` (unset: no disk cache).
    ///
    /// Errors: [`Error::Config`] for a blank value (unset the variable to turn the cache off);
    /// any other path is accepted, UTF-8 or not (a path the process cannot use only costs
    /// speed, and is reported in [`KernelCacheStats`]). A setuid or setgid process ignores the
    /// variable, with a warning.
    pub(crate) fn from_env() -> Result<Self> {
        let dir = match std::env::var_os(CACHE_DIR_ENV) {
            None => None,
            Some(value) if value.to_string_lossy().trim().is_empty() => {
                return Err(Error::Config {
                    variable: CACHE_DIR_ENV.into(),
                    value: value.to_string_lossy().into_owned(),
                    expected: "a directory path (unset the variable for no pipeline cache on disk)"
                        .into(),
                })
            }
            Some(value) if crate::backend::runs_with_borrowed_identity() => {
                // Whoever set the variable is not who this process writes as.
                log::warn!(
                    "gpu-arena: ignoring {CACHE_DIR_ENV}={}: the process runs setuid or setgid \
                     (kernels compile without a pipeline cache on disk)",
                    PathBuf::from(value).display()
                );
                None
            }
            // Blanks around the value are ignored, as every variable's are (a path that is
            // not UTF-8 is taken as it is).
            Some(value) => Some(match value.to_str() {
                Some(text) => PathBuf::from(text.trim()),
                None => PathBuf::from(value),
            }),
        };
        Ok(Self {
            dir,
            opened: None,
            write_failure_logged: false,
        })
    }

    /// `GPU_ARENA_CACHE_DIR` when the context opened.
    pub(crate) fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The driver cache to compile pipelines with, opened at the first call: seeded from the
    /// file when `GPU_ARENA_CACHE_DIR` is set and its data is usable, empty otherwise. `None`
    /// when the device has no pipeline cache. Records what happened in `stats`.
    pub(crate) fn driver_cache(
        &mut self,
        device: &wgpu::Device,
        adapter: &wgpu::AdapterInfo,
        stats: &mut KernelCacheStats,
    ) -> Option<wgpu::PipelineCache> {
        if self.opened.is_none() {
            self.opened = Some(self.open(device, adapter, stats));
        }
        self.opened.clone().flatten()
    }

    fn open(
        &mut self,
        device: &wgpu::Device,
        adapter: &wgpu::AdapterInfo,
        stats: &mut KernelCacheStats,
    ) -> Option<wgpu::PipelineCache> {
        if !device.features().contains(wgpu::Features::PIPELINE_CACHE) {
            return None;
        }
        let (dir, file) = match (&self.dir, wgpu::util::pipeline_cache_key(adapter)) {
            (Some(dir), Some(key)) => (dir, dir.join(format!("{key}.bin"))),
            // Nothing to persist; within a process each pipeline compiles once anyway.
            _ => return None,
        };
        if let Err(reason) = private_dir(dir) {
            log::warn!(
                "gpu-arena: not using the pipeline cache directory {} ({CACHE_DIR_ENV}): \
                 {reason} (kernels compile without a cache on disk)",
                dir.display()
            );
            stats.disk_cache_load = DiskCacheLoad::DirectoryRefused {
                reason: reason.to_string(),
            };
            return None;
        }
        stats.disk_cache_file = Some(file.clone());
        let data = match read_cache_file(&file) {
            Ok(None) => {
                stats.disk_cache_load = DiskCacheLoad::NoFile;
                return create_empty(device);
            }
            Ok(Some(data)) => data,
            Err(reason) => return discard(device, &file, reason.to_string(), stats),
        };
        let scopes = ErrorScopes::push(device);
        let cache =
            crate::backend::create_pipeline_cache(device, CACHE_LABEL, Some(data.driver_data()));
        if let Some(error) = scopes.pop_error() {
            // wgpu refused its header (outdated, damaged, for another device): the handle it
            // gave back is invalid and would fail every pipeline compiled with it.
            drop(cache);
            return discard(device, &file, describe(&error), stats);
        }
        stats.disk_cache_load = DiskCacheLoad::Used;
        stats.disk_cache_loaded_bytes = data.file_bytes;
        Some(cache)
    }

    /// Writes the driver cache to its file after a compilation (atomically: a temporary file,
    /// then a rename), so the next process finds every pipeline compiled so far. A failure only
    /// costs speed: it is logged once per context and kept in `stats`.
    pub(crate) fn persist(&mut self, stats: &mut KernelCacheStats) {
        let (Some(Some(cache)), Some(file)) = (&self.opened, &stats.disk_cache_file) else {
            return;
        };
        let Some(data) = cache.get_data() else {
            return;
        };
        match write_cache_file(file, &data) {
            Ok(written) => {
                stats.disk_cache_written_bytes = written;
                stats.disk_cache_write_error = None;
            }
            Err(reason) => {
                if !self.write_failure_logged {
                    log::warn!(
                        "gpu-arena: could not write the pipeline cache {}: {reason} (kernels \
                         still work; the next process compiles them again)",
                        file.display()
                    );
                    self.write_failure_logged = true;
                }
                stats.disk_cache_write_error = Some(reason.to_string());
            }
        }
    }
}

/// Logs why the file's data is not used, records it, and starts an empty cache instead.
fn discard(
    device: &wgpu::Device,
    file: &Path,
    reason: String,
    stats: &mut KernelCacheStats,
) -> Option<wgpu::PipelineCache> {
    log::warn!(
        "gpu-arena: ignoring the pipeline cache {}: {reason} (kernels compile without it; the \
         file is written anew after the next compilation, or a warning says why it could not \
         be)",
        file.display()
    );
    stats.disk_cache_load = DiskCacheLoad::Discarded { reason };
    create_empty(device)
}

/// An empty driver cache, or none if even that fails (the kernels then compile without one).
fn create_empty(device: &wgpu::Device) -> Option<wgpu::PipelineCache> {
    let scopes = ErrorScopes::push(device);
    let cache = crate::backend::create_pipeline_cache(device, CACHE_LABEL, None);
    match scopes.pop_error() {
        None => Some(cache),
        Some(error) => {
            log::warn!(
                "gpu-arena: no driver pipeline cache ({}); kernels compile without one",
                describe(&error)
            );
            None
        }
    }
}

/// wgpu's error in one line: its causes (its own text starts with a generic "Validation
/// Error" heading, which says nothing about the file).
fn describe(error: &wgpu::Error) -> String {
    match wgpu_error_causes(error).strip_prefix(": ") {
        Some(causes) => format!("wgpu refused it: {causes}"),
        None => error.to_string(),
    }
}

/// A cache file's contents whose trailer checked out.
pub(super) struct CacheFileData {
    bytes: Vec<u8>,
    file_bytes: u64,
}

impl CacheFileData {
    /// What `get_data` returned when the file was written (the file without its trailer).
    pub(super) fn driver_data(&self) -> &[u8] {
        &self.bytes[..self.bytes.len() - TRAILER_BYTES]
    }
}

/// Why the cache file is not used or not written: each variant's text says what is wrong.
#[derive(Debug, thiserror::Error)]
pub(super) enum CacheFileRefusal {
    /// Refused as a private file (a link, another user's file, a FIFO, ...).
    #[error(transparent)]
    File(#[from] PrivateFileRefusal),
    /// The file has no data: no bytes, or this crate's trailer alone.
    #[error("it is empty (it holds no data)")]
    Empty,
    /// The file is shorter than the trailer.
    #[error("it holds {file_bytes} bytes, too few for a gpu-arena pipeline cache (truncated)")]
    Truncated { file_bytes: u64 },
    /// The file does not end with [`TRAILER_MAGIC`].
    #[error(
        "it does not end with gpu-arena's trailer (truncated, or written by another program \
         or an older gpu-arena)"
    )]
    NoTrailer,
    /// The checksum in the trailer is not the data's.
    #[error(
        "its checksum does not match its data (stored {stored:#018x}, computed \
         {computed:#018x}): the file is damaged"
    )]
    Checksum { stored: u64, computed: u64 },
    /// The driver's data is larger than a cache file may be.
    #[error(
        "the driver's data ({data_bytes} bytes) is larger than the {MAX_FILE_BYTES} bytes a \
         cache file may hold"
    )]
    TooLarge { data_bytes: usize },
    /// Writing the file failed.
    #[error("{0}")]
    Write(std::io::Error),
}

/// The file's data if it is there and intact; `Ok(None)` when there is no file; otherwise
/// why it cannot be used. A link is not followed, a FIFO not waited on, and a file another
/// user could have written is not used (`read_private_file`).
pub(super) fn read_cache_file(file: &Path) -> Result<Option<CacheFileData>, CacheFileRefusal> {
    let Some(bytes) = read_private_file(file, MAX_FILE_BYTES)? else {
        return Ok(None);
    };
    let file_bytes = bytes.len() as u64;
    if bytes.is_empty() {
        return Err(CacheFileRefusal::Empty);
    }
    let Some(body_bytes) = bytes.len().checked_sub(TRAILER_BYTES) else {
        return Err(CacheFileRefusal::Truncated { file_bytes });
    };
    let (body, trailer) = bytes.split_at(body_bytes);
    let (stored, magic) = trailer.split_at(TRAILER_BYTES - TRAILER_MAGIC.len());
    if magic != TRAILER_MAGIC {
        return Err(CacheFileRefusal::NoTrailer);
    }
    if body.is_empty() {
        return Err(CacheFileRefusal::Empty);
    }
    let mut checksum_bytes = [0u8; 8];
    checksum_bytes.copy_from_slice(stored);
    let stored = u64::from_le_bytes(checksum_bytes);
    let computed = checksum(body);
    if stored != computed {
        return Err(CacheFileRefusal::Checksum { stored, computed });
    }
    Ok(Some(CacheFileData { bytes, file_bytes }))
}

/// Writes `data` and its trailer to `file` through a new temporary file of an unguessable name
/// and a rename, so that a reader never sees half a file and a planted link is replaced, never
/// written through; returns the bytes written or why not.
pub(super) fn write_cache_file(file: &Path, data: &[u8]) -> Result<u64, CacheFileRefusal> {
    if data.len() as u64 + TRAILER_BYTES as u64 > MAX_FILE_BYTES {
        return Err(CacheFileRefusal::TooLarge {
            data_bytes: data.len(),
        });
    }
    let mut contents = Vec::with_capacity(data.len() + TRAILER_BYTES);
    contents.extend_from_slice(data);
    contents.extend_from_slice(&checksum(data).to_le_bytes());
    contents.extend_from_slice(&TRAILER_MAGIC);
    // The directory was created and checked when the cache opened.
    replace_private_file(file, &contents).map_err(CacheFileRefusal::Write)?;
    Ok(contents.len() as u64)
}

/// FNV-1a, 64 bits: enough to tell a damaged file from an intact one, and small enough to
/// write here rather than depend on a crate.
pub(super) fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(FNV_OFFSET_BASIS, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(FNV_PRIME)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temporary_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "gpu-arena-disk-cache-unit-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        private_dir(&dir).unwrap();
        dir
    }

    #[test]
    fn a_written_file_reads_back_as_the_driver_data() {
        let dir = temporary_dir("roundtrip");
        let file = dir.join("cache.bin");
        let data = b"WGPUPLCH and the driver's bytes".to_vec();
        let written = write_cache_file(&file, &data).unwrap();
        assert_eq!(written, (data.len() + TRAILER_BYTES) as u64);
        let read = read_cache_file(&file).unwrap().expect("the file");
        assert_eq!(read.driver_data(), data);
        assert_eq!(read.file_bytes, written);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn every_flipped_byte_of_a_written_file_is_refused() {
        let dir = temporary_dir("flips");
        let file = dir.join("cache.bin");
        write_cache_file(&file, &[7u8; 40]).unwrap();
        let good = std::fs::read(&file).unwrap();
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x5a;
            std::fs::write(&file, &bad).unwrap();
            let refused = read_cache_file(&file).err().expect("refused");
            assert!(
                matches!(
                    refused,
                    CacheFileRefusal::Checksum { .. } | CacheFileRefusal::NoTrailer
                ),
                "byte {i}: {refused}"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_missing_file_is_no_file_and_odd_paths_say_why() {
        let dir = temporary_dir("odd");
        assert!(read_cache_file(&dir.join("none.bin")).unwrap().is_none());
        std::fs::create_dir_all(dir.join("a-directory.bin")).unwrap();
        let refused = read_cache_file(&dir.join("a-directory.bin")).err().unwrap();
        assert!(
            matches!(
                refused,
                CacheFileRefusal::File(PrivateFileRefusal::ADirectory)
            ),
            "{refused}"
        );
        std::fs::write(dir.join("empty.bin"), b"").unwrap();
        let refused = read_cache_file(&dir.join("empty.bin")).err().unwrap();
        assert!(matches!(refused, CacheFileRefusal::Empty), "{refused}");
        // A trailer with its right checksum and nothing before it holds no data either.
        write_cache_file(&dir.join("trailer.bin"), b"").unwrap();
        let refused = read_cache_file(&dir.join("trailer.bin")).err().unwrap();
        assert!(matches!(refused, CacheFileRefusal::Empty), "{refused}");
        std::fs::write(dir.join("short.bin"), b"gpuarena").unwrap();
        let refused = read_cache_file(&dir.join("short.bin")).err().unwrap();
        assert!(
            matches!(refused, CacheFileRefusal::Truncated { file_bytes: 8 }),
            "{refused}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_write_under_a_regular_file_fails_with_the_reason() {
        let dir = temporary_dir("unwritable");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("plain"), b"not a directory").unwrap();
        let refused = write_cache_file(&dir.join("plain/sub/cache.bin"), b"data")
            .err()
            .unwrap();
        assert!(matches!(refused, CacheFileRefusal::Write(_)), "{refused}");
        assert!(refused.to_string().contains("os error"), "{refused}");
        assert_eq!(
            std::fs::read(dir.join("plain")).unwrap(),
            b"not a directory"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_failed_rename_leaves_no_temporary_file_behind() {
        let dir = temporary_dir("rename");
        std::fs::create_dir_all(dir.join("cache.bin/inside")).unwrap();
        let refused = write_cache_file(&dir.join("cache.bin"), b"data")
            .err()
            .unwrap();
        assert!(matches!(refused, CacheFileRefusal::Write(_)), "{refused}");
        let entries: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(entries, ["cache.bin"]);
        assert!(dir.join("cache.bin/inside").is_dir());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(unix)]
    #[test]
    fn a_link_planted_at_the_cache_file_is_not_followed_and_its_target_is_untouched() {
        let dir = temporary_dir("link-file");
        let target = dir.join("precious");
        std::fs::write(&target, b"the user's data").unwrap();
        let file = dir.join("cache.bin");
        std::os::unix::fs::symlink(&target, &file).unwrap();
        let refused = read_cache_file(&file).err().expect("refused");
        assert!(
            matches!(refused, CacheFileRefusal::File(PrivateFileRefusal::Link)),
            "{refused}"
        );
        write_cache_file(&file, b"driver data").unwrap();
        assert!(!std::fs::symlink_metadata(&file)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&target).unwrap(), b"the user's data");
        assert_eq!(
            read_cache_file(&file).unwrap().unwrap().driver_data(),
            b"driver data"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(unix)]
    #[test]
    fn links_planted_at_temporary_names_are_never_written_through() {
        let dir = temporary_dir("link-temporary");
        let target = dir.join("precious");
        std::fs::write(&target, b"the user's data").unwrap();
        // The names the temporary file once had: `<key>.<pid>-<n>.tmp`.
        for n in 0..64 {
            let name = format!("cache.{}-{n}.tmp", std::process::id());
            std::os::unix::fs::symlink(&target, dir.join(name)).unwrap();
        }
        let file = dir.join("cache.bin");
        for _ in 0..8 {
            write_cache_file(&file, b"driver data").unwrap();
        }
        assert_eq!(std::fs::read(&target).unwrap(), b"the user's data");
        let links = std::fs::read_dir(&dir)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_type().unwrap().is_symlink())
            .count();
        assert_eq!(links, 64, "the planted links are left as they were");
        assert!(read_cache_file(&file).unwrap().is_some());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_at_the_cache_file_is_refused_without_waiting_for_a_writer() {
        let dir = temporary_dir("fifo");
        let file = dir.join("cache.bin");
        let made = std::process::Command::new("mkfifo").arg(&file).status();
        if !made.is_ok_and(|s| s.success()) {
            eprintln!("no mkfifo here; nothing to check");
            return;
        }
        // On a thread, so that a read that blocks fails the test instead of hanging it.
        let (sender, receiver) = std::sync::mpsc::channel();
        let reading = file.clone();
        std::thread::spawn(move || sender.send(read_cache_file(&reading).err()));
        let refused = receiver
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("reading a FIFO must not wait for a writer")
            .expect("refused");
        assert!(
            matches!(
                refused,
                CacheFileRefusal::File(PrivateFileRefusal::NotRegular)
            ),
            "{refused}"
        );
        write_cache_file(&file, b"driver data").unwrap();
        assert!(read_cache_file(&file).unwrap().is_some());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(unix)]
    #[test]
    fn a_written_file_is_private_to_the_user() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temporary_dir("mode");
        let file = dir.join("cache.bin");
        write_cache_file(&file, b"driver data").unwrap();
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_checksum_is_fnv1a_64() {
        // Published test vectors of FNV-1a 64.
        assert_eq!(checksum(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(checksum(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(checksum(b"foobar"), 0x8594_4171_f739_67e8);
    }
}
