//! `MemFraction`: the share of device memory the arena may hold, in XLA's grammar.

use serde::{Deserialize, Serialize};

/// JAX's default memory fraction: preallocate 75% of device memory.
pub const DEFAULT_MEM_FRACTION: f64 = 0.75;

/// What a fraction accepts, for error messages.
pub(crate) const FRACTION_GRAMMAR: &str =
    "a fraction in (0, 1] as \"0.75\", \"0.75+\" or \"0.75-0.85\" (reserve, then limit)";

/// The share of device memory the arena may hold, in XLA's grammar.
///
/// `"0.75"` reserves 75% and never grows; `"0.75+"` reserves 75% and may grow to 100%;
/// `"0.75-0.85"` reserves 75% and may grow to 85%. Both fractions lie in `(0, 1]` and the
/// limit is not below the reserve ([`MemFraction::check`]; a context refuses anything else).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemFraction {
    /// Fraction reserved up front (with preallocation on).
    pub reserve: f64,
    /// Fraction the arena may grow to; equal to `reserve` for a fixed fraction.
    pub limit: f64,
}

impl MemFraction {
    /// A fixed fraction: reserve and limit are the same.
    pub fn fixed(fraction: f64) -> Self {
        Self {
            reserve: fraction,
            limit: fraction,
        }
    }

    /// Parses XLA's fraction grammar (`"0.75"`, `"0.75+"`, `"0.75-0.85"`); a number is what Rust's
    /// `f64` parser reads without a sign, as Python's `float` reads it: exponents (`"5e-1"`,
    /// `"1e0"`), no digit before or after the point (`".5"`, `"1."`). Blanks around the value are
    /// ignored, blanks inside it (`"0.5 +"`, `"0.5 - 0.6"`) refused, as every variable's.
    ///
    /// Errors name the grammar; fractions must lie in `(0, 1]` and the limit must not be below
    /// the reserve.
    pub fn parse(text: &str) -> std::result::Result<Self, MemFractionError> {
        let text = text.trim();
        // A number, even one a float cannot hold (refused below, as written).
        let is_number =
            |part: &str| !matches!(number(part), Err(MemFractionError::NotANumber { .. }));
        let fraction = if is_number(text) {
            Self::fixed(number(text)?)
        } else if let Some(base) = text.strip_suffix('+') {
            Self {
                reserve: number(base)?,
                limit: 1.0,
            }
        } else {
            // The range's dash is the one that leaves a number on each side ("1e-1-0.5").
            let split = text
                .match_indices('-')
                .map(|(at, dash)| {
                    let (base, rest) = text.split_at(at);
                    (base, &rest[dash.len()..])
                })
                .find(|(base, cap)| is_number(base) && is_number(cap));
            match split {
                Some((base, cap)) => Self {
                    reserve: number(base)?,
                    limit: number(cap)?,
                },
                // A negative number: what is wrong with it is its range.
                None if text.strip_prefix('-').is_some_and(is_number) => {
                    return Err(MemFractionError::OutOfRange {
                        what: "reserve",
                        value: -number(&text[1..])?,
                    })
                }
                None => {
                    return Err(MemFractionError::NotAFraction {
                        text: text.to_string(),
                    })
                }
            }
        };
        fraction.check()?;
        Ok(fraction)
    }

    /// Checks the rules a context relies on: both fractions are numbers in `(0, 1]` (not NaN,
    /// not infinite) and the limit is not below the reserve. The error says which rule failed.
    pub fn check(&self) -> std::result::Result<(), MemFractionError> {
        for (what, value) in [("reserve", self.reserve), ("limit", self.limit)] {
            if !(value > 0.0 && value <= 1.0) {
                return Err(MemFractionError::OutOfRange { what, value });
            }
        }
        if self.limit < self.reserve {
            return Err(MemFractionError::LimitBelowReserve {
                limit: self.limit,
                reserve: self.reserve,
            });
        }
        Ok(())
    }
}

