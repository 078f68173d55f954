//! What a compute kernel needs from its caller, read from its module (naga IR): the storage
//! arrays it binds (element type and size, access), its one parameter block (a uniform or
//! immediate data) and its workgroup size. Pure: no device is involved, so every rule here is
//! tested on source text alone.
//!
//! The reflection also rewrites every storage binding to `read_write` (see
//! [`reflect_kernel`]): arena arrays share region buffers, and wgpu tracks usage per buffer, so
//! a `read` binding next to a `read_write` binding of another array in the same region would be
//! a usage conflict within one dispatch. What the kernel itself declared is kept in
//! [`StorageBinding::writable`], and the launch checks arguments against that.

use wgpu::naga;

/// The one bind group gpu-arena binds: WebGPU allows four, and one keeps launches cheap.
pub const KERNEL_BIND_GROUP: u32 = 0;

/// One storage array a kernel binds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageBinding {
    /// `@binding(n)` in group 0.
    pub binding: u32,
    /// The variable's name in the source (empty for SPIR-V without names).
    pub name: String,
    /// The element type, as WGSL writes it (`f32`, `vec4<u32>`, a struct's name).
    pub element_type: String,
    /// Bytes from one element to the next (WGSL's array stride; the type's size for a binding
    /// that is not an array).
    pub element_stride: u64,
    /// Bytes the binding needs at least: one element for a runtime-sized array, the struct with
    /// one element of its runtime-sized last member (its size rounded up to its alignment, as
    /// WebGPU's minimum binding size), the whole type otherwise.
    pub min_bytes: u64,
    /// True when the binding is an array (`array<E>` or `array<E, N>`): arguments must then
    /// hold elements of the WGSL element's size. False for a single value or struct.
    pub is_array: bool,
    /// The array's length when the type fixes it (`array<f32, 64>`), `None` when runtime-sized
    /// or not an array.
    pub fixed_len: Option<u64>,
    /// True when the kernel declared the binding `read_write` (so the launch wants a writable
    /// argument); false for `read`.
    pub writable: bool,
    /// The scalar the element is made of, as WGSL writes it (`f32` for `f32`, `vec4<f32>`,
    /// `mat4x4<f32>`, `array<f32, 4>` and `atomic<f32>` alike); `None` for structs. A launch
    /// refuses an argument of Rust scalars of another kind (`u32` for `f32`), see
    /// [`crate::DeviceArray::bitcast`].
    pub element_scalar: Option<String>,
    /// For a runtime-sized array (`array<E>`, or a struct whose last member is one): the byte
    /// offset of the array in the binding and its element stride, so `arrayLength` is
    /// `(bound bytes - offset) / stride`. A view must hold a whole number of elements.
    pub runtime_array: Option<(u64, u64)>,
}

/// Where a kernel's parameter block comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamsKind {
    /// `var<uniform>` at `@binding(n)` of group 0.
    Uniform {
        /// The binding number.
        binding: u32,
    },
    /// `var<immediate>` (push constants), set per dispatch; needs `Features::IMMEDIATES`.
    Immediate,
}

/// A kernel's parameter block: the one uniform or immediate variable it reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamsBlock {
    /// Uniform buffer or immediate data.
    pub kind: ParamsKind,
    /// The variable's name in the source.
    pub name: String,
    /// The type's name or WGSL spelling.
    pub type_name: String,
    /// The block's size in bytes as WGSL lays it out (what `.params()` must pass exactly).
    pub size: u64,
}

/// Everything a launch checks its arguments against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelSignature {
    /// The entry point.
    pub entry_point: String,
    /// `@workgroup_size(x, y, z)` after override constants were applied.
    pub workgroup_size: [u32; 3],
    /// Storage arrays the entry point uses, in binding order: the order of the launch's
    /// arguments.
    pub storage: Vec<StorageBinding>,
    /// The parameter block, if the kernel reads one.
    pub params: Option<ParamsBlock>,
    /// Bytes of `var<workgroup>` memory the entry point uses, each variable rounded up to 16
    /// bytes as WebGPU counts them (compared with `max_compute_workgroup_storage_size`).
    pub workgroup_memory_bytes: u64,
}

