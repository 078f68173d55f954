//! A plan's steps in order, and the memory they take.

use serde::Serialize;

use super::chain::{rounded, BackwardReads, Chain};

/// A buffer the schedule allocates and frees.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Buffer {
    /// Activation `i`: the output of layer `i`, or the input for 0 (which the schedule never
    /// allocates or frees: it is the caller's).
    Activation(usize),
    /// The gradient of activation `i` (same size).
    Gradient(usize),
}

/// `activation 4`, `gradient 4`: how reports and the arena's labels name a buffer.
impl std::fmt::Display for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Buffer::Activation(i) => write!(f, "activation {i}"),
            Buffer::Gradient(i) => write!(f, "gradient {i}"),
        }
    }
}

/// One step of a [`Schedule`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum ScheduleStep {
    /// Run layer `layer` forward: reads activation `layer − 1`, allocates activation `layer`.
    Forward {
        /// The layer, from 1.
        layer: usize,
    },
    /// Run layer `layer` forward again during the backward pass, because its activation was
    /// not kept and a backward step (or the next recomputation) needs it: reads activation
    /// `layer − 1`, allocates activation `layer`.
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
    /// Run layer `layer` backward: reads the gradient of activation `layer` and, as the layer's
    /// [`BackwardReads`] says, activation `layer − 1` (its input), activation `layer` (its
    /// output) or both; allocates the gradient of activation `layer − 1` (except for layer 1:
    /// the input needs no gradient).
    Backward {
        /// The layer, from 1.
        layer: usize,
    },
    /// The buffer is no longer needed.
    Free(Buffer),
    /// Move activation `activation` to pinned host memory after its last use in the forward
    /// pass (`Context::offload`): its device memory is free until it is prefetched.
    Offload {
        /// The activation, from 1.
        activation: usize,
    },
    /// Bring activation `activation` back from pinned host memory before its first use in
    /// the backward pass (`Context::prefetch`): allocates it in device memory again.
    Prefetch {
        /// The activation, from 1.
        activation: usize,
    },
}

impl ScheduleStep {
    /// The buffer this step allocates, if any.
    pub fn allocates(&self) -> Option<Buffer> {
        match *self {
            ScheduleStep::Forward { layer } | ScheduleStep::Recompute { layer } => {
                Some(Buffer::Activation(layer))
            }
            ScheduleStep::LossGradient { layer } => Some(Buffer::Gradient(layer)),
            ScheduleStep::Backward { layer } if layer > 1 => Some(Buffer::Gradient(layer - 1)),
            ScheduleStep::Prefetch { activation } => Some(Buffer::Activation(activation)),
            ScheduleStep::Backward { .. }
            | ScheduleStep::Free(_)
            | ScheduleStep::Offload { .. } => None,
        }
    }

    /// The buffer whose device memory this step gives back, if any: a free, or an offload
    /// (the activation lives on in pinned host memory).
    pub fn frees(&self) -> Option<Buffer> {
        match *self {
            ScheduleStep::Free(buffer) => Some(buffer),
            ScheduleStep::Offload { activation } => Some(Buffer::Activation(activation)),
            _ => None,
        }
    }
}

/// Where the backward pass finds an activation it reads ([`Chain::plan_placing`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Placement {
    /// Kept in device memory from the forward pass to the backward pass (a checkpoint).
    Keep,
    /// Kept, in pinned host memory: offloaded after its last forward use and prefetched
    /// before its first backward use (JAX's `save_and_offload_only_these_names`).
    Offload,
    /// Recomputed from the checkpoint below it when the backward pass needs it.
    Recompute,
}

/// The plan for one forward and backward pass: the steps in order, what they keep, what they
/// recompute and the peak memory they need. Made by [`Chain::plan`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Schedule {
    steps: Vec<ScheduleStep>,
    checkpoints: Vec<usize>,
    /// Activation bytes, 0 (the input) to n.
    activation_bytes: Vec<u64>,
    /// What each layer's backward step reads, layer 1 first.
    backward_reads: Vec<BackwardReads>,
    peak_bytes: u64,
    /// The most bytes of offloaded activations in pinned host memory at once (rounded).
    host_peak_bytes: u64,
    recompute_cost: f64,
    forward_cost: f64,
}

