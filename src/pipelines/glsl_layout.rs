//! Whether a kernel's buffers keep their WGSL layout on wgpu's GL backend. There naga writes
//! the module as GLSL, each buffer a block laid out by GLSL's rules (`std140` for a uniform,
//! `std430` for storage), and WGSL's own offsets and strides are not written: a struct laid
//! out with `@align` or `@size`, or a `matCx2` in a uniform (columns 8 bytes apart in WGSL,
//! 16 in `std140`), would be read and written at other bytes than the launch fills. Such a
//! kernel is refused on GL before it compiles. Pure: the naga module alone.

use super::reflect::{KernelSignature, ParamsKind, KERNEL_BIND_GROUP};
use wgpu::naga;

/// GLSL's layout rules for a block: `std140` rounds the alignment of arrays, matrix columns
/// and structs up to 16 bytes; `std430` does not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BlockRules {
    /// A uniform block.
    Std140,
    /// A storage block.
    Std430,
}

/// Where GLSL's layout of a type first parts from WGSL's: the place (`P.b`, `m`), what is
/// placed differently, and the bytes under each.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "on wgpu's GL backend `{place}` would be read at other bytes than WGSL lays it out: its \
     {what} is {wgsl} bytes in WGSL and {glsl} in GLSL's {rules:?} (naga writes GLSL blocks \
     without WGSL's offsets, so `@align`, `@size` and a matCx2 in a uniform change nothing \
     there); lay the struct out with padding members instead, or use Vulkan"
)]
pub(crate) struct LayoutDifference {
    place: String,
    what: &'static str,
    wgsl: u64,
    glsl: u64,
    rules: BlockRules,
}

impl LayoutDifference {
    /// The difference as seen from the type that holds `place` as `outer`.
    fn within(mut self, outer: &str) -> Self {
        self.place = match self.place.is_empty() {
            true => outer.to_string(),
            false => format!("{outer}{}", self.place),
        };
        self
    }
}

/// Checks every buffer `signature` binds (its storage arrays and a uniform parameter block)
/// in `module`: each must lay out in GLSL as in WGSL.
pub(crate) fn check_kernel(
    module: &naga::Module,
    signature: &KernelSignature,
) -> Result<(), LayoutDifference> {
    for (_, global) in module.global_variables.iter() {
        let (Some(binding), Some(name)) = (&global.binding, &global.name) else {
            continue;
        };
        let bound = |wanted: u32| binding.group == KERNEL_BIND_GROUP && binding.binding == wanted;
        let rules = match global.space {
            naga::AddressSpace::Storage { .. }
                if signature.storage.iter().any(|b| bound(b.binding)) =>
            {
                BlockRules::Std430
            }
            naga::AddressSpace::Uniform => match signature.params.as_ref().map(|p| p.kind) {
                Some(ParamsKind::Uniform { binding }) if bound(binding) => BlockRules::Std140,
                _ => continue,
            },
            _ => continue,
        };
        check_block(module, global.ty, rules, name)?;
    }
    Ok(())
}

/// Checks that `ty`, the type of a buffer named `name`, lays out under `rules` exactly as
/// naga's module says WGSL lays it out.
fn check_block(
    module: &naga::Module,
    ty: naga::Handle<naga::Type>,
    rules: BlockRules,
    name: &str,
) -> Result<(), LayoutDifference> {
    layout(module, ty, rules)
        .map(drop)
        .map_err(|d| d.within(name))
}

