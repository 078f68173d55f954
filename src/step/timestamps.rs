//! Kernel timestamps: the query sets an encoder writes each dispatch's GPU begin and end into,
//! resolved into a buffer at the end of the same command buffer and copied where the host can
//! map it. Only a context whose timeline is on and whose device has `TIMESTAMP_QUERY` hands
//! the encoder a [`DispatchTimer`]; without one nothing of this runs.
//!
//! Where the device has `TIMESTAMP_QUERY_INSIDE_PASSES`, consecutive dispatches keep sharing
//! one compute pass, with a timestamp before the first and after each: a dispatch runs from
//! the stamp before it to the stamp after it (on a GPU that runs them in order, as wgpu's
//! barriers between dependent dispatches make it), so a run of `n` dispatches costs `n + 1`
//! stamps. With `TIMESTAMP_QUERY` alone, each timed dispatch gets a pass of its own whose
//! `timestamp_writes` stamp its beginning and end: two stamps each, and a pass each (which
//! adds no barrier wgpu does not already put between two dispatches of one pass).

use crate::pipelines::Compiled;
use std::sync::Arc;

/// Timestamps one query set holds: wgpu's bound on a query set's size.
const QUERIES_PER_SET: u32 = wgpu::QUERY_SET_MAX_QUERIES;
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
    /// Stamps written inside passes (the device has `TIMESTAMP_QUERY_INSIDE_PASSES`), else
    /// by each pass; set by whoever hands the timer out.
    pub(crate) inside_passes: bool,
    /// Stamps used so far (their indices run over the sets, [`QUERIES_PER_SET`] each).
    queries: u32,
    /// The kernel of each timed dispatch, in order, with the stamps of its begin and end.
    kernels: Vec<Arc<Compiled>>,
    spans: Vec<(u32, u32)>,
    /// The caller's clock (ns) when the timer was handed out for a command buffer, before it
    /// was encoded and submitted: no dispatch of it begins earlier.
    pub(crate) handed_out_ns: u64,
    /// The caller's clock (ns) when each dispatch was recorded, in dispatch order, where that
    /// was before the timer was handed out (gathered single ops); a dispatch past its end was
    /// recorded at the hand-out. A timeline cleared after a dispatch was recorded drops its
    /// time.
    pub(crate) recorded_ns: Vec<u64>,
}

/// The buffer `bytes` of resolved timestamps go to (`QUERY_RESOLVE | COPY_SRC`) and the one
/// the host maps to read them (`MAP_READ | COPY_DST`).
pub(crate) fn timestamp_buffers(device: &wgpu::Device, bytes: u64) -> (wgpu::Buffer, wgpu::Buffer) {
    let buffer = |label, usage| {
        device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes,
            usage,
            mapped_at_creation: false,
        })
    };
    (
        buffer(
            "gpu-arena timestamps (resolved)",
            wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
        ),
        buffer(
            "gpu-arena timestamps (readback)",
            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        ),
    )
}

impl DispatchTimer {
    /// A timer for up to `capacity` dispatches (at least 1). The device's refusal (out of
    /// memory) reaches the caller's error scope.
    pub(crate) fn new(device: &wgpu::Device, capacity: u32) -> DispatchTimer {
        let capacity = capacity.clamp(1, u32::MAX / 2);
        // Two stamps per dispatch at most (a pass of one dispatch takes two).
        let queries = capacity * 2;
        let sets: Vec<wgpu::QuerySet> = (0..queries.div_ceil(QUERIES_PER_SET))
            .map(|set| {
                device.create_query_set(&wgpu::QuerySetDescriptor {
                    label: Some("gpu-arena kernel timestamps"),
                    ty: wgpu::QueryType::Timestamp,
                    count: (queries - set * QUERIES_PER_SET).min(QUERIES_PER_SET),
                })
            })
            .collect();
        // Sets resolve back to back: set `s` at `s * SET_BYTES`.
        let (resolve, readback) = timestamp_buffers(device, u64::from(queries) * TIMESTAMP_BYTES);
        DispatchTimer {
            sets,
            resolve,
            readback,
            capacity,
            inside_passes: false,
            queries: 0,
            kernels: Vec::new(),
            spans: Vec::new(),
            handed_out_ns: 0,
            recorded_ns: Vec::new(),
        }
    }

    /// Dispatches this timer can time in one command buffer.
    pub(crate) fn capacity(&self) -> u32 {
        self.capacity
    }