#[cfg(test)]
thread_local! {
    /// How many schedules [`Schedule::build`] has made on this thread: lets the planner's
    /// tests check that a search holds schedules in bounded number, whatever the chain's length.
    pub(crate) static BUILDS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl Schedule {
    /// The schedule that keeps activation `i` (1 ≤ i < n) where `keep[i]` is set and the
    /// backward pass can use it; the input and the last activation are always kept.
    pub(crate) fn build(chain: &Chain, keep: &[bool]) -> Schedule {
        Schedule::build_offloading(chain, keep, &[])
    }

    /// [`Schedule::build`], with the kept activations `i` where `offload[i]` is set moved to
    /// pinned host memory between their last forward use and their first backward use
    /// (`offload` may be shorter than `keep`: the rest stays on the device).
    pub(crate) fn build_offloading(chain: &Chain, keep: &[bool], offload: &[bool]) -> Schedule {
        #[cfg(test)]
        BUILDS.with(|builds| builds.set(builds.get() + 1));
        let n = chain.layer_count();
        let mut schedule = Schedule {
            steps: Vec::new(),
            checkpoints: Vec::new(),
            activation_bytes: (0..=n).map(|i| chain.activation_bytes(i)).collect(),
            backward_reads: chain.layers().iter().map(|l| l.backward_reads).collect(),
            peak_bytes: 0,
            host_peak_bytes: 0,
            recompute_cost: 0.0,
            // Folds from +0.0: `sum` starts at −0.0, which prints as "-0.0" for no cost.
            forward_cost: chain
                .layers()
                .iter()
                .fold(0.0, |sum, l| sum + l.forward_cost),
        };
        let compute = schedule.compute_steps(keep);
        schedule.steps = schedule.with_frees(&compute);
        schedule.checkpoints = schedule.kept_through_forward();
        let offloaded: Vec<usize> = (schedule.checkpoints.iter().copied())
            .filter(|&i| offload.get(i).copied().unwrap_or(false))
            .collect();
        if !offloaded.is_empty() {
            schedule.steps = schedule.with_moves(&offloaded);
        }
        schedule.recompute_cost = schedule.steps.iter().fold(0.0, |sum, step| match *step {
            ScheduleStep::Recompute { layer } => sum + chain.layers()[layer - 1].forward_cost,
            _ => sum,
        });
        schedule.peak_bytes = schedule.live_bytes().max().unwrap_or(0);
        schedule.host_peak_bytes = schedule.host_bytes().max().unwrap_or(0);
        schedule
    }

    /// `steps` with each activation of `offloaded` (checkpoints, in order) offloaded right
    /// after the forward step that reads it (the next layer's) and prefetched right before the
    /// first step of the backward pass that reads it.
    fn with_moves(&self, offloaded: &[usize]) -> Vec<ScheduleStep> {
        let mut is_offloaded = vec![false; self.layer_count() + 1];
        offloaded.iter().for_each(|&i| is_offloaded[i] = true);
        let mut steps = Vec::with_capacity(self.steps.len() + 2 * offloaded.len());
        let mut backward = false;
        let mut reads = Vec::with_capacity(3);
        for &step in &self.steps {
            if let ScheduleStep::LossGradient { .. } = step {
                backward = true;
            }
            if backward {
                reads.clear();
                self.push_reads(step, &mut reads);
                for &buffer in &reads {
                    if let Buffer::Activation(i) = buffer {
                        if std::mem::replace(&mut is_offloaded[i], false) {
                            steps.push(ScheduleStep::Prefetch { activation: i });
                        }
                    }
                }
            }
            steps.push(step);
            if let ScheduleStep::Forward { layer } = step {
                if is_offloaded[layer - 1] {
                    steps.push(ScheduleStep::Offload {
                        activation: layer - 1,
                    });
                }
            }
        }
        steps
    }

    /// Bytes of offloaded activations in pinned host memory (rounded) after each step.
    fn host_bytes(&self) -> impl Iterator<Item = u64> + '_ {
        let taken = |activation| rounded(self.bytes_of_step_buffer(Buffer::Activation(activation)));
        std::iter::once(0).chain(self.steps.iter().scan(0, move |host, step| {
            match *step {
                ScheduleStep::Offload { activation } => *host += taken(activation),
                ScheduleStep::Prefetch { activation } => *host -= taken(activation),
                _ => {}
            }
            Some(*host)
        }))
    }

    /// The steps that compute (no frees) for keep flags `keep`: every layer forward, the loss
    /// gradient, then the backward pass one segment at a time from the top. Each segment lies
    /// between two kept activations; its layers are recomputed from the one at its bottom up
    /// to the highest activation of the segment that a backward step reads, then run backward.
    fn compute_steps(&self, keep: &[bool]) -> Vec<ScheduleStep> {
        let n = self.layer_count();
        let mut steps = Vec::with_capacity(3 * n + 1);
        steps.extend((1..=n).map(|layer| ScheduleStep::Forward { layer }));
        steps.push(ScheduleStep::LossGradient { layer: n });
        let bottoms = (1..n).rev().filter(|&i| keep[i]).chain(std::iter::once(0));
        let mut top = n;
        for bottom in bottoms {
            let highest_read = (bottom + 1..top)
                .rev()
                .find(|&i| self.backward_reads_activation(i));
            if let Some(highest) = highest_read {
                steps.extend((bottom + 1..=highest).map(|layer| ScheduleStep::Recompute { layer }));
            }
            steps.extend(
                (bottom + 1..=top)
                    .rev()
                    .map(|layer| ScheduleStep::Backward { layer }),
            );
            top = bottom;
        }
        steps
    }

    /// Whether some backward step reads activation `i` (1 ≤ i ≤ n): layer `i` reading its
    /// output, or layer `i + 1` its input.
    fn backward_reads_activation(&self, i: usize) -> bool {
        self.backward_reads[i - 1].output()
            || self
                .backward_reads
                .get(i)
                .is_some_and(|reads| reads.input())
    }

    /// `compute` with a free after the last read of each buffer the steps allocate (a buffer
    /// read by nothing is freed right after the step that makes it), so every buffer lives
    /// exactly as long as the plan needs it. The input is the caller's and never freed.
    fn with_frees(&self, compute: &[ScheduleStep]) -> Vec<ScheduleStep> {
        let slot = |buffer| self.slot(buffer);
        // Walking backwards: whether a later step reads what the buffer holds now. The steps
        // are collected backwards too (each step after its frees), then turned around.
        let mut read_later = vec![false; self.slot_count()];
        let mut reversed = Vec::with_capacity(2 * compute.len());
        let (mut reads, mut frees) = (Vec::with_capacity(3), Vec::with_capacity(4));
        for step in compute.iter().rev() {
            frees.clear();
            if let Some(buffer) = step.allocates() {
                if !std::mem::replace(&mut read_later[slot(buffer)], false) {
                    frees.push(buffer);
                }
            }
            reads.clear();
            self.push_reads(*step, &mut reads);
            for &buffer in &reads {
                if buffer != Buffer::Activation(0)
                    && !std::mem::replace(&mut read_later[slot(buffer)], true)
                {
                    frees.push(buffer);
                }
            }
            reversed.extend(frees.iter().rev().map(|&buffer| ScheduleStep::Free(buffer)));
            reversed.push(*step);
        }
        reversed.reverse();
        reversed
    }

    /// The activations 1 to n − 1 still held when the forward pass ends: the checkpoints.
    fn kept_through_forward(&self) -> Vec<usize> {
        let n = self.layer_count();
        let mut live = vec![false; n + 1];
        for step in &self.steps {
            match *step {
                ScheduleStep::Forward { layer } => live[layer] = true,
                ScheduleStep::Free(Buffer::Activation(i)) => live[i] = false,
                ScheduleStep::LossGradient { .. } => break,
                _ => {}
            }
        }
        (1..n).filter(|&i| live[i]).collect()
    }

    /// Appends the buffers `step` reads to `reads`: for a backward step the gradient first,
    /// then its input and output as its layer reads them.
    pub(crate) fn push_reads(&self, step: ScheduleStep, reads: &mut Vec<Buffer>) {
        match step {
            ScheduleStep::Forward { layer } | ScheduleStep::Recompute { layer } => {
                reads.push(Buffer::Activation(layer - 1));
            }
            ScheduleStep::LossGradient { layer } => reads.push(Buffer::Activation(layer)),
            ScheduleStep::Backward { layer } => {
                let what = self.backward_reads[layer - 1];
                reads.push(Buffer::Gradient(layer));
                if what.input() {
                    reads.push(Buffer::Activation(layer - 1));
                }
                if what.output() {
                    reads.push(Buffer::Activation(layer));
                }
            }
            ScheduleStep::Offload { activation } => reads.push(Buffer::Activation(activation)),
            ScheduleStep::Free(_) | ScheduleStep::Prefetch { .. } => {}
        }
    }

    /// An index for each buffer of the chain, below [`slot_count`](Schedule::slot_count):
    /// activation `i` at `i`, the gradient of activation `i` at `n + 1 + i`.
    pub(crate) fn slot(&self, buffer: Buffer) -> usize {
        match buffer {
            Buffer::Activation(i) => i,
            Buffer::Gradient(i) => self.layer_count() + 1 + i,
        }
    }

    /// How many buffer slots the chain has: an activation and a gradient for the input and
    /// each layer.
    pub(crate) fn slot_count(&self) -> usize {
        2 * (self.layer_count() + 1)
    }

    /// How many layers the chain has.
    pub fn layer_count(&self) -> usize {
        self.backward_reads.len()
    }

    /// What layer `layer` (from 1) reads in its backward step, or `None` for a layer outside
    /// the chain.
    pub fn backward_reads(&self, layer: usize) -> Option<BackwardReads> {
        layer
            .checked_sub(1)
            .and_then(|i| self.backward_reads.get(i))
            .copied()
    }

    /// The steps, in the order to run them.
    pub fn steps(&self) -> &[ScheduleStep] {
        &self.steps
    }

    /// The activations the forward pass keeps (layer numbers, ascending), besides the input
    /// and the last one: on the device or, those in [`offloaded`](Schedule::offloaded), in
    /// pinned host memory. Every other activation is recomputed.
    pub fn checkpoints(&self) -> &[usize] {
        &self.checkpoints
    }

    /// The activations the plan keeps in pinned host memory between the passes (ascending):
    /// each has an [`Offload`](ScheduleStep::Offload) and a
    /// [`Prefetch`](ScheduleStep::Prefetch) step. Empty unless the plan offloads.
    pub fn offloaded(&self) -> Vec<usize> {
        let mut offloaded: Vec<usize> = (self.steps.iter())
            .filter_map(|step| match *step {
                ScheduleStep::Offload { activation } => Some(activation),
                _ => None,
            })
            .collect();
        offloaded.sort_unstable();
        offloaded
    }

    /// The most bytes of offloaded activations in pinned host memory at once, each rounded up
    /// to 256 bytes as the arena of that kind rounds it (0 for a plan that offloads nothing).
    pub fn host_peak_bytes(&self) -> u64 {
        self.host_peak_bytes
    }

    /// The bytes the plan moves between device and host per pass: each offloaded activation
    /// out and back (unrounded).
    pub fn offloaded_bytes(&self) -> u64 {
        (self.offloaded().iter())
            .map(|&i| 2 * self.bytes_of_step_buffer(Buffer::Activation(i)))
            .fold(0, u64::saturating_add)
    }

    /// The most bytes of device memory in use at once, the input included, each buffer rounded
    /// up to 256 bytes as the arena rounds it (an empty one takes 256): what
    /// [`replay`](Schedule::replay) measures.
    /// Offloaded activations count from their prefetch to their free, and until their offload.
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

    /// The bytes of every allocation the plan makes, the input's included, each rounded as the
    /// arena rounds it: an arena of this size in one region holds the plan.
    pub(crate) fn allocated_bytes(&self) -> u64 {
        let taken = |buffer| rounded(self.bytes_of_step_buffer(buffer));
        // Saturating: recomputation can allocate an activation twice, beyond what `Chain::new`
        // checked; a sum past u64::MAX is as good as infinite here.
        self.steps
            .iter()
            .filter_map(ScheduleStep::allocates)
            .map(taken)
            .fold(taken(Buffer::Activation(0)), u64::saturating_add)
    }

    /// The most buffers the plan holds at once, the input included.
    pub(crate) fn most_live_buffers(&self) -> usize {
        let mut live = 1usize;
        let mut most = live;
        for step in &self.steps {
            if step.allocates().is_some() {
                live += 1;
                most = most.max(live);
            }
            if step.frees().is_some() {
                live -= 1;
            }
        }
        most
    }

    /// Bytes in use (rounded) after each step, starting with the input alone.
    fn live_bytes(&self) -> impl Iterator<Item = u64> + '_ {
        let taken = |buffer| rounded(self.bytes_of_step_buffer(buffer));
        let input = taken(Buffer::Activation(0));
        std::iter::once(input).chain(self.steps.iter().scan(input, move |live, step| {
            if let Some(buffer) = step.allocates() {
                *live += taken(buffer);
            }
            if let Some(buffer) = step.frees() {
                *live -= taken(buffer);
            }
            Some(*live)
        }))
    }
}
