//! The context's kernel timing: which submissions carry GPU timestamps, and reading them back
//! onto the timeline once their work has completed.
//!
//! On only when the timeline is on and the device has `TIMESTAMP_QUERY` (requested at device
//! creation where the adapter has it, `context.rs`, with `TIMESTAMP_QUERY_INSIDE_PASSES` where
//! it has that too): otherwise no query set is made, no command is added and every hook is one
//! branch on an `Option`. On, each recorder that submits dispatches (the gathered single ops, a
//! user's [`Sequence`](crate::Sequence), a captured step's run: the one encoder,
//! `step/encode.rs`) takes a [`DispatchTimer`] here, encodes with it (each dispatch stamped at
//! its begin and end, inside shared passes or by a pass each, see `step/timestamps.rs`; the
//! stamps resolved and copied at the end of the same command buffer), and hands it back with
//! the submission's id.
//! The readback buffer's mapping is requested at once: wgpu completes it when the submission
//! has, in whichever poll sees that (every wait, every submit polls), so the submission's
//! critical path gains only the resolve and copy commands. Completed readbacks are read when
//! the next timed submission takes a timer, and when the timeline or the table is read.
//!
//! Clocks: GPU timestamps count ticks of the device's own clock (`queue.get_timestamp_period`
//! ns each) from an origin of its own. A dispatch's begin is placed on the timeline's clock by
//! an offset: the largest (CPU time when the command buffer's encoding began − GPU time of its
//! first begin) seen so far, the smallest offset under which no work starts before it was
//! encoded. Work that starts at once on an idle GPU sets it; so begins are placed late by at
//! most the encoding and submission of the command buffer that set it plus how late the GPU
//! started it (microseconds for small command buffers), and never in the future; durations are
//! the GPU's own. Events already recorded keep the offset of their time. (The CPU time after
//! `queue.submit` would not do: lavapipe may start the work before `submit` returns.)
//!
//! Locks: the timing lock is a leaf: taken under the gathered lock or the kernel lock, it
//! takes none but the timeline's own. The mapping callback takes no lock (it runs inside
//! `device.poll`, which may be called with the timing lock held).

use crate::config::ArenaConfig;
use crate::lock::{rank, Mutex, MutexGuard};
use crate::step::{DispatchTimer, Step};
use crate::submission::SubmissionId;
use crate::trace::timeline::{Record, Timeline};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

/// Command buffers whose timestamps may wait to be read at once; a loop that runs this far
/// ahead of the GPU submits its further work untimed until some are read. Bounds the query
/// sets and buffers timing holds (`Context::kernel_times` documents the number).
const MAX_PENDING_READBACKS: usize = 256;

/// Timers kept for reuse once read.
const MAX_POOLED_TIMERS: usize = 16;

/// The smallest timer made: a gathered batch's worth of dispatches, so the timers of single
/// ops all fit any batch.
const MIN_TIMER_DISPATCHES: u32 = crate::step::MAX_GATHERED_OPS as u32;

/// Where a readback's mapping stands (set by its callback).
const MAP_WAITING: u8 = 0;
const MAP_DONE: u8 = 1;
const MAP_FAILED: u8 = 2;

/// One submitted command buffer's timestamps, until they are read.
struct Readback {
    timer: DispatchTimer,
    submission: SubmissionId,
    mapped: Arc<AtomicU8>,
}

#[derive(Default)]
struct TimingState {
    pool: Vec<DispatchTimer>,
    pending: VecDeque<Readback>,
    /// CPU ns − GPU ns (see the module docs); `None` before the first readback.
    offset_ns: Option<i128>,
}

