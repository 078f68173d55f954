//! Single ops gathered into the context's own submission: `ctx.launch(..).run()` and the
//! library's ops (`copy`, `dynamic_slice`, `fill`, `zeros`, ...) are recorded into a batch of up
//! to [`MAX_GATHERED_OPS`](crate::step::MAX_GATHERED_OPS) and submitted together, as CubeCL does, so that a loop of small ops
//! costs what a [`Sequence`](crate::Sequence) of them costs rather than a submission each.
//!
//! Program order holds because the batch is always the next submission: the ops reserve its id
//! (recorded on their arrays at once, as any submission records its arrays), and every
//! submission of the context submits the batch first, under the lock that keeps the batch and
//! the ids together. So nothing submitted later overtakes a gathered op, and anything that waits
//! for an array's last use (host reads, host writes, the reuse of a dropped array's memory,
//! `synchronize`) finds the batch's id and submits the batch before it waits.
//!
//! Small uploads join the batch too (a single `device_put` or a single op's host operand on the
//! staging path, up to [`MAX_GATHERED_UPLOAD_BYTES`](crate::transfer::MAX_GATHERED_UPLOAD_BYTES)):
//! their bytes go into staging the batch owns (`transfer/gathered_staging.rs`) when the op
//! joins, and a copy command of the batch writes them, in call order with the ops around them.
//!
//! This file also decides which submissions carry the memory dependency to host reads
//! ([`HostRead`], [`ContextInner::host_visible_through`]): every submission goes through it.
//!
//! Locks: the gathered lock is taken before the memory lock (the batch's staging makes its
//! buffers from the arena's regions under it), never after; nothing that holds the memory lock
//! gathers, submits or waits.
//!
//! Which call reports a refusal: each op's own, for everything the CPU can check (arguments,
//! limits, pending state) and for the device's refusal of its bindings, which are made when the
//! op is called. What the device can still refuse when the batch is submitted (a lost device, an
//! internal error) is reported by the next call that waits for GPU work or flushes
//! (`synchronize`, `flush`, a host read): then none of the batch ran.

use super::gathered_batch::{GatheredBatch, HostRead};
use super::ContextInner;
use crate::error::{Error, Result};
use crate::host_link::gathered_staging::GatheredStaging;
use crate::host_link::staged_copy::UploadItem;
use crate::pipelines::{DeviceRefusal, ErrorScopes};
use crate::step::{encode_steps, BufferCopy, Step};
use crate::submission::SubmissionId;

