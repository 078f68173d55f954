//! Views: part of an array, or the array under another shape, without a copy. A view borrows
//! its array (so the array outlives it and cannot be donated meanwhile) and binds directly as a
//! kernel argument: the work is recorded as a use of the array's memory.
//!
//! Also here: [`KernelArg`] / [`KernelArgMut`], what a launch accepts as an argument (an array
//! or a view). Apart from `array.rs` because a view is built on an array and borrows it; the
//! array knows nothing of its views.

use crate::array::{check_bitcast, shape_accessors, ArrayStorage, DeviceArray};
use crate::error::{Error, IndexRefusal, Result};
use crate::shape::check_shape;
use std::marker::PhantomData;
use std::sync::Arc;

/// A read-only view of an array: a leading-axis sub-array ([`DeviceArray::view`]) or the whole
/// array under another shape ([`DeviceArray::reshaped`]).
///
/// ```no_run
/// # let ctx = gpu_arena::Context::new(Default::default())?;
/// let cache = ctx.zeros::<f32>(&[4, 128, 64])?; // [layers, max_seq, dim]
/// let layer2 = cache.view(&[2])?;                 // [128, 64], no copy
/// let row = cache.view(&[2, 17])?;                // [64]
/// assert_eq!(row.shape(), [64]);
/// # Ok::<(), gpu_arena::Error>(())
/// ```
pub struct ArrayView<'a, T: bytemuck::Pod> {
    /// The viewed array's memory (the view borrows the array, see `_array`).
    storage: &'a Arc<ArrayStorage>,
    /// Bytes from the array's first byte.
    offset: u64,
    shape: Vec<usize>,
    /// True when the view covers the whole array (a launch may then round its binding up
    /// inside the array's allocation; a view is bound exactly).
    whole: bool,
    _array: PhantomData<&'a DeviceArray<T>>,
}

/// A writable view ([`DeviceArray::view_mut`]): passes to [`crate::Launch::arg_mut`].
pub struct ArrayViewMut<'a, T: bytemuck::Pod> {
    /// Reborrowed from the exclusive borrow of the array, which lasts as long as the view.
    storage: &'a Arc<ArrayStorage>,
    offset: u64,
    shape: Vec<usize>,
    whole: bool,
    _array: PhantomData<&'a mut DeviceArray<T>>,
}

impl<T: bytemuck::Pod> DeviceArray<T> {
    /// The sub-array at the leading indices `index`: `a.view(&[l, t])` of an array of shape
    /// `[L, S, D]` is the row `a[l, t, :]` of shape `[D]`; an empty `index` is the whole array.
    ///
    /// Errors: [`Error::Index`] for more indices than the rank
    /// ([`IndexRefusal::IndexCount`](crate::error::IndexRefusal::IndexCount)) or an index past
    /// its dimension ([`IndexRefusal::OutOfRange`](crate::error::IndexRefusal::OutOfRange)).
    pub fn view(&self, index: &[usize]) -> Result<ArrayView<'_, T>> {
        let (offset, shape) = sub_array::<T>(&self.shape, 0, index, "DeviceArray::view")?;
        Ok(ArrayView {
            storage: &self.storage,
            offset,
            shape,
            whole: index.is_empty(),
            _array: PhantomData,
        })
    }

    /// [`DeviceArray::view`], writable.
    pub fn view_mut(&mut self, index: &[usize]) -> Result<ArrayViewMut<'_, T>> {
        let (offset, shape) = sub_array::<T>(&self.shape, 0, index, "DeviceArray::view_mut")?;
        let array: &mut DeviceArray<T> = self;
        Ok(ArrayViewMut {
            storage: &array.storage,
            offset,
            shape,
            whole: index.is_empty(),
            _array: PhantomData,
        })
    }

    /// The whole array seen under another shape with as many elements (no copy; see
    /// [`DeviceArray::reshape`] to change the array's own shape).
    ///
    /// Errors: [`Error::Shape`] when the element counts differ or the rank is above 6.
    pub fn reshaped(&self, shape: &[usize]) -> Result<ArrayView<'_, T>> {
        check_shape(
            shape,
            Some(self.len()),
            std::mem::size_of::<T>(),
            "DeviceArray::reshaped",
        )?;
        Ok(ArrayView {
            storage: &self.storage,
            offset: 0,
            shape: shape.to_vec(),
            whole: true,
            _array: PhantomData,
        })
    }
}

