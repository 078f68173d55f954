//! Several threads sharing one context run random public operations (single launches, the
//! library's single ops, gathered and flushed, sequences submitted or dropped, upload batches,
//! reads, drops) on
//! their own arrays and on one array they all read, each checked against a host model: no
//! refusal but the recording model's own (a single op over an array pending in an unsubmitted
//! sequence), no wrong result, and no memory in use once everything is dropped.

use crate::harness::{context_with, test_config, Rng};
use gpu_arena::{ArenaConfig, Context, DeviceArray, Kernel};

/// `a[i] = a[i] + x[i] + p`.
const ADD_FROM: &str = r#"
@group(0) @binding(0) var<uniform> p: u32;
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read_write> a: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < arrayLength(&a)) { a[id.x] = a[id.x] + x[id.x] + p; }
}
"#;

const LEN: usize = 96;
const THREADS: u64 = 3;
const OPS_PER_THREAD: usize = 400;
const MAX_ARRAYS: usize = 6;

fn add_from(a: &mut [u32], x: &[u32], p: u32) {
    for (a, x) in a.iter_mut().zip(x) {
        *a = a.wrapping_add(*x).wrapping_add(p);
    }
}

fn random_data(rng: &mut Rng) -> Vec<u32> {
    (0..LEN).map(|_| rng.below(1000) as u32).collect()
}

