//! The rank program of `tests/distributed.rs`: each scenario runs under
//! `mpirun -np N target/release/examples/mpi_checks SCENARIO` and prints one line per rank
//! that the test reads (`PASS`, `COLLECTIVE`, `LOCAL`), exiting non-zero on any failed check.
//!
//! Scenarios: `collectives` (every collective, every element type, against a host reference),
//! `mismatch-shape`, `mismatch-type`, `mismatch-op`, `mismatch-root`, `mismatch-kind`,
//! `mismatch-send`, `mismatch-recv` (two receives facing each other), `guard`, `refusals`, `pending`, `threads`, `abort`, `killed`; the fused
//! and started collectives: `fused`, `started`, `mismatch-list-length`, `mismatch-list-shape`,
//! `mismatch-list-size`, `mismatch-list-type`, `mismatch-list-op`, `mismatch-start`,
//! `mismatch-start-broadcast`, `mixed-start` (the last rank blocks where the others start),
//! `killed-started`; `thread-single` (rank 0 below `MPI_THREAD_MULTIPLE`); and
//! `run-while-sent` (a captured run whose input array MPI is sending). A collective
//! error prints its [`CollectiveFailure`] after its message.

use anyhow::{bail, ensure, Context as _};
use gpu_arena::distributed::mpi::environment::Threading;
use gpu_arena::distributed::{self, abort_on_error, CollectiveElement, Collectives, ReduceOp};
use gpu_arena::error::{CollectiveFailure, IndexRefusal, RecorderKind};
use gpu_arena::{Context, DeviceArray, Error, TransferGuard, TransferGuardLevel};
use lexopt::prelude::*;

#[path = "flags/mod.rs"]
mod flags;

const USAGE: &str = "usage: mpi_checks SCENARIO

The rank program of tests/distributed.rs, run under mpirun. SCENARIO is one of:
collectives, mismatch-shape, mismatch-type, mismatch-op, mismatch-root, mismatch-kind,
mismatch-send, mismatch-recv, guard, refusals, pending, threads, abort, killed, fused, started,
mismatch-list-length, mismatch-list-shape, mismatch-list-size, mismatch-list-type,
mismatch-list-op, mismatch-start, mismatch-start-broadcast, mixed-start, killed-started,
thread-single, run-while-sent.
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
    // In thread-single, rank 0 (as the launcher numbers the processes it starts: Open MPI's
    // variable, or MPICH's) starts MPI below MPI_THREAD_MULTIPLE, as a program calling
    // MPI_Init itself would.
    let launched_as_rank_0 = ["OMPI_COMM_WORLD_RANK", "PMI_RANK"]
        .iter()
        .any(|variable| std::env::var(variable).as_deref() == Ok("0"));
    let universe = if scenario == "thread-single" && launched_as_rank_0 {
        distributed::mpi::initialize_with_threading(Threading::Single)
            .map(|(universe, _)| universe)
            .ok_or_else(|| anyhow::anyhow!("MPI could not be started"))?
    } else {
        distributed::init()?
    };
    let world = universe.world();
    let ctx = abort_on_error(&world, Context::from_env());
    let group = Collectives::new(&ctx, &world);
    let rank = group.rank();
    let result = match scenario.as_str() {
        "collectives" => collectives(&group),
        "mismatch-shape" | "mismatch-type" | "mismatch-op" | "mismatch-root" | "mismatch-kind"
        | "mismatch-send" | "mismatch-recv" => mismatch(&group, &scenario),
        "guard" => guard(&group),
        "refusals" => refusals(&group),
        "pending" => pending(&group),
        "threads" => threads(&group),
        "abort" => abort(&group),
        "killed" => killed(&group),
        "fused" => fused(&group),
        "started" => started(&group),
        "start-then-recv" => start_then_recv(&group),
        "mismatch-list-length"
        | "mismatch-list-shape"
        | "mismatch-list-size"
        | "mixed-start"
        | "mismatch-list-type"
        | "mismatch-list-op"
        | "mismatch-start"
        | "mismatch-start-broadcast" => mismatch_list(&group, &scenario),
        "killed-started" => killed_started(&group),
        "thread-single" => thread_single(&group),
        "run-while-sent" => run_while_sent(&group),
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
        "rank {rank}: host_bytes_peak {peak} backend {:?} zero_copy {} in_place {} library {:?}",
        ctx.adapter_info().backend,
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

/// Prints a collective error as `COLLECTIVE rank R <operation>: <reason> [failure: <failure>]`.
fn print_collective(rank: usize, error: &Error) {
    if let Error::Collective {
        operation,
        failure,
        reason,
    } = error
    {
        println!("COLLECTIVE rank {rank} {operation}: {reason} [failure: {failure:?}]");
    }
}

/// Prints what a collective error said, or fails when there was none.
fn expect_collective<V>(rank: usize, result: Result<V, Error>) -> anyhow::Result<()> {
    match result {
        Err(error @ Error::Collective { .. }) => {
            print_collective(rank, &error);
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
                // The other ranks take no part.
                _ => Ok(()),
            }
        }
        "mismatch-recv" => {
            // Ranks 0 and 1 each wait to receive from the other: refused on both.
            match rank {
                0 | 1 => {
                    let b = ctx.zeros::<f32>(&[12])?;
                    group.recv(b, 1 - rank).map(drop).map_err(Error::from)
                }
                _ => Ok(()),
            }
        }
        _ => unreachable!(),
    };
    let pair = matches!(scenario, "mismatch-send" | "mismatch-recv");
    if !pair || rank < 2 {
        expect_collective(rank, outcome)?;
    }
    still_in_step(group, "the mismatch")
}

