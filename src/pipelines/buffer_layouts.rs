//! Which of a kernel's buffer layouts wgpu's shader compiler (naga) keeps, and the kernels
//! refused before they compile because it would not: the launch fills each buffer as WGSL lays
//! it out, and a kernel that reads other bytes would compute garbage (or, for invalid SPIR-V,
//! lose the device). Three cases, each with a message that says how to write it instead:
//! - everywhere, a struct whose members have `@align` placed inside another struct: naga's WGSL
//!   front end lays out the inner struct's own members right, but places it in the outer one by
//!   its members' natural alignment, without the `@align` (read from the WGSL text, where the
//!   attribute is; the module keeps only the offsets);
//! - on Vulkan, a `matCx2` member of a struct that is itself a member of the uniform's struct:
//!   naga's SPIR-V writer splits such matrices into columns in the uniform's own struct and in
//!   an array's element struct, and writes an access chain the driver rejects for this one;
//! - on GL, any buffer GLSL lays out otherwise: naga writes each buffer as a GLSL block
//!   (`std140` for a uniform, `std430` for storage) without WGSL's offsets and strides, so
//!   `@align` or `@size` that moves a member, or a `matCx2` in a uniform (columns 8 bytes apart
//!   in WGSL, 16 in `std140`), would be read elsewhere.
//!
//! Pure: the naga module and the WGSL text alone; it runs on the compiler's thread, after
//! reflection (`cache.rs`).

use super::reflect::{KernelSignature, ParamsKind, KERNEL_BIND_GROUP};
use std::collections::HashMap;
use wgpu::naga;

/// GLSL's layout rules for a block: `std140` rounds the alignment of arrays, matrix columns
/// and structs up to 16 bytes; `std430` does not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum BlockRules {
    /// A uniform block.
    Std140,
    /// A storage block.
    Std430,
}

impl std::fmt::Display for BlockRules {
    /// GLSL's name for the rules: `std140`, `std430`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BlockRules::Std140 => "std140",
            BlockRules::Std430 => "std430",
        })
    }
}

/// Why a kernel's buffer would not be read as WGSL lays it out, and where (`p.b`, `inp.s`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LayoutRefusal {
    /// A struct with `@align` members inside another struct.
    #[error(
        "`{place}` is struct `{inner}`, whose members have @align, inside another struct: naga \
         (wgpu's shader compiler) places it there by its members' own alignment, without the \
         @align, so the kernel would read it at other bytes than WGSL lays it out; spell the \
         padding as members of `{inner}` instead of @align (its size and place in the outer \
         struct then follow those members: lay the host's data out the same way)"
    )]
    NestedAlign {
        /// The member whose type is (an array of) the aligned struct.
        place: String,
        /// The aligned struct's name.
        inner: String,
    },
    /// A `matCx2` inside a struct nested in the uniform, on Vulkan.
    #[error(
        "`{place}` is a matCx2 inside a struct nested in the uniform: naga's SPIR-V writer \
         translates it into a module the driver rejects (the device would be lost); put the \
         matrix in the uniform's own struct, or pass its columns as vec2 members"
    )]
    NestedUniformMatCx2 {
        /// The matrix.
        place: String,
    },
    /// On GL, a place GLSL's block rules put elsewhere: what is placed differently (an
    /// offset, a stride) and the bytes under each.
    #[error(
        "on wgpu's GL backend `{place}` would be read at other bytes than WGSL lays it out: its \
         {what} is {wgsl} bytes in WGSL and {glsl} in GLSL's {rules} (naga writes GLSL blocks \
         without WGSL's offsets, so `@align`, `@size` and a matCx2 in a uniform change nothing \
         there); {}, or use Vulkan",
        if *.what == "column stride" {
            "pass the matrix's columns as vec4 members instead"
        } else {
            "lay the struct out with padding members instead"
        }
    )]
    Glsl {
        /// Where, from the buffer's name.
        place: String,
        /// `offset`, `element stride` or `column stride`.
        what: &'static str,
        /// Bytes in WGSL's layout.
        wgsl: u64,
        /// Bytes in GLSL's.
        glsl: u64,
        /// The block's rules.
        rules: BlockRules,
    },
}

impl LayoutRefusal {
    /// The refusal as seen from the type that holds its place as `outer`.
    fn within(mut self, outer: &str) -> Self {
        let (Self::NestedAlign { place, .. }
        | Self::NestedUniformMatCx2 { place }
        | Self::Glsl { place, .. }) = &mut self;
        *place = format!("{outer}{place}");
        self
    }
}

