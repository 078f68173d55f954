//! Compiled kernels, once per context ("jit"): shader modules and compute pipelines are made at
//! the first use of each kernel variant and kept; on Vulkan a driver pipeline cache persists
//! the compiled code to `GPU_ARENA_CACHE_DIR` (see `disk_cache.rs`), so a second process
//! compiles faster.

use super::cache_stats::KernelCacheStats;
use super::disk_cache::DiskCache;
use super::error_scopes::{DeviceRefusal, ErrorScopes};
use super::library_kernels::Builtin;
use super::limits::check_device_limits;
use super::reflect::{reflect_kernel, KernelSignature, ParamsBlock, ParamsKind, ReflectedKernel};
use super::source::{KernelDesc, KernelSource};
use super::source_bounds::{check_wgsl_bounds, COMPILER_STACK_BYTES, MAX_SPIRV_WORDS};
use super::tuned_choices::SizeClass;
use crate::error::{Error, Result};
use crate::kernel_tuning::{KernelShape, KernelTuning};
use crate::lock::{rank, Mutex, MutexGuard};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;
use wgpu::naga;

/// A compiled kernel: its pipeline, the layout its bind groups follow, and what it binds.
pub(crate) struct Compiled {
    /// The name in statistics, errors and the timeline.
    pub(crate) name: String,
    pub(crate) pipeline: wgpu::ComputePipeline,
    pub(crate) layout: wgpu::BindGroupLayout,
    pub(crate) signature: KernelSignature,
}

