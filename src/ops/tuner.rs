//! Kernel tuning's measuring: one job per library kernel and [`SizeClass`], run by the first
//! single op that needs the pair (never while a user's sequence or capture records), on
//! scratch buffers of its own. Every candidate shape ([`KernelShape::candidates`]) is timed on
//! the same workload, with the fixed shape and the device's own copy beside them: round by
//! round, candidates interleaved in an order that rotates, each a submission timed by the
//! device's timestamps where it has them, else by the wall clock until it completes
//! (`stopwatch.rs`), and each shape's fastest round decides (the machines that run
//! this are shared and noisy: interference only ever adds time, so the fastest of interleaved
//! rounds is what survives it). Shapes far behind after the first round are dropped, a kernel
//! too slow for its class's bytes is timed on fewer, and a job stops after three rounds once
//! it has spent its budget. The choice is kept by `pipelines/tuned_choices.rs`.
//!
//! The work runs as the context's measurement (`ContextInner::run_measurement`): it touches no
//! array, takes no submission id and leaves the gathered ops gathered, so nothing a program
//! records, counts or waits on sees it.

use super::builtin::{copy_kernel, planning_error};
use super::geometry::{grid, plan_copy, plan_fill, BindRange, BoxCopy, OuterDim, PlanLimits};
use super::stopwatch::Stopwatch;
use crate::compute::Sequence;
use crate::context::{Context, ContextInner};
use crate::error::{Error, Result};
use crate::kernel_tuning::{KernelShape, KernelTuning};
use crate::pipelines::{
    Builtin, ErrorScopes, KernelState, KernelTuningReport, SizeClass, TunedKernel, TuningOrigin,
    TUNING_JOB,
};
use crate::step::{bind_group, BoundRange};
use std::time::{Duration, Instant};

/// What tuning is called in errors.
const TUNING: &str = "tuning a library kernel";

/// A tuning workload that does not plan as the kernel it is for: a bug of this file.
fn internal(reason: &str) -> Error {
    Error::Internal {
        operation: TUNING,
        reason: reason.to_string(),
    }
}

/// Rounds of timing at most.
const ROUNDS: usize = 5;

/// Rounds every job times, whatever its budget.
const MIN_ROUNDS: usize = 3;

/// After the first round, shapes slower than this many times the fastest are dropped: a
/// shape 1.5× behind does not catch up through noise, and the rounds that follow time the
/// few that might win.
const PRUNE_RATIO: f64 = 1.5;

/// Wall time after which a job stops timing once it has [`MIN_ROUNDS`]: slow kernels (bytes
/// on a CPU adapter) get fewer rounds rather than seconds of tuning.
const JOB_BUDGET: Duration = Duration::from_millis(150);

/// How much faster than the fixed shape the best must be to replace it: a choice decided by
/// noise would change from process to process for nothing.
const KEEP_FIXED_WITHIN: f64 = 1.05;

/// Wall time one timed submission should take at least: the kernel is dispatched as many
/// times as this needs (up to [`MAX_REPEATS`]), so that a submission's fixed cost does not
/// decide between shapes of small kernels.
const SAMPLE_TIME: Duration = Duration::from_millis(1);

/// The most dispatches of one shape in one timed submission.
const MAX_REPEATS: u32 = 256;

/// The fewest bytes a slow kernel is timed on (its class's bytes halved until a round fits
/// the budget).
const MIN_TUNING_BYTES: u64 = 256 << 10;

/// What a tuning job of one kernel moves: its parameters, its bindings in the scratch
/// buffers, its items and its bytes.
struct Workload {
    params: Vec<u8>,
    /// The source range (copies) in the source scratch buffer.
    src: Option<BindRange>,
    dst: BindRange,
    items: u64,
    bytes: u64,
}

