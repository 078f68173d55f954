//! The library's own kernels (`shaders/*.wgsl`, built into the crate) as the variants the
//! compile cache knows: each [`Builtin`] names one pipeline, its WGSL (the shared grid and
//! box-copy preludes prepended) and its override constants. The ops that record them are
//! `ops/builtin.rs`; they are named here, below the ops, because the cache keys on them.

const COPY_ROWS_WGSL: &str = include_str!("../../shaders/copy_rows.wgsl");
const COPY_BYTES_WGSL: &str = include_str!("../../shaders/copy_bytes.wgsl");
const FILL_WGSL: &str = include_str!("../../shaders/fill.wgsl");
/// Prepended to every kernel: the workgroup size and linear workgroup numbering.
const GRID_WGSL: &str = include_str!("../../shaders/grid.wgsl");
/// Prepended to both box-copy kernels: parameters, bindings, row starts.
const BOX_COPY_WGSL: &str = include_str!("../../shaders/box_copy.wgsl");

/// One of the library's own kernel variants: one pipeline each, compiled through the same path
/// as users' kernels (`KernelState::compile`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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
    /// The variant's name in statistics and labels.
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

    /// The module's source; variants of one kernel that differ only in constants share it.
    pub(super) fn source(self) -> String {
        match self {
            Builtin::CopyRowsVec4 { .. } => {
                format!("alias Unit = vec4<u32>;\n{GRID_WGSL}{BOX_COPY_WGSL}{COPY_ROWS_WGSL}")
            }
            Builtin::CopyRowsWord { .. } => {
                format!("alias Unit = u32;\n{GRID_WGSL}{BOX_COPY_WGSL}{COPY_ROWS_WGSL}")
            }
            Builtin::CopyBytes => {
                format!("alias Unit = u32;\n{GRID_WGSL}{BOX_COPY_WGSL}{COPY_BYTES_WGSL}")
            }
            Builtin::Fill => format!("{GRID_WGSL}{FILL_WGSL}"),
        }
    }
}