/// A module ready to compile: what [`reflect_kernel`] returns.
#[derive(Debug)]
pub struct ReflectedKernel {
    /// The module with overrides applied and storage made `read_write`.
    pub module: naga::Module,
    /// What the kernel binds.
    pub signature: KernelSignature,
    /// The override constants as applied, one per override, each under the key naga looks it
    /// up by (its `@id` when it has one, else its name), sorted: the same set given in any
    /// order, by name or by id, gives the same list (the compile cache's key).
    pub constants: Vec<(String, f64)>,
}

/// Why a module cannot be a gpu-arena kernel. The launch layer wraps this into
/// [`crate::Error::KernelCompile`] with the kernel's label.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReflectError {
    /// A `@workgroup_size` no device runs (an axis of 0 or above naga's 16384), as the source
    /// declares it or as the override constants make it: the compile cache adds the device's
    /// own limits to the message.
    #[error("{given} has an axis of 0 or above 16384")]
    WorkgroupOutOfRange {
        /// What gives the size, with its values: `the kernel's @workgroup_size(20000, 1, 1)`,
        /// or `the @workgroup_size the override constants give (WG = 0)`.
        given: String,
    },
    /// Any other refusal, in words that say what to change.
    #[error("{0}")]
    Other(String),
}

/// Validates `module`, applies the override `constants`, finds the compute entry point
/// `entry_point` and reads its signature. Returns the module to compile: overrides resolved,
/// and every storage binding made `read_write` (see the module docs).
///
/// Only the globals the entry point uses count (as in wgpu's derived layouts). Refused, each
/// with a message that says what to change: a missing or non-compute entry point, one whose
/// name is over [`MAX_ENTRY_POINT_BYTES`](super::source_bounds::MAX_ENTRY_POINT_BYTES),
/// bindings in a group other than 0, textures and samplers, more than one parameter block,
/// and overrides that are unknown or not given a value.
pub fn reflect_kernel(
    module: naga::Module,
    entry_point: &str,
    constants: &[(&str, f64)],
    source_for_messages: Option<&str>,
) -> Result<ReflectedKernel, ReflectError> {
    let info = validate(&module, source_for_messages)?;
    let index = module
        .entry_points
        .iter()
        .position(|e| e.name == entry_point && e.stage == naga::ShaderStage::Compute)
        .ok_or_else(|| {
            let computes: Vec<&str> = module
                .entry_points
                .iter()
                .filter(|e| e.stage == naga::ShaderStage::Compute)
                .map(|e| e.name.as_str())
                .collect();
            let computes = match computes.is_empty() {
                true => "the module has no @compute entry point".to_string(),
                false => format!(
                    "the module's @compute entry points are {}",
                    computes.join(", ")
                ),
            };
            ReflectError::Other(format!(
                "no @compute entry point named {entry_point:?}; {computes}"
            ))
        })?;
    if entry_point.len() > super::source_bounds::MAX_ENTRY_POINT_BYTES {
        return Err(ReflectError::Other(format!(
            "the entry point's name is {} bytes long: Vulkan takes names of at most \
             {} bytes, so give it a shorter one",
            entry_point.len(),
            super::source_bounds::MAX_ENTRY_POINT_BYTES
        )));
    }
    let resolved = resolve_constants(&module, constants)?;
    let (module, info) = if module.overrides.is_empty() {
        (module, info)
    } else {
        let map: naga::back::PipelineConstants = resolved.iter().cloned().collect();
        let (resolved, info) = naga::back::pipeline_constants::process_overrides(
            &module,
            &info,
            Some((naga::ShaderStage::Compute, entry_point)),
            &map,
        )
        .map_err(|e| override_refusal(&e, &resolved))?;
        (resolved.into_owned(), info.into_owned())
    };
    // `process_overrides` may keep only the chosen entry point: look it up again.
    let index = module
        .entry_points
        .iter()
        .position(|e| e.name == entry_point && e.stage == naga::ShaderStage::Compute)
        .unwrap_or(index);
    let signature = signature_of(&module, &info, index)?;
    Ok(ReflectedKernel {
        module: writable_storage(module),
        signature,
        constants: resolved,
    })
}