macro_rules! view_accessors {
    ($view:ident, $(#[$bitcast_doc:meta])*) => {
        impl<'a, T: bytemuck::Pod> $view<'a, T> {
            shape_accessors!("view");

            /// The view's byte offset inside the array's buffer (the array's offset plus the
            /// view's). A kernel binds it directly when this is a multiple of the device's
            /// `min_storage_buffer_offset_alignment`.
            pub fn byte_offset(&self) -> u64 {
                self.storage.allocation.offset + self.offset
            }

            $(#[$bitcast_doc])*
            ///
            /// Errors: [`Error::Element`]
            /// ([`ElementRefusal::BitcastSize`](crate::error::ElementRefusal::BitcastSize)) when
            /// `U` and `T` differ in size.
            pub fn bitcast<U: bytemuck::Pod>(self) -> Result<$view<'a, U>> {
                check_bitcast::<T, U>(concat!(stringify!($view), "::bitcast"))?;
                Ok($view {
                    storage: self.storage,
                    offset: self.offset,
                    shape: self.shape,
                    whole: self.whole,
                    _array: PhantomData,
                })
            }

            /// The same elements under another shape with as many elements.
            pub fn reshape(self, shape: &[usize]) -> Result<$view<'a, T>> {
                let operation = concat!(stringify!($view), "::reshape");
                check_shape(shape, Some(self.len()), std::mem::size_of::<T>(), operation)?;
                Ok($view {
                    shape: shape.to_vec(),
                    ..self
                })
            }
        }
    };
}
view_accessors!(
    ArrayView,
    /// The same bytes seen as elements of type `U`, of the same size (no copy): deliberate
    /// reinterpretation, as `f32::to_bits` for every element, to bind a `u32` view to a kernel
    /// reading `array<f32>` on purpose (a launch refuses it otherwise). Shape and tracking
    /// stay those of the view.
);
view_accessors!(
    ArrayViewMut,
    /// [`ArrayView::bitcast`], writable: the kernel's writes land in the array's bytes.
);

impl<'a, T: bytemuck::Pod> ArrayView<'a, T> {
    /// A sub-view at further leading indices (see [`DeviceArray::view`]).
    pub fn view(&self, index: &[usize]) -> Result<ArrayView<'a, T>> {
        let (offset, shape) = sub_array::<T>(&self.shape, self.offset, index, "ArrayView::view")?;
        Ok(ArrayView {
            storage: self.storage,
            offset,
            shape,
            whole: self.whole && index.is_empty(),
            _array: PhantomData,
        })
    }

    /// The viewed array's memory and the view's byte offset from the array's first byte.
    pub(crate) fn parts(&self) -> (&'a Arc<ArrayStorage>, u64) {
        (self.storage, self.offset)
    }
}

/// The whole array as a view (what [`crate::Context::device_get_into`] reads from).
impl<'a, T: bytemuck::Pod> From<&'a DeviceArray<T>> for ArrayView<'a, T> {
    fn from(array: &'a DeviceArray<T>) -> Self {
        ArrayView {
            storage: &array.storage,
            offset: 0,
            shape: array.shape().to_vec(),
            whole: true,
            _array: PhantomData,
        }
    }
}