impl ContextInner {
    #[cfg_attr(debug_assertions, track_caller)]
    fn lock_gathered(&self) -> crate::lock::MutexGuard<'_, GatheredBatch> {
        // A panic while holding the lock leaves at worst a batch that is submitted later.
        self.gathered.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Gathers one single op's `steps`: makes their bind groups now (a refusal is this op's
    /// error, and nothing is gathered), runs `before` with the submission the op will be part
    /// of (its arrays record it there), copies the host bytes of its [`Step::Upload`]s into
    /// the batch's staging (each becomes a copy out of it), and submits the batch once it
    /// holds [`MAX_GATHERED_OPS`](crate::step::MAX_GATHERED_OPS) ops or its staging is full
    /// ([`GATHERED_STAGING_BYTES`](crate::transfer::GATHERED_STAGING_BYTES)). Uploads alone
    /// (a small `device_put`) do not count as ops: the staging cap bounds them. Returns the
    /// submission's id.
    pub(crate) fn gather(
        &self,
        mut steps: Vec<Step>,
        before: impl FnOnce(SubmissionId),
    ) -> Result<SubmissionId> {
        let during = "recording a single op";
        self.check_device(during)?;
        let alignment = u64::from(self.limits.min_uniform_buffer_offset_alignment);
        let staged: u64 = steps.iter().map(Step::staged_bytes).sum();
        if staged > GatheredStaging::capacity(self) {
            // Callers stage only uploads of a quarter of the capacity at most, and an op has
            // at most two host operands.
            return Err(Error::Device {
                during: during.into(),
                reason: format!(
                    "the op's host operands ({staged} bytes) exceed the gathered batch's staging"
                ),
            });
        }
        let is_op = steps.iter().any(|s| !matches!(s, Step::Upload { .. }));
        let blocks: Vec<&[u8]> = steps.iter().filter_map(Step::uniform_params).collect();
        let mut gathered = self.lock_gathered();
        if !gathered.staging.has_room(self, staged) {
            // The batch's staging is full: the ops gathered so far go first.
            self.submit_gathered(&mut gathered);
        }
        // The parameter buffer (when it grows) and the bind groups are this op's: their
        // refusals are its error.
        let scopes = ErrorScopes::push(&self.device);
        let mut slots = gathered
            .steps
            .place_params(&self.device, &blocks, alignment);
        if slots.is_none() {
            // No room beside the ops gathered so far: they go first.
            self.submit_gathered(&mut gathered);
            slots = gathered
                .steps
                .place_params(&self.device, &blocks, alignment);
        }
        let Some(slots) = slots else {
            let _ = scopes.pop();
            return Err(Error::Device {
                during: during.into(),
                reason: "an empty batch found no parameter slot for the op".into(),
            });
        };
        drop(blocks);
        let mut slots = slots.iter();
        for step in &mut steps {
            let slot = || slots.next().map(|(buffer, at)| (buffer, *at));
            if step.make_bind_group(&self.device, slot) {
                self.count_bind_groups(1);
            }
        }
        scopes
            .pop()
            .map_err(|reason| self.device_error(during, reason))?;
        for step in &mut steps {
            if let Step::Upload {
                data,
                dst,
                dst_offset,
                size,
            } = step
            {
                let staged = gathered
                    .staging
                    .stage(self, self.host_link(), data, *size, |id| {
                        self.wait_for_submitted(id)
                    })?;
                // Staged: a copy out of the batch's staging; else the batch holds the bytes
                // and writes them when it is submitted.
                if let Some((src, src_offset)) = staged {
                    *step = Step::Copy(BufferCopy {
                        src,
                        src_offset,
                        dst: dst.clone(),
                        dst_offset: *dst_offset,
                        size: *size,
                    });
                }
            }
        }
        if gathered.steps.is_empty() {
            gathered.id = self.submissions.next_id();
        }
        let id = gathered.id;
        before(id);
        for step in &steps {
            if let Step::Dispatch { kernel, .. } = step {
                self.record(crate::trace::timeline::Record::Dispatch {
                    name: &kernel.name,
                    submission: id,
                });
                if let Some(timeline) = self.timeline() {
                    gathered.dispatch_ns.push(timeline.now_ns());
                }
            }
        }
        gathered.steps.push(steps, is_op);
        if gathered.steps.is_full() || !gathered.staging.has_room(self, 1) {
            self.submit_gathered(&mut gathered);
        }
        Ok(id)
    }

    /// Submits the gathered ops, if any, as their reserved submission. Called with the lock
    /// held by every submission of the context, first. A refusal is kept for the next call that
    /// reports it ([`ContextInner::flush`]); the id is used all the same (an empty
    /// submission), so that waiting for it ends.
    pub(crate) fn submit_gathered(&self, gathered: &mut GatheredBatch) {
        self.submit_gathered_for(gathered, HostRead::Later);
    }

    /// [`ContextInner::submit_gathered`], ending with the memory dependency to host reads
    /// when `host_read` says one follows.
    fn submit_gathered_for(&self, gathered: &mut GatheredBatch, host_read: HostRead) {
        if gathered.steps.is_empty() {
            return;
        }
        let (steps, params) = gathered.steps.take();
        // Uploads the batch holds (wgpu's staging) are written when it is submitted; they
        // land first, which the arrays they fill, made for them, allow.
        let (uploads, steps): (Vec<Step>, Vec<Step>) =
            (steps.into_iter()).partition(|step| matches!(step, Step::Upload { .. }));
        let alignment = u64::from(self.limits.min_uniform_buffer_offset_alignment);
        let mut timer = self.dispatch_timer(&steps);
        let recorded = std::mem::take(&mut gathered.dispatch_ns);
        if let Some(timer) = timer.as_mut() {
            timer.recorded_ns = recorded;
        }
        // Every dispatch has its bind group, so no parameter buffer of the encoder's own.
        let mut unused = None;
        let commands =
            match encode_steps(&self.device, alignment, &mut unused, &steps, timer.as_mut()) {
                Ok((commands, _)) => {
                    if let Some((buffer, bytes)) = params {
                        self.queue.write_buffer(&buffer, 0, &bytes);
                    }
                    Some(commands)
                }
                Err(reason) => {
                    self.refuse_gathered(gathered, steps.len(), reason);
                    None
                }
            };
        let encoded = commands.is_some();
        let scopes = ErrorScopes::push(&self.device);
        for upload in &uploads {
            if let Step::Upload {
                data,
                dst,
                dst_offset,
                size,
            } = upload
            {
                let item = UploadItem {
                    data,
                    buffer: dst,
                    offset: *dst_offset,
                    span: *size,
                };
                crate::host_link::wgpu_copy::queue_writes(self, &[item]);
            }
        }
        let id = self.submit_to_queue(gathered, commands, |_| {}, host_read);
        gathered.staging.retire(id);
        if id != gathered.id {
            // Every submission takes the gathered lock first, so this cannot happen; were it
            // to, waits for the reserved id would wait for a later submission (still safe).
            log::error!(
                "gpu-arena: gathered ops reserved submission {} but went out as {}",
                gathered.id.0,
                id.0
            );
        }
        let popped = scopes.pop();
        self.timed_submission(timer, id, encoded && popped.is_ok());
        if let Err(reason) = popped {
            self.refuse_gathered(gathered, steps.len(), reason);
            // The batch's arrays carry the refused id.
            self.submit_empty_after_refusal(gathered);
        }
    }

