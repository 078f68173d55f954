//! `Context::host_link_bandwidth`: what offload and prefetch move per second on this device,
//! measured once (the checkpointing planner's cost model needs it) and kept with the tuned
//! kernel choices: for every context of the process on the device and, with
//! `GPU_ARENA_CACHE_DIR`, beside the pipeline cache for the next process.

use crate::config::TransferDirection::{DeviceToHost, HostToDevice};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::memory_kind::MemoryKind;
use crate::transfer::check_guard_ahead;
use std::time::{Duration, Instant};

/// Bytes one move of the measurement carries: large enough that a move's fixed cost is small
/// beside its bytes, small enough for any pinned-host limit worth using.
const MEASURE_BYTES: usize = 16 << 20;

/// Round trips (offload, then prefetch) timed; the fastest counts.
const ROUND_TRIPS: usize = 8;

impl Context {
    /// Bytes per second the host link moves, offload and prefetch together
    /// ([`Context::offload`], [`Context::prefetch`] of a 16 MiB array, each round trip
    /// followed by a synchronize; the fastest of 8): what
    /// [`StepCosts::host_link_bytes_per_second`](crate::remat::StepCosts) asks for. Measured
    /// at the first call on a device and kept as tuned kernel choices are (for every context of
    /// the process on the same adapter, whatever its configuration, and with `GPU_ARENA_CACHE_DIR` in the tuning file beside the
    /// pipeline cache), so later calls, and later processes, return at once;
    /// [`Context::kernel_tuning`] shows it. One thread measures at a time in the process: a
    /// call made while another measures waits for it and returns its figure. A call made
    /// while a user's kernel is tuned ([`Context::tune_kernel`], inside its `run` too)
    /// measures beside it.
    ///
    /// The measurement's moves are the program's own explicit transfers: the transfer guard
    /// sees them and [`Context::transfer_stats`] counts them (8 of each direction, once per
    /// device and process, or none where the figure is known already).
    ///
    /// Errors, only when it measures (a figure already known is returned at once, under any
    /// transfer guard and during a capture, since nothing moves): those of `offload` and
    /// `prefetch` (the transfer guard's refusal of explicit transfers in either direction,
    /// checked for both before anything moves; out of memory of either kind; a lost device),
    /// and [`Error::EagerDuringCapture`] on the thread that holds a capture of this context
    /// open in its default mode ([`CaptureMode::Relaxed`](crate::CaptureMode) lets it
    /// measure); nothing is kept then.
    pub fn host_link_bandwidth(&self) -> Result<f64> {
        const OPERATION: &str = "host_link_bandwidth";
        let adapter = self.inner.adapter_info();
        let dir: Option<std::path::PathBuf> =
            self.inner.kernels().lock().cache_dir().map(Into::into);
        if let Some(rate) = crate::pipelines::host_link(adapter, dir.as_deref()) {
            return Ok(rate);
        }
        let _job = crate::compute::measuring_job(crate::compute::Measure::HostLink);
        if let Some(rate) = crate::pipelines::host_link(adapter, dir.as_deref()) {
            return Ok(rate);
        }
        self.check_eager_op(OPERATION)?;
        for direction in [DeviceToHost, HostToDevice] {
            let bytes = MEASURE_BYTES as u64;
            check_guard_ahead(
                &self.inner.guard_defaults(),
                direction,
                bytes,
                OPERATION,
                true,
            )?;
        }
        let mut array = self.zeros_in::<u32>(MemoryKind::Device, &[MEASURE_BYTES / 4])?;
        self.synchronize()?;
        let mut fastest = Duration::MAX;
        for _ in 0..ROUND_TRIPS {
            let started = Instant::now();
            let host = self.offload(array).map_err(Error::from)?;
            array = self.prefetch(host).map_err(Error::from)?;
            self.synchronize()?;
            fastest = fastest.min(started.elapsed());
        }
        let rate = (2 * MEASURE_BYTES) as f64 / fastest.as_secs_f64().max(1e-9);
        crate::pipelines::record_host_link(adapter, dir.as_deref(), rate);
        Ok(rate)
    }
}
