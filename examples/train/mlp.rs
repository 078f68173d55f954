//! The network: `linear_layers` fully connected layers with ReLU between them, as a
//! checkpointing chain of `2 · linear_layers − 1` layers (linear, ReLU, linear, …, linear),
//! run with the WGSL kernels in `shaders/` through `ctx.launch` and sequences.
//!
//! A linear layer's backward reads its input (`dW = dzᵀ · x`) and a ReLU's reads its output
//! (the mask `y > 0`), so the planner frees each linear layer's output as soon as the ReLU
//! above it has run: keeping everything holds one activation per layer pair, not two.
//!
//! Every kernel has one invocation per output element that sums in a fixed order, so a layer
//! run twice (recomputed) gives the same bits, and so do the gradients under every policy.

use std::collections::HashMap;

use gpu_arena::backprop::{BackwardArrays, ChainModel};
use gpu_arena::remat::{BackwardReads, Buffer, Chain, Layer, RematError, Schedule, ScheduleStep};
use gpu_arena::{
    bytemuck, Capture, CapturedStep, Context, DeviceArray, Error, IndexSlot, Kernel, ParamsSlot,
    Result,
};

use crate::data::Rng;

/// Bytes of an `f32`, the element of every array here.
const F32_BYTES: u64 = std::mem::size_of::<f32>() as u64;

/// Most elements an array may have: the kernels run one invocation per element on a 1-D grid
/// of workgroups of 64, and WebGPU guarantees 65,535 workgroups in a dimension.
const MAX_ELEMENTS: usize = 65_535 * 64;

/// Most linear layers [`MlpShape::check`] accepts: far more than a demonstration needs, and
/// every count of chain layers stays small.
const MAX_LINEAR_LAYERS: usize = 4096;

/// Sizes of the network and of a minibatch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MlpShape {
    /// Samples per minibatch.
    pub batch: usize,
    /// Features of a sample.
    pub inputs: usize,
    /// Units of each hidden layer.
    pub width: usize,
    /// Outputs of the last layer (the regression targets).
    pub outputs: usize,
    /// Linear layers (at least 1); a ReLU follows each but the last.
    pub linear_layers: usize,
}

/// The three sizes a linear layer's kernels take, as WGSL's `Dims` lays them out.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
#[bytemuck(crate = "gpu_arena::bytemuck")]
struct Dims {
    batch: u32,
    inputs: u32,
    outputs: u32,
}

/// What layer `layer` (from 1) of the chain is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ChainLayer {
    /// Linear layer `m` (from 0): `z = x · Wᵀ + b`.
    Linear(usize),
    /// `y = max(z, 0)`.
    Relu,
}

impl MlpShape {
    /// Checks that every size is positive and that no array has more elements than the
    /// kernels' 1-D grids reach ([`MAX_ELEMENTS`]; so every index also fits their `u32`s).
    pub fn check(&self) -> std::result::Result<(), String> {
        let sizes = [
            ("the batch", self.batch),
            ("the inputs", self.inputs),
            ("the hidden width", self.width),
            ("the outputs", self.outputs),
            ("the number of linear layers", self.linear_layers),
        ];
        if let Some((name, _)) = sizes.iter().find(|(_, n)| *n == 0) {
            return Err(format!(
                "{name} is 0: every size of the network must be at least 1"
            ));
        }
        if self.linear_layers > MAX_LINEAR_LAYERS {
            return Err(format!(
                "{} linear layers are more than this example runs ({MAX_LINEAR_LAYERS})",
                self.linear_layers
            ));
        }
        let widest = self.inputs.max(self.width).max(self.outputs);
        let fits = |a: usize, b: usize| a.checked_mul(b).is_some_and(|n| n <= MAX_ELEMENTS);
        if !(fits(self.batch, widest) && fits(widest, widest)) {
            return Err(format!(
                "{self:?} has arrays of more than {MAX_ELEMENTS} elements, more than the \
                 kernels' 1-D grids reach"
            ));
        }
        Ok(())
    }

