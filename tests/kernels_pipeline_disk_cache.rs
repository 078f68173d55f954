//! With `GPU_ARENA_CACHE_DIR` the driver pipeline cache is written to disk and read back by the
//! next context (the next process, in real use). A damaged, foreign or unreachable file costs
//! speed, never the kernels: they compile in that context and the next, the statistics say why
//! the file was not used, and the file is valid again afterwards where it can be written.
//!
//! Each test plays two or three "processes" one after the other: contexts opened in turn with
//! the same `GPU_ARENA_CACHE_DIR`, which a context reads when it opens. The variable is global,
//! so the tests of this binary take turns through [`CacheDir`].

#[macro_use]
extern crate gpu_arena_test_macro;

// Helpers for the GPU tests; this binary uses only some of them.
#[allow(dead_code, unused_imports)]
#[path = "gpu/harness/mod.rs"]
mod harness;
#[allow(dead_code)]
#[path = "gpu/kernels_common/mod.rs"]
mod kernels_common;

use gpu_arena::kernels::{DiskCacheLoad, CACHE_DIR_ENV};
use gpu_arena::Context;
use harness::logged_messages_containing;
use kernels_common::kernel_context;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

/// Serialises the tests of this binary around `GPU_ARENA_CACHE_DIR`.
static CACHE_DIR_LOCK: Mutex<()> = Mutex::new(());

/// Bytes of wgpu's header at the start of the file (`wgpu-core`'s `pipeline_cache.rs`: magic 8,
/// header version 4, ABI 4, backend 1, adapter key 15, validation key 16, data size 8, hash 8).
const WGPU_HEADER_BYTES: usize = 64;
/// Where wgpu's header keeps the adapter key (vendor and device id on Vulkan).
const WGPU_ADAPTER_KEY: std::ops::Range<usize> = 17..32;
/// The crate's trailer after the driver data: an FNV-1a 64 checksum and this magic.
const TRAILER_MAGIC: &[u8; 8] = b"gpuarena";
const TRAILER_BYTES: usize = 16;

/// A fresh cache directory named for the test, set as `GPU_ARENA_CACHE_DIR` while this lives.
struct CacheDir {
    path: PathBuf,
    _turn: MutexGuard<'static, ()>,
}

impl CacheDir {
    fn new(test: &str) -> Self {
        let turn = CACHE_DIR_LOCK.lock().unwrap_or_else(|p| p.into_inner());
        let path = std::env::temp_dir().join(format!(
            "gpu-arena-cache-test-{test}-{}",
            std::process::id()
        ));
        remove(&path);
        std::env::set_var(CACHE_DIR_ENV, &path);
        Self { path, _turn: turn }
    }
}

impl Drop for CacheDir {
    fn drop(&mut self) {
        std::env::remove_var(CACHE_DIR_ENV);
        remove(&self.path);
    }
}

/// Removes a file or directory tree, whichever is there.
fn remove(path: &Path) {
    let _ = std::fs::remove_dir_all(path);
    let _ = std::fs::remove_file(path);
}

/// Runs every kernel variant (fill, both row copies, the byte copy) and checks the results.
fn kernels_compute_correctly(ctx: &Context) {
    let mut a = ctx.fill(&[8, 8], 1u32).unwrap();
    let row = ctx.device_put(&[2u32; 8], &[1, 8]).unwrap();
    a = ctx.dynamic_update_slice(a, &row, &[3, 0]).unwrap();
    let block = ctx.dynamic_slice(&a, &[2, 6], &[3, 2]).unwrap();
    assert_eq!(ctx.device_get(&block).unwrap(), [1, 1, 2, 2, 1, 1]);
    let copied = ctx.copy(&a).unwrap();
    let mut expected = vec![1u32; 64];
    expected[24..32].fill(2);
    assert_eq!(ctx.device_get(&copied).unwrap(), expected);
    let bytes = ctx
        .device_put(&(0u8..25).collect::<Vec<_>>(), &[5, 5])
        .unwrap();
    let middle = ctx.dynamic_slice(&bytes, &[1, 1], &[2, 3]).unwrap();
    assert_eq!(ctx.device_get(&middle).unwrap(), [6, 7, 8, 11, 12, 13]);
    assert!(ctx.kernel_cache_stats().pipelines_compiled >= 4);
}

