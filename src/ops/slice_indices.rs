//! XLA's index semantics for `DynamicSlice` and `DynamicUpdateSlice`: shapes are checked, start
//! indices are clamped so the slice lies inside the operand. Out-of-range starts are not errors,
//! exactly as in XLA (`jax.lax.dynamic_update_slice` clamps too), unless the context's
//! `strict_starts` asks for a refusal (the clamp itself is `shape::start_index`, shared with
//! the runs of captured steps).
//!
//! Pure arithmetic on user input, so no operation here may wrap or panic: the clamp is done in
//! `u64` on a range that is never inverted, whatever the dimensions (above `i64::MAX`, zero)
//! and starts (`i64::MIN`, `i64::MAX`).
#![deny(clippy::arithmetic_side_effects)]

use crate::error::{Error, IndexRefusal, Result};
use crate::shape::start_index;

/// Checks that a slice of `sizes` fits an operand of `operand` shape and clamps `start` into
/// `[0, operand[d] - sizes[d]]` per dimension.
///
/// Errors: a slice of another rank, or larger than the operand in some dimension
/// ([`Error::Shape`]); a start of the wrong length ([`IndexRefusal::StartCount`]). Never panics.
pub(crate) fn clamp_start(
    operand: &[usize],
    sizes: &[usize],
    start: &[i64],
    strict: bool,
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
        return Err(Error::Index {
            operation,
            refusal: IndexRefusal::StartCount {
                given: start.len(),
                shape: operand.to_vec(),
            },
        });
    }
    operand
        .iter()
        .zip(sizes)
        .zip(start)
        .enumerate()
        .map(|(d, ((&dim, &size), &start))| {
            start_index(start, dim as u64, size as u64, strict, d, operation)
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)] // the model's i128 arithmetic cannot overflow
mod tests {
    use super::*;

    #[test]
    fn strict_starts_refuse_what_xla_would_clamp_and_keep_what_is_in_range() {
        assert_eq!(
            clamp_start(&[10, 8], &[3, 2], &[7, 6], true, "t").unwrap(),
            vec![7, 6]
        );
        for start in [[-1, 0], [8, 0], [0, 7], [i64::MIN, 0], [0, i64::MAX]] {
            let refused = clamp_start(&[10, 8], &[3, 2], &start, true, "t").unwrap_err();
            assert!(
                matches!(
                    &refused,
                    Error::Index {
                        operation: "t",
                        refusal: IndexRefusal::StartOutOfRange { .. }
                    }
                ),
                "{refused:?}"
            );
            assert!(
                refused.to_string().contains("GPU_ARENA_STRICT_STARTS"),
                "{refused}"
            );
        }
    }

    #[test]
    fn starts_are_clamped_into_the_operand_like_xla() {
        assert_eq!(
            clamp_start(&[10, 8], &[3, 8], &[-5, 4], false, "t").unwrap(),
            vec![0, 0]
        );
        assert_eq!(
            clamp_start(&[10, 8], &[3, 2], &[9, 7], false, "t").unwrap(),
            vec![7, 6]
        );
        assert_eq!(
            clamp_start(&[10], &[0], &[i64::MAX], false, "t").unwrap(),
            vec![10]
        );
        assert_eq!(
            clamp_start(&[], &[], &[], false, "t").unwrap(),
            Vec::<u64>::new()
        );
    }

    #[test]
    fn a_dimension_above_i64_max_clamps_without_panicking() {
        // Operand [0, usize::MAX], slice [0, 1], start [0, 5]: the clamp's bounds must not
        // cross (`Ord::clamp` panics on "min > max").
        assert_eq!(
            clamp_start(&[0, usize::MAX], &[0, 1], &[0, 5], false, "t").unwrap(),
            vec![0, 5]
        );
        let huge = usize::MAX as u64;
        assert_eq!(
            clamp_start(&[usize::MAX], &[0], &[i64::MAX], false, "t").unwrap(),
            vec![i64::MAX as u64]
        );
        assert_eq!(
            clamp_start(&[usize::MAX], &[1], &[i64::MIN], false, "t").unwrap(),
            vec![0]
        );
        assert_eq!(
            clamp_start(
                &[usize::MAX, 3],
                &[usize::MAX, 3],
                &[i64::MAX, -1],
                false,
                "t"
            )
            .unwrap(),
            vec![0, 0]
        );
        assert!(huge > i64::MAX as u64);
    }

    #[test]
    fn zero_size_operands_and_extreme_starts_clamp_to_the_only_start() {
        for start in [i64::MIN, -1, 0, 1, i64::MAX] {
            assert_eq!(
                clamp_start(&[0], &[0], &[start], false, "t").unwrap(),
                vec![0]
            );
            assert_eq!(
                clamp_start(&[0, 7], &[0, 7], &[start, start], false, "t").unwrap(),
                vec![0, 0]
            );
            assert_eq!(
                clamp_start(&[5], &[2], &[start], false, "t").unwrap(),
                vec![start.clamp(0, 3) as u64]
            );
        }
    }

    mod model {
        use super::*;
        use proptest::prelude::*;

        /// Dimensions from tiny to past `i64::MAX`, sizes no larger, starts anywhere in `i64`.
        fn case() -> impl Strategy<Value = (Vec<(usize, usize)>, Vec<i64>)> {
            let dim = prop_oneof![
                0..8usize,
                Just(usize::MAX),
                (i64::MAX as usize)..=usize::MAX
            ];
            let start = prop_oneof![any::<i64>(), Just(i64::MIN), Just(i64::MAX), -4..12i64];
            proptest::collection::vec(
                (dim, any::<prop::sample::Index>(), start),
                0..=crate::shape::MAX_RANK,
            )
            .prop_map(|dims| {
                let sizes = dims
                    .iter()
                    .map(|(d, i, _)| {
                        (
                            *d,
                            if *d == 0 {
                                0
                            } else {
                                i.index(d.saturating_add(1).max(1))
                            },
                        )
                    })
                    .collect();
                let starts = dims.iter().map(|(_, _, s)| *s).collect();
                (sizes, starts)
            })
        }

        proptest! {
            /// Against the rule in i128 arithmetic, which nothing here can overflow.
            #[test]
            fn clamped_starts_follow_xla_for_every_dimension_and_start((dims, start) in case()) {
                let operand: Vec<usize> = dims.iter().map(|d| d.0).collect();
                let sizes: Vec<usize> = dims.iter().map(|d| d.1).collect();
                let clamped = clamp_start(&operand, &sizes, &start, false, "t").unwrap();
                for d in 0..operand.len() {
                    let hi = operand[d] as i128 - sizes[d] as i128;
                    let expected = (start[d] as i128).clamp(0, hi);
                    prop_assert_eq!(clamped[d] as i128, expected);
                }
            }
        }
    }

    #[test]
    fn wrong_rank_too_large_slices_and_short_starts_are_errors() {
        let rank = clamp_start(&[4, 4], &[4], &[0, 0], false, "t").unwrap_err();
        assert!(matches!(rank, Error::Shape { .. }), "{rank}");
        assert!(rank.to_string().contains("ranks must match"), "{rank}");
        let large = clamp_start(&[4, 4], &[2, 5], &[0, 0], false, "t").unwrap_err();
        assert!(large.to_string().contains("dimension 1 (5 > 4)"), "{large}");
        let start = clamp_start(&[4, 4], &[2, 2], &[0], false, "t").unwrap_err();
        assert!(
            matches!(
                start,
                Error::Index {
                    refusal: IndexRefusal::StartCount { given: 1, .. },
                    ..
                }
            ),
            "{start}"
        );
    }
}
