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
//! use gpu_arena::remat::{Chain, CheckpointPolicy, Layer};
//! use gpu_arena::{Context, DeviceArray};
//!
//! /// Layer `i` adds `i` to every element; the loss gradient and the backward steps fill
//! /// their output with constants (a stand-in for real kernels).
//! struct AddLayerNumber;
//!
//! impl ChainModel for AddLayerNumber {
//!     type Element = f32;
//!     type Error = gpu_arena::Error;
//!
//!     fn forward(
//!         &mut self,
//!         ctx: &Context,
//!         layer: usize,
//!         input: &DeviceArray<f32>,
//!         output: DeviceArray<f32>,
//!     ) -> gpu_arena::Result<DeviceArray<f32>> {
//!         let values: Vec<f32> = ctx.device_get(input)?.iter().map(|x| x + layer as f32).collect();
//!         let shape = [values.len()];
//!         let output = ctx.dynamic_update_slice(output, (&values[..], &shape[..]), &[0])?;
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
//!         // d(x + i)/dx = 1: the gradient passes through (layer 1 has none to write).
//!         let Some(gradient) = arrays.input_gradient else {
//!             return Ok(None);
//!         };
//!         let gradient = ctx.fill_in_place(gradient, 1.0)?;
//!         Ok(Some(gradient))
//!     }
//! }
//!
//! let ctx = Context::from_env()?;
//! let chain = Chain::new(4096, vec![Layer::new(4096, 1.0); 16])?;
//! let schedule = chain.plan(CheckpointPolicy::Sqrt)?;
//! let input = ctx.zeros::<f32>(&[1024])?;
//! let report = schedule.run(&ctx, &mut AddLayerNumber, &input)?;
//! assert_eq!(report.schedule_peak_bytes, schedule.peak_bytes());
//! # Ok::<(), gpu_arena::Error>(())
//! ```
//!
//! Files, one concept each: `model` (the [`ChainModel`] trait and the [`BackwardArrays`] a
//! backward step gets) and `run` (the driver and its [`RunReport`]).

mod model;
mod run;

pub use model::{BackwardArrays, ChainModel};
pub use run::RunReport;
