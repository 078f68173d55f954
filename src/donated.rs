//! `Donated<T>`: the error of an operation that took an array by value (donated it), with the
//! array given back unchanged, as `std::sync::mpsc::SendError<T>` gives back its message.
//! Apart from `error.rs` because it holds an array: the crate's `Error` stays plain data.

use crate::array::{check_bitcast, DeviceArray};
use crate::error::Error;
use crate::shape::check_shape;
use std::marker::PhantomData;

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

/// The error's message, then `(the donated array was given back)`.
impl<T: bytemuck::Pod> std::fmt::Display for Donated<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (the donated array was given back)", self.error)
    }
}

/// `source()` is the error's own source: the error is in the message, so a chain printer
/// states it once (the `error` field holds it).
impl<T: bytemuck::Pod> std::error::Error for Donated<T> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.error)
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

/// The calls that take an array by value and give it back in [`Donated`] when they refuse live
/// here, beside the type they return, so that the array's own file does not name it.
impl<T: bytemuck::Pod> DeviceArray<T> {
    /// The same memory under another shape with as many elements (no copy): `jnp.reshape`.
    /// The array is taken by value and given back in the error when the shapes disagree.
    ///
    /// ```no_run
    /// # let ctx = gpu_arena::Context::new(Default::default())?;
    /// let a = ctx.zeros::<f32>(&[6])?;
    /// let a = a.reshape(&[2, 3])?;
    /// assert_eq!(a.shape(), [2, 3]);
    /// # Ok::<(), gpu_arena::Error>(())
    /// ```
    pub fn reshape(self, shape: &[usize]) -> std::result::Result<Self, Donated<T>> {
        match check_shape(shape, Some(self.len()), std::mem::size_of::<T>(), "reshape") {
            Ok(_) => {
                self.describe_as::<T>(shape);
                Ok(Self {
                    shape: shape.to_vec(),
                    ..self
                })
            }
            Err(error) => Err(Donated { error, array: self }),
        }
    }

    /// The same memory seen as elements of type `U` of the same size (no copy, the same shape
    /// and tracking): deliberate reinterpretation, as `f32::from_bits` for every element. A
    /// launch refuses an array whose element kind differs from the kernel's (`u32` for
    /// `array<f32>`); bitcast it when reading its bits so is what you mean.
    ///
    /// ```no_run
    /// # let ctx = gpu_arena::Context::new(Default::default())?;
    /// let bits = ctx.device_put(&[1.0f32.to_bits(); 4], &[4])?;
    /// let floats = bits.bitcast::<f32>()?;
    /// assert_eq!(ctx.device_get(&floats)?, [1.0; 4]);
    /// # Ok::<(), gpu_arena::Error>(())
    /// ```
    ///
    /// Errors (the array given back intact in [`Donated`]): [`Error::Element`]
    /// ([`ElementRefusal::BitcastSize`](crate::error::ElementRefusal::BitcastSize)) when `U`
    /// and `T` differ in size.
    pub fn bitcast<U: bytemuck::Pod>(self) -> std::result::Result<DeviceArray<U>, Donated<T>> {
        match check_bitcast::<T, U>("DeviceArray::bitcast") {
            Ok(()) => {
                self.describe_as::<U>(&self.shape);
                Ok(DeviceArray {
                    storage: self.storage,
                    shape: self.shape,
                    _element: PhantomData,
                })
            }
            Err(error) => Err(Donated { error, array: self }),
        }
    }
}
