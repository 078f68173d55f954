//! Transfer statistics: what a program moves, per direction, explicit and implicit apart.

use crate::config::TransferDirection;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    fn flatten(stats: &TransferStats) -> [u64; 12] {
        let mut out = [0; 12];
        let directions = [
            stats.host_to_device,
            stats.device_to_host,
            stats.device_to_device,
        ];
        for (d, s) in directions.iter().enumerate() {
            for (k, c) in [s.explicit, s.implicit].iter().enumerate() {
                out[d * 4 + k * 2] = c.count;
                out[d * 4 + k * 2 + 1] = c.bytes;
            }
        }
        out
    }

    #[test]
    fn readers_racing_writers_see_every_counter_only_grow_and_the_totals_exact() {
        const WRITERS: u64 = 2;
        const RECORDS: u64 = 50_000;
        let counters = Arc::new(TransferCounters::default());
        let writing = Arc::new(AtomicBool::new(true));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (counters, writing) = (Arc::clone(&counters), Arc::clone(&writing));
                std::thread::spawn(move || {
                    let mut last = [0u64; 12];
                    while writing.load(Ordering::Acquire) {
                        let now = flatten(&counters.snapshot());
                        for (field, (&was, &is)) in last.iter().zip(&now).enumerate() {
                            assert!(is >= was, "field {field} went from {was} to {is}");
                            assert!(is <= WRITERS * RECORDS * 8, "field {field} = {is}");
                        }
                        last = now;
                    }
                })
            })
            .collect();
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let counters = Arc::clone(&counters);
                std::thread::spawn(move || {
                    for i in 0..RECORDS {
                        let direction = TransferDirection::ALL[((i + w) % 3) as usize];
                        counters.record(direction, i % 2 == 0, 1, 8);
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.join().unwrap();
        }
        writing.store(false, Ordering::Release);
        for reader in readers {
            reader.join().unwrap();
        }
        let totals = flatten(&counters.snapshot());
        let count: u64 = totals.iter().step_by(2).sum();
        let bytes: u64 = totals.iter().skip(1).step_by(2).sum();
        assert_eq!(count, WRITERS * RECORDS);
        assert_eq!(bytes, 8 * WRITERS * RECORDS);
    }
}
