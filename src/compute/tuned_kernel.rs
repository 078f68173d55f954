//! [`Context::tune_kernel`]: a user's kernel tuned over the values of one of its override
//! constants (a workgroup size, items per invocation, a tile), measured on the device with the
//! user's own launches and kept as the library's kernels' choices are (for the process, and
//! beside the pipeline cache with `GPU_ARENA_CACHE_DIR`).

use super::user_kernel::Kernel;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::kernel_tuning::KernelTuning;
use crate::pipelines::{KernelDesc, KernelSource, TunedUserKernel, TuningOrigin};
use std::time::{Duration, Instant};

/// Rounds of timing at most, at least, and the wall time after which a job stops once it has
/// its least (as the library's tuning: `ops/tuner.rs`).
const ROUNDS: usize = 5;
const MIN_ROUNDS: usize = 3;
const JOB_BUDGET: Duration = Duration::from_millis(500);

/// The measurements users ask for that the process runs right now (a user's kernel tuned, the
/// host link measured): one job per kernel and one host-link measurement at a time in the
/// process. A leaf lock, held only to read or change the list, never across a measurement.
static MEASURING: std::sync::Mutex<Vec<Measure>> = std::sync::Mutex::new(Vec::new());
/// Told when a measurement ends.
static MEASURED: std::sync::Condvar = std::sync::Condvar::new();

thread_local! {
    /// Whether this thread is inside a `run` of [`Context::tune_kernel`]: a tuning asked for
    /// there measures nothing and waits for nothing.
    static IN_RUN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks the thread as inside a `run` while it lives.
struct InRun;

impl InRun {
    fn set() -> Self {
        IN_RUN.with(|t| t.set(true));
        InRun
    }
}

impl Drop for InRun {
    fn drop(&mut self) {
        IN_RUN.with(|t| t.set(false));
    }
}

/// What a measurement measures: a user's kernel (the key of its source, constants and values)
/// or the host link.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Measure {
    UserKernel(u64),
    HostLink,
}

/// A measurement of the process, held by the job that runs it; ends it when dropped.
pub(crate) struct MeasuringJob(Measure);

impl Drop for MeasuringJob {
    fn drop(&mut self) {
        let mut now = MEASURING.lock().unwrap_or_else(|p| p.into_inner());
        now.retain(|&m| m != self.0);
        MEASURED.notify_all();
    }
}

/// Starts the process's measurement `what`, after waiting for the ones it must not time
/// beside: a host-link measurement (it runs none of the user's code), and the same kernel's
/// tuning (whose choice it then finds). Other kernels' tunings run at the same time: their
/// `run` may wait for this thread, so waiting for them could wait forever. `None` for a
/// tuning asked inside a `run`, which measures nothing. The host link is measured beside
/// kernels' tunings.
pub(crate) fn measuring_job(what: Measure) -> Option<MeasuringJob> {
    if matches!(what, Measure::UserKernel(_)) && IN_RUN.with(|t| t.get()) {
        return None;
    }
    let mut now = MEASURING.lock().unwrap_or_else(|p| p.into_inner());
    while now.contains(&Measure::HostLink) || now.contains(&what) {
        now = MEASURED.wait(now).unwrap_or_else(|p| p.into_inner());
    }
    now.push(what);
    Some(MeasuringJob(what))
}

