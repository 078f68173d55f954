//! `ReduceOp`: how `all_reduce` and `reduce_scatter` combine the ranks' values.

use mpi::collective::SystemOperation;

/// The reduction a collective applies element by element across ranks (MPI's built-in
/// operations, exact for integers; floating-point sums follow MPI's order, which is the same
/// on every rank, so every rank gets bitwise the same result).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// `MPI_SUM` (`jax.lax.psum`).
    Sum,
    /// `MPI_MIN` (`jax.lax.pmin`).
    Min,
    /// `MPI_MAX` (`jax.lax.pmax`).
    Max,
    /// `MPI_PROD`.
    Product,
}

impl ReduceOp {
    /// All four, in header-code order.
    pub const ALL: [ReduceOp; 4] = [
        ReduceOp::Sum,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::Product,
    ];

    pub(crate) fn system(self) -> SystemOperation {
        match self {
            ReduceOp::Sum => SystemOperation::sum(),
            ReduceOp::Min => SystemOperation::min(),
            ReduceOp::Max => SystemOperation::max(),
            ReduceOp::Product => SystemOperation::product(),
        }
    }

    /// The operation's code in collective headers (1 to 4).
    pub(crate) fn code(self) -> u64 {
        match self {
            ReduceOp::Sum => 1,
            ReduceOp::Min => 2,
            ReduceOp::Max => 3,
            ReduceOp::Product => 4,
        }
    }

    /// The name messages use.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::Product => "product",
        }
    }
}
