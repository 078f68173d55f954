//! Why a memory table could not be read or planned.

/// What went wrong reading a memory table or planning memory for it.
///
/// Reading errors come from [`DeviceDescription::from_json`](super::DeviceDescription::from_json);
/// planning errors from [`plan_memory`](super::plan_memory), and name the device.
#[derive(Debug, thiserror::Error)]
pub enum MemPlanError {
    /// The text is not JSON, or lacks a field of the memprops schema, or a field has the wrong
    /// type (the message says which, with line and column).
    #[error("memory table is not valid memprops JSON: {0}")]
    Json(serde_json::Error),

    /// Flag names the schema does not know, each with where it was found.
    #[error(
        "unknown flag {} {}; memory type flags are {}, heap flags are {}",
        if .unknown.len() == 1 { "name" } else { "names" },
        .unknown.join(", "),
        super::table::MemoryTypeFlags::NAMED.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", "),
        super::table::HeapFlags::NAMED.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", "),
    )]
    UnknownFlags {
        /// Each unknown name with its place, e.g. `"HOST_VISIBEL" (type 3)`.
        unknown: Vec<String>,
    },

    /// `vendor_id` is neither a hex string (`"0x10de"`), a decimal string nor a JSON number
    /// that fits 32 bits (a negative or fractional number, a bool, text).
    #[error("vendor_id {0:?} is not a PCI vendor id: write it as a hex string like \"0x10de\"")]
    BadVendorId(String),

    /// `device_type` is not one of the known kinds.
    #[error("device_type {0:?} is not one of discrete, integrated, cpu, virtual, other")]
    UnknownDeviceType(String),

    /// The table has no memory types at all.
    #[error("{device}: the memory table has no memory types, so nothing can be allocated")]
    NoMemoryTypes {
        /// The device name.
        device: String,
    },

    /// More types than a 32-bit `memory_type_bits` mask can address.
    #[error(
        "{device}: the memory table has {count} memory types; Vulkan allows at most 32 \
         (VK_MAX_MEMORY_TYPES) and type masks are 32 bits"
    )]
    TooManyTypes {
        /// The device name.
        device: String,
        /// How many types the table has.
        count: usize,
    },

    /// A memory type names a heap the table does not have.
    #[error(
        "{device}: memory type {type_index} is on heap {heap}, but the table has only {}",
        crate::count::count(*.heap_count, "heap")
    )]
    HeapOutOfRange {
        /// The device name.
        device: String,
        /// The memory type's index.
        type_index: u32,
        /// The heap index it names.
        heap: u32,
        /// How many heaps the table has.
        heap_count: usize,
    },

    /// No usable memory type is host-visible, so data cannot be staged in or out.
    #[error(
        "{device}: no usable HOST_VISIBLE memory type, so uploads and readbacks cannot be \
         staged{skipped}"
    )]
    NoHostVisibleType {
        /// The device name.
        device: String,
        /// Which types were skipped and why (empty, or starting with `"; "`).
        skipped: String,
    },
}

/// Kept for `?` on a `serde_json` error: the JSON error is in the message, and not also
/// `source()`, so a chain printer states it once.
impl From<serde_json::Error> for MemPlanError {
    fn from(error: serde_json::Error) -> Self {
        MemPlanError::Json(error)
    }
}
