//! Uploads recorded in a [`Sequence`]: the data is copied out of the caller's slice at once
//! (into the array itself on UMA, into a staging buffer the sequence holds on Vulkan, into
//! wgpu's staging elsewhere), and the staging-to-array copy runs as a step of the sequence, so
//! a decode step's new rows go out in the same submission as the kernels that read them.

use super::Sequence;
use crate::array::{Access, DeviceArray};
use crate::error::Result;
use crate::host_link::staged_copy::UploadItem;
use crate::host_link::staging::{StagingKind, COPY_ALIGNMENT};
use crate::step::{BufferCopy, Step};
use crate::transfer::{Operand, ResolvedOperand};

impl Sequence {
    /// [`crate::Context::device_put`], recorded: the array exists at once, its data lands when
    /// the sequence runs (before any later step). An explicit host-to-device transfer, checked
    /// by the guard now.
    ///
    /// Errors: as [`crate::Context::device_put`].
    #[track_caller]
    pub fn put<T: bytemuck::Pod>(&mut self, data: &[T], shape: &[usize]) -> Result<DeviceArray<T>> {
        self.put_guarded(data, shape, true, "Sequence::put")
    }

    /// Makes an operand usable by a later step: host data is uploaded within the sequence (an
    /// implicit transfer, guarded).
    pub(crate) fn resolve<'a, T: bytemuck::Pod>(
        &mut self,
        operand: Operand<'a, T>,
        operation: &'static str,
    ) -> Result<ResolvedOperand<'a, T>> {
        let ctx = std::sync::Arc::clone(&self.ctx.inner);
        operand.resolve_with(&ctx, operation, |data, shape| {
            self.put_guarded(data, shape, false, operation)
        })
    }

    #[track_caller]
    pub(crate) fn put_guarded<T: bytemuck::Pod>(
        &mut self,
        data: &[T],
        shape: &[usize],
        explicit: bool,
        operation: &'static str,
    ) -> Result<DeviceArray<T>> {
        let inner = std::sync::Arc::clone(&self.ctx.inner);
        let (bytes, started) = inner.start_put(data, shape, explicit, operation)?;
        let array = self.new_array::<T>(shape, Some(bytes.len() as u64))?;
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
        let padded = (bytes.len() as u64).next_multiple_of(COPY_ALIGNMENT);
        let item = UploadItem {
            data: bytes,
            buffer: &storage.buffer,
            offset: storage.allocation.offset,
            span: storage.allocation.size,
        };
        if inner.host_link() == crate::host_link::HostLink::Wgpu {
            // wgpu's own staging (non-Vulkan backends): the write lands at the start of the
            // next submission, this sequence's own at the latest (it is submitted even with no
            // step), so the upload costs no submission of its own.
            crate::host_link::wgpu_copy::queue_writes(&*inner, &[item]);
            self.queued_writes = true;
            return Ok(());
        }
        if self.is_single_op() {
            if let Some(step) = inner.gathered_upload(storage, bytes) {
                // A single op's small host operand: staged by the gathered batch it joins.
                self.steps.push(step);
                return Ok(());
            }
        }
        if padded > inner.config().staging_bytes {
            // More than a staging buffer holds: submissions of its own now, as many as
            // `device_put` makes, which queue order puts before this sequence's.
            let id = inner.upload(&[item])?;
            storage.record_use(id);
            return Ok(());
        }
        let room = |(staging, cursor): &(crate::host_link::staging::StagingBuffer, u64)| {
            staging.size - cursor >= padded
        };
        if !self.staging.last().is_some_and(room) {
            let staging = inner
                .staging()
                .acquire(inner.as_ref(), StagingKind::Upload)?;
            self.staging.push((staging, 0));
        }
        let (staging, cursor) = self.staging.last_mut().expect("acquired above");
        let target = staging.mapped.sub(*cursor, padded);
        target.write(bytes);
        target
            .sub(bytes.len() as u64, padded - bytes.len() as u64)
            .zero();
        let step = Step::Copy(BufferCopy {
            src: staging.buffer.clone(),
            src_offset: *cursor,
            dst: storage.buffer.clone(),
            dst_offset: storage.allocation.offset,
            size: padded,
        });
        *cursor += padded;
        self.steps.push(step);
        Ok(())
    }
}
