//! Batched uploads: many arrays, one staging area, merged copies, one submission.

use crate::array::{ArrayStorage, DeviceArray};
use crate::config::TransferDirection;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::host_link::staged_copy::UploadItem;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};

/// Source of batch ids, so that a pending array cannot be taken from another batch's result.
static NEXT_BATCH: AtomicU64 = AtomicU64::new(1);

/// Collects uploads and carries them out together in [`UploadBatch::finish`].
///
/// ```no_run
/// # let ctx = gpu_arena::Context::new(Default::default())?;
/// # let (xs, ys) = (vec![1.0f32; 4], vec![2u32; 8]);
/// let mut batch = ctx.upload_batch();
/// let x = batch.put(&xs, &[4])?;
/// let y = batch.put(&ys, &[2, 4])?;
/// let mut done = batch.finish()?;          // one staging area, one submission
/// let (x, y) = (done.take(x)?, done.take(y)?);
/// # Ok::<(), gpu_arena::Error>(())
/// ```
/// Arrays exist only after `finish`: a [`PendingArray`] is a claim ticket, redeemed with
/// [`FinishedUpload::take`], so an array whose data has not been copied cannot be used.
pub struct UploadBatch<'data> {
    ctx: Context,
    id: u64,
    entries: Vec<BatchEntry<'data>>,
}

struct BatchEntry<'data> {
    storage: std::sync::Arc<ArrayStorage>,
    shape: Vec<usize>,
    /// The bytes still to upload (empty when written zero-copy at `put`).
    data: &'data [u8],
}

/// A claim on an array of a batch, redeemable once the batch has finished.
#[must_use = "redeem it with FinishedUpload::take after UploadBatch::finish"]
pub struct PendingArray<T> {
    batch: u64,
    index: usize,
    _element: PhantomData<T>,
}

/// The arrays of a finished batch, to be taken out with their [`PendingArray`] tickets.
/// Arrays not taken are freed when this is dropped.
pub struct FinishedUpload {
    batch: u64,
    entries: Vec<Option<(std::sync::Arc<ArrayStorage>, Vec<usize>)>>,
}

impl<'data> UploadBatch<'data> {
    pub(crate) fn new(ctx: &Context) -> Self {
        Self {
            ctx: ctx.clone(),
            id: NEXT_BATCH.fetch_add(1, Ordering::Relaxed),
            entries: Vec::new(),
        }
    }

    /// Adds one array: allocates it now (in order, so a batch is mostly contiguous in the
    /// arena) and records its data for [`UploadBatch::finish`]. The guard is checked here; the
    /// transfer is counted (in [`Context::transfer_stats`] and on the timeline) when the batch
    /// finishes, so a batch dropped or refused at `finish` counts nothing.
    #[track_caller]
    pub fn put<T: bytemuck::Pod>(
        &mut self,
        data: &'data [T],
        shape: &[usize],
    ) -> Result<PendingArray<T>> {
        self.ctx.inner.check_device("UploadBatch::put")?;
        crate::shape::check_shape(
            shape,
            Some(data.len()),
            std::mem::size_of::<T>(),
            "UploadBatch::put",
        )?;
        let bytes: &'data [u8] = bytemuck::cast_slice(data);
        self.ctx.inner.guard(
            TransferDirection::HostToDevice,
            bytes.len() as u64,
            "UploadBatch::put",
            true,
        )?;
        let array = self.ctx.alloc_bytes::<T>(
            crate::memory_kind::MemoryKind::Device,
            shape,
            bytes.len() as u64,
            None,
            "UploadBatch::put",
            std::panic::Location::caller(),
        )?;
        let DeviceArray { storage, shape, .. } = array;
        // UMA: copy now; nothing needs the GPU.
        let data = if storage.write_zero_copy(bytes) {
            &[][..]
        } else {
            bytes
        };
        self.entries.push(BatchEntry {
            storage,
            shape,
            data,
        });
        Ok(PendingArray {
            batch: self.id,
            index: self.entries.len() - 1,
            _element: PhantomData,
        })
    }

