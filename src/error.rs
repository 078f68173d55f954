//! The crate's error type.

/// Everything that can go wrong in gpu-arena.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Placeholder while the crate is assembled.
    #[error("{0}")]
    Other(String),
}

/// `Result` with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
