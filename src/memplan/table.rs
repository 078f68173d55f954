//! The input of the policy: a device's memory table, vendor and kind, in plain Rust types.
//!
//! The flag types use Vulkan's bit values, so the Vulkan backend converts a
//! `vk::PhysicalDeviceMemoryProperties` with `MemoryTypeFlags(flags.as_raw())` and
//! `HeapFlags(flags.as_raw())`, and nothing here depends on ash or wgpu.

use std::fmt;
use std::ops::BitOr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Defines a set of Vulkan flag bits: the struct, its named constants, set operations, a
/// `NAME|NAME` display and serde as a list of names (the shared memprops schema's form).
macro_rules! flag_set {
    (
        $(#[$meta:meta])*
        $name:ident {
            $( $(#[$flag_meta:meta])* $flag:ident = $bit:expr; )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name(pub u32);

        impl $name {
            $( $(#[$flag_meta])* pub const $flag: Self = Self($bit); )*

            /// Every flag this type names, with its Vulkan name (no prefix, no `_BIT`).
            pub const NAMED: &'static [(&'static str, Self)] = &[$( (stringify!($flag), Self::$flag), )*];

            /// No flags.
            pub const fn empty() -> Self {
                Self(0)
            }

            /// True when every bit of `other` is set in `self` (true for an empty `other`).
            pub const fn contains(self, other: Self) -> bool {
                self.0 & other.0 == other.0
            }

            /// True when `self` and `other` share at least one bit.
            pub const fn intersects(self, other: Self) -> bool {
                self.0 & other.0 != 0
            }

            /// True when no bit is set.
            pub const fn is_empty(self) -> bool {
                self.0 == 0
            }

            /// The flag with this name: Vulkan's name, with or without its
            /// `VK_`/`MEMORY_PROPERTY_`/`MEMORY_HEAP_` prefix and its `_BIT` (which a vendor's
            /// flag has before the vendor: `VK_MEMORY_PROPERTY_DEVICE_COHERENT_BIT_AMD`), in
            /// any case, blanks around it ignored; or a hex number such as `0x100` for bits
            /// this type does not name.
            pub fn from_name(name: &str) -> Option<Self> {
                let trimmed = name.trim();
                if let Some(hex) = trimmed.strip_prefix("0x").or_else(|| trimmed.strip_prefix("0X")) {
                    return u32::from_str_radix(hex, 16).ok().map(Self);
                }
                let upper = trimmed.to_ascii_uppercase();
                let mut bare = upper.as_str();
                for prefix in ["VK_", "MEMORY_PROPERTY_", "MEMORY_HEAP_"] {
                    bare = bare.strip_prefix(prefix).unwrap_or(bare);
                }
                let bare = match bare.strip_suffix("_BIT") {
                    Some(plain) => plain.to_string(),
                    // A vendor's flag: `_BIT` before the vendor's tag (`..._BIT_AMD`).
                    None => match bare.rsplit_once("_BIT_") {
                        Some((flag, vendor)) if !vendor.contains('_') => format!("{flag}_{vendor}"),
                        _ => bare.to_string(),
                    },
                };
                Self::NAMED.iter().find(|(n, _)| *n == bare).map(|&(_, flag)| flag)
            }

            /// Parses a list of names; on failure returns every name it did not know.
            pub fn from_names<S: AsRef<str>>(names: &[S]) -> Result<Self, Vec<String>> {
                let mut flags = Self::empty();
                let mut unknown = Vec::new();
                for name in names {
                    match Self::from_name(name.as_ref()) {
                        Some(flag) => flags = flags | flag,
                        None => unknown.push(name.as_ref().to_string()),
                    }
                }
                if unknown.is_empty() { Ok(flags) } else { Err(unknown) }
            }

            /// The names of the set bits, in bit order; bits without a name come last as one
            /// hex number, so `from_names(&flags.names())` gives `flags` back.
            pub fn names(self) -> Vec<String> {
                let mut names = Vec::new();
                let mut rest = self.0;
                for &(name, flag) in Self::NAMED {
                    if self.contains(flag) {
                        names.push(name.to_string());
                        rest &= !flag.0;
                    }
                }
                if rest != 0 {
                    names.push(format!("{rest:#x}"));
                }
                names
            }
        }

        impl BitOr for $name {
            type Output = Self;
            fn bitor(self, other: Self) -> Self {
                Self(self.0 | other.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                if self.is_empty() {
                    f.write_str("(none)")
                } else {
                    f.write_str(&self.names().join("|"))
                }
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                self.names().serialize(serializer)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let names = Vec::<String>::deserialize(deserializer)?;
                Self::from_names(&names).map_err(|unknown| {
                    serde::de::Error::custom(format!(
                        "unknown {} {} {}",
                        stringify!($name),
                        if unknown.len() == 1 { "name" } else { "names" },
                        unknown.join(", ")
                    ))
                })
            }
        }
    };
}

flag_set! {
    /// Property flags of a memory type (`VkMemoryPropertyFlags`, same bit values).
    ///
    /// ```
    /// use gpu_arena::memplan::MemoryTypeFlags as F;
    /// let bar = F::DEVICE_LOCAL | F::HOST_VISIBLE | F::HOST_COHERENT;
    /// assert!(bar.contains(F::DEVICE_LOCAL | F::HOST_VISIBLE));
    /// assert_eq!(bar.to_string(), "DEVICE_LOCAL|HOST_VISIBLE|HOST_COHERENT");
    /// ```
    MemoryTypeFlags {
        /// Fast for the device (VRAM on a discrete GPU; all memory on UMA).
        DEVICE_LOCAL = 0x1;
        /// The host can map it.
        HOST_VISIBLE = 0x2;
        /// Host writes and reads need no flush or invalidate.
        HOST_COHERENT = 0x4;
        /// Cached on the host: fast host reads (else write-combined: fast host writes only).
        HOST_CACHED = 0x8;
        /// Backed lazily: only for transient attachments, never buffers.
        LAZILY_ALLOCATED = 0x10;
        /// Protected-content memory: only for protected resources.
        PROTECTED = 0x20;
        /// AMD: coherent between device and host without cache flushes; needs
        /// `VK_AMD_device_coherent_memory` and is slow.
        DEVICE_COHERENT_AMD = 0x40;
        /// AMD: bypasses the device caches; needs `VK_AMD_device_coherent_memory` and is slow.
        DEVICE_UNCACHED_AMD = 0x80;
    }
}

flag_set! {
    /// Flags of a memory heap (`VkMemoryHeapFlags`, same bit values).
    HeapFlags {
        /// The heap is device-local (VRAM on a discrete GPU).
        DEVICE_LOCAL = 0x1;
        /// Replicated on every physical device of a device group.
        MULTI_INSTANCE = 0x2;
    }
}

/// One memory heap: a pool of bytes the device can allocate from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryHeap {
    /// Size in bytes, as the driver reports it (the whole heap, not what is free).
    pub size: u64,
    /// Heap flags.
    pub flags: HeapFlags,
}

/// One memory type: a way of using a heap, with its property flags.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryType {
    /// Index of the heap this type allocates from.
    pub heap: u32,
    /// Property flags.
    pub flags: MemoryTypeFlags,
}

/// A device's memory table (`VkPhysicalDeviceMemoryProperties`): heaps and types in the
/// driver's order, so a type's position is its Vulkan memory type index.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryProperties {
    /// The heaps; a heap's position is its index.
    pub heaps: Vec<MemoryHeap>,
    /// The types; a type's position is its index.
    pub types: Vec<MemoryType>,
}

impl MemoryProperties {
    /// The heap of memory type `type_index`, or `None` when either index is out of range.
    pub fn heap_of(&self, type_index: u32) -> Option<&MemoryHeap> {
        let ty = self.types.get(type_index as usize)?;
        self.heaps.get(ty.heap as usize)
    }
}

/// Heaps for tests, as a discrete GPU has them: 8 GiB of VRAM (heap 0, device-local) and
/// 16 GiB of host memory (heap 1, no flags).
#[cfg(test)]
pub(crate) fn vram_and_host_heaps() -> Vec<MemoryHeap> {
    vec![
        MemoryHeap {
            size: 8 << 30,
            flags: HeapFlags::DEVICE_LOCAL,
        },
        MemoryHeap {
            size: 16 << 30,
            flags: HeapFlags::empty(),
        },
    ]
}

/// What kind of device this is (`VkPhysicalDeviceType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    /// A discrete GPU with its own VRAM behind PCIe.
    Discrete,
    /// An integrated GPU or APU (Intel iGPU, AMD APU, Apple M-series): shares host DRAM.
    Integrated,
    /// A software device on the CPU (lavapipe/llvmpipe, SwiftShader).
    Cpu,
    /// A virtualised GPU; its memory may look like either of the above.
    Virtual,
    /// Anything else the driver reports.
    Other,
}

impl DeviceKind {
    /// Parses `discrete`, `integrated`, `cpu`, `virtual` or `other` (any case, with or
    /// without a `_gpu` suffix or Vulkan's `PHYSICAL_DEVICE_TYPE_` prefix).
    pub fn from_name(name: &str) -> Option<Self> {
        let lower = name.trim().to_ascii_lowercase();
        let bare = lower.strip_prefix("vk_").unwrap_or(&lower);
        let bare = bare.strip_prefix("physical_device_type_").unwrap_or(bare);
        let bare = bare.strip_suffix("_gpu").unwrap_or(bare);
        match bare {
            "discrete" => Some(Self::Discrete),
            "integrated" => Some(Self::Integrated),
            "cpu" => Some(Self::Cpu),
            "virtual" => Some(Self::Virtual),
            "other" => Some(Self::Other),
            _ => None,
        }
    }

    /// The name the shared schema uses (`discrete`, `integrated`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Self::Discrete => "discrete",
            Self::Integrated => "integrated",
            Self::Cpu => "cpu",
            Self::Virtual => "virtual",
            Self::Other => "other",
        }
    }
}

