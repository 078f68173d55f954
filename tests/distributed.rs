//! Collectives across MPI ranks: each test launches `mpirun` on the rank program
//! `examples/mpi_checks.rs` (built with the feature by `cargo test --features mpi`) and reads
//! what every rank printed and how the job ended. Every launch has a deadline, so a hang is a
//! failure, not a stuck test run.
#![cfg(feature = "mpi")]

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long one mpirun may take before the test calls it a hang (lavapipe starts in about a
/// second per rank; the `collectives` scenario moves some hundred MiB on 2 shared cores).
const JOB_DEADLINE: Duration = Duration::from_secs(240);
/// The bound for a failing rank to take the whole job down.
const FAILURE_DEADLINE: Duration = Duration::from_secs(30);

/// `target/<profile>/examples/mpi_checks`, next to this test's `deps/` directory, built (or
/// brought up to date) once per test run: `cargo test --test distributed` builds only this
/// file, and a rank program left from an older build would test old code.
fn rank_program() -> PathBuf {
    static BUILT: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let exe = std::env::current_exe().map_err(|e| e.to_string())?;
            let profile_dir = exe
                .parent()
                .and_then(|deps| deps.parent())
                .ok_or("the test binary is not in target/<profile>/deps")?;
            let target_dir = profile_dir.parent().ok_or("no target directory")?;
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let mut build = Command::new(cargo);
            build
                .args(["build", "--features", "mpi", "--example", "mpi_checks"])
                .env("CARGO_TARGET_DIR", target_dir)
                .current_dir(env!("CARGO_MANIFEST_DIR"));
            if profile_dir.file_name().is_some_and(|n| n == "release") {
                build.arg("--release");
            }
            let out = build.output().map_err(|e| format!("running cargo: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "building the rank program failed:\n{}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            Ok(profile_dir.join("examples").join("mpi_checks"))
        })
        .clone()
        .unwrap_or_else(|error| panic!("{error}"))
}

struct Job {
    status: Option<i32>,
    output: String,
    took: Duration,
}

/// Runs `mpirun -np ranks [extra] mpi_checks scenario` with `env`, killing it after `deadline`.
fn mpirun(
    ranks: usize,
    extra: &[&str],
    scenario: &str,
    env: &[(&str, &str)],
    deadline: Duration,
) -> Job {
    let mut command = Command::new("mpirun");
    command
        .args([
            "--allow-run-as-root",
            "--oversubscribe",
            "-np",
            &ranks.to_string(),
        ])
        .args(extra)
        .arg(rank_program())
        .arg(scenario)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (key, value) in env {
        command.env(key, value);
    }
    // A session directory of its own per job: Open MPI 4.1's launchers, started at once by
    // tests running in parallel, race to create the shared `/tmp/ompi.<host>.<uid>` ("A call
    // to mkdir was unable to create the desired directory ... File exists", orte_init fails).
    static JOBS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let session = std::env::temp_dir().join(format!(
        "gpu-arena-mpi-{}-{}",
        std::process::id(),
        JOBS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&session).expect("a session directory for mpirun");
    command.env("OMPI_MCA_orte_tmpdir_base", &session);
    let started = Instant::now();
    let mut child = command
        .spawn()
        .expect("mpirun starts (install openmpi-bin)");
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for mpirun") {
            break Some(status.code().unwrap_or(-1));
        }
        if started.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let took = started.elapsed();
    let _ = std::fs::remove_dir_all(&session);
    let output = format!(
        "{}\n--- stderr ---\n{}",
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default()
    );
    Job {
        status,
        output,
        took,
    }
}

fn passes(ranks: usize, extra: &[&str], scenario: &str, env: &[(&str, &str)]) -> String {
    let job = mpirun(ranks, extra, scenario, env, JOB_DEADLINE);
    assert_eq!(
        job.status,
        Some(0),
        "{scenario} on {ranks} ranks (None: hung):\n{}",
        job.output
    );
    for rank in 0..ranks {
        assert!(
            job.output
                .contains(&format!("PASS {scenario} rank {rank}\n")),
            "rank {rank} did not pass {scenario}:\n{}",
            job.output
        );
    }
    for bad in ["VUID-", "Validation Error", "FAIL"] {
        assert!(
            !job.output.contains(bad),
            "{bad} in the output:\n{}",
            job.output
        );
    }
    job.output
}

/// The lines of `output` that start with `prefix` and name `rank`.
fn line<'a>(output: &'a str, prefix: &str, rank: usize) -> &'a str {
    let start = format!("{prefix} rank {rank}");
    output
        .lines()
        .find(|l| l.starts_with(&start))
        .unwrap_or_else(|| panic!("no line `{start}` in:\n{output}"))
}