    /// When the `i`th timed dispatch was recorded ([`DispatchTimer::recorded_ns`]).
    pub(crate) fn recorded_at(&self, i: usize) -> u64 {
        self.recorded_ns
            .get(i)
            .copied()
            .unwrap_or(self.handed_out_ns)
    }

    /// The kernels timed since the timer was last reset, in dispatch order.
    pub(crate) fn kernels(&self) -> &[Arc<Compiled>] {
        &self.kernels
    }

    /// The buffer the host maps to read the timestamps ([`DispatchTimer::read`]).
    pub(crate) fn readback(&self) -> &wgpu::Buffer {
        &self.readback
    }

    /// Bytes of [`DispatchTimer::readback`] the stamps used fill.
    pub(crate) fn readback_bytes(&self) -> u64 {
        u64::from(self.queries) * TIMESTAMP_BYTES
    }

    /// Forgets the timed kernels and the stamps used, for the timer's next command buffer.
    pub(crate) fn reset(&mut self) {
        self.kernels.clear();
        self.spans.clear();
        self.queries = 0;
    }

    /// The next `n` stamps' first index, or `None` when fewer are left.
    fn take_stamps(&mut self, n: u32) -> Option<u32> {
        let first = self.queries;
        (first + n <= self.capacity * 2).then(|| {
            self.queries += n;
            first
        })
    }

    /// A stamp's query set and its index there.
    fn query(&self, stamp: u32) -> (&wgpu::QuerySet, u32) {
        (
            &self.sets[(stamp / QUERIES_PER_SET) as usize],
            stamp % QUERIES_PER_SET,
        )
    }

    /// Pass-per-dispatch timing: the timestamp writes of a pass holding one dispatch, of
    /// `kernel`, or `None` when the timer is full (the dispatch then runs untimed).
    pub(super) fn pass_writes(
        &mut self,
        kernel: &Arc<Compiled>,
    ) -> Option<wgpu::ComputePassTimestampWrites<'_>> {
        let first = self.take_stamps(2)?;
        self.kernels.push(Arc::clone(kernel));
        self.spans.push((first, first + 1));
        // Stamps are taken in pairs from 0 in this mode and a set holds an even number, so
        // both stamps are in one set.
        let (query_set, begin) = self.query(first);
        Some(wgpu::ComputePassTimestampWrites {
            query_set,
            beginning_of_pass_write_index: Some(begin),
            end_of_pass_write_index: Some(begin + 1),
        })
    }

    /// Inside-pass timing: writes the next stamp into `pass`; its index, or `None` when the
    /// timer is full.
    pub(super) fn stamp(&mut self, pass: &mut wgpu::ComputePass<'_>) -> Option<u32> {
        let stamp = self.take_stamps(1)?;
        let (set, index) = self.query(stamp);
        pass.write_timestamp(set, index);
        Some(stamp)
    }

    /// Inside-pass timing: a dispatch of `kernel` ran between stamps `begin` and `end`.
    pub(super) fn timed(&mut self, kernel: &Arc<Compiled>, begin: u32, end: u32) {
        self.kernels.push(Arc::clone(kernel));
        self.spans.push((begin, end));
    }

    /// Resolves the stamps written so far and copies them to the readback buffer: the last
    /// commands of the command buffer.
    pub(super) fn resolve(&self, encoder: &mut wgpu::CommandEncoder) {
        if self.queries == 0 {
            return;
        }
        for (set, query_set) in self.sets.iter().enumerate() {
            let first = set as u32 * QUERIES_PER_SET;
            if first >= self.queries {
                break;
            }
            let count = (self.queries - first).min(QUERIES_PER_SET);
            encoder.resolve_query_set(query_set, 0..count, &self.resolve, set as u64 * SET_BYTES);
        }
        encoder.copy_buffer_to_buffer(&self.resolve, 0, &self.readback, 0, self.readback_bytes());
    }

    /// The (begin, end) ticks of each timed dispatch, from the mapped readback bytes (as many
    /// as [`DispatchTimer::readback_bytes`]).
    pub(crate) fn read(&self, mapped: &[u8]) -> Vec<(u64, u64)> {
        let tick = |stamp: u32| {
            let at = stamp as usize * TIMESTAMP_BYTES as usize;
            mapped
                .get(at..at + TIMESTAMP_BYTES as usize)
                .and_then(|b| b.try_into().ok())
                .map_or(0, u64::from_le_bytes)
        };
        self.spans
            .iter()
            .map(|&(begin, end)| (tick(begin), tick(end)))
            .collect()
    }
}
