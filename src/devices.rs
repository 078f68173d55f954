//! The devices of this process: every adapter gpu-arena can open, listed the way
//! [`Context::new`](crate::Context::new) chooses among them, and contexts opened on any or all of them.
//!
//! [`devices`] enumerates adapters once (the same enumeration [`Context::new`](crate::Context::new) uses, so indices
//! here are the indices `GPU_ARENA_ADAPTER` takes), describes each one's memory without opening
//! a device, and marks the one [`Context::new`](crate::Context::new) would open. [`Context::on_device`](crate::Context::on_device) opens a
//! context on one of them, [`Context::open_all`](crate::Context::open_all) on every one: each context has its own arena,
//! memory plan, staging pool and statistics, and opening one reserves nothing on the others.
//!
//! Below `context.rs`: this file lists and chooses adapters and imports nothing above it;
//! `Context::on_device` and `Context::open_all` are written with the other constructors in
//! `context.rs`.

use crate::backend;
use crate::config::{AdapterSelector, ArenaConfig, BackendChoice};
use crate::error::{Error, Result};
use crate::memplan::{plan_memory, DeviceDescription, MemPlanError, MemoryPlan, Vendor};

/// One adapter gpu-arena can open: what it is and how its memory would be planned.
///
/// Made by [`devices`]; open it with [`Context::on_device`](crate::Context::on_device).
///
/// ```no_run
/// let config = gpu_arena::ArenaConfig::from_env()?;
/// for device in gpu_arena::devices(&config)? {
///     println!("{device}"); // 0: llvmpipe (...) (Mesa, vulkan, cpu); arena ... [default]
/// }
/// # Ok::<(), gpu_arena::Error>(())
/// ```
#[derive(Debug)]
pub struct DeviceInfo {
    index: usize,
    /// The instance that enumerated the adapter, handed on to the context opened on it.
    pub(crate) instance: wgpu::Instance,
    pub(crate) adapter: wgpu::Adapter,
    info: wgpu::AdapterInfo,
    description: DeviceDescription,
    plan: std::result::Result<MemoryPlan, MemPlanError>,
    is_default: bool,
}

impl DeviceInfo {
    /// The adapter's position in the list: the index `GPU_ARENA_ADAPTER` (or
    /// [`AdapterSelector::Index`]) takes to make it the default.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The adapter's name as the driver reports it (two GPUs of one model share it).
    pub fn name(&self) -> &str {
        &self.info.name
    }

    /// The vendor, from the PCI vendor id.
    pub fn vendor(&self) -> Vendor {
        Vendor::from_id(self.info.vendor)
    }

    /// The wgpu backend the adapter is reached through.
    pub fn backend(&self) -> wgpu::Backend {
        self.info.backend
    }

    /// Discrete, integrated, virtual, CPU or other.
    pub fn device_type(&self) -> wgpu::DeviceType {
        self.info.device_type
    }

    /// Everything wgpu reports about the adapter (driver, device id, ...).
    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.info
    }

    /// The memory table the plan is made from (on non-Vulkan backends, a synthetic one of
    /// [`ArenaConfig::fallback_device_memory_bytes`]).
    pub fn device_description(&self) -> &DeviceDescription {
        &self.description
    }

    /// The memory plan a context on this adapter would start from (arena, upload and readback
    /// types, heap size, reservable bytes, and why), made without opening a device. An adapter
    /// whose memory table cannot be planned is still listed, with the reason here; opening it
    /// fails with the same error.
    pub fn memory_plan(&self) -> std::result::Result<&MemoryPlan, &MemPlanError> {
        self.plan.as_ref()
    }

    /// True for the adapter [`Context::new`](crate::Context::new) opens with the same configuration (the first in
    /// the list, or the one `GPU_ARENA_ADAPTER` selects).
    pub fn is_default(&self) -> bool {
        self.is_default
    }
}

impl std::fmt::Display for DeviceInfo {
    /// One line: index, name, vendor, backend and kind by their names in the memory table's
    /// schema (`vulkan`, `gl`; `discrete`, `integrated`, `cpu`, ...) and the memory plan in
    /// short.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} ({}, {}, {}); ",
            self.index,
            self.info.name,
            self.vendor(),
            self.info.backend,
            self.description.device_kind.name()
        )?;
        match &self.plan {
            Ok(plan) => write!(
                f,
                "arena on memory type {} of a {} heap, {} reservable{}",
                plan.arena_type,
                crate::arena::Bytes(plan.heap_bytes),
                crate::arena::Bytes(plan.reservable_bytes),
                if plan.uma { ", UMA" } else { "" }
            )?,
            Err(error) => write!(f, "no memory plan: {error}")?,
        }
        if self.is_default {
            f.write_str(" [default]")?;
        }
        Ok(())
    }
}