    /// Layers of the checkpointing chain: a linear layer and a ReLU per hidden layer, then
    /// the output layer.
    pub fn chain_layers(&self) -> usize {
        2 * self.linear_layers - 1
    }

    /// Inputs and outputs of linear layer `m` (from 0).
    pub fn linear_dims(&self, m: usize) -> (usize, usize) {
        let inputs = if m == 0 { self.inputs } else { self.width };
        let outputs = if m + 1 == self.linear_layers {
            self.outputs
        } else {
            self.width
        };
        (inputs, outputs)
    }

    /// Columns of activation `activation` (0 is the input; rows are the batch).
    pub fn activation_width(&self, activation: usize) -> usize {
        match activation {
            0 => self.inputs,
            a => self.linear_dims((a - 1) / 2).1,
        }
    }

    /// The linear layer (from 0) that chain layer `layer` is, or `None` for a ReLU
    /// (examples/data_parallel reduces a linear layer's gradients once its backward ran).
    #[allow(dead_code)] // used by examples/data_parallel, which includes this file
    pub fn linear_layer(layer: usize) -> Option<usize> {
        match Self::chain_layer(layer) {
            ChainLayer::Linear(m) => Some(m),
            ChainLayer::Relu => None,
        }
    }

    fn chain_layer(layer: usize) -> ChainLayer {
        match layer % 2 {
            1 => ChainLayer::Linear((layer - 1) / 2),
            _ => ChainLayer::Relu,
        }
    }

    /// The checkpointing chain of this network: each layer's activation bytes, its forward
    /// cost in FLOPs (so the planner minimises recomputed FLOPs) and what its backward reads.
    pub fn chain(&self) -> std::result::Result<Chain, RematError> {
        let bytes =
            |activation| (self.batch * self.activation_width(activation)) as u64 * F32_BYTES;
        let layers = (1..=self.chain_layers())
            .map(|layer| match MlpShape::chain_layer(layer) {
                ChainLayer::Linear(m) => {
                    let (inputs, outputs) = self.linear_dims(m);
                    let flops = 2 * self.batch * inputs * outputs;
                    Layer::new(bytes(layer), flops as f64)
                }
                ChainLayer::Relu => Layer::new(bytes(layer), (self.batch * self.width) as f64)
                    .with_backward_reads(BackwardReads::Output),
            })
            .collect();
        Chain::new(bytes(0), layers)
    }

    fn dims(&self, m: usize) -> Dims {
        let (inputs, outputs) = self.linear_dims(m);
        // `check` bounded every size by MAX_ELEMENTS, far below u32::MAX.
        Dims {
            batch: self.batch as u32,
            inputs: inputs as u32,
            outputs: outputs as u32,
        }
    }
}

/// Initial weights and biases of every linear layer (`[outputs, inputs]` row-major, and
/// `[outputs]`), from `seed`: He-uniform weights (variance 2 / inputs, for ReLU), zero
/// biases.
pub fn initial_parameters(shape: &MlpShape, seed: u64) -> Vec<(Vec<f32>, Vec<f32>)> {
    let mut rng = Rng::new(seed);
    (0..shape.linear_layers)
        .map(|m| {
            let (inputs, outputs) = shape.linear_dims(m);
            // Uniform in [−a, a] has variance a²/3.
            let a = (6.0 / inputs as f32).sqrt();
            let weights = (0..outputs * inputs).map(|_| a * rng.symmetric()).collect();
            (weights, vec![0.0; outputs])
        })
        .collect()
}

/// The network's kernels, compiled once per context and shared by every model made from them.
#[derive(Clone)]
pub struct MlpKernels {
    linear_forward: Kernel,
    relu_forward: Kernel,
    relu_backward: Kernel,
    linear_input_gradient: Kernel,
    linear_weight_gradient: Kernel,
    linear_bias_gradient: Kernel,
    mse_loss: Kernel,
    mse_gradient: Kernel,
    sgd_update: Kernel,
}