/// Whether naga's validation refused a workgroup size out of its range.
fn workgroup_out_of_range(invalid: &naga::valid::ValidationError) -> bool {
    use naga::valid::{EntryPointError, ValidationError};
    matches!(
        invalid,
        ValidationError::EntryPoint {
            source: EntryPointError::OutOfRangeWorkgroupSize,
            ..
        }
    )
}

/// Why naga refused the module once the override constants (`given`, as applied) were
/// applied: a workgroup size out of range, an override with no value, else naga's error and
/// its causes.
fn override_refusal(
    error: &naga::back::pipeline_constants::PipelineConstantError,
    given: &[(String, f64)],
) -> ReflectError {
    use naga::back::pipeline_constants::PipelineConstantError;
    if let PipelineConstantError::MissingValue(name) = error {
        return ReflectError::Other(format!(
            "the override constant {name} has no default value: give it one in \
             KernelDesc::constants (by its name, or by its @id written in decimal, \"7\")"
        ));
    }
    let out_of_range = match error {
        // naga's name for an axis that resolves to 0 (or to no constant at all).
        PipelineConstantError::NegativeWorkgroupSize => true,
        PipelineConstantError::ValidationError(invalid) => {
            workgroup_out_of_range(invalid.as_inner())
        }
        _ => false,
    };
    if out_of_range {
        let given: Vec<String> = given
            .iter()
            .map(|(key, value)| format!("{key} = {}", number(*value)))
            .collect();
        return ReflectError::WorkgroupOutOfRange {
            given: format!(
                "the @workgroup_size the override constants give ({})",
                given.join(", ")
            ),
        };
    }
    let mut message = format!("applying override constants: {error}");
    let mut cause = std::error::Error::source(error);
    while let Some(next) = cause {
        message.push_str(&format!(": {next}"));
        cause = next.source();
    }
    ReflectError::Other(message)
}

/// The override constants given, each resolved to its override (by name, or by `@id` written
/// in decimal, `"7"`) and checked against its type; returned under naga's key for it, sorted.
///
/// Refused, with the override named: an unknown name or id, the same override given twice
/// (also once by name and once by id), NaN or infinity, a fraction or a value out of range for
/// an integer override, a value out of range for `f32`/`f16`, a bool other than 0 or 1.
fn resolve_constants(
    module: &naga::Module,
    constants: &[(&str, f64)],
) -> Result<Vec<(String, f64)>, ReflectError> {
    let mut resolved: Vec<(String, f64, &str)> = Vec::with_capacity(constants.len());
    for &(given, value) in constants {
        let found = module.overrides.iter().find(|(_, o)| {
            o.name.as_deref() == Some(given) || o.id.is_some_and(|id| id.to_string() == given)
        });
        let Some((_, o)) = found else {
            let known: Vec<String> = module
                .overrides
                .iter()
                .map(|(_, o)| match (&o.name, o.id) {
                    (Some(name), Some(id)) => format!("{name} (@id({id}))"),
                    (Some(name), None) => name.clone(),
                    (None, Some(id)) => format!("@id({id})"),
                    (None, None) => "?".into(),
                })
                .collect();
            let known = match known.is_empty() {
                true => "it has none".to_string(),
                false => format!("its override constants are {}", known.join(", ")),
            };
            return Err(ReflectError::Other(format!(
                "the module has no override constant {given:?}; {known} (give a name, or an @id as a decimal string such as \"7\")"
            )));
        };
        let key = match (o.id, &o.name) {
            (Some(id), _) => id.to_string(),
            (None, Some(name)) => name.clone(),
            (None, None) => given.to_string(),
        };
        if let Some((_, first_value, first)) = resolved.iter().find(|(k, _, _)| *k == key) {
            let first = match *first == given {
                true => String::new(),
                false => format!(" as {first:?}"),
            };
            return Err(ReflectError::Other(format!(
                "override constant {given:?} is given twice ({}{first}, then {}): give each \
                 override once",
                number(*first_value),
                number(value)
            )));
        }
        let scalar = match module.types[o.ty].inner {
            naga::TypeInner::Scalar(scalar) => Some(scalar),
            _ => None,
        };
        check_override_value(given, value, scalar)?;
        // The value as the override holds it, so that two spellings of one value are one
        // cache key: an `f32` rounds to its nearest (0.1 and 0.1f32 are one), and 0.0 and -0.0
        // set the same value.
        let value = match scalar {
            Some(naga::Scalar {
                kind: naga::ScalarKind::Float,
                width: 4,
            }) => f64::from(value as f32),
            _ => value,
        };
        let value = if value == 0.0 { 0.0 } else { value };
        resolved.push((key, value, given));
    }
    let mut resolved: Vec<(String, f64)> = resolved.into_iter().map(|(k, v, _)| (k, v)).collect();
    resolved.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(resolved)
}