#[test]
fn every_collective_matches_the_host_reference_for_every_element_type_on_two_ranks() {
    let output = passes(2, &[], "collectives", &[]);
    assert!(output.contains("host_bytes_peak"), "{output}");
}

#[test]
fn every_collective_matches_the_host_reference_on_three_ranks_not_a_power_of_two() {
    passes(3, &[], "collectives", &[]);
}

#[test]
fn collectives_through_the_staging_pool_match_when_zero_copy_is_off() {
    let output = passes(2, &[], "collectives", &[("GPU_ARENA_ZERO_COPY", "0")]);
    assert!(output.contains("zero_copy false"), "{output}");
}

/// On wgpu's GL backend staging is wgpu's own: a chunk is reduced on the host, never in
/// staging buffers the host cannot map, and a rank's writes into its arrays land after the
/// single ops gathered before them (a small `device_put` of the array included).
#[test]
fn collectives_on_the_gl_backend_match_the_host_reference() {
    let gl = [("GPU_ARENA_BACKEND", "gl")];
    let output = passes(2, &[], "collectives", &gl);
    assert!(output.contains("backend Gl"), "{output}");
    passes(2, &[], "fused", &gl);
    passes(2, &[], "started", &gl);
}

/// Whether `mpirun` is Open MPI's (whose `MPI_IN_PLACE` the library knows).
fn runs_open_mpi() -> bool {
    Command::new("mpirun")
        .arg("--version")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains("Open MPI"))
}

#[test]
fn all_reduce_goes_in_place_on_open_mpi_on_both_paths_and_matches_the_host_reference() {
    if !runs_open_mpi() {
        eprintln!("mpirun is not Open MPI's: nothing to check");
        return;
    }
    for zero_copy in ["1", "0"] {
        let output = passes(2, &[], "collectives", &[("GPU_ARENA_ZERO_COPY", zero_copy)]);
        for rank in 0..2 {
            let start = format!("rank {rank}: ");
            let l = output
                .lines()
                .find(|l| l.starts_with(&start))
                .unwrap_or_else(|| panic!("no line `{start}` in:\n{output}"));
            assert!(
                l.contains("in_place true") && l.contains("library \"Open MPI"),
                "rank {rank} (zero-copy {zero_copy}) said {l:?}"
            );
            assert!(
                l.contains(&format!("zero_copy {}", zero_copy == "1")),
                "{l:?}"
            );
        }
    }
}

#[test]
fn collectives_run_over_the_tcp_network_path() {
    passes(2, &["--mca", "btl", "self,tcp"], "collectives", &[]);
}

/// The failure `mpi_checks` prints after a collective error's message.
fn failure(failure: &str) -> String {
    format!("[failure: {failure}]")
}

/// Runs a scenario in which the last rank calls something else, and checks that every rank
/// said `says` and names that rank as the one that differs.
fn mismatch_is_an_error_on_every_rank(ranks: usize, scenario: &str, says: &str) -> String {
    let output = passes(ranks, &[], scenario, &[]);
    let differing = failure(&format!("Mismatch {{ rank: {} }}", ranks - 1));
    for rank in 0..ranks {
        let l = line(&output, "COLLECTIVE", rank);
        assert!(l.contains(says), "rank {rank} said {l:?}, not {says:?}");
        assert!(l.ends_with(&differing), "rank {rank} said {l:?}");
    }
    output
}

#[test]
fn a_rank_with_another_shape_makes_every_rank_return_a_collective_error_and_keeps_its_array() {
    let output =
        mismatch_is_an_error_on_every_rank(3, "mismatch-shape", "the shapes differ: rank 0 called all_reduce(sum) of f32 [3, 4] but rank 2 called all_reduce(sum) of f32 [4, 3]");
    for rank in 0..3 {
        assert!(
            output.contains(&format!("INTACT rank {rank} true")),
            "{output}"
        );
    }
}

