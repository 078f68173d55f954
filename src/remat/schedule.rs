//! A plan's steps in order, and the memory they take.

use serde::Serialize;

use super::chain::{rounded, Chain};

/// A buffer the schedule allocates and frees.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Buffer {
    /// Activation `i`: the output of layer `i`, or the input for 0 (which the schedule never
    /// allocates or frees: it is the caller's).
    Activation(usize),
    /// The gradient of activation `i` (same size).
    Gradient(usize),
}

/// One step of a [`Schedule`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Step {
    /// Run layer `layer` forward: reads activation `layer − 1`, allocates activation `layer`.
    Forward {
        /// The layer, from 1.
        layer: usize,
    },
    /// Run layer `layer` forward again during the backward pass, because its activation was
    /// not kept: reads activation `layer − 1`, allocates activation `layer`.
    Recompute {
        /// The layer, from 1.
        layer: usize,
    },
    /// Start the backward pass: reads the last activation (`layer` is the last layer) and
    /// allocates its gradient.
    LossGradient {
        /// The last layer.
        layer: usize,
    },
    /// Run layer `layer` backward: reads the gradient of activation `layer` and activation
    /// `layer − 1`, allocates the gradient of activation `layer − 1` (except for layer 1: the
    /// input needs no gradient).
    Backward {
        /// The layer, from 1.
        layer: usize,
    },
    /// The buffer is no longer needed.
    Free(Buffer),
}

impl Step {
    /// The buffer this step allocates, if any.
    pub fn allocates(&self) -> Option<Buffer> {
        match *self {
            Step::Forward { layer } | Step::Recompute { layer } => Some(Buffer::Activation(layer)),
            Step::LossGradient { layer } => Some(Buffer::Gradient(layer)),
            Step::Backward { layer } if layer > 1 => Some(Buffer::Gradient(layer - 1)),
            Step::Backward { .. } | Step::Free(_) => None,
        }
    }
}

/// The plan for one forward and backward pass: the steps in order, what they keep, what they
/// recompute and the peak memory they need. Made by [`Chain::plan`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Schedule {
    steps: Vec<Step>,
    checkpoints: Vec<usize>,
    /// Activation bytes, 0 (the input) to n.
    activation_bytes: Vec<u64>,
    peak_bytes: u64,
    recompute_cost: f64,
    forward_cost: f64,
}

impl Schedule {
    /// The schedule that keeps activation `i` (1 ≤ i < n) where `keep[i]` is set; the input
    /// and the last activation are always kept.
    pub(crate) fn build(chain: &Chain, keep: &[bool]) -> Schedule {
        let n = chain.layer_count();
        let mut steps = Vec::with_capacity(4 * n + 2);
        // Forward: a layer's input goes as soon as the layer has run, unless it is kept (the
        // chain's input always is).
        for layer in 1..=n {
            steps.push(Step::Forward { layer });
            if layer > 1 && !keep[layer - 1] {
                steps.push(Step::Free(Buffer::Activation(layer - 1)));
            }
        }
        steps.push(Step::LossGradient { layer: n });
        steps.push(Step::Free(Buffer::Activation(n)));
        // Backward, one segment at a time from the top: recompute the segment's activations
        // from the checkpoint at its bottom, then run its layers backward, freeing as it goes.
        let checkpoints: Vec<usize> = (1..n).filter(|&i| keep[i]).collect();
        let mut top = n;
        for &bottom in checkpoints.iter().rev().chain(&[0]) {
            // Between two checkpoints, nothing is kept.
            for layer in bottom + 1..top {
                steps.push(Step::Recompute { layer });
            }
            for layer in (bottom + 1..=top).rev() {
                steps.push(Step::Backward { layer });
                steps.push(Step::Free(Buffer::Gradient(layer)));
                if layer > 1 {
                    steps.push(Step::Free(Buffer::Activation(layer - 1)));
                }
            }
            top = bottom;
        }
        let mut schedule = Schedule {
            steps,
            checkpoints,
            activation_bytes: (0..=n).map(|i| chain.activation_bytes(i)).collect(),
            peak_bytes: 0,
            recompute_cost: 0.0,
            // Folds from +0.0: `sum` starts at −0.0, which prints as "-0.0" for no cost.
            forward_cost: chain
                .layers()
                .iter()
                .fold(0.0, |sum, l| sum + l.forward_cost),
        };
        schedule.recompute_cost = schedule.steps.iter().fold(0.0, |sum, step| match *step {
            Step::Recompute { layer } => sum + chain.layers()[layer - 1].forward_cost,
            _ => sum,
        });
        schedule.peak_bytes = schedule.live_bytes().max().unwrap_or(0);
        schedule
    }

    /// The steps, in the order to run them.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// The activations the forward pass keeps (layer numbers, ascending), besides the input
    /// and the last one.
    pub fn checkpoints(&self) -> &[usize] {
        &self.checkpoints
    }

    /// The most bytes in use at once, the input included, each buffer rounded up to 256 bytes
    /// as the arena rounds it: what [`replay`](Schedule::replay) measures.
    pub fn peak_bytes(&self) -> u64 {
        self.peak_bytes
    }

    /// The summed forward cost of the recomputed layers.
    pub fn recompute_cost(&self) -> f64 {
        self.recompute_cost
    }

    /// Recomputation as a fraction of one forward pass (0 with nothing recomputed; at most
    /// about 1).
    pub fn recompute_fraction(&self) -> f64 {
        if self.forward_cost > 0.0 {
            self.recompute_cost / self.forward_cost
        } else {
            0.0
        }
    }

    /// The bytes of `buffer` as the chain gave them (not rounded), or `None` for a buffer
    /// beyond the chain's last layer.
    pub fn bytes(&self, buffer: Buffer) -> Option<u64> {
        match buffer {
            Buffer::Activation(i) | Buffer::Gradient(i) => self.activation_bytes.get(i).copied(),
        }
    }

    /// [`bytes`](Schedule::bytes) of a buffer the schedule's own steps name.
    pub(crate) fn bytes_of_step_buffer(&self, buffer: Buffer) -> u64 {
        self.bytes(buffer)
            .expect("steps only name buffers of the chain")
    }

    /// Bytes in use (rounded) after each step, starting with the input alone.
    fn live_bytes(&self) -> impl Iterator<Item = u64> + '_ {
        let taken = |buffer| rounded(self.bytes_of_step_buffer(buffer));
        let input = taken(Buffer::Activation(0));
        std::iter::once(input).chain(self.steps.iter().scan(input, move |live, step| {
            if let Some(buffer) = step.allocates() {
                *live += taken(buffer);
            }
            if let Step::Free(buffer) = *step {
                *live -= taken(buffer);
            }
            Some(*live)
        }))
    }
}
