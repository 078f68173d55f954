//! How the tuner times one submission of its work: by the device's timestamps where it has
//! them ([`TuningClock::Timestamps`]: an empty compute pass stamps before the work, another
//! after it, resolved and read back in the same submission), else by the wall clock from
//! submission to completion. Timestamps leave out what the wall clock adds to every sample
//! (recording, submitting, waking the waiting thread), which on a GPU is as long as a small
//! kernel runs; on lavapipe they are the CPU's clock as its worker runs the commands.

use crate::context::ContextInner;
use crate::error::Result;
use crate::kernel_tuning::TuningClock;
use crate::pipelines::tuning_clock;
use crate::step::timestamp_buffers;
use std::time::{Duration, Instant};

/// Bytes of the two resolved timestamps.
const STAMP_BYTES: u64 = 2 * wgpu::QUERY_SIZE as u64;

/// Times submissions of encoded work (see the module docs).
pub(super) struct Stopwatch {
    stamps: Option<Stamps>,
}

/// The query set of the two stamps and where they resolve and are read.
struct Stamps {
    set: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    readback: wgpu::Buffer,
    period_ns: f64,
}

impl Stopwatch {
    /// A stopwatch for `inner`'s device. Its query set and buffers are made in the caller's
    /// error scopes.
    pub(super) fn new(inner: &ContextInner) -> Self {
        let device = inner.device();
        let stamps = (tuning_clock(device) == TuningClock::Timestamps).then(|| {
            let (resolve, readback) = timestamp_buffers(device, STAMP_BYTES);
            Stamps {
                set: device.create_query_set(&wgpu::QuerySetDescriptor {
                    label: Some("gpu-arena tuning timestamps"),
                    ty: wgpu::QueryType::Timestamp,
                    count: 2,
                }),
                resolve,
                readback,
                period_ns: inner.timestamp_period_ns(),
            }
        });
        Stopwatch { stamps }
    }

    /// The time the work `encode` records takes on the device: its GPU time between the two
    /// stamps, or the wall time of its submission where the device has no timestamps (or
    /// gives two that do not advance).
    pub(super) fn time(
        &self,
        inner: &ContextInner,
        during: &str,
        encode: impl FnOnce(&mut wgpu::CommandEncoder),
    ) -> Result<Duration> {
        let mut encoder = inner.device().create_command_encoder(&Default::default());
        if let Some(stamps) = &self.stamps {
            stamps.stamp(&mut encoder, 0);
        }
        encode(&mut encoder);
        if let Some(stamps) = &self.stamps {
            stamps.stamp(&mut encoder, 1);
            encoder.resolve_query_set(&stamps.set, 0..2, &stamps.resolve, 0);
            encoder.copy_buffer_to_buffer(&stamps.resolve, 0, &stamps.readback, 0, STAMP_BYTES);
        }
        let started = Instant::now();
        let readback = self.stamps.as_ref().map(|stamps| &stamps.readback);
        let bytes = inner.run_measurement(encoder, readback, during)?;
        let wall = started.elapsed();
        let Some(stamps) = &self.stamps else {
            return Ok(wall);
        };
        let ticks: [u64; 2] = match bytes.get(..STAMP_BYTES as usize) {
            Some(bytes) => bytemuck::pod_read_unaligned(bytes),
            None => [0; 2],
        };
        Ok(match ticks[1].checked_sub(ticks[0]) {
            Some(elapsed) if elapsed > 0 => {
                Duration::from_nanos((elapsed as f64 * stamps.period_ns) as u64)
            }
            _ => wall,
        })
    }
}

impl Stamps {
    /// An empty compute pass that writes stamp `index` (the pass's timestamp writes are what
    /// `TIMESTAMP_QUERY` allows outside passes of work).
    fn stamp(&self, encoder: &mut wgpu::CommandEncoder, index: u32) {
        encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("gpu-arena tuning timestamp"),
            timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                query_set: &self.set,
                beginning_of_pass_write_index: Some(index),
                end_of_pass_write_index: None,
            }),
        });
    }
}