/// Checks every buffer `signature` binds in `module` (its storage arrays and a uniform
/// parameter block) and its immediate parameter block on `backend`; `wgsl` is the source text,
/// where `@align` is seen.
pub(crate) fn check_kernel(
    module: &naga::Module,
    signature: &KernelSignature,
    wgsl: Option<&str>,
    backend: wgpu::Backend,
) -> Result<(), LayoutRefusal> {
    let mut walk = TypeWalk::new(module, wgsl.map(aligned_structs).unwrap_or_default());
    let params = signature.params.as_ref().map(|p| p.kind);
    let bound = |binding: &naga::ResourceBinding, wanted: u32| {
        binding.group == KERNEL_BIND_GROUP && binding.binding == wanted
    };
    for (_, global) in module.global_variables.iter() {
        let rules = match (global.space, &global.binding) {
            (naga::AddressSpace::Storage { .. }, Some(binding))
                if signature.storage.iter().any(|b| bound(binding, b.binding)) =>
            {
                BlockRules::Std430
            }
            (naga::AddressSpace::Uniform, Some(binding)) => match params {
                Some(ParamsKind::Uniform { binding: wanted }) if bound(binding, wanted) => {
                    BlockRules::Std140
                }
                _ => continue,
            },
            // wgpu's GL backend sets immediates member by member at std430's places, whatever
            // `@align` or `@size` says.
            (naga::AddressSpace::Immediate, _) if params == Some(ParamsKind::Immediate) => {
                BlockRules::Std430
            }
            _ => continue,
        };
        // SPIR-V may name nothing: its binding names it then.
        let name = (global.name.clone()).unwrap_or_else(|| match &global.binding {
            Some(binding) => format!("@binding({})", binding.binding),
            None => "immediates".to_string(),
        });
        let narrow = rules == BlockRules::Std140 && backend == wgpu::Backend::Vulkan;
        let refusal = (walk.nested_aligned(global.ty))
            .or_else(|| {
                let place = narrow.then(|| walk.nested_narrow_matrix(global.ty, false))??;
                Some(LayoutRefusal::NestedUniformMatCx2 { place })
            })
            .or_else(|| {
                (backend == wgpu::Backend::Gl).then(|| walk.layout(global.ty, rules).err())?
            });
        if let Some(refusal) = refusal {
            return Err(refusal.within(&name));
        }
    }
    Ok(())
}

/// `ty` without its arrays: the element type of an array (of arrays), else itself.
fn innermost(module: &naga::Module, ty: naga::Handle<naga::Type>) -> naga::Handle<naga::Type> {
    match module.types[ty].inner {
        naga::TypeInner::Array { base, .. } => innermost(module, base),
        _ => ty,
    }
}

/// The members of `ty`'s struct (or its arrays' element struct), none when it is no struct.
fn members(module: &naga::Module, ty: naga::Handle<naga::Type>) -> &[naga::StructMember] {
    match &module.types[innermost(module, ty)].inner {
        naga::TypeInner::Struct { members, .. } => members,
        _ => &[],
    }
}

/// `.name` of a member, as places are written.
fn member_place(member: &naga::StructMember) -> String {
    format!(".{}", member.name.as_deref().unwrap_or("?"))
}

/// The walks over a module's types, each type's result worked out once: a type may stand
/// under many members (a struct of two of the struct below it, 30 deep, is 2^30 places), so a
/// walk that visited every place would not end.
struct TypeWalk<'m> {
    module: &'m naga::Module,
    /// The structs with `@align` members ([`aligned_structs`]).
    aligned: Vec<String>,
    nested_aligned: HashMap<TypeHandle, Option<LayoutRefusal>>,
    narrow_matrices: HashMap<(TypeHandle, bool), Option<String>>,
    layouts: HashMap<(TypeHandle, BlockRules), Result<(u64, u64), LayoutRefusal>>,
}

type TypeHandle = naga::Handle<naga::Type>;

impl<'m> TypeWalk<'m> {
    fn new(module: &'m naga::Module, aligned: Vec<String>) -> Self {
        Self {
            module,
            aligned,
            nested_aligned: HashMap::new(),
            narrow_matrices: HashMap::new(),
            layouts: HashMap::new(),
        }
    }