impl MlpKernels {
    pub fn new(ctx: &Context) -> Result<MlpKernels> {
        let kernel = |wgsl| ctx.kernel(wgsl, "main");
        Ok(MlpKernels {
            linear_forward: kernel(include_str!("shaders/linear_forward.wgsl"))?,
            relu_forward: kernel(include_str!("shaders/relu_forward.wgsl"))?,
            relu_backward: kernel(include_str!("shaders/relu_backward.wgsl"))?,
            linear_input_gradient: kernel(include_str!("shaders/linear_input_gradient.wgsl"))?,
            linear_weight_gradient: kernel(include_str!("shaders/linear_weight_gradient.wgsl"))?,
            linear_bias_gradient: kernel(include_str!("shaders/linear_bias_gradient.wgsl"))?,
            mse_loss: kernel(include_str!("shaders/mse_loss.wgsl"))?,
            mse_gradient: kernel(include_str!("shaders/mse_gradient.wgsl"))?,
            sgd_update: kernel(include_str!("shaders/sgd_update.wgsl"))?,
        })
    }
}

/// One linear layer's parameters and the gradients its backward steps accumulate into.
struct Linear {
    weights: DeviceArray<f32>,
    bias: DeviceArray<f32>,
    weight_gradient: DeviceArray<f32>,
    bias_gradient: DeviceArray<f32>,
}

/// The network on the device: its parameters, their gradients and its kernels.
pub struct Mlp {
    shape: MlpShape,
    kernels: MlpKernels,
    linears: Vec<Linear>,
}

