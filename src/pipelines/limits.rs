//! Every device limit a kernel's module can exceed, checked at `kernel()` against its reflected
//! signature, so a kernel the device cannot run is refused when it is made, with the limit's
//! name and value, rather than at launch or submit (or never: wgpu does not check
//! `max_compute_workgroup_storage_size`, and more workgroup memory than the device has is
//! undefined behaviour). Pure: the limits are a value.
//!
//! What the launch checks instead (it depends on the arguments): binding sizes against
//! `max_storage_buffer_binding_size`, offsets against `min_storage_buffer_offset_alignment`,
//! the grid against `max_compute_workgroups_per_dimension` (see `compute/launch.rs`).

use super::reflect::{KernelSignature, ParamsKind, KERNEL_BIND_GROUP};
use super::source_bounds::MAX_BINDING_NUMBERS;

/// The first device limit a kernel exceeds, with the limit's name and value on this device and
/// what to change.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DeviceLimitExceeded {
    /// Something in the kernel is above a limit.
    #[error("{what} exceeds {}{limit} ({value}): {advice}", if *.ours { "" } else { "this device's " })]
    Limit {
        /// What in the kernel exceeds it (`@workgroup_size x = 2048`).
        what: String,
        /// Whether the limit is gpu-arena's own (below the device's), not the device's.
        ours: bool,
        /// The limit's name in `wgpu::Limits`, or gpu-arena's constant.
        limit: &'static str,
        /// The limit's value on this device.
        value: u64,
        /// What to change.
        advice: &'static str,
    },
    /// The kernel reads immediate data the device cannot give (too much, or the feature off).
    #[error("the kernel reads {bytes} bytes of immediate data (var<immediate>); this device's max_immediate_size is {limit} (Features::IMMEDIATES {}): pass the parameters as a var<uniform> instead{}", if *.feature_on { "on" } else { "off" }, if *.feature_on && *.limit == 0 { ", or open the device with the adapter's max_immediate_size in its required limits" } else { "" })]
    Immediates {
        /// Bytes of immediate data the kernel reads.
        bytes: u64,
        /// `max_immediate_size` on this device.
        limit: u64,
        /// Whether the device has `Features::IMMEDIATES`.
        feature_on: bool,
    },
}

/// Errors naming the first limit `signature` exceeds, its value on this device and what to
/// change; `immediates` says whether the device has `Features::IMMEDIATES`.
pub(crate) fn check_device_limits(
    signature: &KernelSignature,
    limits: &wgpu::Limits,
    immediates: bool,
) -> Result<(), DeviceLimitExceeded> {
    check_workgroup(signature, limits)?;
    check_bindings(signature, limits)?;
    check_params(signature, limits, immediates)
}

/// The refusal of `what` for exceeding the limit named `limit`, of `value` on this device: the
/// one shape every check below refuses in (all but immediate data's).
fn over(
    what: String,
    limit: &'static str,
    value: u64,
    advice: &'static str,
) -> Result<(), DeviceLimitExceeded> {
    Err(DeviceLimitExceeded::Limit {
        what,
        ours: false,
        limit,
        value,
        advice,
    })
}

/// The workgroup's limits: its size on each axis, its invocations and its `var<workgroup>`
/// memory.
fn check_workgroup(
    signature: &KernelSignature,
    limits: &wgpu::Limits,
) -> Result<(), DeviceLimitExceeded> {
    let [x, y, z] = signature.workgroup_size;
    for (axis, size, limit, name) in [
        (
            "x",
            x,
            limits.max_compute_workgroup_size_x,
            "max_compute_workgroup_size_x",
        ),
        (
            "y",
            y,
            limits.max_compute_workgroup_size_y,
            "max_compute_workgroup_size_y",
        ),
        (
            "z",
            z,
            limits.max_compute_workgroup_size_z,
            "max_compute_workgroup_size_z",
        ),
    ] {
        if size > limit {
            return over(
                format!("@workgroup_size {axis} = {size}"),
                name,
                u64::from(limit),
                "use a smaller workgroup and more workgroups",
            );
        }
    }
    let invocations = u64::from(x) * u64::from(y) * u64::from(z);
    let limit = u64::from(limits.max_compute_invocations_per_workgroup);
    if invocations > limit {
        return over(
            format!("@workgroup_size({x}, {y}, {z}) = {invocations} invocations"),
            "max_compute_invocations_per_workgroup",
            limit,
            "use a smaller workgroup and more workgroups",
        );
    }
    let limit = u64::from(limits.max_compute_workgroup_storage_size);
    if signature.workgroup_memory_bytes > limit {
        return over(
            format!(
                "{} bytes of var<workgroup> memory (each variable rounded up to 16 bytes)",
                signature.workgroup_memory_bytes
            ),
            "max_compute_workgroup_storage_size",
            limit,
            "use smaller workgroup arrays (or tile the work)",
        );
    }
    Ok(())
}