/// Whether the device keeps a driver pipeline cache at all (Vulkan: the tests that need one
/// say `needs = Vulkan`, and the harness counts them as skipped elsewhere).
fn has_pipeline_cache(ctx: &Context) -> bool {
    let has = ctx
        .device()
        .features()
        .contains(wgpu::Features::PIPELINE_CACHE);
    if !has {
        eprintln!("the device has no pipeline cache; nothing to persist");
    }
    has
}

/// A first context compiles the kernels and writes the cache file; its path and bytes.
fn a_valid_cache_file() -> Option<(PathBuf, Vec<u8>)> {
    let ctx = kernel_context();
    if !has_pipeline_cache(&ctx) {
        return None;
    }
    kernels_compute_correctly(&ctx);
    let stats = ctx.kernel_cache_stats();
    assert_eq!(stats.disk_cache_load, DiskCacheLoad::NoFile, "{stats:?}");
    let file = stats.disk_cache_file.clone().expect("a cache file");
    let bytes = std::fs::read(&file).unwrap();
    assert_eq!(bytes.len() as u64, stats.disk_cache_written_bytes);
    assert!(
        bytes.len() > WGPU_HEADER_BYTES + TRAILER_BYTES,
        "{}",
        bytes.len()
    );
    assert_eq!(&bytes[..8], b"WGPUPLCH", "wgpu's header comes first");
    Some((file, bytes))
}

/// The crate's file format written out independently of the crate: the driver data, its
/// FNV-1a 64-bit checksum (little-endian), the magic.
fn sealed(driver_data: &[u8]) -> Vec<u8> {
    let checksum = driver_data
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |hash, &byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x100_0000_01b3)
        });
    let mut file = driver_data.to_vec();
    file.extend_from_slice(&checksum.to_le_bytes());
    file.extend_from_slice(TRAILER_MAGIC);
    file
}

/// The driver data of a file the crate wrote (without the trailer).
fn driver_data(file: &[u8]) -> &[u8] {
    &file[..file.len() - TRAILER_BYTES]
}

/// The next context discards the file at `file` for a reason containing `reason`, warns
/// naming the file, and runs its kernels; the file is rewritten, and the context after it uses
/// the file and runs its kernels too.
fn the_next_contexts_discard_then_use_the_file(file: &Path, reason: &str) {
    let ctx = kernel_context();
    kernels_compute_correctly(&ctx);
    let stats = ctx.kernel_cache_stats();
    match &stats.disk_cache_load {
        DiskCacheLoad::Discarded { reason: why } => {
            assert!(why.contains(reason), "{why:?} should say {reason:?}")
        }
        other => panic!("the file should be discarded, not {other:?}"),
    }
    assert_eq!(stats.disk_cache_loaded_bytes, 0);
    assert_eq!(stats.disk_cache_write_error, None, "{stats:?}");
    let warnings = logged_messages_containing(&file.display().to_string());
    assert!(
        warnings.iter().any(|w| w.contains(reason)),
        "a warning names the file and the reason: {warnings:?}"
    );
    drop(ctx);

    let rewritten = std::fs::read(file).expect("the file was rewritten");
    assert_eq!(&rewritten[rewritten.len() - 8..], TRAILER_MAGIC);
    let next = kernel_context();
    kernels_compute_correctly(&next);
    let stats = next.kernel_cache_stats();
    assert_eq!(stats.disk_cache_load, DiskCacheLoad::Used, "{stats:?}");
    assert_eq!(stats.disk_cache_loaded_bytes, rewritten.len() as u64);
    assert_nothing_uncaptured();
}

