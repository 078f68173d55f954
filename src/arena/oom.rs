//! Out of memory as a value that explains itself: what was asked, what the arena holds, why it
//! could not serve the request, and what to change.

use std::fmt;

use super::allocation::ALLOCATION_ALIGNMENT;
use super::bytes::Bytes;
use super::options::{ArenaMode, DEFAULT_LIMIT_BYTES};
use super::region::RegionRefusal;
use crate::memory_kind::MemoryKind;

/// The knob that sets the arena's share of device memory (read by the device layer).
const MEM_FRACTION_ENV: &str = "GPU_ARENA_MEM_FRACTION";
/// JAX's name for the same knob, accepted as an alias by the device layer.
const JAX_MEM_FRACTION_ENV: &str = "XLA_PYTHON_CLIENT_MEM_FRACTION";
/// The knob that sets the limit of the pinned-host kind's arena, in MiB (device layer).
const PINNED_HOST_ENV: &str = "GPU_ARENA_PINNED_HOST_MB";
/// The knob that turns preallocation on or off (read by the device layer).
const PREALLOCATE_ENV: &str = "GPU_ARENA_PREALLOCATE";
/// The knob that caps one region below the device's own limits, in MiB (device layer).
const MAX_REGION_ENV: &str = "GPU_ARENA_MAX_REGION_MB";
/// The knob that gives the device's memory size where the backend does not report it, in MiB.
const DEVICE_MEMORY_ENV: &str = "GPU_ARENA_DEVICE_MEMORY_MB";

/// Why an allocation could not be served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OomCause {
    /// Enough memory is free in total, but no single free block is large enough, and the
    /// arena may not grow.
    Fragmentation,
    /// The arena holds as much as `limit_bytes` allows and too little of it is free.
    LimitReached,
    /// The request is larger than the largest region the source may be asked for.
    LargerThanAnyRegion,
    /// The source (the device) refused to create a region; its typed refusal (out of memory,
    /// too large for the device, or another failure in the backend's words).
    SourceExhausted(RegionRefusal),
}

/// Everything known about a failed allocation. Its `Display` tells the whole story; `remedy()`
/// says what to change.
#[derive(Clone, Debug, PartialEq)]
pub struct OutOfMemory {
    /// Bytes asked for.
    pub requested: u64,
    /// Bytes after rounding to 256 (`u64::MAX` if rounding overflowed).
    pub rounded: u64,
    /// Bytes of live allocations.
    pub bytes_in_use: u64,
    /// Bytes held in regions.
    pub bytes_reserved: u64,
    /// The cap on bytes held in regions.
    pub bytes_limit: u64,
    /// Bytes reserved up front (equal to `bytes_limit` for a preallocated arena).
    pub reserve_bytes: u64,
    /// The largest free chunk.
    pub largest_free_block: u64,
    /// All free bytes (not counting pending frees).
    pub total_free: u64,
    /// Bytes freed by the caller but still waiting for queued GPU work.
    pub pending_free_bytes: u64,
    /// `1 − largest_free_block / total_free`.
    pub fragmentation: f64,
    /// The largest region the source may be asked for.
    pub max_region_bytes: u64,
    /// Why the request failed.
    pub cause: OomCause,
    /// BFC or platform.
    pub mode: ArenaMode,
    /// The label of the failed request, if it had one.
    pub label: Option<String>,
    /// The memory kind whose arena refused (the arena itself says `Device`; the context sets
    /// the kind of the arena it asked): the remedy names that kind's knob.
    pub memory_kind: MemoryKind,
    /// For device memory, the bytes the pinned-host kind could still take below its limit: its
    /// limit minus its bytes in use (`u64::MAX` minus them without a limit), whether or not it
    /// would have to grow for them (set by the context; `None` for a bare arena or a device without
    /// that kind): when it holds the request, the remedy suggests moving arrays that wait between
    /// uses there.
    pub pinned_host_room: Option<u64>,
    /// For device memory on a backend that does not report the device's memory size (wgpu's
    /// GL, Metal and DX12 backends), the size the context assumed instead
    /// ([`ArenaConfig::fallback_device_memory_bytes`](crate::ArenaConfig::fallback_device_memory_bytes);
    /// `None` on Vulkan and for a bare arena): the arena's limit is a share of it, so the remedy
    /// says to set the device's real size.
    pub assumed_device_memory: Option<u64>,
    /// For device memory, the largest limit a memory fraction gives this device's arena (its
    /// limit at a fraction of 1; set by the context, `None` for a bare arena): where the limit
    /// is already that, or the request is larger than it, the remedy does not advise raising
    /// the fraction.
    pub max_limit_bytes: Option<u64>,
}

