//! The rank program of `tests/distributed.rs`: each scenario runs under
//! `mpirun -np N target/release/examples/mpi_checks SCENARIO` and prints one line per rank
//! that the test reads (`PASS`, `COLLECTIVE`, `LOCAL`), exiting non-zero on any failed check.
//!
//! Scenarios: `collectives` (every collective, every element type, against a host reference),
//! `mismatch-shape`, `mismatch-type`, `mismatch-op`, `mismatch-root`, `mismatch-kind`,
//! `mismatch-send`, `guard`, `refusals`, `pending`, `threads`, `abort`, `killed`.

use anyhow::{bail, ensure, Context as _};
use gpu_arena::distributed::{self, abort_on_error, CollectiveElement, Collectives, ReduceOp};
use gpu_arena::{Context, DeviceArray, Error, TransferGuard, TransferGuardLevel};
use lexopt::prelude::*;

#[path = "flags/mod.rs"]
mod flags;

const USAGE: &str = "usage: mpi_checks SCENARIO

The rank program of tests/distributed.rs, run under mpirun. SCENARIO is one of:
collectives, mismatch-shape, mismatch-type, mismatch-op, mismatch-root, mismatch-kind,
mismatch-send, guard, refusals, pending, threads, abort, killed.
  -h, --help    this text";

fn main() -> anyhow::Result<()> {
    let scenario = flags::parse_or_exit(USAGE, |parser| {
        let mut scenario = None;
        while let Some(arg) = parser.next()? {
            match arg {
                Value(value) if scenario.is_none() => scenario = Some(value.string()?),
                Short('h') | Long("help") => return Ok(None),
                _ => return Err(arg.unexpected()),
            }
        }
        Ok(Some(scenario.unwrap_or_default()))
    });
    let universe = distributed::init()?;
    let world = universe.world();
    let ctx = abort_on_error(&world, Context::from_env());
    let group = Collectives::new(&ctx, &world);
    let rank = group.rank();
    let result = match scenario.as_str() {
        "collectives" => collectives(&group),
        "mismatch-shape" | "mismatch-type" | "mismatch-op" | "mismatch-root" | "mismatch-kind"
        | "mismatch-send" => mismatch(&group, &scenario),
        "guard" => guard(&group),
        "refusals" => refusals(&group),
        "pending" => pending(&group),
        "threads" => threads(&group),
        "abort" => abort(&group),
        "killed" => killed(&group),
        other => Err(anyhow::anyhow!("unknown scenario {other:?}")),
    };
    match result {
        Ok(()) => {
            println!("PASS {scenario} rank {rank}");
            Ok(())
        }
        Err(error) => {
            println!("FAIL {scenario} rank {rank}: {error:#}");
            std::process::exit(1)
        }
    }
}

/// Rank `rank`'s value at index `i`: small integers, so sums and products are exact in every
/// element type and in every order.
fn value<T: CollectiveElement + From<u8>>(rank: usize, i: usize) -> T {
    T::from(((rank * 7 + i * 3) % 3 + 1) as u8)
}

fn host<T: CollectiveElement + From<u8>>(rank: usize, len: usize) -> Vec<T> {
    (0..len).map(|i| value::<T>(rank, i)).collect()
}

trait Arith:
    CollectiveElement + From<u8> + PartialEq + PartialOrd + std::fmt::Debug + Send + Sync + 'static
{
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
}
macro_rules! arith {
    ($($t:ty),*) => {$(impl Arith for $t {
        fn add(self, o: Self) -> Self { self + o }
        fn mul(self, o: Self) -> Self { self * o }
    })*};
}
arith!(f32, f64, i32, u32, i64, u64);

fn reference<T: Arith>(ranks: usize, len: usize, op: ReduceOp) -> Vec<T> {
    (0..len)
        .map(|i| {
            let mut acc = value::<T>(0, i);
            for r in 1..ranks {
                let v = value::<T>(r, i);
                acc = match op {
                    ReduceOp::Sum => acc.add(v),
                    ReduceOp::Product => acc.mul(v),
                    ReduceOp::Min => {
                        if v < acc {
                            v
                        } else {
                            acc
                        }
                    }
                    ReduceOp::Max => {
                        if v > acc {
                            v
                        } else {
                            acc
                        }
                    }
                };
            }
            acc
        })
        .collect()
}

