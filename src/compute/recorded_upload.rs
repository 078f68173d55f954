//! Uploads recorded in a [`Sequence`]: the data is copied out of the caller's slice at once
//! (into the array itself on UMA, else through the host link: a staging buffer the sequence
//! holds, or wgpu's staging, `host_link/recorded.rs`), and the staging-to-array copy runs as a
//! step of the sequence, so a decode step's new rows go out in the same submission as the
//! kernels that read them.

use super::Sequence;
use crate::array::{Access, DeviceArray};
use crate::error::Result;
use crate::host_link::recorded::Staged;
use crate::host_link::staged_copy::UploadItem;
use crate::step::{BufferCopy, Step};
use crate::transfer::{Operand, ResolvedOperand};
use std::panic::Location;

impl Sequence {
    /// [`crate::Context::device_put`], recorded: the array exists at once, its data lands when
    /// the sequence runs (before any later step). An explicit host-to-device transfer, checked
    /// by the guard and counted now, as every recorded op is (the data leaves your slice now;
    /// dropping the sequence unsubmitted does not take the count back). In a
    /// [`Capture`](crate::Capture) it is captured data: guarded when recorded, counted by no
    /// run (the capture guide's recording model).
    ///
    /// Errors: as [`crate::Context::device_put`].
    #[track_caller]
    pub fn put<T: bytemuck::Pod>(&mut self, data: &[T], shape: &[usize]) -> Result<DeviceArray<T>> {
        self.put_guarded(data, shape, true, "Sequence::put")
    }

    /// Makes an operand usable by a later step: host data is uploaded within the sequence (an
    /// implicit transfer, guarded), into an array whose site is the user's call at `site`.
    pub(crate) fn resolve<'a, T: bytemuck::Pod>(
        &mut self,
        operand: Operand<'a, T>,
        operation: &'static str,
        site: &'static Location<'static>,
    ) -> Result<ResolvedOperand<'a, T>> {
        let ctx = std::sync::Arc::clone(&self.ctx.inner);
        operand.resolve_with(&ctx, operation, |data, shape| {
            self.put_guarded_at(data, shape, false, operation, site)
        })
    }

    /// Uploads `data` into a new array made by the user's call `operation`; an explicit
    /// transfer or an implicit one.
    #[track_caller]
    pub(crate) fn put_guarded<T: bytemuck::Pod>(
        &mut self,
        data: &[T],
        shape: &[usize],
        explicit: bool,
        operation: &'static str,
    ) -> Result<DeviceArray<T>> {
        self.put_guarded_at(data, shape, explicit, operation, Location::caller())
    }

    /// [`Sequence::put_guarded`] for a call at `site`.
    fn put_guarded_at<T: bytemuck::Pod>(
        &mut self,
        data: &[T],
        shape: &[usize],
        explicit: bool,
        operation: &'static str,
        site: &'static Location<'static>,
    ) -> Result<DeviceArray<T>> {
        let inner = std::sync::Arc::clone(&self.ctx.inner);
        inner.check_device(operation)?;
        let (bytes, started) = inner.start_put(data, shape, explicit, operation)?;
        let kind = crate::memory_kind::MemoryKind::Device;
        let array =
            self.new_array_at::<T>(kind, shape, Some(bytes.len() as u64), operation, site)?;
        self.touch_array(&array, Access::Write, operation, "the new array")?;
        self.record_upload(&array, bytes)?;
        // A capture moves nothing now: the runs that set the data count it.
        if !self.is_capture() {
            inner.count_put(explicit, bytes, started);
        }
        Ok(array)
    }

    /// Writes `bytes` into the fresh `array` (no GPU work uses it yet, so writing now is safe).
    fn record_upload<T: bytemuck::Pod>(
        &mut self,
        array: &DeviceArray<T>,
        bytes: &[u8],
    ) -> Result<()> {
        let storage = &array.storage;
        if bytes.is_empty() {
            return Ok(());
        }
        // A capture writes nothing now: each run copies the data in at this step.
        if self.record_captured_upload(array, bytes).is_some() {
            return Ok(());
        }
        if let Some(range) = storage.host_range() {
            range.write(bytes);
            return Ok(());
        }
        let inner = std::sync::Arc::clone(&self.ctx.inner);
        if self.is_single_op() {
            if let Some(step) = inner.gathered_upload(storage, bytes) {
                // A single op's small host operand: staged by the gathered batch it joins.
                self.steps.push(step);
                return Ok(());
            }
        }
        let item = UploadItem {
            data: bytes,
            buffer: &storage.buffer,
            offset: storage.allocation.offset,
            span: storage.allocation.size,
        };
        match self
            .uploads
            .stage(inner.as_ref(), inner.host_link(), item)?
        {
            // Lands at the start of this sequence's submission at the latest.
            Staged::Queued => {}
            Staged::Submitted(id) => storage.record_use(id),
            Staged::InStaging {
                buffer,
                offset,
                bytes,
            } => self.steps.push(Step::Copy(BufferCopy {
                src: buffer,
                src_offset: offset,
                dst: storage.buffer.clone(),
                dst_offset: storage.allocation.offset,
                size: bytes,
            })),
        }
        Ok(())
    }
}
