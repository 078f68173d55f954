#![doc = include_str!("../README.md")]
#![warn(missing_docs)]
#![deny(unsafe_code)]

pub mod arena;
mod array;
mod backend;
pub mod config;
mod context;
pub mod error;
pub mod kernels;
pub mod memplan;
pub mod profile;
pub mod remat;
mod submission;
pub mod transfer;

pub use arena::{MemoryStats, ALLOCATION_ALIGNMENT};
pub use array::{DeviceArray, GpuUse, MAX_RANK};
pub use backend::{HostSyncCounts, VulkanLimits};
pub use config::{
    AdapterSelector, AllocatorKind, ArenaConfig, BackendChoice, BarWrites, MemFraction,
};
pub use context::Context;
pub use error::{Error, Result};
pub use kernels::KernelCacheStats;
pub use memplan::{BarClass, MemoryPlan};
pub use profile::{
    label_scope, report, ContextMemoryStats, MemorySnapshot, MemoryTimeline, Timeline,
};
pub use submission::SubmissionId;
pub use transfer::{
    FinishedUpload, Operand, PendingArray, TransferDirection, TransferGuard, TransferGuardLevel,
    TransferGuardLevels, TransferStats, UploadBatch,
};