/// Every adapter gpu-arena can open with `config`, in the order [`Context::new`](crate::Context::new) chooses from
/// (Vulkan before other backends, then discrete > integrated > virtual > CPU; with
/// [`BackendChoice::Auto`], other backends only where no Vulkan adapter exists), with the
/// default one marked. Opens no device and reserves no memory.
///
/// `config.backend` and `config.validation` shape the enumeration (and so the contexts opened
/// from the list); `config.fallback_device_memory_bytes` sizes the synthetic memory table of
/// non-Vulkan adapters.
///
/// Errors: a configuration value [`ArenaConfig::validate`] refuses (before any device call),
/// [`Error::NoAdapter`] when there is none (the message says what to install), and
/// [`Error::AdapterNotFound`] when `config.adapter` (`GPU_ARENA_ADAPTER`) matches none of them,
/// as [`Context::new`](crate::Context::new) would.
pub fn devices(config: &ArenaConfig) -> Result<Vec<DeviceInfo>> {
    config.validate()?;
    let (instance, adapters) = enumerate_adapters(config)?;
    let default = select_adapter(config, &adapters)?;
    Ok(adapters
        .into_iter()
        .enumerate()
        .map(|(index, adapter)| {
            let description =
                backend::describe_adapter(&adapter, config.fallback_device_memory_bytes);
            DeviceInfo {
                index,
                info: adapter.get_info(),
                plan: plan_memory(&description),
                description,
                instance: instance.clone(),
                adapter,
                is_default: index == default,
            }
        })
        .collect())
}

/// The default adapter for `config`: the config's selector if any, else the first of
/// [`devices`]' order, with the instance that enumerated it.
pub(crate) fn choose_adapter(config: &ArenaConfig) -> Result<(wgpu::Instance, wgpu::Adapter)> {
    let (instance, mut adapters) = enumerate_adapters(config)?;
    let index = select_adapter(config, &adapters)?;
    Ok((instance, adapters.swap_remove(index)))
}

/// How adapters are ranked within a backend: discrete first, software last.
fn device_rank(device_type: wgpu::DeviceType) -> u8 {
    match device_type {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Cpu => 3,
        wgpu::DeviceType::Other => 4,
    }
}

/// Every adapter of the configured backends, in gpu-arena's order (see [`devices`]), and the
/// instance they come from; an [`Error::NoAdapter`] that says what to install when there is
/// none.
fn enumerate_adapters(config: &ArenaConfig) -> Result<(wgpu::Instance, Vec<wgpu::Adapter>)> {
    let enumerate = |backends: wgpu::Backends| {
        let mut flags = wgpu::InstanceFlags::empty();
        if config.validation {
            flags |= wgpu::InstanceFlags::VALIDATION;
        }
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
            backends,
            flags,
            ..wgpu::InstanceDescriptor::new_without_display_handle()
        });
        let adapters = pollster::block_on(instance.enumerate_adapters(backends));
        (instance, adapters)
    };
    // Auto: Vulkan adapters only, unless there are none (our memory policy applies to Vulkan,
    // and leaving GL alone avoids its driver probing where Vulkan works).
    let (instance, mut adapters) = match config.backend {
        BackendChoice::Auto => {
            let vulkan = enumerate(wgpu::Backends::VULKAN);
            if vulkan.1.is_empty() {
                enumerate(wgpu::Backends::all())
            } else {
                vulkan
            }
        }
        choice => enumerate(choice.backends()),
    };
    // Vulkan before other backends (our memory policy applies there), then by device class;
    // the sort is stable, so adapters of one class keep wgpu's order.
    adapters.sort_by_key(|a| {
        let info = a.get_info();
        (
            info.backend != wgpu::Backend::Vulkan,
            device_rank(info.device_type),
        )
    });
    if adapters.is_empty() {
        return Err(Error::NoAdapter {
            tried: crate::error::flag_names(config.backend.backends().iter_names()),
            hint: match config.backend {
                BackendChoice::Auto | BackendChoice::Vulkan => "Install a Vulkan driver: on Debian/Ubuntu `apt-get install mesa-vulkan-drivers libvulkan1` gives software Vulkan (lavapipe); for GL, libegl1 and libgl1-mesa-dri. Or set GPU_ARENA_BACKEND to another backend.".into(),
                _ => "Set GPU_ARENA_BACKEND=auto to try every backend, or install that backend's driver.".into(),
            },
        });
    }
    Ok((instance, adapters))
}

/// The index in `adapters` (non-empty, in [`enumerate_adapters`]' order) that `config.adapter`
/// selects: 0 without a selector.
fn select_adapter(config: &ArenaConfig, adapters: &[wgpu::Adapter]) -> Result<usize> {
    let describe = || {
        adapters
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let info = a.get_info();
                format!(
                    "{i}: {} ({}, {})",
                    info.name,
                    info.backend,
                    backend::device_kind(info.device_type).name()
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    match &config.adapter {
        None => Ok(0),
        Some(AdapterSelector::Index(i)) if *i < adapters.len() => Ok(*i),
        Some(AdapterSelector::Index(i)) => Err(Error::AdapterNotFound {
            selector: format!("index {i}"),
            available: describe(),
        }),
        Some(AdapterSelector::NameContains(name)) => {
            let wanted = name.to_lowercase();
            adapters
                .iter()
                .position(|a| a.get_info().name.to_lowercase().contains(&wanted))
                .ok_or_else(|| Error::AdapterNotFound {
                    selector: format!("name containing {name:?}"),
                    available: describe(),
                })
        }
    }
}
