//! The library's own kernels (`shaders/*.wgsl`, built into the crate) as the variants the
//! compile cache knows: each [`Builtin`] in a [`KernelShape`] is one pipeline, its WGSL (the
//! shape's constants and the shared grid and box-copy preludes prepended) and its override
//! constants. The ops that record them are `ops/builtin.rs`; they are named here, below the
//! ops, because the cache keys on them.

use crate::kernel_tuning::KernelShape;

const COPY_ROWS_WGSL: &str = include_str!("../../shaders/copy_rows.wgsl");
const COPY_BYTES_WGSL: &str = include_str!("../../shaders/copy_bytes.wgsl");
const FILL_WGSL: &str = include_str!("../../shaders/fill.wgsl");
/// Prepended to every kernel: the workgroup size and linear workgroup numbering.
const GRID_WGSL: &str = include_str!("../../shaders/grid.wgsl");
/// Prepended to both box-copy kernels: parameters, bindings, row starts.
const BOX_COPY_WGSL: &str = include_str!("../../shaders/box_copy.wgsl");

/// One of the library's own kernels; in a [`KernelShape`] it is one pipeline, compiled through
/// the same path as users' kernels (`KernelState::compile`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Builtin {
    /// `copy_rows.wgsl` over `vec4<u32>` units, for one contiguous row (`CONTIGUOUS`) or rows.
    CopyRowsVec4 { contiguous: bool },
    /// `copy_rows.wgsl` over `u32` words, likewise.
    CopyRowsWord { contiguous: bool },
    /// `copy_bytes.wgsl`.
    CopyBytes,
    /// `fill.wgsl`.
    Fill,
}

impl Builtin {
    /// Every kernel, in the order reports list them.
    pub(crate) const ALL: [Builtin; 6] = [
        Builtin::CopyRowsVec4 { contiguous: true },
        Builtin::CopyRowsVec4 { contiguous: false },
        Builtin::CopyRowsWord { contiguous: true },
        Builtin::CopyRowsWord { contiguous: false },
        Builtin::CopyBytes,
        Builtin::Fill,
    ];

    /// The shape the kernel has without tuning.
    pub(crate) fn fixed_shape(self) -> KernelShape {
        match self {
            Builtin::CopyBytes => KernelShape::FIXED_BYTES,
            _ => KernelShape::FIXED,
        }
    }

    /// The kernel's name in statistics, labels and the timeline (every shape of it alike).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Builtin::CopyRowsVec4 { contiguous: true } => "copy_rows<vec4<u32>>(contiguous)",
            Builtin::CopyRowsVec4 { contiguous: false } => "copy_rows<vec4<u32>>",
            Builtin::CopyRowsWord { contiguous: true } => "copy_rows<u32>(contiguous)",
            Builtin::CopyRowsWord { contiguous: false } => "copy_rows<u32>",
            Builtin::CopyBytes => "copy_bytes",
            Builtin::Fill => "fill",
        }
    }

    /// Pipeline-overridable constants of the variant.
    pub(super) fn constants(self) -> &'static [(&'static str, f64)] {
        match self {
            Builtin::CopyRowsVec4 { contiguous: true }
            | Builtin::CopyRowsWord { contiguous: true } => &[("CONTIGUOUS", 1.0)],
            _ => &[],
        }
    }

    /// The module's source in `shape`; variants of one kernel that differ only in override
    /// constants share it.
    pub(super) fn source(self, shape: KernelShape) -> String {
        let KernelShape {
            workgroup,
            per_invocation,
        } = shape;
        let shape = format!(
            "const WORKGROUP: u32 = {workgroup}u;\nconst PER_INVOCATION: u32 = {per_invocation}u;\n"
        );
        let copy_all = copy_all(per_invocation);
        match self {
            Builtin::CopyRowsVec4 { .. } => format!(
                "alias Unit = vec4<u32>;\n{shape}{GRID_WGSL}{BOX_COPY_WGSL}{copy_all}{COPY_ROWS_WGSL}"
            ),
            Builtin::CopyRowsWord { .. } => format!(
                "alias Unit = u32;\n{shape}{GRID_WGSL}{BOX_COPY_WGSL}{copy_all}{COPY_ROWS_WGSL}"
            ),
            Builtin::CopyBytes => {
                format!("alias Unit = u32;\n{shape}{GRID_WGSL}{BOX_COPY_WGSL}{COPY_BYTES_WGSL}")
            }
            Builtin::Fill => format!("{shape}{GRID_WGSL}{FILL_WGSL}"),
        }
    }

    /// A checksum of every kernel's source in every shape tuning may measure on a device
    /// whose subgroups are `subgroup_max` lanes wide: a tuned choice recorded under another
    /// checksum was measured on another kernel set and is measured again.
    pub(crate) fn variants_checksum(subgroup_max: u32) -> u64 {
        let mut text = String::new();
        for kernel in Builtin::ALL {
            for shape in KernelShape::candidates(subgroup_max) {
                text.push_str(&kernel.source(shape));
            }
        }
        super::disk_cache::checksum(text.as_bytes())
    }
}

/// `copy_rows.wgsl`'s `fn copy_all(base: u32)` for `per_invocation` items: every item's place,
/// then every load, then every store, one statement each.
fn copy_all(per_invocation: u32) -> String {
    let items = 0..per_invocation;
    let mut text = String::from("fn copy_all(base: u32) {\n");
    for k in items.clone() {
        text.push_str(&format!(
            "    let at{k} = unit_at(base + {k}u * WORKGROUP);\n"
        ));
    }
    for k in items.clone() {
        text.push_str(&format!("    let v{k} = src[at{k}.x];\n"));
    }
    for k in items {
        text.push_str(&format!("    dst[at{k}.y] = v{k};\n"));
    }
    text.push_str("}\n");
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_tuning_every_kernel_keeps_the_shape_it_always_had() {
        for kernel in Builtin::ALL {
            let fixed = kernel.fixed_shape();
            let (workgroup, per_invocation) = match kernel {
                Builtin::CopyBytes => (256, 1),
                _ => (256, 4),
            };
            assert_eq!(
                (fixed.workgroup, fixed.per_invocation),
                (workgroup, per_invocation)
            );
            let source = kernel.source(fixed);
            assert!(source.contains(&format!("const WORKGROUP: u32 = {workgroup}u;")));
            assert!(source.contains(&format!("const PER_INVOCATION: u32 = {per_invocation}u;")));
        }
    }

    #[test]
    fn the_row_copy_moves_each_item_of_an_invocation_once_loads_before_stores() {
        for n in KernelShape::PER_INVOCATION {
            let text = copy_all(n);
            let loads: Vec<usize> = (0..n)
                .map(|k| text.find(&format!("let v{k} = src[at{k}.x];")).unwrap())
                .collect();
            let stores: Vec<usize> = (0..n)
                .map(|k| text.find(&format!("dst[at{k}.y] = v{k};")).unwrap())
                .collect();
            assert!(loads.iter().max() < stores.iter().min(), "{text}");
            assert_eq!(text.matches("unit_at(").count(), n as usize);
            assert!(!text.contains(&format!("v{n}")), "{text}");
        }
    }

    #[test]
    fn another_kernel_set_has_another_checksum() {
        assert_eq!(Builtin::variants_checksum(0), Builtin::variants_checksum(0));
        // A device with 32-wide subgroups tunes more shapes: another set.
        assert_ne!(
            Builtin::variants_checksum(0),
            Builtin::variants_checksum(32)
        );
    }
}
