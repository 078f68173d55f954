//! Where a [`super::CapturedStep`]'s host data goes on its way in and out: the bytes a run
//! uploads (its inputs' host data and its uniform parameters) and the bytes its reads bring
//! back.
//!
//! On Vulkan these are host-visible staging buffers of the memory plan, mapped once and kept
//! for the step's life: a run writes its bytes with a `memcpy`, its commands copy them to the
//! inputs and the parameter buffer, and a read is a `memcpy` out once the run has completed.
//! A run makes no wgpu staging buffer and maps nothing, as a CUDA graph's replay copies into
//! static input buffers and out of static outputs. Up to [`UPLOAD_BUFFERS`] upload buffers
//! take turns, so a run does not wait for the previous one to finish reading its bytes; the
//! host keeps the latest bytes of every input (the step's mirror), and a buffer takes the
//! pieces that changed since it was last written.
//!
//! On UMA with zero-copy on, where the arena itself is mapped, a run whose inputs no GPU work
//! uses any more (the step's previous run has completed, as in a loop that reads every run)
//! writes its inputs' host data straight into their arrays instead, as a `device_put` does,
//! and its commands leave the input copies out ([`InPlaceInputs`]); while the previous run is
//! still in flight, the run takes an upload buffer as above and does not wait.
//!
//! Elsewhere (wgpu's GL backend) the step keeps ordinary wgpu buffers: `queue.write_buffer`
//! into them, `map_async` to read.

use super::capture_tables::CapturedIo;
use crate::array::ArrayStorage;
use crate::backend::MappedRange;
use crate::context::ContextInner;
use crate::error::Result;
use crate::host_link::staging::{next_turn, StagingBuffer, StagingKind, StagingMemory, Turn};
use crate::host_link::HostLink;
use crate::step::{BufferCopy, Step};
use crate::submission::SubmissionId;
use std::sync::Arc;

/// Upload buffers a step keeps at most: one the GPU copies out of for the run in flight, one
/// the host fills for the next (double buffering, as the staging pool's buffers take turns).
pub(crate) const UPLOAD_BUFFERS: usize = 2;

/// A second upload buffer is made only for at most this many bytes: beyond, a run waits for
/// the previous one rather than holding twice its host data in staging.
pub(crate) const MAX_DOUBLE_BUFFERED_BYTES: u64 = 16 << 20;

/// One piece of the uploaded bytes (an input, or the uniform block) and the generation of the
/// mirror that last changed it.
#[derive(Clone, Copy, Debug)]
struct Piece {
    offset: u64,
    bytes: u64,
    changed_at: u64,
}

/// An upload buffer and the mirror generation it holds every piece of.
struct UploadBuffer {
    staging: StagingBuffer,
    synced: u64,
}

/// Where a run may write its inputs' host data itself (UMA, zero-copy): each input's bytes in
/// the mapped arena, in the order of the step's inputs; the arrays that hold them, which no GPU
/// work may still use when the host writes; and the positions of the input copies in the
/// step (sorted), which such a run leaves out.
pub(crate) struct InPlaceInputs {
    pub(crate) ranges: Vec<MappedRange>,
    pub(crate) holders: Vec<Arc<ArrayStorage>>,
    pub(crate) copies: Vec<usize>,
}

/// Which of a run's reads come straight from the step's own block of temporaries (UMA,
/// zero-copy, the host reads the arena): each read's bytes in the mapped arena, in the order
/// of the step's reads (`None`: that read is copied into the readback buffer), and the
/// positions of the read copies in the step (sorted) that every run leaves out. The host copies the bytes out once the run has
/// completed, as `device_get` does there.
pub(crate) struct InPlaceReads {
    pub(crate) ranges: Vec<Option<MappedRange>>,
    pub(crate) copies: Vec<usize>,
}

/// The mapped staging of a step on Vulkan.
pub(crate) struct MappedStaging {
    /// The latest bytes of every piece: inputs at their offsets, then the uniform block.
    mirror: Vec<u8>,
    pieces: Vec<Piece>,
    /// Where the uniform block sits in the mirror, and its piece.
    uniform: Option<(u64, usize)>,
    generation: u64,
    buffers: Vec<UploadBuffer>,
    /// The generation of the uniform block the parameter buffer holds.
    uniform_on_device: u64,
    readback: Option<StagingBuffer>,
    in_place: Option<Box<InPlaceInputs>>,
    in_place_reads: Option<Box<InPlaceReads>>,
    /// The step's copies every run leaves out (the read copies, when reads are in place), and
    /// those a run that writes its inputs in place leaves out (input and read copies), sorted.
    omitted: [Vec<usize>; 2],
}

