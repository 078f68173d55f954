//! A plan's rank (recomputation, peak, checkpoints) from its keep flags, without its steps.
//!
//! A budget search weighs thousands of candidate plans; building each as a [`Schedule`] takes
//! memory in proportion to the chain (its steps) and time to match, so a search over a long
//! chain would hold gigabytes (2,300 schedules of 20,000 layers take 4.8 GB). The
//! [`Evaluator`] walks the same steps [`Schedule::build`] would make, in reverse, without
//! storing them, in scratch space it reuses from one candidate to the next: the search then
//! holds one evaluator and a few numbers per candidate, and builds a [`Schedule`] only for the
//! plans it returns or replays. A unit test checks every figure against [`Schedule::build`].

use super::chain::{BackwardReads, Chain};
#[cfg(test)]
use super::schedule::Schedule;

/// What a budget search needs of a plan: the same figures its [`Schedule`] has.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Evaluation {
    /// [`Schedule::peak_bytes`].
    pub peak_bytes: u64,
    /// [`Schedule::recompute_cost`], summed in the schedule's step order (so equal bit for bit).
    pub recompute_cost: f64,
    /// How many [`Schedule::checkpoints`] the plan has.
    pub checkpoints: usize,
}

/// Scratch space for evaluating plans of one chain, reused from one plan to the next.
pub(crate) struct Evaluator<'c> {
    chain: &'c Chain,
    /// Activation bytes as the arena rounds them, 0 (the input) to n.
    rounded: Vec<u64>,
    /// Whether a backward step reads activation `i` (1 to n; 0 unused).
    read_by_backward: Vec<bool>,
    /// Whether a later step reads what each buffer slot holds (the walk goes backwards):
    /// activation `i` at `i`, the gradient of activation `i` at `n + 1 + i`.
    read_later: Vec<bool>,
    /// Segments of the backward pass, top first: (bottom, top, highest activation recomputed).
    segments: Vec<(usize, usize, Option<usize>)>,
}

impl<'c> Evaluator<'c> {
    pub(crate) fn new(chain: &'c Chain) -> Self {
        let n = chain.layer_count();
        let layers = chain.layers();
        let read_by_backward = (0..=n)
            .map(|i| {
                i > 0
                    && (layers[i - 1].backward_reads.output()
                        || layers.get(i).is_some_and(|l| l.backward_reads.input()))
            })
            .collect();
        Evaluator {
            chain,
            rounded: (0..=n).map(|i| chain.rounded_activation_bytes(i)).collect(),
            read_by_backward,
            read_later: vec![false; 2 * (n + 1)],
            segments: Vec::new(),
        }
    }

    /// Activation bytes as the arena rounds them, 0 (the input) to n.
    pub(crate) fn rounded_activation_bytes(&self) -> &[u64] {
        &self.rounded
    }

    /// The figures of the plan [`Schedule::build`] makes for `keep`, and, where `checkpoints`
    /// is given, its checkpoints (replacing what it held).
    ///
    /// The walk mirrors `Schedule::build`: the compute steps (every layer forward, the loss
    /// gradient, then each segment's recomputation and backward steps, top segment first) are
    /// visited last to first; a buffer is freed after the last step that reads it, or right
    /// after the step that makes it when none does. Going backwards, the bytes in use after a
    /// step are those after the next one's allocation is undone plus what this step frees;
    /// the schedule ends with the input alone in use.
    pub(crate) fn evaluate(
        &mut self,
        keep: &[bool],
        mut checkpoints: Option<&mut Vec<usize>>,
    ) -> Evaluation {
        let n = self.chain.layer_count();
        let layers = self.chain.layers();
        // The segments, top first, each with the highest activation a backward step reads
        // below its top (what its recomputation reaches), as `Schedule::compute_steps` finds.
        self.segments.clear();
        let mut top = n;
        for bottom in (1..n).rev().filter(|&i| keep[i]).chain(std::iter::once(0)) {
            let highest = (bottom + 1..top).rev().find(|&i| self.read_by_backward[i]);
            self.segments.push((bottom, top, highest));
            top = bottom;
        }
        // In step order, as `Schedule::build` folds it.
        let recompute_cost = self
            .segments
            .iter()
            .fold(0.0, |sum, &(bottom, _, highest)| {
                highest.map_or(sum, |highest| {
                    (bottom + 1..=highest)
                        .fold(sum, |sum, layer| sum + layers[layer - 1].forward_cost)
                })
            });

        self.read_later.fill(false);
        let input = self.rounded[0];
        let mut walk = Walk {
            rounded: &self.rounded,
            read_later: &mut self.read_later,
            gradients: n + 1,
            live: input,
            peak: input,
        };
        // The backward pass, last step first: the bottom segment's backward steps from its
        // bottom up, then its recomputation from the top down, and so on up the chain.
        for &(bottom, top, highest) in self.segments.iter().rev() {
            for layer in bottom + 1..=top {
                walk.backward(layer, layers[layer - 1].backward_reads);
            }
            if let Some(highest) = highest {
                for layer in (bottom + 1..=highest).rev() {
                    walk.forward(layer);
                }
            }
        }
        walk.loss_gradient(n);
        // The activations the forward pass leaves in use for the backward pass.
        let mut count = 0;
        if let Some(list) = checkpoints.as_deref_mut() {
            list.clear();
        }
        for i in (1..n).filter(|&i| walk.read_later[i]) {
            count += 1;
            if let Some(list) = checkpoints.as_deref_mut() {
                list.push(i);
            }
        }
        for layer in (1..=n).rev() {
            walk.forward(layer);
        }
        Evaluation {
            peak_bytes: walk.peak,
            recompute_cost,
            checkpoints: count,
        }
    }

