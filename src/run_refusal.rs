//! Why a run of a captured step was refused before anything ran, as values a program can act
//! on: [`RunRefusal`], the `refusal` of [`Error::CapturedRun`](crate::Error::CapturedRun). A
//! file of its own beside `error.rs`, which holds it, as `collective_failure.rs` is for
//! collectives; `compute/captured_step.rs` decides which one a run gets.

/// Which kind of slot a refusal names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotKind {
    /// A [`ParamsSlot`](crate::ParamsSlot).
    Params,
    /// An [`InputSlot`](crate::InputSlot).
    Input,
    /// An [`IndexSlot`](crate::IndexSlot).
    Index,
    /// A [`ReadSlot`](crate::ReadSlot).
    Read,
}

impl std::fmt::Display for SlotKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SlotKind::Params => "parameter slot",
            SlotKind::Input => "input slot",
            SlotKind::Index => "index slot",
            SlotKind::Read => "read slot",
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
    #[error("the input has {given} elements and the captured upload {captured}: give each run exactly {captured} elements")]
    InputLength {
        /// Elements given.
        given: usize,
        /// Elements captured.
        captured: usize,
    },
    /// An output slice of another length than the captured read.
    #[error("the output slice holds {given} elements and the captured read {captured}: pass exactly {captured}")]
    ReadLength {
        /// Elements the slice holds.
        given: usize,
        /// Elements captured.
        captured: usize,
    },
    /// Start indices of another rank than the index slot's.
    #[error(
        "{given} start indices given for an index slot of rank {rank}: give one per dimension"
    )]
    StartRank {
        /// Indices given.
        given: usize,
        /// The slot's rank.
        rank: usize,
    },
    /// A parameter value of another size than the slot's block.
    #[error(
        "{given} parameter bytes given for a slot of {expected}: pass a value of the slot's type"
    )]
    ParamsSize {
        /// Bytes given.
        given: usize,
        /// The slot's block size in bytes.
        expected: usize,
    },
}
