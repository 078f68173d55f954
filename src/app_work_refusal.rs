//! Why an [`AppWork`](crate::AppWork) refused to hand out an array, as values a program can act
//! on: [`AppWorkRefusal`], the `refusal` of [`Error::AppWork`](crate::Error::AppWork). A file of
//! its own beside `error.rs`, which holds it, as `capture_refusal.rs` is for captures;
//! `app_work.rs` decides which one a use gets.

use crate::recorder::ArrayDescription;

/// What an [`AppWork`](crate::AppWork) use was given that a pass cannot take. Nothing was
/// recorded or marked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AppWorkRefusal {
    /// The array has no elements, and wgpu binds no empty range.
    #[error("{array} is empty, and wgpu binds no empty range: leave it out of the pass")]
    EmptyArray {
        /// The array (boxed: an error stays small to pass around).
        array: Box<ArrayDescription>,
    },
    /// An index buffer's elements are neither 2 nor 4 bytes (`u16` or `u32`).
    #[error("indices are 2 or 4 bytes (u16 or u32) but {element} is {bytes}: bitcast or convert the array")]
    IndexElementSize {
        /// The element type's name.
        element: &'static str,
        /// Its size in bytes.
        bytes: usize,
    },
    /// The array's binding (its bytes rounded up to a word) is above a device limit.
    #[error("{array} is {bytes} bytes, above this device's {limit_name} ({limit}): bind a slice of it (Context::dynamic_slice) or request a higher limit")]
    BindingTooLarge {
        /// The array (boxed: an error stays small to pass around).
        array: Box<ArrayDescription>,
        /// The binding's bytes.
        bytes: u64,
        /// The limit in bytes.
        limit: u64,
        /// The limit's name, `max_uniform_buffer_binding_size` or
        /// `max_storage_buffer_binding_size`.
        limit_name: &'static str,
    },
}