/// `(alignment, size)` of `ty` under GLSL's `rules`, or where they place something other
/// than WGSL's offsets and strides do.
fn layout(
    module: &naga::Module,
    ty: naga::Handle<naga::Type>,
    rules: BlockRules,
) -> Result<(u64, u64), LayoutDifference> {
    let rounded = |align: u64| match rules {
        BlockRules::Std140 => align.max(16),
        BlockRules::Std430 => align,
    };
    let differs = |what, wgsl: u64, glsl: u64| LayoutDifference {
        place: String::new(),
        what,
        wgsl,
        glsl,
        rules,
    };
    // A vector of `n` scalars of `width` bytes: a vec3 is aligned as a vec4.
    let vector = |n: u64, width: u8| {
        let width = u64::from(width);
        (if n == 2 { 2 * width } else { 4 * width }, n * width)
    };
    Ok(match &module.types[ty].inner {
        naga::TypeInner::Scalar(s) | naga::TypeInner::Atomic(s) => {
            (u64::from(s.width), u64::from(s.width))
        }
        naga::TypeInner::Vector { size, scalar } => vector(*size as u64, scalar.width),
        naga::TypeInner::Matrix {
            columns,
            rows,
            scalar,
        } => {
            let (align, size) = vector(*rows as u64, scalar.width);
            let wgsl = size.next_multiple_of(align);
            let align = rounded(align);
            let glsl = size.next_multiple_of(align);
            if glsl != wgsl {
                return Err(differs("column stride", wgsl, glsl));
            }
            (align, glsl * *columns as u64)
        }
        naga::TypeInner::Array { base, size, stride } => {
            let (align, element) = layout(module, *base, rules).map_err(|d| d.within("[]"))?;
            let align = rounded(align);
            let glsl = element.next_multiple_of(align);
            if glsl != u64::from(*stride) {
                return Err(differs("element stride", u64::from(*stride), glsl));
            }
            let count = match size {
                naga::ArraySize::Constant(n) => u64::from(n.get()),
                _ => 1,
            };
            (align, glsl * count)
        }
        naga::TypeInner::Struct { members, .. } => {
            let (mut end, mut align) = (0u64, 1u64);
            for member in members {
                let place = format!(".{}", member.name.as_deref().unwrap_or("?"));
                let (member_align, size) =
                    layout(module, member.ty, rules).map_err(|d| d.within(&place))?;
                let glsl = end.next_multiple_of(member_align);
                if glsl != u64::from(member.offset) {
                    let difference = differs("offset", u64::from(member.offset), glsl);
                    return Err(difference.within(&place));
                }
                end = glsl + size;
                align = align.max(member_align);
            }
            let align = rounded(align);
            (align, end.next_multiple_of(align))
        }
        // Nothing else is host-shareable: validation refused it in a buffer already.
        _ => (1, 0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first difference in the buffer `buffer` of `source`.
    fn check(source: &str, rules: BlockRules) -> Result<(), String> {
        let module = naga::front::wgsl::parse_str(source).expect("valid WGSL");
        let (_, global) = (module.global_variables.iter())
            .find(|(_, g)| g.name.as_deref() == Some("buffer"))
            .expect("a global named buffer");
        check_block(&module, global.ty, rules, "buffer").map_err(|d| d.to_string())
    }

    #[test]
    fn default_layouts_are_glsl_s_under_both_rules() {
        let storage = "struct S { a: u32, b: vec3<f32>, c: f32, d: mat4x2<f32>, e: array<vec3<f32>, 3>, f: array<u32> }
            @group(0) @binding(0) var<storage, read_write> buffer: S;";
        assert_eq!(check(storage, BlockRules::Std430), Ok(()));
        let uniform = "struct I { x: vec4<f32> } struct U { a: u32, b: vec3<f32>, c: mat4x4<f32>, d: array<vec4<u32>, 2>, e: I, f: f32 }
            @group(0) @binding(0) var<uniform> buffer: U;";
        assert_eq!(check(uniform, BlockRules::Std140), Ok(()));
    }

    #[test]
    fn explicit_offsets_and_narrow_matrix_columns_in_a_uniform_are_named() {
        let aligned = "struct P { a: u32, @align(16) b: u32 }
            @group(0) @binding(0) var<uniform> buffer: P;";
        let message = check(aligned, BlockRules::Std140).unwrap_err();
        assert!(
            message.contains("`buffer.b`") && message.contains("offset is 16 bytes in WGSL and 4"),
            "{message}"
        );
        let sized = "struct P { @size(16) a: u32, b: u32 }
            @group(0) @binding(0) var<storage, read_write> buffer: P;";
        assert!(check(sized, BlockRules::Std430)
            .unwrap_err()
            .contains("`buffer.b`"));
        let header = "struct B { n: u32, @align(16) data: array<u32> }
            @group(0) @binding(0) var<storage, read_write> buffer: B;";
        assert!(check(header, BlockRules::Std430)
            .unwrap_err()
            .contains("`buffer.data`"));
        let matrix = "struct P { m: mat2x2<f32>, v: vec2<f32> }
            @group(0) @binding(0) var<uniform> buffer: P;";
        let message = check(matrix, BlockRules::Std140).unwrap_err();
        assert!(
            message.contains("`buffer.m`") && message.contains("column stride is 8"),
            "{message}"
        );
        // In storage, std430 spaces a mat2x2's columns as WGSL does.
        let matrix = matrix.replace("var<uniform>", "var<storage, read_write>");
        assert_eq!(check(&matrix, BlockRules::Std430), Ok(()));
        let nested = "struct I { @size(8) a: u32 } struct S { i: array<I, 2> }
            @group(0) @binding(0) var<storage, read_write> buffer: S;";
        let message = check(nested, BlockRules::Std430).unwrap_err();
        assert!(
            message.contains("`buffer.i`")
                && message.contains("element stride is 8 bytes in WGSL and 4"),
            "{message}"
        );
    }
}
