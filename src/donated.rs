//! `Donated<T>`: the error of an operation that took an array by value (donated it), with the
//! array given back unchanged, as `std::sync::mpsc::SendError<T>` gives back its message.
//! Apart from `error.rs` because it holds an array: the crate's `Error` stays plain data.

use crate::array::DeviceArray;
use crate::error::Error;

/// An operation that was given an array by value failed; here is why, and the array, intact
/// (nothing was written to it).
///
/// `?` converts it into [`Error`] (dropping the array), so code that does not need the array
/// back reads as usual; code that does matches on it:
///
/// ```no_run
/// # let ctx = gpu_arena::Context::new(Default::default())?;
/// let cache = ctx.zeros::<f32>(&[16, 4])?;
/// let cache = match ctx.dynamic_update_slice(cache, &[1.0f32; 3][..], &[0, 0]) {
///     Ok(cache) => cache,
///     Err(donated) => {
///         eprintln!("update refused: {}", donated.error);
///         donated.array // the KV cache survives the mistake
///     }
/// };
/// # Ok::<(), gpu_arena::Error>(())
/// ```
pub struct Donated<T: bytemuck::Pod> {
    /// Why the operation failed.
    pub error: Error,
    /// The donated array, as it was before the call.
    pub array: DeviceArray<T>,
}

impl<T: bytemuck::Pod> Donated<T> {
    /// The error, dropping the array.
    pub fn into_error(self) -> Error {
        self.error
    }

    /// The array, dropping the error.
    pub fn into_array(self) -> DeviceArray<T> {
        self.array
    }
}

impl<T: bytemuck::Pod> From<Donated<T>> for Error {
    fn from(donated: Donated<T>) -> Self {
        donated.error
    }
}

impl<T: bytemuck::Pod> std::fmt::Debug for Donated<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Donated")
            .field("error", &self.error)
            .field("array", &self.array)
            .finish()
    }
}

impl<T: bytemuck::Pod> std::fmt::Display for Donated<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (the donated array was given back)", self.error)
    }
}

impl<T: bytemuck::Pod> std::error::Error for Donated<T> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// `Result` of an operation that takes an array by value.
pub type DonatedResult<T> = std::result::Result<DeviceArray<T>, Donated<T>>;

/// The array an operation took by value, given back with the operation's `outcome`: the array
/// itself when it succeeded, else [`Donated`] holding the error and the array.
pub(crate) fn give_back<T: bytemuck::Pod>(
    array: DeviceArray<T>,
    outcome: Result<(), Error>,
) -> DonatedResult<T> {
    match outcome {
        Ok(()) => Ok(array),
        Err(error) => Err(Donated { error, array }),
    }
}
