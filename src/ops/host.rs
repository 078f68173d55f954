//! Copies and fills on the host for CPU adapters (lavapipe, SwiftShader, WARP).
//!
//! There the device's memory is host memory (the arena maps it, zero-copy) and "kernels" run on
//! the host's own cores through a shader compiler that vectorises for the CPU: on lavapipe a copy
//! kernel moves 2 to 5 GB/s where `memcpy` moves 10 to 15. So on a CPU adapter, when every
//! array is mapped and no GPU work uses it any more, the ops copy with `memcpy`,
//! threaded like the transfers: what JAX's CPU backend does for these ops. GPUs, and CPU
//! adapters without zero-copy, run the WGSL kernels.
//!
//! Only for arrays the GPU is done with: an op on an array that gathered or submitted GPU work
//! still uses runs its kernel, gathered after that work, rather than waiting for it (what a
//! stream does: `launch(x); dynamic_slice(&x)` in a loop then makes no submission and no wait
//! per iteration). A host read of the result waits, as any host read does.
//!
//! The choice is made in one place, [`Sequence::host_path_now`], which every op calls as it
//! records: a single op is its recording in a sequence of one, so single ops and ops recorded
//! into a user's sequence take the host path under the same rules. Every host copy runs at
//! the sequence's `submit` (a single op's right after it is recorded), ahead of its steps,
//! once the GPU work on its arrays is done, under the kernel lock: two sequences sharing an
//! array run in the order they are submitted, as on a GPU, and no other thread's work (a
//! captured run, which takes the lock to submit) starts on the arrays during a copy.

use super::geometry::BoxCopy;
use crate::array::{Access, ArrayStorage, DeviceArray};
use crate::backend::MappedRange;
use crate::compute::{HostCopy, HostWork, Sequence};
use crate::context::ContextInner;
use crate::error::Result;
use crate::pipelines::KernelState;
use std::sync::Arc;

/// The mapped bytes of the arrays of one op, when it should run on the host. Its copies and
/// fills run at the sequence's `submit` (`deferred`: the sequence's queue, and the op's arrays,
/// whose GPU work they wait for there), or at once for a captured run, which holds the kernel
/// lock and found its arrays idle itself.
pub(crate) struct HostArrays {
    ranges: Vec<MappedRange>,
    deferred: Option<(HostWork, Vec<Arc<ArrayStorage>>)>,
}

impl ContextInner {
    /// Whether an op on `arrays` could take the host path (no waiting, no side effects).
    /// The caller holds the kernel lock (`_kernels`), under which every thread gathers its
    /// GPU work, so none can start using `arrays` between this check and the caller's copy.
    pub(crate) fn host_path_possible<T: bytemuck::Pod>(
        &self,
        _kernels: &KernelState,
        arrays: &[&DeviceArray<T>],
    ) -> bool {
        self.host_copies_pay()
            && arrays.iter().all(|a| a.storage.host_range().is_some())
            && self.idle_on_gpu(arrays)
    }

    /// Whether copies of mapped, idle arrays are made on the host rather than by kernels: a CPU
    /// adapter, device kernels not forced (see the module docs). Single ops, sequences and
    /// captured runs' moving copies all ask here.
    pub(crate) fn host_copies_pay(&self) -> bool {
        !self.config().force_device_kernels
            && self.adapter_info().device_type == wgpu::DeviceType::Cpu
    }

    /// Whether no gathered or submitted GPU work uses any of `arrays` any more (a non-blocking
    /// poll learns of work completed since the last one).
    fn idle_on_gpu<T: bytemuck::Pod>(&self, arrays: &[&DeviceArray<T>]) -> bool {
        let idle = |completed: u64| arrays.iter().all(|a| a.last_use().0 <= completed);
        if idle(self.submissions().completed()) {
            return true;
        }
        let _ = self.device().poll(wgpu::PollType::Poll);
        idle(self.submissions().completed())
    }

    /// The arrays' mapped bytes when this op should copy on the host (a CPU adapter, every
    /// array mapped, device kernels not forced, no GPU work left on them; see the module
    /// docs), after waiting for GPU work that still reads them (none, unless another thread
    /// gathered some since the check).
    pub(crate) fn host_path<T: bytemuck::Pod>(
        &self,
        kernels: &KernelState,
        arrays: &[&DeviceArray<T>],
    ) -> Result<Option<HostArrays>> {
        if !self.host_path_possible(kernels, arrays) {
            return Ok(None);
        }
        let Some(ranges) = arrays
            .iter()
            .map(|a| a.storage.host_range())
            .collect::<Option<Vec<_>>>()
        else {
            return Ok(None);
        };
        for array in arrays {
            self.wait_for(array.last_use())?;
        }
        Ok(Some(HostArrays::of(ranges)))
    }
}

