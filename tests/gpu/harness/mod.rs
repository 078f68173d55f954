//! The GPU test harness: what every test of this binary shares.
//! - `#[gpu_test]` (the attribute, from `tests/gpu_test_macro`) holds an [`AfterTest`] for the
//!   length of each test, which runs the binary's GPU tests one at a time and fails the test if
//!   a Vulkan validation error was logged;
//! - contexts on the test machine's GPU (lavapipe in CI) with wgpu's validation on:
//!   [`context`], [`context_with`], and [`op_paths`] for a test that runs on every path a
//!   single op can take;
//! - the logger that keeps the validation errors that reach the `log` crate and every warning, for tests that read
//!   their own messages ([`logged_messages_containing`]);
//! - `layer_log.rs`: the validation layer's reports routed to a FIFO the harness reads;
//! - `crash_report.rs`: a report of the faulting thread if the binary dies of a signal;
//! - `ordering.rs`: kernels whose results show the order work ran in;
//! - `refusals.rs`: checks of the refusals many modules provoke;
//! - `needs.rs`: what a test needs of the machine (`#[gpu_test(needs = Vulkan)]`), and the
//!   summary of the tests that ran and were skipped, printed when the binary ends.

use gpu_arena::{ArenaConfig, Context};

#[cfg(unix)]
mod crash_report;
pub mod layer_log;
mod needs;
pub use needs::{skip, Need, Skipped};
pub mod ordering;
pub mod refusals;
use std::sync::{Mutex, MutexGuard, Once};

/// The validation errors that reached the `log` crate.
static VALIDATION_MESSAGES: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// How many validation errors a failure quotes.
const QUOTED_VALIDATION_MESSAGES: usize = 5;
/// Every warning and error logged in this test binary, for tests that read their messages.
static MESSAGES: Mutex<Vec<String>> = Mutex::new(Vec::new());
static LOGGER: CountingLogger = CountingLogger;
static INIT: Once = Once::new();

struct CountingLogger;

impl log::Log for CountingLogger {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.level() <= log::Level::Warn
    }

    fn log(&self, record: &log::Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let message = record.args().to_string();
        let validation = record.level() == log::Level::Error
            && (record.target().starts_with("wgpu_hal::vulkan")
                || message.contains("VUID-")
                || message.contains("Validation Error"));
        if validation {
            VALIDATION_MESSAGES
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(message.clone());
        }
        MESSAGES
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(message.clone());
        eprintln!("[{}] {}: {}", record.level(), record.target(), message);
    }

    fn flush(&self) {}
}

/// Installs the counting logger (and the crash report, see `crash_report.rs`) once per test
/// binary.
pub fn init_logging() {
    INIT.call_once(|| {
        #[cfg(unix)]
        crash_report::install();
        layer_log::start();
        let _ = log::set_logger(&LOGGER);
        log::set_max_level(log::LevelFilter::Warn);
    });
}

/// A test configuration: validation on, preallocation of a small fraction so tests that open
/// many contexts stay light on lavapipe's 2 GiB heap.
pub fn test_config() -> ArenaConfig {
    ArenaConfig {
        validation: true,
        mem_fraction: gpu_arena::MemFraction::fixed(0.25),
        ..ArenaConfig::default()
    }
}

/// Opens a context with `config` (validation forced on).
pub fn context_with(config: ArenaConfig) -> Context {
    init_logging();
    Context::new(ArenaConfig {
        validation: true,
        ..config
    })
    .expect("a GPU adapter (install mesa-vulkan-drivers for lavapipe)")
}

/// Opens a context with [`test_config`].
pub fn context() -> Context {
    context_with(test_config())
}

/// A context on wgpu's GL backend with `config` (validation forced on), or `None` where the
/// machine has no GL adapter; any other refusal fails the test.
pub fn gl_context_with(config: ArenaConfig) -> Option<Context> {
    init_logging();
    match Context::new(ArenaConfig {
        backend: gpu_arena::BackendChoice::Gl,
        validation: true,
        ..config
    }) {
        Ok(ctx) => Some(ctx),
        Err(gpu_arena::Error::NoAdapter { .. }) => None,
        Err(other) => panic!("a GL context: {other}"),
    }
}

/// A context on wgpu's GL backend with [`test_config`], where the machine has a GL adapter.
pub fn gl_context() -> Option<Context> {
    gl_context_with(test_config())
}

