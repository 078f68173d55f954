//! Random sequences of public operations on one context on the test machine's GPU (lavapipe in
//! CI), with random and hostile arguments, against a host model: puts, gets, upload
//! batches, `dynamic_update_slice` (donated and copying, device and host updates),
//! `dynamic_slice`, `fill`/`zeros`/`fill_in_place`, `copy`, scoped transfer guards made and
//! dropped in any order, drops, `synchronize`, and the switch between host copies and WGSL
//! kernels. Every call must return what the model predicts (a result equal to the model's, a
//! shape or argument error, or the guard's refusal), nothing may panic, and once everything is
//! dropped and the context synchronized, no byte is in use.

use crate::harness;
use gpu_arena::{
    Context, DeviceArray, Error, TransferDirection, TransferGuard, TransferGuardLevel,
    MAX_ARRAY_SPAN_BYTES, MAX_RANK,
};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// Element type of every array: two bytes, so the byte, word and `vec4` paths all occur.
type Elem = u16;

/// Cases per run and operations per case: a few seconds on lavapipe, so CI stays fast.
const CASES: u32 = 64;
const MAX_OPS: usize = 40;

/// Shapes the ops are asked for.
#[derive(Clone, Debug)]
enum ShapeGen {
    /// Rank 0 to 3, dimensions 0 to 5.
    Small(Vec<usize>),
    /// Something no array may have, or nearly.
    Hostile(Vec<usize>),
}

impl ShapeGen {
    fn dims(&self) -> &[usize] {
        match self {
            ShapeGen::Small(s) | ShapeGen::Hostile(s) => s,
        }
    }
}

fn shape() -> impl Strategy<Value = ShapeGen> {
    prop_oneof![
        9 => proptest::collection::vec(0..=5usize, 0..=3).prop_map(ShapeGen::Small),
        1 => prop_oneof![
            Just(vec![0, usize::MAX]),
            Just(vec![usize::MAX, 2]),
            Just(vec![1; MAX_RANK + 1]),
            Just(vec![0, 1 << 62, 4]),
            Just(vec![0, MAX_ARRAY_SPAN_BYTES as usize / 2]),
            Just(vec![usize::MAX]),
        ]
        .prop_map(ShapeGen::Hostile),
    ]
}

/// Start indices: one per dimension of whatever operand they meet, or a wrong count.
#[derive(Clone, Debug)]
struct StartGen {
    values: [i64; MAX_RANK],
    wrong_len: Option<usize>,
}

fn start() -> impl Strategy<Value = StartGen> {
    let index = prop_oneof![
        Just(i64::MIN),
        Just(i64::MAX),
        -3..8i64,
        -3..8i64,
        any::<i64>()
    ];
    (
        proptest::array::uniform6(index),
        proptest::option::weighted(0.1, 0..=MAX_RANK + 1),
    )
        .prop_map(|(values, wrong_len)| StartGen { values, wrong_len })
}

impl StartGen {
    fn for_rank(&self, rank: usize) -> Vec<i64> {
        let len = self.wrong_len.unwrap_or(rank);
        (0..len).map(|d| self.values[d % MAX_RANK]).collect()
    }
}

/// A box inside the operand (each dimension a fraction of the operand's), or anything.
#[derive(Clone, Debug)]
enum BoxGen {
    Within([Index; MAX_RANK]),
    Any(ShapeGen),
}

fn boxed() -> impl Strategy<Value = BoxGen> {
    prop_oneof![
        4 => proptest::array::uniform6(any::<Index>()).prop_map(BoxGen::Within),
        1 => shape().prop_map(BoxGen::Any),
    ]
}

impl BoxGen {
    fn for_operand(&self, operand: &[usize]) -> Vec<usize> {
        match self {
            BoxGen::Within(fractions) => operand
                .iter()
                .zip(fractions)
                .map(|(&d, f)| f.index(d + 1))
                .collect(),
            BoxGen::Any(s) => s.dims().to_vec(),
        }
    }
}

#[derive(Clone, Debug)]
enum UpdateGen {
    /// Another live array.
    Device(Index),
    /// Host data of this box's shape (data one short when `short`).
    Host { shape: BoxGen, short: bool },
}

