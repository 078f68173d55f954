//! The trait a caller implements to have a schedule run its layers.

use crate::array::DeviceArray;
use crate::context::Context;

/// The caller's computation for a [`Chain`](crate::remat::Chain): one layer forward, the
/// gradient of the loss, one layer backward. [`Schedule::run`](crate::remat::Schedule::run)
/// calls these in the schedule's order with the arrays the schedule names, and owns those
/// arrays: it allocates each output right before the call that writes it and frees it after
/// the last call that reads it. Parameters, their gradients, targets and the loss are the
/// implementation's own state (`&mut self`).
///
/// **Outputs are donated.** A method gets the array it must write **by value**, uninitialised
/// (as [`Context::alloc`] leaves it), and returns **that same array**: write it with your
/// kernel (`ctx.launch(&kernel).arg(input).arg_mut(&mut output)…run()?; Ok(output)`, see the
/// [module example](super)), or pass it on to a donating operation
/// ([`Context::fill_in_place`], [`Context::dynamic_update_slice`]) and return what that gives
/// back. Returning another array is an [`Error::InvalidArgument`](crate::error::Error) (the driver
/// must know which buffers are live to hold the schedule's peak); an error from the method
/// ends the run, and the driver frees everything it allocated.
///
/// **Determinism.** A layer whose activation the schedule did not keep is run forward again
/// during the backward pass ([`recompute`](ChainModel::recompute), which calls `forward`
/// unless overridden). With kernels that give the same bits for the same inputs, every
/// checkpointing policy then yields the same gradients; keep anything random (dropout masks)
/// a function of the layer, not of how often it ran.
///
/// All activations and gradients share one element type; [`activation_shape`] gives their
/// shapes (one dimension by default).
///
/// [`activation_shape`]: ChainModel::activation_shape
pub trait ChainModel {
    /// The element type of every activation and gradient.
    type Element: bytemuck::Pod;
    /// What the methods return on failure; the driver's own errors (out of memory, a shape
    /// that does not match the chain) arrive through `From<gpu_arena::Error>`. Use
    /// [`crate::error::Error`] itself, or `anyhow::Error` in an application.
    type Error: From<crate::error::Error>;

    /// The shape of activation `activation` (1 to n; the input's is its own), or `None`
    /// (the default) for one dimension of `bytes / size_of::<Element>()` elements. The
    /// gradient of an activation has its shape. Asked once per activation, before the run.
    /// The shape must hold exactly the chain's bytes for that activation.
    fn activation_shape(&self, activation: usize) -> Option<Vec<usize>> {
        let _ = activation;
        None
    }

    /// Runs layer `layer` (from 1) forward: reads `input` (activation `layer − 1`), writes
    /// `output` (activation `layer`) and returns it.
    fn forward(
        &mut self,
        ctx: &Context,
        layer: usize,
        input: &DeviceArray<Self::Element>,
        output: DeviceArray<Self::Element>,
    ) -> Result<DeviceArray<Self::Element>, Self::Error>;

    /// Runs layer `layer` forward again during the backward pass, for an activation the
    /// schedule did not keep. Defaults to [`forward`](ChainModel::forward); override it when
    /// the first run records something a second must not (statistics, a step counter).
    fn recompute(
        &mut self,
        ctx: &Context,
        layer: usize,
        input: &DeviceArray<Self::Element>,
        output: DeviceArray<Self::Element>,
    ) -> Result<DeviceArray<Self::Element>, Self::Error> {
        self.forward(ctx, layer, input, output)
    }

    /// Starts the backward pass: reads `output` (the last layer's activation), writes the
    /// gradient of the loss with respect to it into `gradient` and returns it. The loss
    /// itself, and the targets it compares with, are the implementation's.
    fn loss_gradient(
        &mut self,
        ctx: &Context,
        output: &DeviceArray<Self::Element>,
        gradient: DeviceArray<Self::Element>,
    ) -> Result<DeviceArray<Self::Element>, Self::Error>;

    /// Runs layer `layer` backward with `arrays`: reads the gradient of its output and the
    /// activations its [`BackwardReads`](crate::remat::BackwardReads) names, accumulates its
    /// parameters' gradients (the implementation's own arrays), and writes the gradient of
    /// its input into `arrays.input_gradient`, returning it: `Some` exactly when it was given
    /// (`None` for layer 1, whose input needs no gradient).
    fn backward(
        &mut self,
        ctx: &Context,
        layer: usize,
        arrays: BackwardArrays<'_, Self::Element>,
    ) -> Result<Option<DeviceArray<Self::Element>>, Self::Error>;
}

/// What a backward step of layer `i` gets. Which activations are there follows the layer's
/// [`BackwardReads`](crate::remat::BackwardReads), not the policy: an activation the layer
/// did not declare is `None` even when it happens to be live.
#[derive(Debug)]
pub struct BackwardArrays<'a, T: bytemuck::Pod> {
    /// Activation `i − 1` (the layer's input), when its backward reads it.
    pub input: Option<&'a DeviceArray<T>>,
    /// Activation `i` (the layer's output), when its backward reads it.
    pub output: Option<&'a DeviceArray<T>>,
    /// The gradient of the loss with respect to activation `i`.
    pub output_gradient: &'a DeviceArray<T>,
    /// Where the gradient with respect to activation `i − 1` goes (uninitialised, donated:
    /// return it); `None` for layer 1.
    pub input_gradient: Option<DeviceArray<T>>,
}