impl OutOfMemory {
    /// True when everything the arena may hold was reserved up front.
    fn preallocated(&self) -> bool {
        self.mode == ArenaMode::Bfc
            && self.reserve_bytes > 0
            && self.reserve_bytes >= self.bytes_limit
    }

    /// What the user can change so the request succeeds.
    pub fn remedy(&self) -> String {
        let pinned_host = self.memory_kind == MemoryKind::PinnedHost;
        // No memory fraction helps: the limit is already the largest, or even that is
        // smaller than the request.
        let at_most = self
            .max_limit_bytes
            .is_some_and(|max| self.bytes_limit >= max || self.rounded > max);
        let mut remedy = match &self.cause {
            OomCause::Fragmentation | OomCause::LimitReached if pinned_host => format!(
                "raise the pinned-host limit {PINNED_HOST_ENV} (ArenaConfig::pinned_host_bytes) \
                 above the current {}, or free pinned-host arrays that are no longer needed",
                Bytes(self.bytes_limit)
            ),
            OomCause::SourceExhausted(RegionRefusal::OutOfMemory { .. }) if pinned_host => format!(
                "the system has no pinned memory left for a new region: free host memory, or \
                 lower the pinned-host limit {PINNED_HOST_ENV} so the kind stops short of it"
            ),
            OomCause::LargerThanAnyRegion => format!(
                "split the data into pieces of at most {:#}: that is the largest region (buffer) \
                 the arena may ask for (the device's own limit, or {MAX_REGION_ENV} / \
                 ArenaConfig::max_region_bytes where that is set lower: raise or unset it to \
                 lift the cap up to the device's)",
                Bytes(self.max_region_bytes)
            ),
            OomCause::Fragmentation | OomCause::LimitReached if at_most && !pinned_host => {
                self.remedy_at_the_full_fraction()
            }
            OomCause::Fragmentation => format!(
                "raise the memory fraction {MEM_FRACTION_ENV} (JAX: {JAX_MEM_FRACTION_ENV}; \
                 ArenaOptions::limit_bytes for an arena of your own) so the arena has room \
                 for a new region, or allocate long-lived arrays before \
                 short-lived ones and free temporaries promptly so they do not leave holes{}",
                if self.preallocated() {
                    format!(
                        "; a preallocated arena never grows: with {PREALLOCATE_ENV}=false and a \
                         higher fraction it can (ArenaOptions::growing for an arena of your own)"
                    )
                } else {
                    String::new()
                }
            ),
            OomCause::LimitReached => format!(
                "raise the memory fraction {MEM_FRACTION_ENV} (JAX: {JAX_MEM_FRACTION_ENV}; \
                 ArenaOptions::limit_bytes for an arena of your own) above the current limit \
                 of {:#}, or free arrays that are no longer needed",
                Bytes(self.bytes_limit)
            ),
            OomCause::SourceExhausted(RegionRefusal::TooLarge {
                limit, limit_name, ..
            }) => format!(
                "split the data into pieces of at most {:#}: that is the device's {limit_name}, \
                 the most it gives in one piece, and no memory setting raises it",
                Bytes(*limit)
            ),
            OomCause::SourceExhausted(_) if self.reserve_bytes > 0 => format!(
                "the device itself has no memory left for a new region: other arenas or \
                 processes hold it. Turn preallocation off with {PREALLOCATE_ENV}=false (in the \
                 other processes too) so each takes only what it uses, or lower \
                 {MEM_FRACTION_ENV} so the arenas fit side by side"
            ),
            // This arena reserved nothing up front: it holds only regions it grew for arrays.
            OomCause::SourceExhausted(_) => format!(
                "the device itself has no memory left for a new region: other arenas or \
                 processes hold it. Free arrays that are no longer needed, or lower \
                 {MEM_FRACTION_ENV} in the other processes (or turn their preallocation off \
                 with {PREALLOCATE_ENV}=false) so that the arenas fit side by side"
            ),
        };
        let beyond_any_region = matches!(
            self.cause,
            OomCause::LargerThanAnyRegion
                | OomCause::SourceExhausted(RegionRefusal::TooLarge { .. })
        );
        let said =
            at_most && matches!(self.cause, OomCause::Fragmentation | OomCause::LimitReached);
        if let Some(assumed) = self
            .assumed_device_memory
            .filter(|_| !beyond_any_region && !said)
        {
            remedy.push_str(&format!(
                "; this backend does not report the device's memory size, so the arena's limit \
                 is a share of an assumed {}: set {DEVICE_MEMORY_ENV} \
                 (ArenaConfig::fallback_device_memory_bytes) to the device's real size",
                Bytes(assumed)
            ));
        }
        let room = self.pinned_host_room.filter(|&room| room >= self.rounded);
        if let Some(room) = room.filter(|_| !beyond_any_region && !self.beyond_any_limit()) {
            remedy.push_str(&format!(
                "; or keep arrays that wait between uses (optimizer state, saved activations) in \
                 pinned host memory, which has {} free: Context::offload moves one there and \
                 Context::prefetch brings it back",
                Bytes(room)
            ));
        }
        if self.pending_free_bytes > 0 && !self.beyond_any_limit() {
            remedy.push_str(&format!(
                "; {} is freed but still used by queued GPU work, so waiting for the queue \
                 before allocating returns it",
                Bytes(self.pending_free_bytes)
            ));
        }
        remedy
    }

