//! The arena: a best-fit-with-coalescing sub-allocator over byte ranges (pure CPU, no GPU types).
#![deny(unsafe_code)]