/// What identifies a compiled kernel in the cache.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum CacheKey {
    Builtin(Builtin, KernelShape),
    /// A user's kernel. Two keys lead to one compiled kernel: the constants as asked for
    /// (sorted by the name or id given), found without parsing, and as applied (sorted by
    /// naga's key for each override, see [`ReflectedKernel::constants`]), so that a set given
    /// in another order, or by id instead of name, finds the kernel compiled first.
    User {
        source: UserSource,
        entry_point: String,
        /// Names and the bits of their values (f64 is not `Eq`), sorted by name.
        constants: Vec<(String, u64)>,
        /// The kernel's name ([`kernel_name`]): the same module under two names is two
        /// kernels to the statistics and the timeline, sharing one pipeline.
        name: String,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum UserSource {
    Wgsl(String),
    SpirV(Vec<u32>),
}

/// The kernels of one context. Lives in `ContextInner`; its lock also serialises writing the
/// kernel parameters and submitting the work that reads them (see `compute/launch.rs`).
pub(crate) struct KernelCache {
    state: Mutex<KernelState>,
}

/// Everything behind the kernel lock.
pub(crate) struct KernelState {
    pipelines: HashMap<CacheKey, Arc<Compiled>>,
    /// Shapes of the library's kernels compiled for tuning and not (yet) used by an op, with
    /// what each took to compile: kept out of the statistics until an op uses one, which then
    /// counts as that op's compilation (so tuning does not change what the statistics say).
    /// Those no class of their kernel chose go once every class has a shape.
    candidates: HashMap<(Builtin, KernelShape), (Arc<Compiled>, std::time::Duration)>,
    /// The shapes this context's ops found chosen for the device (in the process's table or
    /// the tuning file), so that an op looks them up there once, not at every dispatch.
    chosen: HashMap<(Builtin, SizeClass), KernelShape>,
    /// [`ArenaConfig::kernel_tuning`](crate::ArenaConfig), or what
    /// [`Context::set_kernel_tuning`](crate::Context::set_kernel_tuning) set since.
    tuning: KernelTuning,
    disk_cache: DiskCache,
    stats: KernelCacheStats,
    /// The uniform buffer parameter blocks are written to, one slot per dispatch aligned to
    /// `min_uniform_buffer_offset_alignment`, and its size in bytes (grown on demand, reused by
    /// every submission; see `compute/sequence.rs`).
    pub(crate) params: ParamsBuffer,
}

/// The parameter buffer: one slot per dispatch of a submission, grown on demand and reused
/// (its writes are queue-ordered after every earlier submission's reads).
pub(crate) type ParamsBuffer = Option<(wgpu::Buffer, u64)>;

impl KernelCache {
    /// An empty cache whose library kernels are tuned as `tuning` says; the persistent
    /// directory comes from `GPU_ARENA_CACHE_DIR`.
    ///
    /// Errors: a blank `GPU_ARENA_CACHE_DIR` ([`Error::Config`]).
    pub(crate) fn from_env(tuning: KernelTuning) -> Result<Self> {
        Ok(Self {
            state: Mutex::new(
                rank::KERNEL_CACHE,
                KernelState {
                    pipelines: HashMap::new(),
                    candidates: HashMap::new(),
                    chosen: HashMap::new(),
                    tuning,
                    disk_cache: DiskCache::from_env()?,
                    stats: KernelCacheStats::default(),
                    params: None,
                },
            ),
        })
    }

    #[cfg_attr(debug_assertions, track_caller)]
    pub(crate) fn lock(&self) -> MutexGuard<'_, KernelState> {
        // A panic while compiling leaves at worst a missing pipeline, compiled again next time.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A user's kernel, compiled at the first request for this source, entry point and set of
    /// constants (in any order, by name or id), and found in the cache after. The source is
    /// parsed and reflected without the kernel lock held, on a thread of its own (see
    /// `source_bounds.rs`), so a hostile source neither blocks other threads' launches nor
    /// poisons the lock. The same module asked for under another name shares the pipeline
    /// compiled first, under its own name.
    pub(crate) fn user(
        &self,
        device: &wgpu::Device,
        adapter: &wgpu::AdapterInfo,
        limits: &wgpu::Limits,
        desc: &KernelDesc<'_>,
    ) -> Result<Arc<Compiled>> {
        let name = kernel_name(desc);
        let name = name.as_str();
        let source = match desc.source {
            KernelSource::Wgsl(text) => UserSource::Wgsl(text.to_string()),
            KernelSource::SpirV(words) => UserSource::SpirV(words.to_vec()),
        };
        let mut asked: Vec<(String, u64)> = desc
            .constants
            .iter()
            .map(|&(name, value)| (name.to_string(), normalized_bits(value)))
            .collect();
        asked.sort();
        let asked = CacheKey::User {
            source,
            entry_point: desc.entry_point.to_string(),
            constants: asked,
            name: name.to_string(),
        };
        if let Some(compiled) = self.lock().hit(&asked) {
            return Ok(compiled);
        }
        let started = Instant::now();
        let reflected = prepare(desc, name, adapter.backend, limits)?;
        let CacheKey::User {
            source,
            entry_point,
            ..
        } = &asked
        else {
            unreachable!("built as a user key above")
        };
        let applied = CacheKey::User {
            source: source.clone(),
            entry_point: entry_point.clone(),
            constants: reflected
                .constants
                .iter()
                .map(|(key, value)| (key.clone(), normalized_bits(*value)))
                .collect(),
            name: name.to_string(),
        };
        let mut state = self.lock();
        if let Some(compiled) = state.hit(&applied) {
            state.pipelines.insert(asked, Arc::clone(&compiled));
            return Ok(compiled);
        }
        if let Some(compiled) = state.renamed(&applied, name) {
            state.pipelines.insert(asked, Arc::clone(&compiled));
            state.pipelines.insert(applied, Arc::clone(&compiled));
            return Ok(compiled);
        }
        let (compiled, took) = state.make(device, adapter, limits, name, reflected, started)?;
        state.count(name, took);
        state.pipelines.insert(asked, Arc::clone(&compiled));
        state.pipelines.insert(applied, Arc::clone(&compiled));
        Ok(compiled)
    }

    /// The refusal [`KernelCache::user`] would give `desc` before it compiles anything (its
    /// source, entry point, constants, and this device's limits), or its constants as applied
    /// (each under naga's key for its override, sorted: one set whether given by name or by
    /// id): so that every variant of a kernel is checked before the first is compiled.
    pub(crate) fn check_user(
        &self,
        device: &wgpu::Device,
        adapter: &wgpu::AdapterInfo,
        limits: &wgpu::Limits,
        desc: &KernelDesc<'_>,
    ) -> Result<Vec<(String, f64)>> {
        let name = kernel_name(desc);
        let reflected = prepare(desc, &name, adapter.backend, limits)?;
        let immediates = device.features().contains(wgpu::Features::IMMEDIATES);
        check_device_limits(&reflected.signature, limits, immediates).map_err(|exceeded| {
            Error::KernelCompile {
                kernel: name,
                message: exceeded.to_string(),
            }
        })?;
        Ok(reflected.constants)
    }
}

/// A kernel's name in errors, statistics and the timeline: its label, else its entry point and
/// the first 8 hex digits of a 64-bit FNV-1a hash of its source and entry point
/// (`main#1a2b3c4d`), the same in every run, so that kernels whose entry points share a name
/// (every example's `main`) are told apart.
pub(crate) fn kernel_name(desc: &KernelDesc<'_>) -> String {
    if let Some(label) = desc.label {
        return label.to_string();
    }
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    let mut add = |bytes: &[u8]| {
        for &byte in bytes {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
    };
    match desc.source {
        KernelSource::Wgsl(text) => add(text.as_bytes()),
        KernelSource::SpirV(words) => add(bytemuck::cast_slice(words)),
    }
    add(&[0]);
    add(desc.entry_point.as_bytes());
    format!("{}#{:08x}", desc.entry_point, hash >> 32)
}

/// An override value's bits for a cache key, with -0.0 as 0.0 (they set the same value).
fn normalized_bits(value: f64) -> u64 {
    if value == 0.0 {
        0
    } else {
        value.to_bits()
    }
}

impl KernelState {
    pub(crate) fn stats(&self) -> KernelCacheStats {
        KernelCacheStats {
            tuning_pipelines_held: self.candidates.len() as u64,
            ..self.stats.clone()
        }
    }

    /// The compiled pipeline of one of the library's kernels in `shape`, compiling it at the
    /// first use (or taking it from the tuner's candidates).
    pub(crate) fn builtin(
        &mut self,
        device: &wgpu::Device,
        adapter: &wgpu::AdapterInfo,
        kernel: Builtin,
        shape: KernelShape,
    ) -> Result<Arc<Compiled>> {
        let key = CacheKey::Builtin(kernel, shape);
        if let Some(compiled) = self.hit(&key) {
            return Ok(compiled);
        }
        let (compiled, took) = match self.candidates.remove(&(kernel, shape)) {
            Some(candidate) => candidate,
            None => self.make_builtin(device, adapter, kernel, shape)?,
        };
        self.count(kernel.name(), took);
        self.pipelines.insert(key, Arc::clone(&compiled));
        Ok(compiled)
    }

    /// One of the library's kernels in `shape` for the tuner to time: the compiled pipeline if
    /// an op uses it already, else compiled once and kept (uncounted) for the next tuning or op.
    pub(crate) fn tuning_candidate(
        &mut self,
        device: &wgpu::Device,
        adapter: &wgpu::AdapterInfo,
        kernel: Builtin,
        shape: KernelShape,
    ) -> Result<Arc<Compiled>> {
        if let Some(compiled) = self.pipelines.get(&CacheKey::Builtin(kernel, shape)) {
            return Ok(Arc::clone(compiled));
        }
        if let Some((compiled, _)) = self.candidates.get(&(kernel, shape)) {
            return Ok(Arc::clone(compiled));
        }
        let (compiled, took) = self.make_builtin(device, adapter, kernel, shape)?;
        self.candidates
            .insert((kernel, shape), (Arc::clone(&compiled), took));
        Ok(compiled)
    }

    /// The shape chosen for `kernel` and `class` that this context met already.
    pub(crate) fn chosen_shape(&self, kernel: Builtin, class: SizeClass) -> Option<KernelShape> {
        self.chosen.get(&(kernel, class)).copied()
    }

    /// Remembers the shape chosen for `kernel` and `class` for this context's later ops. Once
    /// every class of the kernel has its shape, the candidates compiled only to be timed that
    /// no class chose are dropped: the context keeps no pipeline it will not run.
    pub(crate) fn remember_shape(&mut self, kernel: Builtin, class: SizeClass, shape: KernelShape) {
        self.chosen.insert((kernel, class), shape);
        let chosen: Option<Vec<KernelShape>> = SizeClass::ALL
            .iter()
            .map(|&c| self.chosen.get(&(kernel, c)).copied())
            .collect();
        if let Some(chosen) = chosen {
            self.candidates
                .retain(|&(k, s), _| k != kernel || chosen.contains(&s));
        }
    }

    /// Whether and how the library's kernels are tuned on this context.
    pub(crate) fn tuning(&self) -> KernelTuning {
        self.tuning
    }

    /// Changes the tuning setting for ops recorded from now on.
    pub(crate) fn set_tuning(&mut self, tuning: KernelTuning) {
        self.tuning = tuning;
    }

    /// The directory of the pipeline cache on disk (`GPU_ARENA_CACHE_DIR`), where tuned
    /// choices are kept too.
    pub(crate) fn cache_dir(&self) -> Option<&std::path::Path> {
        self.disk_cache.dir()
    }

    fn make_builtin(
        &mut self,
        device: &wgpu::Device,
        adapter: &wgpu::AdapterInfo,
        kernel: Builtin,
        shape: KernelShape,
    ) -> Result<(Arc<Compiled>, std::time::Duration)> {
        let started = Instant::now();
        let source = kernel.source(shape);
        // The library's own sources are small and shallow: parsed on the caller's thread.
        let wgsl = KernelSource::Wgsl(&source);
        let reflected = parse_and_reflect(wgsl, "main", kernel.constants(), adapter.backend)
            .map_err(|refused| Error::KernelCompile {
                kernel: kernel.name().to_string(),
                message: refused.to_string(),
            })?;
        let limits = device.limits();
        self.make(device, adapter, &limits, kernel.name(), reflected, started)
    }

    /// The kernel under `key` if compiled, counted as a hit.
    fn hit(&mut self, key: &CacheKey) -> Option<Arc<Compiled>> {
        let compiled = Arc::clone(self.pipelines.get(key)?);
        self.stats.pipeline_hits += 1;
        Some(compiled)
    }

    /// The module of user key `key` compiled under another name, as a kernel named `name`
    /// sharing its pipeline, counted as a hit.
    fn renamed(&mut self, key: &CacheKey, name: &str) -> Option<Arc<Compiled>> {
        let unnamed = |key: &CacheKey| match key {
            CacheKey::User {
                source,
                entry_point,
                constants,
                ..
            } => Some((source.clone(), entry_point.clone(), constants.clone())),
            CacheKey::Builtin(..) => None,
        };
        let wanted = unnamed(key)?;
        let (_, same) = self
            .pipelines
            .iter()
            .find(|(other, _)| unnamed(other).as_ref() == Some(&wanted))?;
        let compiled = Arc::new(Compiled {
            name: name.to_string(),
            pipeline: same.pipeline.clone(),
            layout: same.layout.clone(),
            signature: same.signature.clone(),
        });
        self.stats.pipeline_hits += 1;
        Some(compiled)
    }

    /// Counts a compilation of `name` that took `took` in the statistics.
    fn count(&mut self, name: &str, took: std::time::Duration) {
        self.stats.pipelines_compiled += 1;
        self.stats.compile_time += took;
        self.stats.compiles.push((name.to_string(), took));
    }

    /// The one compilation path, for the library's kernels and users' alike: check the
    /// reflected module (bindings, parameters, workgroup size and memory; storage made
    /// `read_write`) against the device's limits, lay out its bind group from that, and make
    /// the pipeline inside wgpu error scopes, so a module the device refuses is an `Err` with
    /// wgpu's message. Returns the pipeline and the time since `started`, uncounted (the
    /// caller counts it with [`KernelState::count`]).
    fn make(
        &mut self,
        device: &wgpu::Device,
        adapter: &wgpu::AdapterInfo,
        limits: &wgpu::Limits,
        name: &str,
        reflected: ReflectedKernel,
        started: Instant,
    ) -> Result<(Arc<Compiled>, std::time::Duration)> {
        let failed = |message: String| Error::KernelCompile {
            kernel: name.to_string(),
            message,
        };
        let ReflectedKernel {
            module, signature, ..
        } = reflected;
        let entry_point = signature.entry_point.clone();
        check_device_limits(
            &signature,
            limits,
            device.features().contains(wgpu::Features::IMMEDIATES),
        )
        .map_err(|exceeded| failed(exceeded.to_string()))?;
        let cache = self
            .disk_cache
            .driver_cache(device, adapter, &mut self.stats);
        // On the compiler's thread too: making the pipeline translates the module to the
        // backend's language (GLSL on GL, whose writer recurses once per nesting level) and
        // runs the driver's compiler, which a deep accepted module must not overflow the
        // caller's stack in.
        let (pipeline, layout) = on_compiler_thread(|| {
            make_pipeline(
                device,
                name,
                module,
                &signature,
                &entry_point,
                cache.as_ref(),
            )
        })
        .map_err(|refused| failed(refused.to_string()))?
        .map_err(|reason| failed(format!("the device refused the kernel: {reason}")))?;
        let compiled = Arc::new(Compiled {
            name: name.to_string(),
            pipeline,
            layout,
            signature,
        });
        let took = started.elapsed();
        self.disk_cache.persist(&mut self.stats);
        Ok((compiled, took))
    }
}

/// The bind group layout and the pipeline of a reflected module, made inside wgpu error scopes
/// on the calling thread (wgpu's scopes are per thread), so a module the device refuses is
/// the scopes' refusal.
fn make_pipeline(
    device: &wgpu::Device,
    name: &str,
    module: naga::Module,
    signature: &KernelSignature,
    entry_point: &str,
    cache: Option<&wgpu::PipelineCache>,
) -> std::result::Result<(wgpu::ComputePipeline, wgpu::BindGroupLayout), DeviceRefusal> {
    let scopes = ErrorScopes::push(device);
    let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some(name),
        entries: &layout_entries(signature),
    });
    let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some(name),
        bind_group_layouts: &[Some(&layout)],
        immediate_size: match &signature.params {
            Some(ParamsBlock {
                kind: ParamsKind::Immediate,
                size,
                ..
            }) => (*size).next_multiple_of(4) as u32,
            _ => 0,
        },
    });
    let shader = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some(name),
        source: wgpu::ShaderSource::Naga(std::borrow::Cow::Owned(module)),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(name),
        layout: Some(&pipeline_layout),
        module: &shader,
        entry_point: Some(entry_point),
        compilation_options: wgpu::PipelineCompilationOptions {
            // Overrides were applied during reflection.
            constants: &[],
            zero_initialize_workgroup_memory: true,
        },
        cache,
    });
    scopes.pop()?;
    Ok((pipeline, layout))
}