    /// An empty submission after one that wgpu refused, for [`ContextInner::submit_gathered`]
    /// (the gathered lock held) and [`ContextInner::after_refused_submission`]. wgpu numbers a
    /// submission before it validates it and signals nothing for a refused one, while the
    /// refused one's id may already be on arrays (uses are recorded before the queue gets the
    /// work): a read of such an array then waited for an index wgpu refuses to wait for
    /// ("Tried to wait using a submission index that has not been returned by a successful
    /// submission") and failed. After the empty submission that wait ends at once. (Khronos
    /// validation can still report the skipped value as `UNASSIGNED-VkSemaphore-state-timeout`,
    /// "most likely a validation bug", after 10 s: seen under load only.) Nothing on a lost
    /// device (every later wait reports it), and an empty submission the device refuses all
    /// the same is not reported: the refusal before it is.
    /// It carries the memory dependency to host reads, which the refused one may have
    /// been meant to carry.
    fn submit_empty_after_refusal(&self, gathered: &mut GatheredBatch) {
        if self.check_device("").is_err() {
            return;
        }
        let scopes = ErrorScopes::push(&self.device);
        self.submit_to_queue(gathered, std::iter::empty(), |_| {}, HostRead::Follows);
        let _ = scopes.pop();
    }

    /// [`ContextInner::submit_empty_after_refusal`] for a refused submission made outside the
    /// gathered ops (`raw_submit`, a user's sequence, a transfer): under the gathered lock, after
    /// the ops gathered since, like every submission.
    pub(crate) fn after_refused_submission(&self) {
        let mut gathered = self.lock_gathered();
        self.submit_gathered(&mut gathered);
        self.submit_empty_after_refusal(&mut gathered);
    }

    /// Submits the gathered ops, if any, without waiting and without reporting a refusal
    /// (kept for the next call that reports it): what the arena does before it polls for
    /// pending frees, since memory freed behind gathered ops can only come back once they are
    /// submitted and have run.
    pub(crate) fn submit_gathered_now(&self) {
        let mut gathered = self.lock_gathered();
        self.submit_gathered(&mut gathered);
    }

    /// Waits for submission `id`, already handed to the queue, without submitting anything:
    /// what the batch's staging waits for, under the gathered lock, when all its buffers are
    /// still read by submitted batches.
    fn wait_for_submitted(&self, id: SubmissionId) -> Result<()> {
        let during = "waiting for a gathered batch's staging to be copied";
        if id.0 > self.submissions.completed() {
            let index = self.submissions.wgpu_index(id);
            let waited = match index {
                Some(index) => self.device.poll(wgpu::PollType::Wait {
                    submission_index: Some(index),
                    timeout: None,
                }),
                None => self.device.poll(wgpu::PollType::wait_indefinitely()),
            };
            match waited {
                // A submission wgpu refused: nothing of it runs; the empty one after it ends.
                Err(wgpu::PollError::WrongSubmissionIndex(..)) => {
                    self.device
                        .poll(wgpu::PollType::wait_indefinitely())
                        .map_err(|e| self.device_error(during, DeviceRefusal::wait(e)))?;
                }
                Err(e) => return Err(self.device_error(during, DeviceRefusal::wait(e))),
                Ok(_) => {}
            }
        }
        self.check_device(during)
    }

    /// Bytes of staging the context holds for gathered batches' uploads.
    pub(crate) fn gathered_staging_bytes(&self) -> u64 {
        self.lock_gathered().staging.bytes_held(self)
    }

    fn refuse_gathered(&self, gathered: &mut GatheredBatch, steps: usize, reason: DeviceRefusal) {
        // A warning, not an error: the next wait or flush returns the refusal as an `Err` (a
        // small upload into a buffer destroyed through the escape hatch is refused here now,
        // where its own submission used to refuse it).
        log::warn!(
            "gpu-arena: the device refused {steps} gathered single-op steps when they were submitted (none ran): {reason}"
        );
        gathered.refusal.get_or_insert(reason);
    }

