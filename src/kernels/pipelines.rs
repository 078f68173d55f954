//! Compiled kernels, once per context ("jit"): shader modules and compute pipelines are made at
//! the first use of each kernel variant and kept; on Vulkan a driver pipeline cache persists
//! the compiled code to `GPU_ARENA_CACHE_DIR` (see `disk_cache.rs`), so a second process
//! compiles faster.

use super::disk_cache::{DiskCache, DiskCacheLoad};
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

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
    /// Bytes of that file whose data seeded the driver cache at the first compilation (0 when
    /// there was no file or its data was discarded).
    pub disk_cache_loaded_bytes: u64,
    /// Whether the file's data was used, missing or discarded (and why), decided at the first
    /// compilation; [`DiskCacheLoad::Off`] without a cache file.
    pub disk_cache_load: DiskCacheLoad,
    /// Bytes of the file as last written (after each compilation; 0 before the first write).
    pub disk_cache_written_bytes: u64,
    /// Why the last write of the file failed (a directory in its place, a read-only or
    /// impossible path); `None` once a write succeeds. Kernels work either way.
    pub disk_cache_write_error: Option<String>,
}

/// A compiled kernel variant.
pub(crate) struct Compiled {
    pub(crate) pipeline: wgpu::ComputePipeline,
    pub(crate) layout: wgpu::BindGroupLayout,
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
    disk_cache: DiskCache,
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
        Self {
            state: Mutex::new(KernelState {
                pipelines: HashMap::new(),
                modules: HashMap::new(),
                disk_cache: DiskCache::from_env(),
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
        let cache = self
            .disk_cache
            .driver_cache(device, adapter, &mut self.stats);
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
        self.disk_cache.persist(&mut self.stats);
        Ok(compiled)
    }
}