#[test]
fn a_rank_with_another_element_type_makes_every_rank_return_a_collective_error() {
    mismatch_is_an_error_on_every_rank(2, "mismatch-type", "the element types differ");
    let output = passes(2, &[], "mismatch-type", &[]);
    assert!(
        line(&output, "COLLECTIVE", 0).contains("of u32 [3, 4]"),
        "{output}"
    );
}

#[test]
fn a_rank_with_another_reduction_makes_every_rank_return_a_collective_error() {
    mismatch_is_an_error_on_every_rank(
        2,
        "mismatch-op",
        "the reductions differ: rank 0 called all_reduce(sum)",
    );
}

#[test]
fn a_rank_with_another_broadcast_root_makes_every_rank_return_a_collective_error() {
    mismatch_is_an_error_on_every_rank(2, "mismatch-root", "the roots differ");
}

#[test]
fn a_rank_calling_another_collective_makes_every_rank_return_a_collective_error() {
    mismatch_is_an_error_on_every_rank(2, "mismatch-kind", "the operations differ: rank 0 called all_reduce(sum) of f32 [3, 4] but rank 1 called barrier");
}

#[test]
fn a_send_and_a_recv_of_different_shapes_fail_on_both_sides() {
    let output = passes(2, &[], "mismatch-send", &[]);
    for (rank, peer) in [(0, 1), (1, 0)] {
        let l = line(&output, "COLLECTIVE", rank);
        assert!(l.contains("the shapes differ"), "rank {rank} said {l:?}");
        assert!(
            l.ends_with(&failure(&format!("Mismatch {{ rank: {peer} }}"))),
            "rank {rank} said {l:?}"
        );
    }
}

#[test]
fn two_recvs_facing_each_other_fail_on_both_sides_instead_of_waiting() {
    let output = passes(2, &[], "mismatch-recv", &[]);
    for (rank, peer) in [(0, 1), (1, 0)] {
        let l = line(&output, "COLLECTIVE", rank);
        assert!(
            l.contains("the operations do not pair"),
            "rank {rank} said {l:?}"
        );
        assert!(
            l.ends_with(&failure(&format!("Mismatch {{ rank: {peer} }}"))),
            "rank {rank} said {l:?}"
        );
    }
}

#[test]
fn a_guard_refusal_on_one_rank_is_its_own_error_and_a_collective_error_elsewhere() {
    let output = passes(2, &[], "guard", &[]);
    assert!(
        line(&output, "LOCAL", 0).contains("Disallowed device-to-host transfer"),
        "{output}"
    );
    let other = line(&output, "COLLECTIVE", 1);
    assert!(
        other.contains("rank 0 refused its part (its transfer guard refused the transfer)"),
        "{other}"
    );
    assert!(
        other.ends_with(&failure("Refused { rank: 0, refusal: TransferGuard }")),
        "{other}"
    );
}

#[test]
fn an_array_pending_in_a_sequence_is_refused_on_its_rank_by_a_collective_that_writes_it_only() {
    // The scenario also runs the collectives that only read it there (all_gather,
    // reduce_scatter, send, a broadcast from that rank) before the sequence is submitted.
    let output = passes(2, &[], "pending", &[]);
    assert!(line(&output, "LOCAL", 0).contains("submit()"), "{output}");
    let other = line(&output, "COLLECTIVE", 1);
    assert!(other.contains("unsubmitted Sequence"), "{output}");
    assert!(
        other.ends_with(&failure("Refused { rank: 0, refusal: NotReady }")),
        "{other}"
    );
}

#[test]
fn a_rank_below_mpi_thread_multiple_refuses_a_start_at_once_and_every_other_rank_is_told_why_at_wait(
) {
    let output = passes(2, &[], "thread-single", &[]);
    assert!(
        line(&output, "LOCAL", 0).contains("needs MPI_THREAD_MULTIPLE"),
        "{output}"
    );
    let other = line(&output, "COLLECTIVE", 1);
    assert!(
        other.contains(
            "rank 0 refused its part (its MPI was not initialized with MPI_THREAD_MULTIPLE)"
        ),
        "{other}"
    );
    assert!(
        other.ends_with(&failure("Refused { rank: 0, refusal: ThreadSupport }")),
        "{other}"
    );
}