/// Every collective on `T` over arrays of `len` elements (shape `[ranks * rows, cols]`).
fn check_type<T: Arith>(group: &Collectives, rows: usize, cols: usize) -> anyhow::Result<()> {
    let ctx = group.context();
    let (rank, ranks) = (group.rank(), group.size());
    let shape = [ranks * rows, cols];
    let len = ranks * rows * cols;
    let name = T::NAME;
    for op in ReduceOp::ALL {
        let a = ctx.device_put(&host::<T>(rank, len), &shape)?;
        let a = group.all_reduce(a, op)?;
        ensure!(a.shape() == shape, "all_reduce changed the shape");
        ensure!(
            ctx.device_get(&a)? == reference::<T>(ranks, len, op),
            "all_reduce({}) of {name} differs from the host reference",
            op.name()
        );
        let a = ctx.device_put(&host::<T>(rank, len), &shape)?;
        let block = group.reduce_scatter(&a, op)?;
        let full = reference::<T>(ranks, len, op);
        let mine = &full[rank * rows * cols..(rank + 1) * rows * cols];
        ensure!(
            block.shape() == [rows, cols],
            "reduce_scatter shape {:?}",
            block.shape()
        );
        ensure!(
            ctx.device_get(&block)? == mine,
            "reduce_scatter({}) of {name} differs from the host reference",
            op.name()
        );
    }
    let a = ctx.device_put(&host::<T>(rank, len), &shape)?;
    let gathered = group.all_gather(&a)?;
    ensure!(
        gathered.shape() == [ranks, ranks * rows, cols],
        "all_gather shape"
    );
    let expected: Vec<T> = (0..ranks).flat_map(|r| host::<T>(r, len)).collect();
    ensure!(
        ctx.device_get(&gathered)? == expected,
        "all_gather of {name} differs"
    );
    let root = ranks - 1;
    let a = ctx.device_put(&host::<T>(rank, len), &shape)?;
    let a = group.broadcast(a, root)?;
    ensure!(
        ctx.device_get(&a)? == host::<T>(root, len),
        "broadcast of {name} differs"
    );
    // A chain 0 → 1 → ... → last: every rank but the first receives, every one but the last sends.
    let mut a = ctx.device_put(&host::<T>(rank, len), &shape)?;
    if rank > 0 {
        a = group.recv(a, rank - 1)?;
        ensure!(
            ctx.device_get(&a)? == host::<T>(0, len),
            "recv of {name} differs"
        );
    }
    if rank + 1 < ranks {
        group.send(&a, rank + 1)?;
    }
    group.barrier()?;
    Ok(())
}

