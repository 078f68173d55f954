//! A buffer as a backend makes it ([`DeviceBuffer`]: the buffer, its mapping, its memory type)
//! and how making one fails ([`BufferFailure`], [`check_buffer_size`]). Both backends return
//! these and the region table in `mod.rs` keeps them, so they sit below all three.

use super::mapped::MappedRange;
use crate::arena::RegionRefusal;
use crate::error::Error;

/// Why a backend could not make a buffer: the step that failed (with the buffer's label and
/// size) and the typed refusal. The arena reads the refusal; everyone else gets the crate's
/// [`Error`] (`From`).
#[derive(Debug)]
pub(crate) struct BufferFailure {
    /// What was being done, e.g. `allocating device memory (gpu-arena region 3, 1024 bytes)`.
    pub(crate) during: String,
    /// How it failed.
    pub(crate) refusal: RegionRefusal,
}

impl From<BufferFailure> for Error {
    fn from(failure: BufferFailure) -> Self {
        match failure.refusal {
            RegionRefusal::DeviceLost { reason } => Error::DeviceLost {
                during: failure.during,
                reason,
            },
            refusal => Error::Backend {
                during: failure.during,
                reason: refusal.to_string(),
            },
        }
    }
}

/// Refuses a buffer of `size` bytes above the device limit `limit` (named `limit_name`): a size
/// the device never gives, however much memory is free.
pub(crate) fn check_buffer_size(
    size: u64,
    limit: u64,
    limit_name: &'static str,
) -> std::result::Result<(), RegionRefusal> {
    match size > limit {
        true => Err(RegionRefusal::TooLarge {
            size,
            limit,
            limit_name,
        }),
        false => Ok(()),
    }
}

/// A buffer made by a backend, with its mapping when the memory is host-visible (the mapping
/// keeps the memory allocated on its own, whatever happens to the buffer).
pub(crate) struct DeviceBuffer {
    pub(crate) buffer: wgpu::Buffer,
    pub(crate) mapped: Option<MappedRange>,
    /// The Vulkan memory type behind it (None on non-Vulkan backends).
    pub(crate) memory_type: Option<u32>,
}