impl Context {
    /// Tunes every library kernel in every [`SizeClass`] not tuned yet on this device (in
    /// this process or by the tuning file), now rather than at the first op that needs each:
    /// what a program calls at start-up so that no op pays for tuning later, and what
    /// `device_report` measures. Under [`KernelTuning::Cached`] it measures nothing, as that
    /// setting promises, and takes the choices kept (in this process or the tuning file) for
    /// every kernel and size class; under [`KernelTuning::Off`] and [`KernelTuning::Forced`] it
    /// measures nothing. Returns [`Context::kernel_tuning`]'s report. 1.5 to 2 s on lavapipe for all of them
    /// (18 jobs); a kernel whose measuring fails keeps its fixed shape.
    ///
    /// Errors: [`Error::DeviceLost`](crate::Error::DeviceLost);
    /// [`Error::EagerDuringCapture`](crate::Error::EagerDuringCapture) on the thread that
    /// holds a capture of this context open (in its default mode), as other eager work there:
    /// nothing is measured then.
    pub fn tune_kernels(&self) -> Result<KernelTuningReport> {
        self.check_eager_op("tune_kernels")?;
        self.inner.check_device("tuning the library's kernels")?;
        {
            let mut kernels = self.inner.kernels().lock();
            let tuning = kernels.tuning();
            if matches!(tuning, KernelTuning::On | KernelTuning::Cached) {
                let measure = tuning == KernelTuning::On;
                for kernel in Builtin::ALL {
                    for class in SizeClass::ALL {
                        tuned(&self.inner, &mut kernels, kernel, class, measure);
                    }
                }
            }
        }
        Ok(self.kernel_tuning())
    }

    /// Sets the context's kernel tuning (opened from
    /// [`ArenaConfig::kernel_tuning`](crate::ArenaConfig)) for the ops recorded from now on
    /// (what is recorded already keeps its shapes); results are byte-identical under every
    /// setting. For benchmarks that compare shapes on one context. [`Context::config`] still
    /// shows the configuration the context was opened with.
    ///
    /// Errors: [`Error::Config`](crate::Error::Config) for a forced shape the kernels cannot
    /// take (nothing changes).
    pub fn set_kernel_tuning(&self, tuning: KernelTuning) -> Result<()> {
        if let KernelTuning::Forced(shape) = tuning {
            if !shape.is_valid() {
                return Err(crate::Error::Config {
                    variable: "Context::set_kernel_tuning".into(),
                    value: shape.to_string(),
                    expected: crate::kernel_tuning::shape_expected(),
                });
            }
        }
        self.inner.kernels().lock().set_tuning(tuning);
        Ok(())
    }
}

/// Bytes one item of `kernel` moves: a `vec4`, or a word (the byte kernel's items are
/// destination words).
fn item_bytes(kernel: Builtin) -> u64 {
    match kernel {
        Builtin::CopyRowsVec4 { .. } | Builtin::Fill => 16,
        Builtin::CopyRowsWord { .. } | Builtin::CopyBytes => 4,
    }
}

impl Sequence {
    /// The shape `kernel` runs in for a dispatch of `items` items: see [`shape_for`]; a single
    /// op may tune, a user's sequence or capture never does.
    pub(crate) fn kernel_shape(
        &self,
        kernels: &mut KernelState,
        kernel: Builtin,
        items: u64,
    ) -> KernelShape {
        let class = SizeClass::of(items.saturating_mul(item_bytes(kernel)));
        shape_for(&self.ctx.inner, kernels, kernel, class, self.is_single_op())
    }
}

/// The shape `kernel` runs in for dispatches of `class`, under the context's
/// [`KernelTuning`]: the fixed or forced shape, or the choice tuning made for the device (in
/// this process or read from the tuning file). With none yet and tuning on, `may_tune` (a
/// single op) tunes the pair now; otherwise (a user's sequence or capture) the fixed shape
/// runs until a single op has tuned it.
pub(crate) fn shape_for(
    inner: &ContextInner,
    kernels: &mut KernelState,
    kernel: Builtin,
    class: SizeClass,
    may_tune: bool,
) -> KernelShape {
    match kernels.tuning() {
        KernelTuning::Off => kernel.fixed_shape(),
        KernelTuning::Forced(shape) => shape,
        KernelTuning::Cached => tuned(inner, kernels, kernel, class, false),
        KernelTuning::On => tuned(inner, kernels, kernel, class, may_tune),
    }
}