    /// Number of arrays in the batch.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when nothing was put.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Copies every array's data: one staging area (in pieces if larger than the pool), merged
    /// copy commands for arrays that are neighbours in the arena, one submission per staging
    /// buffer filled (on other backends than Vulkan wgpu's own staging carries it, in one
    /// submission). Does not wait for the GPU: later work on the arrays is ordered after it.
    ///
    /// Errors: [`Error::DeviceLost`] once the device is lost, even for an empty batch or one
    /// whose data was all written at `put` (zero-copy), as every submission refuses then; the
    /// batch's arrays are freed with the error.
    pub fn finish(self) -> Result<FinishedUpload> {
        self.ctx.inner.check_device("UploadBatch::finish")?;
        let started = std::time::Instant::now();
        let items: Vec<UploadItem<'_>> = self
            .entries
            .iter()
            .filter(|e| !e.data.is_empty())
            .map(|e| UploadItem {
                data: e.data,
                buffer: &e.storage.buffer,
                offset: e.storage.allocation.offset,
                span: e.storage.allocation.size,
            })
            .collect();
        if !items.is_empty() {
            let id = self.ctx.inner.upload(&items)?;
            drop(items);
            for e in &self.entries {
                e.storage.record_use(id);
            }
        }
        let bytes = self.entries.iter().map(|e| e.storage.allocation.requested);
        self.ctx.inner.count_transfer(
            TransferDirection::HostToDevice,
            true,
            self.entries.len() as u64,
            bytes.sum(),
            started,
        );
        Ok(FinishedUpload {
            batch: self.id,
            entries: self
                .entries
                .into_iter()
                .map(|e| Some((e.storage, e.shape)))
                .collect(),
        })
    }
}

impl FinishedUpload {
    /// The array a [`PendingArray`] stands for. Errors: the [`Error`] variant
    /// `InvalidArgument` if the ticket is from another batch (each ticket can be redeemed
    /// once: it is consumed).
    pub fn take<T: bytemuck::Pod>(&mut self, pending: PendingArray<T>) -> Result<DeviceArray<T>> {
        self.take_as(pending, "FinishedUpload::take")
    }

    /// [`take`](Self::take) for the user's call `operation`, which its errors name.
    fn take_as<T: bytemuck::Pod>(
        &mut self,
        pending: PendingArray<T>,
        operation: &'static str,
    ) -> Result<DeviceArray<T>> {
        if pending.batch != self.batch {
            return Err(Error::InvalidArgument {
                operation,
                reason: "this PendingArray belongs to another upload batch".into(),
            });
        }
        let (storage, shape) = self
            .entries
            .get_mut(pending.index)
            .and_then(Option::take)
            .ok_or_else(|| Error::InvalidArgument {
                operation,
                reason: "this array was already taken".into(),
            })?;
        Ok(DeviceArray {
            storage,
            shape,
            _element: PhantomData,
        })
    }

    /// The arrays of many tickets of one element type, in the order given: what
    /// [`take`](Self::take) does for each, stopping at the first error (the arrays redeemed
    /// before it are dropped with the error, so their memory goes back to the arena).
    ///
    /// ```no_run
    /// # let ctx = gpu_arena::Context::new(Default::default())?;
    /// # let rows = vec![vec![0u32; 1024]; 100];
    /// let mut batch = ctx.upload_batch();
    /// let pending = rows
    ///     .iter()
    ///     .map(|row| batch.put(row, &[row.len()]))
    ///     .collect::<Result<Vec<_>, _>>()?;
    /// let arrays = batch.finish()?.take_all(pending)?;
    /// # Ok::<(), gpu_arena::Error>(())
    /// ```
    pub fn take_all<T: bytemuck::Pod>(
        &mut self,
        pending: impl IntoIterator<Item = PendingArray<T>>,
    ) -> Result<Vec<DeviceArray<T>>> {
        let operation = "FinishedUpload::take_all";
        pending
            .into_iter()
            .map(|p| self.take_as(p, operation))
            .collect()
    }

    /// Number of arrays not yet taken.
    pub fn remaining(&self) -> usize {
        self.entries.iter().filter(|e| e.is_some()).count()
    }
}
