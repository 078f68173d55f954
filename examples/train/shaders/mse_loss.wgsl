// losses[slot] = mean((y − t)²): one invocation sums every element in order, so the loss has
// the same bits on every run (the arrays are a batch of predictions, small).
@group(0) @binding(0) var<uniform> slot: u32;
@group(0) @binding(1) var<storage, read> y: array<f32>;
@group(0) @binding(2) var<storage, read> t: array<f32>;
@group(0) @binding(3) var<storage, read_write> losses: array<f32>;

@compute @workgroup_size(1)
fn main() {
    let n = arrayLength(&y);
    var sum = 0.0;
    for (var o = 0u; o < n; o = o + 1u) {
        let e = y[o] - t[o];
        sum = sum + e * e;
    }
    losses[slot] = sum / f32(n);
}
