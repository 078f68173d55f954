//! How a context submits work and waits for it: every kind of work (transfers, a user's
//! sequence, a captured run, app work, raw submits) goes through one [`Submission`], which
//! refuses a lost device, puts the work in wgpu's error scopes, hands it to the queue after the
//! single ops gathered so far (`context/gathered.rs`), records the arrays' use, hands back the
//! kernel timers, does the bookkeeping a refused submission needs and puts the work on the
//! timeline; and every wait ends by checking that the device is not lost, so that nothing reads
//! memory the device never wrote. The library's own measurements (kernel tuning) run beside
//! that record (`run_measurement`, unnumbered), so that they change nothing a program counts or
//! sees. A file of its own because every recorder, transfer and op submits through it, and the
//! lost-device rules live in one place.

use super::gathered_batch::HostRead;
use super::ContextInner;
use crate::error::{Error, Result};
use crate::pipelines::{DeviceRefusal, ErrorScopes};
use crate::step::DispatchTimer;
use crate::submission::SubmissionId;

/// One submission in the making ([`ContextInner::submission`]): whatever is encoded while it
/// is open is inside its error scopes, so the first refusal, at encoding or at submission, is
/// the one reported.
#[must_use = "a submission does nothing until submit() or abandon()"]
pub(crate) struct Submission<'c> {
    inner: &'c ContextInner,
    /// What is being done, for the error.
    during: &'c str,
    scopes: ErrorScopes,
    host_read: HostRead,
    /// The kernel timers of the work, handed back once it is known whether the device took it.
    timers: Vec<Option<DispatchTimer>>,
}

impl<'c> Submission<'c> {
    /// Ends the submission with the memory dependency to host reads: for work whose results
    /// the host reads next (readback copies, usually a user's sequence).
    pub(crate) fn for_host_read(mut self) -> Self {
        self.host_read = HostRead::Follows;
        self
    }

    /// Adds a kernel timer of the work.
    pub(crate) fn timed(&mut self, timer: Option<DispatchTimer>) {
        self.timers.push(timer);
    }

    /// Gives up before submitting (encoding failed with `refusal` while `during`): nothing is
    /// submitted, the timers go back unread; the error to return.
    pub(crate) fn abandon(self, during: &str, refusal: DeviceRefusal) -> Error {
        let _ = self.scopes.pop();
        for timer in self.timers {
            self.inner.timed_submission(timer, SubmissionId(0), false);
        }
        self.inner.device_error(during, refusal)
    }

    /// Hands `command_buffers` to the queue after the gathered ops, running `before` with the
    /// submission's id just before (arrays record their use there, so another thread's read of
    /// one waits for this work), and puts one dispatch per name of `on_timeline` on the
    /// timeline. Errors: [`Error::Device`] when wgpu refuses the work (none of it ran; the id
    /// `before` saw is completed by an empty submission, so waits for it end),
    /// [`Error::DeviceLost`] once the device is lost.
    pub(crate) fn submit<'n>(
        self,
        command_buffers: impl IntoIterator<Item = wgpu::CommandBuffer>,
        before: impl FnOnce(SubmissionId),
        on_timeline: impl IntoIterator<Item = &'n str>,
    ) -> Result<SubmissionId> {
        let inner = self.inner;
        let id = inner.submit_after_gathered(command_buffers, before, self.host_read);
        let popped = self.scopes.pop();
        for timer in self.timers {
            inner.timed_submission(timer, id, popped.is_ok());
        }
        popped.map_err(|refusal| {
            inner.after_refused_submission();
            inner.device_error(self.during, refusal)
        })?;
        for name in on_timeline {
            inner.record(crate::trace::timeline::Record::Dispatch {
                name,
                submission: id,
            });
        }
        Ok(id)
    }
}

impl ContextInner {
    /// Tells the arena which submissions have completed, so their pending frees become free.
    pub(crate) fn retire_completed(&self) {
        // Process wgpu's completion callbacks without blocking.
        let _ = self.device.poll(wgpu::PollType::Poll);
        let completed = self.submissions.completed();
        self.lock_memory().retire_completed(completed);
    }

    /// Opens a [`Submission`] of work described by `during`. Errors: [`Error::DeviceLost`]
    /// once the device is lost (nothing of it is touched).
    pub(crate) fn submission<'c>(&'c self, during: &'c str) -> Result<Submission<'c>> {
        self.check_device(during)?;
        Ok(Submission {
            inner: self,
            during,
            scopes: ErrorScopes::push(&self.device),
            host_read: HostRead::Later,
            timers: Vec::new(),
        })
    }

