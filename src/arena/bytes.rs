//! Byte counts as people read them (`256 B`, `1.50 KiB`): the one formatting that out-of-memory
//! messages, region refusals and the memory report share, in a file of its own so each of them
//! names it here rather than through the others.

use std::fmt;

/// A byte count for people: `256 B`, `1.50 KiB`, `3.00 GiB` (binary units, as `nvidia-smi`
/// and XLA's OOM messages print them). Used by OOM messages and the memory report alike.
///
/// The figure is rounded to two decimals, so two counts near a unit can print alike (2 GiB and
/// 2 GiB − 256 both read `2.00 GiB`); the alternate form (`{:#}`) adds the exact count where the
/// figure is rounded, `2.00 GiB (2147483392 bytes)`, for messages that compare two counts.
#[derive(Clone, Copy, Debug)]
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
        if self.0 < 1024 {
            return write!(f, "{} B", self.0);
        }
        let mut value = self.0 as f64 / 1024.0;
        let mut unit = 0;
        // A value that would print as 1024.00 of a unit is 1.00 of the next.
        while value >= 1024.0 - 0.005 && unit + 1 < UNITS.len() {
            value /= 1024.0;
            unit += 1;
        }
        write!(f, "{value:.2} {}", UNITS[unit])?;
        // Exact when a hundredth of the unit divides the count.
        let unit_bytes = 1u128 << (10 * (unit + 1));
        if f.alternate() && !(u128::from(self.0) * 100).is_multiple_of(unit_bytes) {
            write!(f, " ({} bytes)", self.0)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_read_in_binary_units() {
        assert_eq!(Bytes(256).to_string(), "256 B");
        assert_eq!(Bytes(1536).to_string(), "1.50 KiB");
        assert_eq!(Bytes(3 << 30).to_string(), "3.00 GiB");
        // Just under a unit: the next unit, never "1024.00" of this one.
        assert_eq!(Bytes((1 << 20) - 1).to_string(), "1.00 MiB");
        assert_eq!(Bytes((1 << 30) - 1).to_string(), "1.00 GiB");
        assert_eq!(Bytes((1 << 20) - 6 * 1024).to_string(), "1018.00 KiB");
        assert_eq!(Bytes(u64::MAX).to_string(), "16.00 EiB");
    }

    #[test]
    fn the_alternate_form_adds_the_exact_count_where_the_figure_is_rounded() {
        assert_eq!(
            format!("{:#}", Bytes((2 << 30) - 256)),
            "2.00 GiB (2147483392 bytes)"
        );
        assert_eq!(format!("{:#}", Bytes(2 << 30)), "2.00 GiB");
        assert_eq!(format!("{:#}", Bytes(1536)), "1.50 KiB");
        assert_eq!(format!("{:#}", Bytes(1000)), "1000 B");
        assert_eq!(format!("{:#}", Bytes(1100)), "1.07 KiB (1100 bytes)");
    }
}
