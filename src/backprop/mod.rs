//! Running a gradient-checkpointing [`Schedule`](crate::remat::Schedule) on a context: the
//! forward pass, the loss gradient and the backward pass of a chain, with the caller's own
//! kernels, holding exactly the activations and gradients the schedule names.
//!
//! [`remat`](crate::remat) plans on the CPU; this module runs the plan. The caller implements
//! [`ChainModel`] (one layer forward, the loss gradient, one layer backward, each given the
//! [`Context`](crate::Context) and the device arrays it reads and writes) and calls
//! [`Schedule::run`](crate::remat::Schedule::run). The driver allocates every activation and
//! gradient with [`Context::alloc`](crate::Context::alloc) right before the step that writes
//! it and drops it right after the step that last reads it, so the context's
//! `peak_bytes_in_use` is the plan's [`peak_bytes`](crate::remat::Schedule::peak_bytes) plus
//! what the caller's own arrays (parameters, their gradients, temporaries) hold; the
//! [`RunReport`] gives both parts. Recomputation runs the same forward code on the same
//! inputs, so with deterministic kernels every policy gives bit-identical gradients.
//!
//! ```no_run
//! use gpu_arena::backprop::{BackwardArrays, ChainModel};
//! use gpu_arena::remat::{BackwardReads, Chain, CheckpointPolicy, Layer};
//! use gpu_arena::{Context, DeviceArray, Kernel};
//!
//! /// Every layer is `y = relu(x + bias)` with one scalar bias per layer; the loss is
//! /// `sum(y)`, so its gradient is 1 everywhere.
//! struct BiasRelu {
//!     forward: Kernel,
//!     backward: Kernel,
//!     biases: Vec<f32>,
//! }
//!
//! const FORWARD: &str = "
//!     @group(0) @binding(0) var<uniform> bias: f32;
//!     @group(0) @binding(1) var<storage, read> x: array<f32>;
//!     @group(0) @binding(2) var<storage, read_write> y: array<f32>;
//!     @compute @workgroup_size(64)
//!     fn main(@builtin(global_invocation_id) i: vec3<u32>) {
//!         if (i.x < arrayLength(&y)) { y[i.x] = max(x[i.x] + bias, 0.0); }
//!     }";
//! // ReLU's backward reads its output: dx = dy where y > 0.
//! const BACKWARD: &str = "
//!     @group(0) @binding(0) var<storage, read> y: array<f32>;
//!     @group(0) @binding(1) var<storage, read> dy: array<f32>;
//!     @group(0) @binding(2) var<storage, read_write> dx: array<f32>;
//!     @compute @workgroup_size(64)
//!     fn main(@builtin(global_invocation_id) i: vec3<u32>) {
//!         if (i.x < arrayLength(&dx)) { dx[i.x] = select(0.0, dy[i.x], y[i.x] > 0.0); }
//!     }";
//!
//! impl ChainModel for BiasRelu {
//!     type Element = f32;
//!     type Error = gpu_arena::Error;
//!
//!     fn forward(
//!         &mut self,
//!         ctx: &Context,
//!         layer: usize,
//!         input: &DeviceArray<f32>,
//!         mut output: DeviceArray<f32>,
//!     ) -> gpu_arena::Result<DeviceArray<f32>> {
//!         let n = output.len() as u64;
//!         ctx.launch(&self.forward)
//!             .params(&self.biases[layer - 1])
//!             .arg(input)
//!             .arg_mut(&mut output)
//!             .grid_for(n)
//!             .run()?;
//!         Ok(output)
//!     }
//!
//!     fn loss_gradient(
//!         &mut self,
//!         ctx: &Context,
//!         _output: &DeviceArray<f32>,
//!         gradient: DeviceArray<f32>,
//!     ) -> gpu_arena::Result<DeviceArray<f32>> {
//!         let gradient = ctx.fill_in_place(gradient, 1.0)?;
//!         Ok(gradient)
//!     }
//!
//!     fn backward(
//!         &mut self,
//!         ctx: &Context,
//!         _layer: usize,
//!         arrays: BackwardArrays<'_, f32>,
//!     ) -> gpu_arena::Result<Option<DeviceArray<f32>>> {
//!         // (A real model would accumulate d(bias) here too.)
//!         let Some(mut gradient) = arrays.input_gradient else {
//!             return Ok(None); // layer 1: the input needs no gradient
//!         };
//!         let output = arrays.output.expect("the layers read their output");
//!         let n = gradient.len() as u64;
//!         ctx.launch(&self.backward)
//!             .arg(output)
//!             .arg(arrays.output_gradient)
//!             .arg_mut(&mut gradient)
//!             .grid_for(n)
//!             .run()?;
//!         Ok(Some(gradient))
//!     }
//! }
//!
//! let ctx = Context::from_env()?;
//! let mut model = BiasRelu {
//!     forward: ctx.kernel(FORWARD, "main")?,
//!     backward: ctx.kernel(BACKWARD, "main")?,
//!     biases: (0..16).map(|i| 0.1 * i as f32).collect(),
//! };
//! let relu = Layer::new(4096, 1.0).with_backward_reads(BackwardReads::Output);
//! let chain = Chain::new(4096, vec![relu; 16])?;
//! let schedule = chain.plan(CheckpointPolicy::Sqrt)?;
//! let input = ctx.fill::<f32>(&[1024], 0.5)?;
//! let report = schedule.run(&ctx, &mut model, &input)?;
//! assert_eq!(report.peak_bytes_in_use, schedule.peak_bytes()); // nothing else is allocated
//! # Ok::<(), gpu_arena::Error>(())
//! ```
//!
//! `examples/train` trains an MLP of 16 linear layers this way under each policy, with user
//! WGSL kernels, and checks the peaks and the bit-identical gradients.
//!
//! Files, one concept each: `model` (the [`ChainModel`] trait and the [`BackwardArrays`] a
//! backward step gets) and `run` (the driver and its [`RunReport`]).

mod model;
mod run;

pub use model::{BackwardArrays, ChainModel};
pub use run::RunReport;
