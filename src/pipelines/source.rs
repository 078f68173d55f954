//! What is compiled: a kernel's source ([`KernelSource`], WGSL or SPIR-V) and the request to
//! compile it ([`KernelDesc`]: source, entry point, override constants, label), as users give
//! them to `Context::kernel_with` and as the compile cache keys them.

/// A kernel's source: WGSL text or SPIR-V words (wgpu's `spirv` feature is on).
#[derive(Clone, Copy, Debug)]
pub enum KernelSource<'a> {
    /// WGSL source text.
    Wgsl(&'a str),
    /// A SPIR-V module as 32-bit words.
    SpirV(&'a [u32]),
}

/// What [`Context::kernel_with`](crate::Context::kernel_with) compiles: a source, its entry point, override constants.
#[derive(Clone, Copy, Debug)]
pub struct KernelDesc<'a> {
    /// The shader: WGSL text or SPIR-V words.
    pub source: KernelSource<'a>,
    /// The `@compute` function to run.
    pub entry_point: &'a str,
    /// Values for the module's `override` constants, each by its name or by its `@id` written
    /// in decimal (`"7"`). Each set compiles once, whatever the order or the spelling, by the
    /// values as applied (`0.0` and `-0.0` are one; an `f32` takes the nearest `f32`, so `0.1`
    /// and `0.1f32 as f64` are one). Values must be exact for the override's type: finite,
    /// whole numbers within range for integers (`u32`: 0 to 4294967295), 0 or 1 for `bool`,
    /// within `f32`'s range for `f32`.
    pub constants: &'a [(&'a str, f64)],
    /// The name in errors, statistics, `kernel_times` and the timeline. Default: the entry
    /// point and a short hash of the source and entry point (`main#1a2b3c4d`, the same in every
    /// run), so that two kernels whose entry points are both `main` are two rows. A module is
    /// compiled once per source, entry point and constants: asked for again under another
    /// label, it shares that pipeline and is a kernel of its own name. Constants are not part
    /// of the default name: label variants that differ only in them to tell them apart. A
    /// blank label is refused.
    pub label: Option<&'a str>,
}

impl<'a> KernelDesc<'a> {
    /// A WGSL kernel with no constants.
    pub fn wgsl(source: &'a str, entry_point: &'a str) -> Self {
        Self {
            source: KernelSource::Wgsl(source),
            entry_point,
            constants: &[],
            label: None,
        }
    }

    /// A SPIR-V kernel with no constants.
    pub fn spirv(words: &'a [u32], entry_point: &'a str) -> Self {
        Self {
            source: KernelSource::SpirV(words),
            entry_point,
            constants: &[],
            label: None,
        }
    }

    /// The same kernel with these override constants.
    pub fn constants(self, constants: &'a [(&'a str, f64)]) -> Self {
        Self { constants, ..self }
    }

    /// The same kernel under this name.
    pub fn label(self, label: &'a str) -> Self {
        Self {
            label: Some(label),
            ..self
        }
    }
}
