//! Vulkan memory from gpu-allocator on wgpu's own `VkDevice`, imported into wgpu as buffers.
//!
//! This is the only place that holds raw Vulkan handles. Each buffer we make is one dedicated
//! gpu-allocator block with a `VkBuffer` bound to it, wrapped by
//! `wgpu::hal::vulkan::Buffer::from_raw_externally_owned` and imported with
//! `Device::create_buffer_from_hal`.
//!
//! Who owns what (see also the module doc of `backend`):
//! - The **memory** (the gpu-allocator allocation, mapped when host-visible) is owned by the
//!   crate: a [`AllocatedMemory`] in an `Arc`, held by wgpu's buffer (through its drop
//!   callback) and by every mapped range of it (the region's, each array's, each staging
//!   buffer's). It is freed when the last of them is gone, never earlier.
//! - The **`VkBuffer`** is owned by wgpu: our drop callback destroys it when wgpu destroys its
//!   buffer, which happens after every submission that used it has completed, either when the
//!   last handle is dropped or early, by `wgpu::Buffer::destroy`, `wgpu::Device::destroy` or a
//!   lost device (all reachable from safe code through `DeviceArray::buffer` and
//!   `Context::device`). The callback then drops its reference to the memory, so memory that
//!   arrays still map outlives the buffer, and host access stays inside live memory.
//! - The **`VkDevice`** is wgpu's. Every holder of the allocator or of memory holds a
//!   `wgpu::Device` too, so the device outlives all memory allocated on it.

use super::alias::AliasableMemory;
use super::buffer::{check_buffer_size, BufferFailure, DeviceBuffer};
use super::host_sync::{HostSync, HostSyncCounts, SyncCounters};
use super::mapped::MappedRange;
use super::vulkan_buffer::{
    free_allocation, vk_refusal, vulkan_usage, AllocatedMemory, BufferRelease, VulkanApi,
};
use crate::arena::RegionRefusal;
use crate::error::{Error, Result};
use crate::lock::{rank, Mutex};
use crate::memplan::{
    DeviceDescription, HeapBudget, HeapFlags, MemoryHeap, MemoryProperties, MemoryType,
    MemoryTypeFlags,
};
use ash::vk;
use gpu_allocator::vulkan::{
    Allocation, AllocationCreateDesc, AllocationScheme, Allocator, AllocatorCreateDesc,
};
use gpu_allocator::{AllocationError, AllocationSizes, MemoryLocation};
use std::sync::Arc;

/// What one Vulkan device's memory looks like: the table the memory plan is made from.
pub(crate) fn describe_vulkan_adapter(adapter: &wgpu::Adapter) -> Option<DeviceDescription> {
    // SAFETY: the hal adapter is only read (instance function pointers and the physical-device
    // handle) while the guard is alive; nothing is destroyed or mutated.
    let hal_adapter = unsafe { adapter.as_hal::<VulkanApi>() }?;
    let instance = hal_adapter.shared_instance().raw_instance();
    let physical = hal_adapter.raw_physical_device();
    let info = adapter.get_info();
    // SAFETY: `physical` was enumerated from `instance`, which outlives this call.
    let props = unsafe { instance.get_physical_device_memory_properties(physical) };
    let memory = memory_properties(&props);
    let heap_budgets = query_budgets(
        instance,
        physical,
        hal_adapter.shared_instance(),
        memory.heaps.len(),
    );
    Some(DeviceDescription {
        name: info.name.clone(),
        vendor_id: info.vendor,
        device_kind: super::device_kind::device_kind(info.device_type),
        memory,
        heap_budgets,
    })
}

fn memory_properties(props: &vk::PhysicalDeviceMemoryProperties) -> MemoryProperties {
    MemoryProperties {
        heaps: props.memory_heaps[..props.memory_heap_count as usize]
            .iter()
            .map(|h| MemoryHeap {
                size: h.size,
                flags: HeapFlags(h.flags.as_raw()),
            })
            .collect(),
        types: props.memory_types[..props.memory_type_count as usize]
            .iter()
            .map(|t| MemoryType {
                heap: t.heap_index,
                flags: MemoryTypeFlags(t.property_flags.as_raw()),
            })
            .collect(),
    }
}