    /// The first member, at any depth below `ty`, whose type is (an array of) a struct with
    /// `@align` members: `ty` itself, or its arrays' element, may be one.
    fn nested_aligned(&mut self, ty: TypeHandle) -> Option<LayoutRefusal> {
        if let Some(known) = self.nested_aligned.get(&ty) {
            return known.clone();
        }
        let module = self.module;
        let found = members(module, ty).iter().find_map(|member| {
            let inner = &module.types[innermost(module, member.ty)];
            match (&inner.inner, &inner.name) {
                (naga::TypeInner::Struct { .. }, Some(name)) if self.aligned.contains(name) => {
                    Some(LayoutRefusal::NestedAlign {
                        place: member_place(member),
                        inner: name.clone(),
                    })
                }
                _ => self
                    .nested_aligned(member.ty)
                    .map(|refusal| refusal.within(&member_place(member))),
            }
        });
        self.nested_aligned.insert(ty, found.clone());
        found
    }

    /// The first `matCx2` member of a struct that is itself a member of a struct below `ty`
    /// (`nested`: `ty` is already such a struct), as its place. The element struct of an
    /// array is split as the uniform's own struct is.
    fn nested_narrow_matrix(&mut self, ty: TypeHandle, nested: bool) -> Option<String> {
        if let Some(known) = self.narrow_matrices.get(&(ty, nested)) {
            return known.clone();
        }
        let module = self.module;
        let found = members(module, ty).iter().find_map(|member| {
            let place = member_place(member);
            let inner = match module.types[member.ty].inner {
                naga::TypeInner::Matrix {
                    rows: naga::VectorSize::Bi,
                    ..
                } if nested => return Some(place),
                naga::TypeInner::Struct { .. } => self.nested_narrow_matrix(member.ty, true),
                naga::TypeInner::Array { .. } => self.nested_narrow_matrix(member.ty, false),
                _ => None,
            };
            inner.map(|inner| format!("{place}{inner}"))
        });
        self.narrow_matrices.insert((ty, nested), found.clone());
        found
    }
}

/// The names of the structs of a WGSL source with an `@align` attribute on a member. The
/// source has parsed, so each `struct` keyword starts a declaration, `struct NAME {` up to a
/// `}` (a struct's body holds no braces); comments are skipped. One pass over the text.
fn aligned_structs(wgsl: &str) -> Vec<String> {
    let text = without_comments(wgsl);
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut found = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("struct") {
        let start = text.len() - rest.len() + at;
        let keyword = text[..start].chars().next_back().is_none_or(|c| !ident(c));
        rest = &rest[at + "struct".len()..];
        let after = rest.trim_start();
        if !keyword || after.len() == rest.len() {
            continue;
        }
        let name_end = after.find(|c: char| !ident(c)).unwrap_or(after.len());
        let (name, body) = after.split_at(name_end);
        let Some(body) = body.trim_start().strip_prefix('{') else {
            continue;
        };
        let Some(close) = body.find('}') else {
            break;
        };
        let has_align = body[..close].match_indices('@').any(|(i, _)| {
            let attribute = body[i + 1..close].trim_start();
            attribute.starts_with("align") && !attribute["align".len()..].starts_with(ident)
        });
        if has_align && !name.is_empty() {
            found.push(name.to_string());
        }
        rest = &body[close..];
    }
    found
}

/// `wgsl` with each comment (`//` to the line's end, `/* */` nested) replaced by a blank.
fn without_comments(wgsl: &str) -> String {
    let mut out = String::with_capacity(wgsl.len());
    let (mut chars, mut depth) = (wgsl.chars().peekable(), 0usize);
    while let Some(c) = chars.next() {
        match (c, chars.peek(), depth) {
            ('/', Some('*'), _) => {
                chars.next();
                depth += 1;
                out.push(' ');
            }
            ('*', Some('/'), 1..) => {
                chars.next();
                depth -= 1;
                out.push(' ');
            }
            ('/', Some('/'), 0) => {
                while chars.next_if(|&c| c != '\n').is_some() {}
                out.push(' ');
            }
            (c, _, 0) => out.push(c),
            _ => {}
        }
    }
    out
}

