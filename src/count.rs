//! Counts of things as people read them: `1 region`, `3 regions`, `2 temporaries`.

use std::fmt;

/// `n` of a thing, with its noun in the singular for 1 and in the plural otherwise: what the
/// library's tables, reports and messages print for a count. Made by [`count`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Count<'a> {
    n: u64,
    one: &'a str,
    /// The plural where adding `s` does not make it.
    many: Option<&'a str>,
}

/// `n` of the thing named `one` (singular); its plural adds `s` unless given with
/// [`Count::plural`].
pub(crate) fn count(n: impl TryInto<u64>, one: &str) -> Count<'_> {
    Count {
        n: n.try_into().unwrap_or(u64::MAX),
        one,
        many: None,
    }
}

impl<'a> Count<'a> {
    /// The same count, with the plural written out (`temporaries`).
    pub(crate) fn plural(self, many: &'a str) -> Count<'a> {
        Count {
            many: Some(many),
            ..self
        }
    }
}

impl fmt::Display for Count<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.n, self.many) {
            (1, _) => write!(f, "1 {}", self.one),
            (n, Some(many)) => write!(f, "{n} {many}"),
            (n, None) => write!(f, "{n} {}s", self.one),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        assert_eq!(count(1u64, "region").to_string(), "1 region");
        assert_eq!(count(0usize, "region").to_string(), "0 regions");
        assert_eq!(count(3u32, "free chunk").to_string(), "3 free chunks");
        let temporaries = |n: u64| count(n, "temporary").plural("temporaries").to_string();
        assert_eq!(temporaries(1), "1 temporary");
        assert_eq!(temporaries(2), "2 temporaries");
    }
}
