//! `Launch`: a user's kernel run over arena arrays. The builder takes the arrays themselves, so
//! every array a kernel touches is recorded as used by its submission (its memory cannot be
//! handed out again before the work completes), and checks every argument against the
//! kernel's reflected signature before anything is recorded.

use super::sequence::Sequence;
use super::user_kernel::Kernel;
use crate::array::{Access, ArrayStorage};
use crate::context::Context;
use crate::count::count;
use crate::error::{Error, Result};
use crate::pipelines::StorageBinding;
use crate::step::{BoundRange, Step};
use crate::view::{KernelArg, KernelArgMut};
use std::marker::PhantomData;
use std::sync::Arc;

/// A kernel launch being described: arguments in binding order, the parameter block, the grid.
/// Made by [`Context::launch`] (a single op, gathered into the context's submission) or
/// [`Sequence::launch`] (recorded into the sequence); nothing happens until [`Launch::run`].
///
/// The arguments' borrows last as long as the builder, so the compiler refuses an array passed
/// both as an input and as a writable output of one launch.
///
/// ```no_run
/// # let ctx = gpu_arena::Context::new(Default::default())?;
/// #[repr(C)]
/// #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
/// struct Params { n: u32, a: f32 }
/// let saxpy = ctx.kernel(
///     "struct Params { n: u32, a: f32 }
///      @group(0) @binding(0) var<uniform> p: Params;
///      @group(0) @binding(1) var<storage, read> x: array<f32>;
///      @group(0) @binding(2) var<storage, read_write> y: array<f32>;
///      @compute @workgroup_size(64)
///      fn main(@builtin(global_invocation_id) i: vec3<u32>) {
///          if (i.x < p.n) { y[i.x] = p.a * x[i.x] + y[i.x]; }
///      }",
///     "main",
/// )?;
/// let x = ctx.device_put(&[1.0f32; 1000], &[1000])?;
/// let mut y = ctx.device_put(&[2.0f32; 1000], &[1000])?;
/// ctx.launch(&saxpy)
///     .arg(&x)
///     .arg_mut(&mut y)
///     .params(&Params { n: 1000, a: 3.0 })
///     .grid_for(1000)
///     .run()?;
/// assert_eq!(ctx.device_get(&y)?, [5.0; 1000]);
/// # Ok::<(), gpu_arena::Error>(())
/// ```
#[must_use = "a launch does nothing until .run()"]
pub struct Launch<'s, 'a> {
    target: Target<'s>,
    kernel: Kernel,
    args: Vec<Arg>,
    params: Option<Vec<u8>>,
    /// The capture's parameter slot the parameters come from: `(capture, slot)`.
    params_slot: Option<(super::capture_tables::CaptureId, u32)>,
    grid: Option<[u32; 3]>,
    /// The first mistake made while describing the launch, reported by `run`.
    error: Option<Error>,
    _borrows: PhantomData<&'a ()>,
}

enum Target<'s> {
    Own(Sequence),
    Recording(&'s mut Sequence),
}

/// An argument as given: which memory, which range, which element type, writable or not.
struct Arg {
    storage: Arc<ArrayStorage>,
    offset: u64,
    bytes: u64,
    element_size: usize,
    element_type: &'static str,
    /// The whole array (not a view): its binding may be rounded up inside its own allocation.
    whole: bool,
    writable: bool,
}

impl Arg {
    /// What the launch does to the array: a writable argument may be written.
    fn access(&self) -> Access {
        if self.writable {
            Access::Write
        } else {
            Access::Read
        }
    }
}

impl Context {
    /// Describes a launch of `kernel` run as a single op (see [`Launch`]): gathered with the
    /// context's other single ops, up to [`crate::kernels::MAX_GATHERED_OPS`], into one
    /// submission that runs after everything called before it. To record many launches and ops
    /// and submit them all or nothing, use [`Context::sequence`].
    pub fn launch<'a>(&self, kernel: &Kernel) -> Launch<'static, 'a> {
        Launch::new(Target::Own(self.single_op()), kernel)
    }
}

impl Sequence {
    /// Describes a launch of `kernel` recorded into this sequence (see [`Launch`]).
    pub fn launch<'s, 'a>(&'s mut self, kernel: &Kernel) -> Launch<'s, 'a> {
        Launch::new(Target::Recording(self), kernel)
    }
}