/// Why the compiler's thread gave no result.
#[derive(Debug, thiserror::Error)]
enum CompilerThreadFailure {
    #[error("could not start the compiler's thread: {0}")]
    NotStarted(std::io::Error),
    #[error("the shader compiler (naga, or the backend's) failed on this module ({0}); it is refused: check that it is valid (spirv-val, naga's CLI)")]
    Panicked(String),
}

/// Runs `work` on a thread with [`COMPILER_STACK_BYTES`] of stack and waits for it: every
/// step that recurses over a module's expressions (naga's front ends, the backend's writer,
/// the driver's compiler) runs there, never on the caller's thread, whose stack may be small.
/// A panic there is caught and returned.
fn on_compiler_thread<R: Send>(
    work: impl FnOnce() -> R + Send,
) -> std::result::Result<R, CompilerThreadFailure> {
    std::thread::scope(|scope| {
        let worker = std::thread::Builder::new()
            .name("gpu-arena-compile".into())
            .stack_size(COMPILER_STACK_BYTES)
            .spawn_scoped(scope, work)
            .map_err(CompilerThreadFailure::NotStarted)?;
        worker.join().map_err(|panic| {
            CompilerThreadFailure::Panicked(
                panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default(),
            )
        })
    })
}

/// Parses, validates and reflects a user's source on a thread with [`COMPILER_STACK_BYTES`] of
/// stack, after refusing WGSL beyond the bounds of `source_bounds.rs` and SPIR-V beyond
/// [`MAX_SPIRV_WORDS`]; a panic of the compiler is caught there. A kernel whose buffers naga
/// would not lay out as WGSL does on `backend` (`buffer_layouts.rs`) is refused there too.
/// Every failure is [`Error::KernelCompile`] naming `name`.
fn prepare(
    desc: &KernelDesc<'_>,
    name: &str,
    backend: wgpu::Backend,
    limits: &wgpu::Limits,
) -> Result<ReflectedKernel> {
    let (source, entry_point, constants) = (desc.source, desc.entry_point, desc.constants);
    let failed = |message: String| Error::KernelCompile {
        kernel: name.to_string(),
        message,
    };
    match source {
        KernelSource::Wgsl(text) => {
            check_wgsl_bounds(text).map_err(|bounds| failed(bounds.to_string()))?
        }
        KernelSource::SpirV(words) if words.len() > MAX_SPIRV_WORDS => {
            return Err(failed(format!(
                "the SPIR-V module has {} words, more than the {MAX_SPIRV_WORDS} gpu-arena compiles",
                words.len()
            )))
        }
        KernelSource::SpirV(_) => {}
    }
    on_compiler_thread(|| parse_and_reflect(source, entry_point, constants, backend))
        .map_err(|failure| failed(failure.to_string()))?
        .map_err(|refused| failed(with_workgroup_limits(refused, limits)))
}