/// No error reached wgpu's uncaptured-error handler (`#[gpu_test]` checks Vulkan's log).
fn assert_nothing_uncaptured() {
    let uncaptured = logged_messages_containing("uncaptured");
    assert!(uncaptured.is_empty(), "{uncaptured:?}");
}

#[gpu_test(needs = Vulkan)]
fn the_driver_pipeline_cache_persists_to_the_cache_dir() {
    let _dir = CacheDir::new("persists");
    let Some((file, written)) = a_valid_cache_file() else {
        return;
    };
    let again = kernel_context();
    kernels_compute_correctly(&again);
    let stats = again.kernel_cache_stats();
    assert_eq!(stats.disk_cache_load, DiskCacheLoad::Used);
    assert_eq!(
        stats.disk_cache_loaded_bytes,
        written.len() as u64,
        "read back by the next context"
    );
    assert_eq!(stats.disk_cache_file.as_deref(), Some(file.as_path()));
    assert_nothing_uncaptured();
}

#[gpu_test]
fn without_a_cache_dir_nothing_is_read_or_written() {
    let dir = CacheDir::new("unset");
    std::env::remove_var(CACHE_DIR_ENV);
    let ctx = kernel_context();
    kernels_compute_correctly(&ctx);
    let stats = ctx.kernel_cache_stats();
    assert_eq!(stats.disk_cache_load, DiskCacheLoad::Off);
    assert_eq!(stats.disk_cache_file, None);
    assert_eq!(stats.disk_cache_written_bytes, 0);
    assert!(!dir.path.exists());
}

#[gpu_test(needs = Vulkan)]
fn an_empty_cache_file_is_discarded_and_rewritten() {
    let _dir = CacheDir::new("empty");
    let Some((file, _)) = a_valid_cache_file() else {
        return;
    };
    std::fs::write(&file, b"").unwrap();
    the_next_contexts_discard_then_use_the_file(&file, "empty");
    // gpu-arena's trailer alone, its checksum right: no data either.
    std::fs::write(&file, sealed(b"")).unwrap();
    the_next_contexts_discard_then_use_the_file(&file, "empty");
}

#[gpu_test(needs = Vulkan)]
fn a_truncated_cache_file_is_discarded_and_rewritten() {
    let _dir = CacheDir::new("truncated");
    let Some((file, bytes)) = a_valid_cache_file() else {
        return;
    };
    // Cut inside the driver data, and inside wgpu's header.
    for keep in [bytes.len() - 1, bytes.len() / 2, WGPU_HEADER_BYTES / 2, 3] {
        std::fs::write(&file, &bytes[..keep]).unwrap();
        let reason = if keep < TRAILER_BYTES {
            "too few"
        } else {
            "trailer"
        };
        the_next_contexts_discard_then_use_the_file(&file, reason);
    }
}

#[gpu_test(needs = Vulkan)]
fn a_cache_file_of_random_bytes_is_discarded_and_rewritten() {
    let _dir = CacheDir::new("random");
    let Some((file, bytes)) = a_valid_cache_file() else {
        return;
    };
    let mut rng = harness::Rng(17);
    std::fs::write(&file, rng.bytes(bytes.len())).unwrap();
    the_next_contexts_discard_then_use_the_file(&file, "trailer");
    // Random bytes that end like the crate's files: the checksum catches them.
    let mut random = rng.bytes(bytes.len() - 8);
    random.extend_from_slice(TRAILER_MAGIC);
    std::fs::write(&file, random).unwrap();
    the_next_contexts_discard_then_use_the_file(&file, "checksum");
}

#[gpu_test(needs = Vulkan)]
fn a_valid_header_with_a_wrong_adapter_key_is_discarded_and_rewritten() {
    let _dir = CacheDir::new("adapter-key");
    let Some((file, bytes)) = a_valid_cache_file() else {
        return;
    };
    // A file for another device under this device's name, intact otherwise (its checksum
    // matches): wgpu refuses it with a validation error.
    let mut foreign = driver_data(&bytes).to_vec();
    for byte in &mut foreign[WGPU_ADAPTER_KEY] {
        *byte ^= 0xff;
    }
    std::fs::write(&file, sealed(&foreign)).unwrap();
    the_next_contexts_discard_then_use_the_file(&file, "different device");
    // The same damage on disk (the bytes from 16 on flipped), checksum left as it was.
    let mut damaged = bytes.clone();
    for byte in &mut damaged[16..WGPU_HEADER_BYTES] {
        *byte = !*byte;
    }
    std::fs::write(&file, damaged).unwrap();
    the_next_contexts_discard_then_use_the_file(&file, "checksum");
}

