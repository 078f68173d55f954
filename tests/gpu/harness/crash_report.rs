//! A test binary that dies of a memory fault (SIGSEGV, SIGBUS), an illegal instruction or an
//! arithmetic trap prints the faulting address, the dying thread and its backtrace first, so a
//! crash seen once on a CI machine (where no debugger runs) says where it happened: in the
//! crate, in wgpu, in the driver or in the validation layer.
//!
//! The handler then puts back the action that was there before (Rust's own, or the default)
//! and returns: the faulting instruction runs again and the process dies as it would have,
//! with the same signal. Capturing a backtrace is not async-signal-safe (it may allocate, and
//! a fault inside the allocator could make it wait forever), so an alarm ends the process if
//! the report takes longer than [`REPORT_SECONDS`].
//!
//! The handler runs on the faulting thread's own stack, not on the small alternate stack
//! Rust's runtime gives its threads: a backtrace needs more room than that stack holds. The
//! price is a stack overflow, which the kernel cannot report on a full stack: it ends the
//! process with a plain SIGSEGV instead of Rust's "has overflowed its stack" message.
//!
//! The report is written to file descriptor 2 directly: the test harness captures what tests
//! print with `eprintln!`, and a process that dies never shows what was captured.

use std::ffi::c_void;
use std::sync::OnceLock;

/// The longest a report may take before SIGALRM's default action ends the process.
const REPORT_SECONDS: u32 = 20;

/// The signals reported: the ones a fault in native code raises.
const FATAL_SIGNALS: [libc::c_int; 4] = [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE];

/// The actions installed before ours, restored before the signal is taken again.
static PREVIOUS: OnceLock<Vec<(libc::c_int, libc::sigaction)>> = OnceLock::new();

/// Installs the report for every signal of [`FATAL_SIGNALS`] (once per process).
pub fn install() {
    PREVIOUS.get_or_init(|| {
        FATAL_SIGNALS
            .iter()
            .filter_map(|&signal| {
                // SAFETY: a zeroed `sigaction` is a valid value to fill in, and the handler
                // has the three-argument signature SA_SIGINFO asks for.
                unsafe {
                    let mut action: libc::sigaction = std::mem::zeroed();
                    action.sa_sigaction = on_fatal_signal as *const () as usize;
                    action.sa_flags = libc::SA_SIGINFO;
                    libc::sigemptyset(&mut action.sa_mask);
                    let mut previous: libc::sigaction = std::mem::zeroed();
                    (libc::sigaction(signal, &action, &mut previous) == 0)
                        .then_some((signal, previous))
                }
            })
            .collect()
    });
}

extern "C" fn on_fatal_signal(signal: libc::c_int, info: *mut libc::siginfo_t, _: *mut c_void) {
    // SAFETY: `alarm` is async-signal-safe; `info` is the siginfo the kernel passed for a
    // handler installed with SA_SIGINFO.
    let address = unsafe {
        libc::alarm(REPORT_SECONDS);
        (*info).si_addr()
    };
    let thread = std::thread::current();
    let report = format!(
        "\nfatal signal {signal} at address {address:?} in thread {:?}; backtrace:\n{}\n",
        thread.name().unwrap_or("(unnamed)"),
        std::backtrace::Backtrace::force_capture()
    );
    let mut rest = report.as_bytes();
    while !rest.is_empty() {
        // SAFETY: `rest` is a live byte slice; `write` reads at most its length.
        let written = unsafe { libc::write(2, rest.as_ptr().cast(), rest.len()) };
        let Ok(written) = usize::try_from(written) else {
            break;
        };
        rest = &rest[written.min(rest.len())..];
        if written == 0 {
            break;
        }
    }
    if let Some((_, previous)) = PREVIOUS
        .get()
        .and_then(|actions| actions.iter().find(|(s, _)| *s == signal))
    {
        // SAFETY: `previous` is the action `sigaction` reported for this signal at install.
        unsafe { libc::sigaction(signal, previous, std::ptr::null_mut()) };
    }
}
