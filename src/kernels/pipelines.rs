//! Compiled kernels, once per context ("jit"): shader modules and compute pipelines are made at
//! the first use of each kernel variant and kept; on Vulkan a driver pipeline cache persists
//! the compiled code to `GPU_ARENA_CACHE_DIR`, so a second process compiles faster.

use crate::error::{Error, Result};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Where the driver pipeline cache is kept across processes (unset: not persisted).
pub const CACHE_DIR_ENV: &str = "GPU_ARENA_CACHE_DIR";

const COPY_ROWS_WGSL: &str = include_str!("../../shaders/copy_rows.wgsl");
const COPY_BYTES_WGSL: &str = include_str!("../../shaders/copy_bytes.wgsl");
const FILL_WGSL: &str = include_str!("../../shaders/fill.wgsl");
/// Prepended to every kernel: the workgroup size and linear workgroup numbering.
const GRID_WGSL: &str = include_str!("../../shaders/grid.wgsl");
/// Prepended to both box-copy kernels: parameters, bindings, row starts.
const BOX_COPY_WGSL: &str = include_str!("../../shaders/box_copy.wgsl");

/// One kernel variant: one shader module and one pipeline each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Kernel {
    /// `copy_rows.wgsl` over `vec4<u32>` units, for one contiguous row (`CONTIGUOUS`) or rows.
    CopyRowsVec4 { contiguous: bool },
    /// `copy_rows.wgsl` over `u32` words, likewise.
    CopyRowsWord { contiguous: bool },
    /// `copy_bytes.wgsl`.
    CopyBytes,
    /// `fill.wgsl`.
    Fill,
}

impl Kernel {
    /// The variant's name in statistics and labels.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kernel::CopyRowsVec4 { contiguous: true } => "copy_rows<vec4<u32>>(contiguous)",
            Kernel::CopyRowsVec4 { contiguous: false } => "copy_rows<vec4<u32>>",
            Kernel::CopyRowsWord { contiguous: true } => "copy_rows<u32>(contiguous)",
            Kernel::CopyRowsWord { contiguous: false } => "copy_rows<u32>",
            Kernel::CopyBytes => "copy_bytes",
            Kernel::Fill => "fill",
        }
    }

    /// Pipeline-overridable constants of the variant.
    fn constants(self) -> &'static [(&'static str, f64)] {
        match self {
            Kernel::CopyRowsVec4 { contiguous: true }
            | Kernel::CopyRowsWord { contiguous: true } => &[("CONTIGUOUS", 1.0)],
            _ => &[],
        }
    }

    /// The module's source; variants of one kernel that differ only in constants share it.
    fn source(self) -> String {
        match self {
            Kernel::CopyRowsVec4 { .. } => {
                format!("alias Unit = vec4<u32>;\n{GRID_WGSL}{BOX_COPY_WGSL}{COPY_ROWS_WGSL}")
            }
            Kernel::CopyRowsWord { .. } => {
                format!("alias Unit = u32;\n{GRID_WGSL}{BOX_COPY_WGSL}{COPY_ROWS_WGSL}")
            }
            Kernel::CopyBytes => {
                format!("alias Unit = u32;\n{GRID_WGSL}{BOX_COPY_WGSL}{COPY_BYTES_WGSL}")
            }
            Kernel::Fill => format!("{GRID_WGSL}{FILL_WGSL}"),
        }
    }
}

/// How this context's kernels were compiled: what a first call pays and a later one does not.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KernelCacheStats {
    /// Pipelines compiled so far (each kernel variant at most once per context).
    pub pipelines_compiled: u64,
    /// Kernel launches that found their pipeline already compiled.
    pub pipeline_hits: u64,
    /// Wall time of every compilation together (shader module and pipeline).
    pub compile_time: Duration,
    /// Each compilation in order: the kernel variant and how long it took.
    pub compiles: Vec<(&'static str, Duration)>,
    /// The driver pipeline-cache file, when `GPU_ARENA_CACHE_DIR` is set and the device has
    /// `Features::PIPELINE_CACHE` (Vulkan).
    pub disk_cache_file: Option<PathBuf>,
    /// Bytes of pipeline-cache data read from that file at the first compilation (0 when the
    /// file did not exist yet).
    pub disk_cache_loaded_bytes: u64,
}

/// A compiled kernel variant.
pub(crate) struct Compiled {
    pub(crate) pipeline: wgpu::ComputePipeline,
    pub(crate) layout: wgpu::BindGroupLayout,
}

/// The driver pipeline cache, opened at the first compilation.
enum DriverCache {
    NotOpened,
    Opened(Option<wgpu::PipelineCache>),
}

/// The kernels of one context. Lives in `ContextInner`; its lock also serialises writing the
/// kernel parameters and submitting the work that reads them (see `launch.rs`).
pub(crate) struct KernelCache {
    state: Mutex<KernelState>,
}

