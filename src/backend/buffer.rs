//! A buffer as a backend makes it ([`DeviceBuffer`]: the buffer, its mapping, its memory type)
//! and how making one fails ([`BufferFailure`], [`check_buffer_size`]). Both backends return
//! these and the region table in `mod.rs` keeps them, so they sit below all three.

use super::alias::AliasableMemory;
use super::mapped::MappedRange;
use crate::arena::RegionRefusal;
use crate::error::Error;

/// Why a backend could not make a buffer: the step that failed (with the buffer's label and
/// size) and the typed refusal. The arena reads the refusal; everyone else gets the crate's
/// [`Error`] (`From`): [`Error::DeviceLost`] for a lost device, [`Error::BufferRefused`] with
/// the refusal for the rest.
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
            refusal => Error::BufferRefused {
                during: failure.during,
                refusal,
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
    /// Its memory, for buffers of their own over parts of it (Vulkan only).
    pub(crate) aliases: Option<std::sync::Arc<AliasableMemory>>,
}

/// What an array holds of its region: the buffer, the host mapping when zero-copy access is
/// allowed, and the memory the app's passes alias (Vulkan).
pub(crate) struct ArrayRegion {
    pub(crate) buffer: wgpu::Buffer,
    pub(crate) mapped: Option<MappedRange>,
    pub(crate) aliases: Option<std::sync::Arc<AliasableMemory>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(refusal: RegionRefusal) -> Error {
        Error::from(BufferFailure {
            during: "creating a buffer (staging, 4096 bytes)".into(),
            refusal,
        })
    }

    #[test]
    fn a_refused_buffer_keeps_its_kind_and_values_in_the_crate_error() {
        match failure(RegionRefusal::out_of_memory(
            "VK_ERROR_OUT_OF_DEVICE_MEMORY",
        )) {
            Error::BufferRefused {
                during,
                refusal: RegionRefusal::OutOfMemory { reason },
            } => {
                assert!(during.contains("4096 bytes"), "{during}");
                assert_eq!(reason, "VK_ERROR_OUT_OF_DEVICE_MEMORY");
            }
            other => panic!("expected BufferRefused(OutOfMemory), got {other:?}"),
        }
        let too_large = failure(check_buffer_size(1 << 20, 1 << 10, "maxBufferSize").unwrap_err());
        let text = too_large.to_string();
        match too_large {
            Error::BufferRefused {
                refusal:
                    RegionRefusal::TooLarge {
                        size,
                        limit,
                        limit_name,
                    },
                ..
            } => assert_eq!(
                (size, limit, limit_name),
                (1 << 20, 1 << 10, "maxBufferSize")
            ),
            other => panic!("expected BufferRefused(TooLarge), got {other:?}"),
        }
        assert!(
            text.contains("maxBufferSize") && text.contains("GPU_ARENA_STAGING_MB"),
            "{text}"
        );
        // The refusal is stated once, in the message; the typed value is the field.
        let refused = failure(RegionRefusal::out_of_memory("no room here"));
        assert_eq!(refused.to_string().matches("no room here").count(), 1);
        assert!(std::error::Error::source(&refused).is_none());
        assert!(matches!(
            refused,
            Error::BufferRefused {
                refusal: RegionRefusal::OutOfMemory { .. },
                ..
            }
        ));
        match failure(RegionRefusal::DeviceLost {
            reason: "reset".into(),
        }) {
            Error::DeviceLost { reason, .. } => assert_eq!(reason, "reset"),
            other => panic!("expected DeviceLost, got {other:?}"),
        }
    }
}
