//! `CollectiveElement`: the element types collectives carry, each with its MPI datatype.

use mpi::datatype::Equivalence;

mod sealed {
    pub trait Sealed {}
}

/// An element type that collectives can carry: f32, f64, i32, u32, i64 and u64.
///
/// Sealed: each type maps to one MPI datatype (through rsmpi's [`Equivalence`]) and one code
/// in the header that ranks compare before any data moves, so that a rank passing `f32`
/// while another passes `u32` (the same size) is caught rather than summed as bits.
pub trait CollectiveElement: bytemuck::Pod + Equivalence + Send + Sync + sealed::Sealed {
    /// The element type's code in collective headers (stable across builds and machines).
    #[doc(hidden)]
    const CODE: u64;
    /// The name messages use (`f32`, `u64`, ...).
    const NAME: &'static str;
}

/// An element type whose mean is defined: [`super::Collectives::all_reduce_mean`].
pub trait MeanElement: CollectiveElement {
    /// Divides `value` by `count` (the number of ranks).
    #[doc(hidden)]
    fn divide(value: Self, count: usize) -> Self;
}

macro_rules! element {
    ($t:ty, $code:expr) => {
        impl sealed::Sealed for $t {}
        impl CollectiveElement for $t {
            const CODE: u64 = $code;
            const NAME: &'static str = stringify!($t);
        }
    };
}

element!(f32, 1);
element!(f64, 2);
element!(i32, 3);
element!(u32, 4);
element!(i64, 5);
element!(u64, 6);

impl MeanElement for f32 {
    fn divide(value: Self, count: usize) -> Self {
        value / count as f32
    }
}

impl MeanElement for f64 {
    fn divide(value: Self, count: usize) -> Self {
        value / count as f64
    }
}

/// The name of the element type with header code `code`, for messages about another rank.
pub(crate) fn name_of(code: u64) -> String {
    match code {
        1 => "f32".into(),
        2 => "f64".into(),
        3 => "i32".into(),
        4 => "u32".into(),
        5 => "i64".into(),
        6 => "u64".into(),
        other => format!("an unknown element type (code {other})"),
    }
}