#[derive(Clone, Debug)]
enum Op {
    Put {
        shape: ShapeGen,
        short: bool,
    },
    Get {
        slot: Index,
        implicit: bool,
    },
    Batch {
        items: Vec<(ShapeGen, bool)>,
        cross_batch_ticket: bool,
    },
    UpdateSlice {
        operand: Index,
        update: UpdateGen,
        start: StartGen,
        donate: bool,
    },
    Slice {
        operand: Index,
        start: StartGen,
        sizes: BoxGen,
    },
    Fill {
        shape: ShapeGen,
        value: Option<Elem>,
    },
    FillInPlace {
        slot: Index,
        value: Elem,
    },
    Copy {
        slot: Index,
    },
    Guard {
        direction: Option<usize>,
        level: usize,
    },
    DropGuard {
        guard: Index,
    },
    Drop {
        slot: Index,
    },
    Synchronize,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (shape(), proptest::bool::weighted(0.1)).prop_map(|(shape, short)| Op::Put { shape, short }),
        2 => (any::<Index>(), any::<bool>()).prop_map(|(slot, implicit)| Op::Get { slot, implicit }),
        1 => (
            proptest::collection::vec((shape(), proptest::bool::weighted(0.1)), 0..4),
            proptest::bool::weighted(0.2)
        )
            .prop_map(|(items, cross_batch_ticket)| Op::Batch { items, cross_batch_ticket }),
        4 => (
            any::<Index>(),
            prop_oneof![
                any::<Index>().prop_map(UpdateGen::Device),
                (boxed(), proptest::bool::weighted(0.1))
                    .prop_map(|(shape, short)| UpdateGen::Host { shape, short }),
            ],
            start(),
            any::<bool>()
        )
            .prop_map(|(operand, update, start, donate)| Op::UpdateSlice { operand, update, start, donate }),
        3 => (any::<Index>(), start(), boxed())
            .prop_map(|(operand, start, sizes)| Op::Slice { operand, start, sizes }),
        2 => (shape(), proptest::option::weighted(0.8, any::<Elem>()))
            .prop_map(|(shape, value)| Op::Fill { shape, value }),
        1 => (any::<Index>(), any::<Elem>()).prop_map(|(slot, value)| Op::FillInPlace { slot, value }),
        1 => any::<Index>().prop_map(|slot| Op::Copy { slot }),
        2 => (proptest::option::of(0..3usize), 0..5usize)
            .prop_map(|(direction, level)| Op::Guard { direction, level }),
        2 => any::<Index>().prop_map(|guard| Op::DropGuard { guard }),
        2 => any::<Index>().prop_map(|slot| Op::Drop { slot }),
        1 => Just(Op::Synchronize),
    ]
}

// ----- the model -----

/// What a call must do.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Expect {
    Ok,
    /// A shape or argument error.
    Invalid,
    /// The transfer guard's refusal.
    Refused,
}

/// Checks a result's kind against the expectation.
fn outcome<T, E: std::borrow::Borrow<Error>>(
    result: &Result<T, E>,
    expect: Expect,
    what: &str,
) -> Result<(), TestCaseError> {
    match (result.as_ref().map_err(|e| e.borrow()), expect) {
        (Ok(_), Expect::Ok) => Ok(()),
        (
            Err(Error::Shape { .. } | Error::InvalidArgument { .. } | Error::Index { .. }),
            Expect::Invalid,
        ) => Ok(()),
        (Err(Error::TransferGuard { .. }), Expect::Refused) => Ok(()),
        (Ok(_), _) => Err(TestCaseError::fail(format!(
            "{what}: Ok where the model expects {expect:?}"
        ))),
        (Err(e), _) => Err(TestCaseError::fail(format!(
            "{what}: error {e} where the model expects {expect:?}"
        ))),
    }
}

/// Live scoped guards, oldest first, with what the model knows of each.
struct Guards(Vec<(TransferGuard, Option<TransferDirection>, TransferGuardLevel)>);

