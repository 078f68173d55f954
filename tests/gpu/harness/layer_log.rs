//! The Vulkan validation layer's reports, read by the harness after every test. wgpu turns
//! the layer on (`InstanceFlags::VALIDATION`) without a debug messenger (that takes
//! `InstanceFlags::DEBUG`, which also embeds the WGSL source in the SPIR-V, and Debian 12's
//! layer rejects that SPIR-V), so the layer reports through its default action: lines on
//! stdout, past libtest's capture and past any logger. Here each test process points the
//! layer, through a settings file of its own (`VK_LAYER_SETTINGS_PATH`), at a FIFO of its own
//! that it reads itself: a FIFO because the layer opens its log anew, truncating a file, for
//! every instance, and because a reader drains it as it fills.
//!
//! The variable is set before `main`, from `.init_array`: the loader reads it whenever an
//! instance is made, and before `main` no other thread exists to read the environment while it
//! changes. A test's child process sets its own; other programs a test starts must not be
//! given it (a browser would write its own reports into this process's FIFO). Linux only; elsewhere the layer keeps
//! printing to stdout and the harness counts what reaches the `log` crate.

/// The variable that names the layer's settings folder.
pub const SETTINGS_PATH: &str = "VK_LAYER_SETTINGS_PATH";

#[cfg(target_os = "linux")]
mod linux {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicI32, Ordering};
    use std::sync::Mutex;

    /// Set (to anything), the layer keeps its own settings and prints to stdout, and the
    /// harness sees only what reaches the `log` crate: for comparing the layer's behaviour
    /// with and without this routing.
    const LEAVE_THE_LAYER_ALONE: &str = "GPU_ARENA_TESTS_LAYER_TO_STDOUT";

    /// The read end of this process's FIFO (open without blocking), or -1.
    static READER: AtomicI32 = AtomicI32::new(-1);
    /// What has been read from the FIFO and not yet made whole lines.
    static PARTIAL: Mutex<Vec<u8>> = Mutex::new(Vec::new());
    /// The reports read so far.
    static REPORTS: Mutex<Vec<String>> = Mutex::new(Vec::new());

    /// The folder of this process's settings file and FIFO.
    fn folder() -> PathBuf {
        std::env::temp_dir().join(format!("gpu-arena-tests-{}", std::process::id()))
    }

    /// Runs before `main` (see the module doc): makes the FIFO, opens its read end, writes the
    /// settings file and points the layer at it. Nothing here may panic (no unwinding out of
    /// an `extern "C"` function): a failure leaves the layer printing to stdout.
    extern "C" fn route_the_layer_to_a_fifo() {
        if std::env::var_os(LEAVE_THE_LAYER_ALONE).is_some() {
            return;
        }
        let folder = folder();
        let fifo = folder.join("validation-layer.fifo");
        let settings = format!(
            "khronos_validation.debug_action = VK_DBG_LAYER_ACTION_LOG_MSG\n\
             khronos_validation.log_filename = {}\n\
             khronos_validation.report_flags = error\n",
            fifo.display()
        );
        if std::fs::create_dir_all(&folder).is_err() {
            return;
        }
        // A FIFO left by an earlier process that had this pid and died before `atexit`.
        let _ = std::fs::remove_file(&fifo);
        let Ok(path) = CString::new(fifo.as_os_str().as_bytes()) else {
            return;
        };
        // SAFETY: `path` is a NUL-terminated path; mkfifo and open only read it. The read
        // end is opened without blocking (no writer exists yet) and not inherited by children.
        let reader = unsafe {
            if libc::mkfifo(path.as_ptr(), 0o600) != 0 {
                return;
            }
            libc::open(
                path.as_ptr(),
                libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if reader < 0 || std::fs::write(folder.join("vk_layer_settings.txt"), settings).is_err() {
            return;
        }
        READER.store(reader, Ordering::SeqCst);
        std::env::set_var(super::SETTINGS_PATH, &folder);
        // SAFETY: registers a function without arguments that only removes this process's
        // own folder.
        unsafe { libc::atexit(remove_the_folder) };
    }

    extern "C" fn remove_the_folder() {
        let _ = std::fs::remove_dir_all(folder());
    }

    #[used]
    #[link_section = ".init_array"]
    static BEFORE_MAIN: extern "C" fn() = route_the_layer_to_a_fifo;

    /// Reads what the FIFO holds now into [`REPORTS`], without waiting: the layer has written
    /// a report before the Vulkan call that caused it returns.
    fn drain() {
        let reader = READER.load(Ordering::SeqCst);
        if reader < 0 {
            return;
        }
        let mut partial = PARTIAL.lock().unwrap_or_else(|p| p.into_inner());
        let mut buffer = [0u8; 4096];
        loop {
            // SAFETY: reads at most `buffer.len()` bytes into `buffer` from a descriptor this
            // module owns and never closes.
            let n = unsafe { libc::read(reader, buffer.as_mut_ptr().cast(), buffer.len()) };
            let Ok(n @ 1..) = usize::try_from(n) else {
                break;
            };
            partial.extend_from_slice(&buffer[..n]);
        }
        let whole = partial
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        let text = String::from_utf8_lossy(&partial[..whole]).into_owned();
        partial.drain(..whole);
        REPORTS.lock().unwrap_or_else(|p| p.into_inner()).extend(
            text.lines()
                .filter(|line| line.contains("Validation Error"))
                .map(str::to_string),
        );
    }

    /// Keeps the FIFO drained while tests run, so a layer that reports more than a pipe holds
    /// between two checks never blocks on it.
    pub fn start_draining() {
        std::thread::Builder::new()
            .name("validation-layer-reader".into())
            .spawn(|| loop {
                drain();
                std::thread::sleep(std::time::Duration::from_millis(20));
            })
            .expect("a thread to read the validation layer's FIFO");
    }

    pub fn reports() -> Vec<String> {
        drain();
        REPORTS.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Starts reading the layer's reports (once per process, from the harness's set-up).
pub fn start() {
    #[cfg(target_os = "linux")]
    linux::start_draining();
}

/// The layer's reports so far in this process, one line each (the line that holds
/// "Validation Error"; the layer follows it with lines naming the objects).
pub fn reports() -> Vec<String> {
    #[cfg(target_os = "linux")]
    return linux::reports();
    #[cfg(not(target_os = "linux"))]
    Vec::new()
}
