//! `AppWork`: arena arrays in the app's own render and compute passes, tracked.
//!
//! An app that draws what a kernel computed binds the array as a vertex, index, uniform,
//! storage or indirect buffer in passes it encodes itself, each array in a buffer of its own on
//! Vulkan (an alias of its memory: `backend/alias.rs`). The danger is the one of every
//! escape hatch: an array dropped while that work is queued has its memory handed to the next
//! allocation while the GPU still reads it. [`AppWork`] closes it by construction: the only way
//! to get an array's buffer range from it also records the array, and [`AppWork::submit`]
//! submits the app's command buffers and records every such array as used by that submission
//! (its memory is reused only once the submission has completed), in one call.
//!
//! Between the hand-out and the submission the work is recorded and not submitted, so the
//! arrays follow the recording model ([`crate::kernels`]): an array the work writes is pending
//! for everyone, one it reads for writers only, and a refusal names `AppWork #N`. Dropped
//! without [`AppWork::submit`], the work un-pends its arrays and logs a warning (what the app
//! encoded with them and submits itself is then not protected).
//!
//! Above `array.rs` and `context.rs` (it holds arrays' memory and submits on the context);
//! named by the crate root alone.

use crate::array::DeviceArray;
use crate::array::{
    check_context, check_not_pending_besides, Access, ArrayStorage, APP_WORK_RECORDER_BIT,
};
use crate::context::Context;
use crate::error::{AppWorkRefusal, Error, Result};
use crate::submission::SubmissionId;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Source of [`AppWork`] numbers, as refusals name them.
static NEXT_APP_WORK: AtomicU64 = AtomicU64::new(1);

/// Work the app encodes itself (render or compute passes, copies) over arena arrays, made by
/// [`Context::app_work`]. Each method hands out one array's range in the form wgpu's pass
/// takes it and records the array; [`AppWork::submit`] submits the command buffers and keeps
/// every recorded array's memory from reuse until they complete, even if the array is dropped
/// right after.
///
/// ```no_run
/// # let (ctx, positions, encoder): (gpu_arena::Context, gpu_arena::DeviceArray<[f32; 2]>, gpu_arena::wgpu::CommandEncoder) = todo!();
/// let mut work = ctx.app_work();
/// let vertices = work.vertex_buffer(&positions)?; // a wgpu::BufferSlice
/// // ... pass.set_vertex_buffer(0, vertices); pass.draw(0..n, 0..1); ...
/// drop(positions); // safe: its memory waits for the submission below
/// work.submit([encoder.finish()])?;
/// # Ok::<(), gpu_arena::Error>(())
/// ```
///
/// **Each array is a buffer of its own** in the app's passes, as the app's own buffers are, so
/// one pass may use arrays of one arena region in different ways (draw arena vertices while a
/// fragment shader writes another arena array). On Vulkan the buffers handed out are aliases:
/// a `VkBuffer` over exactly the array's allocation (its bytes rounded up to the arena's
/// 256-byte granule, [`DeviceArray::allocated_bytes`]), at offset 0 (no copy, no memory of
/// its own), made at the array's first hand-out and kept with the array; [`AppWork::submit`]
/// puts a global memory barrier before and after the app's command buffers, since wgpu does
/// not know that an alias and the region's buffer share memory. Elsewhere (GL, Metal, DX12: no
/// aliasing in wgpu) the arrays stay in their region's buffer at
/// [`DeviceArray::byte_offset`]; there the `platform` allocator
/// ([`crate::AllocatorKind::Platform`]) gives every array a region, so a buffer, of its own.
///
/// What is not safe, as with every escape hatch: handing a range out here and submitting the
/// work some other way (`queue.submit`); dropping an `AppWork` whose ranges were handed out
/// without submitting logs a warning for that reason.
///
/// Once the context knows its device is lost, every hand-out refuses with
/// [`Error::DeviceLost`], as `submit` does, before any other check. An array of another
/// context is refused ([`Error::ForeignArray`]) before its size, element type or pending
/// work is looked at.
#[must_use = "the arrays are protected only by AppWork::submit"]
pub struct AppWork {
    ctx: Context,
    /// This work's recorder number, with [`APP_WORK_RECORDER_BIT`].
    number: u64,
    /// Every array handed out, with its strongest use.
    uses: Vec<(Arc<ArrayStorage>, Access)>,
    /// Position in `uses` by storage address.
    index: HashMap<usize, usize>,
    /// Whether an array was handed out in a buffer of its own (then `submit` adds barriers).
    uses_own_buffers: bool,
}

