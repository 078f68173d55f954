//! A chain of layers: what each activation weighs and what recomputing it costs.

use serde::Serialize;

use super::error::RematError;
use crate::arena::rounded_size;

/// What a layer's backward step reads besides the gradient of its output: its input, its
/// output, or both. It decides how long the activations must live, so it changes the plan and
/// its peak.
///
/// A linear layer needs its input (the weight gradient is `grad_out · inputᵀ`); ReLU, GELU
/// written in terms of its output, sigmoid, tanh and softmax need their output (ReLU's mask is
/// `output > 0`, softmax's Jacobian is built from the output); a fused `matmul + bias +
/// activation` layer needs both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub enum BackwardReads {
    /// Backward reads activation `i − 1` (the layer's input). The default, what
    /// [`Layer::new`] makes.
    #[default]
    Input,
    /// Backward reads activation `i` (the layer's output) and not its input.
    Output,
    /// Backward reads both.
    InputAndOutput,
}

impl BackwardReads {
    /// Whether the backward step reads the layer's input.
    pub fn input(self) -> bool {
        matches!(self, BackwardReads::Input | BackwardReads::InputAndOutput)
    }

    /// Whether the backward step reads the layer's output.
    pub fn output(self) -> bool {
        matches!(self, BackwardReads::Output | BackwardReads::InputAndOutput)
    }
}

/// One layer of a [`Chain`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Layer {
    /// Bytes of the layer's output activation, and so of the gradient that flows back into it.
    pub activation_bytes: u64,
    /// What running the layer forward once costs, in any unit (FLOPs, microseconds, 1 per
    /// layer): the planner minimises the sum over the layers it recomputes.
    pub forward_cost: f64,
    /// Which activations the layer's backward step reads (default
    /// [`BackwardReads::Input`]).
    pub backward_reads: BackwardReads,
}

impl Layer {
    /// A layer whose output has `activation_bytes` bytes and costs `forward_cost` to compute,
    /// and whose backward step reads its input (as a linear layer's does); see
    /// [`with_backward_reads`](Layer::with_backward_reads) for the others.
    pub fn new(activation_bytes: u64, forward_cost: f64) -> Layer {
        Layer {
            activation_bytes,
            forward_cost,
            backward_reads: BackwardReads::Input,
        }
    }

    /// The same layer with a backward step that reads `reads`.
    ///
    /// ```
    /// use gpu_arena::remat::{BackwardReads, Layer};
    ///
    /// let relu = Layer::new(4 << 20, 1.0).with_backward_reads(BackwardReads::Output);
    /// assert!(relu.backward_reads.output() && !relu.backward_reads.input());
    /// ```
    pub fn with_backward_reads(self, reads: BackwardReads) -> Layer {
        Layer {
            backward_reads: reads,
            ..self
        }
    }
}

/// A chain of layers, each reading the previous one's activation (see the
/// [module docs](super) for the model). Made by [`Chain::new`], which checks it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Chain {
    input_bytes: u64,
    layers: Vec<Layer>,
}

impl Chain {
    /// A chain whose input has `input_bytes` bytes, followed by `layers` in order.
    ///
    /// # Errors
    /// [`RematError::NoLayers`] for an empty chain, [`RematError::InvalidCost`] for a cost
    /// that is negative or not finite, or that makes the costs' sum overflow to infinity, and
    /// [`RematError::TooLarge`] when the activations and gradients together could not be
    /// counted in 64 bits.
    pub fn new(input_bytes: u64, layers: Vec<Layer>) -> Result<Chain, RematError> {
        if layers.is_empty() {
            return Err(RematError::NoLayers);
        }
        // Each cost finite is not enough: plans add costs up (a schedule's recompute cost, the
        // forward pass's), and a sum that overflows to infinity ranks every plan alike and
        // makes the recompute fraction NaN. The first layer whose cost breaks either rule is
        // named.
        let mut total = 0.0f64;
        for (index, layer) in layers.iter().enumerate() {
            total += layer.forward_cost;
            if !(layer.forward_cost.is_finite() && layer.forward_cost >= 0.0 && total.is_finite()) {
                return Err(RematError::InvalidCost {
                    layer: index + 1,
                    cost: layer.forward_cost,
                });
            }
        }
        // Every buffer at once, rounded, twice over (activations and gradients): if that
        // fits, no sum the schedule takes can overflow.
        let total = std::iter::once(input_bytes)
            .chain(layers.iter().map(|l| l.activation_bytes))
            .try_fold(0u64, |sum, bytes| {
                sum.checked_add(rounded_size(bytes)?.checked_mul(2)?)
            });
        if total.is_none() {
            return Err(RematError::TooLarge);
        }
        Ok(Chain {
            input_bytes,
            layers,
        })
    }

    /// Bytes of the chain's input (activation 0).
    pub fn input_bytes(&self) -> u64 {
        self.input_bytes
    }

    /// The layers, in order (layer `i` of the schedule is `layers()[i - 1]`).
    pub fn layers(&self) -> &[Layer] {
        &self.layers
    }

    /// How many layers the chain has (at least one).
    pub fn layer_count(&self) -> usize {
        self.layers.len()
    }

    /// Bytes of activation `i`: the input for 0, layer `i`'s output otherwise.
    pub(crate) fn activation_bytes(&self, i: usize) -> u64 {
        match i {
            0 => self.input_bytes,
            i => self.layers[i - 1].activation_bytes,
        }
    }

    /// Bytes of activation `i` as the arena takes them (rounded up to 256). `new` checked
    /// that every rounded size, and their sum, fits in a `u64`.
    pub(crate) fn rounded_activation_bytes(&self, i: usize) -> u64 {
        rounded(self.activation_bytes(i))
    }
}

/// `bytes` rounded as the arena rounds them, for sizes a [`Chain`] has accepted (so the
/// rounding cannot overflow).
pub(crate) fn rounded(bytes: u64) -> u64 {
    rounded_size(bytes).unwrap_or(u64::MAX)
}
