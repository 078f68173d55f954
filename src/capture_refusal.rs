//! Why a capture refused an op ([`CaptureRefusal`], the `refusal` of
//! [`Error::Capture`](crate::Error::Capture)) or a run of a captured step was refused
//! ([`RunRefusal`], of [`Error::CapturedRun`](crate::Error::CapturedRun)) before anything was
//! recorded or ran, as values a program can act on. A file of its own beside `error.rs`, which
//! holds them, as `collective_failure.rs` is for collectives; `compute/` and
//! `ops/moving_copy.rs` decide which one an op gets.

use crate::count::count;

/// Which kind of slot a refusal names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SlotKind {
    /// A [`ParamsSlot`](crate::ParamsSlot).
    Params,
    /// An [`InputSlot`](crate::InputSlot).
    Input,
    /// An [`IndexSlot`](crate::IndexSlot).
    Index,
    /// A [`ReadSlot`](crate::ReadSlot).
    Read,
    /// An [`ArraySlot`](crate::ArraySlot).
    Array,
}

impl std::fmt::Display for SlotKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SlotKind::Params => "parameter slot",
            SlotKind::Input => "input slot",
            SlotKind::Index => "index slot",
            SlotKind::Read => "read slot",
            SlotKind::Array => "array slot",
        })
    }
}

/// What a run of a captured step was given that it cannot take. Nothing ran and nothing the
/// run set was kept.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RunRefusal {
    /// A slot made by another capture (`slot_capture`) than this step's (`step_capture`).
    #[error("the {slot} belongs to Capture #{slot_capture}, and this step is Capture #{step_capture}: give a run the slots its own capture made")]
    ForeignSlot {
        /// Which kind of slot.
        slot: SlotKind,
        /// The capture that made the slot.
        slot_capture: u64,
        /// The capture this step came from.
        step_capture: u64,
    },
    /// An input of another length than the captured upload.
    #[error("the input has {} and the captured upload {captured}: give each run exactly {}", count(*.given, "element"), count(*.captured, "element"))]
    InputLength {
        /// Elements given.
        given: usize,
        /// Elements captured.
        captured: usize,
    },
    /// An output slice of another length than the captured read.
    #[error("the output slice holds {} and the captured read {captured}: pass a slice of exactly {}", count(*.given, "element"), count(*.captured, "element"))]
    ReadLength {
        /// Elements the slice holds.
        given: usize,
        /// Elements captured.
        captured: usize,
    },
    /// Start indices of another rank than the index slot's.
    #[error(
        "{} given for an index slot of rank {rank}: give one per dimension",
        count(*given, "start index").plural("start indices")
    )]
    StartRank {
        /// Indices given.
        given: usize,
        /// The slot's rank.
        rank: usize,
    },
    /// An array of another shape than the array slot's.
    #[error("the array has shape {given:?} and the array slot {captured:?}: bind an array of the captured shape")]
    ArrayShape {
        /// The array's shape.
        given: Vec<usize>,
        /// The slot's shape.
        captured: Vec<usize>,
    },
    /// An array in another memory kind than the array slot's: the step's copies were planned
    /// between the kinds' memories as captured.
    #[error("the array is in {given} memory and the array slot's in {captured}: bind an array of the captured memory kind (move it with offload or prefetch first)")]
    ArrayMemoryKind {
        /// The array's kind.
        given: crate::memory_kind::MemoryKind,
        /// The slot's kind.
        captured: crate::memory_kind::MemoryKind,
    },
    /// An array bound to an array slot that the step also uses elsewhere (the step was planned
    /// over distinct arrays).
    #[error("the array bound to array slot {slot} is also one the step uses: bind an array the step does not use otherwise")]
    ArrayUsedByTheStep {
        /// The slot it was bound to (its number in the capture, in order of making).
        slot: u32,
    },
    /// A parameter value of another size than the slot's block. [`crate::StepRun::params`]
    /// takes a value of the slot's own type, so a run set through it never meets this; the
    /// check stands between the typed slot and the bytes the run writes.
    #[error(
        "{} of parameters given for a slot of {}: pass a value of the slot's type",
        count(*.given, "byte"),
        count(*.expected, "byte")
    )]
    ParamsSize {
        /// Bytes given.
        given: usize,
        /// The slot's block size in bytes.
        expected: usize,
    },
}

/// What a capture's op was given that the capture cannot record. Nothing was recorded, and a
/// donated operand comes back intact.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CaptureRefusal {
    /// A slot made by another capture (`slot_capture`) than the one the op is recorded in
    /// (`capture`; `None`: the op is recorded outside any capture).
    #[error("the {slot} belongs to Capture #{slot_capture}, and this op is recorded {}: use a slot of the capture the op is recorded in{}", match capture { Some(c) => format!("in Capture #{c}"), None => "outside any capture".to_string() }, match slot { SlotKind::Params => ", or pass the value with .params(&value)", _ => "" })]
    ForeignSlot {
        /// Which kind of slot.
        slot: SlotKind,
        /// The capture that made the slot.
        slot_capture: u64,
        /// The capture the op is recorded in, if any.
        capture: Option<u64>,
    },
    /// An index slot of another rank than the array it indexes.
    #[error("the index slot has {} and the array rank {array_rank}: make the slot with one index per dimension of the array", count(*.slot_rank, "index").plural("indices"))]
    SlotRank {
        /// The slot's number of indices.
        slot_rank: usize,
        /// The array's rank.
        array_rank: usize,
    },
    /// The capture's recorder was moved out of it (`std::mem::swap` / `replace` of the
    /// `Capture`'s inside): the capture, the recorder moved out, and the slots made after the
    /// move refuse every op.
    #[error("the capture's recorder was moved out of it: record into the Capture itself, and call finish() on the Capture")]
    RecorderReplaced,
    /// An array slot asked for an array the capture made: its memory is the step's own
    /// (a temporary or an output of the step).
    #[error("the array was made by this capture, and its memory is the step's own: make array slots of arrays made outside the capture")]
    ArrayMadeByCapture,
    /// A box whose start changes between runs must be one dispatch, and this one's `items`
    /// exceed what one grid takes on this device (`per_dispatch`).
    #[error("a start that changes between runs needs one dispatch, and the box's {items} items exceed the {per_dispatch} one grid takes (this device's limit, or ArenaConfig::max_workgroups_per_dimension where set lower): copy smaller boxes, or record the op per run in a Sequence")]
    BoxTooLarge {
        /// The box's items (words or vec4s of the copy).
        items: u64,
        /// What one dispatch takes on this device (or under
        /// `ArenaConfig::max_workgroups_per_dimension` where that is set lower).
        per_dispatch: u64,
    },
    /// A box whose start changes between runs binds both arrays whole, and one of them
    /// (`bytes`) is larger than a binding may be on this device (`limit`).
    #[error("a start that changes between runs needs both arrays bound whole, and {bytes} bytes exceed the binding limit ({limit} bytes: this device's, or ArenaConfig::max_binding_bytes where set lower): slice the arrays smaller, or record the op per run in a Sequence")]
    BindingTooLarge {
        /// The larger array's bound bytes.
        bytes: u64,
        /// The binding limit: the device's, or `ArenaConfig::max_binding_bytes` where that is
        /// set lower.
        limit: u64,
    },
}