fn collectives(group: &Collectives) -> anyhow::Result<()> {
    let ctx = group.context();
    let before = ctx.transfer_stats();
    check_type::<f32>(group, 3, 5)?;
    check_type::<f64>(group, 2, 7)?;
    check_type::<i32>(group, 4, 1)?;
    check_type::<u32>(group, 1, 9)?;
    check_type::<i64>(group, 2, 3)?;
    check_type::<u64>(group, 3, 3)?;
    // Several pipeline chunks and a partial last one.
    let chunk = distributed::PIPELINE_CHUNK_BYTES as usize / 4;
    let big = chunk * 5 / 2 / group.size() + 13;
    check_type::<f32>(group, 1, big)?;
    check_type::<u64>(group, 1, big / 3)?;
    // Empty arrays take part like any other.
    check_type::<f32>(group, 0, 4)?;
    // The mean, in f32 and f64.
    let (rank, ranks) = (group.rank(), group.size());
    let a = ctx.device_put(&host::<f64>(rank, 1000), &[1000])?;
    let a = group.all_reduce_mean(a)?;
    let mean: Vec<f64> = reference::<f64>(ranks, 1000, ReduceOp::Sum)
        .iter()
        .map(|s| s / ranks as f64)
        .collect();
    ensure!(
        ctx.device_get(&a)? == mean,
        "all_reduce_mean of f64 differs"
    );
    let a = ctx.device_put(&host::<f32>(rank, big), &[big])?;
    let a = group.all_reduce_mean(a)?;
    let mean: Vec<f32> = reference::<f32>(ranks, big, ReduceOp::Sum)
        .iter()
        .map(|s| s / ranks as f32)
        .collect();
    ensure!(
        ctx.device_get(&a)? == mean,
        "all_reduce_mean of f32 differs"
    );
    // Counted as explicit transfers both ways; host buffers bounded by three chunks.
    let after = ctx.transfer_stats();
    ensure!(
        after.device_to_host.explicit.count > before.device_to_host.explicit.count
            && after.host_to_device.explicit.bytes > before.host_to_device.explicit.bytes,
        "collectives were not counted as transfers: {before:?} -> {after:?}"
    );
    let peak = group.host_bytes_peak();
    ensure!(
        peak <= 3 * distributed::PIPELINE_CHUNK_BYTES,
        "host buffers of {peak} bytes, above three chunks"
    );
    println!(
        "rank {rank}: host_bytes_peak {peak} zero_copy {} in_place {} library {:?}",
        ctx.config().zero_copy,
        group.reduces_in_place(),
        distributed::mpi::environment::library_version()
            .unwrap_or_default()
            .trim_end_matches('\0')
            .lines()
            .next()
            .unwrap_or_default()
    );
    Ok(())
}

/// Prints what a collective error said, or fails when there was none.
fn expect_collective<V>(rank: usize, result: Result<V, Error>) -> anyhow::Result<()> {
    match result {
        Err(Error::Collective { operation, reason }) => {
            println!("COLLECTIVE rank {rank} {operation}: {reason}");
            Ok(())
        }
        Err(other) => bail!("expected Error::Collective, got {other}"),
        Ok(_) => bail!("expected Error::Collective, the collective ran"),
    }
}

fn mismatch(group: &Collectives, scenario: &str) -> anyhow::Result<()> {
    let ctx = group.context();
    let (rank, ranks) = (group.rank(), group.size());
    let odd = rank == ranks - 1;
    let data = host::<f32>(rank, 12);
    let a = ctx.device_put(&data, &[3, 4])?;
    let outcome = match scenario {
        "mismatch-shape" => {
            let a = if odd { a.reshape(&[4, 3])? } else { a };
            group
                .all_reduce(a, ReduceOp::Sum)
                .map_err(|d| {
                    // The donated array comes back intact.
                    let intact = ctx.device_get(&d.array).map(|v| v == data);
                    println!("INTACT rank {rank} {}", intact.unwrap_or(false));
                    d.error
                })
                .map(drop)
        }
        "mismatch-type" if odd => {
            let b = ctx.device_put(&host::<u32>(rank, 12), &[3, 4])?;
            group
                .all_reduce(b, ReduceOp::Sum)
                .map(drop)
                .map_err(Error::from)
        }
        "mismatch-type" => group
            .all_reduce(a, ReduceOp::Sum)
            .map(drop)
            .map_err(Error::from),
        "mismatch-op" => {
            let op = if odd { ReduceOp::Max } else { ReduceOp::Sum };
            group.all_reduce(a, op).map(drop).map_err(Error::from)
        }
        "mismatch-root" => {
            let root = if odd { 1 } else { 0 };
            group.broadcast(a, root).map(drop).map_err(Error::from)
        }
        "mismatch-kind" if odd => group.barrier(),
        "mismatch-kind" => group
            .all_reduce(a, ReduceOp::Sum)
            .map(drop)
            .map_err(Error::from),
        "mismatch-send" => {
            // Rank 0 sends [3, 4]; rank 1 expects [12].
            match rank {
                0 => group.send(&a, 1),
                1 => {
                    let b = ctx.zeros::<f32>(&[12])?;
                    group.recv(b, 0).map(drop).map_err(Error::from)
                }
                _ => Err(Error::Collective {
                    operation: "send",
                    reason: "this rank takes no part".into(),
                }),
            }
        }
        _ => unreachable!(),
    };
    expect_collective(rank, outcome)?;
    // The ranks are still in step: the next collective runs.
    let b = ctx.device_put(&host::<f32>(rank, 12), &[12])?;
    let b = group.all_reduce(b, ReduceOp::Sum)?;
    ensure!(
        ctx.device_get(&b)? == reference::<f32>(ranks, 12, ReduceOp::Sum),
        "the collective after the mismatch differs"
    );
    Ok(())
}