impl Guards {
    /// Whether a transfer passes: the newest live guard for the direction, else the context's
    /// default (allow in the test configuration), read as JAX's table.
    fn passes(&self, direction: TransferDirection, explicit: bool) -> bool {
        let level = self
            .0
            .iter()
            .rev()
            .find(|(_, d, _)| d.is_none_or(|d| d == direction))
            .map_or(TransferGuardLevel::Allow, |g| g.2);
        match level {
            TransferGuardLevel::Allow
            | TransferGuardLevel::Log
            | TransferGuardLevel::LogExplicit => true,
            TransferGuardLevel::Disallow => explicit,
            TransferGuardLevel::DisallowExplicit => false,
        }
    }

    /// `Ok` when the transfer passes, else `Refused`.
    fn expect(&self, direction: TransferDirection, explicit: bool) -> Expect {
        if self.passes(direction, explicit) {
            Expect::Ok
        } else {
            Expect::Refused
        }
    }
}

/// An array and the model's copy of it.
struct Slot {
    array: DeviceArray<Elem>,
    shape: Vec<usize>,
    data: Vec<Elem>,
}

impl Slot {
    fn new(array: DeviceArray<Elem>, shape: Vec<usize>, data: Vec<Elem>) -> Slot {
        Slot { array, shape, data }
    }
}

fn elements(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
}

/// The rules an array's shape must satisfy: rank, element count, addressable span.
fn shape_ok(shape: &[usize]) -> bool {
    let span = shape
        .iter()
        .try_fold(std::mem::size_of::<Elem>() as u64, |n, &d| {
            n.checked_mul(d.max(1) as u64)
        });
    shape.len() <= MAX_RANK
        && elements(shape).is_some()
        && span.is_some_and(|s| s <= MAX_ARRAY_SPAN_BYTES)
}

fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// Every index of a box of `sizes`, row-major.
fn box_indices(sizes: &[usize]) -> Vec<Vec<usize>> {
    let n = elements(sizes).unwrap_or(0);
    (0..n)
        .map(|mut flat| {
            let mut index = vec![0; sizes.len()];
            for d in (0..sizes.len()).rev() {
                index[d] = flat % sizes[d];
                flat /= sizes[d];
            }
            index
        })
        .collect()
}

fn offset(strides: &[usize], index: &[usize], start: &[usize]) -> usize {
    strides
        .iter()
        .zip(index)
        .zip(start)
        .map(|((s, i), o)| s * (i + o))
        .sum()
}

/// XLA's clamp, in i128 so that no input overflows it.
fn clamp(start: &[i64], operand: &[usize], sizes: &[usize]) -> Vec<usize> {
    start
        .iter()
        .zip(operand.iter().zip(sizes))
        .map(|(&s, (&d, &z))| (s as i128).clamp(0, d as i128 - z as i128) as usize)
        .collect()
}

/// Whether a box of `sizes` at `start` is a valid slice or update of `operand`.
fn box_ok(operand: &[usize], sizes: &[usize], start: &[i64]) -> bool {
    sizes.len() == operand.len()
        && start.len() == operand.len()
        && sizes.iter().zip(operand).all(|(s, d)| s <= d)
}

fn values(seed: usize, n: usize) -> Vec<Elem> {
    (0..n)
        .map(|i| (seed.wrapping_mul(7919).wrapping_add(i * 31)) as Elem)
        .collect()
}

/// Reads an array back whatever guards are live (an `allow` guard of its own, made and dropped
/// here, which also exercises guards dropped out of order).
fn read(ctx: &Context, array: &DeviceArray<Elem>) -> Result<Vec<Elem>, TestCaseError> {
    let _allow = TransferGuard::scoped(TransferGuardLevel::Allow);
    ctx.device_get(array)
        .map_err(|e| TestCaseError::fail(format!("reading back: {e}")))
}

fn check_equal(ctx: &Context, slot: &Slot, what: &str) -> Result<(), TestCaseError> {
    prop_assert_eq!(slot.array.shape(), &slot.shape[..], "{} shape", what);
    let got = read(ctx, &slot.array)?;
    prop_assert!(
        got == slot.data,
        "{}: device {:?} != model {:?}",
        what,
        got,
        slot.data
    );
    Ok(())
}

/// Checks a new or updated array against the model and keeps it, at `at` or at the end.
fn keep(
    ctx: &Context,
    slots: &mut Vec<Slot>,
    at: Option<usize>,
    slot: Slot,
    what: &str,
) -> Result<(), TestCaseError> {
    check_equal(ctx, &slot, what)?;
    match at {
        Some(i) => slots.insert(i, slot),
        None => slots.push(slot),
    }
    Ok(())
}