/// Errors unless `value` is exactly representable as the override's type (WebGPU converts
/// with truncation and clamping rules that would silently change what the user wrote).
fn check_override_value(
    name: &str,
    value: f64,
    scalar: Option<naga::Scalar>,
) -> Result<(), ReflectError> {
    let fail = |why: String| {
        Err(ReflectError::Other(format!(
            "override constant {name} = {}: {why}",
            number(value)
        )))
    };
    if !value.is_finite() {
        return fail("not a finite number".into());
    }
    let Some(scalar) = scalar else {
        return Ok(());
    };
    let integer_range = match (scalar.kind, scalar.width) {
        (naga::ScalarKind::Sint, 4) => Some((f64::from(i32::MIN), f64::from(i32::MAX))),
        (naga::ScalarKind::Uint, 4) => Some((0.0, f64::from(u32::MAX))),
        (naga::ScalarKind::Sint, 2) => Some((f64::from(i16::MIN), f64::from(i16::MAX))),
        (naga::ScalarKind::Uint, 2) => Some((0.0, f64::from(u16::MAX))),
        (naga::ScalarKind::Sint, 8) => Some((-(2f64.powi(63)), 2f64.powi(63) - 1024.0)),
        (naga::ScalarKind::Uint, 8) => Some((0.0, 2f64.powi(64) - 2048.0)),
        (naga::ScalarKind::Bool, _) => Some((0.0, 1.0)),
        _ => None,
    };
    let ty = type_name_of_scalar(scalar);
    if let Some((low, high)) = integer_range {
        if value.fract() != 0.0 {
            return fail(format!("{ty} takes whole numbers"));
        }
        if value < low || value > high {
            return fail(format!("out of the range of {ty} ({low} to {high})"));
        }
        return Ok(());
    }
    let max = match (scalar.kind, scalar.width) {
        (naga::ScalarKind::Float, 2) => 65504.0,
        (naga::ScalarKind::Float, 4) => f64::from(f32::MAX),
        _ => f64::MAX,
    };
    if value.abs() > max {
        return fail(format!("out of the range of {ty} (±{})", number(max)));
    }
    Ok(())
}

/// `value` as a person writes it: in exponent form where it has more than 16 digits before
/// its point or 4 zeros after it (`3.4028234663852886e38`, not its 39 digits).
fn number(value: f64) -> String {
    match value.abs() {
        a if a >= 1e16 || (a != 0.0 && a < 1e-4) => format!("{value:e}"),
        _ => value.to_string(),
    }
}

/// naga's validation with every capability: what the device cannot do, wgpu refuses when the
/// pipeline is made (inside an error scope), with its own message.
fn validate(
    module: &naga::Module,
    source: Option<&str>,
) -> Result<naga::valid::ModuleInfo, ReflectError> {
    naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(module)
    .map_err(|e| {
        if workgroup_out_of_range(e.as_inner()) {
            let declared = module
                .entry_points
                .iter()
                .map(|e| e.workgroup_size)
                .find(|size| size.iter().any(|&axis| axis == 0 || axis > 16384));
            return ReflectError::WorkgroupOutOfRange {
                given: match declared {
                    Some([x, y, z]) => format!("the kernel's @workgroup_size({x}, {y}, {z})"),
                    None => "the kernel's @workgroup_size".to_string(),
                },
            };
        }
        if let naga::valid::ValidationError::Layouter(naga::proc::LayoutError {
            ty,
            inner: naga::proc::LayoutErrorInner::TooLarge,
        }) = e.as_inner()
        {
            let holder = module.global_variables.iter().find(|(_, g)| g.ty == *ty);
            let place = match holder.and_then(|(_, g)| g.name.as_deref()) {
                Some(name) => format!(" of `{name}`"),
                None => String::new(),
            };
            return ReflectError::Other(format!(
                "the type `{}`{place} is larger than the {} bytes naga lays out (and than any \
                 device's max_storage_buffer_binding_size): declare a runtime-sized array \
                 (array<T>) and bind an array of the length you need",
                type_name(module, *ty),
                i32::MAX
            ));
        }
        ReflectError::Other(match source {
            Some(source) => e.emit_to_string(source),
            None => format!("{e:?}"),
        })
    })
}