/// Kernel timing of a context (see the module docs).
pub(crate) struct KernelTiming {
    /// The device the timers' query sets and buffers are made on.
    device: wgpu::Device,
    /// The context's timeline, where each dispatch's times go (timing is on only with it).
    timeline: Arc<Timeline>,
    /// Nanoseconds per timestamp tick.
    period_ns: f64,
    /// The device has `TIMESTAMP_QUERY_INSIDE_PASSES`: dispatches keep sharing passes.
    inside_passes: bool,
    /// Testing ([`ArenaConfig::force_pass_per_timed_dispatch`]): a pass per timed dispatch even
    /// where stamps inside passes are possible.
    force_pass_per_dispatch: bool,
    state: Mutex<TimingState>,
}

impl KernelTiming {
    /// Timing for a context whose timeline is on, on a device with `TIMESTAMP_QUERY`; `None`
    /// otherwise.
    pub(crate) fn new(
        timeline: Option<&Arc<Timeline>>,
        config: &ArenaConfig,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
    ) -> Option<Self> {
        let timeline = timeline?;
        device
            .features()
            .contains(wgpu::Features::TIMESTAMP_QUERY)
            .then(|| KernelTiming {
                device: device.clone(),
                timeline: Arc::clone(timeline),
                period_ns: f64::from(queue.get_timestamp_period()),
                inside_passes: device
                    .features()
                    .contains(wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES),
                force_pass_per_dispatch: config.force_pass_per_timed_dispatch,
                state: Mutex::new(rank::KERNEL_TIMING, TimingState::default()),
            })
    }

    #[cfg_attr(debug_assertions, track_caller)]
    fn lock(&self) -> MutexGuard<'_, TimingState> {
        // A panic while holding the lock leaves at worst timestamps that are never read.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A timer for the dispatches of `steps`, when kernel timing is on and they have any;
    /// `None` (the work runs untimed) otherwise and while [`MAX_PENDING_READBACKS`] command
    /// buffers' timestamps are unread. Reads completed timestamps first.
    pub(crate) fn dispatch_timer(&self, steps: &[Step]) -> Option<DispatchTimer> {
        let dispatches = steps
            .iter()
            .filter(|s| matches!(s, Step::Dispatch { .. }))
            .count();
        if dispatches == 0 {
            return None;
        }
        let dispatches = u32::try_from(dispatches).unwrap_or(u32::MAX);
        let mut state = self.lock();
        self.read_completed(&mut state);
        if state.pending.len() >= MAX_PENDING_READBACKS {
            return None;
        }
        let now_ns = self.timeline.now_ns();
        let inside_passes = self.inside_passes && !self.force_pass_per_dispatch;
        if let Some(at) = state.pool.iter().position(|t| t.capacity() >= dispatches) {
            let mut timer = state.pool.swap_remove(at);
            timer.handed_out_ns = now_ns;
            timer.recorded_ns.clear();
            timer.inside_passes = inside_passes;
            return Some(timer);
        }
        drop(state);
        let capacity = dispatches
            .checked_next_power_of_two()
            .unwrap_or(dispatches)
            .max(MIN_TIMER_DISPATCHES);
        let scopes = crate::pipelines::ErrorScopes::push(&self.device);
        let mut timer = DispatchTimer::new(&self.device, capacity);
        timer.handed_out_ns = now_ns;
        timer.inside_passes = inside_passes;
        match scopes.pop() {
            Ok(()) => Some(timer),
            Err(reason) => {
                // Timing is best effort: the work runs untimed.
                log::warn!("gpu-arena: no kernel timestamps for a submission: {reason}");
                None
            }
        }
    }