impl<'s, 'a> Launch<'s, 'a> {
    fn new(target: Target<'s>, kernel: &Kernel) -> Self {
        Self {
            target,
            kernel: kernel.clone(),
            args: Vec::new(),
            params: None,
            params_slot: None,
            grid: None,
            error: None,
            _borrows: PhantomData,
        }
    }

    /// The next storage argument (binding order), read by the kernel.
    pub fn arg<A: KernelArg + ?Sized>(mut self, array: &'a A) -> Self {
        self.push_arg(array, false);
        self
    }

    /// The next storage argument (binding order), written by the kernel: required for bindings
    /// the kernel declares `read_write`.
    pub fn arg_mut<A: KernelArgMut + ?Sized>(mut self, array: &'a mut A) -> Self {
        self.push_arg(&*array, true);
        self
    }

    fn push_arg<A: KernelArg + ?Sized>(&mut self, array: &A, writable: bool) {
        let r = array.arg_ref();
        self.args.push(Arg {
            storage: Arc::clone(r.storage),
            offset: r.offset,
            bytes: r.bytes,
            element_size: r.element_size,
            element_type: r.element_type,
            whole: r.whole,
            writable,
        });
    }

    /// The kernel's parameter block (its `var<uniform>` or `var<immediate>`): a `Pod` value of
    /// exactly the block's size as WGSL lays it out (mind WGSL's alignment: a `vec3<f32>`
    /// takes 16 bytes). Given to a kernel without a block, the launch is refused
    /// ([`Error::KernelArgument`] naming `parameters`).
    pub fn params<P: bytemuck::Pod>(mut self, params: &P) -> Self {
        self.params = Some(bytemuck::bytes_of(params).to_vec());
        self
    }

    /// The kernel's parameter block from a slot of the [`crate::Capture`] this launch is
    /// recorded in ([`crate::Capture::params_slot`]): the slot's value now, and whatever each
    /// run of the captured step sets ([`crate::StepRun::params`]). Sizes are checked as for
    /// [`Launch::params`].
    ///
    /// Errors at [`Launch::run`]: [`Error::Capture`] ([`crate::error::CaptureRefusal::ForeignSlot`])
    /// when the launch is not recorded in the capture that made the slot.
    pub fn params_slot<P: bytemuck::Pod>(mut self, slot: &super::capture::ParamsSlot<P>) -> Self {
        self.params = Some(slot.initial.clone());
        self.params_slot = Some((slot.capture, slot.index));
        self
    }

    /// The number of workgroups in x, y and z (each at most the device's
    /// `max_compute_workgroups_per_dimension`; a zero runs nothing).
    pub fn grid(mut self, workgroups: [u32; 3]) -> Self {
        self.grid = Some(workgroups);
        self
    }

    /// A 1-D grid covering `n` items: `ceil(n / workgroup_size.x)` workgroups in x. Kernels
    /// index with `global_invocation_id.x` and check it against `n` (the last workgroup may run
    /// past it).
    ///
    /// `n` is any primitive integer ([`ItemCount`]): a `usize` length, a `u32` count or a
    /// bare literal, without a cast.
    ///
    /// Errors at [`Launch::run`] when `n` needs more workgroups than one dimension allows (on
    /// most GPUs 65535): then use [`Launch::grid_linear`]; and when `n` is negative.
    pub fn grid_for(mut self, n: impl ItemCount) -> Self {
        let Some(n) = self.items(n) else {
            return self;
        };
        let (groups, max) = self.groups_for(n);
        if groups > max {
            let [wx, ..] = self.kernel.workgroup_size();
            self.set_error(self.argument_error(
                "the grid",
                format!(
                    "{n} items need {groups} workgroups of {wx}, more than this device's max_compute_workgroups_per_dimension ({max}): use .grid_linear(n) and index with gid.x + gid.y * num_workgroups.x * {wx}"
                ),
            ));
        } else {
            self.grid = Some([groups as u32, 1, 1]);
        }
        self
    }

    /// A grid covering `n` items of any count: 1-D while it fits, else spread over x and y
    /// (`[max, ceil(groups / max), 1]`). Kernels must then index linearly:
    /// `let i = gid.x + gid.y * num_workgroups.x * WORKGROUP_SIZE_X;` and check `i < n`.
    /// `n` is any primitive integer, as for [`Launch::grid_for`].
    pub fn grid_linear(mut self, n: impl ItemCount) -> Self {
        let Some(n) = self.items(n) else {
            return self;
        };
        let (groups, max) = self.groups_for(n);
        let rows = groups.div_ceil(max.max(1));
        if rows > max {
            self.set_error(self.argument_error(
                "the grid",
                format!("{n} items need {groups} workgroups, more than {max}² in two dimensions (this device's max_compute_workgroups_per_dimension is {max}): launch the items in several parts, or spread them over z with .grid([x, y, z])"),
            ));
        } else if groups <= max {
            self.grid = Some([groups as u32, 1, 1]);
        } else {
            self.grid = Some([max as u32, rows as u32, 1]);
        }
        self
    }