/// The ranks are still in step after a refused collective: the next one (an all_reduce of 12
/// f32 values) runs and matches the host reference.
fn still_in_step(group: &Collectives, after: &str) -> anyhow::Result<()> {
    let ctx = group.context();
    let b = ctx.device_put(&host::<f32>(group.rank(), 12), &[12])?;
    let b = group.all_reduce(b, ReduceOp::Sum)?;
    ensure!(
        ctx.device_get(&b)? == reference::<f32>(group.size(), 12, ReduceOp::Sum),
        "the all_reduce after {after} differs"
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
    expect_own_error_on_rank_0(rank, &donated.error, |own| {
        matches!(
            own,
            Error::TransferGuard {
                operation: "all_reduce",
                ..
            }
        )
    })
}

/// Rank 0's error is its own (`LOCAL rank 0: <message>`), one that `is_own` accepts; every
/// other rank's is a collective error (`COLLECTIVE rank R ...`). Fails on anything else.
fn expect_own_error_on_rank_0(
    rank: usize,
    error: &Error,
    is_own: impl Fn(&Error) -> bool,
) -> anyhow::Result<()> {
    match (error, rank) {
        (own, 0) if is_own(own) => println!("LOCAL rank {rank}: {own}"),
        (Error::Collective { .. }, r) if r > 0 => print_collective(rank, error),
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
        Err(
            error @ Error::Collective {
                failure: CollectiveFailure::AlreadyInitialized,
                ..
            },
        ) => report("init", error),
        other => bail!("a second init gave {:?}", other.map(|_| ())),
    }
    let a = ctx.device_put(&data, &[6])?;
    let a = match group.broadcast(a, ranks + 4) {
        Err(donated) => {
            let root = IndexRefusal::Root {
                root: ranks + 4,
                ranks,
            };
            ensure!(
                matches!(&donated.error, Error::Index { refusal, .. } if *refusal == root),
                "a root past the group: {:?}",
                donated.error
            );
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
        Err(
            error @ Error::Index {
                refusal: IndexRefusal::Peer { .. },
                ..
            },
        ) => report("send", error),
        other => bail!("a send to this rank itself gave {other:?}"),
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

/// Rank 0's array is read by an unsubmitted Sequence: an all_reduce (which writes it) is
/// refused there, Error::Collective elsewhere; the collectives that only read it there (an
/// all_gather, a reduce_scatter, a send, a broadcast from rank 0) run, as single ops that read
/// it do; after submitting, the same all_reduce runs on every rank.
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
            expect_own_error_on_rank_0(rank, &donated.error, |own| {
                matches!(own, Error::PendingInRecorder { recorder, .. }
                    if recorder.kind == RecorderKind::Sequence)
            })?;
            donated.array
        }
    };
    let every_rank: Vec<u32> = (0..ranks).flat_map(|r| host::<u32>(r, 64)).collect();
    ensure!(
        ctx.device_get(&group.all_gather(&a)?)? == every_rank,
        "all_gather differs"
    );
    let scattered = group.reduce_scatter(&a, ReduceOp::Max)?;
    let block = 64 / ranks;
    let max = reference::<u32>(ranks, 64, ReduceOp::Max);
    ensure!(
        ctx.device_get(&scattered)? == max[rank * block..(rank + 1) * block],
        "reduce_scatter differs"
    );
    match rank {
        0 => group.send(&a, 1)?,
        1 => {
            let from_0 = group.recv(ctx.zeros::<u32>(&[64])?, 0)?;
            ensure!(
                ctx.device_get(&from_0)? == host::<u32>(0, 64),
                "recv differs"
            );
        }
        _ => {}
    }
    let a = group.broadcast(a, 0)?;
    ensure!(
        ctx.device_get(&a)? == host::<u32>(0, 64),
        "broadcast differs"
    );
    sequence.submit()?;
    let a = group.all_reduce(a, ReduceOp::Max)?;
    ensure!(
        ctx.device_get(&a)? == host::<u32>(0, 64),
        "max of the broadcast arrays differs"
    );
    Ok(())
}

/// Rank 0 runs MPI below MPI_THREAD_MULTIPLE: its started collective is refused with its own
/// error, the others' with Error::Collective naming rank 0's refusal, every list comes back
/// intact, and the blocking collectives still run.
fn thread_single(group: &Collectives) -> anyhow::Result<()> {
    let ctx = group.context();
    let rank = group.rank();
    let data = host::<f32>(rank, 8);
    let list = vec![ctx.device_put(&data, &[8])?];
    // Rank 0 refuses at the start; the others learn of it in the agreement, at wait().
    let donated = match (group.start_all_reduce_many(list, ReduceOp::Sum), rank) {
        (Err(donated), 0) => donated,
        (Ok(pending), r) if r > 0 => match pending.wait() {
            Ok(_) => bail!("a started collective ran beside a rank below MPI_THREAD_MULTIPLE"),
            Err(donated) => donated,
        },
        (Ok(_), _) => bail!("rank 0, below MPI_THREAD_MULTIPLE, started a collective"),
        (Err(donated), _) => bail!("rank {rank} refused at the start: {}", donated.error),
    };
    expect_own_error_on_rank_0(rank, &donated.error, |own| {
        matches!(
            own,
            Error::Collective {
                failure: CollectiveFailure::ThreadSupport,
                ..
            }
        )
    })?;
    ensure!(
        donated.arrays.len() == 1 && ctx.device_get(&donated.arrays[0])? == data,
        "the refused start changed its list"
    );
    // The error is in the message (a count of one in the singular), not also its source.
    let message = donated.error.to_string();
    let chain = format!("{:#}", anyhow::Error::from(donated));
    ensure!(
        chain == format!("{message} (the 1 donated array was given back)"),
        "a refused list reads {chain:?}"
    );
    still_in_step(group, "the refused start")
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

/// `y = f(y)` iterated `p.rounds` times per element: GPU work that takes as long as asked.
const BUSY: &str = r#"
struct P { rounds: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) i: vec3<u32>) {
    if (i.x >= arrayLength(&y)) { return; }
    var v = y[i.x];
    for (var r = 0u; r < p.rounds; r++) { v = v * 0.5 + 1.0; }
    y[i.x] = v;
}
"#;

/// Rank 0 runs a captured step on a second thread while it sends the array the step updates.
/// Rank 1 receives into an array its GPU still works on for a few seconds, so rank 0's send
/// is in its data phase (reading the array's mapping on UMA) and blocked meanwhile. On
/// lavapipe a run makes its moving copies on the host where the arrays are mapped and idle:
/// during the send it must leave its copy to the kernel, and copy on the host again after.
fn run_while_sent(group: &Collectives) -> anyhow::Result<()> {
    let ctx = group.context();
    let (rows, width) = (256, 1024);
    let row = |t: usize| -> Vec<f32> { (0..width).map(|i| (t * width + i + 1) as f32).collect() };
    let cache = ctx.zeros::<f32>(&[rows, width])?;
    // Each rank prepares before the barrier, so that after it rank 1 reaches its receive (and
    // rank 0's send its data phase) at once, well before rank 0's second thread runs.
    if group.rank() != 0 {
        let busy = ctx.kernel(BUSY, "main")?;
        let mut target = ctx.zeros::<f32>(&[rows, width])?;
        let mut work = |rounds: u32| -> anyhow::Result<()> {
            let launch = ctx.launch(&busy).arg_mut(&mut target).params(&rounds);
            Ok(launch.grid_for(rows * width).run()?)
        };
        // A round's cost, from two launches (the difference leaves the fixed costs out).
        let mut time = |rounds: u32| -> anyhow::Result<f64> {
            let timed = std::time::Instant::now();
            work(rounds)?;
            ctx.synchronize()?;
            Ok(timed.elapsed().as_secs_f64())
        };
        let (short, long) = (time(64)?, time(1024)?);
        let per_round = ((long - short) / 960.0).max(1e-9);
        group.barrier()?;
        work((4.0 / per_round).clamp(64.0, 1e8) as u32)?;
        let got = ctx.device_get(&group.recv(target, 0)?)?;
        ensure!(got[..width] == row(0), "row 0 was written before the send");
        ensure!(
            got[2 * width..].iter().all(|&v| v == 0.0),
            "rows written after the send arrived"
        );
        return Ok(());
    }
    let mut cap = ctx.capture();
    let (new_row, input) = cap.input(&row(0), &[1, width])?;
    let at = cap.index_slot(&[0, 0]);
    let cache = cap.dynamic_update_slice_at(cache, &new_row, &at)?;
    drop(new_row);
    let mut step = cap.finish()?;
    let mut run_at = |t: usize| -> anyhow::Result<u64> {
        let start = [t as i64, 0];
        step.run()
            .input(&input, &row(t))
            .start(&at, &start)
            .submit()?;
        ctx.synchronize()?;
        Ok(step.host_copies())
    };
    let first = run_at(0)?;
    group.barrier()?;
    let during = std::thread::scope(|scope| {
        let running = scope.spawn(|| {
            std::thread::sleep(std::time::Duration::from_secs(1));
            run_at(1)
        });
        group.send(&cache, 1)?;
        running
            .join()
            .map_err(|_| anyhow::anyhow!("the running thread panicked"))?
    })?;
    let after = run_at(2)?;
    // Host copies are made on a CPU adapter with zero-copy (lavapipe, where CI runs this).
    if first == 1 {
        ensure!(
            (during, after) == (1, 2),
            "host copies: {first} after the first run, {during} after a run during the send \
             (want 1: the kernel's), {after} after the next"
        );
    }
    let want: Vec<f32> = (0..rows)
        .flat_map(|t| if t < 3 { row(t) } else { vec![0.0; width] })
        .collect();
    ensure!(
        ctx.device_get(&cache)? == want,
        "the cache after three runs"
    );
    Ok(())
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

/// The lengths of a fused list of mixed sizes: empty arrays, odd sizes, one element, and with
/// `spanning` one array that runs over several fusion chunks of `T`.
fn list_lens<T>(spanning: bool) -> Vec<usize> {
    let mut lens = vec![0, 1, 7, 1000, 3, 0, 65_537, 12];
    if spanning {
        let chunk = distributed::PIPELINE_CHUNK_BYTES as usize / std::mem::size_of::<T>();
        lens.insert(5, chunk * 3 / 2 + 13);
    }
    lens
}

/// A list of arrays on the device and their values on the host.
type List<T> = (Vec<DeviceArray<T>>, Vec<Vec<T>>);

/// Rank `rank`'s arrays of lengths `lens` on the device (array k starts at element `offset`
/// of the rank's sequence, so no two arrays hold the same values), and their host values.
fn put_list<T: Arith>(ctx: &Context, rank: usize, lens: &[usize]) -> anyhow::Result<List<T>> {
    let mut offset = 0;
    let mut arrays = Vec::new();
    let mut values = Vec::new();
    for &len in lens {
        let v: Vec<T> = (offset..offset + len)
            .map(|i| value::<T>(rank, i))
            .collect();
        arrays.push(ctx.device_put(&v, &[len])?);
        values.push(v);
        offset += len;
    }
    Ok((arrays, values))
}

/// The host reduction of every rank's list, cut into the list's arrays.
fn reference_list<T: Arith>(ranks: usize, lens: &[usize], op: ReduceOp) -> Vec<Vec<T>> {
    let total: usize = lens.iter().sum();
    let all = reference::<T>(ranks, total, op);
    let mut offset = 0;
    lens.iter()
        .map(|&len| {
            offset += len;
            all[offset - len..offset].to_vec()
        })
        .collect()
}

/// Fails unless every rank holds the same bytes in `arrays` (a hash, all-gathered).
fn same_on_every_rank<T: Arith>(
    group: &Collectives,
    arrays: &[DeviceArray<T>],
) -> anyhow::Result<()> {
    use std::hash::Hasher;
    let ctx = group.context();
    let mut hasher = std::hash::DefaultHasher::new();
    for values in ctx.device_get_many(&arrays.iter().collect::<Vec<_>>())? {
        hasher.write(bytemuck::cast_slice(&values));
    }
    let mine = hasher.finish();
    let all = group.all_gather(&ctx.device_put(&[mine], &[1])?)?;
    ensure!(
        ctx.device_get(&all)?.iter().all(|&h| h == mine),
        "the ranks' arrays differ"
    );
    Ok(())
}

/// Every reduction and the broadcast of a fused list of `T` against the host reference.
fn check_list<T: Arith>(group: &Collectives, spanning: bool) -> anyhow::Result<()> {
    let ctx = group.context();
    let (rank, ranks) = (group.rank(), group.size());
    let lens = list_lens::<T>(spanning);
    let name = T::NAME;
    let ops: &[ReduceOp] = if spanning {
        &[ReduceOp::Sum]
    } else {
        &ReduceOp::ALL
    };
    for &op in ops {
        let (arrays, _) = put_list::<T>(ctx, rank, &lens)?;
        let reduced = group.all_reduce_many(arrays, op)?;
        ensure!(reduced.len() == lens.len(), "all_reduce_many lost arrays");
        let expected = reference_list::<T>(ranks, &lens, op);
        for (k, (array, want)) in reduced.iter().zip(&expected).enumerate() {
            ensure!(array.shape() == [lens[k]], "array {k} changed shape");
            ensure!(
                ctx.device_get(array)? == *want,
                "all_reduce_many({}) of {name}: array {k} of {} differs from the host reference",
                op.name(),
                lens[k]
            );
        }
        same_on_every_rank(group, &reduced)?;
    }
    let root = ranks - 1;
    let (arrays, _) = put_list::<T>(ctx, rank, &lens)?;
    let (_, roots) = put_list::<T>(ctx, root, &lens)?;
    let broadcast = group.broadcast_many(arrays, root)?;
    for (k, (array, want)) in broadcast.iter().zip(&roots).enumerate() {
        ensure!(
            ctx.device_get(array)? == *want,
            "broadcast_many of {name}: array {k} differs from the root's"
        );
    }
    Ok(())
}

/// The mean of a fused list of `T`: the host sum divided by the ranks, element by element.
fn check_mean_list<T: Arith + distributed::MeanElement>(
    group: &Collectives,
    divide: impl Fn(T, usize) -> T,
) -> anyhow::Result<()> {
    let ctx = group.context();
    let (rank, ranks) = (group.rank(), group.size());
    let lens = list_lens::<T>(false);
    let (arrays, _) = put_list::<T>(ctx, rank, &lens)?;
    let reduced = group.all_reduce_mean_many(arrays)?;
    for (k, (array, sum)) in reduced
        .iter()
        .zip(reference_list::<T>(ranks, &lens, ReduceOp::Sum))
        .enumerate()
    {
        let want: Vec<T> = sum.into_iter().map(|s| divide(s, ranks)).collect();
        ensure!(
            ctx.device_get(array)? == want,
            "all_reduce_mean_many of {}: array {k} differs",
            T::NAME
        );
    }
    same_on_every_rank(group, &reduced)
}

/// Fused lists of mixed sizes (empty, odd, spanning fusion chunks), every element type and
/// reduction, the mean and the broadcast, exact against the host and the same on every rank.
fn fused(group: &Collectives) -> anyhow::Result<()> {
    let ctx = group.context();
    check_list::<f32>(group, false)?;
    check_list::<f64>(group, true)?;
    check_list::<i32>(group, false)?;
    check_list::<u32>(group, false)?;
    check_list::<i64>(group, false)?;
    check_list::<u64>(group, false)?;
    check_mean_list::<f32>(group, |s, n| s / n as f32)?;
    check_mean_list::<f64>(group, |s, n| s / n as f64)?;
    // An empty list is a collective like any other.
    ensure!(group
        .all_reduce_many(Vec::<DeviceArray<f32>>::new(), ReduceOp::Sum)?
        .is_empty());
    // A list counts one transfer per array each way, as device_get_many does.
    let (rank, lens) = (group.rank(), [10usize, 11, 12]);
    let list = lens
        .iter()
        .map(|&n| ctx.device_put(&host::<f32>(rank, n), &[n]))
        .collect::<Result<Vec<_>, _>>()?;
    let before = ctx.transfer_stats();
    let list = group.all_reduce_many(list, ReduceOp::Sum)?;
    let after = ctx.transfer_stats();
    let bytes = 4 * lens.iter().sum::<usize>() as u64;
    for (way, b, a) in [
        (
            "read",
            before.device_to_host.explicit,
            after.device_to_host.explicit,
        ),
        (
            "written",
            before.host_to_device.explicit,
            after.host_to_device.explicit,
        ),
    ] {
        ensure!(
            (a.count - b.count, a.bytes - b.bytes) == (lens.len() as u64, bytes),
            "all_reduce_many of {} arrays counted as {} transfers of {} bytes {way}",
            lens.len(),
            a.count - b.count,
            a.bytes - b.bytes
        );
    }
    drop(list);
    let peak = group.host_bytes_peak();
    ensure!(
        peak <= 3 * distributed::PIPELINE_CHUNK_BYTES,
        "host buffers of {peak} bytes, above three chunks"
    );
    println!(
        "rank {}: fused zero_copy {} host_bytes_peak {peak}",
        group.rank(),
        ctx.config().zero_copy
    );
    Ok(())
}

/// Started collectives: waited in another order than started, with GPU work and a blocking
/// collective in between; one dropped without waiting (it still runs, its arrays are freed,
/// and the collectives after it run in step).
fn started(group: &Collectives) -> anyhow::Result<()> {
    let ctx = group.context();
    let (rank, ranks) = (group.rank(), group.size());
    let lens = list_lens::<f32>(false);
    let (a, _) = put_list::<f32>(ctx, rank, &lens)?;
    let (b, _) = put_list::<u32>(ctx, rank, &lens[2..])?;
    let (c, _) = put_list::<f64>(ctx, rank, &lens[..4])?;
    let a = group.start_all_reduce_many(a, ReduceOp::Sum)?;
    // GPU work recorded and submitted while the reduction runs.
    let busy = ctx.fill(&[4096], 2.0f32)?;
    let b = group.start_all_reduce_many(b, ReduceOp::Max)?;
    let c = group.start_all_reduce_mean_many(c)?;
    ensure!(
        (a.number(), b.number(), c.number()) == (0, 1, 2),
        "handles numbered {}, {}, {}",
        a.number(),
        b.number(),
        c.number()
    );
    // A blocking collective on this thread while the started ones run on theirs.
    let x = ctx.device_put(&host::<i64>(rank, 33), &[33])?;
    let x = group.all_reduce(x, ReduceOp::Sum)?;
    ensure!(
        ctx.device_get(&x)? == reference::<i64>(ranks, 33, ReduceOp::Sum),
        "the blocking all_reduce beside started ones differs"
    );
    // A handle may be waited on another thread (it is `Send`).
    let c = std::thread::scope(|s| s.spawn(move || c.wait()).join())
        .map_err(|_| anyhow::anyhow!("the thread that waited panicked"))??;
    let a = a.wait()?;
    let b = b.wait()?;
    for (array, want) in a
        .iter()
        .zip(reference_list::<f32>(ranks, &lens, ReduceOp::Sum))
    {
        ensure!(ctx.device_get(array)? == want, "started sum differs");
    }
    for (array, want) in b
        .iter()
        .zip(reference_list::<u32>(ranks, &lens[2..], ReduceOp::Max))
    {
        ensure!(ctx.device_get(array)? == want, "started max differs");
    }
    for (array, sum) in c
        .iter()
        .zip(reference_list::<f64>(ranks, &lens[..4], ReduceOp::Sum))
    {
        let want: Vec<f64> = sum.iter().map(|s| s / ranks as f64).collect();
        ensure!(ctx.device_get(array)? == want, "started mean differs");
    }
    same_on_every_rank(group, &a)?;
    ensure!(
        ctx.device_get(&busy)?.iter().all(|&v| v == 2.0),
        "the GPU work beside the started collectives differs"
    );
    drop((a, b, c, busy, x));
    // Dropped without waiting: it runs to its end and its arrays are freed.
    ctx.synchronize()?;
    let before = ctx.memory_stats().bytes_in_use;
    let (d, _) = put_list::<f32>(ctx, rank, &lens)?;
    drop(group.start_all_reduce_many(d, ReduceOp::Sum)?);
    // A started broadcast from the last rank, waited after GPU work recorded meanwhile; then
    // one dropped without waiting (it still runs on every rank, and its arrays are freed).
    let root = ranks - 1;
    let (p, _) = put_list::<f32>(ctx, rank, &lens)?;
    let (_, roots) = put_list::<f32>(ctx, root, &lens)?;
    let pending = group.start_broadcast_many(p, root)?;
    let busy = ctx.fill(&[1024], 3.0f32)?;
    let p = pending.wait()?;
    for (k, (array, want)) in p.iter().zip(&roots).enumerate() {
        ensure!(
            ctx.device_get(array)? == *want,
            "started broadcast_many: array {k} differs from the root's"
        );
    }
    ensure!(
        ctx.device_get(&busy)?.iter().all(|&v| v == 3.0),
        "the GPU work beside the started broadcast differs"
    );
    drop((p, busy));
    let (q, _) = put_list::<f32>(ctx, rank, &lens[..4])?;
    drop(group.start_broadcast_many(q, 0)?);
    let (e, _) = put_list::<f32>(ctx, rank, &lens[..3])?;
    let e = group.start_all_reduce_many(e, ReduceOp::Min)?.wait()?;
    for (array, want) in e
        .iter()
        .zip(reference_list::<f32>(ranks, &lens[..3], ReduceOp::Min))
    {
        ensure!(
            ctx.device_get(array)? == want,
            "the collective after a dropped handle differs"
        );
    }
    drop(e);
    ctx.synchronize()?;
    let after = ctx.memory_stats().bytes_in_use;
    ensure!(
        after == before,
        "{before} bytes in use before the dropped handle, {after} after: its arrays leaked"
    );
    println!(
        "rank {rank}: started zero_copy {} bytes_in_use {before} -> {after}",
        ctx.config().zero_copy
    );
    Ok(())
}

/// Lists that differ between ranks (the last rank's), or a last rank that blocks where the
/// others start: refused on every rank with Error::Collective, every array back intact, and
/// the ranks still in step.
fn mismatch_list(group: &Collectives, scenario: &str) -> anyhow::Result<()> {
    let ctx = group.context();
    let (rank, ranks) = (group.rank(), group.size());
    let odd = rank == ranks - 1;
    let shapes: Vec<Vec<usize>> = vec![vec![5], vec![3, 4], vec![0], vec![2, 2, 2]];
    let put = |shapes: &[Vec<usize>]| -> anyhow::Result<List<f32>> {
        let mut arrays = Vec::new();
        let mut values = Vec::new();
        for (k, shape) in shapes.iter().enumerate() {
            let n: usize = shape.iter().product();
            let v: Vec<f32> = (0..n).map(|i| value::<f32>(rank, i + k)).collect();
            arrays.push(ctx.device_put(&v, shape)?);
            values.push(v);
        }
        Ok((arrays, values))
    };
    let mut mine = shapes.clone();
    match scenario {
        "mismatch-list-length" if odd => {
            mine.pop();
        }
        "mismatch-list-shape" | "mismatch-start" | "mismatch-start-broadcast" if odd => {
            mine[1] = vec![4, 3]
        }
        "mismatch-list-size" if odd => mine[1] = vec![13],
        _ => {}
    }
    let (arrays, values) = put(&mine)?;
    let op = if scenario == "mismatch-list-op" && odd {
        ReduceOp::Max
    } else {
        ReduceOp::Sum
    };
    let refused = if scenario == "mismatch-list-type" && odd {
        let ints: Vec<DeviceArray<u32>> = shapes
            .iter()
            .map(|s| ctx.zeros::<u32>(s))
            .collect::<Result<_, _>>()?;
        let donated = match group.all_reduce_many(ints, op) {
            Ok(_) => bail!("a list of another element type was reduced"),
            Err(donated) => donated,
        };
        ensure!(donated.arrays.len() == shapes.len(), "arrays lost");
        // The f32 arrays of this rank did not take part: they are intact by construction.
        (donated.error, arrays)
    } else if scenario == "mismatch-start-broadcast" {
        refused_at_wait(
            group.start_broadcast_many(arrays, 0),
            "a started broadcast over differing lists",
        )?
    } else if scenario == "mixed-start" && !odd {
        // The last rank calls the blocking form (below) with the same list.
        refused_at_wait(
            group.start_all_reduce_many(arrays, op),
            "a start that met a blocking call on another rank",
        )?
    } else if scenario == "mismatch-start" {
        refused_at_wait(
            group.start_all_reduce_many(arrays, op),
            "a started collective over differing lists",
        )?
    } else {
        match group.all_reduce_many(arrays, op) {
            Ok(_) => bail!("a fused collective over differing lists ran"),
            Err(donated) => (donated.error, donated.arrays),
        }
    };
    let (error, arrays) = refused;
    let mut intact = arrays.len() == values.len();
    for (array, want) in arrays.iter().zip(&values) {
        intact &= ctx.device_get(array)? == *want;
    }
    println!("INTACT rank {rank} {intact}");
    expect_collective::<()>(rank, Err(error))?;
    // Still in step: a fused collective and a started one run.
    let (arrays, _) = put(&shapes)?;
    let lens: Vec<usize> = shapes.iter().map(|s| s.iter().product()).collect();
    let reduced = group.start_all_reduce_many(arrays, ReduceOp::Max)?.wait()?;
    for (k, array) in reduced.iter().enumerate() {
        let want: Vec<f32> = (0..lens[k])
            .map(|i| {
                (0..ranks)
                    .map(|r| value::<f32>(r, i + k))
                    .fold(f32::MIN, f32::max)
            })
            .collect();
        ensure!(
            ctx.device_get(array)? == want,
            "the collective after the mismatch differs"
        );
    }
    Ok(())
}

/// A start returns without waiting for the other ranks: rank 0 starts, then receives from
/// rank 1, which sends before it starts. A start that waited for every rank to start would
/// wait for rank 1's send to be received, which waits for rank 0's start to return: a hang.
fn start_then_recv(group: &Collectives) -> anyhow::Result<()> {
    let ctx = group.context();
    let (rank, ranks) = (group.rank(), group.size());
    let lens = list_lens::<f32>(false);
    let message: Vec<u32> = (0..64).collect();
    let (list, _) = put_list::<f32>(ctx, rank, &lens)?;
    let pending = match rank {
        0 => {
            let pending = group.start_all_reduce_many(list, ReduceOp::Sum)?;
            let got = group.recv(ctx.zeros::<u32>(&[64])?, 1)?;
            ensure!(ctx.device_get(&got)? == message, "the message differs");
            pending
        }
        1 => {
            group.send(&ctx.device_put(&message, &[64])?, 0)?;
            group.start_all_reduce_many(list, ReduceOp::Sum)?
        }
        _ => group.start_all_reduce_many(list, ReduceOp::Sum)?,
    };
    let reduced = pending.wait()?;
    for (array, want) in reduced
        .iter()
        .zip(reference_list::<f32>(ranks, &lens, ReduceOp::Sum))
    {
        ensure!(ctx.device_get(array)? == want, "the started sum differs");
    }
    Ok(())
}

/// The error and the arrays of a start whose ranks do not agree: the start returns (the
/// agreement runs on the progress thread) and `wait()` gives the refusal.
fn refused_at_wait<T: CollectiveElement>(
    start: Result<distributed::PendingCollective<T>, distributed::DonatedList<T>>,
    what: &str,
) -> anyhow::Result<(Error, Vec<DeviceArray<T>>)> {
    match start {
        Err(donated) => bail!("{what} was refused at the start: {}", donated.error),
        Ok(pending) => match pending.wait() {
            Ok(_) => bail!("{what} ran"),
            Err(donated) => Ok((donated.error, donated.arrays)),
        },
    }
}

/// Every rank starts a collective; the last one is killed (SIGKILL, by itself) while it runs
/// and the others wait on their handles: mpirun must end, non-zero, instead of hanging.
fn killed_started(group: &Collectives) -> anyhow::Result<()> {
    let ctx = group.context();
    let rank = group.rank();
    let (arrays, _) = put_list::<f32>(ctx, rank, &list_lens::<f32>(true))?;
    let pending = group.start_all_reduce_many(arrays, ReduceOp::Sum)?;
    if rank == group.size() - 1 {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &std::process::id().to_string()])
            .status();
        std::thread::sleep(std::time::Duration::from_secs(60));
    }
    let _ = pending.wait();
    // A rank whose started collective finished before the kill waits here.
    let _ = group.barrier();
    bail!("the collectives returned although a rank died")
}
