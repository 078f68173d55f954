//! How an arena behaves: its mode and its byte budgets.

use serde::{Deserialize, Serialize};

/// The first growth region XLA's BFC allocator asks for (2 MiB); each later one doubles.
pub const DEFAULT_INITIAL_GROWTH_REGION_BYTES: u64 = 2 << 20;

/// The largest region asked of a source by default: 4 GiB, the `u32` offset range of a storage
/// binding and at or above the `max_buffer_size` of most desktop adapters. Backends should pass
/// their device's real limit.
pub const DEFAULT_MAX_REGION_BYTES: u64 = 1 << 32;

/// The most regions a reservation is split into (`reserve_bytes / max_region_bytes`, rounded
/// up): 2^16, past any split made on purpose (an H200's 106 GB in 2 MiB regions is 50 000) and
/// small enough that the arena's records of them stay a few MiB. A tiny `max_region_bytes` under
/// a large reserve would otherwise make [`Arena::reserve`](super::Arena::reserve) loop and
/// allocate host memory without bound; it is refused instead.
pub const MAX_RESERVED_REGIONS: u64 = 1 << 16;

/// The default cap on bytes held in regions: effectively unlimited, leaving the source (the
/// device) to say when memory runs out. Half of `u64::MAX` so sums of sizes cannot overflow.
pub const DEFAULT_LIMIT_BYTES: u64 = u64::MAX / 2;

/// Which allocator an [`Arena`](super::Arena) runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ArenaMode {
    /// XLA's best-fit-with-coalescing allocator over cached regions. Covers JAX's
    /// "preallocate", "grow on demand" and "preallocate then grow" set-ups through
    /// [`ArenaOptions::reserve_bytes`] and [`ArenaOptions::limit_bytes`].
    Bfc,
    /// No caching (JAX's `XLA_PYTHON_CLIENT_ALLOCATOR=platform`): every allocation gets its
    /// own region from the source, given back as soon as it is freed. Slow, but memory use is
    /// exact, which helps when hunting leaks.
    Platform,
}

/// The knobs of an [`Arena`](super::Arena).
///
/// The three BFC set-ups of JAX/XLA are all budgets:
///
/// | JAX setting                                    | `reserve_bytes` | `limit_bytes` |
/// |------------------------------------------------|-----------------|---------------|
/// | preallocate (default), fraction 0.75           | 0.75 × memory   | same          |
/// | `XLA_PYTHON_CLIENT_PREALLOCATE=false`          | 0               | 0.75 × memory |
/// | `XLA_CLIENT_MEM_FRACTION="0.75-0.85"`          | 0.75 × memory   | 0.85 × memory |
///
/// The device layer builds these from `GPU_ARENA_MEM_FRACTION` / `GPU_ARENA_PREALLOCATE`
/// (and their `XLA_PYTHON_CLIENT_*` aliases); the arena itself reads no environment.
///
/// Sizes are rounded to 256 bytes: `limit_bytes`, `reserve_bytes` and `max_region_bytes` down,
/// `initial_growth_region_bytes` up. A `reserve_bytes` above `limit_bytes` is cut to the limit.
///
/// ```
/// use gpu_arena::arena::ArenaOptions;
///
/// let preallocated = ArenaOptions::preallocated(8 << 30);
/// assert_eq!(preallocated.reserve_bytes, preallocated.limit_bytes);
/// let growing = ArenaOptions::growing(8 << 30);
/// assert_eq!(growing.reserve_bytes, 0);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArenaOptions {
    /// BFC (default) or platform.
    pub mode: ArenaMode,
    /// Bytes reserved up front by [`Arena::reserve`](super::Arena::reserve), split into regions
    /// of at most `max_region_bytes`. Never released before teardown. Default 0 (pure growth).
    /// Ignored in platform mode.
    pub reserve_bytes: u64,
    /// Cap on the bytes held in regions at any time (`bytes_limit` in the statistics).
    /// Default [`DEFAULT_LIMIT_BYTES`] (no cap but the device's).
    pub limit_bytes: u64,
    /// The largest region the source may be asked for (the device's maximum buffer size).
    /// No single allocation can be larger. Default [`DEFAULT_MAX_REGION_BYTES`]; it is rounded
    /// down to 256, and values from 256 GiB up (far beyond any device's largest buffer) count
    /// as 256 GiB − 256 bytes, the largest chunk the arena's bins index.
    pub max_region_bytes: u64,
    /// Size of the first region grown on demand; each later growth doubles it (XLA).
    /// Default [`DEFAULT_INITIAL_GROWTH_REGION_BYTES`].
    pub initial_growth_region_bytes: u64,
}

impl Default for ArenaOptions {
    fn default() -> ArenaOptions {
        ArenaOptions {
            mode: ArenaMode::Bfc,
            reserve_bytes: 0,
            limit_bytes: DEFAULT_LIMIT_BYTES,
            max_region_bytes: DEFAULT_MAX_REGION_BYTES,
            initial_growth_region_bytes: DEFAULT_INITIAL_GROWTH_REGION_BYTES,
        }
    }
}

impl ArenaOptions {
    /// BFC over `bytes` reserved up front; nothing grows (JAX's default).
    pub fn preallocated(bytes: u64) -> ArenaOptions {
        ArenaOptions {
            reserve_bytes: bytes,
            limit_bytes: bytes,
            ..ArenaOptions::default()
        }
    }

    /// BFC that starts empty and grows regions on demand up to `limit_bytes`
    /// (JAX's `XLA_PYTHON_CLIENT_PREALLOCATE=false`).
    pub fn growing(limit_bytes: u64) -> ArenaOptions {
        ArenaOptions {
            limit_bytes,
            ..ArenaOptions::default()
        }
    }

    /// No caching: one region per allocation, up to `limit_bytes` in total.
    pub fn platform(limit_bytes: u64) -> ArenaOptions {
        ArenaOptions {
            mode: ArenaMode::Platform,
            limit_bytes,
            ..ArenaOptions::default()
        }
    }

    /// True when everything the arena may hold is reserved up front (no growth).
    pub fn is_preallocated(&self) -> bool {
        self.mode == ArenaMode::Bfc
            && self.reserve_bytes > 0
            && self.reserve_bytes >= self.limit_bytes
    }
}