    /// `n` as a count, or `None` with the refusal noted for [`Launch::run`].
    fn items(&mut self, n: impl ItemCount) -> Option<u64> {
        let count = n.count();
        if count.is_none() {
            self.set_error(self.argument_error(
                "the grid",
                format!(
                    "{n} items: a count of items is 0 or more and at most {}",
                    u64::MAX
                ),
            ));
        }
        count
    }

    fn groups_for(&self, n: u64) -> (u64, u64) {
        let [wx, ..] = self.kernel.workgroup_size();
        let max = u64::from(
            self.kernel
                .ctx
                .limits()
                .max_compute_workgroups_per_dimension,
        );
        (n.div_ceil(u64::from(wx.max(1))), max)
    }

    fn set_error(&mut self, error: Error) {
        self.error.get_or_insert(error);
    }

    fn argument_error(&self, binding: &str, reason: String) -> Error {
        Error::KernelArgument {
            kernel: self.kernel.name().to_string(),
            binding: binding.to_string(),
            reason,
        }
    }

    /// Checks the launch against the kernel's signature and records it: into the sequence it
    /// was made from, or (for [`Context::launch`]) as a single op gathered into the context's
    /// next submission (the recording model in [`crate::kernels`] says when it is submitted).
    ///
    /// Errors, before anything is recorded or submitted: [`Error::KernelArgument`] naming the
    /// binding at fault (for missing arguments the first binding without one, e.g.
    /// `@binding(1) y: array<f32> (read_write)`; for extra ones `argument N (no binding takes
    /// it)`, N counted from 0), an element size that differs from the WGSL
    /// element type, Rust scalars of another kind than WGSL's (`u32` for `array<f32>`: see
    /// [`crate::DeviceArray::bitcast`]), a read-only argument for a `read_write` binding, an
    /// array smaller than a fixed-size binding or larger than `max_storage_buffer_binding_size`,
    /// a view whose offset misses `min_storage_buffer_offset_alignment` or whose size a binding
    /// cannot hold exactly (a binding never reaches past its view: sizes not a multiple of 4,
    /// below the binding's type, not whole elements of a runtime-sized array, or empty in a
    /// launch that runs; an empty whole array binds to a runtime-sized `array<E>`, its
    /// allocation's first element, where `arrayLength` reads 1), an argument below
    /// [`StorageBinding::min_bytes`](crate::kernels::StorageBinding::min_bytes) of a single value
    /// or struct binding (a struct ending in a runtime-sized array included), a missing or
    /// wrongly sized parameter block, a missing grid or one above
    /// `max_compute_workgroups_per_dimension`; [`Error::ForeignArray`] for an array or
    /// kernel of another context; [`Error::PendingInRecorder`], for a launch of
    /// [`Context::launch`], over an array pending for it in an unsubmitted [`Sequence`] (one the
    /// sequence writes, or one it reads that the launch writes: the launch would run before
    /// that sequence's work; submit it first); [`Error::Device`] when the device refuses
    /// the work's bindings (made within this call). A refused launch records nothing and marks
    /// no array. A single launch is submitted with the context's other gathered ops: what the
    /// device refuses only then (a lost device) is reported by the next wait or
    /// [`Context::flush`] ([the recording model](crate::kernels#the-recording-model)).
    pub fn run(mut self) -> Result<()> {
        // A single launch is eager when it runs, whenever it was described: the capture mode
        // is the one in force now.
        match &self.target {
            Target::Own(single) => single.ctx.check_eager_op("launch")?,
            // Recorded: a lost device refuses before the arguments are looked at, as eager.
            Target::Recording(sequence) => sequence.ctx.inner.check_device("launch")?,
        }
        if let Some(error) = self.error.take() {
            return Err(error);
        }
        let step = self.check()?;
        let kernel = self.kernel.clone();
        let sequence = match &mut self.target {
            Target::Own(s) => s,
            Target::Recording(s) => &mut **s,
        };
        if !Arc::ptr_eq(&kernel.ctx, &sequence.ctx.inner) {
            return Err(Error::ForeignArray {
                operation: crate::error::FOREIGN_KERNEL,
                array_device: crate::context::describe_context(&kernel.ctx),
                context_device: crate::context::describe_context(&sequence.ctx.inner),
            });
        }
        if let Some((capture, _)) = self.params_slot {
            sequence.check_params_slot(capture)?;
        }
        // Every argument is checked (context; for a single launch, not pending in a user's
        // sequence) before any is marked: a refused launch records and marks nothing.
        let uses: Vec<(&Arc<ArrayStorage>, Access)> =
            self.args.iter().map(|a| (&a.storage, a.access())).collect();
        let bindings = &kernel.signature().storage;
        sequence.touch_all(&uses, "launch", |i| {
            bindings
                .get(i)
                .map_or_else(|| format!("argument {i}"), describe)
        })?;
        if let Some(step) = step {
            sequence.steps.push(step);
            if let Some((_, slot)) = self.params_slot {
                sequence.note_params_slot(slot);
            }
        }
        if let Target::Own(sequence) = self.target {
            sequence.submit()?;
        }
        Ok(())
    }

