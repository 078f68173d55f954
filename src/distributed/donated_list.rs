//! `DonatedList<T>`: the error of a collective that took a list of arrays by value, with every
//! array given back, as [`crate::Donated`] gives back one.

use crate::array::DeviceArray;
use crate::error::Error;

/// A collective that was given a list of arrays by value failed; here is why, and every array,
/// in the order they were passed.
///
/// When the collective failed before any data moved (a refusal, a mismatch between ranks:
/// every rank gets one then), the arrays are intact. `?` converts it into [`Error`] (dropping
/// the arrays).
pub struct DonatedList<T: bytemuck::Pod> {
    /// Why the collective failed.
    pub error: Error,
    /// The donated arrays, in the order they were passed.
    pub arrays: Vec<DeviceArray<T>>,
}

impl<T: bytemuck::Pod> DonatedList<T> {
    /// The error, dropping the arrays.
    pub fn into_error(self) -> Error {
        self.error
    }

    /// The arrays, dropping the error.
    pub fn into_arrays(self) -> Vec<DeviceArray<T>> {
        self.arrays
    }
}

impl<T: bytemuck::Pod> From<DonatedList<T>> for Error {
    fn from(donated: DonatedList<T>) -> Self {
        donated.error
    }
}

impl<T: bytemuck::Pod> std::fmt::Debug for DonatedList<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DonatedList")
            .field("error", &self.error)
            .field("arrays", &self.arrays)
            .finish()
    }
}

/// The error's message, then `(the 2 donated arrays were given back)`.
impl<T: bytemuck::Pod> std::fmt::Display for DonatedList<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let arrays = crate::count::count(self.arrays.len(), "donated array");
        match self.arrays.len() {
            1 => write!(f, "{} (the {arrays} was given back)", self.error),
            _ => write!(f, "{} (the {arrays} were given back)", self.error),
        }
    }
}

/// `source()` is the error's own source: the error is in the message, so a chain printer
/// states it once (the `error` field holds it).
impl<T: bytemuck::Pod> std::error::Error for DonatedList<T> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.error)
    }
}

/// `Result` of a collective that takes a list of arrays by value.
pub type DonatedListResult<T> = std::result::Result<Vec<DeviceArray<T>>, DonatedList<T>>;