/// The choice made for `kernel` and `class` on the device, made now when there is none and
/// `measure` says so; the fixed shape otherwise.
fn tuned(
    inner: &ContextInner,
    kernels: &mut KernelState,
    kernel: Builtin,
    class: SizeClass,
    measure: bool,
) -> KernelShape {
    if let Some(shape) = kernels.chosen_shape(kernel, class) {
        return shape;
    }
    let adapter = inner.adapter_info();
    let dir = kernels.cache_dir().map(std::path::Path::to_path_buf);
    let chosen = || crate::pipelines::chosen(adapter, dir.as_deref(), kernel, class);
    if let Some(shape) = chosen() {
        kernels.remember_shape(kernel, class, shape);
        return shape;
    }
    // A lost device has nothing to measure: the op that asked fails on its own.
    if !measure || inner.check_device(TUNING).is_err() {
        return kernel.fixed_shape();
    }
    let _job = TUNING_JOB.lock().unwrap_or_else(|p| p.into_inner());
    // Another context may have tuned the pair while this one waited for the job.
    if let Some(shape) = chosen() {
        kernels.remember_shape(kernel, class, shape);
        return shape;
    }
    let started = Instant::now();
    let candidates = crate::pipelines::candidates(adapter);
    let outcome = tune(inner, kernels, kernel, class, &candidates);
    let shape = outcome.shape;
    crate::pipelines::record(adapter, dir.as_deref(), kernel, outcome, started.elapsed());
    kernels.remember_shape(kernel, class, shape);
    shape
}

/// Times every candidate of `kernel` for `class` on the context's device: the fastest, or
/// the fixed shape marked [`TuningOrigin::Failed`] when measuring failed (the reason is
/// logged).
fn tune(
    inner: &ContextInner,
    kernels: &mut KernelState,
    kernel: Builtin,
    class: SizeClass,
    candidates: &[KernelShape],
) -> TunedKernel {
    let measured = measure(inner, kernels, kernel, class, candidates);
    let fixed_shape = kernel.fixed_shape();
    match measured {
        Ok(rates) => choose(kernel, class, &rates),
        Err(reason) => {
            log::warn!(
                "gpu-arena: could not tune {} for {} dispatches: {reason} (it keeps its fixed \
                 shape {fixed_shape})",
                kernel.name(),
                class.name()
            );
            // No rates: the fixed shape, every rate 0.
            let none = Rates {
                shapes: Vec::new(),
                device_copy: 0.0,
            };
            TunedKernel {
                origin: TuningOrigin::Failed,
                ..choose(kernel, class, &none)
            }
        }
    }
}

/// Rates of one job: bytes per second of each shape still timed at the end, and of the
/// device's own copy.
struct Rates {
    shapes: Vec<(KernelShape, f64)>,
    device_copy: f64,
}

/// The fastest shape of `rates`, unless the fixed shape is within [`KEEP_FIXED_WITHIN`].
fn choose(kernel: Builtin, class: SizeClass, rates: &Rates) -> TunedKernel {
    let fixed_shape = kernel.fixed_shape();
    let rate = |shape| {
        rates
            .shapes
            .iter()
            .find(|(s, _)| *s == shape)
            .map_or(0.0, |(_, r)| *r)
    };
    let fixed = rate(fixed_shape);
    let (best, best_rate) =
        rates
            .shapes
            .iter()
            .copied()
            .fold((fixed_shape, fixed), |best, candidate| {
                if candidate.1 > best.1 {
                    candidate
                } else {
                    best
                }
            });
    let shape = if best_rate > fixed * KEEP_FIXED_WITHIN {
        best
    } else {
        fixed_shape
    };
    TunedKernel {
        kernel: kernel.name(),
        size_class: class,
        shape,
        fixed_shape,
        bytes_per_second: rate(shape),
        fixed_bytes_per_second: fixed,
        device_copy_bytes_per_second: rates.device_copy,
        origin: TuningOrigin::Measured,
    }
}

