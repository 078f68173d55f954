//! Kernel tuning as values: [`KernelTuning`], whether the library's kernels are measured on the
//! device and the fastest [`KernelShape`] kept, and the shapes themselves. Below both the
//! configuration (whose knob it is) and the pipelines (which compile a kernel in each shape and
//! keep the setting of each context). The tuner is `ops/tuner.rs`; the choices it keeps, in
//! memory and on disk, are `pipelines/tuned_choices.rs`.

use serde::{Deserialize, Serialize};

/// Whether the library's own kernels (`dynamic_update_slice`, `dynamic_slice`, `copy`, `fill`
/// where they run on the GPU) are tuned to the device, as `GPU_ARENA_KERNEL_TUNING` (`on`,
/// `cached`, `off`, or a shape such as `128x8`). Every setting gives byte-identical results;
/// they differ in speed and in what a first op pays.
///
/// Tuning follows CubeCL's autotune and Triton's autotuner: the first single op that needs a
/// kernel for a size class ([`SizeClass`](crate::kernels::SizeClass)) times every
/// [`KernelShape::candidates`] on the device on scratch buffers of its own (round by round,
/// candidates interleaved, each shape's best round; the device's timestamps where it has them,
/// else the wall clock around each submission: [`TuningClock`](crate::kernels::TuningClock)), keeps the fastest, and
/// reuses it for every later op of that kernel and class, in every context of the process on
/// the same device and driver, and, with `GPU_ARENA_CACHE_DIR` set, in later processes (a file
/// beside the pipeline cache). Threads that need a kernel being tuned wait for that one job.
/// Tuning never runs for an op recorded in a [`Sequence`](crate::Sequence) or a
/// [`Capture`](crate::Capture): their kernels take the choice already made, or the fixed
/// shape; and [`Context::tune_kernels`](crate::Context::tune_kernels) on the thread that holds
/// a capture open is refused, as other eager work there. What it chose and what it cost: [`Context::kernel_tuning`](crate::Context::kernel_tuning).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KernelTuning {
    /// Tune at first use, and use choices made earlier in this process or kept on disk (the
    /// default).
    #[default]
    On,
    /// Use choices made earlier in this process or kept on disk; never measure (a kernel and
    /// size class with no choice yet runs in its fixed shape). For deployments that tune once
    /// and ship the file, or that must not spend time on a first op.
    Cached,
    /// Every kernel in its fixed shape ([`KernelShape::FIXED`]; [`KernelShape::FIXED_BYTES`]
    /// for unaligned byte boxes): the kernels as they were before tuning.
    Off,
    /// Every kernel in this shape (for benchmarks and for checking that every shape gives the
    /// same bytes).
    Forced(KernelShape),
}

impl std::fmt::Display for KernelTuning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::On => f.write_str("on"),
            Self::Cached => f.write_str("cached"),
            Self::Off => f.write_str("off"),
            Self::Forced(shape) => write!(f, "{shape}"),
        }
    }
}

/// How kernel tuning times its candidates on a device
/// ([`KernelTuningReport::clock`](crate::kernels::KernelTuningReport::clock)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TuningClock {
    /// The device's timestamps (wgpu's `TIMESTAMP_QUERY`), written before and after the timed
    /// work: GPU time alone, without the submission and the wait.
    Timestamps,
    /// The wall clock from submission to completion: on a context that times no kernels (its
    /// timeline off, the default, so it asked the device for no timestamps) or a device
    /// without timestamp queries.
    WallClock,
}

/// How one of the library's kernels spreads its work over the GPU: invocations per workgroup
/// and items (16-byte units, words, or destination words of a byte copy) each invocation
/// moves. Every shape writes exactly the same bytes; they differ only in speed, which depends
/// on the device (its SIMD width, its memory, a CPU's lanes). Kernel tuning
/// ([`KernelTuning`](crate::KernelTuning)) measures them and keeps the fastest per kernel and
/// size class; [`KernelTuning::Forced`](crate::KernelTuning::Forced) picks one by hand.
///
/// Written `256x4` (workgroup, then items per invocation) in `GPU_ARENA_KERNEL_TUNING` and in
/// reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct KernelShape {
    /// Invocations per workgroup: a power of two from 32 to 256
    /// ([`KernelShape::is_valid`]). Tuning measures [`KernelShape::WORKGROUPS`] and the
    /// device's subgroup size ([`KernelShape::candidates`]); a forced shape may take any valid
    /// one, on any device.
    pub workgroup: u32,
    /// Items each invocation moves, a workgroup apart: one of
    /// [`KernelShape::PER_INVOCATION`].
    pub per_invocation: u32,
}

impl KernelShape {
    /// The shape of the copy and fill kernels without tuning: 256 invocations (a multiple of
    /// every vendor's SIMD width, 32 on NVIDIA and 64 on AMD's wave64, and within WebGPU's
    /// default `max_compute_invocations_per_workgroup`), four 16-byte units each.
    pub const FIXED: KernelShape = KernelShape {
        workgroup: 256,
        per_invocation: 4,
    };

    /// The shape of the byte-box copy without tuning: one destination word per invocation.
    pub const FIXED_BYTES: KernelShape = KernelShape {
        workgroup: 256,
        per_invocation: 1,
    };

    /// Workgroup sizes every device is tuned over (WebGPU guarantees 256 invocations).
    pub const WORKGROUPS: [u32; 3] = [64, 128, 256];