#[test]
fn a_start_returns_before_the_other_ranks_start_so_a_receive_after_it_meets_a_send_before_theirs() {
    // Every launch has its deadline (`passes`): a start that waited for the other ranks hangs.
    for ranks in [2, 3] {
        passes(ranks, &[], "start-then-recv", &[]);
    }
}

#[test]
fn a_second_thread_reads_the_array_while_it_is_all_gathered() {
    passes(2, &[], "threads", &[]);
}

#[test]
fn a_captured_run_copies_its_input_on_the_gpu_while_mpi_sends_that_array() {
    passes(2, &[], "run-while-sent", &[]);
}

#[test]
fn a_rank_that_aborts_on_error_ends_the_whole_job_with_a_failure_status() {
    let job = mpirun(3, &[], "abort", &[], FAILURE_DEADLINE);
    assert!(job.took < FAILURE_DEADLINE, "the job hung:\n{}", job.output);
    assert!(
        matches!(job.status, Some(s) if s != 0),
        "status {:?}:\n{}",
        job.status,
        job.output
    );
    assert!(
        job.output
            .contains("rank 2 of 3 failed: invalid argument to training step"),
        "{}",
        job.output
    );
}

#[test]
fn a_rank_that_dies_ends_the_whole_job_with_a_failure_status() {
    let job = mpirun(2, &[], "killed", &[], FAILURE_DEADLINE);
    assert!(job.took < FAILURE_DEADLINE, "the job hung:\n{}", job.output);
    assert!(
        matches!(job.status, Some(s) if s != 0),
        "status {:?}:\n{}",
        job.status,
        job.output
    );
}

#[test]
fn arguments_every_rank_gets_wrong_are_refused_on_every_rank_with_their_reason() {
    let output = passes(2, &[], "refusals", &[]);
    for rank in 0..2 {
        for (what, says) in [
            ("init", "MPI is already initialized in this process"),
            ("root", "root 6 is not a rank of this group of 2 ranks"),
            (
                "reduce_scatter",
                "the first dimension, 5, is not a multiple of the 2 ranks",
            ),
            (
                "reduce_scatter of a scalar",
                "a scalar has no first dimension to split into one block per rank",
            ),
            ("all_gather", "above the maximum rank of 6"),
            (
                "send",
                &format!(
                    "rank {rank} is not another rank of this group (this is rank {rank} of 2)"
                ),
            ),
            ("recv", "rank 3 is not another rank of this group"),
        ] {
            let l = line(&output, "REFUSED", rank);
            let l = output
                .lines()
                .find(|l| l.starts_with(&format!("REFUSED rank {rank} {what}:")))
                .unwrap_or_else(|| panic!("no refusal of {what} on rank {rank}:\n{output}\n{l}"));
            assert!(l.contains(says), "{l:?} does not say {says:?}");
        }
    }
}

/// `passes` on 2 and 3 ranks, zero-copy and through the staging pool.
fn passes_everywhere(scenario: &str) {
    for ranks in [2, 3] {
        for zero_copy in ["1", "0"] {
            let output = passes(ranks, &[], scenario, &[("GPU_ARENA_ZERO_COPY", zero_copy)]);
            let said = format!("zero_copy {}", zero_copy == "1");
            assert!(
                output.contains(&said),
                "{scenario}: no `{said}` in:\n{output}"
            );
        }
    }
}

#[test]
fn fused_lists_of_mixed_sizes_match_the_host_reduction_and_agree_bitwise_across_ranks() {
    passes_everywhere("fused");
}

#[test]
fn started_collectives_and_broadcasts_waited_out_of_order_or_dropped_run_in_step_and_leak_nothing()
{
    passes_everywhere("started");
}