impl Mlp {
    /// A network of `shape` with the [`initial_parameters`] of `seed` and zero gradients.
    /// Errors for a shape that [`MlpShape::check`] refuses.
    pub fn new(ctx: &Context, shape: MlpShape, kernels: MlpKernels, seed: u64) -> Result<Mlp> {
        shape.check().map_err(|reason| Error::InvalidArgument {
            operation: "Mlp::new",
            reason,
        })?;
        let linears = initial_parameters(&shape, seed)
            .into_iter()
            .enumerate()
            .map(|(m, (weights, bias))| {
                let (inputs, outputs) = shape.linear_dims(m);
                Ok(Linear {
                    weights: ctx.device_put(&weights, &[outputs, inputs])?,
                    bias: ctx.device_put(&bias, &[outputs])?,
                    weight_gradient: ctx.zeros(&[outputs, inputs])?,
                    bias_gradient: ctx.zeros(&[outputs])?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Mlp {
            shape,
            kernels,
            linears,
        })
    }

    /// The model for one training step on a minibatch with `targets`: its loss goes to
    /// `losses[slot]` (on the device; read the array back when training is done).
    pub fn step<'a>(
        &'a mut self,
        targets: &'a DeviceArray<f32>,
        losses: &'a mut DeviceArray<f32>,
        slot: u32,
    ) -> TrainStep<'a> {
        TrainStep {
            mlp: self,
            targets,
            losses,
            slot,
        }
    }

    /// The accumulated weight and bias gradients of every linear layer, read back (one wait).
    pub fn parameter_gradients(&self, ctx: &Context) -> Result<Vec<Vec<f32>>> {
        let arrays: Vec<&DeviceArray<f32>> = self
            .linears
            .iter()
            .flat_map(|l| [&l.weight_gradient, &l.bias_gradient])
            .collect();
        ctx.device_get_many(&arrays)
    }

    /// Every weight and bias array, layer by layer (examples/data_parallel hashes them to
    /// check that every process holds the same bits; train compares them bit for bit).
    pub fn parameters(&self) -> Vec<&DeviceArray<f32>> {
        self.linears
            .iter()
            .flat_map(|l| [&l.weights, &l.bias])
            .collect()
    }

    /// Passes every parameter gradient by value through `f` and keeps what it returns
    /// (examples/data_parallel all-reduces them in place across processes, an operation that
    /// takes the array by value). On an error the array `f` gave back is kept.
    #[allow(dead_code)] // used by examples/data_parallel, which includes this file
    pub fn replace_gradients(
        &mut self,
        ctx: &Context,
        mut f: impl FnMut(
            DeviceArray<f32>,
        ) -> std::result::Result<DeviceArray<f32>, gpu_arena::Donated<f32>>,
    ) -> Result<()> {
        for linear in &mut self.linears {
            for gradient in [&mut linear.weight_gradient, &mut linear.bias_gradient] {
                // An empty array holds the place while the gradient is lent out.
                let taken = std::mem::replace(gradient, ctx.zeros(&[0])?);
                match f(taken) {
                    Ok(array) => *gradient = array,
                    Err(donated) => {
                        *gradient = donated.array;
                        return Err(donated.error);
                    }
                }
            }
        }
        Ok(())
    }

    /// Lends out linear layer `m`'s weight and bias gradients (empty arrays hold their places),
    /// for examples/data_parallel to all-reduce them while the backward pass goes on; give
    /// them back with [`Mlp::put_gradients`] before the next step uses them.
    #[allow(dead_code)] // used by examples/data_parallel, which includes this file
    pub fn take_gradients(&mut self, ctx: &Context, m: usize) -> Result<[DeviceArray<f32>; 2]> {
        let linear = &mut self.linears[m];
        Ok([
            std::mem::replace(&mut linear.weight_gradient, ctx.zeros(&[0])?),
            std::mem::replace(&mut linear.bias_gradient, ctx.zeros(&[0])?),
        ])
    }

    /// Gives back linear layer `m`'s gradients lent by [`Mlp::take_gradients`].
    #[allow(dead_code)] // used by examples/data_parallel, which includes this file
    pub fn put_gradients(&mut self, m: usize, [weights, bias]: [DeviceArray<f32>; 2]) {
        let linear = &mut self.linears[m];
        linear.weight_gradient = weights;
        linear.bias_gradient = bias;
    }

    /// The number of linear layers.
    #[allow(dead_code)] // used by examples/data_parallel, which includes this file
    pub fn linear_layers(&self) -> usize {
        self.linears.len()
    }

    /// One SGD step, `p −= learning_rate · g` for every parameter, which also zeroes the
    /// gradients for the next step: one sequence, so one submission for all the layers.
    pub fn sgd(&mut self, ctx: &Context, learning_rate: f32) -> Result<()> {
        let mut sequence = ctx.sequence();
        for linear in &mut self.linears {
            for (parameter, gradient) in [
                (&mut linear.weights, &mut linear.weight_gradient),
                (&mut linear.bias, &mut linear.bias_gradient),
            ] {
                let n = parameter.len() as u64;
                sequence
                    .launch(&self.kernels.sgd_update)
                    .params(&learning_rate)
                    .arg_mut(parameter)
                    .arg_mut(gradient)
                    .grid_for(n)
                    .run()?;
            }
        }
        sequence.submit()?;
        Ok(())
    }
}

/// The [`ChainModel`] of one training step: the network, the minibatch's targets and where
/// the loss goes.
pub struct TrainStep<'a> {
    mlp: &'a mut Mlp,
    targets: &'a DeviceArray<f32>,
    losses: &'a mut DeviceArray<f32>,
    slot: u32,
}

impl TrainStep<'_> {
    /// The network this step trains (examples/data_parallel lends out its gradients).
    #[allow(dead_code)] // used by examples/data_parallel, which includes this file
    pub fn mlp(&mut self) -> &mut Mlp {
        self.mlp
    }
}

