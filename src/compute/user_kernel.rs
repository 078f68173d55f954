//! `Kernel`: a user's compute shader, compiled once per context and per override-constant set,
//! and reflected so that every launch can be checked against what the shader binds.

use crate::context::{Context, ContextInner};
use crate::error::{Error, Result};
use crate::pipelines::{Compiled, KernelDesc, KernelSignature};
use std::sync::Arc;

/// A compiled compute kernel of one context, ready to launch over arena arrays with
/// [`Context::launch`] or [`crate::Sequence::launch`].
///
/// Cloning is cheap. Asking the context for the same source, entry point and constants again
/// returns the compiled kernel from the context's cache (and with `GPU_ARENA_CACHE_DIR` the
/// driver's compiled code persists across processes).
///
/// Write ordinary WGSL: storage arrays at `@group(0) @binding(n)` (`read` inputs are fine: the
/// module is rewritten so that arrays sharing an arena buffer can be bound together) and at
/// most one parameter block, a `var<uniform>` struct (or `var<immediate>` where the device has
/// `Features::IMMEDIATES`). Launch arguments are the storage arrays the entry point uses, in
/// binding order (one it never reads or writes is no argument).
#[derive(Clone)]
pub struct Kernel {
    pub(crate) compiled: Arc<Compiled>,
    pub(crate) ctx: Arc<ContextInner>,
}

impl Kernel {
    /// The kernel's name: its label, else its entry point and a short hash of its source and
    /// entry point (`main#1a2b3c4d`; see [`KernelDesc::label`]).
    pub fn name(&self) -> &str {
        &self.compiled.name
    }

    /// What the kernel binds, as reflected from its module: storage arrays in argument order,
    /// the parameter block, the workgroup size.
    pub fn signature(&self) -> &KernelSignature {
        &self.compiled.signature
    }

    /// `@workgroup_size(x, y, z)`, after override constants.
    pub fn workgroup_size(&self) -> [u32; 3] {
        self.compiled.signature.workgroup_size
    }
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernel")
            .field("name", &self.compiled.name)
            .field("signature", &self.compiled.signature)
            .finish()
    }
}

impl Context {
    /// Compiles a WGSL compute kernel (once per context: a second call with the same source
    /// and entry point returns the cached one).
    ///
    /// Errors: [`crate::Error::KernelCompile`] with the compiler's message (pointing at the
    /// line) for WGSL that does not parse or validate, a missing entry point or one whose name
    /// is longer than [`MAX_ENTRY_POINT_BYTES`](crate::kernels::MAX_ENTRY_POINT_BYTES), or
    /// bindings gpu-arena cannot fill (textures, another bind group, two parameter blocks);
    /// naming the limit and its value, for a kernel the device cannot run: `@workgroup_size` above
    /// `max_compute_workgroup_size_x/y/z` or `max_compute_invocations_per_workgroup`,
    /// `var<workgroup>` memory above `max_compute_workgroup_storage_size`, more storage arrays
    /// than `max_storage_buffers_per_shader_stage`, a binding number from
    /// `max_bindings_per_bind_group` (or from
    /// [`MAX_BINDING_NUMBERS`](crate::kernels::MAX_BINDING_NUMBERS) on a device whose bound is
    /// higher), a fixed-size array above
    /// `max_storage_buffer_binding_size`, a `var<uniform>` block above
    /// `max_uniform_buffer_binding_size`, immediates above `max_immediate_size`; and for
    /// sources beyond what gpu-arena compiles: more than
    /// [`MAX_WGSL_SOURCE_BYTES`](crate::kernels::MAX_WGSL_SOURCE_BYTES) of text, expressions
    /// nested deeper than
    /// [`MAX_WGSL_EXPRESSION_DEPTH`](crate::kernels::MAX_WGSL_EXPRESSION_DEPTH). The source is
    /// parsed on a thread of its own with a large stack, so no source aborts the process, and
    /// a panic of the compiler on a hostile module comes back as this error.
    /// [`crate::Error::DeviceLost`] once the context knows its device is lost, before the
    /// source is looked at (a kernel compiled before then is not handed out again).
    ///
    /// ```no_run
    /// # let ctx = gpu_arena::Context::new(Default::default())?;
    /// let double = ctx.kernel(
    ///     "@group(0) @binding(0) var<storage, read> x: array<f32>;
    ///      @group(0) @binding(1) var<storage, read_write> y: array<f32>;
    ///      @compute @workgroup_size(64)
    ///      fn main(@builtin(global_invocation_id) i: vec3<u32>) {
    ///          if (i.x < arrayLength(&y)) { y[i.x] = 2.0 * x[i.x]; }
    ///      }",
    ///     "main",
    /// )?;
    /// assert_eq!(double.signature().storage.len(), 2);
    /// # Ok::<(), gpu_arena::Error>(())
    /// ```
    pub fn kernel(&self, wgsl: &str, entry_point: &str) -> Result<Kernel> {
        self.kernel_with(KernelDesc::wgsl(wgsl, entry_point))
    }

    /// [`Context::kernel`] for any source (WGSL or SPIR-V), override constants and a label.
    ///
    /// Errors: as [`Context::kernel`]; also SPIR-V that does not parse (the front end's panics
    /// on damaged modules are caught) or is above
    /// [`MAX_SPIRV_WORDS`](crate::kernels::MAX_SPIRV_WORDS), and override constants that are
    /// unknown, given twice (by name and by id too), or not exact for their type (see
    /// [`KernelDesc::constants`]); a blank label ([`Error::KernelCompile`]: it would name no
    /// row of [`Context::kernel_times`]).
    pub fn kernel_with(&self, desc: KernelDesc<'_>) -> Result<Kernel> {
        self.inner.check_device("kernel")?;
        if desc.label.is_some_and(|l| l.trim().is_empty()) {
            // Named as an unlabelled kernel is: the blank label would name nothing.
            return Err(Error::KernelCompile {
                kernel: crate::pipelines::kernel_name(&KernelDesc {
                    label: None,
                    ..desc
                }),
                message: "its label is blank: give it a name that says what it computes, or \
                          no label (its entry point and a hash of its source name it then)"
                    .into(),
            });
        }
        let inner = &self.inner;
        let compiled =
            inner
                .kernels()
                .user(inner.device(), inner.adapter_info(), inner.limits(), &desc)?;
        Ok(Kernel {
            compiled,
            ctx: Arc::clone(inner),
        })
    }
}
