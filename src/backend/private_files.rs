//! Files the crate writes on its own (the pipeline cache, out-of-memory dumps) and files it
//! writes where a caller points it: never through a link someone planted, never trusting what
//! another user could have written, never blocking on a FIFO.
//!
//! What is done follows Mesa's disk cache and ssh's checks of its files:
//! - A process running with borrowed rights (setuid or setgid) ignores the directories named
//!   by environment variables ([`runs_with_borrowed_identity`]): whoever set the environment
//!   is not who the process writes as.
//! - A directory the crate writes into by itself is created private (0700) and refused when
//!   it is not the effective user's, or when group or others may write to it
//!   ([`private_dir`]): they could plant links, FIFOs or forged files in it.
//! - Files are opened with `O_NOFOLLOW | O_NONBLOCK` and judged by what was opened (`fstat`:
//!   a regular file, its owner, its size), never by a separate look at the path, which another
//!   process could change in between ([`read_private_file`]).
//! - New files are created with `create_new` (`O_EXCL`, which never follows a link) and mode
//!   0600 under a name nobody can guess, then renamed into place ([`replace_private_file`],
//!   [`create_new_private_file`]).
//!
//! On targets other than Unix there are no owners, modes or these flags to check: files are
//! still created new and renamed into place, and the checks that need Unix are skipped.

use std::fs::File;
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

#[cfg(unix)]
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};

/// Mode of the directories the crate creates: the user's alone (`rwx------`).
#[cfg(unix)]
const PRIVATE_DIR_MODE: u32 = 0o700;

/// Mode of the files the crate creates: the user's alone (`rw-------`).
#[cfg(unix)]
const PRIVATE_FILE_MODE: u32 = 0o600;

/// Permission bits that let the group or others write (`----w--w-`).
#[cfg(unix)]
const GROUP_OR_OTHERS_WRITE: u32 = 0o022;

/// Open flags of every file the crate opens: a link at the last component is an error
/// (`ELOOP`) rather than followed, and opening a FIFO or device returns at once instead of
/// waiting for the other end. From `libc`, since their values differ between architectures
/// (`O_NOFOLLOW` is `0o400000` on x86 Linux and `0o100000` on Arm Linux).
#[cfg(unix)]
const NO_FOLLOW_NO_BLOCK: i32 = libc::O_NOFOLLOW | libc::O_NONBLOCK;

/// Numbers the names this process makes, so that two in the same instant still differ.
static NAMES: AtomicU64 = AtomicU64::new(0);

/// True when the process runs with rights other than its real user's and group's (a setuid
/// or setgid program). Such a process must not take file paths from its environment: the user
/// who set them could make it write where only the borrowed identity may. Always false on
/// targets other than Unix.
pub(crate) fn runs_with_borrowed_identity() -> bool {
    #[cfg(unix)]
    {
        // SAFETY: getuid, geteuid, getgid and getegid take no arguments, touch no memory of
        // ours and cannot fail (POSIX: "shall always be successful").
        unsafe { libc::getuid() != libc::geteuid() || libc::getgid() != libc::getegid() }
    }
    #[cfg(not(unix))]
    {
        false
    }
}

/// The effective user id: the owner of the files the process creates.
#[cfg(unix)]
fn effective_uid() -> u32 {
    // SAFETY: geteuid takes no arguments, touches no memory of ours and cannot fail.
    unsafe { libc::geteuid() }
}

/// Why a private directory or file is refused: each variant's text says what to change.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PrivateFileRefusal {
    /// The directory could not be created.
    #[error("could not create it ({0}): name a directory this user may create, or create it")]
    Create(io::Error),
    /// Its metadata could not be read.
    #[error("could not inspect it: {0}")]
    Inspect(io::Error),
    /// The file could not be opened or read.
    #[error("could not read it: {0}")]
    Read(io::Error),
    /// A directory was asked for and something else is there.
    #[error("it is not a directory (something else is there): name a directory")]
    NotADirectory,
    /// A file was asked for and a directory is there.
    #[error("it is a directory, not a file")]
    ADirectory,
    /// A FIFO, socket or device is there.
    #[error("it is not a regular file (a FIFO, socket or device)")]
    NotRegular,
    /// A symbolic link is there.
    #[error("it is a symbolic link, which is never followed")]
    Link,
    /// The directory belongs to another user.
    #[error(
        "it belongs to another user (uid {owner}, this process runs as uid {user}), who could \
         plant links or forged files in it; use a directory of your own"
    )]
    DirectoryOfAnotherUser { owner: u32, user: u32 },
    /// The directory's group or other users may write to it.
    #[error(
        "its group or other users may write to it (mode {mode:04o}) and so plant links or \
         forged files in it; make it private (chmod 700) or use another directory"
    )]
    DirectoryWritableByOthers { mode: u32 },
    /// The file belongs to another user.
    #[error("it belongs to another user (uid {owner}, this process runs as uid {user})")]
    FileOfAnotherUser { owner: u32, user: u32 },
    /// The file's group or other users may write to it.
    #[error("its group or other users may write to it (mode {mode:04o})")]
    FileWritableByOthers { mode: u32 },
    /// The file is larger than the caller reads.
    #[error("it holds {bytes} bytes, more than the {max_bytes} bytes of any file read here")]
    TooLarge { bytes: u64, max_bytes: u64 },
}