/// Per-heap budget and usage from `VK_EXT_memory_budget`, when the device offers it.
fn query_budgets(
    instance: &ash::Instance,
    physical: vk::PhysicalDevice,
    shared: &wgpu::hal::vulkan::InstanceShared,
    heap_count: usize,
) -> Option<Vec<HeapBudget>> {
    if shared.instance_api_version() < vk::API_VERSION_1_1 {
        return None;
    }
    if !has_memory_budget(instance, physical) {
        return None;
    }
    let mut budget = vk::PhysicalDeviceMemoryBudgetPropertiesEXT::default();
    let mut props2 = vk::PhysicalDeviceMemoryProperties2::default().push_next(&mut budget);
    // SAFETY: the instance is Vulkan 1.1+ (checked above) and the device supports the
    // extension, so chaining the budget struct is valid.
    unsafe { instance.get_physical_device_memory_properties2(physical, &mut props2) };
    Some(
        (0..heap_count)
            .map(|i| HeapBudget {
                budget: budget.heap_budget[i],
                usage: budget.heap_usage[i],
            })
            .collect(),
    )
}

/// The Vulkan limits and versions that matter for memory, which wgpu's `Limits` leave out.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VulkanLimits {
    /// `nonCoherentAtomSize`: flushes and invalidates of non-coherent memory cover whole
    /// multiples of this many bytes.
    pub non_coherent_atom_size: u64,
    /// `maxMemoryAllocationSize`: the largest single `VkDeviceMemory`, so the largest arena
    /// region; `None` on Vulkan 1.0 devices, which do not report it.
    pub max_memory_allocation_size: Option<u64>,
    /// `minMemoryMapAlignment`: the alignment of mapped pointers.
    pub min_memory_map_alignment: u64,
    /// The device's Vulkan version, `major.minor.patch`.
    pub api_version: String,
    /// The driver's version number as the driver encodes it (vendor-specific layout).
    pub driver_version: u32,
    /// Whether the device offers `VK_EXT_memory_budget` (per-heap budget and usage).
    pub memory_budget: bool,
}

/// The Vulkan limits of the device behind `device`; `None` when it is not Vulkan.
pub(crate) fn vulkan_limits(device: &wgpu::Device) -> Option<VulkanLimits> {
    // SAFETY: the hal device is only read (instance function pointers and the physical-device
    // handle) while the guard is alive; nothing is destroyed or mutated.
    let hal_device = unsafe { device.as_hal::<VulkanApi>() }?;
    let instance = hal_device.shared_instance().raw_instance();
    let physical = hal_device.raw_physical_device();
    // SAFETY: `physical` was enumerated from `instance`, which outlives these calls.
    let properties = unsafe { instance.get_physical_device_properties(physical) };
    let version = properties.api_version;
    let vulkan_1_1 = hal_device.shared_instance().instance_api_version() >= vk::API_VERSION_1_1
        && version >= vk::API_VERSION_1_1;
    let max_memory_allocation_size = vulkan_1_1.then(|| {
        let mut maintenance3 = vk::PhysicalDeviceMaintenance3Properties::default();
        let mut properties2 = vk::PhysicalDeviceProperties2::default().push_next(&mut maintenance3);
        // SAFETY: instance and device are Vulkan 1.1+ (checked above), where the maintenance3
        // properties are core.
        unsafe { instance.get_physical_device_properties2(physical, &mut properties2) };
        maintenance3.max_memory_allocation_size
    });
    Some(VulkanLimits {
        non_coherent_atom_size: properties.limits.non_coherent_atom_size,
        max_memory_allocation_size,
        min_memory_map_alignment: properties.limits.min_memory_map_alignment as u64,
        api_version: format!(
            "{}.{}.{}",
            vk::api_version_major(version),
            vk::api_version_minor(version),
            vk::api_version_patch(version)
        ),
        driver_version: properties.driver_version,
        memory_budget: has_memory_budget(instance, physical),
    })
}

/// Per-heap budget and usage now, from `VK_EXT_memory_budget`; `None` when the device is not
/// Vulkan or lacks the extension.
pub(crate) fn heap_budgets(device: &wgpu::Device) -> Option<Vec<HeapBudget>> {
    // SAFETY: as in `vulkan_limits`: read-only use of the hal device while the guard lives.
    let hal_device = unsafe { device.as_hal::<VulkanApi>() }?;
    let shared = hal_device.shared_instance();
    let instance = shared.raw_instance();
    let physical = hal_device.raw_physical_device();
    // SAFETY: `physical` was enumerated from `instance`, which outlives this call.
    let heap_count = unsafe { instance.get_physical_device_memory_properties(physical) }
        .memory_heap_count as usize;
    query_budgets(instance, physical, shared, heap_count)
}

