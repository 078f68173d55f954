//! How a context submits work and waits for it: command buffers go to the queue after the
//! single ops gathered so far (`context/gathered.rs`), inside wgpu's error scopes, and every
//! wait ends by checking that the device is not lost, so that nothing reads memory the device
//! never wrote. A file of its own because every recorder, transfer and op submits through these
//! methods, and the lost-device rules live in one place.

use super::{gathered_batch, ContextInner};
use crate::error::{Error, Result};
use crate::submission::SubmissionId;

impl ContextInner {
    /// Tells the arena which submissions have completed, so their pending frees become free.
    pub(crate) fn retire_completed(&self) {
        // Process wgpu's completion callbacks without blocking.
        let _ = self.device.poll(wgpu::PollType::Poll);
        let completed = self.submissions.completed();
        self.lock_memory().retire_completed(completed);
    }

    /// Finishes `encoder` and submits it inside wgpu error scopes: a command the device refuses
    /// (when it is encoded or when it is submitted, for instance a buffer destroyed meanwhile)
    /// is an [`Error::Device`] saying what was being `done`, and nothing runs (wgpu refuses a
    /// command buffer that failed to finish); a lost device is an [`Error::DeviceLost`].
    pub(crate) fn submit_encoder(
        &self,
        encoder: wgpu::CommandEncoder,
        done: &str,
    ) -> Result<SubmissionId> {
        self.submit_encoder_for(encoder, done, gathered_batch::HostRead::Later)
    }

    /// [`ContextInner::submit_encoder`] for work whose writes the host reads as soon as it
    /// completes (copies into readback staging): it ends with the memory dependency to host
    /// reads, so the read needs no submission of its own.
    pub(crate) fn submit_encoder_for_host_read(
        &self,
        encoder: wgpu::CommandEncoder,
        done: &str,
    ) -> Result<SubmissionId> {
        self.submit_encoder_for(encoder, done, gathered_batch::HostRead::Follows)
    }

    fn submit_encoder_for(
        &self,
        encoder: wgpu::CommandEncoder,
        done: &str,
        host_read: gathered_batch::HostRead,
    ) -> Result<SubmissionId> {
        self.check_device(done)?;
        // One scope for both: its first error is the one to report.
        let scopes = crate::pipelines::ErrorScopes::push(&self.device);
        let commands = encoder.finish();
        let id = self.submit_after_gathered([commands], |_| {}, host_read);
        scopes.pop().map_err(|reason| {
            self.after_refused_submission();
            self.device_error(done, reason)
        })?;
        Ok(id)
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
    /// lost, else [`Error::Device`].
    pub(crate) fn device_error(
        &self,
        during: &str,
        refusal: crate::pipelines::DeviceRefusal,
    ) -> Error {
        self.check_device(during)
            .err()
            .unwrap_or_else(|| Error::Device {
                during: during.to_string(),
                reason: refusal.to_string(),
            })
    }

    pub(crate) fn submit(
        &self,
        command_buffers: impl IntoIterator<Item = wgpu::CommandBuffer>,
    ) -> SubmissionId {
        self.submit_with(command_buffers, |_| {})
    }

    /// Submits `command_buffers`, running `before` with the submission's id just before the
    /// queue gets them (arrays record their use there), after the single ops gathered so far
    /// (`context/gathered.rs`), which go first as a submission of their own, so nothing
    /// submitted overtakes an op called before it. It leaves out the memory dependency to host
    /// reads ([`crate::backend::host_read_barrier`]; a fence wait alone does not make device writes
    /// visible to the host): a host read after it adds one
    /// ([`ContextInner::host_visible_through`]).
    pub(crate) fn submit_with(
        &self,
        command_buffers: impl IntoIterator<Item = wgpu::CommandBuffer>,
        before: impl FnOnce(SubmissionId),
    ) -> SubmissionId {
        self.submit_after_gathered(command_buffers, before, gathered_batch::HostRead::Later)
    }

    /// [`ContextInner::submit_with`] for work whose results the host reads next, as it usually
    /// does after a user's sequence: it ends with the memory dependency to host reads on
    /// Vulkan (other submissions leave it out; see `context/gathered.rs`).
    pub(crate) fn submit_for_host_read(
        &self,
        command_buffers: impl IntoIterator<Item = wgpu::CommandBuffer>,
        before: impl FnOnce(SubmissionId),
    ) -> SubmissionId {
        self.submit_after_gathered(command_buffers, before, gathered_batch::HostRead::Follows)
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
            .map_err(|e| self.device_error(during, crate::pipelines::DeviceRefusal::wait(e)))?;
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
                Err(e) => {
                    return Err(self.device_error(during, crate::pipelines::DeviceRefusal::wait(e)))
                }
                Ok(_) if id.0 <= self.submissions.completed() => {
                    return self.check_device_after_wait(during)
                }
                Ok(_) => {}
            }
        }
        self.wait_idle()
    }
}