impl ChainModel for TrainStep<'_> {
    type Element = f32;
    type Error = Error;

    fn activation_shape(&self, activation: usize) -> Option<Vec<usize>> {
        let shape = &self.mlp.shape;
        Some(vec![shape.batch, shape.activation_width(activation)])
    }

    fn forward(
        &mut self,
        ctx: &Context,
        layer: usize,
        input: &DeviceArray<f32>,
        mut output: DeviceArray<f32>,
    ) -> Result<DeviceArray<f32>> {
        let kernels = &self.mlp.kernels;
        let n = output.len() as u64;
        match MlpShape::chain_layer(layer) {
            ChainLayer::Linear(m) => {
                let linear = &self.mlp.linears[m];
                ctx.launch(&kernels.linear_forward)
                    .params(&self.mlp.shape.dims(m))
                    .arg(input)
                    .arg(&linear.weights)
                    .arg(&linear.bias)
                    .arg_mut(&mut output)
                    .grid_for(n)
                    .run()?;
            }
            ChainLayer::Relu => {
                ctx.launch(&kernels.relu_forward)
                    .arg(input)
                    .arg_mut(&mut output)
                    .grid_for(n)
                    .run()?;
            }
        }
        Ok(output)
    }

    /// The loss (into `losses[slot]`) and its gradient, `2 (y − t) / n`, in one submission.
    fn loss_gradient(
        &mut self,
        ctx: &Context,
        output: &DeviceArray<f32>,
        mut gradient: DeviceArray<f32>,
    ) -> Result<DeviceArray<f32>> {
        let kernels = &self.mlp.kernels;
        let n = gradient.len() as u64;
        let mut sequence = ctx.sequence();
        sequence
            .launch(&kernels.mse_loss)
            .params(&self.slot)
            .arg(output)
            .arg(self.targets)
            .arg_mut(self.losses)
            .grid([1, 1, 1])
            .run()?;
        sequence
            .launch(&kernels.mse_gradient)
            .arg(output)
            .arg(self.targets)
            .arg_mut(&mut gradient)
            .grid_for(n)
            .run()?;
        sequence.submit()?;
        Ok(gradient)
    }

    /// A ReLU: `dz = dy · (y > 0)`. A linear layer: the input gradient `dz · W` (none for the
    /// first layer) and the weight and bias gradients accumulated, recorded as one sequence
    /// (one submission instead of three).
    fn backward(
        &mut self,
        ctx: &Context,
        layer: usize,
        arrays: BackwardArrays<'_, f32>,
    ) -> Result<Option<DeviceArray<f32>>> {
        let kernels = &self.mlp.kernels;
        let BackwardArrays {
            input,
            output,
            output_gradient,
            mut input_gradient,
        } = arrays;
        let missing = |what: &str| Error::InvalidArgument {
            operation: "TrainStep::backward",
            reason: format!("layer {layer}'s backward was not given its {what}"),
        };
        match MlpShape::chain_layer(layer) {
            ChainLayer::Relu => {
                let output = output.ok_or_else(|| missing("output"))?;
                let mut gradient = input_gradient.ok_or_else(|| missing("input gradient"))?;
                let n = gradient.len() as u64;
                ctx.launch(&kernels.relu_backward)
                    .arg(output)
                    .arg(output_gradient)
                    .arg_mut(&mut gradient)
                    .grid_for(n)
                    .run()?;
                Ok(Some(gradient))
            }
            ChainLayer::Linear(m) => {
                let input = input.ok_or_else(|| missing("input"))?;
                let dims = self.mlp.shape.dims(m);
                let linear = &mut self.mlp.linears[m];
                let mut sequence = ctx.sequence();
                if let Some(gradient) = input_gradient.as_mut() {
                    let n = gradient.len() as u64;
                    sequence
                        .launch(&kernels.linear_input_gradient)
                        .params(&dims)
                        .arg(output_gradient)
                        .arg(&linear.weights)
                        .arg_mut(gradient)
                        .grid_for(n)
                        .run()?;
                }
                let n = linear.weight_gradient.len() as u64;
                sequence
                    .launch(&kernels.linear_weight_gradient)
                    .params(&dims)
                    .arg(output_gradient)
                    .arg(input)
                    .arg_mut(&mut linear.weight_gradient)
                    .grid_for(n)
                    .run()?;
                let n = linear.bias_gradient.len() as u64;
                sequence
                    .launch(&kernels.linear_bias_gradient)
                    .params(&dims)
                    .arg(output_gradient)
                    .arg_mut(&mut linear.bias_gradient)
                    .grid_for(n)
                    .run()?;
                sequence.submit()?;
                Ok(input_gradient)
            }
        }
    }
}