fn signature_of(
    module: &naga::Module,
    info: &naga::valid::ModuleInfo,
    index: usize,
) -> Result<KernelSignature, ReflectError> {
    let entry = &module.entry_points[index];
    let uses = info.get_entry_point(index);
    let mut layouter = naga::proc::Layouter::default();
    layouter
        .update(module.to_ctx())
        .map_err(|e| ReflectError::Other(format!("laying out the module's types: {e}")))?;
    let mut storage = Vec::new();
    let mut params: Option<ParamsBlock> = None;
    let mut workgroup_memory_bytes = 0u64;
    for (handle, global) in module.global_variables.iter() {
        if uses[handle].is_empty() {
            continue;
        }
        let name = global.name.clone().unwrap_or_default();
        let type_name = type_name(module, global.ty);
        let size = u64::from(layouter[global.ty].size);
        if global.space == naga::AddressSpace::WorkGroup {
            workgroup_memory_bytes += size.next_multiple_of(WORKGROUP_VARIABLE_ROUNDING);
            continue;
        }
        let binding = match (&global.space, &global.binding) {
            (naga::AddressSpace::Immediate, _) => {
                set_params(
                    &mut params,
                    ParamsBlock {
                        kind: ParamsKind::Immediate,
                        name,
                        type_name,
                        size,
                    },
                )?;
                continue;
            }
            (naga::AddressSpace::Handle, _) => {
                return Err(ReflectError::Other(format!(
                    "`{name}` is a texture or sampler; gpu-arena kernels bind storage arrays and one parameter block"
                )))
            }
            (_, Some(binding)) => binding,
            (_, None) => continue,
        };
        if binding.group != KERNEL_BIND_GROUP {
            return Err(ReflectError::Other(format!(
                "`{name}` is in @group({}); gpu-arena binds @group({KERNEL_BIND_GROUP}) only: move it there",
                binding.group
            )));
        }
        match global.space {
            naga::AddressSpace::Uniform => set_params(
                &mut params,
                ParamsBlock {
                    kind: ParamsKind::Uniform {
                        binding: binding.binding,
                    },
                    name,
                    type_name,
                    size,
                },
            )?,
            naga::AddressSpace::Storage { access } => {
                let (element_type, element_stride, min_bytes, fixed_len, is_array, scalar) =
                    match module.types[global.ty].inner {
                        naga::TypeInner::Array { base, size, stride } => {
                            let fixed = match size {
                                naga::ArraySize::Constant(n) => Some(u64::from(n.get())),
                                _ => None,
                            };
                            let stride = u64::from(stride);
                            let min = fixed.map_or(stride, |n| n * stride);
                            let scalar = scalar_of(module, base);
                            (type_name_of(module, base), stride, min, fixed, true, scalar)
                        }
                        _ => {
                            let scalar = scalar_of(module, global.ty);
                            (type_name.clone(), size.max(1), size, None, false, scalar)
                        }
                    };
                storage.push(StorageBinding {
                    binding: binding.binding,
                    name,
                    element_type,
                    element_stride,
                    min_bytes,
                    is_array,
                    fixed_len,
                    writable: access.contains(naga::StorageAccess::STORE),
                    element_scalar: scalar.map(type_name_of_scalar),
                    runtime_array: runtime_array_of(module, global.ty),
                });
            }
            _ => {}
        }
    }
    storage.sort_by_key(|b| b.binding);
    Ok(KernelSignature {
        entry_point: entry.name.clone(),
        workgroup_size: entry.workgroup_size,
        storage,
        params,
        workgroup_memory_bytes,
    })
}

/// WebGPU counts each workgroup variable's size rounded up to 16 bytes against
/// `max_compute_workgroup_storage_size` (the spec's "workgroup storage size").
const WORKGROUP_VARIABLE_ROUNDING: u64 = 16;

