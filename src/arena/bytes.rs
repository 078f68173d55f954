//! Byte counts as people read them (`256 B`, `1.50 KiB`): the one formatting that out-of-memory
//! messages, region refusals and the memory report share, in a file of its own so each of them
//! names it here rather than through the others.

use std::fmt;

/// A byte count for people: `256 B`, `1.50 KiB`, `3.00 GiB` (binary units, as `nvidia-smi`
/// and XLA's OOM messages print them). Used by OOM messages and the memory report alike.
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
        write!(f, "{value:.2} {}", UNITS[unit])
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
}
