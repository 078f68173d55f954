//! Kernel timestamps: the query sets an encoder writes each dispatch's GPU begin and end into,
//! resolved into a buffer at the end of the same command buffer and copied where the host can
//! map it. Only a context whose timeline is on and whose device has `TIMESTAMP_QUERY` hands
//! the encoder a [`DispatchTimer`]; without one nothing of this runs.
//!
//! Each timed dispatch gets a compute pass of its own whose `timestamp_writes` stamp its
//! beginning and end (wgpu's `TIMESTAMP_QUERY` alone allows that, where writes inside a pass
//! need `TIMESTAMP_QUERY_INSIDE_PASSES`): a pass per dispatch adds no barrier wgpu does not
//! already put between two dispatches of one pass, which it orders all the same.

use crate::pipelines::Compiled;
use std::sync::Arc;

/// Timestamps one query set holds: wgpu's bound on a query set's size.
const QUERIES_PER_SET: u32 = wgpu::QUERY_SET_MAX_QUERIES;
/// Dispatches one query set times: a begin and an end each.
const DISPATCHES_PER_SET: u32 = QUERIES_PER_SET / 2;
/// Bytes of one resolved timestamp (wgpu's `QUERY_SIZE`).
const TIMESTAMP_BYTES: u64 = wgpu::QUERY_SIZE as u64;
/// Bytes one query set resolves into: a multiple of wgpu's 256-byte resolve alignment, so each
/// set resolves at its own aligned offset of one buffer.
const SET_BYTES: u64 = QUERIES_PER_SET as u64 * TIMESTAMP_BYTES;

/// Query sets and buffers for the timestamps of up to [`DispatchTimer::capacity`] dispatches of
/// one command buffer, and the kernels timed in it so far; reused from submission to
/// submission once its timestamps have been read.
pub(crate) struct DispatchTimer {
    sets: Vec<wgpu::QuerySet>,
    /// Where the query sets resolve (`QUERY_RESOLVE | COPY_SRC`).
    resolve: wgpu::Buffer,
    /// Where the host reads them (`MAP_READ | COPY_DST`).
    readback: wgpu::Buffer,
    capacity: u32,
    /// The kernel of each timed dispatch, in order.
    kernels: Vec<Arc<Compiled>>,
    /// The caller's clock (ns) when the timer was handed out for a command buffer, before it
    /// was encoded and submitted: no dispatch of it begins earlier.
    pub(crate) handed_out_ns: u64,
}

impl DispatchTimer {
    /// A timer for up to `capacity` dispatches (at least 1). The device's refusal (out of
    /// memory) reaches the caller's error scope.
    pub(crate) fn new(device: &wgpu::Device, capacity: u32) -> DispatchTimer {
        let capacity = capacity.max(1);
        let sets: Vec<wgpu::QuerySet> = (0..capacity.div_ceil(DISPATCHES_PER_SET))
            .map(|set| {
                let dispatches = (capacity - set * DISPATCHES_PER_SET).min(DISPATCHES_PER_SET);
                device.create_query_set(&wgpu::QuerySetDescriptor {
                    label: Some("gpu-arena kernel timestamps"),
                    ty: wgpu::QueryType::Timestamp,
                    count: dispatches * 2,
                })
            })
            .collect();
        // Sets resolve back to back: set `s` at `s * SET_BYTES`.
        let bytes = u64::from(capacity) * 2 * TIMESTAMP_BYTES;
        let buffer = |label, usage| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: bytes,
                usage,
                mapped_at_creation: false,
            })
        };
        DispatchTimer {
            sets,
            resolve: buffer(
                "gpu-arena kernel timestamps (resolved)",
                wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            ),
            readback: buffer(
                "gpu-arena kernel timestamps (readback)",
                wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            ),
            capacity,
            kernels: Vec::new(),
            handed_out_ns: 0,
        }
    }

    /// Dispatches this timer can time in one command buffer.
    pub(crate) fn capacity(&self) -> u32 {
        self.capacity
    }

    /// The kernels timed since the timer was last reset, in dispatch order.
    pub(crate) fn kernels(&self) -> &[Arc<Compiled>] {
        &self.kernels
    }

    /// The buffer the host maps to read the timestamps ([`DispatchTimer::read`]).
    pub(crate) fn readback(&self) -> &wgpu::Buffer {
        &self.readback
    }

    /// Bytes of [`DispatchTimer::readback`] the timed dispatches fill.
    pub(crate) fn readback_bytes(&self) -> u64 {
        self.kernels.len() as u64 * 2 * TIMESTAMP_BYTES
    }

    /// Forgets the timed kernels, for the timer's next command buffer.
    pub(crate) fn reset(&mut self) {
        self.kernels.clear();
    }

    /// The timestamp writes of the next dispatch, of `kernel`, or `None` when the timer is
    /// full (the dispatch then runs untimed).
    pub(super) fn next_writes(
        &mut self,
        kernel: &Arc<Compiled>,
    ) -> Option<wgpu::ComputePassTimestampWrites<'_>> {
        let n = self.kernels.len() as u32;
        if n >= self.capacity {
            return None;
        }
        self.kernels.push(Arc::clone(kernel));
        let local = (n % DISPATCHES_PER_SET) * 2;
        Some(wgpu::ComputePassTimestampWrites {
            query_set: &self.sets[(n / DISPATCHES_PER_SET) as usize],
            beginning_of_pass_write_index: Some(local),
            end_of_pass_write_index: Some(local + 1),
        })
    }

    /// Resolves the timestamps written so far and copies them to the readback buffer: the
    /// last commands of the command buffer.
    pub(super) fn resolve(&self, encoder: &mut wgpu::CommandEncoder) {
        let used = self.kernels.len() as u32;
        if used == 0 {
            return;
        }
        for (set, query_set) in self.sets.iter().enumerate() {
            let first = set as u32 * DISPATCHES_PER_SET;
            if first >= used {
                break;
            }
            let dispatches = (used - first).min(DISPATCHES_PER_SET);
            encoder.resolve_query_set(
                query_set,
                0..dispatches * 2,
                &self.resolve,
                set as u64 * SET_BYTES,
            );
        }
        encoder.copy_buffer_to_buffer(&self.resolve, 0, &self.readback, 0, self.readback_bytes());
    }

    /// The (begin, end) ticks of each timed dispatch, from the mapped readback bytes (as many
    /// as [`DispatchTimer::readback_bytes`]).
    pub(crate) fn read(&self, mapped: &[u8]) -> Vec<(u64, u64)> {
        mapped
            .chunks_exact(2 * TIMESTAMP_BYTES as usize)
            .take(self.kernels.len())
            .map(|pair| {
                let (begin, end) = pair.split_at(TIMESTAMP_BYTES as usize);
                let tick = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or_default());
                (tick(begin), tick(end))
            })
            .collect()
    }
}
