//! `copy`: an explicit transfer into a new array, within a memory kind or between kinds
//! (`offload`, `prefetch`: JAX's `device_put` to another memory kind).

use super::update_slice::whole_array;
use crate::array::{Access, DeviceArray};
use crate::compute::Sequence;
use crate::context::Context;
use crate::donated::{give_back, Donated, DonatedResult};
use crate::error::Result;
use crate::memory_kind::MemoryKind;
use crate::step::{BufferCopy, Step};
use crate::transfer::TransferDirection;

impl Context {
    /// A new array with the same shape, contents and memory kind as `array`: an **explicit**
    /// device-to-device transfer, checked by the transfer guard and counted in
    /// [`Context::transfer_stats`]. The copy runs as a `vec4` kernel, which moves several times
    /// the bytes per second of `copy_buffer_to_buffer` on some Vulkan drivers.
    ///
    /// Errors: [`Error::ForeignArray`](crate::Error::ForeignArray) for an array of another context
    /// (copy it across with [`Context::device_put_from`]), the guard's refusal (`disallow_explicit`
    /// for device-to-device), out-of-memory.
    ///
    /// ```no_run
    /// # let ctx = gpu_arena::Context::new(gpu_arena::ArenaConfig::default())?;
    /// let a = ctx.device_put(&[1u8, 2, 3], &[3])?;
    /// let b = ctx.copy(&a)?;
    /// assert_eq!(ctx.device_get(&b)?, [1, 2, 3]);
    /// # Ok::<(), gpu_arena::Error>(())
    /// ```
    #[track_caller]
    pub fn copy<T: bytemuck::Pod>(&self, array: &DeviceArray<T>) -> Result<DeviceArray<T>> {
        self.copy_as(array, "copy")
    }

    /// [`Context::copy`], named `operation` in its refusals (`device_put_from` and `copy_to`
    /// copy an array of this context through it).
    #[track_caller]
    pub(crate) fn copy_as<T: bytemuck::Pod>(
        &self,
        array: &DeviceArray<T>,
        operation: &'static str,
    ) -> Result<DeviceArray<T>> {
        self.check_eager_array(&array.storage, Access::Read, operation, "the array")?;
        let mut sequence = self.single_op();
        let result = sequence.copy(array)?;
        sequence.submit()?;
        Ok(result)
    }

    /// Moves the donated `array` to pinned host memory ([`MemoryKind::PinnedHost`]): a new array of
    /// the same shape, contents and label there (its site is this call's line), copied on the GPU's
    /// copy path (`copy_buffer_to_buffer`; on a CPU adapter with both arrays mapped and idle, a
    /// `memcpy`), gathered with the other single ops like every op. The source's memory returns to
    /// its arena once the copy has run. An array already in pinned host memory comes back as it is,
    /// with no copy (no transfer: neither guarded nor counted). An **explicit** device-to-host
    /// transfer: guarded, counted in [`Context::transfer_stats`], on the timeline. JAX:
    /// `jax.device_put(x, sharding.with_memory_kind("pinned_host"))`.
    ///
    /// Errors: the guard's refusal, out-of-memory of the pinned-host kind (its limit is
    /// [`ArenaConfig::pinned_host_bytes`](crate::ArenaConfig)),
    /// [`Error::MemoryKindUnavailable`](crate::Error::MemoryKindUnavailable), and those of
    /// [`Context::copy`]; **on error the donated array comes back intact** in
    /// [`Donated::array`], and nothing was allocated.
    ///
    /// ```no_run
    /// use gpu_arena::MemoryKind;
    /// # let ctx = gpu_arena::Context::new(gpu_arena::ArenaConfig::default())?;
    /// let activation = ctx.device_put(&[1.0f32; 256], &[256])?;
    /// let saved = ctx.offload(activation)?; // device memory is free for the next layer
    /// assert_eq!(saved.memory_kind(), MemoryKind::PinnedHost);
    /// let back = ctx.prefetch(saved)?; // before its backward use
    /// assert_eq!(ctx.device_get(&back)?, [1.0f32; 256]);
    /// # Ok::<(), gpu_arena::Error>(())
    /// ```
    #[track_caller]
    pub fn offload<T: bytemuck::Pod>(&self, array: DeviceArray<T>) -> DonatedResult<T> {
        self.move_to(array, MemoryKind::PinnedHost, "offload")
    }

    /// Moves the donated `array` to device memory ([`MemoryKind::Device`]): the reverse of
    /// [`Context::offload`], with its rules (an **explicit** host-to-device transfer; an array
    /// already in device memory comes back as it is, neither guarded nor counted; **on error
    /// the donated array comes back intact**).
    #[track_caller]
    pub fn prefetch<T: bytemuck::Pod>(&self, array: DeviceArray<T>) -> DonatedResult<T> {
        self.move_to(array, MemoryKind::Device, "prefetch")
    }