    /// The dispatch step, or `None` for an empty grid.
    fn check(&self) -> Result<Option<Step>> {
        let signature = self.kernel.signature();
        let limits = self.kernel.ctx.limits();
        if self.args.len() != signature.storage.len() {
            let expected: Vec<String> = signature.storage.iter().map(describe).collect();
            // The first binding with no argument, or the first argument with no binding.
            let (at_fault, fault) = match signature.storage.get(self.args.len()) {
                Some(missing) => (describe(missing), "has no argument".to_string()),
                None => (
                    format!("argument {} (no binding takes it)", signature.storage.len()),
                    match self.args.len() - signature.storage.len() {
                        1 => "is one too many".to_string(),
                        extra => format!("is the first of {extra} too many"),
                    },
                ),
            };
            let binds = match expected.is_empty() {
                true => "the kernel binds no storage buffer".to_string(),
                false => format!(
                    "the kernel binds {}: {}",
                    expected.len(),
                    expected.join(", ")
                ),
            };
            return Err(self.argument_error(
                &at_fault,
                format!(
                    "{fault}: {} given, {binds}; pass one array per binding, in the order of \
                     their @binding numbers",
                    count(self.args.len(), "array")
                ),
            ));
        }
        // A launch with an empty grid runs nothing, so it binds nothing: an empty view is
        // accepted there (and only there, as no binding can hold it exactly).
        let runs = self.grid.is_some_and(|g| !g.contains(&0));
        let mut ranges = Vec::with_capacity(self.args.len());
        for (binding, arg) in signature.storage.iter().zip(&self.args) {
            ranges.push(self.bind(binding, arg, limits, runs)?);
        }
        match (&signature.params, &self.params) {
            (Some(block), Some(p)) if p.len() as u64 != block.size => {
                return Err(self.argument_error(
                    &format!("parameter block `{}: {}`", block.name, block.type_name),
                    format!(
                        "{} given; WGSL lays `{}` out in {}: match its fields, alignment and padding in a #[repr(C)] struct",
                        count(p.len(), "byte"),
                        block.type_name,
                        count(block.size, "byte")
                    ),
                ))
            }
            (Some(block), None) => {
                return Err(self.argument_error(
                    &format!("parameter block `{}: {}`", block.name, block.type_name),
                    format!("not given: pass {} with .params(&value)", count(block.size, "byte")),
                ))
            }
            (None, Some(p)) => {
                return Err(self.argument_error(
                    "parameters",
                    format!(
                        "{} given, but the kernel reads no var<uniform> or var<immediate> block: drop .params(..), or declare the block in the kernel",
                        count(p.len(), "byte")
                    ),
                ))
            }
            _ => {}
        }
        let Some(grid) = self.grid else {
            return Err(self.argument_error(
                "the grid",
                "not set: call .grid([x, y, z]) or .grid_for(n)".into(),
            ));
        };
        let max = limits.max_compute_workgroups_per_dimension;
        if grid.iter().any(|&g| g > max) {
            return Err(self.argument_error(
                "the grid",
                format!("{} × {} × {} workgroups exceed this device's max_compute_workgroups_per_dimension ({max}) on an axis: spread them over x, y and z, each at most {max} (.grid_linear(n) does it for n items)", grid[0], grid[1], grid[2]),
            ));
        }
        if grid.contains(&0) {
            return Ok(None);
        }
        Ok(Some(Step::Dispatch {
            kernel: Arc::clone(&self.kernel.compiled),
            ranges,
            params: self.params.clone(),
            grid,
            bind_group: None,
        }))
    }