/// Why a memory fraction was refused by [`MemFraction::parse`] or [`MemFraction::check`].
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum MemFractionError {
    /// A part of the text is not a number.
    #[error("'{text}' is not a number")]
    NotANumber {
        /// The part that is not a number.
        text: String,
    },
    /// The text is none of the grammar's forms.
    #[error("'{text}' is not a number, \"x+\" or \"x-y\"")]
    NotAFraction {
        /// The text given.
        text: String,
    },
    /// A part is a number too large or too small for a 64-bit float (`1e400`, `1e-400`).
    #[error("'{text}' is beyond what a 64-bit float holds")]
    BeyondFloat {
        /// The part as written.
        text: String,
    },
    /// A fraction is not in `(0, 1]` (or is NaN or infinite).
    #[error("the {what} {value:?} is not in (0, 1]")]
    OutOfRange {
        /// `"reserve"` or `"limit"`.
        what: &'static str,
        /// Its value.
        value: f64,
    },
    /// The limit is below the reserve.
    #[error("the limit {limit:?} is below the reserve {reserve:?}")]
    LimitBelowReserve {
        /// The limit fraction.
        limit: f64,
        /// The reserve fraction.
        reserve: f64,
    },
}

/// One fraction of the grammar.
fn number(text: &str) -> std::result::Result<f64, MemFractionError> {
    // No blank (the whole value is trimmed once, as every variable's is) and no sign: Rust's `parse` would take a leading `+`, which no setting is written with.
    let value = (!text.starts_with(['+', '-']))
        .then(|| text.parse::<f64>().ok())
        .flatten()
        .ok_or_else(|| MemFractionError::NotANumber {
            text: text.to_string(),
        })?;
    // Digits that round to infinity or to 0 (`inf` itself is refused by its range).
    let mantissa = text.split(['e', 'E']).next().unwrap_or_default();
    let nonzero = mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b));
    if nonzero && (value.is_infinite() || value == 0.0) {
        return Err(MemFractionError::BeyondFloat {
            text: text.to_string(),
        });
    }
    Ok(value)
}

impl Default for MemFraction {
    fn default() -> Self {
        Self::fixed(DEFAULT_MEM_FRACTION)
    }
}