    #[track_caller]
    fn move_to<T: bytemuck::Pod>(
        &self,
        array: DeviceArray<T>,
        kind: MemoryKind,
        operation: &'static str,
    ) -> DonatedResult<T> {
        let checked = self.check_eager_array(&array.storage, Access::Read, operation, "the array");
        if let Err(error) = checked {
            return Err(Donated { error, array });
        }
        if array.memory_kind() == kind {
            return Ok(array);
        }
        let mut sequence = self.single_op();
        let outcome = sequence
            .copy_to(&array, kind, operation)
            .and_then(|moved| sequence.submit().map(|_| moved));
        match outcome {
            // The source's handle goes; the copy's submission holds its memory until it ran.
            Ok(moved) => Ok(with_label_of(&array, moved)),
            Err(error) => Err(Donated { error, array }),
        }
    }
}

/// `moved`, `array` moved to other memory, named as `array` is: it is the same array.
fn with_label_of<T: bytemuck::Pod>(
    array: &DeviceArray<T>,
    moved: DeviceArray<T>,
) -> DeviceArray<T> {
    let storage = &array.storage;
    let label = (storage.ctx.lock_memory()).label(storage.kind, storage.allocation.id);
    match label {
        Some(label) => moved.with_label(&label),
        None => moved,
    }
}

/// The direction a copy from memory of `from` to memory of `to` counts as: out to the host
/// kind, in from it, else within the device.
fn direction(from: MemoryKind, to: MemoryKind) -> TransferDirection {
    match (from, to) {
        (MemoryKind::Device, MemoryKind::PinnedHost) => TransferDirection::DeviceToHost,
        (MemoryKind::PinnedHost, MemoryKind::Device) => TransferDirection::HostToDevice,
        _ => TransferDirection::DeviceToDevice,
    }
}

impl Sequence {
    /// [`Context::copy`], recorded: guarded and counted when recorded; in a
    /// [`Capture`](crate::Capture), guarded when recorded and counted by every run.
    #[track_caller]
    pub fn copy<T: bytemuck::Pod>(&mut self, array: &DeviceArray<T>) -> Result<DeviceArray<T>> {
        self.copy_to(array, array.memory_kind(), "copy")
    }

    /// [`Context::offload`], recorded: guarded and counted when recorded. In a
    /// [`Capture`](crate::Capture) it is guarded when recorded and counted by every run, and
    /// the pinned-host array is not one of the step's temporaries: it is an array of its own,
    /// which every run of the step writes.
    #[track_caller]
    pub fn offload<T: bytemuck::Pod>(&mut self, array: DeviceArray<T>) -> DonatedResult<T> {
        self.move_to(array, MemoryKind::PinnedHost, "offload")
    }

    /// [`Context::prefetch`], recorded: guarded and counted when recorded; in a
    /// [`Capture`](crate::Capture), guarded when recorded and counted by every run.
    #[track_caller]
    pub fn prefetch<T: bytemuck::Pod>(&mut self, array: DeviceArray<T>) -> DonatedResult<T> {
        self.move_to(array, MemoryKind::Device, "prefetch")
    }

    #[track_caller]
    fn move_to<T: bytemuck::Pod>(
        &mut self,
        array: DeviceArray<T>,
        kind: MemoryKind,
        operation: &'static str,
    ) -> DonatedResult<T> {
        if array.memory_kind() == kind {
            // No copy, but the refusals of one: a lost device, another context's array.
            let checked = array.check_same_context(&self.ctx.inner, operation);
            return give_back(array, checked);
        }
        match self.copy_to(&array, kind, operation) {
            // The source's handle goes; the recorded copy holds its memory until it has run.
            Ok(moved) => Ok(with_label_of(&array, moved)),
            Err(error) => Err(Donated { error, array }),
        }
    }

    /// A new array of `kind` with the contents of `array`, recorded as `operation`.
    #[track_caller]
    fn copy_to<T: bytemuck::Pod>(
        &mut self,
        array: &DeviceArray<T>,
        kind: MemoryKind,
        operation: &'static str,
    ) -> Result<DeviceArray<T>> {
        array.check_same_context(&self.ctx.inner, operation)?;
        let bytes = array.size_in_bytes();
        let started = std::time::Instant::now();
        let direction = direction(array.memory_kind(), kind);
        self.ctx.inner.guard(direction, bytes, operation, true)?;
        let result = self.new_array_in::<T>(kind, array.shape(), None, operation)?;
        let uses = [
            (array, Access::Read, "the array"),
            (&result, Access::Write, "the copy"),
        ];
        match self.host_path_now(&uses, operation)? {
            Some(host) => host.copy(0, 1, &whole_array(array)),
            // Between kinds: the copy path (`copy_buffer_to_buffer`, the DMA engine on discrete
            // GPUs), leaving the compute units to the kernels it overlaps with.
            None if array.memory_kind() != kind => {
                for (used, access, name) in uses {
                    self.touch_array(used, access, operation, name)?;
                }
                let size = (array.storage.allocation.size).min(result.storage.allocation.size);
                if size > 0 {
                    self.steps.push(Step::Copy(BufferCopy {
                        src: array.storage.buffer.clone(),
                        src_offset: array.storage.allocation.offset,
                        dst: result.storage.buffer.clone(),
                        dst_offset: result.storage.allocation.offset,
                        size,
                    }));
                }
            }
            None => self.record_copies(
                &[(array, &result, whole_array(array))],
                ("the array", "the copy"),
                operation,
            )?,
        }
        self.count_array_transfer(direction, bytes, started);
        Ok(result)
    }
}
