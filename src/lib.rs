//! gpu-arena: JAX/XLA-style memory discipline for portable GPU compute on wgpu and Vulkan.
#![warn(missing_docs)]

pub mod arena;
pub mod error;
pub mod memplan;

pub use error::{Error, Result};