/// Held by every `#[gpu_test]` for the length of the test (the attribute writes it). It runs
/// the binary's GPU tests one at a time, and when the test ends without panicking, it fails the
/// test if any Vulkan validation error has been logged in this binary, quoting the first ones.
/// Counted for the whole binary rather than per test because the layer reports on whatever
/// thread called Vulkan, and tests spawn threads of their own: one error fails every test that
/// ends after it, which a clean suite never sees.
///
/// One test at a time because of the validation layer, not the crate: Debian 12's layer
/// (1.3.239, what CI installs) finds its per-instance and per-device state for every Vulkan call
/// in one process-wide hash map that creating or destroying any instance or device rewrites
/// without a lock (`GetLayerDataPtr`, "TODO: We probably should lock here";
/// KhronosGroup/Vulkan-ValidationLayers#4391). A call on one thread that meets a context opened
/// or dropped on another can read a half-moved entry, get a fresh empty state back and die of
/// a null dereference inside the layer: seen as a SIGSEGV in `vkCmdPipelineBarrier`,
/// `vkBeginCommandBuffer`, `vkEndCommandBuffer` and `vkResetCommandPool` of one test while
/// another test opened contexts (3 runs in 104 of the `multi_device` and `memory_ownership`
/// modules on a 2-core machine; none in 150 with the tests one at a time). The
/// library allows what raced (Vulkan lets devices be used from any thread). A test's own
/// threads still run together, so a test opens its contexts before it starts threads that use
/// them. The layer locks that map from 1.4.304 on.
pub struct AfterTest {
    _one_at_a_time: MutexGuard<'static, ()>,
}

/// Taken by each GPU test for its length ([`AfterTest`]).
static ONE_TEST_AT_A_TIME: Mutex<()> = Mutex::new(());

impl AfterTest {
    /// Installs the logger (a test may open its context without this harness's helpers).
    pub fn begin() -> Self {
        let held = Self::hold();
        needs::count(None, "");
        held
    }

    /// [`AfterTest::begin`] for a test that needs `need` (`#[gpu_test(needs = ...)]`): `None`,
    /// and the test `test` recorded as skipped for the summary, where the machine lacks it.
    pub fn begin_needing(need: Need, test: &'static str) -> Option<Self> {
        // Held first: finding what the machine has makes a Vulkan instance (see above).
        let held = Self::hold();
        needs::count(Some(need), test).then_some(held)
    }

    fn hold() -> Self {
        init_logging();
        // A test that panicked poisons the lock; the next one runs all the same.
        let one_at_a_time = ONE_TEST_AT_A_TIME
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        AfterTest {
            _one_at_a_time: one_at_a_time,
        }
    }
}

impl Drop for AfterTest {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        let reports = validation_reports();
        if !reports.is_empty() {
            panic!(
                "{} Vulkan validation error(s) were logged in this test binary; the first:\n{}",
                reports.len(),
                reports[..reports.len().min(QUOTED_VALIDATION_MESSAGES)].join("\n")
            );
        }
    }
}

/// The Vulkan validation errors reported in this test binary so far: the layer's own reports
/// (`layer_log.rs`) and those that reached the `log` crate (through a debug messenger).
pub fn validation_reports() -> Vec<String> {
    let mut reports = layer_log::reports();
    reports.extend(
        VALIDATION_MESSAGES
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned(),
    );
    reports
}

/// How a test re-run in a child process ended: its exit and everything it printed.
pub struct ChildRun {
    pub status: std::process::ExitStatus,
    /// Its standard output, then its standard error.
    pub text: String,
}

/// Re-runs the test `function` of the module `module_path` (pass `module_path!()`) alone in a
/// child process of this binary, with `env` added to its environment and its output captured.
/// For what must not reach this process's log (refusals a scenario provokes on purpose), and
/// for what a process does once per life (a crash, a layer's setting).
pub fn run_test_in_child(module_path: &str, function: &str, env: &[(&str, &str)]) -> ChildRun {
    let name = match module_path.split_once("::") {
        // libtest names a test by its module path without the binary's name.
        Some((_binary, module)) => format!("{module}::{function}"),
        None => function.to_string(),
    };
    let output = std::process::Command::new(std::env::current_exe().expect("this test binary"))
        .args([name.as_str(), "--exact", "--nocapture", "--test-threads=1"])
        .envs(env.iter().copied())
        .output()
        .expect("re-running the test binary");
    ChildRun {
        status: output.status,
        text: format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    }
}

/// The warnings and errors logged in this test binary so far that contain `text` (tests run
/// in parallel: pass something only your test logs, such as its own file name).
pub fn logged_messages_containing(text: &str) -> Vec<String> {
    MESSAGES
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter(|m| m.contains(text))
        .cloned()
        .collect()
}

/// A deterministic pseudo-random generator (splitmix64) so tests need no rand crate.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