impl Context {
    /// The kernel of `desc` with its override constant `constant` set to whichever of `values`
    /// runs `run` fastest on this device: every value is checked first (a refused call
    /// compiles nothing), each is compiled once (a value given twice, or two that apply alike,
    /// as `0.0` and `-0.0` or two `f64`s an `f32` constant rounds to one, is one candidate), then
    /// `run` (your launch of the kernel on arrays of your choosing, e.g. `|k|
    /// ctx.launch(k).arg(&x).arg_mut(&mut y).grid_for(n).run()`) is timed with each, followed
    /// by a synchronize, interleaved round by round; a value's fastest round counts. The choice is kept as the library's kernels'
    /// are (see [`KernelTuning`]): later calls with the same source, entry point, constants
    /// (by name or by `@id` alike, as compiling takes them) and values in the same order, in
    /// this process or (with `GPU_ARENA_CACHE_DIR`) the next, return it without
    /// calling `run`; [`Context::kernel_tuning`] lists it. Under `KernelTuning::Cached` nothing
    /// is measured (a kernel never tuned gets the first value), under `Off` and `Forced` the
    /// first value is used. A value in the file that is not among `values` is not trusted:
    /// the kernel is tuned again. One job per kernel runs at a time in the process: a thread
    /// that asks for a kernel being tuned (the same source, entry point,
    /// constants and values) waits for that job and gets its choice, so `run` must not wait
    /// for a thread that tunes its own kernel. Different kernels asked for at once on several
    /// threads are tuned at the same time (each may then time the others' work too: tune at
    /// start-up, from one thread, for the cleanest figures), so a `run` may wait for threads
    /// that tune other kernels or measure the host link. A `tune_kernel` inside `run`
    /// measures nothing (as under `Cached`: the choice already made, else the first value).
    /// One asked while the host link is measured ([`Context::host_link_bandwidth`]) waits
    /// for that. `run` must not record into a
    /// [`Sequence`](crate::Sequence) or capture: each call is timed alone.
    ///
    /// Errors: [`Error::DeviceLost`] once the device is lost (before anything else is
    /// checked), [`Error::EagerDuringCapture`] on a thread that holds a capture of this
    /// context open (in its default mode), as [`Context::tune_kernels`] there, those of
    /// [`Context::kernel_with`] for any value (an unknown constant, one
    /// already in `desc`'s constants, a value not exact for its type, a workgroup the device
    /// cannot run), [`Error::KernelCompile`] when `values` is empty, and the first error `run`
    /// returns (nothing is kept then).
    ///
    /// ```no_run
    /// use gpu_arena::kernels::KernelDesc;
    /// # let ctx = gpu_arena::Context::new(gpu_arena::ArenaConfig::default())?;
    /// let wgsl = "override WG: u32 = 64u;
    ///     @group(0) @binding(0) var<storage, read_write> y: array<f32>;
    ///     @compute @workgroup_size(WG)
    ///     fn main(@builtin(global_invocation_id) i: vec3<u32>) {
    ///         if (i.x < arrayLength(&y)) { y[i.x] = y[i.x] * 2.0; }
    ///     }";
    /// let mut y = ctx.zeros::<f32>(&[1 << 20])?;
    /// let kernel = ctx.tune_kernel(KernelDesc::wgsl(wgsl, "main"), "WG", &[64.0, 128.0, 256.0], |k| {
    ///     ctx.launch(k).arg_mut(&mut y).grid_for(1 << 20).run()
    /// })?;
    /// println!("WG = {:?}", kernel.workgroup_size());
    /// # Ok::<(), gpu_arena::Error>(())
    /// ```
    pub fn tune_kernel(
        &self,
        desc: KernelDesc<'_>,
        constant: &str,
        values: &[f64],
        mut run: impl FnMut(&Kernel) -> Result<()>,
    ) -> Result<Kernel> {
        self.check_eager_op("tune_kernel")?;
        let name = crate::pipelines::kernel_name(&desc);
        if values.is_empty() {
            return Err(Error::KernelCompile {
                kernel: name,
                message: format!("no values to tune the override constant `{constant}` over"),
            });
        }
        if desc.constants.iter().any(|&(given, _)| given == constant) {
            return Err(Error::KernelCompile {
                kernel: name,
                message: format!(
                    "the override constant `{constant}` tuned over is also given in the \
                     KernelDesc's constants: leave it out of them (tuning gives it each value)"
                ),
            });
        }
        let constants_with = |value: f64| {
            let mut constants = desc.constants.to_vec();
            constants.push((constant, value));
            constants
        };
        // Every value is checked before any is compiled: a refused call compiles nothing. Each
        // is one candidate by its constants as applied, in the order given (a value given
        // twice, or spelled two ways that apply alike, `0.0` and `-0.0`, is one); the constants
        // as applied name the tuning, one whether spelled by name or by id.
        let mut candidates: Vec<(f64, Vec<(String, f64)>)> = Vec::with_capacity(values.len());
        for &value in values {
            let constants = constants_with(value);
            let variant = KernelDesc {
                constants: &constants,
                ..desc
            };
            let applied = (self.inner.kernels()).check_user(
                self.inner.device(),
                self.inner.adapter_info(),
                self.inner.limits(),
                &variant,
            )?;
            if !candidates.iter().any(|(_, seen)| *seen == applied) {
                candidates.push((value, applied));
            }
        }
        let (values, applied): (Vec<f64>, Vec<Vec<(String, f64)>>) = candidates.into_iter().unzip();
        let values = values.as_slice();
        let kernels = values
            .iter()
            .map(|&value| {
                let constants = constants_with(value);
                self.kernel_with(KernelDesc {
                    constants: &constants,
                    ..desc
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let mut tuning = self.inner.kernels().lock().tuning();
        if matches!(tuning, KernelTuning::Off | KernelTuning::Forced(_)) {
            return Ok(kernels[0].clone());
        }
        let adapter = self.inner.adapter_info();
        let dir: Option<std::path::PathBuf> =
            self.inner.kernels().lock().cache_dir().map(Into::into);
        let key = user_key(&desc, &applied);
        let job = measuring_job(Measure::UserKernel(key));
        if job.is_none() {
            tuning = KernelTuning::Cached;
        }
        let pick = |value: f64| values.iter().position(|&v| v.to_bits() == value.to_bits());
        let chosen = crate::pipelines::chosen_user(adapter, dir.as_deref(), key).and_then(pick);
        match (chosen, tuning) {
            (Some(index), _) => return Ok(kernels[index].clone()),
            (None, KernelTuning::Cached) => return Ok(kernels[0].clone()),
            _ => {}
        }
        let started = Instant::now();
        let in_run = InRun::set();
        let fastest = time_values(self, &kernels, &mut run)?;
        drop(in_run);
        let best = (0..values.len()).min_by_key(|&i| fastest[i]).unwrap_or(0);
        let tuned = TunedUserKernel {
            kernel: name,
            constant: constant.to_string(),
            value: values[best],
            seconds: values
                .iter()
                .zip(&fastest)
                .map(|(&v, d)| (v, d.as_secs_f64()))
                .collect(),
            origin: TuningOrigin::Measured,
        };
        crate::pipelines::record_user(adapter, dir.as_deref(), key, tuned, started.elapsed());
        Ok(kernels[best].clone())
    }
}

/// The fastest round of `run` with each kernel, rounds interleaved in an order that rotates.
fn time_values(
    ctx: &Context,
    kernels: &[Kernel],
    run: &mut impl FnMut(&Kernel) -> Result<()>,
) -> Result<Vec<Duration>> {
    let started = Instant::now();
    // A first call of each pays for its pipeline's first use: not timed.
    for kernel in kernels {
        run(kernel)?;
    }
    ctx.synchronize()?;
    let mut fastest = vec![Duration::MAX; kernels.len()];
    for round in 0..ROUNDS {
        for k in 0..kernels.len() {
            let index = (round + k) % kernels.len();
            let call = Instant::now();
            run(&kernels[index])?;
            ctx.synchronize()?;
            fastest[index] = fastest[index].min(call.elapsed());
        }
        if round + 1 >= MIN_ROUNDS && started.elapsed() > JOB_BUDGET {
            break;
        }
    }
    Ok(fastest)
}

/// What names this tuning: the source, entry point, and each value's constants as applied
/// (in the order of the values, which picks the first value under `Cached`).
fn user_key(desc: &KernelDesc<'_>, applied: &[Vec<(String, f64)>]) -> u64 {
    let source: Vec<u8> = match desc.source {
        KernelSource::Wgsl(text) => text.as_bytes().to_vec(),
        KernelSource::SpirV(words) => words.iter().flat_map(|w| w.to_le_bytes()).collect(),
    };
    let applied: Vec<String> = applied
        .iter()
        .map(|constants| {
            let set: Vec<String> = constants
                .iter()
                .map(|(key, value)| format!("{key}={:016x}", value.to_bits()))
                .collect();
            set.join(",")
        })
        .collect();
    crate::pipelines::user_key(&[
        &source,
        desc.entry_point.as_bytes(),
        applied.join(";").as_bytes(),
    ])
}
