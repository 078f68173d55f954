//! Writing the whole memory profile (snapshot JSON, HTML report, Chrome trace) to a directory:
//! on demand, and by itself on out-of-memory when `GPU_ARENA_DUMP_ON_OOM=<dir>` is set.
//!
//! Dumps name every allocation of a program, and an out-of-memory dump is written with nobody
//! watching, into a directory chosen ahead of time. So, as for the pipeline cache on disk (the
//! operating-system side is `backend/private_files.rs`):
//! - the dump directory is created private (0700), and one that belongs to another user or that
//!   its group or others may write is refused: no dump, and the error says why (others could
//!   plant links at the next dump's names);
//! - each dump file is created new (never through anything already there, a link included),
//!   readable by the user alone (0600), under a name that ends in an unguessable part;
//! - a setuid or setgid process writes no dump (whoever set `GPU_ARENA_DUMP_ON_OOM` is not who
//!   the process writes as; the error says so).
//!
//! Files written on demand ([`Context::write_memory_profile`]) go where the caller says: an
//! existing regular file is replaced, a new one is created with mode 0600, and a symbolic link
//! at a file's name is refused, never followed.

use super::report;
use super::snapshot::MemorySnapshot;
use crate::backend::{
    create_new_private_file, private_dir, runs_with_borrowed_identity, unguessable_name,
    write_named_file,
};
use crate::context::{Context, ContextInner};
use crate::error::Error;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The file-name stem of out-of-memory dumps:
/// `gpu-arena-oom-<unix ms>-<pid>-<n>-<32 unguessable hex digits>.{json,html}`, and
/// `.trace.json` with the timeline on.
pub const OOM_DUMP_STEM: &str = "gpu-arena-oom";

/// Counts dumps in this process, so two in the same millisecond get different names.
static DUMPS: AtomicU64 = AtomicU64::new(0);

/// The files [`Context::write_memory_profile`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProfileFiles {
    /// The [`MemorySnapshot`] as JSON.
    pub snapshot: PathBuf,
    /// The HTML report.
    pub report: PathBuf,
    /// The Chrome / Perfetto trace, when the timeline is on.
    pub trace: Option<PathBuf>,
}

impl std::fmt::Display for ProfileFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "snapshot {}, report {}",
            self.snapshot.display(),
            self.report.display()
        )?;
        if let Some(trace) = &self.trace {
            write!(f, ", trace {}", trace.display())?;
        }
        Ok(())
    }
}

impl Context {
    /// Writes `<stem>.json` (the [`MemorySnapshot`]), `<stem>.html` (the report) and, when the
    /// timeline is on, `<stem>.trace.json` (open it in ui.perfetto.dev) into `dir`, creating
    /// `dir` if needed (mode 0700 on Unix). Existing regular files of those names are
    /// replaced; new ones are readable by the user alone (0600 on Unix). A symbolic link at one
    /// of the names is refused, never written through.
    ///
    /// # Errors
    /// The file system's error; [`std::io::ErrorKind::InvalidInput`] for a `stem` that is not
    /// a plain file name (empty, `.`, `..`, or with a path separator: the files stay in `dir`),
    /// and for a link, a directory or a file that is not regular at one of the names.
    ///
    /// Kernel times of work that has completed are read first (nothing is waited for: call
    /// [`Context::synchronize`] before for every kernel called so far).
    pub fn write_memory_profile(
        &self,
        dir: impl AsRef<Path>,
        stem: &str,
    ) -> std::io::Result<ProfileFiles> {
        self.inner.collect_kernel_times();
        self.inner
            .write_memory_profile(dir.as_ref(), stem, self.inner.memory_snapshot())
    }
}

/// How the files of a profile are written.
#[derive(Clone, Copy)]
enum Files {
    /// Names the caller chose: a regular file there is replaced, no link followed.
    Named,
    /// Fresh names of an out-of-memory dump: created new, never over anything.
    New,
}