/// The message of `refused`; a workgroup size no device runs
/// ([`super::reflect::ReflectError::WorkgroupOutOfRange`]) completed with this device's limits.
fn with_workgroup_limits(refused: SourceRefusal, limits: &wgpu::Limits) -> String {
    match refused {
        SourceRefusal::Reflect(
            out_of_range @ super::reflect::ReflectError::WorkgroupOutOfRange { .. },
        ) => format!(
            "{out_of_range}: each axis must be from 1 to this device's \
             max_compute_workgroup_size_x/y/z ({}, {}, {}), and their product at most \
             its max_compute_invocations_per_workgroup ({}) (Context::limits)",
            limits.max_compute_workgroup_size_x,
            limits.max_compute_workgroup_size_y,
            limits.max_compute_workgroup_size_z,
            limits.max_compute_invocations_per_workgroup
        ),
        other => other.to_string(),
    }
}

/// Why a kernel's source is refused before it reaches the device: the compiler's message, or
/// why the module cannot be a kernel.
#[derive(Debug, thiserror::Error)]
enum SourceRefusal {
    /// The WGSL front end's message, pointing at the line.
    #[error("{0}")]
    Wgsl(String),
    /// The SPIR-V front end's error.
    #[error("SPIR-V: {0}")]
    SpirV(naga::front::spv::Error),
    /// The module parsed but cannot be a gpu-arena kernel.
    #[error("{0}")]
    Reflect(super::reflect::ReflectError),
    /// A buffer naga would not lay out as WGSL does on this backend.
    #[error("{0}")]
    Layout(super::buffer_layouts::LayoutRefusal),
}