    /// The bound byte range of one argument, after every check of it against its binding.
    ///
    /// A view is bound exactly: its binding never reaches a byte outside the view (the next
    /// row of a KV cache), so a view whose size cannot be bound exactly is refused with the
    /// reason (not a multiple of 4 bytes, smaller than the binding's type, not a whole number
    /// of a runtime-sized array's elements, empty in a launch that runs). A whole array is
    /// rounded up to 4 bytes and to the binding's type inside its own allocation (the arena
    /// rounds allocations to 256 bytes), so the rounding never reaches another array.
    fn bind(
        &self,
        binding: &StorageBinding,
        arg: &Arg,
        limits: &wgpu::Limits,
        runs: bool,
    ) -> Result<BoundRange> {
        let name = describe(binding);
        let fail = |reason: String| Err(self.argument_error(&name, reason));
        if binding.writable && !arg.writable {
            return fail("is declared read_write: pass the array with .arg_mut(&mut array)".into());
        }
        if binding.is_array && arg.element_size as u64 != binding.element_stride {
            return fail(format!(
                "elements of {} are {} bytes apart in WGSL, but the argument holds {} ({}): use a DeviceArray of an element type of {} bytes",
                binding.element_type,
                binding.element_stride,
                arg.element_type,
                count(arg.element_size, "byte"),
                binding.element_stride
            ));
        }
        if let (Some(wgsl), Some(rust)) = (&binding.element_scalar, rust_scalar(arg.element_type)) {
            if wgsl != rust {
                let made_of = |ty: &str, scalar: &str| {
                    if ty == scalar {
                        ty.to_string()
                    } else {
                        format!("{ty} (made of {scalar})")
                    }
                };
                return fail(format!(
                    "the kernel reads {} elements, but the argument holds {}: pass an array of {wgsl}, or reinterpret the bits on purpose with .bitcast::<{}>() (no copy)",
                    made_of(&binding.element_type, wgsl),
                    made_of(arg.element_type, rust),
                    bitcast_target(arg.element_type, rust, wgsl, arg.element_size)
                ));
            }
        }
        if (binding.fixed_len.is_some() || !binding.is_array) && arg.bytes < binding.min_bytes {
            return fail(format!(
                "the argument has {}; the binding's type needs {}: pass an array (or a view) \
                 of at least {} bytes",
                count(arg.bytes, "byte"),
                binding.min_bytes,
                binding.min_bytes
            ));
        }
        let allocation = &arg.storage.allocation;
        let offset = allocation.offset + arg.offset;
        let alignment = u64::from(limits.min_storage_buffer_offset_alignment);
        if !offset.is_multiple_of(alignment) {
            return fail(format!(
                "the view starts at byte {offset} of its buffer, which is not a multiple of this device's min_storage_buffer_offset_alignment ({alignment}): bind a view whose rows are a multiple of {alignment} bytes, or copy the part out with dynamic_slice"
            ));
        }
        let size = if arg.whole {
            // WGSL sees whole words, and WebGPU binds no empty range: round up to 4 bytes and
            // to one element, within the array's own allocation.
            let size = arg.bytes.next_multiple_of(4).max(binding.min_bytes);
            if arg.offset + size > allocation.size {
                return fail(format!(
                    "the argument has {}; the binding needs at least {}",
                    count(arg.bytes, "byte"),
                    binding.min_bytes
                ));
            }
            size
        } else {
            self.exact_view_size(binding, arg, runs)?
        };
        let max = limits.max_storage_buffer_binding_size;
        if size > max {
            return fail(format!(
                "{size} bytes exceed this device's max_storage_buffer_binding_size ({max}): launch over views of at most that size"
            ));
        }
        Ok(BoundRange {
            binding: binding.binding,
            buffer: arg.storage.buffer.clone(),
            offset,
            size,
        })
    }