fn has_memory_budget(instance: &ash::Instance, physical: vk::PhysicalDevice) -> bool {
    // SAFETY: enumerating extension properties of a valid physical device.
    let Ok(extensions) = (unsafe { instance.enumerate_device_extension_properties(physical) })
    else {
        return false;
    };
    extensions
        .iter()
        .any(|e| e.extension_name_as_c_str() == Ok(ash::ext::memory_budget::NAME))
}

/// The size of the `VkDeviceMemory` blocks gpu-allocator shares between arena regions: a
/// region larger than this gets a block of its own, smaller ones share one. gpu-allocator's
/// smallest (its defaults, 256 MiB on the device and 64 MiB on the host, would hold memory
/// the arena's limit does not count).
const SHARED_BLOCK_BYTES: u64 = 4 << 20;

/// gpu-allocator on wgpu's device, shared with the memory it hands out.
#[derive(Clone)]
pub(crate) struct VulkanMemory {
    device: ash::Device,
    allocator: Arc<Mutex<Allocator>>,
    /// Bit `i` set when memory type `i` is HOST_COHERENT (and coherence is not overridden).
    coherent_types: u32,
    /// The device's `nonCoherentAtomSize`.
    atom: u64,
    /// Flushes and invalidates of every mapping made here.
    sync_counters: Arc<SyncCounters>,
    /// `maxMemoryAllocationSize` (Vulkan 1.1+): no allocation, so no buffer, may be larger.
    max_allocation: Option<u64>,
    /// Keeps the `VkDevice` open until the allocator has been dropped (declared last, so
    /// dropped last).
    _wgpu_device: wgpu::Device,
}

impl VulkanMemory {
    /// Builds gpu-allocator on the device wgpu opened; `None` when the device is not Vulkan.
    ///
    /// With `force_non_coherent`, every mapping flushes and invalidates as if its memory were
    /// not HOST_COHERENT (`ArenaConfig::force_non_coherent`).
    pub(crate) fn new(device: &wgpu::Device, force_non_coherent: bool) -> Result<Option<Self>> {
        // SAFETY: we clone the instance/device function tables and handles; wgpu keeps them
        // valid for as long as a `wgpu::Device` handle exists (`Device::destroy` and device
        // loss leave the `VkDevice` itself open), and everything that keeps a clone (this
        // value, each `AllocatedMemory`) also holds a `wgpu::Device` (see the module doc).
        let Some(hal_device) = (unsafe { device.as_hal::<VulkanApi>() }) else {
            return Ok(None);
        };
        let instance = hal_device.shared_instance().raw_instance();
        let physical = hal_device.raw_physical_device();
        // SAFETY: `physical` was enumerated from `instance`, which outlives these calls.
        let (properties, memory) = unsafe {
            (
                instance.get_physical_device_properties(physical),
                instance.get_physical_device_memory_properties(physical),
            )
        };
        let coherent_types = if force_non_coherent {
            0
        } else {
            memory.memory_types[..memory.memory_type_count as usize]
                .iter()
                .enumerate()
                .filter(|(_, t)| {
                    t.property_flags
                        .contains(vk::MemoryPropertyFlags::HOST_COHERENT)
                })
                .fold(0u32, |bits, (i, _)| bits | (1 << i))
        };
        let allocator = Allocator::new(&AllocatorCreateDesc {
            instance: hal_device.shared_instance().raw_instance().clone(),
            device: hal_device.raw_device().clone(),
            physical_device: hal_device.raw_physical_device(),
            debug_settings: Default::default(),
            buffer_device_address: false,
            allocation_sizes: AllocationSizes::new(SHARED_BLOCK_BYTES, SHARED_BLOCK_BYTES),
        })
        .map_err(|e| Error::Backend {
            during: "creating gpu-allocator on wgpu's Vulkan device".into(),
            reason: e.to_string(),
        })?;
        let max_allocation = vulkan_limits(device).and_then(|l| l.max_memory_allocation_size);
        Ok(Some(Self {
            max_allocation,
            device: hal_device.raw_device().clone(),
            allocator: Arc::new(Mutex::new(rank::VULKAN_ALLOCATOR, allocator)),
            coherent_types,
            atom: properties.limits.non_coherent_atom_size,
            sync_counters: Arc::default(),
            _wgpu_device: device.clone(),
        }))
    }