/// PCI vendor ids (and Khronos' `VK_VENDOR_ID_MESA` for lavapipe/llvmpipe).
const AMD_ID: u32 = 0x1002;
const NVIDIA_ID: u32 = 0x10de;
const INTEL_ID: u32 = 0x8086;
const APPLE_ID: u32 = 0x106b;
const MESA_ID: u32 = 0x10005;

/// The GPU vendor, from the PCI vendor id the driver reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Vendor {
    /// AMD (0x1002).
    Amd,
    /// NVIDIA (0x10de).
    Nvidia,
    /// Intel (0x8086).
    Intel,
    /// Apple (0x106b), seen through MoltenVK.
    Apple,
    /// Mesa's software devices (`VK_VENDOR_ID_MESA`, 0x10005): lavapipe/llvmpipe.
    Mesa,
    /// Any other vendor id.
    Other(u32),
}

impl Vendor {
    /// The vendor for a PCI vendor id; ids not named here give `Other(id)`.
    pub fn from_id(id: u32) -> Self {
        match id {
            AMD_ID => Self::Amd,
            NVIDIA_ID => Self::Nvidia,
            INTEL_ID => Self::Intel,
            APPLE_ID => Self::Apple,
            MESA_ID => Self::Mesa,
            other => Self::Other(other),
        }
    }