    /// Whether the request is larger than the limit a memory fraction of 1 gives
    /// ([`OutOfMemory::max_limit_bytes`]): no fraction, and no array freed, makes room for it.
    fn beyond_any_limit(&self) -> bool {
        self.max_limit_bytes.is_some_and(|max| self.rounded > max)
    }

    /// The remedy of a device arena where no memory fraction helps: its limit is already what
    /// a fraction of 1 gives ([`OutOfMemory::max_limit_bytes`]), or the request is larger
    /// than that.
    fn remedy_at_the_full_fraction(&self) -> String {
        if self.beyond_any_limit() {
            let max = Bytes(self.max_limit_bytes.unwrap_or(self.bytes_limit));
            return match self.assumed_device_memory {
                Some(assumed) => format!(
                    "set {DEVICE_MEMORY_ENV} (ArenaConfig::fallback_device_memory_bytes) to the \
                     device's real memory size: this backend does not report it, and the most \
                     any memory fraction gives of the {} assumed is {max:#}, less than the \
                     request; or split the data into smaller arrays",
                    Bytes(assumed)
                ),
                None => format!(
                    "split the data into smaller arrays: the request is larger than the {max:#} \
                     that the arena may hold on this device at any memory fraction"
                ),
            };
        }
        let holes = match self.cause {
            OomCause::Fragmentation => {
                ", and allocate long-lived arrays before short-lived ones so that temporaries \
                 leave no holes"
            }
            _ => "",
        };
        match self.assumed_device_memory {
            Some(assumed) => format!(
                "set {DEVICE_MEMORY_ENV} (ArenaConfig::fallback_device_memory_bytes) to the \
                 device's real memory size: this backend does not report it, and the limit of \
                 {} is the most any memory fraction gives of the {} assumed; or free arrays \
                 that are no longer needed{holes}",
                Bytes(self.bytes_limit),
                Bytes(assumed)
            ),
            None => format!(
                "free arrays that are no longer needed{holes}: the limit of {} is already the \
                 most any memory fraction gives on this device",
                Bytes(self.bytes_limit)
            ),
        }
    }