/// Creates `dir` and its missing parents (mode 0700 on Unix, before the umask), then checks
/// that the directory is fit to hold the crate's files: a directory, owned by the effective
/// user, that neither the group nor others may write.
///
/// Only the directory itself is judged, as Mesa judges its cache directory: whoever may
/// rename entries in a parent could swap the whole directory, so the parents are the user's
/// choice as much as the path is (ssh goes further and checks every parent).
///
/// Errors: why not, in words that name what to change (another user's directory, a mode that
/// lets others write, not a directory, or the file system's error).
pub(crate) fn private_dir(dir: &Path) -> Result<(), PrivateFileRefusal> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    builder.mode(PRIVATE_DIR_MODE);
    builder.create(dir).map_err(|error| {
        // `create` says "File exists" when a file is there: say what is wrong with the path.
        match std::fs::metadata(dir) {
            Ok(metadata) if !metadata.is_dir() => PrivateFileRefusal::NotADirectory,
            _ => PrivateFileRefusal::Create(error),
        }
    })?;
    // Follows a link at the last component: a link the user made to a directory of theirs is
    // fine, one to anything else is judged by what it points to.
    let metadata = std::fs::metadata(dir).map_err(PrivateFileRefusal::Inspect)?;
    if !metadata.is_dir() {
        return Err(PrivateFileRefusal::NotADirectory);
    }
    #[cfg(unix)]
    owned_and_private(&metadata, true)?;
    Ok(())
}

/// On Unix, that what `metadata` describes (a directory when `dir`) is the effective user's
/// and not writable by group or others.
#[cfg(unix)]
fn owned_and_private(metadata: &std::fs::Metadata, dir: bool) -> Result<(), PrivateFileRefusal> {
    let (owner, user) = (metadata.uid(), effective_uid());
    let mode = metadata.permissions().mode() & 0o7777;
    match (owner != user, mode & GROUP_OR_OTHERS_WRITE != 0) {
        (true, _) if dir => Err(PrivateFileRefusal::DirectoryOfAnotherUser { owner, user }),
        (true, _) => Err(PrivateFileRefusal::FileOfAnotherUser { owner, user }),
        (false, true) if dir => Err(PrivateFileRefusal::DirectoryWritableByOthers { mode }),
        (false, true) => Err(PrivateFileRefusal::FileWritableByOthers { mode }),
        (false, false) => Ok(()),
    }
}

/// The whole of the regular file at `path`, if there is one: `Ok(None)` when nothing is there.
/// The file is opened without following a link and without blocking, then judged by what was
/// opened: a regular file, owned by the effective user and not writable by group or others
/// (on Unix), of at most `max_bytes` bytes (read no further, should it grow meanwhile).
///
/// Errors: why the file is not read, in words.
pub(crate) fn read_private_file(
    path: &Path,
    max_bytes: u64,
) -> Result<Option<Vec<u8>>, PrivateFileRefusal> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    options.custom_flags(NO_FOLLOW_NO_BLOCK);
    let file = match options.open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if is_link_refusal(&e, path) => return Err(PrivateFileRefusal::Link),
        Err(e) => return Err(PrivateFileRefusal::Read(e)),
    };
    let metadata = file.metadata().map_err(PrivateFileRefusal::Inspect)?;
    if metadata.is_dir() {
        return Err(PrivateFileRefusal::ADirectory);
    }
    if !metadata.is_file() {
        return Err(PrivateFileRefusal::NotRegular);
    }
    #[cfg(unix)]
    owned_and_private(&metadata, false)?;
    if metadata.len() > max_bytes {
        return Err(PrivateFileRefusal::TooLarge {
            bytes: metadata.len(),
            max_bytes,
        });
    }
    let mut bytes = Vec::new();
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(PrivateFileRefusal::Read)?;
    // It may have grown since `fstat`.
    let read = bytes.len() as u64;
    if read > max_bytes {
        return Err(PrivateFileRefusal::TooLarge {
            bytes: read,
            max_bytes,
        });
    }
    Ok(Some(bytes))
}