impl TypeWalk<'_> {
    /// `(alignment, size)` of `ty` under GLSL's `rules`, or where they place something other
    /// than WGSL's offsets and strides do.
    fn layout(&mut self, ty: TypeHandle, rules: BlockRules) -> Result<(u64, u64), LayoutRefusal> {
        if let Some(known) = self.layouts.get(&(ty, rules)) {
            return known.clone();
        }
        let found = self.layout_of(ty, rules);
        self.layouts.insert((ty, rules), found.clone());
        found
    }

    /// [`TypeWalk::layout`] worked out, its parts through the memo.
    fn layout_of(
        &mut self,
        ty: TypeHandle,
        rules: BlockRules,
    ) -> Result<(u64, u64), LayoutRefusal> {
        let module = self.module;
        let rounded = |align: u64| match rules {
            BlockRules::Std140 => align.max(16),
            BlockRules::Std430 => align,
        };
        let differs = |what, wgsl: u64, glsl: u64| LayoutRefusal::Glsl {
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
                let (align, element) = self.layout(*base, rules).map_err(|d| d.within("[]"))?;
                let align = rounded(align);
                let glsl = element.next_multiple_of(align);
                if glsl != u64::from(*stride) {
                    return Err(differs("element stride", u64::from(*stride), glsl));
                }
                let count = match size {
                    naga::ArraySize::Constant(n) => u64::from(n.get()),
                    _ => 1,
                };
                (align, glsl.saturating_mul(count))
            }
            naga::TypeInner::Struct { members, .. } => {
                let (mut end, mut align) = (0u64, 1u64);
                for member in members {
                    let (member_align, size) = self
                        .layout(member.ty, rules)
                        .map_err(|d| d.within(&member_place(member)))?;
                    let glsl = end.next_multiple_of(member_align);
                    if glsl != u64::from(member.offset) {
                        let difference = differs("offset", u64::from(member.offset), glsl);
                        return Err(difference.within(&member_place(member)));
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
        TypeWalk::new(&module, Vec::new())
            .layout(global.ty, rules)
            .map(drop)
            .map_err(|refusal| refusal.within("buffer").to_string())
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

    /// The refusal `check_kernel` gives `source`'s entry point `main` on `backend`.
    fn refusal(source: &str, backend: wgpu::Backend) -> Option<String> {
        let module = naga::front::wgsl::parse_str(source).expect("valid WGSL");
        let reflected = super::super::reflect::reflect_kernel(module, "main", &[], None).unwrap();
        check_kernel(
            &reflected.module,
            &reflected.signature,
            Some(source),
            backend,
        )
        .err()
        .map(|refusal| refusal.to_string())
    }

    #[test]
    fn a_struct_with_align_is_refused_inside_another_struct_only() {
        let kernel = |buffer: &str| {
            format!(
                "/* struct Q {{ @align(8) q: u32 }} */ // struct R {{ @align(8) r: u32 }}
                struct A {{ a: u32, @ align (16) b: u32 }}
                struct Sized {{ @size(16) a: u32, b: u32 }}
                struct O {{ h: u32, s: A }}
                struct L {{ h: u32, s: array<A, 2> }}
                struct Outer {{ h: u32, o: O }}
                struct Fine {{ h: u32, s: Sized }}
                @group(0) @binding(0) var<storage, read_write> buffer: {buffer};
                @compute @workgroup_size(1) fn main() {{ _ = &buffer; }}"
            )
        };
        for ok in ["A", "array<A>", "array<A, 3>", "Fine"] {
            assert_eq!(refusal(&kernel(ok), wgpu::Backend::Vulkan), None, "{ok}");
        }
        for (buffer, place) in [
            ("O", "buffer.s"),
            ("L", "buffer.s"),
            ("Outer", "buffer.o.s"),
            ("array<O>", "buffer.s"),
        ] {
            let message = refusal(&kernel(buffer), wgpu::Backend::Vulkan).expect(buffer);
            assert!(
                message.starts_with(&format!("`{place}` is struct `A`")),
                "{message}"
            );
        }
        assert_eq!(aligned_structs(&kernel("A")), ["A"]);
        let words = "fn structure() {} struct/**/B{@align(8) b: u32} struct C { a: u32 } struct D { @aligned: u32 }";
        assert_eq!(aligned_structs(words), ["B"]);
    }

    #[test]
    fn a_narrow_matrix_in_a_struct_nested_in_the_uniform_is_refused_on_vulkan() {
        let kernel = |members: &str| {
            format!(
                "struct In {{ m: mat3x2<f32>, w: mat2x4<f32> }}
                struct P {{ x: vec4<u32>, {members} }}
                @group(0) @binding(0) var<uniform> p: P;
                @group(0) @binding(1) var<storage, read_write> out: array<In>;
                @compute @workgroup_size(1) fn main() {{ _ = p; _ = out[0]; }}"
            )
        };
        let nested = kernel("i: In");
        let message = refusal(&nested, wgpu::Backend::Vulkan).unwrap();
        assert!(message.starts_with("`p.i.m` is a matCx2"), "{message}");
        // Storage keeps it (the array of `In` above), and so does the uniform's own struct.
        assert_eq!(
            refusal(&kernel("m: mat2x2<f32>"), wgpu::Backend::Vulkan),
            None
        );
        assert_eq!(refusal(&nested, wgpu::Backend::Metal), None);
    }
}
