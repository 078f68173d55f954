//! XLA's index semantics for `DynamicSlice` and `DynamicUpdateSlice`: shapes are checked, start
//! indices are clamped so the slice lies inside the operand. Out-of-range starts are not errors,
//! exactly as in XLA (`jax.lax.dynamic_update_slice` clamps too).

use crate::error::{Error, Result};

/// Checks that a slice of `sizes` fits an operand of `operand` shape and clamps `start` into
/// `[0, operand[d] - sizes[d]]` per dimension.
///
/// Errors: a slice of another rank, or larger than the operand in some dimension
/// ([`Error::Shape`]); a start of the wrong length ([`Error::InvalidArgument`]).
pub(crate) fn clamp_start(
    operand: &[usize],
    sizes: &[usize],
    start: &[i64],
    operation: &'static str,
) -> Result<Vec<u64>> {
    if sizes.len() != operand.len() {
        return Err(Error::Shape {
            operation,
            reason: format!(
                "the slice has rank {} ({sizes:?}) but the operand has rank {} ({operand:?}); ranks must match",
                sizes.len(),
                operand.len()
            ),
        });
    }
    if let Some(d) = (0..sizes.len()).find(|&d| sizes[d] > operand[d]) {
        return Err(Error::Shape {
            operation,
            reason: format!(
                "the slice {sizes:?} is larger than the operand {operand:?} in dimension {d} ({} > {})",
                sizes[d], operand[d]
            ),
        });
    }
    if start.len() != operand.len() {
        return Err(Error::InvalidArgument {
            operation,
            reason: format!(
                "{} start indices given for an operand of rank {} ({operand:?}); give one per dimension",
                start.len(),
                operand.len()
            ),
        });
    }
    Ok((0..operand.len())
        .map(|d| start[d].clamp(0, (operand[d] - sizes[d]) as i64) as u64)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_are_clamped_into_the_operand_like_xla() {
        assert_eq!(
            clamp_start(&[10, 8], &[3, 8], &[-5, 4], "t").unwrap(),
            vec![0, 0]
        );
        assert_eq!(
            clamp_start(&[10, 8], &[3, 2], &[9, 7], "t").unwrap(),
            vec![7, 6]
        );
        assert_eq!(
            clamp_start(&[10], &[0], &[i64::MAX], "t").unwrap(),
            vec![10]
        );
        assert_eq!(clamp_start(&[], &[], &[], "t").unwrap(), Vec::<u64>::new());
    }

    #[test]
    fn wrong_rank_too_large_slices_and_short_starts_are_errors() {
        let rank = clamp_start(&[4, 4], &[4], &[0, 0], "t").unwrap_err();
        assert!(matches!(rank, Error::Shape { .. }), "{rank}");
        assert!(rank.to_string().contains("ranks must match"), "{rank}");
        let large = clamp_start(&[4, 4], &[2, 5], &[0, 0], "t").unwrap_err();
        assert!(large.to_string().contains("dimension 1 (5 > 4)"), "{large}");
        let start = clamp_start(&[4, 4], &[2, 2], &[0], "t").unwrap_err();
        assert!(matches!(start, Error::InvalidArgument { .. }), "{start}");
    }
}