    /// Finishes `encoder` and submits it inside wgpu error scopes: a command the device refuses
    /// (when it is encoded or when it is submitted, for instance a buffer destroyed meanwhile)
    /// is an [`Error::Device`] saying what was being `done`, and nothing runs (wgpu refuses a
    /// command buffer that failed to finish); a lost device is an [`Error::DeviceLost`]. Work
    /// whose writes the host reads as soon as it completes (copies into readback staging) is
    /// submitted `for_host_read`: it ends with the memory dependency to host reads, so the read
    /// needs no submission of its own.
    pub(crate) fn submit_encoder(
        &self,
        encoder: wgpu::CommandEncoder,
        done: &str,
        for_host_read: bool,
    ) -> Result<SubmissionId> {
        let mut submission = self.submission(done)?;
        if for_host_read {
            submission = submission.for_host_read();
        }
        submission.submit([encoder.finish()], |_| {}, [])
    }

    /// Runs `encoder`, the library's own measurement on buffers no array shares (kernel
    /// tuning), and waits for it; with `readback` (a `MAP_READ` buffer the work copies into),
    /// returns that buffer's bytes. Outside the record on purpose: it takes no submission id
    /// (`Submissions::submit_unnumbered`), leaves the gathered ops gathered, waits for nothing
    /// else and is not on the timeline, so what a program counts and sees of its own work is
    /// the same whether or not tuning ran in between; like every submission it checks the
    /// device first and runs inside wgpu's error scopes.
    ///
    /// Errors: [`Error::DeviceLost`], [`Error::Device`] when wgpu refuses the work, the wait or
    /// the mapping.
    pub(crate) fn run_measurement(
        &self,
        encoder: wgpu::CommandEncoder,
        readback: Option<&wgpu::Buffer>,
        done: &str,
    ) -> Result<Vec<u8>> {
        self.check_device(done)?;
        let scopes = ErrorScopes::push(&self.device);
        let index = self
            .submissions
            .submit_unnumbered(&self.queue, [encoder.finish()]);
        // Mapped once the work completes: the wait below runs the callback.
        let (mapped, mapping) = std::sync::mpsc::channel();
        if let Some(buffer) = readback {
            buffer.slice(..).map_async(wgpu::MapMode::Read, move |r| {
                let _ = mapped.send(r);
            });
        }
        let waited = self.device.poll(wgpu::PollType::Wait {
            submission_index: Some(index),
            timeout: None,
        });
        scopes
            .pop()
            .map_err(|refusal| self.device_error(done, refusal))?;
        waited.map_err(|e| self.device_error(done, DeviceRefusal::wait(e)))?;
        self.check_device_after_wait(done)?;
        let Some(buffer) = readback else {
            return Ok(Vec::new());
        };
        mapping
            .recv()
            .map_err(DeviceRefusal::wait)
            .and_then(|r| r.map_err(DeviceRefusal::wait))
            .map_err(|refusal| self.device_error(done, refusal))?;
        let bytes = buffer
            .slice(..)
            .get_mapped_range()
            .map(|view| view.to_vec())
            .map_err(|e| self.device_error(done, DeviceRefusal::wait(e)));
        buffer.unmap();
        bytes
    }

