//! Transfer statistics: what a program moves, per direction, explicit and implicit apart.

use super::TransferDirection;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};

/// Count and bytes of transfers of one kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransferCounter {
    /// Number of transfers (one per array).
    pub count: u64,
    /// Bytes moved.
    pub bytes: u64,
}

/// Transfers of one direction, explicit and implicit apart.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectionStats {
    /// `device_put`, `device_get`, batches, `copy`.
    pub explicit: TransferCounter,
    /// Host data where a device array was expected, `to_vec`, `Display`, comparisons.
    pub implicit: TransferCounter,
}

/// What [`crate::Context::transfer_stats`] returns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransferStats {
    /// Uploads.
    pub host_to_device: DirectionStats,
    /// Readbacks.
    pub device_to_host: DirectionStats,
    /// Device-to-device copies.
    pub device_to_device: DirectionStats,
}

/// Lock-free counters behind [`TransferStats`]: [direction][explicit?][count, bytes].
#[derive(Default)]
pub(crate) struct TransferCounters {
    cells: [[[AtomicU64; 2]; 2]; 3],
}

impl TransferCounters {
    pub(crate) fn record(
        &self,
        direction: TransferDirection,
        explicit: bool,
        count: u64,
        bytes: u64,
    ) {
        let cell = &self.cells[direction.index()][explicit as usize];
        cell[0].fetch_add(count, Ordering::Relaxed);
        cell[1].fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> TransferStats {
        let read = |d: TransferDirection| {
            let counter = |explicit: bool| {
                let cell = &self.cells[d.index()][explicit as usize];
                TransferCounter {
                    count: cell[0].load(Ordering::Relaxed),
                    bytes: cell[1].load(Ordering::Relaxed),
                }
            };
            DirectionStats {
                explicit: counter(true),
                implicit: counter(false),
            }
        };
        TransferStats {
            host_to_device: read(TransferDirection::HostToDevice),
            device_to_host: read(TransferDirection::DeviceToHost),
            device_to_device: read(TransferDirection::DeviceToDevice),
        }
    }
}