/// What a job of the large class moves on a GPU: more than the L2 caches hold (50 MB on an
/// H100), so that the shapes are timed against device memory, as the large copies they serve
/// run. A GPU moves it in well under a millisecond; a slow device is timed on fewer bytes.
const GPU_LARGE_TUNING_BYTES: u64 = 64 << 20;

/// The bytes a tuning job of `class` starts from on `inner`'s device: the class's
/// ([`SizeClass::tuning_bytes`]), or [`GPU_LARGE_TUNING_BYTES`] for the large class on a device
/// that is not a CPU.
fn tuning_bytes(inner: &ContextInner, class: SizeClass) -> u64 {
    match (class, inner.adapter_info().device_type) {
        (SizeClass::Large, device) if device != wgpu::DeviceType::Cpu => GPU_LARGE_TUNING_BYTES,
        _ => class.tuning_bytes(),
    }
}

/// Times every candidate (the fixed shape among them) and the device's copy, round by round.
fn measure(
    inner: &ContextInner,
    kernels: &mut KernelState,
    kernel: Builtin,
    class: SizeClass,
    candidates: &[KernelShape],
) -> Result<Rates> {
    let started = Instant::now();
    let mut shapes = candidates.to_vec();
    // The fixed shape is always timed: where the candidates lack it, last.
    let fixed = match shapes.iter().position(|&s| s == kernel.fixed_shape()) {
        Some(index) => index,
        None => {
            shapes.push(kernel.fixed_shape());
            shapes.len() - 1
        }
    };
    let compiled = shapes
        .iter()
        .map(|&shape| kernels.tuning_candidate(inner.device(), inner.adapter_info(), kernel, shape))
        .collect::<Result<Vec<_>>>()?;
    let mut bench = Bench::new(
        inner,
        kernel,
        tuning_bytes(inner, class),
        &shapes,
        &compiled,
    )?;
    // The fixed shape's second run (its first pays for the pipeline's first use) says how
    // long one dispatch takes. A kernel so slow that a round would take more than a third of
    // the budget is timed on fewer bytes (halved down to MIN_TUNING_BYTES): its shapes rank
    // the same, and tuning stays short.
    bench.run(fixed, 1)?;
    let mut one = bench.run(fixed, 1)?;
    while one * shapes.len() as u32 > JOB_BUDGET / 3 && bench.work.bytes / 2 >= MIN_TUNING_BYTES {
        bench = Bench::new(inner, kernel, bench.work.bytes / 2, &shapes, &compiled)?;
        bench.run(fixed, 1)?;
        one = bench.run(fixed, 1)?;
    }
    let repeats =
        u32::try_from(SAMPLE_TIME.as_nanos() / one.max(Duration::from_micros(1)).as_nanos())
            .unwrap_or(MAX_REPEATS)
            .clamp(1, MAX_REPEATS);
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); shapes.len()];
    let mut copies = Vec::new();
    let mut alive: Vec<usize> = (0..shapes.len()).collect();
    for round in 0..ROUNDS {
        let turn = round % alive.len();
        for k in 0..alive.len() {
            let index = alive[(turn + k) % alive.len()];
            samples[index].push(bench.run(index, repeats)?);
        }
        copies.push(bench.device_copy(repeats)?);
        if round + 1 >= MIN_ROUNDS && started.elapsed() > JOB_BUDGET {
            break;
        }
        if round == 0 {
            let best = alive
                .iter()
                .map(|&i| fastest(&samples[i]))
                .min()
                .unwrap_or_default();
            alive.retain(|&i| {
                i == fixed || fastest(&samples[i]).as_secs_f64() <= best.as_secs_f64() * PRUNE_RATIO
            });
        }
    }
    log::debug!(
        "gpu-arena: tuned {} for {} dispatches in {:?} ({} bytes, {repeats} dispatches per sample)",
        kernel.name(),
        class.name(),
        started.elapsed(),
        bench.work.bytes
    );
    let rate =
        |bytes: u64, d: Duration| (bytes * u64::from(repeats)) as f64 / d.as_secs_f64().max(1e-9);
    Ok(Rates {
        shapes: alive
            .into_iter()
            .map(|i| (shapes[i], rate(bench.work.bytes, fastest(&samples[i]))))
            .collect(),
        device_copy: rate(bench.copy_bytes(), fastest(&copies)),
    })
}