    /// [`Error::DeviceLost`] once wgpu has reported the device lost or destroyed: what every
    /// call that would use the device, or read what the device wrote, checks first.
    pub(crate) fn check_device(&self, during: &str) -> Result<()> {
        match self.device_lost.get() {
            Some(reason) => Err(Error::DeviceLost {
                during: during.to_string(),
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    /// The error for wgpu's `reason` while `during`: [`Error::DeviceLost`] when the device is
    /// lost, else [`Error::Device`]. A destroyed device's buffers are refused as invalid before
    /// any callback hears of it, so the device is asked first: an app's through its loss probe,
    /// ours by a poll, at which our device-lost callback runs.
    pub(crate) fn device_error(&self, during: &str, refusal: DeviceRefusal) -> Error {
        if self.loss_probe.is_none() && self.device_lost.get().is_none() {
            let _ = self.device.poll(wgpu::PollType::Poll);
        }
        self.check_device_after_wait(during)
            .err()
            .unwrap_or_else(|| Error::Device {
                during: during.to_string(),
                reason: refusal.to_string(),
            })
    }

    /// Waits for all submitted work. Errors: [`Error::DeviceLost`] when the device is lost or
    /// destroyed (the wait's poll is what learns of a `Device::destroy`), so that nothing reads
    /// what the GPU did not write.
    pub(crate) fn wait_idle(&self) -> Result<()> {
        // What follows a wait for everything may read anything: the gathered ops go out with
        // the memory dependency to host reads, or an empty submission adds it when the last
        // one went out without it.
        self.host_visible_through(SubmissionId(u64::MAX));
        self.flush()?;
        let during = "waiting for submitted work";
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| self.device_error(during, DeviceRefusal::wait(e)))?;
        self.check_device_after_wait(during)
    }

    /// [`ContextInner::check_device`] where the caller is about to read what the device wrote:
    /// on an app's device, whose device-lost callback is not ours, it first asks wgpu whether
    /// the device is still valid ([`app_device::LossProbe`]), so a loss the app did not forward
    /// is still an [`Error::DeviceLost`] rather than a read of memory the device never wrote.
    fn check_device_after_wait(&self, during: &str) -> Result<()> {
        if let Some(probe) = &self.loss_probe {
            probe.probe(&self.device, &self.device_lost);
        }
        self.check_device(during)
    }

    /// Waits until submission `id` (and everything before it) has completed and its writes
    /// are visible to host reads ([`ContextInner::host_visible_through`]): what a host read of
    /// memory the GPU may have written waits for.
    ///
    /// Errors: [`Error::DeviceLost`] when the device is lost or destroyed, even when the work
    /// had completed before: the caller is about to read what the device wrote.
    pub(crate) fn wait_for(&self, id: SubmissionId) -> Result<()> {
        if id.0 == 0 {
            return self.check_device_after_wait("waiting for submitted work");
        }
        let visible = self.host_visible_through(id);
        self.wait_for_work(visible)
    }

    /// Waits until submission `id` (and everything before it) has completed: for that
    /// submission alone when it is recent (later ones keep running), else for the whole queue.
    /// Enough before the host writes memory the GPU read (a staging buffer reused); a host
    /// read takes [`ContextInner::wait_for`].
    ///
    /// Errors: [`Error::DeviceLost`] when the device is lost or destroyed.
    pub(crate) fn wait_for_work(&self, id: SubmissionId) -> Result<()> {
        let during = "waiting for submitted work";
        if id.0 <= self.submissions.completed() {
            return self.check_device_after_wait(during);
        }
        // `id` may be the gathered single ops' submission, not made yet.
        self.flush_through(id)?;
        if let Some(index) = self.submissions.wgpu_index(id) {
            let waited = self.device.poll(wgpu::PollType::Wait {
                submission_index: Some(index),
                timeout: None,
            });
            match waited {
                // A submission wgpu refused (numbered, never handed to the GPU) and no
                // successful one after it yet: nothing of it runs, so wait for the queue.
                Err(wgpu::PollError::WrongSubmissionIndex(..)) => {}
                Err(e) => return Err(self.device_error(during, DeviceRefusal::wait(e))),
                Ok(_) if id.0 <= self.submissions.completed() => {
                    return self.check_device_after_wait(during)
                }
                Ok(_) => {}
            }
        }
        self.wait_idle()
    }
}

impl ContextInner {
    /// Maps `buffer` (a wgpu readback buffer, `MAP_READ`, whose copies were submitted) for
    /// reading once the queue is idle, hands its bytes to `read`, and unmaps it: the one wgpu
    /// readback, for the backends where staging is wgpu's own.
    pub(crate) fn read_mapped(
        &self,
        buffer: &wgpu::Buffer,
        during: &str,
        read: impl FnOnce(&[u8]),
    ) -> Result<()> {
        let slice = buffer.slice(..);
        let (tx, rx) = std::sync::mpsc::channel();
        // In error scopes of our own: a map the device refuses (its device destroyed by the
        // app) is a validation error, which must not reach the device's handler (wgpu's
        // default one panics); the wait below then says the device is lost.
        let scopes = crate::pipelines::ErrorScopes::push(self.device());
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        let refused = scopes.pop();
        self.wait_idle()?;
        refused.map_err(|refusal| self.device_error(during, refusal))?;
        rx.recv()
            .map_err(DeviceRefusal::wait)
            .and_then(|r| r.map_err(DeviceRefusal::wait))
            .map_err(|refusal| self.device_error(during, refusal))?;
        {
            let view = slice
                .get_mapped_range()
                .map_err(|e| self.device_error(during, DeviceRefusal::wait(e)))?;
            read(&view);
        }
        buffer.unmap();
        Ok(())
    }
}