    /// One sentence on why the request failed.
    fn explanation(&self) -> String {
        match &self.cause {
            OomCause::Fragmentation => format!(
                "memory is fragmented: {} is free in total, enough for the request, but the \
                 largest free block is only {}, and the arena may not grow{}",
                Bytes(self.total_free),
                Bytes(self.largest_free_block),
                if self.preallocated() {
                    " (it is preallocated)"
                } else {
                    " beyond its limit"
                }
            ),
            OomCause::LimitReached => format!(
                "the arena's limit is reached: the request needs {:#} but only {} is free, and \
                 with {} of the {:#} limit held there is no room for a new region",
                Bytes(self.rounded),
                Bytes(self.total_free),
                Bytes(self.bytes_reserved),
                Bytes(self.bytes_limit)
            ),
            OomCause::LargerThanAnyRegion => format!(
                "the request is larger than any region can be (the largest region is {:#})",
                Bytes(self.max_region_bytes)
            ),
            OomCause::SourceExhausted(refusal) => {
                format!("the device refused to create a new region: {refusal}")
            }
        }
    }
}

impl fmt::Display for OutOfMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "out of memory: cannot allocate {}", Bytes(self.rounded))?;
        if self.memory_kind != MemoryKind::Device {
            write!(f, " of {} memory", self.memory_kind)?;
        }
        if let Some(label) = &self.label {
            write!(f, " for \"{label}\"")?;
        }
        let requested = crate::count::count(self.requested, "byte");
        match self
            .requested
            .checked_next_multiple_of(ALLOCATION_ALIGNMENT)
        {
            Some(_) => writeln!(
                f,
                " ({requested} requested, {} after rounding to {ALLOCATION_ALIGNMENT} bytes).",
                self.rounded
            )?,
            None => writeln!(
                f,
                " ({requested} requested, more than any size rounds to {ALLOCATION_ALIGNMENT} \
                 bytes in 64 bits)."
            )?,
        }
        writeln!(f, "  cause: {}.", self.explanation())?;
        let limit = if self.bytes_limit >= DEFAULT_LIMIT_BYTES {
            "no limit".to_string()
        } else {
            format!("a limit of {:#}", Bytes(self.bytes_limit))
        };
        writeln!(
            f,
            "  arena ({}): {} in use, {} reserved of {limit}, {} free with the largest free \
             block {} (fragmentation {}), {} pending free until queued GPU work completes, \
             largest region {:#}.",
            match self.mode {
                ArenaMode::Bfc if self.preallocated() => "BFC, preallocated",
                ArenaMode::Bfc => "BFC",
                ArenaMode::Platform => "platform",
            },
            Bytes(self.bytes_in_use),
            Bytes(self.bytes_reserved),
            Bytes(self.total_free),
            Bytes(self.largest_free_block),
            Share(self.fragmentation),
            Bytes(self.pending_free_bytes),
            Bytes(self.max_region_bytes),
        )?;
        write!(f, "  remedy: {}.", self.remedy())
    }
}

/// A share in `[0, 1]` to two decimals, or to as many as it takes not to read as 0 or 1 when
/// it is neither (a fragmentation of 0.9995 is not total).
struct Share(f64);

impl std::fmt::Display for Share {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Share(share) = *self;
        for decimals in 2..=6 {
            let text = format!("{share:.decimals$}");
            let rounded: f64 = text.parse().unwrap_or(share);
            if (rounded == 0.0) == (share == 0.0) && (rounded == 1.0) == (share == 1.0) {
                return f.write_str(&text);
            }
        }
        write!(f, "{share}")
    }
}