impl Context {
    /// Starts [`AppWork`]: arrays handed to the app's own passes, then submitted with them.
    pub fn app_work(&self) -> AppWork {
        AppWork {
            ctx: self.clone(),
            number: NEXT_APP_WORK.fetch_add(1, Ordering::Relaxed) | APP_WORK_RECORDER_BIT,
            uses: Vec::new(),
            index: HashMap::new(),
            uses_own_buffers: false,
        }
    }
}

impl AppWork {
    /// The array's bytes as a vertex buffer: `pass.set_vertex_buffer(slot, slice)`.
    ///
    /// Errors: [`Error::ArrayUsage`] when [`crate::ArenaConfig::array_usages`] lacks VERTEX;
    /// [`Error::AppWork`] ([`AppWorkRefusal::EmptyArray`]) for an empty array (wgpu has no
    /// empty slices);
    /// [`Error::PendingInRecorder`] for one pending in another recorder that writes it (for
    /// [`AppWork::storage_mut`], which writes it, in one that reads it too);
    /// [`Error::ForeignArray`].
    pub fn vertex_buffer<'a, T: bytemuck::Pod>(
        &mut self,
        array: &'a DeviceArray<T>,
    ) -> Result<wgpu::BufferSlice<'a>> {
        let op = "AppWork::vertex_buffer";
        self.record(array, wgpu::BufferUsages::VERTEX, Access::Read, op)?;
        Ok(self.slice(array))
    }

    /// The array's bytes as an index buffer and the index format its element size gives
    /// (`u16`-sized elements: `Uint16`, `u32`-sized: `Uint32`):
    /// `pass.set_index_buffer(slice, format)`.
    ///
    /// Errors: as [`AppWork::vertex_buffer`] (with INDEX), and [`Error::AppWork`]
    /// ([`AppWorkRefusal::IndexElementSize`]) for elements of another size.
    pub fn index_buffer<'a, T: bytemuck::Pod>(
        &mut self,
        array: &'a DeviceArray<T>,
    ) -> Result<(wgpu::BufferSlice<'a>, wgpu::IndexFormat)> {
        let op = "AppWork::index_buffer";
        self.ready(array, op)?;
        let format = match std::mem::size_of::<T>() {
            2 => wgpu::IndexFormat::Uint16,
            4 => wgpu::IndexFormat::Uint32,
            other => {
                return Err(Error::AppWork {
                    operation: op,
                    refusal: AppWorkRefusal::IndexElementSize {
                        element: std::any::type_name::<T>(),
                        bytes: other,
                    },
                })
            }
        };
        self.record(array, wgpu::BufferUsages::INDEX, Access::Read, op)?;
        Ok((self.slice(array), format))
    }

    /// The array as an indirect-arguments buffer: `pass.draw_indirect(buffer, offset)` (or
    /// `dispatch_workgroups_indirect`) with the returned buffer and byte offset.
    ///
    /// Errors: as [`AppWork::vertex_buffer`] (with INDIRECT).
    pub fn indirect_buffer<'a, T: bytemuck::Pod>(
        &mut self,
        array: &'a DeviceArray<T>,
    ) -> Result<(&'a wgpu::Buffer, u64)> {
        let op = "AppWork::indirect_buffer";
        self.record(array, wgpu::BufferUsages::INDIRECT, Access::Read, op)?;
        Ok(self.buffer(array))
    }

    /// The array as a uniform-buffer binding, for a bind group of the app's pipeline.
    ///
    /// Errors: as [`AppWork::vertex_buffer`] (with UNIFORM), and [`Error::AppWork`]
    /// ([`AppWorkRefusal::BindingTooLarge`]) when the array is larger than the device's
    /// `max_uniform_buffer_binding_size`.
    pub fn uniform<'a, T: bytemuck::Pod>(
        &mut self,
        array: &'a DeviceArray<T>,
    ) -> Result<wgpu::BindingResource<'a>> {
        let op = "AppWork::uniform";
        self.ready(array, op)?;
        let limit = self.ctx.limits().max_uniform_buffer_binding_size;
        check_binding_size(array, limit, "max_uniform_buffer_binding_size", op)?;
        self.record(array, wgpu::BufferUsages::UNIFORM, Access::Read, op)?;
        Ok(self.binding(array))
    }

    /// The array as a storage-buffer binding the app's shader only reads (`var<storage, read>`
    /// is fine beside another array bound writable: each array is a buffer of its own here on
    /// Vulkan; see [`AppWork`]).
    ///
    /// Errors: as [`AppWork::vertex_buffer`] (with STORAGE, always allowed), and
    /// [`Error::AppWork`] ([`AppWorkRefusal::BindingTooLarge`]) when the array is larger than
    /// the device's `max_storage_buffer_binding_size`.
    pub fn storage<'a, T: bytemuck::Pod>(
        &mut self,
        array: &'a DeviceArray<T>,
    ) -> Result<wgpu::BindingResource<'a>> {
        let op = "AppWork::storage";
        self.storage_binding(array, Access::Read, op)
    }

    /// The array as a storage-buffer binding the app's shader writes: until
    /// [`AppWork::submit`], the array is pending for everyone (single ops and host reads of it
    /// are refused, naming this work; a user's `Sequence` may record work on it, and the two
    /// run in the order they are submitted).
    ///
    /// Errors: as [`AppWork::storage`].
    pub fn storage_mut<'a, T: bytemuck::Pod>(
        &mut self,
        array: &'a mut DeviceArray<T>,
    ) -> Result<wgpu::BindingResource<'a>> {
        let op = "AppWork::storage_mut";
        self.storage_binding(array, Access::Write, op)
    }

    fn storage_binding<'a, T: bytemuck::Pod>(
        &mut self,
        array: &'a DeviceArray<T>,
        access: Access,
        op: &'static str,
    ) -> Result<wgpu::BindingResource<'a>> {
        self.ready(array, op)?;
        let limit = self.ctx.limits().max_storage_buffer_binding_size;
        check_binding_size(array, limit, "max_storage_buffer_binding_size", op)?;
        self.record(array, wgpu::BufferUsages::STORAGE, access, op)?;
        Ok(self.binding(array))
    }

    /// This work's number, as refusals name it: `AppWork #N`, the `number` of the
    /// [`Recorder`](crate::error::Recorder) in an [`Error::PendingInRecorder`].
    pub fn number(&self) -> u64 {
        self.number & !APP_WORK_RECORDER_BIT
    }

    /// How many arrays this work has handed out.
    pub fn len(&self) -> usize {
        self.uses.len()
    }

    /// True when no array has been handed out.
    pub fn is_empty(&self) -> bool {
        self.uses.is_empty()
    }

    /// Submits the app's command buffers on the context's queue (after the single ops the
    /// context has gathered, so they see what every op called before wrote) and records every
    /// array handed out as used by this submission: none of them is reused before it completes,
    /// whether the array is dropped now or later. The arrays stop being pending.
    ///
    /// Errors: [`Error::DeviceLost`]; [`Error::Device`] when wgpu refuses the command buffers
    /// (for instance a pass that failed validation while it was encoded): nothing of them ran,
    /// and the arrays are intact, usable and no longer pending.
    pub fn submit(
        mut self,
        command_buffers: impl IntoIterator<Item = wgpu::CommandBuffer>,
    ) -> Result<SubmissionId> {
        let uses = std::mem::take(&mut self.uses);
        self.index.clear();
        for (storage, access) in &uses {
            storage.pending.unmark(self.number, *access);
        }
        let inner = &self.ctx.inner;
        let submission =
            inner.submission("submitting the app's command buffers (AppWork::submit)")?;
        // Arrays handed out in buffers of their own share memory with the region buffers the
        // library's work uses, which wgpu does not know: barriers on both sides order the two.
        let barrier = || {
            self.uses_own_buffers
                .then(|| crate::backend::alias_barrier(inner.device()))
                .flatten()
        };
        let command_buffers = barrier()
            .into_iter()
            .chain(command_buffers)
            .chain(barrier());
        let record = |id| {
            for (storage, _) in &uses {
                storage.record_use(id);
            }
        };
        submission.submit(command_buffers, record, ["AppWork::submit"])
    }

    /// The buffer the app's passes use for `array` and the array's offset in it
    /// ([`ArrayStorage::app_buffer`]); a buffer of the array's own makes this work order itself
    /// against the library's work with memory barriers.
    fn buffer<'a, T: bytemuck::Pod>(
        &mut self,
        array: &'a DeviceArray<T>,
    ) -> (&'a wgpu::Buffer, u64) {
        let (buffer, offset, own) = array.storage.app_buffer();
        self.uses_own_buffers |= own;
        (buffer, offset)
    }

    /// The array's data as a buffer slice (its size, not the arena's rounding).
    fn slice<'a, T: bytemuck::Pod>(&mut self, array: &'a DeviceArray<T>) -> wgpu::BufferSlice<'a> {
        let (buffer, offset) = self.buffer(array);
        buffer.slice(offset..offset + array.size_in_bytes())
    }

    /// The array as a buffer binding (its size rounded up to a word, as WGSL arrays need).
    fn binding<'a, T: bytemuck::Pod>(
        &mut self,
        array: &'a DeviceArray<T>,
    ) -> wgpu::BindingResource<'a> {
        let (buffer, offset) = self.buffer(array);
        wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer,
            offset,
            size: wgpu::BufferSize::new(array.size_in_bytes().next_multiple_of(4)),
        })
    }

    /// What every hand-out checks first: the device is not known lost, and the array is this
    /// context's.
    fn ready<T: bytemuck::Pod>(
        &self,
        array: &DeviceArray<T>,
        operation: &'static str,
    ) -> Result<()> {
        self.ctx.inner.check_device(operation)?;
        check_context(&array.storage, &self.ctx.inner, operation)
    }

    /// Checks that `array` may be used as `usage` with `access` now, then records it (a
    /// refusal records nothing).
    fn record<T: bytemuck::Pod>(
        &mut self,
        array: &DeviceArray<T>,
        usage: wgpu::BufferUsages,
        access: Access,
        operation: &'static str,
    ) -> Result<()> {
        self.ready(array, operation)?;
        let storage = &array.storage;
        let allowed = self.ctx.config().array_usages;
        if !allowed.contains(usage) {
            return Err(Error::ArrayUsage {
                operation,
                missing: usage - allowed,
                allowed,
            });
        }
        if array.size_in_bytes() == 0 {
            return Err(Error::AppWork {
                operation,
                refusal: AppWorkRefusal::EmptyArray {
                    array: Box::new(storage.description()),
                },
            });
        }
        let key = Arc::as_ptr(storage) as usize;
        let own = self.index.get(&key).map(|&i| self.uses[i].1);
        if own >= Some(access) {
            return Ok(());
        }
        // Another recorder's unsubmitted work this use would overtake (this work's own mark
        // aside): a write of the array, or for a write any use.
        let others_write = storage.pending.others(Access::Write, own) > 0;
        let others_read = storage.pending.others(Access::Read, own) > 0;
        if others_write || (access == Access::Write && others_read) {
            check_not_pending_besides(storage, access, Some(self.number), operation, "the array")?;
        }
        storage.pending.mark(self.number, access, own);
        match self.index.get(&key) {
            Some(&i) => self.uses[i].1 = access,
            None => {
                self.index.insert(key, self.uses.len());
                self.uses.push((Arc::clone(storage), access));
            }
        }
        Ok(())
    }
}

impl Drop for AppWork {
    fn drop(&mut self) {
        if self.uses.is_empty() {
            return;
        }
        for (storage, access) in &self.uses {
            storage.pending.unmark(self.number, *access);
        }
        log::warn!(
            "gpu-arena: AppWork #{} was dropped with {} handed out and not submitted: work that uses them must be submitted with AppWork::submit, or it is not protected against their memory being reused",
            self.number & !APP_WORK_RECORDER_BIT,
            crate::count::count(self.uses.len(), "array")
        );
    }
}

/// Errors when the array's binding (its bytes rounded up to a word) exceeds the device's
/// `limit_name` (`limit` bytes).
fn check_binding_size<T: bytemuck::Pod>(
    array: &DeviceArray<T>,
    limit: u64,
    limit_name: &'static str,
    operation: &'static str,
) -> Result<()> {
    let bytes = array.size_in_bytes().next_multiple_of(4);
    if bytes <= limit {
        return Ok(());
    }
    Err(Error::AppWork {
        operation,
        refusal: AppWorkRefusal::BindingTooLarge {
            array: Box::new(array.storage.description()),
            bytes,
            limit,
            limit_name,
        },
    })
}