/// Rank 0's guard refuses explicit transfers: it returns the guard's error, the others
/// Error::Collective naming rank 0, and every array comes back intact.
fn guard(group: &Collectives) -> anyhow::Result<()> {
    let ctx = group.context();
    let rank = group.rank();
    let data = host::<i64>(rank, 10);
    let a = ctx.device_put(&data, &[10])?;
    let guard = (rank == 0).then(|| TransferGuard::scoped(TransferGuardLevel::DisallowExplicit));
    let donated = match group.all_reduce(a, ReduceOp::Sum) {
        Ok(_) => bail!("the all_reduce ran under a guard that refuses it"),
        Err(donated) => donated,
    };
    drop(guard);
    ensure!(
        ctx.device_get(&donated.array)? == data,
        "the donated array was changed"
    );
    match (&donated.error, rank) {
        (Error::TransferGuard { operation, .. }, 0) => {
            println!("LOCAL rank {rank}: {}", donated.error);
            ensure!(*operation == "all_reduce", "guard named {operation}");
        }
        (Error::Collective { .. }, r) if r > 0 => {
            println!("COLLECTIVE rank {rank}: {}", donated.error)
        }
        (other, _) => bail!("unexpected error {other}"),
    }
    Ok(())
}

/// Arguments every rank gets wrong alike: each rank refuses with its own error (printed as
/// `REFUSED rank R <what>: <message>`), and the ranks stay in step.
fn refusals(group: &Collectives) -> anyhow::Result<()> {
    let ctx = group.context();
    let (rank, ranks) = (group.rank(), group.size());
    let data = host::<i32>(rank, 6);
    let report = |what: &str, error: Error| println!("REFUSED rank {rank} {what}: {error}");
    match distributed::init() {
        Err(error @ Error::Collective { .. }) => report("init", error),
        other => bail!("a second init gave {:?}", other.map(|_| ())),
    }
    let a = ctx.device_put(&data, &[6])?;
    let a = match group.broadcast(a, ranks + 4) {
        Err(donated) => {
            report("root", donated.error);
            donated.array
        }
        Ok(_) => bail!("a broadcast from a rank that does not exist ran"),
    };
    ensure!(
        ctx.device_get(&a)? == data,
        "the refused broadcast changed the array"
    );
    let scattered = ctx.device_put(&host::<i32>(rank, ranks * 2 + 1), &[ranks * 2 + 1])?;
    match group.reduce_scatter(&scattered, ReduceOp::Sum) {
        Err(error) => report("reduce_scatter", error),
        Ok(_) => bail!("a reduce_scatter of an indivisible shape ran"),
    }
    let scalar = ctx.device_put(&[1i32], &[])?;
    match group.reduce_scatter(&scalar, ReduceOp::Sum) {
        Err(error) => report("reduce_scatter of a scalar", error),
        Ok(_) => bail!("a reduce_scatter of a scalar ran"),
    }
    let rank6 = ctx.device_put(&[1i32], &[1, 1, 1, 1, 1, 1])?;
    match group.all_gather(&rank6) {
        Err(error) => report("all_gather", error),
        Ok(_) => bail!("an all_gather past the maximum rank ran"),
    }
    match group.send(&a, rank) {
        Err(error) => report("send", error),
        Ok(()) => bail!("a send to this rank itself ran"),
    }
    match group.recv(a, ranks + 1) {
        Err(donated) => report("recv", donated.error),
        Ok(_) => bail!("a recv from a rank that does not exist ran"),
    }
    // Still in step.
    let b = ctx.device_put(&data, &[6])?;
    let b = group.all_reduce(b, ReduceOp::Min)?;
    ensure!(
        ctx.device_get(&b)? == reference::<i32>(ranks, 6, ReduceOp::Min),
        "min differs"
    );
    Ok(())
}