    /// A buffer of `size` bytes in the first memory type of `candidates` that works.
    ///
    /// The buffer has the wgpu usages `usage` (no MAP_* usage: gpu-allocator maps the memory,
    /// not wgpu). When the memory is host-visible, the returned buffer carries gpu-allocator's
    /// persistent mapping. A failure says which step failed and how (out of memory, too large
    /// for the device, device lost, other), so the arena can react to it.
    ///
    /// An `aliasable` buffer (an arena region) gets memory without Vulkan's dedicated-allocation
    /// hint, which would forbid binding any other buffer to it, and carries that memory for
    /// aliases ([`AliasableMemory`]); other buffers (staging) get a dedicated allocation.
    pub(crate) fn create_buffer(
        &self,
        device: &wgpu::Device,
        size: u64,
        candidates: &[u32],
        usage: wgpu::BufferUsages,
        aliasable: bool,
        label: &str,
    ) -> std::result::Result<DeviceBuffer, BufferFailure> {
        let failure = |during: &str, refusal: RegionRefusal| BufferFailure {
            during: format!("{during} ({label}, {size} bytes)"),
            refusal,
        };
        check_buffer_size(size, device.limits().max_buffer_size, "maxBufferSize")
            .map_err(|refusal| failure("creating a buffer", refusal))?;
        if let Some(limit) = self.max_allocation {
            check_buffer_size(size, limit, "maxMemoryAllocationSize")
                .map_err(|refusal| failure("allocating device memory", refusal))?;
        }
        let info = vk::BufferCreateInfo::default()
            .size(size)
            .usage(vulkan_usage(usage))
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: a valid create-info on wgpu's live device.
        let raw = unsafe { self.device.create_buffer(&info, None) }
            .map_err(|e| failure("vkCreateBuffer", vk_refusal(e, e.to_string())))?;
        let scheme = match aliasable {
            true => AllocationScheme::GpuAllocatorManaged,
            false => AllocationScheme::DedicatedBuffer(raw),
        };
        let (allocation, memory_type) = match self.allocate(raw, scheme, candidates, label) {
            Ok(allocated) => allocated,
            Err(refusal) => {
                // SAFETY: the buffer has no memory bound and no user.
                unsafe { self.device.destroy_buffer(raw, None) };
                return Err(failure("allocating device memory", refusal));
            }
        };
        // SAFETY: a fresh allocation for this buffer's requirements, at an offset they allow.
        if let Err(e) = unsafe {
            self.device
                .bind_buffer_memory(raw, allocation.memory(), allocation.offset())
        } {
            free_allocation(&self.allocator, allocation, label);
            // SAFETY: the buffer is unused.
            unsafe { self.device.destroy_buffer(raw, None) };
            return Err(failure("vkBindBufferMemory", vk_refusal(e, e.to_string())));
        }
        let (memory, mapped) = self.own_memory(device, allocation, memory_type, size, label);
        let aliases =
            aliasable.then(|| AliasableMemory::new(&self.device, &memory, memory_type, usage));
        let release = BufferRelease {
            device: self.device.clone(),
            raw,
            memory,
        };
        let buffer = release.import(device, size, usage, label);
        Ok(DeviceBuffer {
            buffer,
            mapped,
            memory_type: Some(memory_type),
            aliases,
        })
    }

