//! A test binary that dies of a memory fault (SIGSEGV, SIGBUS), an illegal instruction or an
//! arithmetic trap prints the faulting address, the dying thread, the shared object and offset
//! of the faulting instruction and of each native frame, and its backtrace first, so a crash
//! seen once on a CI machine (where no debugger runs) says where it happened: in the crate, in
//! wgpu, in the driver or in the validation layer (Debian strips the last two, so Rust's
//! backtrace shows their frames as `<unknown>`; `dladdr` still names their library).
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

extern "C" fn on_fatal_signal(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut c_void,
) {
    // SAFETY: `alarm` is async-signal-safe; `info` is the siginfo the kernel passed for a
    // handler installed with SA_SIGINFO.
    let address = unsafe {
        libc::alarm(REPORT_SECONDS);
        (*info).si_addr()
    };
    let thread = std::thread::current();
    let report = format!(
        "\nfatal signal {signal} at address {address:?} in thread {:?}; faulting instruction \
         {}; native frames:\n{}backtrace:\n{}\n",
        thread.name().unwrap_or("(unnamed)"),
        faulting_instruction(context),
        native_frames(),
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

/// Where the faulting instruction lies: its shared object and offset (a frame the backtrace
/// shows as `<unknown>` is in a library without symbols: the driver or the validation layer).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn faulting_instruction(context: *mut c_void) -> String {
    if context.is_null() {
        return "(unknown)".to_string();
    }
    // SAFETY: for a handler installed with SA_SIGINFO the third argument is the `ucontext_t`
    // of the interrupted thread; x86-64 Linux keeps the instruction pointer in REG_RIP.
    let pc =
        unsafe { (*context.cast::<libc::ucontext_t>()).uc_mcontext.gregs[libc::REG_RIP as usize] };
    locate(pc as usize as *const c_void)
}

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
fn faulting_instruction(_: *mut c_void) -> String {
    "(unknown on this target)".to_string()
}

#[cfg(target_os = "linux")]
extern "C" {
    /// glibc's `backtrace` (execinfo.h): the return addresses of the calling thread's frames.
    fn backtrace(buffer: *mut *mut c_void, size: libc::c_int) -> libc::c_int;
}

/// The calling thread's frames as shared object + offset and the nearest exported symbol,
/// which names the library of frames Rust's backtrace cannot symbolize.
#[cfg(target_os = "linux")]
fn native_frames() -> String {
    let mut frames = [std::ptr::null_mut::<c_void>(); 48];
    // SAFETY: `frames` holds as many pointers as the size passed.
    let count = unsafe { backtrace(frames.as_mut_ptr(), frames.len() as libc::c_int) };
    let count = usize::try_from(count).unwrap_or(0).min(frames.len());
    frames[..count]
        .iter()
        .enumerate()
        .map(|(index, &frame)| format!("  {index:2}: {}\n", locate(frame)))
        .collect()
}

#[cfg(not(target_os = "linux"))]
fn native_frames() -> String {
    String::new()
}

/// `address` as `object+offset (symbol+offset)` through `dladdr`.
#[cfg(target_os = "linux")]
fn locate(address: *const c_void) -> String {
    // SAFETY: a zeroed `Dl_info` is a valid value for `dladdr` to fill in; it reads nothing
    // at `address`, only the loaded objects' tables.
    let mut found: libc::Dl_info = unsafe { std::mem::zeroed() };
    if unsafe { libc::dladdr(address, &mut found) } == 0 || found.dli_fname.is_null() {
        return format!("{address:?} (in no loaded object)");
    }
    // SAFETY: `dladdr` succeeded, so `dli_fname` (checked non-null) and a non-null `dli_sname`
    // are NUL-terminated strings owned by the loader.
    let object = unsafe { std::ffi::CStr::from_ptr(found.dli_fname) }.to_string_lossy();
    let object_offset = (address as usize).wrapping_sub(found.dli_fbase as usize);
    let symbol = if found.dli_sname.is_null() {
        String::new()
    } else {
        let name = unsafe { std::ffi::CStr::from_ptr(found.dli_sname) }.to_string_lossy();
        let offset = (address as usize).wrapping_sub(found.dli_saddr as usize);
        format!(" ({name}+{offset:#x})")
    };
    format!("{object}+{object_offset:#x}{symbol}")
}