/// The bind group's limits: the group itself, the number of storage bindings, the binding
/// numbers and each storage binding's size.
fn check_bindings(
    signature: &KernelSignature,
    limits: &wgpu::Limits,
) -> Result<(), DeviceLimitExceeded> {
    // The bind group's index plus one groups must be allowed.
    if limits.max_bind_groups < KERNEL_BIND_GROUP + 1 {
        return over(
            format!("@group({KERNEL_BIND_GROUP})"),
            "max_bind_groups",
            u64::from(limits.max_bind_groups),
            "this device binds no bind group",
        );
    }
    let limit = u64::from(limits.max_storage_buffers_per_shader_stage);
    if signature.storage.len() as u64 > limit {
        return over(
            format!(
                "the number of storage bindings, {},",
                signature.storage.len()
            ),
            "max_storage_buffers_per_shader_stage",
            limit,
            "bind fewer arrays (pack several into one)",
        );
    }
    // wgpu's GL backend reports no limit (u32::MAX) and then allocates a table as long as the
    // largest binding number, as some Vulkan drivers do: a number in the billions took
    // gigabytes. Every device gets gpu-arena's bound as well.
    let bounded = limits.max_bindings_per_bind_group > MAX_BINDING_NUMBERS;
    let limit = limits.max_bindings_per_bind_group.min(MAX_BINDING_NUMBERS);
    let numbers =
        signature
            .storage
            .iter()
            .map(|b| b.binding)
            .chain(signature.params.iter().filter_map(|p| match p.kind {
                ParamsKind::Uniform { binding } => Some(binding),
                ParamsKind::Immediate => None,
            }));
    if let Some(number) = numbers.max().filter(|&n| n >= limit) {
        if bounded {
            return Err(DeviceLimitExceeded::Limit {
                what: format!("@binding({number})"),
                ours: true,
                limit: "gpu-arena's bound on binding numbers, kernels::MAX_BINDING_NUMBERS",
                value: u64::from(limit),
                advice: "number the bindings from 0 (gpu-arena bounds them on every device; \
                         this device's own max_bindings_per_bind_group is higher)",
            });
        }
        return over(
            format!("@binding({number})"),
            "max_bindings_per_bind_group",
            u64::from(limit),
            "number the bindings from 0",
        );
    }
    let limit = limits.max_storage_buffer_binding_size;
    if let Some(b) = signature.storage.iter().find(|b| b.min_bytes > limit) {
        return over(
            format!("the storage binding `{}` of {} bytes", b.name, b.min_bytes),
            "max_storage_buffer_binding_size",
            limit,
            "declare a smaller (or runtime-sized) array",
        );
    }
    Ok(())
}

/// The parameter block's limits: a uniform block's count and size, or immediate data's size
/// and feature (`immediates`).
fn check_params(
    signature: &KernelSignature,
    limits: &wgpu::Limits,
    immediates: bool,
) -> Result<(), DeviceLimitExceeded> {
    let Some(params) = &signature.params else {
        return Ok(());
    };
    match params.kind {
        ParamsKind::Uniform { .. } => {
            let limit = u64::from(limits.max_uniform_buffers_per_shader_stage);
            if limit == 0 {
                return over(
                    "one var<uniform> block".into(),
                    "max_uniform_buffers_per_shader_stage",
                    limit,
                    "pass the parameters in a storage array",
                );
            }
            let limit = limits.max_uniform_buffer_binding_size;
            if params.size > limit {
                return over(
                    format!(
                        "the var<uniform> block `{}: {}` of {} bytes",
                        params.name, params.type_name, params.size
                    ),
                    "max_uniform_buffer_binding_size",
                    limit,
                    "pass large data in a storage array",
                );
            }
        }
        ParamsKind::Immediate => {
            let limit = u64::from(limits.max_immediate_size);
            if !immediates || params.size > limit {
                return Err(DeviceLimitExceeded::Immediates {
                    bytes: params.size,
                    limit,
                    feature_on: immediates,
                });
            }
        }
    }
    Ok(())
}