/// Everything behind the kernel lock.
pub(crate) struct KernelState {
    pipelines: HashMap<Kernel, Arc<Compiled>>,
    /// Shader modules by source, shared by the variants that differ only in constants.
    modules: HashMap<String, wgpu::ShaderModule>,
    driver_cache: DriverCache,
    cache_dir: Option<PathBuf>,
    stats: KernelCacheStats,
    /// The uniform buffer kernel parameters are written to, one 256-byte slot per dispatch
    /// (grown on demand, reused by every launch).
    pub(crate) params: Option<(wgpu::Buffer, u64)>,
    /// Test-only limits replacing the device's (see `Context::limit_kernel_resources`).
    pub(crate) limits_override: Option<(u64, u32)>,
    /// Run WGSL kernels even where ops would copy on the host (see `host.rs`).
    pub(crate) force_device_kernels: bool,
}

impl KernelCache {
    /// An empty cache; the persistent directory comes from `GPU_ARENA_CACHE_DIR`.
    pub(crate) fn from_env() -> Self {
        let cache_dir = std::env::var_os(CACHE_DIR_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        Self {
            state: Mutex::new(KernelState {
                pipelines: HashMap::new(),
                modules: HashMap::new(),
                driver_cache: DriverCache::NotOpened,
                cache_dir,
                stats: KernelCacheStats::default(),
                params: None,
                limits_override: None,
                force_device_kernels: false,
            }),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, KernelState> {
        // A panic while compiling leaves at worst a missing pipeline, compiled again next time.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl KernelState {
    pub(crate) fn stats(&self) -> KernelCacheStats {
        self.stats.clone()
    }

    /// The compiled pipeline of `kernel`, compiling it at the first use.
    pub(crate) fn pipeline(
        &mut self,
        device: &wgpu::Device,
        adapter: &wgpu::AdapterInfo,
        kernel: Kernel,
    ) -> Result<Arc<Compiled>> {
        if let Some(compiled) = self.pipelines.get(&kernel) {
            self.stats.pipeline_hits += 1;
            return Ok(Arc::clone(compiled));
        }
        let started = Instant::now();
        if let DriverCache::NotOpened = self.driver_cache {
            self.driver_cache = DriverCache::Opened(self.open_driver_cache(device, adapter));
        }
        let cache = match &self.driver_cache {
            DriverCache::Opened(cache) => cache.clone(),
            DriverCache::NotOpened => None,
        };
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let source = kernel.source();
        let module = match self.modules.get(&source) {
            Some(module) => module.clone(),
            None => {
                let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
                    label: Some(kernel.name()),
                    source: wgpu::ShaderSource::Wgsl(source.as_str().into()),
                });
                self.modules.insert(source, module.clone());
                module
            }
        };
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(kernel.name()),
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants: kernel.constants(),
                // No kernel here uses workgroup memory.
                zero_initialize_workgroup_memory: false,
            },
            cache: cache.as_ref(),
        });
        if let Some(error) = pollster::block_on(scope.pop()) {
            return Err(Error::Device {
                during: format!("compiling kernel {}", kernel.name()),
                reason: error.to_string(),
            });
        }
        let layout = pipeline.get_bind_group_layout(0);
        let compiled = Arc::new(Compiled { pipeline, layout });
        self.pipelines.insert(kernel, Arc::clone(&compiled));
        let took = started.elapsed();
        self.stats.pipelines_compiled += 1;
        self.stats.compile_time += took;
        self.stats.compiles.push((kernel.name(), took));
        if let Some(cache) = &cache {
            self.persist(cache);
        }
        Ok(compiled)
    }

    /// Opens the driver's pipeline cache, seeded from disk when `GPU_ARENA_CACHE_DIR` is set.
    fn open_driver_cache(
        &mut self,
        device: &wgpu::Device,
        adapter: &wgpu::AdapterInfo,
    ) -> Option<wgpu::PipelineCache> {
        if !device.features().contains(wgpu::Features::PIPELINE_CACHE) {
            return None;
        }
        let dir = self.cache_dir.as_ref()?;
        let key = wgpu::util::pipeline_cache_key(adapter)?;
        let file = dir.join(format!("{key}.bin"));
        let data = std::fs::read(&file).ok();
        self.stats.disk_cache_loaded_bytes = data.as_ref().map_or(0, |d| d.len() as u64);
        self.stats.disk_cache_file = Some(file);
        // The file holds what `persist` wrote for an adapter with this cache key, if anything.
        Some(crate::backend::create_pipeline_cache(
            device,
            "gpu-arena kernels",
            data.as_deref(),
        ))
    }

    /// Writes the driver cache to its file (atomically: a temporary file, then a rename), so
    /// the next process finds every pipeline compiled so far. Failures only cost speed.
    fn persist(&self, cache: &wgpu::PipelineCache) {
        let (Some(file), Some(data)) = (&self.stats.disk_cache_file, cache.get_data()) else {
            return;
        };
        let written = file
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| {
                let temporary = file.with_extension(format!("{}.tmp", std::process::id()));
                std::fs::write(&temporary, &data)?;
                std::fs::rename(&temporary, file)
            });
        if let Err(e) = written {
            log::warn!(
                "gpu-arena: could not write the pipeline cache {}: {e}",
                file.display()
            );
        }
    }
}