/// True when opening `path` failed because its last component is a symbolic link (`ELOOP`
/// under `O_NOFOLLOW`; checked on the path afterwards, since other causes share the code).
fn is_link_refusal(error: &io::Error, path: &Path) -> bool {
    #[cfg(unix)]
    let may_be_a_link = error.raw_os_error() == Some(libc::ELOOP);
    #[cfg(not(unix))]
    let may_be_a_link = error.kind() != io::ErrorKind::NotFound;
    may_be_a_link && std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

/// Replaces `path` with a file holding `contents`, atomically: the bytes go to a new file of an
/// unguessable name next to it (created with `create_new`, mode 0600 on Unix), which is then
/// renamed over `path`. A link or anything else at `path` is replaced, never written through;
/// a reader sees the old file or the new one, never half of one. The temporary file is
/// removed when anything fails.
///
/// Errors: the file system's error.
pub(crate) fn replace_private_file(path: &Path, contents: &[u8]) -> io::Result<()> {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{}.tmp", unguessable_name()));
    let temporary = path.with_file_name(name);
    // No fsync: callers' files carry their own checksum, and a file a crash cut short only
    // costs what it saved (the pipeline cache recompiles).
    let written = create_new_private_file(&temporary)
        .and_then(|mut file| file.write_all(contents))
        .and_then(|()| std::fs::rename(&temporary, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
}

/// A new file at `path` for writing, with mode 0600 on Unix: fails (`AlreadyExists`) when
/// anything is there, a dangling link included, so nothing planted is ever written through.
///
/// Errors: the file system's error.
pub(crate) fn create_new_private_file(path: &Path) -> io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    options
        .mode(PRIVATE_FILE_MODE)
        .custom_flags(NO_FOLLOW_NO_BLOCK);
    options.open(path)
}

/// Writes `contents` to `path`, a file a caller named, as [`replace_private_file`] does: the
/// new file (mode 0600 on Unix) is renamed over an existing regular file, so a reader, or a
/// second writer of the same name, sees one whole file, and another name (a hard link) of the
/// old file keeps its bytes. A symbolic link, a directory, a FIFO or a device at `path` is
/// refused, never written through or replaced. Links in the directories above are the
/// caller's path and are followed.
///
/// Errors: the file system's error; [`io::ErrorKind::InvalidInput`] for a link, a directory
/// or a file that is not regular.
pub(crate) fn write_named_file(path: &Path, contents: &[u8]) -> io::Result<()> {
    if let Ok(found) = std::fs::symlink_metadata(path) {
        let kind = found.file_type();
        if kind.is_symlink() {
            return Err(refusal(
                path,
                "is a symbolic link, which is never written through",
            ));
        }
        if kind.is_dir() {
            return Err(refusal(path, "is a directory"));
        }
        if !kind.is_file() {
            return Err(refusal(path, NOT_REGULAR));
        }
    }
    replace_private_file(path, contents)
}

/// Why a FIFO, socket or device at a caller's path is not written.
const NOT_REGULAR: &str = "is not a regular file (a FIFO, socket or device)";

/// An error saying why `path` is not written.
fn refusal(path: &Path, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{} {why}", path.display()),
    )
}

/// 32 hex digits nobody else can predict: two outputs of SipHash under the keys std draws
/// from the operating system's random source for each thread, over a per-process counter and
/// the time.
pub(crate) fn unguessable_name() -> String {
    let count = NAMES.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut halves = [0u64; 2];
    for (i, half) in halves.iter_mut().enumerate() {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(count);
        hasher.write_u128(nanos);
        hasher.write_usize(i);
        *half = hasher.finish();
    }
    format!("{:016x}{:016x}", halves[0], halves[1])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "gpu-arena-private-files-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_test_process_runs_with_its_own_identity() {
        // Not setuid: the environment's directories are honoured.
        assert!(!runs_with_borrowed_identity());
    }

    #[test]
    fn unguessable_names_differ_and_are_32_hex_digits() {
        let a = unguessable_name();
        let b = unguessable_name();
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()), "{a}");
    }

    #[test]
    fn a_replaced_file_reads_back_and_leaves_no_temporary_file() {
        let dir = scratch("replace");
        private_dir(&dir).unwrap();
        let file = dir.join("cache.bin");
        replace_private_file(&file, b"first").unwrap();
        replace_private_file(&file, b"second").unwrap();
        assert_eq!(read_private_file(&file, 100).unwrap().unwrap(), b"second");
        let entries: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(entries.len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(unix)]
    #[test]
    fn created_directories_and_files_are_private() {
        let dir = scratch("modes");
        let nested = dir.join("a/b");
        private_dir(&nested).unwrap();
        for d in [&dir, &dir.join("a"), &nested] {
            let mode = std::fs::metadata(d).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode & 0o077, 0, "{} has mode {mode:o}", d.display());
        }
        replace_private_file(&nested.join("x"), b"x").unwrap();
        write_named_file(&nested.join("y"), b"y").unwrap();
        drop(create_new_private_file(&nested.join("z")).unwrap());
        for f in ["x", "y", "z"] {
            let mode = std::fs::metadata(nested.join(f))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{f}: {mode:o}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(unix)]
    #[test]
    fn a_directory_others_can_write_is_refused_with_the_reason() {
        let dir = scratch("open-mode");
        std::fs::create_dir_all(&dir).unwrap();
        for mode in [0o777, 0o770, 0o1777] {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
            let refused = private_dir(&dir).unwrap_err();
            assert!(
                matches!(refused, PrivateFileRefusal::DirectoryWritableByOthers { mode: m } if m == mode),
                "{mode:o}: {refused:?}"
            );
            let reason = refused.to_string();
            assert!(reason.contains("chmod 700"), "{mode:o}: {reason}");
        }
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        private_dir(&dir).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(unix)]
    #[test]
    fn a_directory_of_another_user_is_refused_with_the_reason() {
        if effective_uid() != 0 {
            eprintln!("only root can give a directory away; nothing to check");
            return;
        }
        let dir = scratch("owner");
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(4242), None).unwrap();
        let refused = private_dir(&dir).unwrap_err();
        assert!(
            matches!(
                refused,
                PrivateFileRefusal::DirectoryOfAnotherUser {
                    owner: 4242,
                    user: 0
                }
            ),
            "{refused:?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(unix)]
    #[test]
    fn reading_never_follows_a_link_nor_blocks_on_a_fifo() {
        let dir = scratch("read-odd");
        private_dir(&dir).unwrap();
        let target = dir.join("target");
        std::fs::write(&target, b"secret").unwrap();
        std::os::unix::fs::symlink(&target, dir.join("link")).unwrap();
        let refused = read_private_file(&dir.join("link"), 100).unwrap_err();
        assert!(matches!(refused, PrivateFileRefusal::Link), "{refused:?}");
        if std::process::Command::new("mkfifo")
            .arg(dir.join("fifo"))
            .status()
            .is_ok_and(|s| s.success())
        {
            let refused = read_private_file(&dir.join("fifo"), 100).unwrap_err();
            assert!(
                matches!(refused, PrivateFileRefusal::NotRegular),
                "{refused:?}"
            );
            let err = write_named_file(&dir.join("fifo"), b"x").unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{err}");
            assert!(err.to_string().contains("not a regular file"), "{err}");
        }
        std::fs::write(dir.join("big"), [0u8; 101]).unwrap();
        let refused = read_private_file(&dir.join("big"), 100).unwrap_err();
        assert!(
            matches!(
                refused,
                PrivateFileRefusal::TooLarge {
                    bytes: 101,
                    max_bytes: 100
                }
            ),
            "{refused:?}"
        );
        assert!(refused.to_string().contains("more than the 100 bytes"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(unix)]
    #[test]
    fn a_file_others_can_write_or_of_another_user_is_not_read() {
        let dir = scratch("read-foreign");
        private_dir(&dir).unwrap();
        let file = dir.join("f");
        std::fs::write(&file, b"data").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
        let reason = read_private_file(&file, 100).unwrap_err().to_string();
        assert!(reason.contains("mode 0666"), "{reason}");
        if effective_uid() == 0 {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
            std::os::unix::fs::chown(&file, Some(4242), None).unwrap();
            let reason = read_private_file(&file, 100).unwrap_err().to_string();
            assert!(reason.contains("uid 4242"), "{reason}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(unix)]
    #[test]
    fn writing_a_named_file_refuses_a_link_and_leaves_its_target_untouched() {
        let dir = scratch("named-link");
        private_dir(&dir).unwrap();
        let target = dir.join("target");
        std::fs::write(&target, b"precious").unwrap();
        std::os::unix::fs::symlink(&target, dir.join("report.html")).unwrap();
        let err = write_named_file(&dir.join("report.html"), b"report").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("symbolic link"), "{err}");
        // A dangling link is not followed into a new file either.
        std::os::unix::fs::symlink(dir.join("missing"), dir.join("dangling")).unwrap();
        assert!(write_named_file(&dir.join("dangling"), b"report").is_err());
        assert!(!dir.join("missing").exists());
        assert_eq!(std::fs::read(&target).unwrap(), b"precious");
        // A regular file is replaced, shorter contents included.
        write_named_file(&target, b"new").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(unix)]
    #[test]
    fn creating_a_new_file_refuses_a_planted_link() {
        let dir = scratch("create-link");
        private_dir(&dir).unwrap();
        let target = dir.join("target");
        std::fs::write(&target, b"precious").unwrap();
        std::os::unix::fs::symlink(&target, dir.join("new")).unwrap();
        let err = create_new_private_file(&dir.join("new")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists, "{err}");
        assert_eq!(std::fs::read(&target).unwrap(), b"precious");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