impl Files {
    /// Writes `contents` to `path`; an error names the path.
    fn write(self, path: &Path, contents: &[u8]) -> std::io::Result<()> {
        match self {
            Files::Named => write_named_file(path, contents),
            Files::New => create_new_private_file(path).and_then(|mut f| f.write_all(contents)),
        }
        .map_err(|error| {
            std::io::Error::new(error.kind(), format!("writing {}: {error}", path.display()))
        })
    }
}

impl ContextInner {
    pub(crate) fn write_memory_profile(
        &self,
        dir: &Path,
        stem: &str,
        snapshot: MemorySnapshot,
    ) -> std::io::Result<ProfileFiles> {
        let plain = !matches!(stem, "" | "." | "..") && !stem.contains(['/', '\\']);
        if !plain {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("the stem {stem:?} is not a plain file name: give a name without path separators (the files go into the directory given)"),
            ));
        }
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(dir).map_err(|error| {
            let not_a_directory = match dir.is_dir() {
                false if dir.exists() => " (it is not a directory: give a directory's path)",
                _ => "",
            };
            std::io::Error::new(
                error.kind(),
                format!("creating {}: {error}{not_a_directory}", dir.display()),
            )
        })?;
        self.write_profile_files(dir, stem, snapshot, Files::Named)
    }

    fn write_profile_files(
        &self,
        dir: &Path,
        stem: &str,
        snapshot: MemorySnapshot,
        how: Files,
    ) -> std::io::Result<ProfileFiles> {
        let timeline = self.timeline().map(|t| t.snapshot());
        let files = ProfileFiles {
            snapshot: dir.join(format!("{stem}.json")),
            report: dir.join(format!("{stem}.html")),
            trace: timeline
                .as_ref()
                .map(|_| dir.join(format!("{stem}.trace.json"))),
        };
        how.write(&files.snapshot, snapshot.to_json().as_bytes())?;
        let html = report::render_html(&snapshot, timeline.as_ref());
        how.write(&files.report, html.as_bytes())?;
        if let (Some(timeline), Some(path)) = (&timeline, &files.trace) {
            how.write(path, timeline.to_chrome_trace(&snapshot.device).as_bytes())?;
        }
        Ok(files)
    }

    /// With `dump_on_oom` set, writes the profile for an out-of-memory error and names the
    /// files in its message; any other error, or no directory, passes through unchanged.
    pub(crate) fn dump_on_oom(&self, error: Error) -> Error {
        let Some(dir) = &self.config().dump_on_oom else {
            return error;
        };
        let Error::OutOfMemory { report, dump } = error else {
            return error;
        };
        let mut snapshot = self.memory_snapshot();
        snapshot.out_of_memory = Some(report.to_string());
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        // The unguessable part keeps anyone from planting links at the next dump's names;
        // `create_new` would refuse them anyway, but then the dump would be lost.
        let stem = format!(
            "{OOM_DUMP_STEM}-{millis}-{}-{}-{}",
            std::process::id(),
            DUMPS.fetch_add(1, Ordering::Relaxed),
            unguessable_name()
        );
        let written = if runs_with_borrowed_identity() {
            Err("the process runs setuid or setgid, and such a process writes no dump".into())
        } else {
            private_dir(dir).map_err(|refused| refused.to_string())
        };
        let written = written.and_then(|()| {
            self.write_profile_files(dir, &stem, snapshot, Files::New)
                .map_err(|e| e.to_string())
        });
        let written = match written {
            Ok(files) => format!("\n  memory profile written (GPU_ARENA_DUMP_ON_OOM): {files}."),
            Err(reason) => {
                log::warn!(
                    "gpu-arena: GPU_ARENA_DUMP_ON_OOM could not write the memory profile to {}: \
                     {reason}",
                    dir.display()
                );
                format!(
                    "\n  GPU_ARENA_DUMP_ON_OOM could not write the memory profile to {}: {reason}.",
                    dir.display()
                )
            }
        };
        Error::OutOfMemory {
            report,
            dump: dump + &written,
        }
    }
}