/// The scalar a type is made of: itself, a vector's, a matrix's, an atomic's, an array's
/// element's; `None` for structs and everything else.
fn scalar_of(module: &naga::Module, ty: naga::Handle<naga::Type>) -> Option<naga::Scalar> {
    match module.types[ty].inner {
        naga::TypeInner::Scalar(s)
        | naga::TypeInner::Vector { scalar: s, .. }
        | naga::TypeInner::Matrix { scalar: s, .. }
        | naga::TypeInner::Atomic(s) => Some(s),
        naga::TypeInner::Array { base, .. } => scalar_of(module, base),
        _ => None,
    }
}

/// `(offset, stride)` of a runtime-sized array: the type itself, or a struct's last member.
fn runtime_array_of(module: &naga::Module, ty: naga::Handle<naga::Type>) -> Option<(u64, u64)> {
    match &module.types[ty].inner {
        naga::TypeInner::Array {
            size: naga::ArraySize::Dynamic,
            stride,
            ..
        } => Some((0, u64::from(*stride))),
        naga::TypeInner::Struct { members, .. } => {
            let last = members.last()?;
            runtime_array_of(module, last.ty)
                .map(|(offset, stride)| (u64::from(last.offset) + offset, stride))
        }
        _ => None,
    }
}

fn set_params(slot: &mut Option<ParamsBlock>, block: ParamsBlock) -> Result<(), ReflectError> {
    if let Some(first) = slot {
        return Err(ReflectError::Other(format!(
            "the kernel reads two parameter blocks (`{}` and `{}`); gpu-arena passes one: put the parameters in one struct",
            first.name, block.name
        )));
    }
    *slot = Some(block);
    Ok(())
}

/// Every storage variable made `read_write` (see the module docs).
fn writable_storage(mut module: naga::Module) -> naga::Module {
    for (_, global) in module.global_variables.iter_mut() {
        if let naga::AddressSpace::Storage { access } = &mut global.space {
            *access |= naga::StorageAccess::LOAD | naga::StorageAccess::STORE;
        }
    }
    module
}

fn type_name(module: &naga::Module, ty: naga::Handle<naga::Type>) -> String {
    type_name_of(module, ty)
}

/// A scalar as WGSL spells it: `f32`, `u32`, `i32`, `f16`, `bool`.
fn type_name_of_scalar(s: naga::Scalar) -> String {
    let kind = match s.kind {
        naga::ScalarKind::Sint => "i",
        naga::ScalarKind::Uint => "u",
        naga::ScalarKind::Float => "f",
        naga::ScalarKind::Bool => return "bool".to_string(),
        _ => "abstract",
    };
    format!("{kind}{}", u32::from(s.width) * 8)
}