/// A kernel that copies `src` to `dst` slowly (a long loop per element, its result in `sink`),
/// so the copy is still running when the host reuses memory: the frontier tests' workload.
/// `src_access` is `read` or `read_write` (raw wgpu pipelines need `read_write`: see
/// `DeviceArray::raw_binding`).
pub fn slow_copy_wgsl(src_access: &str) -> String {
    SLOW_COPY_WGSL.replace("SRC_ACCESS", src_access)
}

const SLOW_COPY_WGSL: &str = r#"
@group(0) @binding(0) var<storage, SRC_ACCESS> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
@group(0) @binding(2) var<storage, read_write> sink: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if (i >= arrayLength(&dst)) { return; }
    // Burn time so the copy is still running when the host reuses memory.
    var acc = src[i];
    for (var k = 0u; k < 2000u; k++) { acc = (acc * 1664525u + 1013904223u) ^ k; }
    dst[i] = src[i];
    sink[i] = acc;
}
"#;

/// The frontier check after a slow copy of `data` into `y` was submitted and its source, which
/// lived at `source` (buffer and offset), was dropped: a new array of the same size is written
/// at once (best fit would take the source's chunk if it were free), and `y` must still end up
/// holding `data`, the new array its own bytes.
pub fn assert_dropped_source_was_not_reused(
    ctx: &Context,
    source: (wgpu::Buffer, u64),
    y: &gpu_arena::DeviceArray<u32>,
    data: &[u32],
    case: &str,
) {
    let z = ctx
        .device_put(&vec![0xDEAD_BEEFu32; data.len()], &[data.len()])
        .unwrap();
    let reused_at_once = z.buffer() == &source.0 && z.byte_offset() == source.1;
    let result = ctx.device_get(y).unwrap();
    let wrong = result.iter().zip(data).filter(|(a, b)| a != b).count();
    assert_eq!(
        wrong, 0,
        "{case}: {wrong} elements differ from the source's data (reused at once: {reused_at_once})"
    );
    assert!(
        ctx.device_get(&z)
            .unwrap()
            .iter()
            .all(|&v| v == 0xDEAD_BEEF),
        "{case}"
    );
}

/// The paths single ops take on this machine, by name, each a context of its own: zero-copy
/// (lavapipe maps the arena, and ops copy on the host), staging (`zero_copy: false`), device
/// kernels forced, and wgpu's own staging (`queue.write_buffer`) where a GL adapter exists.
pub fn op_paths() -> Vec<(&'static str, Context)> {
    let kernels = context_with(ArenaConfig {
        force_device_kernels: true,
        ..test_config()
    });
    let mut paths = vec![
        ("zero-copy", context_with(test_config())),
        (
            "staging",
            context_with(ArenaConfig {
                zero_copy: false,
                ..test_config()
            }),
        ),
        ("device kernels", kernels),
    ];
    if let Some(gl) = gl_context() {
        paths.push(("plain wgpu", gl));
    }
    paths
}

/// Submissions made by `work`, counted by the ids gpu-arena hands out between two empty raw
/// submissions (each of which submits the context's gathered single ops first).
pub fn submissions_made<R>(ctx: &Context, work: impl FnOnce() -> R) -> (u64, R) {
    let before = ctx.raw_submit(std::iter::empty(), &[]).unwrap().0;
    let result = work();
    let after = ctx.raw_submit(std::iter::empty(), &[]).unwrap().0;
    (after - before - 1, result)
}

/// A kernel that adds its immediate data (`var<immediate>`, push constants) to every element:
/// it compiles only on a device with immediates and room for them.
pub const IMMEDIATE_ADD: &str = "var<immediate> add: u32;
    @group(0) @binding(0) var<storage, read_write> a: array<u32>;
    @compute @workgroup_size(64) fn main(@builtin(global_invocation_id) i: vec3<u32>) {
        if (i.x < arrayLength(&a)) { a[i.x] = a[i.x] + add; }
    }";

/// Runs [`IMMEDIATE_ADD`]'s `kernel` over 100 ones with 41 as its immediate, and checks that
/// every element became 42; gives the array back.
pub fn run_immediate_add(ctx: &Context, kernel: &gpu_arena::Kernel) -> gpu_arena::DeviceArray<u32> {
    let mut a = ctx.device_put(&[1u32; 100], &[100]).unwrap();
    ctx.launch(kernel)
        .params(&41u32)
        .arg_mut(&mut a)
        .grid_for(100)
        .run()
        .unwrap();
    assert_eq!(ctx.device_get(&a).unwrap(), vec![42; 100]);
    a
}