/// One tuning workload, ready to time in every shape: its scratch buffers, a bind group and
/// a grid per shape.
struct Bench<'a> {
    inner: &'a ContextInner,
    work: Workload,
    scratch: Scratch,
    pipelines: Vec<&'a wgpu::ComputePipeline>,
    bind_groups: Vec<wgpu::BindGroup>,
    grids: Vec<[u32; 3]>,
    stopwatch: Stopwatch,
}

impl<'a> Bench<'a> {
    fn new(
        inner: &'a ContextInner,
        kernel: Builtin,
        bytes: u64,
        shapes: &[KernelShape],
        compiled: &'a [std::sync::Arc<crate::pipelines::Compiled>],
    ) -> Result<Self> {
        // The device's own limits: the workload is the tuner's, not the configuration's, and
        // the shape it picks holds whatever limits an op splits its grid by.
        let limits = PlanLimits {
            max_binding_bytes: inner.limits().max_storage_buffer_binding_size,
            ..inner.plan_limits()
        };
        let work = workload(kernel, bytes, &limits)?;
        // Buffers and bind groups inside error scopes: a device that refuses them (lost
        // meanwhile, out of memory) fails the job, never reaches the uncaptured-error handler.
        let scopes = ErrorScopes::push(inner.device());
        let scratch = Scratch::new(inner, &work);
        let ranges: Vec<BoundRange> = scratch.src.iter().chain([&scratch.dst]).cloned().collect();
        let params = Some((&scratch.params, 0, scratch.params.size()));
        let bind_groups = compiled
            .iter()
            .map(|c| bind_group(inner.device(), c, &ranges, params))
            .collect();
        let stopwatch = Stopwatch::new(inner);
        scopes
            .pop()
            .map_err(|refused| inner.device_error(TUNING, refused))?;
        let max = u64::from(inner.limits().max_compute_workgroups_per_dimension);
        let grids = shapes
            .iter()
            .map(|shape| grid(work.items.div_ceil(shape.per_group()), max))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                internal("the tuning workload needs more workgroups than the device launches")
            })?;
        Ok(Bench {
            inner,
            work,
            scratch,
            pipelines: compiled.iter().map(|c| &c.pipeline).collect(),
            bind_groups,
            grids,
            stopwatch,
        })
    }

    /// The time of `repeats` dispatches of shape `index` in one submission.
    fn run(&self, index: usize, repeats: u32) -> Result<Duration> {
        self.stopwatch.time(self.inner, TUNING, |encoder| {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            pass.set_pipeline(self.pipelines[index]);
            pass.set_bind_group(0, &self.bind_groups[index], &[]);
            let [x, y, z] = self.grids[index];
            for _ in 0..repeats {
                pass.dispatch_workgroups(x, y, z);
            }
        })
    }

    /// Bytes the device's copy moves: the workload's, in whole words (buffer copies and
    /// clears move words).
    fn copy_bytes(&self) -> u64 {
        self.work.bytes - self.work.bytes % wgpu::COPY_BUFFER_ALIGNMENT
    }

    /// The time of `repeats` device copies (clears for fill) in one submission.
    fn device_copy(&self, repeats: u32) -> Result<Duration> {
        let (bytes, dst) = (self.copy_bytes(), &self.scratch.dst.buffer);
        self.stopwatch.time(self.inner, TUNING, |encoder| {
            for _ in 0..repeats {
                match &self.scratch.src {
                    Some(src) => encoder.copy_buffer_to_buffer(&src.buffer, 0, dst, 0, bytes),
                    None => encoder.clear_buffer(dst, 0, Some(bytes)),
                }
            }
        })
    }
}