#[gpu_test(needs = Vulkan)]
fn a_sealed_file_whose_wgpu_header_is_not_wgpus_is_discarded_not_used() {
    let _dir = CacheDir::new("forged-header");
    let Some((file, bytes)) = a_valid_cache_file() else {
        return;
    };
    // Trailers that check out around data whose wgpu header is broken (its magic, cut short,
    // missing, random): wgpu cannot use them, so nothing seeded the cache.
    let mut magic_broken = driver_data(&bytes).to_vec();
    magic_broken[0] ^= 0xff;
    let header_cut = driver_data(&bytes)[..WGPU_HEADER_BYTES / 2].to_vec();
    let random = harness::Rng(5).bytes(4096);
    for data in [magic_broken, header_cut, vec![b'x'], random] {
        std::fs::write(&file, sealed(&data)).unwrap();
        the_next_contexts_discard_then_use_the_file(&file, "wgpu refused it");
    }
}

#[gpu_test(needs = Vulkan)]
fn a_valid_header_with_a_damaged_body_is_discarded_and_rewritten() {
    let _dir = CacheDir::new("body");
    let Some((file, bytes)) = a_valid_cache_file() else {
        return;
    };
    let mut damaged = bytes.clone();
    let body = WGPU_HEADER_BYTES..bytes.len() - TRAILER_BYTES;
    for i in body.step_by(7) {
        damaged[i] ^= 0xa5;
    }
    std::fs::write(&file, damaged).unwrap();
    the_next_contexts_discard_then_use_the_file(&file, "checksum");
}

#[gpu_test(needs = Vulkan)]
fn a_body_the_driver_does_not_recognise_costs_only_speed() {
    let _dir = CacheDir::new("driver-header");
    let Some((file, bytes)) = a_valid_cache_file() else {
        return;
    };
    // A damaged driver header with a checksum that matches (a forged or miswritten file): the
    // driver must ignore data whose header is not its own (Vulkan's vkCreatePipelineCache).
    let mut body_damaged = driver_data(&bytes).to_vec();
    for byte in &mut body_damaged[WGPU_HEADER_BYTES..] {
        *byte = !*byte;
    }
    std::fs::write(&file, sealed(&body_damaged)).unwrap();
    let ctx = kernel_context();
    kernels_compute_correctly(&ctx);
    assert_eq!(
        ctx.kernel_cache_stats().disk_cache_load,
        DiskCacheLoad::Used
    );
    drop(ctx);
    let next = kernel_context();
    kernels_compute_correctly(&next);
    assert_eq!(
        next.kernel_cache_stats().disk_cache_load,
        DiskCacheLoad::Used
    );
    assert_nothing_uncaptured();
}

#[gpu_test(needs = Vulkan)]
fn a_directory_where_the_cache_file_should_be_leaves_the_kernels_working() {
    let _dir = CacheDir::new("directory");
    let Some((file, _)) = a_valid_cache_file() else {
        return;
    };
    std::fs::remove_file(&file).unwrap();
    std::fs::create_dir_all(file.join("inside")).unwrap();
    for _process in 0..2 {
        let ctx = kernel_context();
        kernels_compute_correctly(&ctx);
        let stats = ctx.kernel_cache_stats();
        assert_eq!(
            stats.disk_cache_load,
            DiskCacheLoad::Discarded {
                reason: "it is a directory, not a file".into()
            }
        );
        assert!(stats.disk_cache_write_error.is_some(), "{stats:?}");
        assert_eq!(stats.disk_cache_written_bytes, 0);
    }
    assert!(
        file.join("inside").is_dir(),
        "the user's directory is left alone"
    );
    assert_nothing_uncaptured();
}

