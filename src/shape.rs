//! The limits every array's shape obeys (rank, byte span) and the check each shape passes
//! when an array or a view takes it, and XLA's start index of a slice in a dimension. A file of
//! its own because arrays, views, transfers, sharding, profiling, the library's ops and
//! captured steps all need them, and none of them should need the array type for it.

use crate::count::count;
use crate::error::{Error, IndexRefusal, Result};

/// The highest rank an array may have (XLA's kernels go further; six covers real workloads and
/// keeps kernel parameters fixed-size).
pub const MAX_RANK: usize = 6;

/// Checks a shape for elements of `elem_bytes`: rank at most [`MAX_RANK`], an element count
/// that fits `usize`, a span of at most [`MAX_ARRAY_SPAN_BYTES`] ([`check_span`]), and (when
/// given) that it holds `len` elements. Every shape an array or a view takes passes here.
pub(crate) fn check_shape(
    shape: &[usize],
    len: Option<usize>,
    elem_bytes: usize,
    operation: &'static str,
) -> Result<usize> {
    if shape.len() > MAX_RANK {
        return Err(Error::Shape {
            operation,
            reason: format!("rank {} is above the maximum of {MAX_RANK}", shape.len()),
        });
    }
    let elements = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| Error::Shape {
            operation,
            reason: format!("the element count of shape {shape:?} overflows"),
        })?;
    if let Some(len) = len {
        if len != elements {
            return Err(Error::Shape {
                operation,
                reason: format!(
                    "shape {shape:?} holds {} but the data has {len}",
                    count(elements, "element")
                ),
            });
        }
    }
    check_span(shape, elem_bytes, operation)?;
    Ok(elements)
}

/// The most bytes an array's index space may span, counting zero-size dimensions as one:
/// 2^63 − 1. XLA's dimensions and byte offsets are `i64`, and no device addresses more, so a
/// shape beyond it (even one holding no elements, as `[0, usize::MAX]`) cannot be a real
/// array; refusing it when an array is made keeps every stride and offset of every op on it
/// (all below this span) free of overflow.
pub const MAX_ARRAY_SPAN_BYTES: u64 = i64::MAX as u64;

/// Errors unless `shape`, with zero-size dimensions counted as one, spans at most
/// [`MAX_ARRAY_SPAN_BYTES`] for elements of `elem_bytes` (zero-sized elements counted as one
/// byte).
pub(crate) fn check_span(
    shape: &[usize],
    elem_bytes: usize,
    operation: &'static str,
) -> Result<()> {
    let span = shape
        .iter()
        .try_fold(elem_bytes.max(1) as u64, |acc, &d| {
            acc.checked_mul(d.max(1) as u64)
        })
        .filter(|&span| span <= MAX_ARRAY_SPAN_BYTES);
    match span {
        Some(_) => Ok(()),
        None => Err(Error::Shape {
            operation,
            reason: format!(
                "shape {shape:?} of {elem_bytes}-byte elements spans more than {MAX_ARRAY_SPAN_BYTES} bytes (counting zero-size dimensions as 1), more than any device addresses; XLA's dimensions are i64"
            ),
        }),
    }
}

/// A start index of a slice of `size` in a dimension of `dim` (`size <= dim`): XLA's clamp into
/// `[0, dim - size]`, or, with `strict` ([`ArenaConfig::strict_starts`](crate::ArenaConfig)),
/// [`IndexRefusal::StartOutOfRange`] for a start outside that range. In `u64` and saturating, so no
/// dimension (above `i64::MAX`, zero) or start (`i64::MIN`, `i64::MAX`) can wrap or panic.
pub(crate) fn start_index(
    start: i64,
    dim: u64,
    size: u64,
    strict: bool,
    dimension: usize,
    operation: &'static str,
) -> Result<u64> {
    let last_start = dim.saturating_sub(size);
    // A negative start clamps to 0.
    let clamped = u64::try_from(start).map_or(0, |start| start.min(last_start));
    if strict && u64::try_from(start) != Ok(clamped) {
        return Err(Error::Index {
            operation,
            refusal: IndexRefusal::StartOutOfRange {
                dimension,
                start,
                last_start,
                operand: dim,
                slice: size,
                clamped,
            },
        });
    }
    Ok(clamped)
}