    /// An allocation for `raw` under `scheme` in the first memory type of `candidates` that its
    /// requirements allow and that has room, with that type; else the last type's refusal (a
    /// lost device ends the search at once). Apart from `create_buffer` because every way out
    /// of it leaves `raw` without memory, for the caller to destroy.
    ///
    /// A dedicated allocation is a whole `VkDeviceMemory`; one that is not starts and ends on a
    /// whole `nonCoherentAtomSize`, so the flushes and invalidates of it, rounded out to atoms,
    /// stay inside it (gpu-allocator may place such allocations next to each other in one
    /// `VkDeviceMemory`).
    fn allocate(
        &self,
        raw: vk::Buffer,
        scheme: AllocationScheme,
        candidates: &[u32],
        label: &str,
    ) -> std::result::Result<(Allocation, u32), RegionRefusal> {
        // SAFETY: `raw` was just created on this device.
        let requirements = unsafe { self.device.get_buffer_memory_requirements(raw) };
        // A dedicated allocation is a whole `VkDeviceMemory` of exactly the buffer's size.
        let requirements = match scheme {
            AllocationScheme::GpuAllocatorManaged => vk::MemoryRequirements {
                size: requirements.size.next_multiple_of(self.atom.max(1)),
                alignment: requirements.alignment.max(self.atom),
                ..requirements
            },
            _ => requirements,
        };
        let mut last_error =
            RegionRefusal::other("no memory type of the plan is allowed for this buffer");
        for &memory_type in candidates {
            let bits = requirements.memory_type_bits & (1u32 << memory_type);
            if bits == 0 {
                continue;
            }
            let mut allocator = self.allocator.lock().unwrap_or_else(|p| p.into_inner());
            match allocator.allocate(&AllocationCreateDesc {
                name: label,
                requirements: vk::MemoryRequirements {
                    memory_type_bits: bits,
                    ..requirements
                },
                // Our plan has already chosen the type: mask it in and let gpu-allocator take it.
                location: MemoryLocation::Unknown,
                linear: true,
                allocation_scheme: scheme,
            }) {
                Ok(a) => return Ok((a, memory_type)),
                Err(e) => {
                    last_error = allocation_refusal(&e, format!("memory type {memory_type}: {e}"));
                    // No other memory type helps a lost device.
                    if matches!(last_error, RegionRefusal::DeviceLost { .. }) {
                        break;
                    }
                }
            }
        }
        Err(last_error)
    }

    /// Moves `allocation` (bound to a buffer, of `memory_type`) into its shared owner, and
    /// makes the mapped range of its first `size` bytes when it is host-visible: coherent, or
    /// with the flushes and invalidates of non-coherent memory.
    fn own_memory(
        &self,
        device: &wgpu::Device,
        allocation: Allocation,
        memory_type: u32,
        size: u64,
        label: &str,
    ) -> (Arc<AllocatedMemory>, Option<MappedRange>) {
        let coherent = 1u32
            .checked_shl(memory_type)
            .is_some_and(|bit| self.coherent_types & bit != 0);
        // Read before the allocation moves into its owner; both stay valid while it lives.
        let mapped_ptr = allocation.mapped_ptr();
        // The range of the `VkDeviceMemory` that flushes and invalidates may cover: the
        // allocation (the whole memory, or whole atoms of a shared one: `allocate`).
        let (memory_offset, memory_size) =
            (allocation.offset(), allocation.offset() + allocation.size());
        // SAFETY: the handle is only stored in the `HostSync` of mapped ranges below, whose
        // owner (`memory`) keeps this allocation, and so the handle, alive.
        let memory_handle = unsafe { allocation.memory() };
        let memory = AllocatedMemory::new(allocation, &self.allocator, label, device);
        let mapped = mapped_ptr.map(|p| {
            let owner: super::mapped::MappingOwner = memory.clone();
            // SAFETY: gpu-allocator maps its memory blocks persistently, so `p` is valid for
            // reads and writes of the allocation (at least `size` bytes) until the
            // allocation is freed, which `owner` prevents while any range of it lives; the
            // crate never makes references into mapped memory.
            let range = unsafe { MappedRange::new(p.cast(), size, owner) };
            if coherent {
                return range;
            }
            let sync = HostSync::new(
                &self.device,
                memory_handle,
                memory_size,
                self.atom,
                &self.sync_counters,
            );
            range.non_coherent(sync, memory_offset)
        });
        (memory, mapped)
    }

    /// Flushes and invalidates so far, over every mapping made here.
    pub(crate) fn host_sync_counts(&self) -> HostSyncCounts {
        self.sync_counters.snapshot()
    }

    /// gpu-allocator's own view: (live allocations, bytes allocated).
    pub(crate) fn allocator_report(&self) -> (usize, u64) {
        let allocator = self.allocator.lock().unwrap_or_else(|p| p.into_inner());
        let report = allocator.generate_report();
        (report.allocations.len(), report.total_allocated_bytes)
    }
}