/// A training step captured once ([`Mlp::capture_step`]): forward, loss, backward under a
/// schedule and the SGD update, replayed by each run as one submission.
#[allow(dead_code)] // used by examples/train, not by examples/data_parallel, which includes this file
pub struct CapturedTraining {
    pub step: CapturedStep,
    /// The minibatch, as a start `[batch, 0, 0]` into the stacked data set.
    pub batch: IndexSlot,
    /// The element of `losses` the step's loss goes to.
    pub loss_slot: ParamsSlot<u32>,
}

impl Mlp {
    /// Captures one training step, the work [`Schedule::run`] with [`TrainStep`] and then
    /// [`Mlp::sgd`] do, in the schedule's order and with the same kernels, parameters and
    /// grids (so every run gives the bits the uncaptured step gives): the minibatch sliced
    /// from `inputs` and `targets` (`[batches, batch, features]`) at the run's start, the loss
    /// into `losses` at the run's slot. `Schedule::run` cannot record into a capture (it
    /// allocates with `Context::alloc` and hands the model a `&Context`), so this walks the
    /// schedule's steps itself: each activation and gradient is an uninitialised array of the
    /// capture (`Capture::alloc`, as the schedule's `Context::alloc`: every kernel writes its
    /// output in full, so no run clears them), dropped after the step that last reads it, so
    /// all of them are the captured step's temporaries.
    #[allow(dead_code)] // used by examples/train, not by examples/data_parallel
    pub fn capture_step(
        &mut self,
        ctx: &Context,
        schedule: &Schedule,
        inputs: &DeviceArray<f32>,
        targets: &DeviceArray<f32>,
        losses: &mut DeviceArray<f32>,
        learning_rate: f32,
    ) -> Result<CapturedTraining> {
        let shape = self.shape;
        let kernels = self.kernels.clone();
        let mut cap = ctx.capture();
        let batch = cap.index_slot(&[0, 0, 0]);
        let x = cap.dynamic_slice_at(inputs, &batch, &[1, shape.batch, shape.inputs])?;
        let t = cap.dynamic_slice_at(targets, &batch, &[1, shape.batch, shape.outputs])?;
        let loss_slot = cap.params_slot(&0u32);
        let uninit = |cap: &mut Capture, activation: usize| {
            cap.alloc::<f32>(&[shape.batch, shape.activation_width(activation)])
        };
        let mut live: HashMap<Buffer, DeviceArray<f32>> = HashMap::new();
        let missing = |buffer: Buffer| Error::InvalidArgument {
            operation: "Mlp::capture_step",
            reason: format!("the schedule reads {buffer:?} while it is not live"),
        };
        for &step in schedule.steps() {
            let get = |buffer: Buffer| match buffer {
                Buffer::Activation(0) => Ok(&x),
                _ => live.get(&buffer).ok_or_else(|| missing(buffer)),
            };
            match step {
                ScheduleStep::Forward { layer } | ScheduleStep::Recompute { layer } => {
                    let mut output = uninit(&mut cap, layer)?;
                    let input = get(Buffer::Activation(layer - 1))?;
                    let n = output.len() as u64;
                    match MlpShape::chain_layer(layer) {
                        ChainLayer::Linear(m) => {
                            let linear = &self.linears[m];
                            cap.launch(&kernels.linear_forward)
                                .params(&shape.dims(m))
                                .arg(input)
                                .arg(&linear.weights)
                                .arg(&linear.bias)
                                .arg_mut(&mut output)
                                .grid_for(n)
                                .run()?;
                        }
                        ChainLayer::Relu => {
                            cap.launch(&kernels.relu_forward)
                                .arg(input)
                                .arg_mut(&mut output)
                                .grid_for(n)
                                .run()?;
                        }
                    }
                    live.insert(Buffer::Activation(layer), output);
                }
                ScheduleStep::LossGradient { layer } => {
                    let mut gradient = uninit(&mut cap, layer)?;
                    let output = get(Buffer::Activation(layer))?;
                    let n = gradient.len() as u64;
                    cap.launch(&kernels.mse_loss)
                        .params_slot(&loss_slot)
                        .arg(output)
                        .arg(&t)
                        .arg_mut(losses)
                        .grid([1, 1, 1])
                        .run()?;
                    cap.launch(&kernels.mse_gradient)
                        .arg(output)
                        .arg(&t)
                        .arg_mut(&mut gradient)
                        .grid_for(n)
                        .run()?;
                    live.insert(Buffer::Gradient(layer), gradient);
                }
                ScheduleStep::Backward { layer } => match MlpShape::chain_layer(layer) {
                    ChainLayer::Relu => {
                        let mut gradient = uninit(&mut cap, layer - 1)?;
                        let output = get(Buffer::Activation(layer))?;
                        let output_gradient = get(Buffer::Gradient(layer))?;
                        let n = gradient.len() as u64;
                        cap.launch(&kernels.relu_backward)
                            .arg(output)
                            .arg(output_gradient)
                            .arg_mut(&mut gradient)
                            .grid_for(n)
                            .run()?;
                        live.insert(Buffer::Gradient(layer - 1), gradient);
                    }
                    ChainLayer::Linear(m) => {
                        let mut input_gradient = match layer {
                            1 => None,
                            _ => Some(uninit(&mut cap, layer - 1)?),
                        };
                        let input = get(Buffer::Activation(layer - 1))?;
                        let output_gradient = get(Buffer::Gradient(layer))?;
                        let dims = shape.dims(m);
                        let linear = &mut self.linears[m];
                        if let Some(gradient) = input_gradient.as_mut() {
                            let n = gradient.len() as u64;
                            cap.launch(&kernels.linear_input_gradient)
                                .params(&dims)
                                .arg(output_gradient)
                                .arg(&linear.weights)
                                .arg_mut(gradient)
                                .grid_for(n)
                                .run()?;
                        }
                        let n = linear.weight_gradient.len() as u64;
                        cap.launch(&kernels.linear_weight_gradient)
                            .params(&dims)
                            .arg(output_gradient)
                            .arg(input)
                            .arg_mut(&mut linear.weight_gradient)
                            .grid_for(n)
                            .run()?;
                        let n = linear.bias_gradient.len() as u64;
                        cap.launch(&kernels.linear_bias_gradient)
                            .params(&dims)
                            .arg(output_gradient)
                            .arg_mut(&mut linear.bias_gradient)
                            .grid_for(n)
                            .run()?;
                        if let Some(gradient) = input_gradient {
                            live.insert(Buffer::Gradient(layer - 1), gradient);
                        }
                    }
                },
                ScheduleStep::Free(buffer) => {
                    live.remove(&buffer);
                }
                // In a capture the pinned-host copy is an array of the step's own that every
                // run writes; the prefetched one is a temporary again.
                ScheduleStep::Offload { activation } | ScheduleStep::Prefetch { activation } => {
                    let buffer = Buffer::Activation(activation);
                    let array = live.remove(&buffer).ok_or_else(|| missing(buffer))?;
                    let moved = match step {
                        ScheduleStep::Offload { .. } => cap.offload(array)?,
                        _ => cap.prefetch(array)?,
                    };
                    live.insert(buffer, moved);
                }
            }
        }
        // Everything the schedule made is a temporary (the planner places them by the steps
        // that touch them, whenever they are dropped here).
        drop((live, x, t));
        for linear in &mut self.linears {
            for (parameter, gradient) in [
                (&mut linear.weights, &mut linear.weight_gradient),
                (&mut linear.bias, &mut linear.bias_gradient),
            ] {
                let n = parameter.len() as u64;
                cap.launch(&kernels.sgd_update)
                    .params(&learning_rate)
                    .arg_mut(parameter)
                    .arg_mut(gradient)
                    .grid_for(n)
                    .run()?;
            }
        }
        Ok(CapturedTraining {
            step: cap.finish()?,
            batch,
            loss_slot,
        })
    }
}