/// A copy of the view (views are cheap: a reference, an offset and a shape).
impl<'a, T: bytemuck::Pod> From<&ArrayView<'a, T>> for ArrayView<'a, T> {
    fn from(view: &ArrayView<'a, T>) -> Self {
        ArrayView {
            storage: view.storage,
            offset: view.offset,
            shape: view.shape.clone(),
            whole: view.whole,
            _array: PhantomData,
        }
    }
}

/// The byte offset (from the array's start) and shape of the sub-array at leading `index` of a
/// view of `shape` starting at `base` bytes.
fn sub_array<T>(
    shape: &[usize],
    base: u64,
    index: &[usize],
    operation: &'static str,
) -> Result<(u64, Vec<usize>)> {
    if index.len() > shape.len() {
        return Err(Error::Index {
            operation,
            refusal: IndexRefusal::IndexCount {
                given: index.len(),
                shape: shape.to_vec(),
            },
        });
    }
    if let Some(d) = (0..index.len()).find(|&d| index[d] >= shape[d]) {
        return Err(Error::Index {
            operation,
            refusal: IndexRefusal::OutOfRange {
                dimension: d,
                index: index[d],
                size: shape[d],
                shape: shape.to_vec(),
            },
        });
    }
    // The shape's element count fits in usize (the array exists), so these products do too.
    let rest = &shape[index.len()..];
    let row: u64 = rest.iter().map(|&d| d as u64).product();
    let mut element = 0u64;
    let mut stride = row;
    for d in (0..index.len()).rev() {
        element += index[d] as u64 * stride;
        stride *= shape[d] as u64;
    }
    Ok((
        base + element * std::mem::size_of::<T>() as u64,
        rest.to_vec(),
    ))
}

/// An array or view as a kernel argument.
#[doc(hidden)]
pub struct ArgRef<'a> {
    pub(crate) storage: &'a Arc<ArrayStorage>,
    /// Bytes from the allocation's start.
    pub(crate) offset: u64,
    pub(crate) bytes: u64,
    pub(crate) element_size: usize,
    pub(crate) element_type: &'static str,
    /// The whole array rather than a part of it (see [`crate::Launch`]'s binding rules).
    pub(crate) whole: bool,
}

mod sealed {
    pub trait Sealed {}
}

/// What [`crate::Launch::arg`] takes: a [`DeviceArray`], an [`ArrayView`] or an
/// [`ArrayViewMut`] (read by the kernel).
pub trait KernelArg: sealed::Sealed {
    #[doc(hidden)]
    fn arg_ref(&self) -> ArgRef<'_>;
}

/// What [`crate::Launch::arg_mut`] takes: a [`DeviceArray`] or an [`ArrayViewMut`] (written by
/// the kernel).
pub trait KernelArgMut: KernelArg {}

impl<T: bytemuck::Pod> sealed::Sealed for DeviceArray<T> {}
impl<T: bytemuck::Pod> KernelArg for DeviceArray<T> {
    fn arg_ref(&self) -> ArgRef<'_> {
        ArgRef {
            storage: &self.storage,
            offset: 0,
            bytes: self.size_in_bytes(),
            element_size: std::mem::size_of::<T>(),
            element_type: std::any::type_name::<T>(),
            whole: true,
        }
    }
}
impl<T: bytemuck::Pod> KernelArgMut for DeviceArray<T> {}

macro_rules! view_arg {
    ($view:ident) => {
        impl<T: bytemuck::Pod> sealed::Sealed for $view<'_, T> {}
        impl<T: bytemuck::Pod> KernelArg for $view<'_, T> {
            fn arg_ref(&self) -> ArgRef<'_> {
                ArgRef {
                    storage: self.storage,
                    offset: self.offset,
                    bytes: self.size_in_bytes(),
                    element_size: std::mem::size_of::<T>(),
                    element_type: std::any::type_name::<T>(),
                    whole: self.whole,
                }
            }
        }
    };
}
view_arg!(ArrayView);
view_arg!(ArrayViewMut);
impl<T: bytemuck::Pod> KernelArgMut for ArrayViewMut<'_, T> {}
