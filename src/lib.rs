#![doc = include_str!("../README.md")]
#![warn(missing_docs)]
#![deny(unsafe_code)]

pub mod arena;
mod array;
mod backend;
pub mod config;
mod context;
mod donated;
pub mod error;
pub mod kernels;
pub mod memplan;
pub mod profile;
pub mod remat;
mod submission;
pub mod transfer;
mod view;

pub use arena::{MemoryStats, ALLOCATION_ALIGNMENT};
pub use array::{DeviceArray, GpuUse, MAX_RANK};
pub use config::{AdapterSelector, AllocatorKind, ArenaConfig, BackendChoice, MemFraction};
pub use context::Context;
pub use donated::{Donated, DonatedResult};
pub use error::{Error, Result};
pub use kernels::{
    Kernel, KernelCacheStats, KernelDesc, KernelSignature, KernelSource, Launch, Sequence,
};
pub use memplan::{BarClass, MemoryPlan};
pub use profile::{
    label_scope, report, ContextMemoryStats, MemorySnapshot, MemoryTimeline, Timeline,
};
pub use submission::SubmissionId;
pub use transfer::{
    FinishedUpload, Operand, PendingArray, TransferDirection, TransferGuard, TransferGuardLevel,
    TransferGuardLevels, TransferStats, UploadBatch,
};
pub use view::{ArrayView, ArrayViewMut, KernelArg, KernelArgMut};
