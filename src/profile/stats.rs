//! The arena's XLA-keyed statistics together with the transfer figures, in one serialisable
//! value.
//!
//! [`Context::memory_stats`] keeps JAX's `Device.memory_stats()` keys (plus the arena's
//! `num_regions` and `fragmentation`), so code and dashboards written against JAX read it
//! unchanged. What XLA does not report (bytes waiting for the GPU before reuse, transfers)
//! lives here, with the stats' keys flattened in at the top level of the JSON: one object
//! serves both audiences.

use crate::arena::MemoryStats;
use crate::context::Context;
use crate::transfer::TransferStats;
use serde::{Deserialize, Serialize};

/// [`MemoryStats`] plus what the device layer adds: pending frees and transfers.
///
/// Serialises as one flat object with XLA's keys (`bytes_in_use`, `peak_bytes_in_use`, ...)
/// next to `pending_free_bytes` and `transfers`.
///
/// ```no_run
/// # let ctx = gpu_arena::Context::new(Default::default())?;
/// let stats = ctx.memory_stats_with_transfers();
/// println!("{} B in use, {} B uploaded", stats.arena.bytes_in_use,
///          stats.transfers.host_to_device.explicit.bytes);
/// println!("{}", serde_json::to_string_pretty(&stats).unwrap());
/// # Ok::<(), gpu_arena::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ContextMemoryStats {
    /// XLA's statistics, as [`Context::memory_stats`] returns them.
    #[serde(flatten)]
    pub arena: MemoryStats,
    /// Bytes freed by arrays that queued GPU work still uses: neither in use nor free yet.
    pub pending_free_bytes: u64,
    /// Transfers so far, as [`Context::transfer_stats`] returns them.
    pub transfers: TransferStats,
}

impl ContextMemoryStats {
    /// Bytes moved so far in all directions, explicit and implicit.
    pub fn transferred_bytes(&self) -> u64 {
        let t = &self.transfers;
        [t.host_to_device, t.device_to_host, t.device_to_device]
            .iter()
            .map(|d| d.explicit.bytes.saturating_add(d.implicit.bytes))
            .fold(0, u64::saturating_add)
    }
}

impl Context {
    /// [`Context::memory_stats`] with pending frees and transfer figures (see
    /// [`ContextMemoryStats`]). Both are read at one instant for the arena figures; transfer
    /// counters are read just after.
    pub fn memory_stats_with_transfers(&self) -> ContextMemoryStats {
        let (arena, pending_free_bytes) = {
            let memory = self.inner.lock_memory();
            (memory.arena().stats(), memory.arena().pending_free_bytes())
        };
        ContextMemoryStats {
            arena,
            pending_free_bytes,
            transfers: self.transfer_stats(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xla_keys_sit_at_the_top_level_of_the_json() {
        let stats = ContextMemoryStats {
            arena: MemoryStats {
                bytes_in_use: 512,
                ..MemoryStats::default()
            },
            pending_free_bytes: 256,
            ..ContextMemoryStats::default()
        };
        let json: serde_json::Value = serde_json::to_value(&stats).unwrap();
        assert_eq!(json["bytes_in_use"], 512);
        assert_eq!(json["pending_free_bytes"], 256);
        assert!(json["transfers"]["host_to_device"]["explicit"]["bytes"].is_u64());
        let back: ContextMemoryStats = serde_json::from_value(json).unwrap();
        assert_eq!(back, stats);
    }
}
