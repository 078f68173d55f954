//! The single ops a context has gathered and not yet submitted: their steps, in call order, and
//! the slots of their uniform parameter blocks in one buffer. The context submits a batch when
//! it holds [`MAX_GATHERED_OPS`] ops and before anything waits for GPU work or submits work of
//! its own (`context/gathered.rs`); this file is the batch's data, with no device order in it.
//!
//! Each gathered dispatch's bind group is made when the op is called (so the device's refusal
//! of its bindings is that call's error), which is why its parameter block is placed at once in
//! a slot of a buffer the batch owns. The buffer is reused by the next batches: their bytes are
//! written with `queue.write_buffer`, which lands just before the next submission, after the
//! batch that used them was submitted.

use super::step::Step;

/// Most single ops ([`Context::launch`](crate::Context::launch)`(..).run()`, `copy`,
/// `dynamic_slice`, ...) a context gathers into one submission before it submits them (see
/// [the recording model](crate::kernels#the-recording-model)). CubeCL 0.11 submits up to 32
/// launches at once: enough to spread a submission's fixed cost over many small ops, while the
/// GPU starts early on a loop's work and what a later call has to submit stays small.
pub const MAX_GATHERED_OPS: usize = 32;

/// The parameter buffer a batch starts with: [`MAX_GATHERED_OPS`] slots of 256 bytes, the
/// largest `min_uniform_buffer_offset_alignment` WebGPU allows, so a batch of small blocks
/// never runs out of slots.
const MIN_PARAMS_BYTES: u64 = MAX_GATHERED_OPS as u64 * 256;

/// The most a batch's parameter buffer grows to for large blocks (a batch of blocks larger than
/// this over [`MAX_GATHERED_OPS`] holds fewer ops): bounds what gathered work keeps.
const MAX_PARAMS_BYTES: u64 = 4 << 20;

/// The single ops gathered so far (see the module docs).
#[derive(Default)]
pub(crate) struct GatheredSteps {
    steps: Vec<Step>,
    ops: usize,
    /// The parameter buffer and its size, kept from batch to batch.
    params: Option<(wgpu::Buffer, u64)>,
    /// This batch's parameter bytes, each block at its slot.
    params_bytes: Vec<u8>,
}

impl GatheredSteps {
    /// Whether nothing is gathered (no op, no upload).
    pub(crate) fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// Whether the batch holds [`MAX_GATHERED_OPS`] ops and must be submitted.
    pub(crate) fn is_full(&self) -> bool {
        self.ops >= MAX_GATHERED_OPS
    }

    /// Places one op's uniform parameter `blocks` in slots of the parameter buffer (each at a
    /// multiple of `alignment`, the device's `min_uniform_buffer_offset_alignment`): the buffer
    /// and offset of each, in order. `None` when they do not fit beside the ops already
    /// gathered: submit those, then place again. A batch none of whose ops binds parameters
    /// yet (empty, or uploads and ops without any) grows its buffer to fit.
    pub(crate) fn place_params(
        &mut self,
        device: &wgpu::Device,
        blocks: &[&[u8]],
        alignment: u64,
    ) -> Option<Vec<(wgpu::Buffer, u64)>> {
        if blocks.is_empty() {
            return Some(Vec::new());
        }
        if self.is_empty() {
            // Slots of an op that was refused after placing them.
            self.params_bytes.clear();
        }
        let align = alignment.max(4);
        let mut end = self.params_bytes.len() as u64;
        let offsets: Vec<u64> = blocks
            .iter()
            .map(|block| {
                let at = end.next_multiple_of(align);
                end = at + block.len() as u64;
                at
            })
            .collect();
        if self.params.as_ref().is_none_or(|(_, size)| end > *size) {
            // A larger buffer only while no gathered op binds the one there (ops without
            // parameters and uploads bind none).
            if !self.params_bytes.is_empty() {
                return None;
            }
            // Room for MAX_GATHERED_OPS ops like this one, each starting on an aligned slot.
            let size = (end.next_multiple_of(align) * MAX_GATHERED_OPS as u64)
                .clamp(MIN_PARAMS_BYTES, MAX_PARAMS_BYTES)
                .max(end)
                .next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT);
            let buffer = device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("gpu-arena gathered kernel parameters"),
                size,
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            self.params = Some((buffer, size));
        }
        let buffer = self.params.as_ref().map(|(b, _)| b.clone())?;
        self.params_bytes.resize(end as usize, 0);
        for (block, &at) in blocks.iter().zip(&offsets) {
            self.params_bytes[at as usize..at as usize + block.len()].copy_from_slice(block);
        }
        Some(offsets.into_iter().map(|at| (buffer.clone(), at)).collect())
    }

    /// Adds one op's steps (their bind groups made, their parameters placed, their uploads
    /// staged); `is_op` is false for an upload alone, which does not count toward
    /// [`MAX_GATHERED_OPS`]. A copy that continues the one before it on both sides (uploads of
    /// arrays that are neighbours in the arena and in the batch's staging) extends it: one
    /// copy command for a loop of small uploads.
    pub(crate) fn push(&mut self, steps: Vec<Step>, is_op: bool) {
        for step in steps {
            if let (Some(Step::Copy(last)), Step::Copy(next)) = (self.steps.last_mut(), &step) {
                if last.src == next.src
                    && last.dst == next.dst
                    && last.src != last.dst
                    && last.src_offset + last.size == next.src_offset
                    && last.dst_offset + last.size == next.dst_offset
                {
                    last.size += next.size;
                    continue;
                }
            }
            self.steps.push(step);
        }
        self.ops += usize::from(is_op);
    }

    /// Takes the batch: its steps in call order, and the parameter bytes to write into the
    /// parameter buffer before they are submitted.
    #[allow(clippy::type_complexity)]
    pub(crate) fn take(&mut self) -> (Vec<Step>, Option<(wgpu::Buffer, Vec<u8>)>) {
        self.ops = 0;
        let bytes = std::mem::take(&mut self.params_bytes);
        let write = match &self.params {
            Some((buffer, _)) if !bytes.is_empty() => Some((buffer.clone(), bytes)),
            _ => None,
        };
        (std::mem::take(&mut self.steps), write)
    }
}
