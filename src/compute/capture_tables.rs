//! What a capture records beside its steps ([`CaptureTables`]: the arrays it made, where each
//! slot acts) and the records those tables hold ([`CapturedIo`], [`MovingCopy`]). The sequence
//! that carries them while recording, the capture that fills them and the captured step that
//! plans from them all read them, so they sit below all three.

use crate::array::ArrayStorage;
use crate::backend::MappedRange;
use crate::guard_levels::TransferDirection;
use crate::recorder::CAPTURE_RECORDER_BIT;
use std::collections::HashMap;
use std::sync::{Arc, Weak};

/// A capture's identity: the recorder mark its work carries (its sequence number with
/// [`CAPTURE_RECORDER_BIT`], so refusals say `Capture #N`) and the number refusals and
/// [`crate::Capture::number`] give. Its slots carry it, so a slot of another capture is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CaptureId(u64);

impl CaptureId {
    /// What a slot made after its capture's recorder was moved out carries: no capture has it
    /// (every capture's mark has the bit), so every use of such a slot is refused.
    pub(crate) const NONE: CaptureId = CaptureId(0);

    /// The capture recorded by the sequence numbered `sequence`.
    pub(crate) fn of_sequence(sequence: u64) -> Self {
        CaptureId(sequence | CAPTURE_RECORDER_BIT)
    }

    /// The recorder mark its pending arrays carry.
    pub(crate) fn mark(self) -> u64 {
        self.0
    }

    /// The number refusals name (`Capture #N`).
    pub(crate) fn number(self) -> u64 {
        self.0 & !CAPTURE_RECORDER_BIT
    }
}

/// What a capture records beside its steps: which arrays it made, and where each slot acts.
pub(crate) struct CaptureTables {
    /// The capture's identity.
    pub(crate) id: CaptureId,
    /// Arrays made by the capture's own ops, by storage address: those the user no longer
    /// holds at `finish` are the step's temporaries. The weak references keep each address
    /// from being reused by an array made elsewhere after one of these was dropped (an op
    /// refused after making its result).
    pub(crate) created: HashMap<usize, Weak<ArrayStorage>>,
    /// Launches whose parameters come from a slot: `(step index, slot index)`.
    pub(crate) slotted_params: Vec<(usize, u32)>,
    /// The byte size of each parameter slot.
    pub(crate) param_slots: Vec<Vec<u8>>,
    /// Uploads: each copies `bytes` from `offset` of the step's upload buffer (the copy step's
    /// index is `step`).
    pub(crate) inputs: Vec<CapturedIo>,
    /// The initial host data of every upload, at its offset.
    pub(crate) upload_bytes: Vec<u8>,
    /// Reads: each copies `bytes` into `offset` of the step's readback buffer.
    pub(crate) reads: Vec<CapturedIo>,
    pub(crate) readback_bytes: u64,
    /// Copies whose start comes from an index slot.
    pub(crate) moving: Vec<MovingCopy>,
    /// Such copies of an empty box: nothing to run, but their starts are checked.
    pub(crate) empty_moving: Vec<EmptyMoving>,
    /// The rank of each index slot and its initial start.
    pub(crate) index_slots: Vec<Vec<i64>>,
    /// The array each array slot was made from (what a run that sets none binds).
    pub(crate) array_slots: Vec<Arc<ArrayStorage>>,
    /// Stands for the upload and readback buffers, made at `finish` once their sizes are known.
    pub(crate) placeholder: wgpu::Buffer,
    /// The explicit transfers between arrays the step makes (copies, moves between memory
    /// kinds), by direction and bytes: every run guards and counts them, as the op would.
    pub(crate) transfers: Vec<(TransferDirection, u64)>,
}

/// An upload or a read of a captured step: the copy step, where its bytes lie in the step's
/// upload or readback buffer, and how many bytes the caller's data holds (the copy's size is
/// that rounded up to 4).
#[derive(Clone, Copy, Debug)]
pub(crate) struct CapturedIo {
    pub(crate) step: usize,
    pub(crate) offset: u64,
    pub(crate) bytes: u64,
}

/// A copy kernel whose start comes from an index slot at each run (`ops/moving_copy.rs`
/// records it): its dispatch is step `step`; the box keeps its shape, only its bases move.
#[derive(Clone, Debug)]
pub(crate) struct MovingCopy {
    pub(crate) step: usize,
    pub(crate) slot: u32,
    /// The moving array's shape and the box's sizes (the start is clamped between them).
    pub(crate) shape: Vec<u64>,
    pub(crate) sizes: Vec<u64>,
    /// Bytes between consecutive indices of each dimension of the moving array.
    pub(crate) strides: Vec<u64>,
    /// Whether the source moves (a slice) or the destination (an update).
    pub(crate) source_moves: bool,
    /// The bytes of the kernel's indexing unit: every start's offset is a multiple of it.
    pub(crate) unit_bytes: u64,
    /// The planned parameters, and what sets their source and destination bases (in units) for
    /// a run (the ops' own geometry: `ops/moving_copy.rs`).
    pub(crate) params: Vec<u8>,
    pub(crate) rebase: fn(&mut [u8], u64, u64) -> std::result::Result<(), BaseOverflow>,
    /// The moving side's offset in bytes at the capture (the slot's initial start).
    pub(crate) initial_offset: u64,
    /// The box on the host, for runs that copy it there.
    pub(crate) host: Arc<dyn HostBox>,
}

/// A moving copy whose box is empty (`ops/moving_copy.rs` records no dispatch for it): with
/// [`ArenaConfig::strict_starts`](crate::ArenaConfig::strict_starts) every run's start for its
/// slot is still checked against the moving array's `shape` and the box's `sizes`, as the
/// single op checks it.
#[derive(Clone, Debug)]
pub(crate) struct EmptyMoving {
    pub(crate) slot: u32,
    pub(crate) shape: Vec<u64>,
    pub(crate) sizes: Vec<u64>,
}

/// A moving copy's box as the host copies it (the ops' own geometry: `ops/moving_copy.rs`),
/// for a run on a CPU adapter with zero-copy that makes the copy with `memcpy` rather than
/// the kernel (as single ops and sequences do there: `ops/host.rs`).
pub(crate) trait HostBox: Send + Sync + std::fmt::Debug {
    /// The bytes the box covers, from its first to past its last, in the source and in the
    /// destination (`(offset, len)` from each array's first byte) with the moving side at
    /// `offset`.
    fn spans(&self, offset: u64) -> [(u64, u64); 2];
    /// Copies the box, its moving side at `offset`, from `src` to `dst` (each an array's bytes).
    fn copy(&self, offset: u64, src: &MappedRange, dst: &MappedRange);
}

/// A moving copy's base (in units) that does not fit the kernel's 32-bit parameter: the
/// planner bound both arrays in one binding a `u32` addresses, so this means a planner bug.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the base {base} does not fit a kernel's 32-bit parameter")]
pub(crate) struct BaseOverflow {
    /// The base that does not fit.
    pub(crate) base: u64,
}
