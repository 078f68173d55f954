//! Kernel tuning, as a knob: [`KernelTuning`], whether the library's kernels are measured on
//! the device and the fastest [`KernelShape`] kept. The tuner itself is `ops/tuner.rs`; the
//! choices it keeps, in memory and on disk, are `pipelines/tuned_choices.rs`.

use crate::kernel_shape::KernelShape;
use serde::{Deserialize, Serialize};

/// Whether the library's own kernels (`dynamic_update_slice`, `dynamic_slice`, `copy`, `fill`
/// where they run on the GPU) are tuned to the device, as `GPU_ARENA_KERNEL_TUNING` (`on`,
/// `cached`, `off`, or a shape such as `128x8`). Every setting gives byte-identical results;
/// they differ in speed and in what a first op pays.
///
/// Tuning follows CubeCL's autotune and Triton's autotuner: the first single op that needs a
/// kernel for a size class ([`SizeClass`](crate::SizeClass)) times every
/// [`KernelShape::candidates`] on the device on scratch buffers of its own (round by round,
/// candidates interleaved, medians; wall clock around each submission), keeps the fastest, and
/// reuses it for every later op of that kernel and class, in every context of the process on
/// the same device and driver, and, with `GPU_ARENA_CACHE_DIR` set, in later processes (a file
/// beside the pipeline cache). Threads that need a kernel being tuned wait for that one job.
/// Tuning never runs while a [`Sequence`](crate::Sequence) or a
/// [`Capture`](crate::Capture) is recorded: their kernels take the choice already made, or the
/// fixed shape. What it chose and what it cost: [`Context::kernel_tuning`](crate::Context::kernel_tuning).
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
