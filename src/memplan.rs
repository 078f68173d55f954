//! Vendor-aware memory-type policy: a pure function of a device's memory table.