/// The fastest sample.
fn fastest(samples: &[Duration]) -> Duration {
    samples.iter().min().copied().unwrap_or_default()
}

/// The box or fill of about `bytes` a tuning job of `kernel` times: as the ops plan it, in
/// the unit and layout that select `kernel` (a contiguous row, or rows of about 1 KiB with gaps
/// between them; word and byte boxes at starts that rule out the wider units).
fn workload(kernel: Builtin, bytes: u64, limits: &PlanLimits) -> Result<Workload> {
    let rows =
        |row_bytes: u64, src_gap: u64, dst_gap: u64, src_offset: u64, dst_offset: u64| BoxCopy {
            outer: vec![OuterDim {
                count: bytes / row_bytes,
                src_stride: row_bytes + src_gap,
                dst_stride: row_bytes + dst_gap,
            }],
            row_bytes,
            src_offset,
            dst_offset,
        };
    let row = |offset: u64| BoxCopy::contiguous(bytes, offset, offset);
    let copy = match kernel {
        Builtin::Fill => {
            let planned = plan_fill(bytes, [1, 2, 3, 4], limits)
                .map_err(|refused| planning_error(TUNING, refused))?;
            let [d] = planned.as_slice() else {
                return Err(internal("the tuning fill does not plan as one dispatch"));
            };
            return Ok(Workload {
                params: bytemuck::bytes_of(&d.params).to_vec(),
                src: None,
                dst: d.dst,
                items: u64::from(d.params.items),
                bytes,
            });
        }
        Builtin::CopyRowsVec4 { contiguous: true } => row(0),
        Builtin::CopyRowsVec4 { contiguous: false } => rows(1024, 16, 32, 0, 0),
        Builtin::CopyRowsWord { contiguous: true } => row(4),
        Builtin::CopyRowsWord { contiguous: false } => rows(1020, 8, 12, 4, 4),
        Builtin::CopyBytes => rows(1021, 6, 8, 1, 3),
    };
    let planned = plan_copy(&copy, limits).map_err(|refused| planning_error(TUNING, refused))?;
    let [d] = planned.as_slice() else {
        return Err(internal("the tuning box does not plan as one dispatch"));
    };
    let planned_kernel = copy_kernel(d.unit, d.params.outer_rank == 0);
    if planned_kernel != kernel {
        return Err(Error::Internal {
            operation: TUNING,
            reason: format!(
                "the tuning box plans as {} rather than {}",
                planned_kernel.name(),
                kernel.name()
            ),
        });
    }
    Ok(Workload {
        params: bytemuck::bytes_of(&d.params).to_vec(),
        src: Some(d.src),
        dst: d.dst,
        items: u64::from(d.params.items),
        bytes: copy.row_bytes * copy.outer.first().map_or(1, |o| o.count),
    })
}

/// The buffers a tuning job binds: made for the job and dropped after it (outside the arena,
/// so its statistics and limits never see them).
struct Scratch {
    params: wgpu::Buffer,
    /// The source range (copies), bound at 1.
    src: Option<BoundRange>,
    /// The destination range, bound after the source.
    dst: BoundRange,
}

