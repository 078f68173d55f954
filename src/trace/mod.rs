//! What a context records as it runs, for the profile to read: the memory timeline
//! (`timeline.rs`: allocations, frees, region changes, transfers, dispatches and kernel times in
//! a bounded ring, `event_ring.rs`), each array's element type, shape and call site
//! (`array_info.rs`), label scopes (`labels.rs`) and the per-kernel table (`kernel_times.rs`).
//!
//! Below the context, which writes into it, and naming nothing above: the profile's snapshots,
//! reports, exports and dumps (`crate::profile`, where the public types are re-exported) read it
//! from above.
#![deny(unsafe_code)]

pub(crate) mod array_info;
mod event_ring;
pub(crate) mod kernel_times;
pub(crate) mod labels;
pub(crate) mod timeline;