    /// The PCI vendor id.
    pub fn id(self) -> u32 {
        match self {
            Self::Amd => AMD_ID,
            Self::Nvidia => NVIDIA_ID,
            Self::Intel => INTEL_ID,
            Self::Apple => APPLE_ID,
            Self::Mesa => MESA_ID,
            Self::Other(id) => id,
        }
    }
}

impl fmt::Display for Vendor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Amd => f.write_str("AMD"),
            Self::Nvidia => f.write_str("NVIDIA"),
            Self::Intel => f.write_str("Intel"),
            Self::Apple => f.write_str("Apple"),
            Self::Mesa => f.write_str("Mesa"),
            Self::Other(id) => write!(f, "vendor {id:#x}"),
        }
    }
}

/// One heap's entry of `VkPhysicalDeviceMemoryBudgetPropertiesEXT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeapBudget {
    /// How many bytes of the heap this process may use before allocations fail or degrade.
    pub budget: u64,
    /// How many bytes of the heap this process already uses.
    pub usage: u64,
}

/// Everything the policy reads about a device.
///
/// Build it from the live device (the Vulkan backend) or from a table in the shared memprops
/// JSON schema with [`DeviceDescription::from_json`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceDescription {
    /// The device name the driver reports.
    pub name: String,
    /// The PCI vendor id (see [`Vendor::from_id`]).
    pub vendor_id: u32,
    /// The device kind.
    pub device_kind: DeviceKind,
    /// The memory table.
    pub memory: MemoryProperties,
    /// Per-heap (budget, usage) from `VK_EXT_memory_budget`, in heap order, when the device
    /// has the extension; `None` otherwise. A list whose length is not the number of heaps is
    /// not used: the plan preallocates as without a budget, and its reasons say why.
    pub heap_budgets: Option<Vec<HeapBudget>>,
}