/// Rank 0's array is used by an unsubmitted Sequence: refused there, Error::Collective
/// elsewhere; after submitting, the same all_reduce runs on every rank.
fn pending(group: &Collectives) -> anyhow::Result<()> {
    let ctx = group.context();
    let (rank, ranks) = (group.rank(), group.size());
    let a = ctx.device_put(&host::<u32>(rank, 64), &[64])?;
    let mut sequence = ctx.sequence();
    let _copy = if rank == 0 {
        Some(sequence.copy(&a)?)
    } else {
        None
    };
    let a = match group.all_reduce(a, ReduceOp::Max) {
        Ok(_) => bail!("the all_reduce ran over an array pending in a Sequence"),
        Err(donated) => {
            match (&donated.error, rank) {
                (Error::InvalidArgument { reason, .. }, 0) if reason.contains("Sequence") => {
                    println!("LOCAL rank {rank}: {}", donated.error)
                }
                (Error::Collective { .. }, r) if r > 0 => {
                    println!("COLLECTIVE rank {rank}: {}", donated.error)
                }
                (other, _) => bail!("unexpected error {other}"),
            }
            donated.array
        }
    };
    sequence.submit()?;
    let a = group.all_reduce(a, ReduceOp::Max)?;
    ensure!(
        ctx.device_get(&a)? == reference::<u32>(ranks, 64, ReduceOp::Max),
        "max differs"
    );
    Ok(())
}

/// A second thread reads the array (device_get) while this thread all-gathers it.
fn threads(group: &Collectives) -> anyhow::Result<()> {
    let ctx = group.context();
    let (rank, ranks) = (group.rank(), group.size());
    let len = 300_000;
    let a = ctx.device_put(&host::<f32>(rank, len), &[len])?;
    let expected: Vec<f32> = (0..ranks).flat_map(|r| host::<f32>(r, len)).collect();
    std::thread::scope(|scope| {
        let reader = scope.spawn(|| -> anyhow::Result<()> {
            for _ in 0..20 {
                ensure!(
                    ctx.device_get(&a)? == host::<f32>(rank, len),
                    "reader saw a change"
                );
            }
            Ok(())
        });
        for _ in 0..5 {
            let gathered = group.all_gather(&a)?;
            ensure!(ctx.device_get(&gathered)? == expected, "all_gather differs");
        }
        reader
            .join()
            .map_err(|_| anyhow::anyhow!("reader panicked"))?
    })
}

/// The last rank fails and aborts the job while the others wait in a collective: mpirun must
/// end, non-zero, instead of hanging.
fn abort(group: &Collectives) -> anyhow::Result<()> {
    if group.rank() == group.size() - 1 {
        let failed: Result<(), Error> = Err(Error::InvalidArgument {
            operation: "training step",
            reason: "a deliberate failure".into(),
        });
        group.abort_on_error(failed);
    }
    group
        .barrier()
        .context("the barrier returned although a rank aborted")?;
    bail!("the barrier returned although a rank aborted")
}

/// The last rank is killed (SIGKILL, by itself) while the others wait in a collective.
fn killed(group: &Collectives) -> anyhow::Result<()> {
    if group.rank() == group.size() - 1 {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &std::process::id().to_string()])
            .status();
        std::thread::sleep(std::time::Duration::from_secs(60));
    }
    let a: DeviceArray<f32> = group.context().zeros(&[16])?;
    let _ = group.all_reduce(a, ReduceOp::Sum);
    bail!("the all_reduce returned although a rank died")
}