/// The operand an op picks, its shape, and the start indices for its rank.
fn operand_and_start(
    slots: &[Slot],
    operand: &Index,
    start: &StartGen,
) -> Option<(usize, Vec<usize>, Vec<i64>)> {
    let i = pick(slots, operand)?;
    let shape = slots[i].shape.clone();
    let start = start.for_rank(shape.len());
    Some((i, shape, start))
}

fn pick(slots: &[Slot], index: &Index) -> Option<usize> {
    (!slots.is_empty()).then(|| index.index(slots.len()))
}

/// Runs one sequence; the context is shared by all cases.
fn run(ctx: &Context, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut slots: Vec<Slot> = Vec::new();
    let mut guards = Guards(Vec::new());
    let h2d = TransferDirection::HostToDevice;
    let d2h = TransferDirection::DeviceToHost;
    let d2d = TransferDirection::DeviceToDevice;
    for (step, op) in ops.into_iter().enumerate() {
        let what = format!("step {step} {op:?}");
        match op {
            Op::Put { shape, short } => {
                let dims = shape.dims().to_vec();
                let n = elements(&dims).unwrap_or(1);
                let len = if short {
                    n.saturating_sub(1).min(64)
                } else {
                    n.min(4096)
                };
                let data = values(step, len);
                let expect = if shape_ok(&dims) && len == n {
                    guards.expect(h2d, true)
                } else {
                    Expect::Invalid
                };
                let result = ctx.device_put(&data, &dims);
                outcome(&result, expect, &what)?;
                if let Ok(array) = result {
                    keep(ctx, &mut slots, None, Slot::new(array, dims, data), &what)?;
                }
            }
            Op::Get { slot, implicit } => {
                let Some(i) = pick(&slots, &slot) else {
                    continue;
                };
                let expect = guards.expect(d2h, !implicit);
                let result = if implicit {
                    slots[i].array.to_vec()
                } else {
                    ctx.device_get(&slots[i].array)
                };
                outcome(&result, expect, &what)?;
                if let Ok(got) = result {
                    prop_assert!(
                        got == slots[i].data,
                        "{}: {:?} != {:?}",
                        what,
                        got,
                        slots[i].data
                    );
                }
            }
            Op::Batch {
                items,
                cross_batch_ticket,
            } => {
                let data: Vec<(Vec<usize>, Vec<Elem>)> = items
                    .iter()
                    .enumerate()
                    .map(|(k, (shape, short))| {
                        let dims = shape.dims().to_vec();
                        let n = elements(&dims).unwrap_or(1);
                        let len = if *short {
                            n.saturating_sub(1).min(64)
                        } else {
                            n.min(4096)
                        };
                        (dims, values(step * 10 + k, len))
                    })
                    .collect();
                let mut batch = ctx.upload_batch();
                let mut pending = Vec::new();
                for (k, (dims, values)) in data.iter().enumerate() {
                    let expect = if shape_ok(dims) && values.len() == elements(dims).unwrap_or(0) {
                        guards.expect(h2d, true)
                    } else {
                        Expect::Invalid
                    };
                    let result = batch.put(values, dims);
                    outcome(&result, expect, &format!("{what} item {k}"))?;
                    if let Ok(ticket) = result {
                        pending.push((ticket, k));
                    }
                }
                prop_assert_eq!(batch.len(), pending.len());
                let mut finished = batch
                    .finish()
                    .map_err(|e| TestCaseError::fail(format!("{what}: finish: {e}")))?;
                let mut pending = pending.into_iter();
                if cross_batch_ticket {
                    if let Some((ticket, _)) = pending.next() {
                        // A ticket redeemed at another batch is refused and its array, never
                        // taken, is freed with `finished` (checked by the byte count at the end).
                        let mut other = ctx
                            .upload_batch()
                            .finish()
                            .map_err(|e| TestCaseError::fail(format!("{what}: {e}")))?;
                        let result = other.take(ticket);
                        outcome(&result, Expect::Invalid, &what)?;
                    }
                }
                for (ticket, k) in pending {
                    let array = finished
                        .take(ticket)
                        .map_err(|e| TestCaseError::fail(format!("{what}: take: {e}")))?;
                    let (shape, data) = data[k].clone();
                    keep(ctx, &mut slots, None, Slot::new(array, shape, data), &what)?;
                }
            }
            Op::UpdateSlice {
                operand,
                update,
                start,
                donate,
            } => {
                let Some((i, op_shape, start)) = operand_and_start(&slots, &operand, &start) else {
                    continue;
                };
                // The update's shape and data, and whether it is host data.
                let (up_shape, up_data, host) = match &update {
                    UpdateGen::Device(j) => {
                        let j = j.index(slots.len());
                        if donate && j == i {
                            continue; // an array cannot be donated and borrowed at once
                        }
                        (slots[j].shape.clone(), slots[j].data.clone(), None)
                    }
                    UpdateGen::Host { shape, short } => {
                        let dims = shape.for_operand(&op_shape);
                        let n = elements(&dims).unwrap_or(1);
                        let len = if *short {
                            n.saturating_sub(1).min(64)
                        } else {
                            n.min(4096)
                        };
                        let data = values(step, len);
                        (dims.clone(), data.clone(), Some((data, dims)))
                    }
                };
                let valid = box_ok(&op_shape, &up_shape, &start)
                    && host.as_ref().is_none_or(|(data, dims)| {
                        shape_ok(dims) && elements(dims) == Some(data.len())
                    });
                let expect = match (&host, valid) {
                    (_, false) => Expect::Invalid,
                    (Some(_), true) => guards.expect(h2d, false),
                    (None, true) => Expect::Ok,
                };
                let mut model = slots[i].data.clone();
                if valid {
                    let at = clamp(&start, &op_shape, &up_shape);
                    let (so, su) = (strides(&op_shape), strides(&up_shape));
                    let zero = vec![0; up_shape.len()];
                    for index in box_indices(&up_shape) {
                        model[offset(&so, &index, &at)] = up_data[offset(&su, &index, &zero)];
                    }
                }
                if donate {
                    let slot = slots.remove(i);
                    let before = slot.data.clone();
                    let result = match (&update, &host) {
                        (UpdateGen::Device(j), _) => {
                            // `i` was removed: the update's index shifts past it.
                            let j = j.index(slots.len() + 1);
                            let j = if j > i { j - 1 } else { j };
                            ctx.dynamic_update_slice(slot.array, &slots[j].array, &start)
                        }
                        (_, Some((data, dims))) => {
                            ctx.dynamic_update_slice(slot.array, (&data[..], &dims[..]), &start)
                        }
                        _ => unreachable!(),
                    };
                    let result = result.map_err(|donated| (donated.error, donated.array));
                    outcome(&result.as_ref().map_err(|(e, _)| e), expect, &what)?;
                    // On error the donated operand comes back intact.
                    let (array, data) = match result {
                        Ok(array) => (array, model),
                        Err((_, array)) => (array, before),
                    };
                    let slot = Slot::new(array, op_shape, data);
                    keep(ctx, &mut slots, Some(i), slot, &what)?;
                } else {
                    let result = match (&update, &host) {
                        (UpdateGen::Device(j), _) => {
                            let j = j.index(slots.len());
                            ctx.dynamic_update_slice_copy(&slots[i].array, &slots[j].array, &start)
                        }
                        (_, Some((data, dims))) => ctx.dynamic_update_slice_copy(
                            &slots[i].array,
                            (&data[..], &dims[..]),
                            &start,
                        ),
                        _ => unreachable!(),
                    };
                    outcome(&result, expect, &what)?;
                    // The operand is untouched.
                    check_equal(ctx, &slots[i], &what)?;
                    if let Ok(array) = result {
                        keep(
                            ctx,
                            &mut slots,
                            None,
                            Slot::new(array, op_shape, model),
                            &what,
                        )?;
                    }
                }
            }
            Op::Slice {
                operand,
                start,
                sizes,
            } => {
                let Some((i, op_shape, start)) = operand_and_start(&slots, &operand, &start) else {
                    continue;
                };
                let sizes = sizes.for_operand(&op_shape);
                let valid = box_ok(&op_shape, &sizes, &start);
                let result = ctx.dynamic_slice(&slots[i].array, &start, &sizes);
                outcome(
                    &result,
                    if valid { Expect::Ok } else { Expect::Invalid },
                    &what,
                )?;
                if let Ok(array) = result {
                    let at = clamp(&start, &op_shape, &sizes);
                    let so = strides(&op_shape);
                    let data = box_indices(&sizes)
                        .iter()
                        .map(|index| slots[i].data[offset(&so, index, &at)])
                        .collect();
                    keep(ctx, &mut slots, None, Slot::new(array, sizes, data), &what)?;
                }
            }
            Op::Fill { shape, value } => {
                let dims = shape.dims().to_vec();
                let expect = if shape_ok(&dims) {
                    Expect::Ok
                } else {
                    Expect::Invalid
                };
                let result = match value {
                    Some(v) => ctx.fill(&dims, v),
                    None => ctx.zeros(&dims),
                };
                outcome(&result, expect, &what)?;
                if let Ok(array) = result {
                    let n = elements(&dims).unwrap_or(0);
                    keep(
                        ctx,
                        &mut slots,
                        None,
                        Slot::new(array, dims, vec![value.unwrap_or(0); n]),
                        &what,
                    )?;
                }
            }
            Op::FillInPlace { slot, value } => {
                let Some(i) = pick(&slots, &slot) else {
                    continue;
                };
                let Slot { array, shape, data } = slots.remove(i);
                let result = ctx.fill_in_place(array, value).map_err(|d| d.error);
                outcome(&result, Expect::Ok, &what)?;
                if let Ok(array) = result {
                    keep(
                        ctx,
                        &mut slots,
                        Some(i),
                        Slot::new(array, shape, vec![value; data.len()]),
                        &what,
                    )?;
                }
            }
            Op::Copy { slot } => {
                let Some(i) = pick(&slots, &slot) else {
                    continue;
                };
                let result = ctx.copy(&slots[i].array);
                outcome(&result, guards.expect(d2d, true), &what)?;
                if let Ok(array) = result {
                    let (shape, data) = (slots[i].shape.clone(), slots[i].data.clone());
                    keep(ctx, &mut slots, None, Slot::new(array, shape, data), &what)?;
                }
            }
            Op::Guard { direction, level } => {
                let direction = direction.map(|d| TransferDirection::ALL[d]);
                let level = TransferGuardLevel::ALL[level];
                let guard = match direction {
                    Some(d) => TransferGuard::scoped_direction(d, level),
                    None => TransferGuard::scoped(level),
                };
                guards.0.push((guard, direction, level));
            }
            Op::DropGuard { guard } => {
                if !guards.0.is_empty() {
                    let at = guard.index(guards.0.len());
                    drop(guards.0.remove(at));
                }
            }
            Op::Drop { slot } => {
                if let Some(i) = pick(&slots, &slot) {
                    drop(slots.remove(i));
                }
            }
            Op::Synchronize => ctx
                .synchronize()
                .map_err(|e| TestCaseError::fail(format!("{what}: {e}")))?,
        }
    }
    // Everything still alive matches the model; then nothing is left in use.
    for (k, slot) in slots.iter().enumerate() {
        check_equal(ctx, slot, &format!("at the end, array {k}"))?;
    }
    drop(slots);
    drop(guards);
    ctx.synchronize()
        .map_err(|e| TestCaseError::fail(format!("synchronize: {e}")))?;
    let stats = ctx.memory_stats();
    prop_assert_eq!(
        stats.bytes_in_use,
        0,
        "bytes in use after dropping everything"
    );
    Ok(())
}

#[gpu_test]
fn random_sequences_of_public_operations_match_a_host_model() {
    // Each case runs where the adapter chooses (on a CPU adapter, ops on idle mapped arrays
    // copy on the host) or with the WGSL kernels forced.
    let contexts = [
        harness::context(),
        harness::context_with(gpu_arena::ArenaConfig {
            force_device_kernels: true,
            ..harness::test_config()
        }),
    ];
    let mut runner = TestRunner::new(Config {
        cases: CASES,
        failure_persistence: None,
        ..Config::default()
    });
    let cases = (any::<bool>(), proptest::collection::vec(op(), 1..=MAX_OPS));
    let result = runner.run(&cases, |(forced, ops)| {
        run(&contexts[usize::from(forced)], ops)
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
}