impl Scratch {
    fn new(inner: &ContextInner, work: &Workload) -> Self {
        let device = inner.device();
        let storage = |range: &BindRange, binding, label| BoundRange {
            binding,
            buffer: device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                // At least the device copy's bytes from offset 0, and the bound range.
                size: (range.offset + range.size)
                    .max(work.bytes)
                    .next_multiple_of(256),
                usage: wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_SRC
                    | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }),
            offset: range.offset,
            size: range.size,
        };
        let params = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("gpu-arena tuning parameters"),
            size: (work.params.len() as u64).next_multiple_of(16),
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        inner.write_buffer(&params, 0, &work.params);
        Scratch {
            params,
            src: work
                .src
                .as_ref()
                .map(|r| storage(r, 1, "gpu-arena tuning source")),
            dst: storage(
                &work.dst,
                1 + u32::from(work.src.is_some()),
                "gpu-arena tuning destination",
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(workgroup: u32, per_invocation: u32) -> KernelShape {
        KernelShape {
            workgroup,
            per_invocation,
        }
    }

    #[test]
    fn the_fastest_shape_wins_unless_the_fixed_one_is_within_five_percent() {
        let rates = |best: f64| Rates {
            shapes: vec![
                (shape(64, 1), 1.0),
                (KernelShape::FIXED, 2.0),
                (shape(128, 8), best),
            ],
            device_copy: 9.0,
        };
        let clear = choose(Builtin::Fill, SizeClass::Large, &rates(2.2));
        assert_eq!(clear.shape, shape(128, 8));
        assert_eq!(
            (clear.bytes_per_second, clear.fixed_bytes_per_second),
            (2.2, 2.0)
        );
        assert_eq!(clear.device_copy_bytes_per_second, 9.0);
        assert_eq!(clear.origin, TuningOrigin::Measured);
        let noise = choose(Builtin::Fill, SizeClass::Large, &rates(2.05));
        assert_eq!(noise.shape, KernelShape::FIXED);
        assert_eq!(noise.bytes_per_second, 2.0);
        // The byte kernel's fixed shape is its own.
        let bytes = choose(
            Builtin::CopyBytes,
            SizeClass::Small,
            &Rates {
                shapes: vec![(KernelShape::FIXED_BYTES, 1.0), (KernelShape::FIXED, 1.01)],
                device_copy: 5.0,
            },
        );
        assert_eq!(
            (bytes.shape, bytes.fixed_shape),
            (KernelShape::FIXED_BYTES, KernelShape::FIXED_BYTES)
        );
    }

    #[test]
    fn every_kernel_has_a_tuning_workload_that_plans_as_that_kernel() {
        let limits = PlanLimits {
            max_binding_bytes: 128 << 20,
            binding_alignment: 256,
            max_items: crate::ops::geometry::MAX_ITEMS,
        };
        for kernel in Builtin::ALL {
            for class in SizeClass::ALL {
                let work = workload(kernel, class.tuning_bytes(), &limits).unwrap();
                assert!(work.items > 0 && work.bytes > 0, "{}", kernel.name());
                assert!(work.bytes <= class.tuning_bytes());
                let name = (kernel.name(), class.name());
                // Within a row of the class's bytes (rows of about 1 KiB do not divide them).
                assert!(work.bytes + 1024 > class.tuning_bytes(), "{name:?}");
                assert_eq!(work.src.is_none(), kernel == Builtin::Fill);
                let large = workload(kernel, GPU_LARGE_TUNING_BYTES, &limits).unwrap();
                assert!(large.bytes + 1024 > GPU_LARGE_TUNING_BYTES, "{name:?}");
                let small = workload(kernel, MIN_TUNING_BYTES, &limits).unwrap();
                let halves = MIN_TUNING_BYTES / 2..=MIN_TUNING_BYTES;
                assert!(halves.contains(&small.bytes), "{name:?}");
            }
        }
    }

    #[test]
    fn a_shape_is_as_fast_as_its_fastest_round() {
        let ms = Duration::from_millis;
        assert_eq!(fastest(&[ms(5), ms(1), ms(9)]), ms(1));
        assert_eq!(fastest(&[]), Duration::ZERO);
    }
}