#[gpu_test(needs = Vulkan)]
fn an_unwritable_cache_dir_leaves_the_kernels_working() {
    let dir = CacheDir::new("unwritable");
    // Tests run as root, which writes anywhere a mode allows: a directory under a regular file
    // is one no one can create.
    std::fs::create_dir_all(&dir.path).unwrap();
    let plain = dir.path.join("a-regular-file");
    std::fs::write(&plain, b"not a directory").unwrap();
    std::env::set_var(CACHE_DIR_ENV, plain.join("cache"));
    for _process in 0..2 {
        let reason = the_cache_dir_is_refused_and_kernels_compile(&plain.join("cache"));
        assert!(reason.contains("could not create it"), "{reason}");
        assert!(reason.contains("name a directory"), "{reason}");
    }
    // The file itself named as the directory: said so, not "File exists".
    std::env::set_var(CACHE_DIR_ENV, &plain);
    let reason = the_cache_dir_is_refused_and_kernels_compile(&plain);
    assert!(reason.starts_with("it is not a directory"), "{reason}");
    assert_eq!(std::fs::read(&plain).unwrap(), b"not a directory");
    assert_nothing_uncaptured();
}

/// A context refuses the cache directory `dir` with a warning that names it and says why, and
/// compiles and runs its kernels without a cache on disk; the reason.
fn the_cache_dir_is_refused_and_kernels_compile(dir: &Path) -> String {
    let ctx = kernel_context();
    kernels_compute_correctly(&ctx);
    let stats = ctx.kernel_cache_stats();
    if !ctx
        .device()
        .features()
        .contains(wgpu::Features::PIPELINE_CACHE)
    {
        return String::new();
    }
    let DiskCacheLoad::DirectoryRefused { reason } = stats.disk_cache_load else {
        panic!("the directory should be refused: {stats:?}");
    };
    assert_eq!(stats.disk_cache_file, None, "nothing is read or written");
    assert_eq!(stats.disk_cache_written_bytes, 0);
    let warnings = logged_messages_containing(&dir.display().to_string());
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("not using the pipeline cache directory") && w.contains(&reason)),
        "a warning names the directory and the reason: {warnings:?}"
    );
    reason
}

#[cfg(unix)]
#[gpu_test(needs = Vulkan)]
fn a_cache_dir_others_can_write_is_refused_and_kernels_still_compile() {
    use std::os::unix::fs::PermissionsExt;
    let dir = CacheDir::new("open-mode");
    std::fs::create_dir_all(&dir.path).unwrap();
    for mode in [0o777, 0o1777, 0o775] {
        std::fs::set_permissions(&dir.path, std::fs::Permissions::from_mode(mode)).unwrap();
        let reason = the_cache_dir_is_refused_and_kernels_compile(&dir.path);
        if reason.is_empty() {
            return;
        }
        assert!(
            reason.contains(&format!("mode {mode:04o}")) && reason.contains("chmod 700"),
            "{reason}"
        );
        let entries = std::fs::read_dir(&dir.path).unwrap().count();
        assert_eq!(entries, 0, "nothing written into it");
    }
    assert_nothing_uncaptured();
}

#[cfg(unix)]
#[gpu_test(needs = Vulkan)]
fn a_cache_dir_of_another_user_is_refused_and_kernels_still_compile() {
    let dir = CacheDir::new("foreign");
    std::fs::create_dir_all(&dir.path).unwrap();
    // Only root can give a directory away.
    if std::os::unix::fs::chown(&dir.path, Some(4242), None).is_err() {
        eprintln!("not root; nothing to check");
        return;
    }
    let reason = the_cache_dir_is_refused_and_kernels_compile(&dir.path);
    if reason.is_empty() {
        return;
    }
    assert!(reason.contains("another user (uid 4242"), "{reason}");
    assert_eq!(std::fs::read_dir(&dir.path).unwrap().count(), 0);
    assert_nothing_uncaptured();
}