/// The step's host data path, chosen by the backend.
pub(crate) enum StepStaging {
    Mapped(Box<MappedStaging>),
    /// wgpu's own buffers (non-Vulkan backends).
    Queued {
        upload: Option<wgpu::Buffer>,
        readback: Option<wgpu::Buffer>,
    },
}

/// What a run's commands need from the staging: the buffer its input copies read, and the
/// copy that brings the uniform block up to date (encoded before the step's commands).
#[derive(Default)]
pub(crate) struct RunBuffers {
    pub(crate) upload: Option<wgpu::Buffer>,
    pub(crate) uniform_copy: Option<Step>,
    /// The upload buffer the run uses (to note its submission), when mapped.
    buffer: Option<usize>,
    /// The uniform block's generation `uniform_copy` brings to the device.
    uniform_generation: Option<u64>,
    /// The run wrote its inputs in place: its input copies are left out.
    pub(crate) in_place: bool,
}

impl StepStaging {
    /// The staging for a step whose captured uploads are `upload_bytes` at the inputs'
    /// `(offset, bytes)`, which reads back `readback_bytes`, and whose uniform block (already
    /// in its buffer) is `uniform_bytes` long.
    pub(crate) fn new(
        inner: &ContextInner,
        upload_bytes: &[u8],
        inputs: impl Iterator<Item = (u64, u64)>,
        uniform: Option<&[u8]>,
        readback_bytes: u64,
    ) -> Result<StepStaging> {
        if inner.host_link() == HostLink::Wgpu {
            let device = inner.device();
            let upload = (!upload_bytes.is_empty()).then(|| {
                let buffer = device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("gpu-arena captured step uploads"),
                    size: upload_bytes.len() as u64,
                    usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                });
                inner.write_buffer(&buffer, 0, upload_bytes);
                buffer
            });
            let readback = (readback_bytes > 0).then(|| {
                device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("gpu-arena captured step reads"),
                    size: readback_bytes,
                    usage: wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::MAP_READ,
                    mapped_at_creation: false,
                })
            });
            return Ok(StepStaging::Queued { upload, readback });
        }
        let mut mirror = upload_bytes.to_vec();
        let mut pieces: Vec<Piece> = inputs
            .map(|(offset, bytes)| Piece {
                offset,
                bytes,
                changed_at: 1,
            })
            .collect();
        let uniform = uniform.map(|block| {
            let offset = (mirror.len() as u64).next_multiple_of(UNIFORM_COPY_ALIGNMENT);
            mirror.resize(offset as usize, 0);
            mirror.extend_from_slice(block);
            pieces.push(Piece {
                offset,
                bytes: block.len() as u64,
                changed_at: 1,
            });
            (offset, pieces.len() - 1)
        });
        let readback = if readback_bytes > 0 {
            Some(inner.create_staging(StagingKind::Readback, readback_bytes)?)
        } else {
            None
        };
        // The first upload buffer is made now, so that a capture that cannot have it fails
        // at `finish`, never at a run, and the capture's commands have a buffer to copy from.
        let mut buffers = Vec::new();
        if !mirror.is_empty() {
            let staging = inner.create_staging(StagingKind::Upload, mirror.len() as u64)?;
            staging.mapped.write(&mirror);
            buffers.push(UploadBuffer { staging, synced: 1 });
        }
        Ok(StepStaging::Mapped(Box::new(MappedStaging {
            mirror,
            pieces,
            uniform,
            generation: 1,
            buffers,
            // The parameter buffer was written with the captured block at `finish`.
            uniform_on_device: 1,
            readback,
            in_place: None,
            in_place_reads: None,
            omitted: Default::default(),
        })))
    }

    /// Lets runs write their inputs in place (see [`InPlaceInputs`]) and take their reads of
    /// temporaries from the step's block (see [`InPlaceReads`]); on the mapped path only.
    pub(crate) fn use_arrays_in_place(
        &mut self,
        inputs: Option<InPlaceInputs>,
        reads: Option<InPlaceReads>,
    ) {
        let StepStaging::Mapped(mapped) = self else {
            return;
        };
        let reads_copies = reads.as_ref().map_or(&[][..], |r| &r.copies[..]);
        let mut both: Vec<usize> = inputs.as_ref().map_or(&[][..], |i| &i.copies[..]).to_vec();
        both.extend_from_slice(reads_copies);
        both.sort_unstable();
        mapped.omitted = [reads_copies.to_vec(), both];
        mapped.in_place = inputs.map(Box::new);
        mapped.in_place_reads = reads.map(Box::new);
    }

    /// The positions of the copies a run leaves out: the read copies when reads are taken in
    /// place (every run), and the input copies too when it wrote its inputs `in_place`.
    pub(crate) fn omitted(&self, in_place: bool) -> &[usize] {
        match self {
            StepStaging::Mapped(mapped) => &mapped.omitted[usize::from(in_place)],
            StepStaging::Queued { .. } => &[],
        }
    }

    /// The buffer the input copies read, for the capture's first encoding.
    pub(crate) fn capture_upload(&self) -> Option<wgpu::Buffer> {
        match self {
            StepStaging::Queued { upload, .. } => upload.clone(),
            StepStaging::Mapped(m) => m.buffers.first().map(|b| b.staging.buffer.clone()),
        }
    }

    /// The buffer the read copies write.
    pub(crate) fn readback_buffer(&self) -> Option<wgpu::Buffer> {
        match self {
            StepStaging::Queued { readback, .. } => readback.clone(),
            StepStaging::Mapped(m) => m.readback.as_ref().map(|r| r.buffer.clone()),
        }
    }

    /// Writes a run's host data: `inputs` (input index, bytes; lengths already checked) and,
    /// when `uniform_changed`, the step's uniform block `uniform` (its buffer and bytes). On
    /// the mapped path this takes an upload buffer (waiting for the older run's when both are
    /// busy) and returns what the run's commands read.
    pub(crate) fn write_run(
        &mut self,
        inner: &ContextInner,
        input_at: &[CapturedIo],
        inputs: &[(u32, &[u8])],
        uniform: Option<(&wgpu::Buffer, &[u8])>,
        uniform_changed: bool,
    ) -> Result<RunBuffers> {
        match self {
            StepStaging::Queued { upload, .. } => {
                if let Some(upload) = upload {
                    for (index, data) in inputs {
                        let offset = input_at[*index as usize].offset;
                        if data.len() % 4 == 0 {
                            inner.write_buffer(upload, offset, data);
                        } else {
                            let mut padded = data.to_vec();
                            padded.resize(data.len().next_multiple_of(4), 0);
                            inner.write_buffer(upload, offset, &padded);
                        }
                    }
                }
                if let (Some((buffer, bytes)), true) = (uniform, uniform_changed) {
                    inner.write_buffer(buffer, 0, bytes);
                }
                Ok(RunBuffers {
                    upload: upload.clone(),
                    ..RunBuffers::default()
                })
            }
            StepStaging::Mapped(mapped) => {
                mapped.write_run(inner, inputs, uniform, uniform_changed)
            }
        }
    }

    /// Notes that the run that used `buffers` went out as submission `id`: its upload buffer
    /// is busy until that completes.
    pub(crate) fn submitted(&mut self, buffers: &RunBuffers, id: SubmissionId) {
        if let (StepStaging::Mapped(mapped), Some(i)) = (self, buffers.buffer) {
            mapped.buffers[i].staging.busy_until = id;
        }
    }

    /// Notes that the run that used `buffers` was accepted by the device: the parameter
    /// buffer now holds the block its copy brought (a refused run's copy never ran, so the
    /// next run copies the block again).
    pub(crate) fn accepted(&mut self, buffers: &RunBuffers) {
        if let (StepStaging::Mapped(mapped), Some(generation)) = (self, buffers.uniform_generation)
        {
            mapped.uniform_on_device = mapped.uniform_on_device.max(generation);
        }
    }

    /// After the run that wrote the reads completed (the caller waited for it): copies each
    /// read's bytes (by its number among the step's reads, and its offset in the readback)
    /// into its slice, from the step's block for a read in place.
    pub(crate) fn read_completed(
        &self,
        inner: &ContextInner,
        outs: &mut [(usize, u64, &mut [u8])],
    ) -> Result<()> {
        match self {
            StepStaging::Mapped(mapped) => {
                for (read, offset, out) in outs.iter_mut() {
                    let bytes = out.len() as u64;
                    let in_place = mapped.in_place_reads.as_ref();
                    match (
                        in_place.and_then(|r| r.ranges[*read].as_ref()),
                        &mapped.readback,
                    ) {
                        (Some(range), _) => range.sub(0, bytes).read(out),
                        (None, Some(readback)) => readback.mapped.sub(*offset, bytes).read(out),
                        (None, None) => {}
                    }
                }
                Ok(())
            }
            StepStaging::Queued { readback, .. } => match readback {
                Some(buffer) => {
                    inner.read_mapped(buffer, "mapping a captured step's reads", |mapped| {
                        for (_, offset, out) in outs.iter_mut() {
                            let at = *offset as usize;
                            out.copy_from_slice(&mapped[at..at + out.len()]);
                        }
                    })
                }
                None => Ok(()),
            },
        }
    }
}