/// Parses a kernel's source into naga IR, reflects it and checks its buffers' layouts on
/// `backend` (`buffer_layouts.rs`); a syntax error is the compiler's message, pointing at the
/// line.
fn parse_and_reflect(
    source: KernelSource<'_>,
    entry_point: &str,
    constants: &[(&str, f64)],
    backend: wgpu::Backend,
) -> std::result::Result<ReflectedKernel, SourceRefusal> {
    let (module, text) = match source {
        KernelSource::Wgsl(text) => (
            naga::front::wgsl::parse_str(text)
                .map_err(|e| SourceRefusal::Wgsl(e.emit_to_string(text)))?,
            Some(text),
        ),
        KernelSource::SpirV(words) => (
            naga::front::spv::parse_u8_slice(bytemuck::cast_slice(words), &Default::default())
                .map_err(SourceRefusal::SpirV)?,
            None,
        ),
    };
    let reflected =
        reflect_kernel(module, entry_point, constants, text).map_err(SourceRefusal::Reflect)?;
    super::buffer_layouts::check_kernel(&reflected.module, &reflected.signature, text, backend)
        .map_err(SourceRefusal::Layout)?;
    Ok(reflected)
}

/// The bind group layout of a kernel: every storage array `read_write` (see `reflect.rs`), the
/// parameter block as a uniform, all visible to the compute stage.
fn layout_entries(signature: &KernelSignature) -> Vec<wgpu::BindGroupLayoutEntry> {
    let storage = signature
        .storage
        .iter()
        .map(|b| wgpu::BindGroupLayoutEntry {
            binding: b.binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage { read_only: false },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        });
    let uniform = signature.params.iter().filter_map(|p| match p.kind {
        ParamsKind::Uniform { binding } => Some(wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Uniform,
                has_dynamic_offset: false,
                min_binding_size: wgpu::BufferSize::new(p.size),
            },
            count: None,
        }),
        ParamsKind::Immediate => None,
    });
    storage.chain(uniform).collect()
}