impl DeviceDescription {
    /// The vendor, from [`vendor_id`](Self::vendor_id).
    pub fn vendor(&self) -> Vendor {
        Vendor::from_id(self.vendor_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_names_read_with_or_without_vulkan_prefixes() {
        for name in [
            "HOST_VISIBLE",
            "host_visible",
            "MEMORY_PROPERTY_HOST_VISIBLE_BIT",
            "VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT",
            "0x2",
        ] {
            assert_eq!(
                MemoryTypeFlags::from_name(name),
                Some(MemoryTypeFlags::HOST_VISIBLE),
                "{name}"
            );
        }
        assert_eq!(
            HeapFlags::from_name("VK_MEMORY_HEAP_MULTI_INSTANCE_BIT"),
            Some(HeapFlags::MULTI_INSTANCE)
        );
        assert_eq!(MemoryTypeFlags::from_name("MULTI_INSTANCE"), None);
        // A vendor's flag, as Vulkan and vulkaninfo spell it: `_BIT` before the vendor.
        for (names, flag) in [
            (
                [
                    "VK_MEMORY_PROPERTY_DEVICE_COHERENT_BIT_AMD",
                    "MEMORY_PROPERTY_DEVICE_COHERENT_BIT_AMD",
                    "DEVICE_COHERENT_BIT_AMD",
                    "DEVICE_COHERENT_AMD",
                ],
                MemoryTypeFlags::DEVICE_COHERENT_AMD,
            ),
            (
                [
                    "VK_MEMORY_PROPERTY_DEVICE_UNCACHED_BIT_AMD",
                    "MEMORY_PROPERTY_DEVICE_UNCACHED_BIT_AMD",
                    "device_uncached_bit_amd",
                    "DEVICE_UNCACHED_AMD",
                ],
                MemoryTypeFlags::DEVICE_UNCACHED_AMD,
            ),
        ] {
            for name in names {
                assert_eq!(MemoryTypeFlags::from_name(name), Some(flag), "{name}");
            }
        }
        assert_eq!(
            MemoryTypeFlags::from_name("DEVICE_COHERENT_BIT_AMD_X"),
            None
        );
    }

    #[test]
    fn names_round_trip_including_unnamed_bits() {
        let flags = MemoryTypeFlags::DEVICE_LOCAL
            | MemoryTypeFlags::DEVICE_UNCACHED_AMD
            | MemoryTypeFlags(0x300);
        assert_eq!(
            flags.names(),
            ["DEVICE_LOCAL", "DEVICE_UNCACHED_AMD", "0x300"]
        );
        assert_eq!(MemoryTypeFlags::from_names(&flags.names()), Ok(flags));
        assert_eq!(MemoryTypeFlags::empty().to_string(), "(none)");
        assert_eq!(
            MemoryTypeFlags::from_names(&["HOST_CACHED", "NOPE", "0xZZ"]),
            Err(vec!["NOPE".to_string(), "0xZZ".to_string()])
        );
    }

    #[test]
    fn flags_serialize_as_name_lists() {
        let ty = MemoryType {
            heap: 1,
            flags: MemoryTypeFlags::HOST_VISIBLE | MemoryTypeFlags::HOST_COHERENT,
        };
        let text = serde_json::to_string(&ty).unwrap();
        assert_eq!(
            text,
            r#"{"heap":1,"flags":["HOST_VISIBLE","HOST_COHERENT"]}"#
        );
        assert_eq!(serde_json::from_str::<MemoryType>(&text).unwrap(), ty);
        let bad = serde_json::from_str::<MemoryType>(r#"{"heap":1,"flags":["HOST_VISIBEL"]}"#);
        assert!(bad.unwrap_err().to_string().contains("HOST_VISIBEL"));
    }

    #[test]
    fn vendor_ids_map_both_ways() {
        for vendor in [
            Vendor::Amd,
            Vendor::Nvidia,
            Vendor::Intel,
            Vendor::Apple,
            Vendor::Mesa,
            Vendor::Other(0x13b5),
        ] {
            assert_eq!(Vendor::from_id(vendor.id()), vendor);
        }
        assert_eq!(Vendor::from_id(0x1002), Vendor::Amd);
        assert_eq!(Vendor::Other(0x5143).to_string(), "vendor 0x5143");
    }

    #[test]
    fn device_kinds_read_in_schema_and_vulkan_spelling() {
        assert_eq!(
            DeviceKind::from_name("discrete"),
            Some(DeviceKind::Discrete)
        );
        assert_eq!(
            DeviceKind::from_name("INTEGRATED_GPU"),
            Some(DeviceKind::Integrated)
        );
        assert_eq!(
            DeviceKind::from_name("VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU"),
            Some(DeviceKind::Virtual)
        );
        assert_eq!(DeviceKind::from_name("gpu"), None);
        for kind in [
            DeviceKind::Discrete,
            DeviceKind::Integrated,
            DeviceKind::Cpu,
            DeviceKind::Virtual,
            DeviceKind::Other,
        ] {
            assert_eq!(DeviceKind::from_name(kind.name()), Some(kind));
        }
    }
}