/// Runs a list-mismatch scenario with `GPU_ARENA_ZERO_COPY` at each of `paths` and checks that
/// every rank said `says`, named the last rank as the one whose list differs, and got its arrays
/// back intact.
fn list_mismatch_is_refused_everywhere_with_arrays_intact(
    ranks: usize,
    paths: &[&str],
    scenario: &str,
    says: &str,
) {
    for &zero_copy in paths {
        let output = passes(ranks, &[], scenario, &[("GPU_ARENA_ZERO_COPY", zero_copy)]);
        let differing = failure(&format!("Mismatch {{ rank: {} }}", ranks - 1));
        for rank in 0..ranks {
            let l = line(&output, "COLLECTIVE", rank);
            assert!(l.contains(says), "rank {rank} said {l:?}, not {says:?}");
            assert!(l.ends_with(&differing), "rank {rank} said {l:?}");
            assert!(
                output.contains(&format!("INTACT rank {rank} true")),
                "{output}"
            );
        }
    }
}

#[test]
fn fused_lists_of_different_lengths_are_refused_on_every_rank_and_kept_intact() {
    list_mismatch_is_refused_everywhere_with_arrays_intact(
        3,
        &["1"],
        "mismatch-list-length",
        "the numbers of arrays differ: rank 0 called all_reduce_many(sum) of 4 f32 arrays (25 elements) but rank 2 called all_reduce_many(sum) of 3 f32 arrays (17 elements)",
    );
}

#[test]
fn fused_lists_whose_shapes_differ_name_the_first_array_that_differs_on_every_rank() {
    list_mismatch_is_refused_everywhere_with_arrays_intact(
        3,
        &["1", "0"],
        "mismatch-list-shape",
        "the arrays' shapes differ: array 1 of the list is [3, 4] on rank 0 but [4, 3] on rank 2",
    );
}

#[test]
fn fused_lists_of_another_element_type_or_reduction_are_refused_on_every_rank() {
    list_mismatch_is_refused_everywhere_with_arrays_intact(
        2,
        &["1"],
        "mismatch-list-type",
        "the element types differ: rank 0 called all_reduce_many(sum) of 4 f32 arrays",
    );
    list_mismatch_is_refused_everywhere_with_arrays_intact(
        2,
        &["1"],
        "mismatch-list-op",
        "the reductions differ: rank 0 called all_reduce_many(sum)",
    );
}

#[test]
fn fused_lists_whose_sizes_differ_name_the_first_array_and_both_shapes_on_every_rank() {
    list_mismatch_is_refused_everywhere_with_arrays_intact(
        3,
        &["1", "0"],
        "mismatch-list-size",
        "the arrays' shapes differ: array 1 of the list is [3, 4] on rank 0 but [13] on rank 2",
    );
}

#[test]
fn a_start_against_a_blocking_call_is_refused_on_every_rank_never_a_hang() {
    // Every launch has its deadline (`passes`): a hang fails the test.
    for ranks in [2, 3] {
        list_mismatch_is_refused_everywhere_with_arrays_intact(
            ranks,
            &["1", "0"],
            "mixed-start",
            &format!("a started and a blocking call differ (a start_*_many call on one rank must meet the same start on every rank): rank 0 called start_all_reduce_many(sum) of 4 f32 arrays (25 elements) but rank {} called all_reduce_many(sum) of 4 f32 arrays (25 elements)", ranks - 1),
        );
    }
}

#[test]
fn a_started_collective_over_differing_lists_is_refused_at_wait_on_every_rank() {
    list_mismatch_is_refused_everywhere_with_arrays_intact(
        2,
        &["0"],
        "mismatch-start",
        "start_all_reduce_many: the arrays' shapes differ: array 1 of the list is [3, 4] on rank 0 but [4, 3] on rank 1",
    );
}

#[test]
fn a_started_broadcast_over_differing_lists_is_refused_at_wait_on_every_rank() {
    for ranks in [2, 3] {
        list_mismatch_is_refused_everywhere_with_arrays_intact(
            ranks,
            &["1", "0"],
            "mismatch-start-broadcast",
            &format!("start_broadcast_many: the arrays' shapes differ: array 1 of the list is [3, 4] on rank 0 but [4, 3] on rank {}", ranks - 1),
        );
    }
}

#[test]
fn a_rank_that_dies_during_a_started_collective_ends_the_whole_job_with_a_failure_status() {
    let job = mpirun(2, &[], "killed-started", &[], FAILURE_DEADLINE);
    assert!(job.took < FAILURE_DEADLINE, "the job hung:\n{}", job.output);
    assert!(
        matches!(job.status, Some(s) if s != 0),
        "status {:?}:\n{}",
        job.status,
        job.output
    );
}