/// A type as WGSL spells it, for messages: scalars, vectors, matrices, atomics, arrays, and
/// named types by name.
fn type_name_of(module: &naga::Module, ty: naga::Handle<naga::Type>) -> String {
    let t = &module.types[ty];
    if let Some(name) = &t.name {
        return name.clone();
    }
    let scalar = type_name_of_scalar;
    match t.inner {
        naga::TypeInner::Scalar(s) => scalar(s),
        naga::TypeInner::Vector { size, scalar: s } => format!("vec{}<{}>", size as u8, scalar(s)),
        naga::TypeInner::Matrix {
            columns,
            rows,
            scalar: s,
        } => format!("mat{}x{}<{}>", columns as u8, rows as u8, scalar(s)),
        naga::TypeInner::Atomic(s) => format!("atomic<{}>", scalar(s)),
        naga::TypeInner::Array { base, size, .. } => match size {
            naga::ArraySize::Constant(n) => format!("array<{}, {n}>", type_name_of(module, base)),
            _ => format!("array<{}>", type_name_of(module, base)),
        },
        _ => "struct".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reflect(source: &str, constants: &[(&str, f64)]) -> Result<KernelSignature, ReflectError> {
        let module = naga::front::wgsl::parse_str(source).expect("test sources parse");
        reflect_kernel(module, "main", constants, Some(source)).map(|r| r.signature)
    }

    const SAXPY: &str = r#"
        struct Params { n: u32, a: f32 }
        @group(0) @binding(0) var<uniform> p: Params;
        @group(0) @binding(2) var<storage, read_write> y: array<f32>;
        @group(0) @binding(1) var<storage, read> x: array<f32>;
        @compute @workgroup_size(64)
        fn main(@builtin(global_invocation_id) id: vec3<u32>) {
            if (id.x < p.n) { y[id.x] = p.a * x[id.x] + y[id.x]; }
        }"#;

    #[test]
    fn saxpy_reflects_bindings_in_order_with_access_params_and_workgroup() {
        let s = reflect(SAXPY, &[]).unwrap();
        assert_eq!(s.workgroup_size, [64, 1, 1]);
        let names: Vec<_> = s
            .storage
            .iter()
            .map(|b| (b.binding, b.name.as_str()))
            .collect();
        assert_eq!(names, [(1, "x"), (2, "y")]);
        assert!(!s.storage[0].writable && s.storage[1].writable);
        assert_eq!(s.storage[0].element_type, "f32");
        assert_eq!(s.storage[0].element_stride, 4);
        assert_eq!(s.storage[0].min_bytes, 4);
        let p = s.params.unwrap();
        assert_eq!(
            (p.kind, p.size, p.type_name.as_str()),
            (ParamsKind::Uniform { binding: 0 }, 8, "Params")
        );
    }

    #[test]
    fn read_bindings_are_rewritten_read_write_in_the_compiled_module() {
        let module = naga::front::wgsl::parse_str(SAXPY).unwrap();
        let module = reflect_kernel(module, "main", &[], None).unwrap().module;
        for (_, g) in module.global_variables.iter() {
            if let naga::AddressSpace::Storage { access } = g.space {
                assert!(access.contains(naga::StorageAccess::LOAD | naga::StorageAccess::STORE));
            }
        }
    }

    #[test]
    fn unused_bindings_do_not_count_and_vec_strides_are_reported() {
        let s = reflect(
            r#"
            @group(0) @binding(0) var<storage, read_write> used: array<vec3<f32>>;
            @group(0) @binding(1) var<storage, read_write> unused: array<u32>;
            @group(0) @binding(2) var<storage, read> fixed: array<u32, 8>;
            @compute @workgroup_size(8, 4, 2)
            fn main() { used[0] = vec3<f32>(f32(fixed[1])); }"#,
            &[],
        )
        .unwrap();
        assert_eq!(s.workgroup_size, [8, 4, 2]);
        assert_eq!(s.storage.len(), 2);
        assert_eq!(
            (
                s.storage[0].element_type.as_str(),
                s.storage[0].element_stride
            ),
            ("vec3<f32>", 16)
        );
        assert_eq!(
            (s.storage[1].fixed_len, s.storage[1].min_bytes),
            (Some(8), 32)
        );
        assert!(s.params.is_none());
    }

    #[test]
    fn override_constants_set_the_workgroup_size_and_unknown_ones_are_refused() {
        let source = r#"
            override WG: u32 = 32;
            @group(0) @binding(0) var<storage, read_write> a: array<u32>;
            @compute @workgroup_size(WG)
            fn main(@builtin(global_invocation_id) id: vec3<u32>) { a[id.x] = id.x; }"#;
        assert_eq!(reflect(source, &[]).unwrap().workgroup_size, [32, 1, 1]);
        assert_eq!(
            reflect(source, &[("WG", 128.0)]).unwrap().workgroup_size,
            [128, 1, 1]
        );
        let err = reflect(source, &[("NOPE", 1.0)]).unwrap_err();
        assert!(
            err.to_string().contains("NOPE") && err.to_string().contains("WG"),
            "{}",
            err.to_string()
        );
        let err = reflect(source, &[("WG", f64::NAN)]).unwrap_err();
        assert!(err.to_string().contains("finite"), "{}", err.to_string());
    }

    #[test]
    fn workgroup_memory_element_scalars_and_runtime_arrays_are_reflected() {
        let s = reflect(
            r#"
            struct R { head: vec4<f32>, data: array<vec2<u32>> }
            var<workgroup> tile: array<f32, 3>;
            var<workgroup> flag: u32;
            var<workgroup> unused: array<f32, 1000>;
            @group(0) @binding(0) var<storage, read_write> r: R;
            @group(0) @binding(1) var<storage, read_write> m: array<mat4x4<f32>>;
            @group(0) @binding(2) var<storage, read_write> a: array<atomic<i32>, 4>;
            @compute @workgroup_size(1)
            fn main() {
                tile[0] = 1.0; flag = 1u;
                r.data[0] = vec2<u32>(arrayLength(&r.data));
                m[0][0].x = tile[0];
                atomicAdd(&a[0], i32(flag));
            }"#,
            &[],
        )
        .unwrap();
        // 12 bytes and 4 bytes, each rounded up to 16; the unused variable does not count.
        assert_eq!(s.workgroup_memory_bytes, 32);
        let scalars: Vec<_> = s
            .storage
            .iter()
            .map(|b| b.element_scalar.as_deref())
            .collect();
        assert_eq!(scalars, [None, Some("f32"), Some("i32")]);
        assert_eq!(s.storage[0].runtime_array, Some((16, 8)));
        assert_eq!(s.storage[1].runtime_array, Some((0, 64)));
        assert_eq!(s.storage[2].runtime_array, None);
    }

    #[test]
    fn constants_resolve_by_name_or_id_to_one_sorted_key() {
        let source = r#"
            @id(7) override SCALE: f32 = 1.0;
            override B: u32 = 0u;
            @group(0) @binding(0) var<storage, read_write> a: array<f32>;
            @compute @workgroup_size(1)
            fn main() { a[0] = SCALE + f32(B); }"#;
        let resolve = |constants: &[(&str, f64)]| {
            let module = naga::front::wgsl::parse_str(source).unwrap();
            reflect_kernel(module, "main", constants, None).map(|r| r.constants)
        };
        let expected = vec![("7".to_string(), 2.0), ("B".to_string(), 3.0)];
        assert_eq!(resolve(&[("B", 3.0), ("SCALE", 2.0)]).unwrap(), expected);
        assert_eq!(resolve(&[("7", 2.0), ("B", 3.0)]).unwrap(), expected);
        assert!(resolve(&[("7", 2.0), ("SCALE", 2.0)])
            .unwrap_err()
            .to_string()
            .contains("twice"));
        assert!(resolve(&[("B", 0.5)])
            .unwrap_err()
            .to_string()
            .contains("whole"));
    }

    #[test]
    fn missing_entry_point_names_the_ones_there_are() {
        let err = reflect_kernel(
            naga::front::wgsl::parse_str(SAXPY).unwrap(),
            "mian",
            &[],
            None,
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("\"mian\"")
                && err
                    .to_string()
                    .ends_with("the module's @compute entry points are main"),
            "{}",
            err.to_string()
        );
    }

    #[test]
    fn other_groups_textures_and_two_parameter_blocks_are_refused_with_advice() {
        let err = reflect(
            r#"@group(1) @binding(0) var<storage, read_write> a: array<u32>;
            @compute @workgroup_size(1) fn main() { a[0] = 1u; }"#,
            &[],
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("@group(1)") && err.to_string().contains("move it"),
            "{}",
            err.to_string()
        );
        let err = reflect(
            r#"@group(0) @binding(0) var<uniform> p: u32;
            @group(0) @binding(1) var<uniform> q: u32;
            @group(0) @binding(2) var<storage, read_write> a: array<u32>;
            @compute @workgroup_size(1) fn main() { a[0] = p + q; }"#,
            &[],
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("one struct"),
            "{}",
            err.to_string()
        );
        let err = reflect(
            r#"@group(0) @binding(0) var t: texture_2d<f32>;
            @group(0) @binding(1) var<storage, read_write> a: array<f32>;
            @compute @workgroup_size(1) fn main() { a[0] = textureLoad(t, vec2<i32>(0), 0).x; }"#,
            &[],
        )
        .unwrap_err();
        assert!(err.to_string().contains("texture"), "{}", err.to_string());
    }

    #[test]
    fn invalid_modules_report_naga_s_message_with_the_source_line() {
        let source = "@compute @workgroup_size(1) fn main() { let x: u32 = 1.5; }";
        let module = naga::front::wgsl::parse_str(source);
        // Either the parser or the validator refuses it; both carry a message.
        if let Ok(module) = module {
            let err = reflect_kernel(module, "main", &[], Some(source)).unwrap_err();
            assert!(!err.to_string().is_empty());
        }
    }
}