    /// Takes back the timer of submission `id` (`submitted`: the device accepted it) and asks
    /// for its timestamps to be mapped once the work completes. A refused submission's timer
    /// goes back to the pool unread.
    pub(crate) fn timed_submission(
        &self,
        timer: Option<DispatchTimer>,
        id: SubmissionId,
        submitted: bool,
    ) {
        let Some(mut timer) = timer else {
            return;
        };
        if !submitted || timer.kernels().is_empty() {
            timer.reset();
            let mut state = self.lock();
            if state.pool.len() < MAX_POOLED_TIMERS {
                state.pool.push(timer);
            }
            return;
        }
        let mapped = Arc::new(AtomicU8::new(MAP_WAITING));
        let done = Arc::clone(&mapped);
        // In error scopes of our own: on a device the app destroyed the map is a validation
        // error, which must not reach the device's handler; the timestamps are then lost.
        let scopes = crate::pipelines::ErrorScopes::push(&self.device);
        timer.readback().slice(..timer.readback_bytes()).map_async(
            wgpu::MapMode::Read,
            move |result| {
                done.store(
                    if result.is_ok() { MAP_DONE } else { MAP_FAILED },
                    Ordering::Release,
                );
            },
        );
        if scopes.pop().is_err() {
            mapped.store(MAP_FAILED, Ordering::Release);
        }
        self.lock().pending.push_back(Readback {
            timer,
            submission: id,
            mapped,
        });
    }

    /// Reads the timestamps of every completed timed submission onto the timeline, without
    /// waiting (a non-blocking poll lets wgpu finish mappings of work that has completed).
    pub(crate) fn collect(&self) {
        let _ = self.device.poll(wgpu::PollType::Poll);
        let mut state = self.lock();
        self.read_completed(&mut state);
    }

    /// Records the timestamps of the readbacks whose mapping has completed, oldest first, and
    /// pools their timers.
    fn read_completed(&self, state: &mut TimingState) {
        while let Some(front) = state.pending.front() {
            let status = front.mapped.load(Ordering::Acquire);
            if status == MAP_WAITING {
                // Mappings complete in submission order: later ones wait too.
                break;
            }
            let Some(Readback {
                mut timer,
                submission,
                ..
            }) = state.pending.pop_front()
            else {
                break;
            };
            if status == MAP_DONE {
                // In error scopes of our own, as the map: the app may have destroyed the
                // device (and with it the buffer) since; the timestamps are then lost.
                let scopes = crate::pipelines::ErrorScopes::push(&self.device);
                let slice = timer.readback().slice(..timer.readback_bytes());
                let ticks = slice.get_mapped_range().map(|mapped| timer.read(&mapped));
                timer.readback().unmap();
                let refused = scopes.pop().is_err();
                if let (Ok(ticks), false) = (ticks, refused) {
                    self.record_ticks(state, &timer, &ticks, submission);
                    timer.reset();
                    if state.pool.len() < MAX_POOLED_TIMERS {
                        state.pool.push(timer);
                    }
                }
            }
            // A failed mapping (a lost device) drops its timer.
        }
    }

    /// Puts one command buffer's (begin, end) ticks on the timeline.
    fn record_ticks(
        &self,
        state: &mut TimingState,
        timer: &DispatchTimer,
        ticks: &[(u64, u64)],
        submission: SubmissionId,
    ) {
        let to_ns = |tick: u64| (tick as f64 * self.period_ns) as i128;
        // Stamps of 0 were never written (a device that skips them); an end before its begin
        // is a clock that wrapped. Neither is a duration.
        let valid = |&(begin, end): &(u64, u64)| begin != 0 && end >= begin;
        if let Some(first) = ticks.iter().filter(|t| valid(t)).map(|&(b, _)| b).min() {
            let offset = i128::from(timer.handed_out_ns) - to_ns(first);
            state.offset_ns = Some(state.offset_ns.map_or(offset, |o| o.max(offset)));
        }
        let offset = state.offset_ns.unwrap_or(0);
        for (i, (kernel, tick)) in timer.kernels().iter().zip(ticks).enumerate() {
            if !valid(tick) {
                continue;
            }
            let (begin, end) = *tick;
            let begin_ns = (to_ns(begin) + offset).clamp(0, i128::from(u64::MAX)) as u64;
            let duration_ns = ((end - begin) as f64 * self.period_ns) as u64;
            self.timeline.record(Record::Kernel {
                name: &kernel.name,
                submission,
                recorded_ns: timer.recorded_at(i),
                begin_ns,
                duration_ns,
            });
        }
    }
}
