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
//! `heap_budgets` is optional (`VK_EXT_memory_budget`, one entry per heap; a list of another
//! length is not used, and the plan's reasons say so); other fields (`driver`, `source`,
//! `notes`) are ignored.

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

/// The schema writes vendor ids as hex strings (`"0x1002"`); decimal strings (`"4098"`) and
/// plain JSON numbers are accepted too. Anything else (a negative or fractional number, a
/// bool) is kept to be refused as [`MemPlanError::BadVendorId`].
#[derive(Deserialize)]
#[serde(untagged)]
enum RawId {
    Number(u64),
    Text(String),
    Other(serde_json::Value),
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
        RawId::Other(value) => Err(MemPlanError::BadVendorId(value.to_string())),
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

#[cfg(test)]
mod tests {
    use super::*;

    const LAVAPIPE: &str = r#"{"device": "llvmpipe", "vendor_id": "0x10005", "device_type": "cpu",
        "heaps": [{"size": 2147483648, "flags": ["DEVICE_LOCAL"]}],
        "types": [{"heap": 0, "flags": ["DEVICE_LOCAL", "HOST_VISIBLE", "HOST_COHERENT"]}]}"#;

    fn error_of(text: &str) -> String {
        DeviceDescription::from_json(text)
            .expect_err("the table should be refused")
            .to_string()
    }

    #[test]
    fn a_schema_table_reads_with_its_flags_and_kind() {
        let device = DeviceDescription::from_json(LAVAPIPE).unwrap();
        assert_eq!(device.name, "llvmpipe");
        assert_eq!(device.vendor_id, 0x10005);
        assert_eq!(device.device_kind, DeviceKind::Cpu);
        assert_eq!(device.memory.heaps[0].flags, HeapFlags::DEVICE_LOCAL);
        assert_eq!(
            device.memory.types[0].flags,
            MemoryTypeFlags::DEVICE_LOCAL
                | MemoryTypeFlags::HOST_VISIBLE
                | MemoryTypeFlags::HOST_COHERENT
        );
        assert_eq!(device.heap_budgets, None);
    }

    #[test]
    fn writing_then_reading_gives_the_same_description() {
        let mut device = DeviceDescription::from_json(LAVAPIPE).unwrap();
        device.heap_budgets = Some(vec![HeapBudget {
            budget: 1 << 30,
            usage: 12345,
        }]);
        device.memory.types[0].flags = device.memory.types[0].flags | MemoryTypeFlags(0x100);
        let again = DeviceDescription::from_json(&device.to_json()).unwrap();
        assert_eq!(again, device);
    }

    #[test]
    fn vendor_ids_read_as_hex_strings_decimal_strings_or_numbers() {
        for (id, want) in [
            (r#""0x10DE""#, 0x10de),
            (r#""4318""#, 4318),
            ("4098", 0x1002),
        ] {
            let text = LAVAPIPE.replace(r#""0x10005""#, id);
            assert_eq!(DeviceDescription::from_json(&text).unwrap().vendor_id, want);
        }
    }

    #[test]
    fn text_that_is_not_json_is_refused_with_its_position() {
        let message = error_of("{ not json");
        assert!(message.contains("not valid memprops JSON"), "{message}");
        assert!(message.contains("line 1"), "{message}");
    }

    #[test]
    fn a_missing_field_is_named() {
        let message =
            error_of(r#"{"device": "x", "vendor_id": "0x1", "device_type": "cpu", "heaps": []}"#);
        assert!(message.contains("missing field `types`"), "{message}");
    }

    #[test]
    fn unknown_flag_names_are_all_named_with_their_place() {
        let text = LAVAPIPE
            .replace(r#""HOST_COHERENT""#, r#""HOST_COHERNET""#)
            .replace(r#"["DEVICE_LOCAL"]"#, r#"["DEVICE_LOCAL", "FAST"]"#);
        let message = error_of(&text);
        assert!(message.contains(r#""HOST_COHERNET" (type 0)"#), "{message}");
        assert!(message.contains(r#""FAST" (heap 0)"#), "{message}");
        assert!(
            message.contains("HOST_COHERENT"),
            "lists the known names: {message}"
        );
    }

    #[test]
    fn a_vendor_id_that_is_not_a_number_is_refused() {
        let message = error_of(&LAVAPIPE.replace(r#""0x10005""#, r#""nvidia""#));
        assert!(
            message.contains(r#"vendor_id "nvidia" is not a PCI vendor id"#),
            "{message}"
        );
        let message = error_of(&LAVAPIPE.replace(r#""0x10005""#, "99999999999"));
        assert!(message.contains("99999999999"), "{message}");
    }

    #[test]
    fn an_unknown_device_type_is_refused() {
        let message = error_of(&LAVAPIPE.replace(r#""cpu""#, r#""quantum""#));
        assert!(
            message.contains(r#"device_type "quantum" is not one of"#),
            "{message}"
        );
    }
}
