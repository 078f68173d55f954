//! Writing the whole memory profile (snapshot JSON, HTML report, Chrome trace) to a directory:
//! on demand, and by itself on out-of-memory when `GPU_ARENA_DUMP_ON_OOM=<dir>` is set.

use super::report;
use super::snapshot::MemorySnapshot;
use crate::context::{Context, ContextInner};
use crate::error::Error;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The file-name stem of out-of-memory dumps: `gpu-arena-oom-<unix ms>-<pid>-<n>.{json,html}`.
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
    /// `dir` if needed.
    ///
    /// # Errors
    /// The file system's error.
    pub fn write_memory_profile(
        &self,
        dir: impl AsRef<Path>,
        stem: &str,
    ) -> std::io::Result<ProfileFiles> {
        self.inner
            .write_memory_profile(dir.as_ref(), stem, self.inner.memory_snapshot())
    }
}

impl ContextInner {
    pub(crate) fn write_memory_profile(
        &self,
        dir: &Path,
        stem: &str,
        snapshot: MemorySnapshot,
    ) -> std::io::Result<ProfileFiles> {
        std::fs::create_dir_all(dir)?;
        let timeline = self.timeline.as_ref().map(|t| t.snapshot());
        let files = ProfileFiles {
            snapshot: dir.join(format!("{stem}.json")),
            report: dir.join(format!("{stem}.html")),
            trace: timeline
                .as_ref()
                .map(|_| dir.join(format!("{stem}.trace.json"))),
        };
        std::fs::write(&files.snapshot, snapshot.to_json())?;
        report::write_html(&snapshot, timeline.as_ref(), &files.report)?;
        if let (Some(timeline), Some(path)) = (&timeline, &files.trace) {
            timeline.write_chrome_trace(path, &snapshot.device)?;
        }
        Ok(files)
    }

    /// With `dump_on_oom` set, writes the profile for an out-of-memory error and names the
    /// files in its message; any other error, or no directory, passes through unchanged.
    pub(crate) fn dump_on_oom(&self, error: Error) -> Error {
        let Some(dir) = &self.config.dump_on_oom else {
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
        let stem = format!(
            "{OOM_DUMP_STEM}-{millis}-{}-{}",
            std::process::id(),
            DUMPS.fetch_add(1, Ordering::Relaxed)
        );
        let written = match self.write_memory_profile(dir, &stem, snapshot) {
            Ok(files) => format!("\n  memory profile written (GPU_ARENA_DUMP_ON_OOM): {files}."),
            Err(e) => format!(
                "\n  GPU_ARENA_DUMP_ON_OOM could not write the memory profile to {}: {e}.",
                dir.display()
            ),
        };
        Error::OutOfMemory {
            report,
            dump: dump + &written,
        }
    }
}