/// The uniform block's place in an upload buffer: copies start on 4-byte words; 256 keeps
/// it apart from the inputs' last word whatever their sizes.
const UNIFORM_COPY_ALIGNMENT: u64 = 256;

impl MappedStaging {
    fn write_run(
        &mut self,
        inner: &ContextInner,
        inputs: &[(u32, &[u8])],
        uniform: Option<(&wgpu::Buffer, &[u8])>,
        uniform_changed: bool,
    ) -> Result<RunBuffers> {
        if !inputs.is_empty() || uniform_changed {
            self.generation += 1;
        }
        for (index, data) in inputs {
            let piece = &mut self.pieces[*index as usize];
            let at = piece.offset as usize;
            self.mirror[at..at + data.len()].copy_from_slice(data);
            piece.changed_at = self.generation;
        }
        if let (Some((at, piece)), Some((_, block)), true) =
            (self.uniform, uniform, uniform_changed)
        {
            let at = at as usize;
            self.mirror[at..at + block.len()].copy_from_slice(block);
            self.pieces[piece].changed_at = self.generation;
        }
        let in_place = self.write_in_place(inner);
        let uniform_behind = match (self.uniform, uniform) {
            (Some((_, piece)), Some(_)) => self.pieces[piece].changed_at > self.uniform_on_device,
            _ => false,
        };
        if self.mirror.is_empty() || (in_place && !uniform_behind) {
            return Ok(RunBuffers {
                in_place,
                ..RunBuffers::default()
            });
        }
        let i = self.take_buffer(inner)?;
        let buffer = &mut self.buffers[i];
        for (number, piece) in self.pieces.iter().enumerate() {
            // In place, only the uniform block goes through the buffer, which then stays as
            // old as `synced` says for the next run that copies its inputs.
            let wanted = !in_place || self.uniform.is_some_and(|(_, u)| u == number);
            if wanted && piece.changed_at > buffer.synced && piece.bytes > 0 {
                let (at, len) = (piece.offset as usize, piece.bytes as usize);
                buffer
                    .staging
                    .mapped
                    .sub(piece.offset, piece.bytes)
                    .write(&self.mirror[at..at + len]);
            }
        }
        if !in_place {
            buffer.synced = self.generation;
        }
        let mut uniform_generation = None;
        let uniform_copy = match (self.uniform, uniform) {
            (Some((at, piece)), Some((dst, block)))
                if self.pieces[piece].changed_at > self.uniform_on_device =>
            {
                uniform_generation = Some(self.pieces[piece].changed_at);
                Some(Step::Copy(BufferCopy {
                    src: buffer.staging.buffer.clone(),
                    src_offset: at,
                    dst: dst.clone(),
                    dst_offset: 0,
                    size: (block.len() as u64).next_multiple_of(4),
                }))
            }
            _ => None,
        };
        Ok(RunBuffers {
            upload: (!in_place).then(|| buffer.staging.buffer.clone()),
            uniform_copy,
            buffer: Some(i),
            uniform_generation,
            in_place,
        })
    }

