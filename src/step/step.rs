//! The step itself: [`Step`], one piece of recorded work, [`BoundRange`], a byte range a
//! dispatch binds, and [`BufferCopy`], a copy between two buffers. The encoder and the
//! gathered batch both read it, so it sits below them rather than in `mod.rs`, which
//! re-exports it.

use crate::pipelines::Compiled;
use std::sync::Arc;

/// A byte range of an array's buffer that a dispatch binds.
#[derive(Clone)]
pub(crate) struct BoundRange {
    pub(crate) binding: u32,
    pub(crate) buffer: wgpu::Buffer,
    /// Offset in the buffer (the array's offset plus the range's).
    pub(crate) offset: u64,
    pub(crate) size: u64,
}

/// A copy of `size` bytes from `src` at `src_offset` to `dst` at `dst_offset`, as
/// `copy_buffer_to_buffer` takes it.
#[derive(Clone)]
pub(crate) struct BufferCopy {
    pub(crate) src: wgpu::Buffer,
    pub(crate) src_offset: u64,
    pub(crate) dst: wgpu::Buffer,
    pub(crate) dst_offset: u64,
    pub(crate) size: u64,
}

impl BufferCopy {
    /// Records the copy.
    pub(crate) fn encode(&self, encoder: &mut wgpu::CommandEncoder) {
        encoder.copy_buffer_to_buffer(
            &self.src,
            self.src_offset,
            &self.dst,
            self.dst_offset,
            self.size,
        );
    }
}

/// One recorded step.
#[derive(Clone)]
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
    Copy(BufferCopy),
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

/// The kernel name of every dispatch of `steps`, in order, but those at `left_out` (sorted
/// positions a run did not submit): what the timeline records.
pub(crate) fn dispatch_names<'s>(
    steps: &'s [Step],
    left_out: &'s [usize],
) -> impl Iterator<Item = &'s str> {
    steps
        .iter()
        .enumerate()
        .filter(|(i, _)| left_out.binary_search(i).is_err())
        .filter_map(|(_, step)| match step {
            Step::Dispatch { kernel, .. } => Some(kernel.name.as_str()),
            _ => None,
        })
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

    /// The staging bytes a [`Step::Upload`] takes in the gathered batch; 0 for other steps.
    pub(crate) fn staged_bytes(&self) -> u64 {
        match self {
            Step::Upload { size, .. } => *size,
            _ => 0,
        }
    }

    /// Calls `visit` with every byte range the step reads or writes: buffer, offset, size.
    pub(crate) fn for_each_range(&self, mut visit: impl FnMut(&wgpu::Buffer, u64, u64)) {
        match self {
            Step::Dispatch { ranges, .. } => {
                for r in ranges {
                    visit(&r.buffer, r.offset, r.size);
                }
            }
            Step::Copy(copy) => {
                visit(&copy.src, copy.src_offset, copy.size);
                visit(&copy.dst, copy.dst_offset, copy.size);
            }
            Step::Clear {
                buffer,
                offset,
                size,
            } => visit(buffer, *offset, *size),
            Step::Upload {
                dst,
                dst_offset,
                size,
                ..
            } => visit(dst, *dst_offset, *size),
        }
    }

    /// Calls `relocate` on the buffer and offset of every range the step reads or writes,
    /// with the range's size, to move them elsewhere.
    pub(crate) fn relocate_ranges(
        &mut self,
        mut relocate: impl FnMut(&mut wgpu::Buffer, &mut u64),
    ) {
        match self {
            Step::Dispatch { ranges, .. } => {
                for range in ranges {
                    relocate(&mut range.buffer, &mut range.offset);
                }
            }
            Step::Copy(BufferCopy {
                src,
                src_offset,
                dst,
                dst_offset,
                ..
            }) => {
                relocate(src, src_offset);
                relocate(dst, dst_offset);
            }
            Step::Clear { buffer, offset, .. } => relocate(buffer, offset),
            Step::Upload {
                dst, dst_offset, ..
            } => relocate(dst, dst_offset),
        }
    }

    /// Whether the step reads or writes any byte of `buffer` in `offset..offset + size`.
    pub(crate) fn touches(&self, buffer: &wgpu::Buffer, offset: u64, size: u64) -> bool {
        let end = offset + size;
        let mut touches = false;
        self.for_each_range(|b, start, len| {
            touches |= b == buffer && start < end && start + len > offset;
        });
        touches
    }
}