    /// Submits the gathered ops, if any, and reports a refusal of gathered ops not reported
    /// yet: [`Error::DeviceLost`] on a lost device, else [`Error::Device`].
    pub(crate) fn flush(&self) -> Result<()> {
        self.flush_through(SubmissionId(u64::MAX))
    }

    /// [`ContextInner::flush`] when the gathered ops' submission is `id` or earlier: what a
    /// wait for submission `id` needs first.
    pub(crate) fn flush_through(&self, id: SubmissionId) -> Result<()> {
        let mut gathered = self.lock_gathered();
        if !gathered.steps.is_empty() && gathered.id <= id {
            self.submit_gathered(&mut gathered);
        }
        match gathered.refusal.take() {
            Some(reason) => Err(self.device_error(
                "submitting the single ops gathered since the last submission (none of them ran)",
                reason,
            )),
            None => Ok(()),
        }
    }

    /// Submits `command_buffers` after the gathered ops (see [`ContextInner::submit_with`]),
    /// ending with the memory dependency to host reads when `host_read` says one follows.
    pub(crate) fn submit_after_gathered(
        &self,
        command_buffers: impl IntoIterator<Item = wgpu::CommandBuffer>,
        before: impl FnOnce(SubmissionId),
        host_read: HostRead,
    ) -> SubmissionId {
        let mut gathered = self.lock_gathered();
        self.submit_gathered(&mut gathered);
        self.submit_to_queue(&mut gathered, command_buffers, before, host_read)
    }

    /// Makes the device's writes of submission `id` and everything before it visible to host
    /// reads, and returns the submission to wait for before reading: the last one that ends
    /// with the memory dependency to host reads, if it is `id` or later; else the gathered
    /// ops, submitted now ending with it (when any are gathered: they are the next
    /// submission); else an empty submission holding only it. So the dependency costs a
    /// command buffer only in submissions a host read waits for, and a submission of its own
    /// only where a host read follows work that went out without it. `SubmissionId(u64::MAX)`:
    /// everything submitted or gathered so far. Nothing on other backends (their queues'
    /// completion makes writes visible): returns `id`.
    pub(crate) fn host_visible_through(&self, id: SubmissionId) -> SubmissionId {
        let covered = self.submissions.host_visible_through();
        if covered >= id {
            return covered;
        }
        let mut gathered = self.lock_gathered();
        if !self.host_barrier_needed(&mut gathered) {
            return id;
        }
        let last = SubmissionId(self.submissions.next_id().0 - 1);
        let wanted = if gathered.steps.is_empty() {
            id.min(last)
        } else {
            id.min(gathered.id)
        };
        let covered = self.submissions.host_visible_through();
        if covered >= wanted {
            return covered;
        }
        if gathered.steps.is_empty() {
            // A barrier the device refuses is never recorded; the empty submission still is.
            let scopes = ErrorScopes::push(&self.device);
            self.submit_to_queue(&mut gathered, std::iter::empty(), |_| {}, HostRead::Follows);
            let _ = scopes.pop();
        } else {
            self.submit_gathered_for(&mut gathered, HostRead::Follows);
        }
        // At least `id`: where the barrier could not be recorded (a device destroyed behind
        // wgpu's back), the wait is for the work itself, which then reports the device.
        self.submissions.host_visible_through().max(id)
    }

    /// Whether this device's submissions need the memory dependency to host reads (Vulkan).
    fn host_barrier_needed(&self, gathered: &mut GatheredBatch) -> bool {
        *gathered
            .host_barrier_needed
            .get_or_insert_with(|| crate::backend::needs_host_read_barrier(&self.device))
    }

    /// Hands `command_buffers` to the queue as the next submission, ending with the memory
    /// dependency to host reads on Vulkan ([`crate::backend::host_read_barrier`]) when
    /// `host_read` says a host read follows. Only with the gathered lock held.
    fn submit_to_queue(
        &self,
        gathered: &mut GatheredBatch,
        command_buffers: impl IntoIterator<Item = wgpu::CommandBuffer>,
        before: impl FnOnce(SubmissionId),
        host_read: HostRead,
    ) -> SubmissionId {
        let needed = self.host_barrier_needed(gathered);
        let barrier = match host_read {
            HostRead::Follows if needed => crate::backend::host_read_barrier(&self.device),
            _ => None,
        };
        let carries = barrier.is_some() || !needed;
        let id = self.submissions.submit(
            &self.queue,
            command_buffers.into_iter().chain(barrier),
            before,
        );
        if carries {
            self.submissions.mark_host_visible(id);
        }
        id
    }
}