    /// Items per invocation every device is tuned over.
    pub const PER_INVOCATION: [u32; 4] = [1, 2, 4, 8];

    /// The shapes tuning measures on a device whose subgroups are `subgroup_max` lanes wide
    /// (wgpu's `AdapterInfo::subgroup_max_size`; 0 when unknown): every pair of
    /// [`KernelShape::WORKGROUPS`] and [`KernelShape::PER_INVOCATION`], and workgroups of one
    /// subgroup when that is a power of two from 32 to 256 lanes and not already there.
    pub fn candidates(subgroup_max: u32) -> Vec<KernelShape> {
        let mut workgroups = Self::WORKGROUPS.to_vec();
        if (32..=256).contains(&subgroup_max)
            && subgroup_max.is_power_of_two()
            && !workgroups.contains(&subgroup_max)
        {
            workgroups.insert(0, subgroup_max);
        }
        workgroups
            .into_iter()
            .flat_map(|workgroup| {
                Self::PER_INVOCATION.map(|per_invocation| KernelShape {
                    workgroup,
                    per_invocation,
                })
            })
            .collect()
    }

    /// Items one workgroup takes.
    pub(crate) fn per_group(self) -> u64 {
        u64::from(self.workgroup).saturating_mul(u64::from(self.per_invocation))
    }

    /// Whether the shape is one a kernel may take: a workgroup that is a power of two from 32
    /// to 256 and one of [`KernelShape::PER_INVOCATION`].
    pub fn is_valid(self) -> bool {
        (32..=256).contains(&self.workgroup)
            && self.workgroup.is_power_of_two()
            && Self::PER_INVOCATION.contains(&self.per_invocation)
    }
}

impl std::fmt::Display for KernelShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}", self.workgroup, self.per_invocation)
    }
}

impl std::str::FromStr for KernelShape {
    type Err = String;

    /// `WORKGROUPxPER_INVOCATION`, e.g. `128x8`, as [`KernelShape`]'s `Display` writes it
    /// (blanks around it are ignored, and the `x` may be upper case, as `GPU_ARENA_KERNEL_TUNING`
    /// reads any case; no blank inside, no sign, no leading zero): a workgroup that is a power of two
    /// from 32 to 256 and one of [`KernelShape::PER_INVOCATION`]. The error says what was
    /// expected.
    fn from_str(text: &str) -> std::result::Result<Self, String> {
        let number = |part: &str| {
            // Digits as `Display` writes them: no sign, no leading zero.
            (!part.is_empty() && !part.starts_with('0') && part.bytes().all(|b| b.is_ascii_digit()))
                .then(|| part.parse::<u32>().ok())
                .flatten()
        };
        let shape = text
            .trim()
            .split_once(['x', 'X'])
            .and_then(|(workgroup, count)| {
                Some(KernelShape {
                    workgroup: number(workgroup)?,
                    per_invocation: number(count)?,
                })
            });
        shape.filter(|s| s.is_valid()).ok_or_else(shape_expected)
    }
}

/// What a kernel shape may be, in words (the error of a shape refused).
pub(crate) fn shape_expected() -> String {
    let [a, b, c, d] = KernelShape::PER_INVOCATION;
    format!(
        "a kernel shape WORKGROUPxPER_INVOCATION with a workgroup of 32, 64, 128 or 256 and \
         {a}, {b}, {c} or {d} items per invocation (e.g. 256x4)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_pair_every_workgroup_with_every_count_and_add_a_known_subgroup() {
        let base = KernelShape::candidates(0);
        assert_eq!(base.len(), 12);
        assert!(base.contains(&KernelShape::FIXED) && base.contains(&KernelShape::FIXED_BYTES));
        assert!(base.iter().all(|s| s.is_valid()));
        // NVIDIA's 32-wide warps add workgroups of one warp; a subgroup already there (64),
        // unknown (0), too narrow for a workgroup (a CPU's 8 lanes) or not a power of two adds
        // nothing.
        let nvidia = KernelShape::candidates(32);
        assert_eq!(nvidia.len(), 16);
        assert_eq!(
            nvidia[0],
            KernelShape {
                workgroup: 32,
                per_invocation: 1
            }
        );
        for subgroup in [64, 8, 48, 512] {
            assert_eq!(KernelShape::candidates(subgroup), base, "{subgroup}");
        }
    }

    #[test]
    fn shapes_read_back_as_they_are_written() {
        for shape in KernelShape::candidates(32) {
            assert_eq!(shape.to_string().parse::<KernelShape>(), Ok(shape));
        }
        assert_eq!(KernelShape::FIXED.to_string(), "256x4");
        assert_eq!(KernelShape::FIXED.per_group(), 1024);
        assert!(!KernelShape {
            workgroup: 1024,
            per_invocation: 1
        }
        .is_valid());
        // Blanks around it are ignored, as for every setting; any other spelling is refused,
        // with one clean sentence of what was expected.
        for spelling in [" 128x8\n", "128X8"] {
            assert_eq!(
                spelling.parse::<KernelShape>().map(|s| s.to_string()),
                Ok("128x8".into())
            );
        }
        for spelling in [
            "128 x 8", "+128x8", "128x+8", "0128x8", "128x08", "128x", "x8", "128x8x1", "0x0", "",
        ] {
            assert_eq!(
                spelling.parse::<KernelShape>(),
                Err(shape_expected()),
                "{spelling:?}"
            );
        }
        assert!(!shape_expected().contains("  "));
    }
}