impl Sequence {
    /// The host path for an op recorded now, when running it at once is the same as running
    /// it in order (see this module): a CPU adapter with every array mapped, no step recorded so
    /// far reading or writing any of them, and no other unsubmitted sequence using them. Then
    /// the op costs no step, so a sequence never costs a submission where the same ops one by
    /// one cost none. Arrays that GPU work still uses take the kernel, as single ops do. The arrays
    /// are touched all the same: pending until `submit` as on every other path, so code that
    /// runs on a CPU adapter runs on a GPU too.
    /// `uses` are the op's arrays with what it does to each and its name for it (its refusals
    /// name it); the [`HostArrays`] follow their order.
    pub(crate) fn host_path_now<T: bytemuck::Pod>(
        &mut self,
        uses: &[(&DeviceArray<T>, Access, &'static str)],
        operation: &'static str,
    ) -> Result<Option<HostArrays>> {
        let arrays: Vec<&DeviceArray<T>> = uses.iter().map(|(array, ..)| *array).collect();
        let arrays = &arrays[..];
        // Past this many steps the scan costs more than the kernel it saves on a CPU adapter.
        const MAX_STEPS_SCANNED: usize = 256;
        let inner = Arc::clone(&self.ctx.inner);
        let kernels = inner.kernels().lock();
        // A capture runs nothing while it records: every op is a step each run repeats.
        if self.is_capture()
            || self.steps.len() > MAX_STEPS_SCANNED
            || !inner.host_path_possible(&kernels, arrays)
        {
            return Ok(None);
        }
        let free = uses
            .iter()
            .all(|(array, access, _)| self.may_run_now(&array.storage, *access));
        if !free {
            return Ok(None);
        }
        let mut host = inner.host_path(&kernels, arrays)?;
        if let Some(host) = &mut host {
            // Host copies wait for `submit`, which makes them under the kernel lock once the
            // GPU is done with their arrays: a user's sequence runs in submit order, and no
            // other thread's work (a captured run) starts on the arrays during a copy.
            let storages = arrays.iter().map(|a| Arc::clone(&a.storage)).collect();
            host.deferred = Some((Arc::clone(&self.host_work), storages));
        }
        if host.is_some() {
            // All at once: a refusal of one array marks none of them.
            let touched: Vec<_> = uses
                .iter()
                .map(|(array, access, _)| (&array.storage, *access))
                .collect();
            self.touch_all(&touched, operation, |i| uses[i].2.to_string())?;
        }
        Ok(host)
    }
}

impl HostArrays {
    /// The arrays' mapped bytes, for a caller that found them idle itself (a captured run).
    pub(crate) fn of(ranges: Vec<MappedRange>) -> Self {
        HostArrays {
            ranges,
            deferred: None,
        }
    }

    /// Runs `work` now, or queues it for the sequence's `submit` (see [`HostArrays`]).
    fn run(&self, work: HostCopy) {
        match &self.deferred {
            None => work(),
            Some((queue, arrays)) => {
                let mut queue = queue.lock().unwrap_or_else(|p| p.into_inner());
                queue.push((arrays.clone(), work));
            }
        }
    }

    /// Copies `copy` from array `src` to array `dst` (indices into the arrays given to
    /// [`ContextInner::host_path`]).
    pub(crate) fn copy(&self, src: usize, dst: usize, copy: &BoxCopy) {
        if copy.is_empty() {
            return;
        }
        let (src, dst) = (self.ranges[src].clone(), self.ranges[dst].clone());
        let copy = copy.normalized();
        self.run(Box::new(move || copy_box(&src, &dst, &copy)));
    }

    /// Fills the first `bytes` of array `dst`, rounded up to 16, with `pattern` (the arena
    /// rounds allocations to 256 bytes, so the rounding stays in the array's own padding).
    pub(crate) fn fill(&self, dst: usize, bytes: u64, pattern: [u32; 4]) {
        let pattern: [u8; 16] = bytemuck::cast(pattern);
        // The array is idle on the GPU when this runs (`host_path` waited, or the sequence's
        // `submit` waits) and its allocation holds at least this many bytes (rounded to 256).
        let dst = self.ranges[dst].sub(0, bytes.next_multiple_of(16));
        self.run(Box::new(move || dst.fill(pattern)));
    }
}

/// Copies the (normalized) box `copy` from `src` to `dst`, whose GPU work is done; the box lies
/// inside both (checked by the op, and again by the ranges).
fn copy_box(src: &MappedRange, dst: &MappedRange, copy: &BoxCopy) {
    let row_bytes = copy.row_bytes;
    let rows: u64 = copy.outer.iter().map(|d| d.count).product();
    for row in 0..rows {
        let (mut s, mut d) = (copy.src_offset, copy.dst_offset);
        let mut rest = row;
        for dim in copy.outer.iter().rev() {
            let index = rest % dim.count;
            rest /= dim.count;
            s += index * dim.src_stride;
            d += index * dim.dst_stride;
        }
        // One long row (a contiguous update) is split over threads like a transfer.
        src.sub(s, row_bytes).copy_to(dst.sub(d, row_bytes));
    }
}
