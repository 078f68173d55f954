//! `Step`: one piece of recorded GPU work (a dispatch, a copy or a clear), as a
//! [`Sequence`](crate::Sequence) or the context's gathered single ops hold it until it is
//! encoded. Users' launches (`compute/launch.rs`), the library's ops (`ops/builtin.rs`),
//! recorded uploads (`transfer/recorded_upload.rs`) and `Context::zeros` (`array.rs`) all make
//! steps; `compute/sequence.rs` submits a user's sequence and `context/gathered.rs` the single
//! ops: so the step lives on the floor below all of them, beside `submission.rs`, which numbers
//! what is submitted.
//!
//! Files: `mod.rs` (the step), `encode.rs` (steps into one command buffer, the one encoder of
//! every recorded dispatch), `gathered_steps.rs` (the batch of single ops a context has
//! gathered and not yet submitted, with their parameter slots), `timestamps.rs` (the query sets
//! that time each dispatch on the GPU when the context's timeline is on).
//!
//! **May import**: `pipelines` (a dispatch holds its compiled kernel; encoding happens inside
//! error scopes) and wgpu; nothing above (`context`, `array`, `compute`, `ops`, `transfer`,
//! `submission`). A step knows buffers and byte ranges, not arrays. `tests/module_flow.rs`
//! checks this.

mod encode;
mod gathered_steps;
mod timestamps;

use encode::bind_group;
pub(crate) use encode::{encode_bound_steps, encode_steps};
pub(crate) use gathered_steps::GatheredSteps;
pub use gathered_steps::MAX_GATHERED_OPS;
pub(crate) use timestamps::DispatchTimer;

use crate::pipelines::Compiled;
use std::sync::Arc;

/// A byte range of an array's buffer that a dispatch binds.
pub(crate) struct BoundRange {
    pub(crate) binding: u32,
    pub(crate) buffer: wgpu::Buffer,
    /// Offset in the buffer (the array's offset plus the range's).
    pub(crate) offset: u64,
    pub(crate) size: u64,
}

/// One recorded step.
pub(crate) enum Step {
    Dispatch {
        kernel: Arc<Compiled>,
        ranges: Vec<BoundRange>,
        /// The parameter block's bytes (exactly the kernel's block size).
        params: Option<Vec<u8>>,
        grid: [u32; 3],
        /// The bind group, when it was made as the step was recorded (a gathered single op,
        /// whose parameters already sit in their slot: the device's refusal of its bindings is
        /// then the refusal of the call that made it). `None`: made when the step is encoded.
        bind_group: Option<wgpu::BindGroup>,
    },
    Copy {
        src: wgpu::Buffer,
        src_offset: u64,
        dst: wgpu::Buffer,
        dst_offset: u64,
        size: u64,
    },
    Clear {
        buffer: wgpu::Buffer,
        offset: u64,
        size: u64,
    },
    /// Host bytes for `dst` at `dst_offset`, which the context's gathered batch copies into its
    /// own staging when the op joins it and turns into a [`Step::Copy`] out of that staging
    /// (`context/gathered.rs`): how a single op's small host operand, or a small `device_put`,
    /// costs no staging buffer and no submission of its own. Only single ops record it; the
    /// encoder refuses one that was never staged.
    Upload {
        data: Vec<u8>,
        dst: wgpu::Buffer,
        dst_offset: u64,
        /// The bytes the copy writes: the destination array's allocation (its data, zeros
        /// after), so that uploads of neighbouring arrays become one copy command.
        size: u64,
    },
}

impl Step {
    /// The uniform parameter bytes of a dispatch whose kernel reads a `var<uniform>` block
    /// (what takes a slot of a parameter buffer); `None` for other steps.
    pub(crate) fn uniform_params(&self) -> Option<&[u8]> {
        match self {
            Step::Dispatch {
                kernel,
                params: Some(p),
                ..
            } if matches!(
                kernel.signature.params.as_ref().map(|b| b.kind),
                Some(crate::pipelines::ParamsKind::Uniform { .. })
            ) =>
            {
                Some(p)
            }
            _ => None,
        }
    }

    /// Makes a dispatch's bind group now, for a step whose uniform parameters already sit in
    /// their slot: `slot` gives that slot's buffer and offset, and is asked only when the
    /// kernel reads a `var<uniform>` block. Returns whether a bind group was made: none for a
    /// step that is not a dispatch.
    pub(crate) fn make_bind_group<'b>(
        &mut self,
        device: &wgpu::Device,
        slot: impl FnOnce() -> Option<(&'b wgpu::Buffer, u64)>,
    ) -> bool {
        let uniform_len = self.uniform_params().map(|p| p.len() as u64);
        let Step::Dispatch {
            kernel,
            ranges,
            bind_group: group,
            ..
        } = self
        else {
            return false;
        };
        let uniform = uniform_len.and_then(|len| slot().map(|(buffer, at)| (buffer, at, len)));
        *group = Some(bind_group(device, kernel, ranges, uniform));
        true
    }

    /// The staging bytes a [`Step::Upload`] takes in the gathered batch; 0 for other steps.
    pub(crate) fn staged_bytes(&self) -> u64 {
        match self {
            Step::Upload { size, .. } => *size,
            _ => 0,
        }
    }

    /// Whether the step reads or writes any byte of `buffer` in `offset..offset + size`.
    pub(crate) fn touches(&self, buffer: &wgpu::Buffer, offset: u64, size: u64) -> bool {
        let (start, end) = (offset, offset + size);
        let overlaps = |b: &wgpu::Buffer, offset: u64, size: u64| {
            b == buffer && offset < end && offset + size > start
        };
        match self {
            Step::Dispatch { ranges, .. } => {
                ranges.iter().any(|r| overlaps(&r.buffer, r.offset, r.size))
            }
            Step::Copy {
                src,
                src_offset,
                dst,
                dst_offset,
                size,
            } => overlaps(src, *src_offset, *size) || overlaps(dst, *dst_offset, *size),
            Step::Clear {
                buffer,
                offset,
                size,
            } => overlaps(buffer, *offset, *size),
            Step::Upload {
                dst,
                dst_offset,
                size,
                ..
            } => overlaps(dst, *dst_offset, *size),
        }
    }
}