/// Writes fractions in their shortest form that reads back as the same value (Rust's `{:?}`
/// for `f64`): `0.5`, and `1e-300` rather than its 302 characters.
impl std::fmt::Display for MemFraction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // NaN is not equal to itself: a fixed NaN fraction is written as one value too.
        if self.limit == self.reserve || self.limit.to_bits() == self.reserve.to_bits() {
            write!(f, "{:?}", self.reserve)
        } else if self.limit == 1.0 {
            write!(f, "{:?}+", self.reserve)
        } else {
            write!(f, "{:?}-{:?}", self.reserve, self.limit)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fixed_nan_fraction_is_written_as_one_value() {
        assert_eq!(MemFraction::fixed(f64::NAN).to_string(), "NaN");
        assert_eq!(MemFraction::fixed(0.5).to_string(), "0.5");
    }

    #[test]
    fn fractions_are_written_short_and_read_back_as_the_same_value() {
        for (fraction, text) in [
            (MemFraction::fixed(1e-300), "1e-300"),
            (MemFraction::parse("0.25+").unwrap(), "0.25+"),
            (MemFraction::parse("0.25-0.5").unwrap(), "0.25-0.5"),
        ] {
            assert_eq!(fraction.to_string(), text);
            assert_eq!(MemFraction::parse(text).unwrap(), fraction);
        }
        let error = MemFraction::parse("1e300").unwrap_err();
        assert_eq!(error.to_string(), "the reserve 1e300 is not in (0, 1]");
    }

    #[test]
    fn a_negative_fraction_is_refused_for_its_range_not_as_text() {
        let error = MemFraction::parse("-0.5").unwrap_err();
        assert_eq!(
            error,
            MemFractionError::OutOfRange {
                what: "reserve",
                value: -0.5
            }
        );
        assert_eq!(error.to_string(), "the reserve -0.5 is not in (0, 1]");
        assert!(matches!(
            MemFraction::parse("-x"),
            Err(MemFractionError::NotAFraction { .. })
        ));
    }

    #[test]
    fn digits_beyond_a_float_are_named_as_written() {
        for (text, part) in [
            ("1e400", "1e400"),
            ("1e-400", "1e-400"),
            ("0.5-2e999", "2e999"),
        ] {
            let error = MemFraction::parse(text).unwrap_err();
            assert_eq!(
                error,
                MemFractionError::BeyondFloat {
                    text: part.to_string()
                }
            );
            assert_eq!(
                error.to_string(),
                format!("'{part}' is beyond what a 64-bit float holds")
            );
        }
        // `inf` and 0 are written as such: out of range, by their values.
        for (text, value) in [("inf", f64::INFINITY), ("0e400", 0.0)] {
            assert_eq!(
                MemFraction::parse(text).unwrap_err(),
                MemFractionError::OutOfRange {
                    what: "reserve",
                    value
                }
            );
        }
    }

    #[test]
    fn fraction_grammar_covers_fixed_plus_and_range() {
        assert_eq!(
            MemFraction::parse("0.75").unwrap(),
            MemFraction::fixed(0.75)
        );
        assert_eq!(
            MemFraction::parse("0.5+").unwrap(),
            MemFraction {
                reserve: 0.5,
                limit: 1.0
            }
        );
        assert_eq!(
            MemFraction::parse("0.75-0.85").unwrap(),
            MemFraction {
                reserve: 0.75,
                limit: 0.85
            }
        );
        assert_eq!(
            MemFraction::parse("0.9-0.8").unwrap_err(),
            MemFractionError::LimitBelowReserve {
                limit: 0.8,
                reserve: 0.9
            }
        );
        assert!(MemFraction::parse("1.5")
            .unwrap_err()
            .to_string()
            .contains("(0, 1]"));
        assert!(MemFraction::parse("abc")
            .unwrap_err()
            .to_string()
            .contains("not a number"));
        assert_eq!(
            MemFraction::parse("0.75-0.85").unwrap().to_string(),
            "0.75-0.85"
        );
        assert_eq!(MemFraction::parse("0.6+").unwrap().to_string(), "0.6+");
        // Blanks around the value are ignored, blanks inside it refused.
        assert_eq!(MemFraction::parse(" 0.5-0.6 ").unwrap().limit, 0.6);
        for inside in ["0.5 - 0.6", "0.5 -0.6", "0.5- 0.6", "0.5 +", "0. 5"] {
            assert!(MemFraction::parse(inside).is_err(), "{inside}");
        }
    }

    #[test]
    fn numbers_read_as_python_s_float_reads_them_without_a_sign() {
        for (text, value) in [(".5", 0.5), ("1.", 1.0), ("1e0", 1.0), ("0.5E0", 0.5)] {
            assert_eq!(MemFraction::parse(text).unwrap(), MemFraction::fixed(value));
        }
        for text in ["inf", "NaN", "+.5", "-.5", "."] {
            assert!(MemFraction::parse(text).is_err(), "{text}");
        }
    }

    #[test]
    fn exponents_with_a_minus_sign_parse_as_numbers_not_ranges() {
        assert_eq!(MemFraction::parse("5e-1").unwrap(), MemFraction::fixed(0.5));
        assert_eq!(
            MemFraction::parse("1e-1-5e-1").unwrap(),
            MemFraction {
                reserve: 0.1,
                limit: 0.5
            }
        );
        assert_eq!(
            MemFraction::parse("2.5e-1+").unwrap(),
            MemFraction {
                reserve: 0.25,
                limit: 1.0
            }
        );
    }

    #[test]
    fn nan_infinite_zero_and_negative_fractions_are_refused() {
        for text in [
            "nan", "NaN", "inf", "-inf", "0", "-0.5", "0.5-nan", "nan+", "",
            // A sign is refused as in every setting.
            "+0.5", "+.5", "+0.5+", "0.5-+0.8", "+0.5-0.8",
        ] {
            assert!(MemFraction::parse(text).is_err(), "{text:?}");
        }
        for fraction in [
            MemFraction::fixed(f64::NAN),
            MemFraction::fixed(f64::INFINITY),
            MemFraction::fixed(0.0),
            MemFraction {
                reserve: 0.5,
                limit: f64::NAN,
            },
            MemFraction {
                reserve: f64::NEG_INFINITY,
                limit: 0.5,
            },
        ] {
            let why = fraction.check().unwrap_err();
            assert!(
                matches!(why, MemFractionError::OutOfRange { .. }),
                "{fraction:?}: {why}"
            );
            assert!(
                why.to_string().contains("not in (0, 1]"),
                "{fraction:?}: {why}"
            );
        }
    }
}
