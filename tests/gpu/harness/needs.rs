//! What a test needs of the machine beyond a GPU adapter of any kind, and the summary of what
//! ran and what was skipped, printed when the test binary ends.
//!
//! `#[gpu_test(needs = Vulkan)]` names the need; on a machine without it (a fresh Linux
//! machine has Mesa's OpenGL and no Vulkan driver; a Mac or a Windows machine has Metal or
//! DX12) the test does not run and is counted, with its reason, in the summary line
//! (`gpu tests: 312 ran on Gl (llvmpipe ...); 30 skipped: 24 need a Vulkan adapter, ...`).
//! libtest has no way to skip a test once it runs, so a skipped test shows "ok" in libtest's
//! own list: the summary is where a skip is told apart, as wgpu's test suite reports the
//! tests a backend cannot run.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, Once, OnceLock};

/// What a test may need beyond a GPU adapter of any kind: the first two are known before the
/// test runs (`#[gpu_test(needs = ...)]`); the test finds the others itself and calls [`skip`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// The default adapter is reached through Vulkan: the arena on gpu-allocator's memory,
    /// the memory table, the staging pool, non-coherent emulation, the app's Vulkan device.
    Vulkan,
    /// The default adapter's arena is host-visible memory on a UMA device (lavapipe, an APU):
    /// the zero-copy host path of single ops and transfers.
    HostVisibleArena,
    /// A GL adapter beside the default one (Mesa's, through wgpu's GL backend).
    GlAdapter,
    /// The Khronos validation layer, installed and loaded.
    ValidationLayer,
    /// The device has `wgpu::Features::IMMEDIATES`.
    Immediates,
    /// Headless Chromium, to render the HTML report.
    Chromium,
    /// Root, to give a directory to another user.
    Root,
    /// Device memory for several arrays of the device's largest size, that size a real GPU's
    /// (1 GiB or more): the limits of the device itself, not a configured cap.
    RoomForLargestArrays,
}

impl Need {
    /// Why a test is skipped where the need is not met.
    fn reason(self) -> &'static str {
        match self {
            Need::Vulkan => "need a Vulkan adapter",
            Need::HostVisibleArena => "need a host-visible (UMA) arena on Vulkan",
            Need::GlAdapter => "need a GL adapter",
            Need::ValidationLayer => "need the Khronos validation layer",
            Need::Immediates => "need immediates (var<immediate>)",
            Need::Chromium => "need chromium (apt-get install chromium)",
            Need::Root => "need root",
            Need::RoomForLargestArrays => "need memory for several of the device's largest arrays",
        }
    }
}

/// What the default adapter is, found once per binary without opening a device.
struct Machine {
    /// "Vulkan (llvmpipe (LLVM 15.0.6, 256 bits))", for the summary.
    adapter: String,
    vulkan: bool,
    host_visible_arena: bool,
}

/// The machine, looked up by the first test that asks.
static MACHINE: OnceLock<Machine> = OnceLock::new();

fn machine() -> &'static Machine {
    MACHINE.get_or_init(|| {
        let devices = gpu_arena::devices(&super::test_config()).unwrap_or_default();
        let Some(default) = devices.iter().find(|d| d.is_default()) else {
            return Machine {
                adapter: "no adapter".into(),
                vulkan: false,
                host_visible_arena: false,
            };
        };
        Machine {
            adapter: format!("{:?} ({})", default.backend(), default.name()),
            vulkan: default.backend() == wgpu::Backend::Vulkan,
            host_visible_arena: default
                .memory_plan()
                .is_ok_and(|plan| plan.uma && plan.arena_host_visible),
        }
    })
}

/// True where the machine meets `need` (the needs an attribute may name; a test finds the
/// others itself).
fn machine_has(need: Need) -> bool {
    let machine = machine();
    match need {
        Need::Vulkan => machine.vulkan,
        Need::HostVisibleArena => machine.vulkan && machine.host_visible_arena,
        other => panic!("{other:?} is found by the test itself: call harness::skip"),
    }
}

static RAN: AtomicUsize = AtomicUsize::new(0);
static SKIPPED: Mutex<Vec<(Need, String)>> = Mutex::new(Vec::new());

/// Records the running test as skipped for want of `need`, found by the test itself (a GL
/// adapter, the validation layer, ...); the test returns right after.
pub fn skip(need: Need) {
    RAN.fetch_sub(1, Ordering::Relaxed);
    // libtest runs each test on a thread named for it.
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    SKIPPED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push((need, test));
}
static SUMMARY_AT_EXIT: Once = Once::new();

/// Counts a test that runs (`needs` met, or none), or records a skip; true when it runs.
pub(super) fn count(need: Option<Need>, test: &'static str) -> bool {
    SUMMARY_AT_EXIT.call_once(|| {
        // SAFETY: `print_summary` is an `extern "C" fn()` that touches only this module's
        // statics and stdout; registering it has no other precondition.
        #[cfg(unix)]
        unsafe {
            libc::atexit(print_summary);
        }
    });
    match need {
        Some(need) if !machine_has(need) => {
            // The binary's name first, as libtest names tests without it.
            let test = test.split_once("::").map_or(test, |(_binary, path)| path);
            SKIPPED
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((need, test.to_string()));
            false
        }
        _ => {
            RAN.fetch_add(1, Ordering::Relaxed);
            true
        }
    }
}

/// The summary line, and one line per skipped test with its reason.
pub fn summary() -> String {
    let skipped = SKIPPED.lock().unwrap_or_else(|p| p.into_inner()).clone();
    // Never looked up at exit (the summary runs in an exit handler, where opening an instance
    // can crash in a layer already torn down): a run whose tests asked nothing says so.
    let adapter = MACHINE
        .get()
        .map_or("an adapter not looked up", |m| m.adapter.as_str());
    let mut line = format!(
        "gpu tests: {} ran on {adapter}",
        RAN.load(Ordering::Relaxed)
    );
    if !skipped.is_empty() {
        let mut reasons: Vec<(Need, usize)> = Vec::new();
        for (need, _) in &skipped {
            match reasons.iter_mut().find(|(n, _)| n == need) {
                Some((_, count)) => *count += 1,
                None => reasons.push((*need, 1)),
            }
        }
        let reasons: Vec<String> = reasons
            .iter()
            .map(|(need, count)| format!("{count} {}", need.reason()))
            .collect();
        line += &format!("; {} skipped: {}", skipped.len(), reasons.join(", "));
        for (need, test) in &skipped {
            line += &format!("\n  skipped {test}: {}", need.reason());
        }
    }
    line
}

#[cfg(unix)]
extern "C" fn print_summary() {
    use std::io::Write;
    // After libtest's own result line; written whole, as nothing else prints then.
    let _ = writeln!(std::io::stdout(), "{}", summary());
}

/// The value a skipped test returns: `()` or `Ok(())`.
pub trait Skipped {
    fn skipped() -> Self;
}

impl Skipped for () {
    fn skipped() -> Self {}
}

impl<E> Skipped for Result<(), E> {
    fn skipped() -> Self {
        Ok(())
    }
}
