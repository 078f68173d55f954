//! Kernel times: how long each kernel ran on the GPU, per kernel name (calls, total, mean,
//! max), as Nsight's and JAX's profilers list them. The numbers come from GPU timestamps the
//! context writes around each dispatch when its timeline is on and the device has
//! `TIMESTAMP_QUERY` (`context/kernel_timing.rs`); this file is only the table, so the report,
//! [`Context::kernel_times`](crate::Context::kernel_times) and
//! [`MemoryTimeline::kernel_times`](crate::profile::MemoryTimeline::kernel_times) print the same
//! thing.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;

/// GPU time of one kernel, over every timed dispatch of it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelTime {
    /// The kernel's name (a user kernel's label, else its entry point and a hash, as
    /// [`Kernel::name`](crate::Kernel::name) says; a library op's name).
    pub name: String,
    /// Timed dispatches.
    pub calls: u64,
    /// Their summed GPU durations, in nanoseconds.
    pub total_ns: u64,
    /// The longest one, in nanoseconds.
    pub max_ns: u64,
}

impl KernelTime {
    /// The mean GPU duration of one dispatch, in nanoseconds (0 without calls).
    pub fn mean_ns(&self) -> u64 {
        self.total_ns.checked_div(self.calls).unwrap_or(0)
    }
}

/// The per-kernel table: one [`KernelTime`] per kernel name, most total GPU time first.
/// `Display` prints it as a text table (durations in µs).
///
/// ```no_run
/// # fn main() -> gpu_arena::Result<()> {
/// let ctx = gpu_arena::Context::new(gpu_arena::ArenaConfig {
///     timeline_capacity: gpu_arena::profile::DEFAULT_TIMELINE_CAPACITY,
///     ..Default::default()
/// })?;
/// // ... launch kernels ...
/// if let Some(times) = ctx.kernel_times()? {
///     println!("{times}"); // kernel, calls, total, mean, max
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelTimes {
    /// One row per kernel, most total time first (ties by name).
    pub kernels: Vec<KernelTime>,
}

impl KernelTimes {
    /// The table of `(name, duration_ns)` samples.
    pub fn from_durations<'a>(samples: impl IntoIterator<Item = (&'a str, u64)>) -> KernelTimes {
        let mut by_name: HashMap<&str, KernelTime> = HashMap::new();
        for (name, duration) in samples {
            let row = by_name.entry(name).or_insert_with(|| KernelTime {
                name: name.to_string(),
                ..KernelTime::default()
            });
            row.add(duration);
        }
        KernelTimes::from_rows(by_name.into_values())
    }

    /// The table of `rows`, sorted.
    pub(crate) fn from_rows(rows: impl IntoIterator<Item = KernelTime>) -> KernelTimes {
        let mut kernels: Vec<KernelTime> = rows.into_iter().collect();
        kernels.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.name.cmp(&b.name)));
        KernelTimes { kernels }
    }

    /// The GPU time of every timed dispatch, in nanoseconds.
    pub fn total_ns(&self) -> u64 {
        self.kernels
            .iter()
            .fold(0u64, |sum, k| sum.saturating_add(k.total_ns))
    }

    /// Timed dispatches of every kernel.
    pub fn calls(&self) -> u64 {
        self.kernels
            .iter()
            .fold(0u64, |sum, k| sum.saturating_add(k.calls))
    }

    /// The row of the kernel named `name`.
    pub fn get(&self, name: &str) -> Option<&KernelTime> {
        self.kernels.iter().find(|k| k.name == name)
    }

    /// True when no dispatch was timed.
    pub fn is_empty(&self) -> bool {
        self.kernels.is_empty()
    }
}

impl KernelTime {
    pub(crate) fn add(&mut self, duration_ns: u64) {
        self.calls += 1;
        self.total_ns = self.total_ns.saturating_add(duration_ns);
        self.max_ns = self.max_ns.max(duration_ns);
    }
}

/// The widest the printed table's name column grows: a longer name is written whole, past the
/// column (a label may be any length; a width is at most 65,535 to Rust's formatter).
const MAX_NAME_COLUMN: usize = 80;

/// Nanoseconds per microsecond, for the printed table.
const NS_PER_US: f64 = 1000.0;

impl fmt::Display for KernelTimes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let width = self
            .kernels
            .iter()
            .map(|k| k.name.chars().count())
            .max()
            .unwrap_or(0)
            .clamp("kernel".len(), MAX_NAME_COLUMN);
        writeln!(
            f,
            "{:<width$}  {:>8}  {:>12}  {:>10}  {:>10}",
            "kernel", "calls", "total µs", "mean µs", "max µs"
        )?;
        for k in &self.kernels {
            writeln!(
                f,
                "{:<width$}  {:>8}  {:>12.1}  {:>10.1}  {:>10.1}",
                k.name,
                k.calls,
                k.total_ns as f64 / NS_PER_US,
                k.mean_ns() as f64 / NS_PER_US,
                k.max_ns as f64 / NS_PER_US
            )?;
        }
        write!(
            f,
            "{:<width$}  {:>8}  {:>12.1}",
            "(all)",
            self.calls(),
            self.total_ns() as f64 / NS_PER_US
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_sums_per_kernel_and_puts_the_most_time_first() {
        let times = KernelTimes::from_durations([("a", 10), ("b", 100), ("a", 30)]);
        assert_eq!(times.kernels[0].name, "b");
        let a = times.get("a").unwrap();
        assert_eq!(
            (a.calls, a.total_ns, a.mean_ns(), a.max_ns),
            (2, 40, 20, 30)
        );
        assert_eq!(times.total_ns(), 140);
        assert_eq!(times.calls(), 3);
        let text = times.to_string();
        assert!(text.lines().count() == 4, "{text}");
        assert!(text.contains("calls") && text.contains("(all)"), "{text}");
    }

    #[test]
    fn a_name_longer_than_any_format_width_is_printed_whole() {
        // Rust's formatter takes widths up to 65,535: a name column as wide as a longer label
        // panicked ("Formatting argument out of range").
        let long = "k".repeat(70_000);
        let times = KernelTimes::from_durations([(long.as_str(), 10), ("b", 5)]);
        let text = times.to_string();
        assert!(text.contains(&long), "the name is whole");
        let header = text.lines().next().unwrap();
        assert_eq!(
            header.find("calls"),
            Some(MAX_NAME_COLUMN + 2 + "   ".len())
        );
    }
}