    /// Writes every input's latest bytes straight into its array when the run may (see
    /// [`InPlaceInputs`]): all of them, since the step's own work may have overwritten an
    /// input's memory after its last use. `false`: the run copies them from an upload buffer.
    fn write_in_place(&self, inner: &ContextInner) -> bool {
        let completed = inner.submissions().completed();
        let Some(in_place) = self
            .in_place
            .as_ref()
            .filter(|p| p.holders.iter().all(|h| h.idle_for_host(completed)))
        else {
            return false;
        };
        for (piece, range) in self.pieces.iter().zip(&in_place.ranges) {
            let (at, len) = (piece.offset as usize, piece.bytes as usize);
            range.write(&self.mirror[at..at + len]);
        }
        true
    }

    /// An upload buffer no GPU work reads any more: a free one, a new one while fewer than
    /// [`UPLOAD_BUFFERS`] exist (one only for large data), else the older one once its run
    /// has completed.
    fn take_buffer(&mut self, inner: &ContextInner) -> Result<usize> {
        let size = self.mirror.len() as u64;
        let most = if size <= MAX_DOUBLE_BUFFERED_BYTES {
            UPLOAD_BUFFERS
        } else {
            1
        };
        // The step's buffers stay on hand (taken by position), so all of them are counted.
        let busy = self.buffers.iter().map(|b| b.staging.busy_until);
        let completed = inner.submissions().completed();
        match next_turn(busy, completed, self.buffers.len(), most) {
            Turn::Free(i) => Ok(i),
            Turn::Make => {
                let staging = inner.create_staging(StagingKind::Upload, size)?;
                self.buffers.push(UploadBuffer { staging, synced: 0 });
                Ok(self.buffers.len() - 1)
            }
            Turn::Wait(i, oldest) => {
                // The host writes the buffer after the GPU's copies out of it: no host read
                // follows.
                inner.wait_for_work(oldest)?;
                Ok(i)
            }
        }
    }
}