    /// The same figures for a built schedule, to check the walk against.
    #[cfg(test)]
    pub(crate) fn of_schedule(schedule: &Schedule) -> Evaluation {
        Evaluation {
            peak_bytes: schedule.peak_bytes(),
            recompute_cost: schedule.recompute_cost(),
            checkpoints: schedule.checkpoints().len(),
        }
    }
}

/// The backwards walk over a schedule's compute steps: bytes in use and the peak. Each kind
/// of step has its own method (the walk is the planner's inner loop).
struct Walk<'a> {
    rounded: &'a [u64],
    read_later: &'a mut [bool],
    /// The first gradient slot (n + 1).
    gradients: usize,
    /// Bytes in use after the step visited last (before it, in the schedule's order).
    live: u64,
    peak: u64,
}

impl Walk<'_> {
    /// A forward step or recomputation of `layer`: reads its input, makes its output.
    #[inline]
    fn forward(&mut self, layer: usize) {
        let mut freed = self.made(layer, self.rounded[layer]);
        // The input is the caller's and never freed.
        if layer > 1 {
            freed += self.read(layer - 1, self.rounded[layer - 1]);
        }
        self.after_step(freed, self.rounded[layer]);
    }

    /// The loss gradient of the last layer `n`: reads activation `n`, makes its gradient.
    fn loss_gradient(&mut self, n: usize) {
        let mut freed = self.made(self.gradients + n, self.rounded[n]);
        freed += self.read(n, self.rounded[n]);
        self.after_step(freed, self.rounded[n]);
    }

    /// The backward step of `layer`: reads the gradient of its output and what `reads` says,
    /// makes the gradient of its input (none for the chain's input).
    #[inline]
    fn backward(&mut self, layer: usize, reads: BackwardReads) {
        let below = self.rounded[layer - 1];
        let (mut freed, mut made) = (0, 0);
        if layer > 1 {
            freed += self.made(self.gradients + layer - 1, below);
            made = below;
        }
        freed += self.read(self.gradients + layer, self.rounded[layer]);
        if reads.input() && layer > 1 {
            freed += self.read(layer - 1, below);
        }
        if reads.output() {
            freed += self.read(layer, self.rounded[layer]);
        }
        self.after_step(freed, made);
    }

    /// The bytes freed right after the step that makes the buffer in `slot` (of `bytes`): all
    /// of them when no later step reads it.
    #[inline(always)]
    fn made(&mut self, slot: usize, bytes: u64) -> u64 {
        if std::mem::replace(&mut self.read_later[slot], false) {
            0
        } else {
            bytes
        }
    }

    /// The bytes freed right after a step that reads the buffer in `slot` (of `bytes`): all
    /// of them when this step is its last reader.
    #[inline(always)]
    fn read(&mut self, slot: usize, bytes: u64) -> u64 {
        if std::mem::replace(&mut self.read_later[slot], true) {
            0
        } else {
            bytes
        }
    }

    /// In use after the step (before its frees of `freed` bytes), then before it (without the
    /// `made` bytes it allocates).
    #[inline(always)]
    fn after_step(&mut self, freed: u64, made: u64) {
        self.live += freed;
        self.peak = self.peak.max(self.live);
        self.live -= made;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remat::chain::{BackwardReads, Layer};
    use proptest::prelude::*;

    /// Chains of 1 to 40 layers of up to 5000 bytes, with every kind of backward step.
    fn chains() -> impl Strategy<Value = Chain> {
        let reads = prop_oneof![
            Just(BackwardReads::Input),
            Just(BackwardReads::Output),
            Just(BackwardReads::InputAndOutput)
        ];
        let layer = (0u64..5000, 0.0f64..4.0, reads)
            .prop_map(|(bytes, cost, reads)| Layer::new(bytes, cost).with_backward_reads(reads));
        (0u64..5000, prop::collection::vec(layer, 1..40))
            .prop_map(|(input, layers)| Chain::new(input, layers).unwrap())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        #[test]
        fn the_walk_finds_the_figures_and_checkpoints_of_the_built_schedule(
            chain in chains(),
            seed in any::<u64>(),
        ) {
            let n = chain.layer_count();
            let keep: Vec<bool> = (0..n).map(|i| (seed >> (i % 64)) & 1 == 1).collect();
            let schedule = Schedule::build(&chain, &keep);
            let mut evaluator = Evaluator::new(&chain);
            let mut checkpoints = vec![7];
            // Twice: the scratch space carries nothing from one plan to the next.
            for _ in 0..2 {
                let evaluation = evaluator.evaluate(&keep, Some(&mut checkpoints));
                prop_assert_eq!(evaluation, Evaluator::of_schedule(&schedule));
                prop_assert_eq!(&checkpoints, schedule.checkpoints());
                let all = evaluator.evaluate(&vec![true; n], Some(&mut checkpoints));
                let all_schedule = Schedule::build(&chain, &vec![true; n]);
                prop_assert_eq!(all, Evaluator::of_schedule(&all_schedule));
                prop_assert_eq!(&checkpoints, all_schedule.checkpoints());
            }
        }
    }
}
