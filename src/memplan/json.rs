//! Reading and writing memory tables in the shared memprops JSON schema.
//!
//! ```json
//! {
//!  "device": "AMD Radeon RX 6600",
//!  "vendor_id": "0x1002",
//!  "device_type": "discrete | integrated | cpu",
//!  "heaps": [ {"size": 8304721920, "flags": ["DEVICE_LOCAL", "MULTI_INSTANCE"]} ],
//!  "types": [ {"heap": 0, "flags": ["DEVICE_LOCAL"]} ],
//!  "heap_budgets": [ {"budget": 7000000000, "usage": 0} ]
//! }
//! ```
//! `heap_budgets` is optional (`VK_EXT_memory_budget`, one entry per heap); other fields
//! (`driver`, `source`, `notes`) are ignored.

use serde::Deserialize;
use serde_json::json;

use super::error::MemPlanError;
use super::table::{
    DeviceDescription, DeviceKind, HeapBudget, HeapFlags, MemoryHeap, MemoryProperties, MemoryType,
    MemoryTypeFlags,
};

#[derive(Deserialize)]
struct RawTable {
    device: String,
    vendor_id: RawId,
    device_type: String,
    heaps: Vec<RawHeap>,
    types: Vec<RawType>,
    #[serde(default)]
    heap_budgets: Option<Vec<HeapBudget>>,
}

/// The schema writes vendor ids as hex strings; plain JSON numbers are accepted too.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawId {
    Number(u64),
    Text(String),
}

#[derive(Deserialize)]
struct RawHeap {
    size: u64,
    #[serde(default)]
    flags: Vec<String>,
}

#[derive(Deserialize)]
struct RawType {
    heap: u32,
    #[serde(default)]
    flags: Vec<String>,
}

fn parse_vendor_id(raw: RawId) -> Result<u32, MemPlanError> {
    match raw {
        RawId::Number(n) => u32::try_from(n).map_err(|_| MemPlanError::BadVendorId(n.to_string())),
        RawId::Text(text) => {
            let t = text.trim();
            let parsed = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
                Some(hex) => u32::from_str_radix(hex, 16),
                None => t.parse::<u32>(),
            };
            parsed.map_err(|_| MemPlanError::BadVendorId(text))
        }
    }
}

impl DeviceDescription {
    /// Reads a memory table in the shared memprops JSON schema (see the `memplan` module docs).
    ///
    /// # Errors
    /// [`MemPlanError::Json`] for text that is not JSON or misses a field,
    /// [`MemPlanError::UnknownFlags`] naming every flag name it does not know,
    /// [`MemPlanError::BadVendorId`] and [`MemPlanError::UnknownDeviceType`]. The table itself
    /// (heap indices, type count) is checked by [`plan_memory`](super::plan_memory).
    ///
    /// ```
    /// use gpu_arena::memplan::{DeviceDescription, DeviceKind, Vendor};
    /// let text = r#"{"device": "llvmpipe", "vendor_id": "0x10005", "device_type": "cpu",
    ///   "heaps": [{"size": 2147483648, "flags": ["DEVICE_LOCAL"]}],
    ///   "types": [{"heap": 0, "flags": ["DEVICE_LOCAL", "HOST_VISIBLE", "HOST_COHERENT"]}]}"#;
    /// let device = DeviceDescription::from_json(text)?;
    /// assert_eq!(device.vendor(), Vendor::Mesa);
    /// assert_eq!(device.device_kind, DeviceKind::Cpu);
    /// # Ok::<(), gpu_arena::memplan::MemPlanError>(())
    /// ```
    pub fn from_json(text: &str) -> Result<Self, MemPlanError> {
        let raw: RawTable = serde_json::from_str(text)?;
        let vendor_id = parse_vendor_id(raw.vendor_id)?;
        let device_kind = DeviceKind::from_name(&raw.device_type)
            .ok_or_else(|| MemPlanError::UnknownDeviceType(raw.device_type.clone()))?;

        let mut unknown = Vec::new();
        let heaps = raw
            .heaps
            .into_iter()
            .enumerate()
            .map(|(i, heap)| {
                let flags = HeapFlags::from_names(&heap.flags).unwrap_or_else(|names| {
                    unknown.extend(names.iter().map(|n| format!("{n:?} (heap {i})")));
                    HeapFlags::empty()
                });
                MemoryHeap {
                    size: heap.size,
                    flags,
                }
            })
            .collect();
        let types = raw
            .types
            .into_iter()
            .enumerate()
            .map(|(i, ty)| {
                let flags = MemoryTypeFlags::from_names(&ty.flags).unwrap_or_else(|names| {
                    unknown.extend(names.iter().map(|n| format!("{n:?} (type {i})")));
                    MemoryTypeFlags::empty()
                });
                MemoryType {
                    heap: ty.heap,
                    flags,
                }
            })
            .collect();
        if !unknown.is_empty() {
            return Err(MemPlanError::UnknownFlags { unknown });
        }

        Ok(Self {
            name: raw.device,
            vendor_id,
            device_kind,
            memory: MemoryProperties { heaps, types },
            heap_budgets: raw.heap_budgets,
        })
    }

    /// Writes the description in the memprops JSON schema; [`from_json`](Self::from_json)
    /// reads it back unchanged.
    pub fn to_json(&self) -> String {
        let mut value = json!({
            "device": self.name,
            "vendor_id": format!("{:#x}", self.vendor_id),
            "device_type": self.device_kind.name(),
            "heaps": self.memory.heaps,
            "types": self.memory.types,
        });
        if let Some(budgets) = &self.heap_budgets {
            value["heap_budgets"] = json!(budgets);
        }
        // A map of strings, numbers and string lists always serializes.
        serde_json::to_string_pretty(&value).unwrap_or_default()
    }
}
