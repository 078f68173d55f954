//! Small formatting helpers of the report: byte counts and durations for people, escaping for
//! HTML and SVG.

use std::fmt;

pub use crate::arena::Bytes;

/// Text escaped for HTML and SVG content and attribute values (the five XML entities, so the
/// page is also well-formed XML); a character XML 1.0 does not allow at all (control
/// characters other than tab and line ends, U+FFFE, U+FFFF), which a label may hold, is
/// written as U+FFFD.
pub struct Escape<'a>(pub &'a str);

impl fmt::Display for Escape<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let special = |c: char| matches!(c, '&' | '<' | '>' | '"' | '\'') || !allowed_in_xml(c);
        let mut rest = self.0;
        while let Some(at) = rest.find(special) {
            f.write_str(&rest[..at])?;
            let c = rest[at..].chars().next().unwrap_or_default();
            f.write_str(match c {
                '&' => "&amp;",
                '<' => "&lt;",
                '>' => "&gt;",
                '"' => "&quot;",
                '\'' => "&#39;",
                _ => "\u{FFFD}",
            })?;
            rest = &rest[at + c.len_utf8()..];
        }
        f.write_str(rest)
    }
}

/// Whether XML 1.0 allows `c` in a document (its `Char` production; surrogates cannot be a
/// Rust `char`).
fn allowed_in_xml(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{FFFD}' | '\u{10000}'..)
}

/// The sum of byte counts, saturating: a snapshot read from JSON may hold any numbers, and the
/// report draws it rather than panic on a sum past 2^64 − 1.
pub fn total(bytes: impl IntoIterator<Item = u64>) -> u64 {
    bytes.into_iter().fold(0, u64::saturating_add)
}

/// `n` as a percentage of `of` with one decimal (0 when `of` is 0).
pub fn percent(n: u64, of: u64) -> f64 {
    if of == 0 {
        0.0
    } else {
        n as f64 * 100.0 / of as f64
    }
}

/// A duration in nanoseconds for people: `850 ns`, `12.5 µs`, `3.20 ms`, `1.50 s`.
pub fn duration_ns(ns: u64) -> String {
    match ns {
        0..1_000 => format!("{ns} ns"),
        1_000..1_000_000 => format!("{:.1} µs", ns as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.2} ms", ns as f64 / 1e6),
        _ => format!("{:.2} s", ns as f64 / 1e9),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_characters_are_escaped() {
        assert_eq!(
            Escape("a<b & \"c\" 'd'>").to_string(),
            "a&lt;b &amp; &quot;c&quot; &#39;d&#39;&gt;"
        );
        // What XML cannot hold at all becomes U+FFFD; what it can stays.
        assert_eq!(
            Escape("a\u{0}b\u{1}\u{b}\u{1f}\u{fffe}\u{ffff}\tc\né😀").to_string(),
            "a\u{FFFD}b\u{FFFD}\u{FFFD}\u{FFFD}\u{FFFD}\u{FFFD}\tc\né😀"
        );
    }

    #[test]
    fn sizes_and_durations_read_in_human_units() {
        assert_eq!(Bytes(256).to_string(), "256 B");
        assert_eq!(Bytes(4 << 30).to_string(), "4.00 GiB");
        assert_eq!(duration_ns(1_500_000), "1.50 ms");
    }
}