/// One thread's run: returns how many refusals it saw where the model expects one.
fn run_thread(
    ctx: &Context,
    kernel: &Kernel,
    shared: &DeviceArray<u32>,
    shared_data: &[u32],
    seed: u64,
) -> usize {
    let mut rng = Rng(seed);
    let mut own: Vec<(DeviceArray<u32>, Vec<u32>)> = Vec::new();
    let mut expected_refusals = 0;
    for step in 0..OPS_PER_THREAD {
        let what = if own.is_empty() { 0 } else { rng.below(11) };
        let i = rng.below(own.len().max(1) as u64) as usize;
        let case = format!("thread seed {seed}, step {step}, op {what}");
        match what {
            0 => {
                if own.len() < MAX_ARRAYS {
                    let data = random_data(&mut rng);
                    own.push((ctx.device_put(&data, &[LEN]).expect(&case), data));
                }
            }
            1 => {
                let p = rng.below(10) as u32;
                let (a, model) = &mut own[i];
                ctx.launch(kernel)
                    .params(&p)
                    .arg(shared)
                    .arg_mut(a)
                    .grid_for(LEN as u64)
                    .run()
                    .expect(&case);
                add_from(model, shared_data, p);
            }
            2 => {
                let (a, model) = &own[i];
                assert_eq!(&ctx.device_get(a).expect(&case), model, "{case}");
            }
            3 => match rng.below(3) {
                0 => assert_eq!(ctx.device_get(shared).expect(&case), shared_data, "{case}"),
                1 => assert_eq!(
                    ctx.copy(shared).expect(&case).to_vec().expect(&case),
                    shared_data,
                    "{case}"
                ),
                _ => {
                    let start = rng.below(LEN as u64) as usize;
                    let part = ctx
                        .dynamic_slice(shared, &[start as i64], &[8])
                        .expect(&case);
                    let start = start.min(LEN - 8);
                    assert_eq!(
                        part.to_vec().expect(&case),
                        &shared_data[start..start + 8],
                        "{case}"
                    );
                }
            },
            4 => {
                if own.len() < MAX_ARRAYS {
                    let copy = ctx.copy(&own[i].0).expect(&case);
                    let data = own[i].1.clone();
                    own.push((copy, data));
                }
            }
            5 => {
                let value = rng.below(1 << 20) as u32;
                let (a, model) = own.swap_remove(i);
                let a = ctx.fill_in_place(a, value).expect(&case);
                own.push((a, vec![value; model.len()]));
            }
            6 => {
                let start = rng.below(LEN as u64) as usize;
                let update: Vec<u32> = (0..5).map(|_| rng.below(100) as u32).collect();
                let (a, mut model) = own.swap_remove(i);
                let a = ctx
                    .dynamic_update_slice(a, &update[..], &[start as i64])
                    .expect(&case);
                let start = start.min(LEN - 5);
                model[start..start + 5].copy_from_slice(&update);
                own.push((a, model));
            }
            7 => {
                // A sequence: a put, a launch over it and an existing array, a host update of
                // that array, then a single op on it (refused: it is pending), then submit or
                // drop. The shared array stays out: pending here, others' reads would be
                // refused, as the model says.
                let mut s = ctx.sequence();
                let data = random_data(&mut rng);
                let fresh = s.put(&data, &[LEN]).expect(&case);
                let p = rng.below(10) as u32;
                let start = rng.below(LEN as u64) as usize;
                let update: Vec<u32> = (0..5).map(|_| rng.below(100) as u32).collect();
                let (mut a, mut model) = own.swap_remove(i);
                s.launch(kernel)
                    .params(&p)
                    .arg(&fresh)
                    .arg_mut(&mut a)
                    .grid_for(LEN as u64)
                    .run()
                    .expect(&case);
                let a = s
                    .dynamic_update_slice(a, &update[..], &[start as i64])
                    .expect(&case);
                let refused = ctx.device_get(&a).expect_err(&case).to_string();
                assert!(
                    refused.contains("pending in Sequence #"),
                    "{case}: {refused}"
                );
                expected_refusals += 1;
                if rng.below(5) > 0 {
                    s.submit().expect(&case);
                    add_from(&mut model, &data, p);
                    let start = start.min(LEN - 5);
                    model[start..start + 5].copy_from_slice(&update);
                    own.push((a, model));
                    if own.len() < MAX_ARRAYS {
                        own.push((fresh, data));
                    }
                } else {
                    drop(s);
                    own.push((a, model));
                }
            }
            8 => {
                let mut batch = ctx.upload_batch();
                let first = random_data(&mut rng);
                let second = random_data(&mut rng);
                let pending = vec![
                    batch.put(&first, &[LEN]).expect(&case),
                    batch.put(&second, &[LEN]).expect(&case),
                ];
                let arrays = batch.finish().expect(&case).take_all(pending).expect(&case);
                for (array, data) in arrays.into_iter().zip([first, second]) {
                    if own.len() < MAX_ARRAYS {
                        own.push((array, data));
                    }
                }
            }
            9 => {
                let start = rng.below(LEN as u64) as usize;
                let (a, model) = &own[i];
                let part = ctx.dynamic_slice(a, &[start as i64], &[7]).expect(&case);
                let start = start.min(LEN - 7);
                assert_eq!(
                    part.to_vec().expect(&case),
                    &model[start..start + 7],
                    "{case}"
                );
            }
            _ => {
                // Sometimes the gathered single ops go out first, sometimes the drop comes
                // while they are still gathered.
                if rng.below(2) == 0 {
                    ctx.flush().expect(&case);
                }
                own.swap_remove(i);
            }
        }
    }
    for (a, model) in &own {
        assert_eq!(
            &ctx.device_get(a).unwrap(),
            model,
            "seed {seed}: final state"
        );
    }
    expected_refusals
}

fn threads_share_one_context(config: ArenaConfig) {
    let ctx = context_with(config);
    let kernel = ctx.kernel(ADD_FROM, "main").unwrap();
    let shared_data: Vec<u32> = (0..LEN as u32).map(|i| i * 3 + 1).collect();
    let shared = ctx.device_put(&shared_data, &[LEN]).unwrap();
    let refusals: usize = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (ctx, kernel, shared, shared_data) = (&ctx, &kernel, &shared, &shared_data);
                scope.spawn(move || run_thread(ctx, kernel, shared, shared_data, 1000 + t))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert!(refusals > 0, "the model's own refusals were exercised");
    drop(shared);
    ctx.synchronize().unwrap();
    assert_eq!(ctx.memory_stats().bytes_in_use, 0, "everything was dropped");
}

#[gpu_test]
fn threads_sharing_a_context_run_random_operations_as_the_host_model_says() {
    threads_share_one_context(test_config());
}

#[gpu_test]
fn threads_sharing_a_context_run_random_operations_as_the_host_model_says_without_zero_copy() {
    threads_share_one_context(ArenaConfig {
        zero_copy: false,
        ..test_config()
    });
}
