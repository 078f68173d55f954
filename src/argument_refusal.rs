//! Why an argument was refused, as values a program can act on: [`IndexRefusal`] (the
//! `refusal` of [`Error::Index`](crate::Error::Index)) for indices, slice starts and ranks, and
//! [`ElementRefusal`] (of [`Error::Element`](crate::Error::Element)) for element types whose
//! size a call cannot take. A file of its own beside `error.rs`, which holds them, as
//! `capture_refusal.rs` is for captures; `view.rs`, `shape.rs`, `ops/slice_indices.rs`,
//! `ops/fill.rs`, `array.rs` and the collectives decide which one a call gets.

use crate::count::count;

/// An index (of an element, a slice's start, a rank of an MPI group) that a call cannot take.
/// Nothing was read, written or sent.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IndexRefusal {
    /// Start indices not one per dimension of the operand (a dynamic slice or update).
    #[error("{} given for an operand of rank {} ({shape:?}); give one per dimension", count(*given, "start index").plural("start indices"), shape.len())]
    StartCount {
        /// Indices given.
        given: usize,
        /// The operand's shape.
        shape: Vec<usize>,
    },
    /// More indices than the array's rank (a view).
    #[error("{} given for shape {shape:?} of rank {}; {}", count(*given, "index").plural("indices"), shape.len(), if shape.is_empty() { "an array of rank 0 takes none" } else { "give at most one per dimension" })]
    IndexCount {
        /// Indices given.
        given: usize,
        /// The array's shape.
        shape: Vec<usize>,
    },
    /// An index past its dimension (a view).
    #[error(
        "index {index} is out of range for dimension {dimension} of shape {shape:?} (size {size}): {}",
        index_remedy(*.size)
    )]
    OutOfRange {
        /// The dimension.
        dimension: usize,
        /// The index given.
        index: usize,
        /// The dimension's size.
        size: usize,
        /// The array's shape.
        shape: Vec<usize>,
    },
    /// A slice's start outside `0..=last_start`, refused under
    /// [`ArenaConfig::strict_starts`](crate::ArenaConfig::strict_starts) where XLA would clamp
    /// it to `clamped` (single ops and captured runs alike). Where several dimensions are out
    /// of range, it names the first.
    #[error("start {start} of dimension {dimension} lies outside 0..={last_start} (the operand's {operand} less the slice's {slice}); GPU_ARENA_STRICT_STARTS (ArenaConfig::strict_starts) refuses it where XLA would clamp it to {clamped}")]
    StartOutOfRange {
        /// The dimension.
        dimension: usize,
        /// The start given.
        start: i64,
        /// The largest start that keeps the slice inside the operand.
        last_start: u64,
        /// The operand's size in the dimension.
        operand: u64,
        /// The slice's size in the dimension.
        slice: u64,
        /// Where XLA's clamp would have put the start.
        clamped: u64,
    },
    /// A send's destination or a receive's source that is not another rank of the group.
    #[error("rank {peer} is not another rank of this group (this is rank {rank} of {ranks})")]
    Peer {
        /// The rank given.
        peer: usize,
        /// This rank.
        rank: usize,
        /// The group's size.
        ranks: usize,
    },
    /// A broadcast's root that is not a rank of the group: the error of each rank that passed
    /// it (the others get [`Error::Collective`](crate::Error::Collective) naming that rank).
    #[error("root {root} is not a rank of this group of {}", count(*.ranks, "rank"))]
    Root {
        /// The root given.
        root: usize,
        /// The group's size.
        ranks: usize,
    },
}

/// An element type whose size a call cannot take. Nothing was changed, and a donated array
/// comes back intact.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ElementRefusal {
    /// A fill's element size does not divide the 16 bytes its kernel writes at a time.
    #[error("elements of {bytes} bytes ({element}) cannot be filled: the element size must divide 16 (1, 2, 4, 8 or 16 bytes)")]
    FillSize {
        /// The element type's name.
        element: &'static str,
        /// Its size in bytes.
        bytes: usize,
    },
    /// A bitcast between types of different sizes (a bitcast keeps every element's bytes).
    #[error("{from} is {} and {to} is {to_bytes}: a bitcast keeps every element's bytes, so both types must have the same size (reshape to change the element count)", count(*.from_bytes, "byte"))]
    BitcastSize {
        /// The array's element type.
        from: &'static str,
        /// Its size in bytes.
        from_bytes: usize,
        /// The type asked for.
        to: &'static str,
        /// Its size in bytes.
        to_bytes: usize,
    },
}

/// What to give instead of an index out of a dimension of `size`.
fn index_remedy(size: usize) -> String {
    match size {
        0 => "the dimension is empty: no index is in range".into(),
        1 => "the only index there is 0".into(),
        size => format!("give an index from 0 to {} there", size - 1),
    }
}

#[cfg(test)]
mod tests {
    use super::IndexRefusal;

    #[test]
    fn counts_agree_with_their_number_and_rank_0_takes_no_index() {
        let start = IndexRefusal::StartCount {
            given: 1,
            shape: vec![4, 4],
        };
        assert_eq!(
            start.to_string(),
            "1 start index given for an operand of rank 2 ([4, 4]); give one per dimension"
        );
        let scalar = IndexRefusal::IndexCount {
            given: 1,
            shape: vec![],
        };
        assert_eq!(
            scalar.to_string(),
            "1 index given for shape [] of rank 0; an array of rank 0 takes none"
        );
        let vector = IndexRefusal::IndexCount {
            given: 3,
            shape: vec![2],
        };
        assert_eq!(
            vector.to_string(),
            "3 indices given for shape [2] of rank 1; give at most one per dimension"
        );
        let past = |size| IndexRefusal::OutOfRange {
            dimension: 0,
            index: 5,
            size,
            shape: vec![size],
        };
        assert!(past(1)
            .to_string()
            .ends_with("(size 1): the only index there is 0"));
        assert!(past(2)
            .to_string()
            .ends_with("(size 2): give an index from 0 to 1 there"));
    }
}