#[cfg(unix)]
#[gpu_test(needs = Vulkan)]
fn the_cache_dir_is_created_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = CacheDir::new("created");
    let Some((file, _)) = a_valid_cache_file() else {
        return;
    };
    let mode = std::fs::metadata(&dir.path).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "{mode:o}");
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
}

#[cfg(unix)]
#[gpu_test(needs = Vulkan)]
fn a_link_planted_at_the_cache_file_is_replaced_and_its_target_untouched() {
    let dir = CacheDir::new("planted-link");
    let Some((file, _)) = a_valid_cache_file() else {
        return;
    };
    let target = dir.path.join("precious");
    std::fs::write(&target, b"the user's data").unwrap();
    std::fs::remove_file(&file).unwrap();
    std::os::unix::fs::symlink(&target, &file).unwrap();
    // Links at the names the temporary file once had (`<key>.<pid>-<n>.tmp`) too.
    for n in 0..32 {
        let name = file.with_extension(format!("{}-{n}.tmp", std::process::id()));
        std::os::unix::fs::symlink(&target, name).unwrap();
    }
    the_next_contexts_discard_then_use_the_file(&file, "symbolic link");
    assert_eq!(std::fs::read(&target).unwrap(), b"the user's data");
    assert!(!std::fs::symlink_metadata(&file)
        .unwrap()
        .file_type()
        .is_symlink());
}

#[cfg(unix)]
#[gpu_test(needs = Vulkan)]
fn a_cache_file_others_can_write_is_discarded_and_rewritten() {
    use std::os::unix::fs::PermissionsExt;
    let _dir = CacheDir::new("open-file");
    let Some((file, _)) = a_valid_cache_file() else {
        return;
    };
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
    the_next_contexts_discard_then_use_the_file(&file, "mode 0666");
}

#[gpu_test(needs = Vulkan)]
fn an_oversized_cache_file_is_discarded_without_being_read() {
    let _dir = CacheDir::new("oversized");
    let Some((file, _)) = a_valid_cache_file() else {
        return;
    };
    // Sparse: 1 GiB of nothing on disk.
    std::fs::File::create(&file)
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    the_next_contexts_discard_then_use_the_file(&file, "more than");
}

#[gpu_test(needs = Vulkan)]
fn a_fifo_where_the_cache_file_should_be_does_not_block() {
    let _dir = CacheDir::new("fifo");
    let Some((file, _)) = a_valid_cache_file() else {
        return;
    };
    std::fs::remove_file(&file).unwrap();
    let made = std::process::Command::new("mkfifo").arg(&file).status();
    if !made.is_ok_and(|s| s.success()) {
        eprintln!("no mkfifo here; nothing to check");
        return;
    }
    // Reading it would wait for a writer forever; the rename then replaces it with a file.
    the_next_contexts_discard_then_use_the_file(&file, "not a regular file");
}

#[gpu_test]
fn a_blank_cache_dir_is_an_error_naming_the_variable() {
    let _dir = CacheDir::new("blank");
    for blank in ["", "  "] {
        std::env::set_var(CACHE_DIR_ENV, blank);
        let err = gpu_arena::Context::new(harness::test_config()).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(CACHE_DIR_ENV) && text.contains("unset"),
            "{text}"
        );
    }
}

#[gpu_test]
fn blanks_around_the_cache_dir_are_ignored() {
    let dir = CacheDir::new("blanks");
    std::env::set_var(CACHE_DIR_ENV, format!("  {}\t", dir.path.display()));
    let ctx = kernel_context();
    kernels_compute_correctly(&ctx);
    if !has_pipeline_cache(&ctx) {
        return;
    }
    let file = ctx
        .kernel_cache_stats()
        .disk_cache_file
        .expect("a cache file");
    assert_eq!(file.parent(), Some(dir.path.as_path()), "{file:?}");
    assert!(file.exists(), "{file:?}");
}