/// The refusal kind of a failed gpu-allocator allocation, with `reason` as its text.
/// gpu-allocator maps `ERROR_OUT_OF_DEVICE_MEMORY` to its `OutOfMemory` and passes every other
/// `vkAllocateMemory` failure on in an `Internal` message that names the `vk::Result`.
fn allocation_refusal(error: &AllocationError, reason: String) -> RegionRefusal {
    match error {
        AllocationError::OutOfMemory => RegionRefusal::OutOfMemory { reason },
        AllocationError::Internal(text) if text.contains("ERROR_DEVICE_LOST") => {
            RegionRefusal::DeviceLost { reason }
        }
        AllocationError::Internal(text) if text.contains("ERROR_OUT_OF_HOST_MEMORY") => {
            RegionRefusal::OutOfMemory { reason }
        }
        _ => RegionRefusal::Other { reason },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// wgpu's Vulkan device on the test machine (lavapipe in CI), its queue, and the memory
    /// types the memory policy gives upload staging; `None` without one. Opened here rather
    /// than through a context: the backend is below the context and its tests are too.
    fn vulkan_device() -> Option<(wgpu::Device, wgpu::Queue, Vec<u32>)> {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
            backends: wgpu::Backends::VULKAN,
            ..wgpu::InstanceDescriptor::new_without_display_handle()
        });
        let adapter =
            pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions::default()))
                .ok()?;
        let plan = crate::memplan::plan_memory(&describe_vulkan_adapter(&adapter)?).ok()?;
        let (device, queue) =
            pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor::default())).ok()?;
        Some((device, queue, plan.upload_candidates))
    }

    #[test]
    fn memory_is_freed_through_a_poisoned_allocator_lock_when_its_last_holder_goes() {
        let Some((device, _queue, upload_candidates)) = vulkan_device() else {
            eprintln!("no Vulkan adapter: skipped");
            return;
        };
        let device = &device;
        let memory = VulkanMemory::new(device, false).unwrap().unwrap();
        let buffer = memory
            .create_buffer(
                device,
                4096,
                &upload_candidates,
                wgpu::BufferUsages::COPY_SRC,
                false,
                "poison test",
            )
            .unwrap();
        assert_eq!(memory.allocator_report().0, 1);
        // A panic while another thread holds the allocator's lock poisons it.
        let allocator = Arc::clone(&memory.allocator);
        let _ = std::thread::spawn(move || {
            let _held = allocator.lock();
            panic!("poisoning the allocator lock on purpose");
        })
        .join();
        assert!(memory.allocator.is_poisoned());
        let DeviceBuffer { buffer, mapped, .. } = buffer;
        let mapped = mapped.expect("upload staging memory is mapped");
        buffer.destroy();
        drop(buffer);
        device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
        assert_eq!(
            memory.allocator_report().0,
            1,
            "a mapping still holds the memory after wgpu destroyed its buffer"
        );
        mapped.write(&[7; 16]);
        drop(mapped);
        assert_eq!(
            memory.allocator_report(),
            (0, 0),
            "the last holder freed it"
        );
    }

    #[test]
    fn an_alias_is_made_inside_its_memory_and_refused_past_it_or_misaligned() {
        let Some((device, _queue, upload_candidates)) = vulkan_device() else {
            eprintln!("no Vulkan adapter: skipped");
            return;
        };
        let device = &device;
        let memory = VulkanMemory::new(device, false).unwrap().unwrap();
        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC;
        let region = memory
            .create_buffer(device, 4096, &upload_candidates, usage, true, "alias test")
            .unwrap();
        let aliases = region
            .aliases
            .as_ref()
            .expect("an aliasable buffer carries its memory");
        let staging = memory
            .create_buffer(device, 4096, &upload_candidates, usage, false, "staging")
            .unwrap();
        assert!(staging.aliases.is_none(), "dedicated memory is not aliased");
        let alias = aliases.alias(device, 256, 256, "inside").unwrap();
        assert_eq!(alias.size(), 256);
        let allocations = memory.allocator_report();
        match aliases.alias(device, 4096, 256, "past the end") {
            Err(RegionRefusal::Other { reason }) => {
                assert!(reason.contains("past the end"), "{reason}")
            }
            other => panic!("expected a refusal, got {:?}", other.map(|b| b.size())),
        }
        // An offset the device's buffer alignment does not allow: refused, nothing made (the
        // array then keeps its region's buffer).
        match aliases.alias(device, 1, 256, "misaligned") {
            Err(RegionRefusal::Other { reason }) => {
                assert!(reason.contains("alignment"), "{reason}")
            }
            other => panic!("expected a refusal, got {:?}", other.map(|b| b.size())),
        }
        assert_eq!(
            memory.allocator_report(),
            allocations,
            "no memory was taken"
        );
        // The alias keeps the memory: the region's buffer goes first, the memory stays.
        drop(region);
        device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
        assert_eq!(
            memory.allocator_report().0,
            2,
            "the region's memory and the staging's"
        );
        drop(alias);
        device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
        assert_eq!(memory.allocator_report().0, 1, "only the staging's is left");
    }
}
