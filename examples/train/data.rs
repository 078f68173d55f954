//! The synthetic regression set and the random numbers behind it and behind the weights: all a
//! function of a seed, so every run (and every checkpointing policy) trains on the same data
//! from the same start.

/// A small deterministic generator (splitmix64): enough for weights and data, the same on
/// every machine.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [−1, 1), on a grid of 2⁻²³.
    pub fn symmetric(&mut self) -> f32 {
        // The top 24 bits: exactly representable in an f32.
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// One minibatch: inputs `[batch, inputs]` and targets `[batch, outputs]`, row-major.
pub struct Batch {
    pub inputs: Vec<f32>,
    pub targets: Vec<f32>,
}

/// `batches` minibatches of `batch` samples: inputs uniform in [−1, 1]ⁿ, and targets from a
/// smooth teacher, `t_k = sin(a_k · x + c_k)`, with `a_k` scaled so that `a_k · x` has a
/// standard deviation of about 1 whatever the input width (targets that vary, but slowly
/// enough for a small network to fit).
pub fn regression_set(
    seed: u64,
    batches: usize,
    batch: usize,
    inputs: usize,
    outputs: usize,
) -> Vec<Batch> {
    let mut rng = Rng::new(seed);
    // x and a are uniform in [−1, 1] (variance 1/3 each), so a · x has variance n/9.
    let scale = 3.0 / (inputs as f32).sqrt();
    let teacher: Vec<f32> = (0..outputs * inputs)
        .map(|_| scale * rng.symmetric())
        .collect();
    let phases: Vec<f32> = (0..outputs).map(|_| rng.symmetric()).collect();
    (0..batches)
        .map(|_| {
            let inputs_of_batch: Vec<f32> = (0..batch * inputs).map(|_| rng.symmetric()).collect();
            let targets = inputs_of_batch
                .chunks_exact(inputs)
                .flat_map(|x| {
                    teacher
                        .chunks_exact(inputs)
                        .zip(&phases)
                        .map(|(a, c)| (a.iter().zip(x).map(|(a, x)| a * x).sum::<f32>() + c).sin())
                        .collect::<Vec<f32>>()
                })
                .collect();
            Batch {
                inputs: inputs_of_batch,
                targets,
            }
        })
        .collect()
}