    /// A view's bytes, when a binding can hold exactly them (see [`Launch::bind`]).
    fn exact_view_size(&self, binding: &StorageBinding, arg: &Arg, runs: bool) -> Result<u64> {
        let fail = |reason: String| Err(self.argument_error(&describe(binding), reason));
        let bytes = arg.bytes;
        if bytes == 0 {
            if runs {
                return fail(
                    "the view is empty, and a binding holds at least 4 bytes, which would lie outside the view: skip the launch (or give it an empty grid) for an empty view".into(),
                );
            }
            // Nothing runs; the range is never bound.
            return Ok(0);
        }
        if !bytes.is_multiple_of(4) {
            return fail(format!(
                "the view has {}, not a multiple of 4: a binding holds whole 4-byte words, so it would reach {} past the view (into the next row); bind views of a multiple of 4 bytes, or the whole array",
                count(bytes, "byte"),
                count(bytes.next_multiple_of(4) - bytes, "byte")
            ));
        }
        if bytes < binding.min_bytes {
            return fail(format!(
                "the view has {bytes} bytes; the binding's type needs {}, which would reach past the view: bind a view of at least {} bytes, or the whole array",
                binding.min_bytes, binding.min_bytes
            ));
        }
        if let Some((head, stride)) = binding.runtime_array {
            if stride > 0 && !(bytes - head).is_multiple_of(stride) {
                return fail(format!(
                    "the view has {bytes} bytes: after the {head}-byte head, {} bytes are not a whole number of {stride}-byte elements of the runtime-sized array (arrayLength would drop {} bytes): bind a view of {head} + n × {stride} bytes",
                    bytes - head,
                    (bytes - head) % stride
                ));
            }
        }
        Ok(bytes)
    }
}

/// The Rust scalar an argument's element type is made of (`f32` for `f32` and `[f32; 4]`), for
/// the primitive types WGSL has; `None` for other types (users' structs), which are checked by
/// size alone.
/// The type a refusal advises to `bitcast` an argument to, for a binding of `wgsl` scalars: the
/// argument's own type (`arg_type`, made of `rust` scalars, `arg_size` bytes an element) in
/// WGSL's scalar where the two scalars have one size (`[u32; 4]` → `[f32; 4]`), else as many of
/// WGSL's scalars as an element holds (`[u8; 4]` → `f32`, `u64` → `[f32; 2]`).
fn bitcast_target(arg_type: &str, rust: &str, wgsl: &str, arg_size: usize) -> String {
    let size = |scalar: &str| match scalar {
        "i8" | "u8" => 1,
        "f16" | "i16" | "u16" => 2,
        "f64" | "i64" | "u64" => 8,
        _ => 4,
    };
    let target = match (size(rust) == size(wgsl), arg_size / size(wgsl)) {
        (true, _) => arg_type.replace(rust, wgsl),
        (false, n) if n > 1 && arg_size.is_multiple_of(size(wgsl)) => format!("[{wgsl}; {n}]"),
        (false, _) => wgsl.to_string(),
    };
    match wgsl {
        // Rust has no stable f16: name the usual 2-byte float type.
        "f16" => target.replace("f16", "half::f16"),
        _ => target,
    }
}

fn rust_scalar(type_name: &str) -> Option<&str> {
    let mut ty = type_name;
    // Fixed arrays, `[[f32; 4]; 4]`, are made of their innermost element.
    while let Some(inner) = ty.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
        ty = inner.rsplit_once(';').map(|(element, _)| element.trim())?;
    }
    matches!(
        ty,
        "f16" | "f32" | "f64" | "i8" | "u8" | "i16" | "u16" | "i32" | "u32" | "i64" | "u64"
    )
    .then_some(ty)
}

/// A binding as errors name it: `@binding(2) y: array<f32> (read_write)`.
fn describe(binding: &StorageBinding) -> String {
    let access = if binding.writable {
        "read_write"
    } else {
        "read"
    };
    let ty = match (binding.is_array, binding.fixed_len) {
        (true, Some(n)) => format!("array<{}, {n}>", binding.element_type),
        (true, None) => format!("array<{}>", binding.element_type),
        (false, _) => binding.element_type.clone(),
    };
    format!(
        "@binding({}) {}: {ty} ({access})",
        binding.binding, binding.name
    )
}

/// A count of items for [`Launch::grid_for`] and [`Launch::grid_linear`]: any primitive
/// integer, so that a `usize` length, a `u32` count and a bare literal all pass without a
/// cast. A negative count (or one beyond `u64`) is refused when the launch runs.
pub trait ItemCount: Copy + std::fmt::Display {
    /// The count, `None` when it is negative or does not fit in a `u64`.
    fn count(self) -> Option<u64>;
}

macro_rules! item_count {
    ($($integer:ty),*) => {
        $(impl ItemCount for $integer {
            fn count(self) -> Option<u64> {
                u64::try_from(self).ok()
            }
        })*
    };
}

item_count!(u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize);
