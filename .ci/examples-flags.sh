#!/usr/bin/env bash
# Every example parses its command line like a command-line tool: `--help` prints its usage
# and exits 0; an unknown flag, a stray argument or a bad value prints what was wrong and
# exits 2, before any GPU is opened. Run by .ci/run after the tests (which build the examples).
set -uo pipefail
cd "$(dirname "$0")/.."
cargo build --release --examples --quiet || exit 1
# The examples of the `mpi` feature, where MPI is installed (.ci/run installs it).
mpi_examples="mpi_checks bench_collectives data_parallel"
have_mpi=0
if command -v mpicc >/dev/null 2>&1; then
  cargo build --release --features mpi --examples --quiet || exit 1
  have_mpi=1
fi
# The example of the `cubecl` feature (a build of its own; .ci/run builds it first, so this one
# is warm there).
cargo build --release --features cubecl --example cubecl_interop --quiet || exit 1
bin="${CARGO_TARGET_DIR:-target}/release/examples"
failures=0

# No run here may take longer (seconds): a refusal comes before any work.
LIMIT=300

# expect EXIT TEXT COMMAND...: COMMAND exits with EXIT and prints TEXT (stdout or stderr).
expect() {
  local want=$1 text=$2; shift 2
  local out rc
  out=$(timeout -s KILL "$LIMIT" "$@" 2>&1 </dev/null); rc=$?
  if [ "$rc" -ne "$want" ] || ! grep -qF -- "$text" <<<"$out"; then
    echo "FAIL: $* exited $rc (expected $want, with \"$text\" in its output):" >&2
    head -n 5 <<<"$out" >&2
    failures=$((failures + 1))
  fi
}

checked=0
for source in examples/*.rs examples/*/main.rs; do
  ex=$(basename "$source" .rs)
  [ "$ex" = main ] && ex=$(basename "$(dirname "$source")")
  if [ "$have_mpi" -eq 0 ] && grep -qw "$ex" <<<"$mpi_examples"; then continue; fi
  expect 0 "usage: $ex" "$bin/$ex" --help
  expect 0 "usage: $ex" "$bin/$ex" -h
  expect 2 "invalid option '--no-such-flag'" "$bin/$ex" --no-such-flag
  checked=$((checked + 1))
done
# Bad values, missing values and stray arguments, one of each kind.
expect 2 'invalid value "abc" for --size-mib' "$bin/bench_update" --size-mib abc
expect 2 '--size-mib must be between 1 and' "$bin/bench_update" --size-mib 99999999999
expect 2 '--iters must be between 1 and 1000' "$bin/bench_transfers" --iters 0
expect 2 "unexpected argument for option '--json'" "$bin/bench_timeline" --json=yes
expect 2 'invalid value "nope" for --trace' "$bin/bench_alloc" --trace nope
expect 2 'invalid value "nope" for --allocator' "$bin/bench_alloc" --allocator nope
expect 2 "missing argument for option '--out'" "$bin/memory_report" --out
expect 2 'unexpected argument "out/"' "$bin/memory_report" out/
expect 2 'unexpected argument "b.json"' "$bin/memplan" a.json b.json
expect 2 'unexpected argument "extra"' "$bin/tour" extra
expect 2 '--launches must be between 1 and 10000' "$bin/bench_launch" --launches 0
expect 2 '--dim must be between 1 and' "$bin/decode" --dim 99999999
expect 2 'invalid value "-1" for --n' "$bin/saxpy" --n -1
expect 2 "missing argument for option '--save'" "$bin/device_report" --save
expect 2 '--steps must be between 1 and' "$bin/train" --steps 0
expect 2 '--size must be between 8 and 2048' "$bin/render_interop" --size 4
if [ "$have_mpi" -eq 1 ]; then
  expect 2 '--bucket-mib must be between 0 and 1024' "$bin/data_parallel" --bucket-mib 5000
  # A run measures both ways, a step each at least.
  expect 2 '--steps must be between 2 and' "$bin/data_parallel" --steps 1
fi
# Variables and flags whose effect the help text promises.
expect 2 'BENCH_ALLOC_REPEATS="x": give a number of replays' env BENCH_ALLOC_REPEATS=x "$bin/bench_alloc" --json
expect 2 'BENCH_ALLOC_REPEATS="0"' env BENCH_ALLOC_REPEATS=0 "$bin/bench_alloc" --trace small
expect 0 '{"trace":"small","allocator":"gpu-arena"' \
  env BENCH_ALLOC_REPEATS=1 "$bin/bench_alloc" --json --trace small --allocator gpu-arena
expect 0 '"prealloc_fraction": 0.5,' env GPU_ARENA_MEM_FRACTION=0.5 "$bin/memplan"
expect 0 '"prealloc_bytes": 0,' env GPU_ARENA_PREALLOCATE=false "$bin/memplan"
expect 0 '"prealloc_bytes": 0,' env GPU_ARENA_ALLOCATOR=platform "$bin/memplan"
# Only the update sizes that fit in the operand are measured (and named).
out=$(timeout -s KILL "$LIMIT" "$bin/bench_update" --json --size-mib 2 --iters 1 2>/dev/null)
if ! grep -q '"case":"1MiB"' <<<"$out" || grep -q '"case":"16MiB"\|"case":"256MiB"' <<<"$out"; then
  echo "FAIL: bench_update --size-mib 2 rows: $(grep -o '"case":"[^"]*"' <<<"$out" | sort -u | tr '\n' ' ')" >&2
  failures=$((failures + 1))
fi
# An operand too large for the arena shrinks to one whose cases all fit, and the run ends (0).
expect 0 'could not be allocated; using' \
  env GPU_ARENA_MEM_FRACTION=0.05 "$bin/bench_update" --json --size-mib 100 --iters 1
# Under a 1 MiB region cap the pipeline timing halves its update and the operand shrinks.
expect 0 '"update_bytes":524288' \
  env GPU_ARENA_MAX_REGION_MB=1 "$bin/bench_update" --json --size-mib 2 --iters 1
# Each length's cost per op is a ratio to the shortest length's, in whatever order given.
out=$(timeout -s KILL "$LIMIT" "$bin/bench_capture" --json --ops 40,10 --rounds 1 --repeat 1 2>/dev/null)
if ! head -n 1 <<<"$out" | grep -q '"ops":10,.*"ratio_to_shortest_length":1.000}'; then
  echo "FAIL: bench_capture --ops 40,10: first row $(head -n 1 <<<"$out")" >&2
  failures=$((failures + 1))
fi

# The largest values each example's flags accept, and just over: an example bounds
# what it allocates from its flags (4 GiB at most, products of flags included) and refuses
# more with exit 2 before any work; a run it accepts ends (0). Never a signal or an abort
# (`multi_device --rows 1073741824 --cols 1073741824` was a SIGABRT on 256 GiB), and never
# past the time limit (a timeout is killed, 137). Iteration counts are bounded by their
# ranges (just over is tried); their largest values are not run here, for time.
# bounded COMMAND...: COMMAND exits 0 or 2 within $LIMIT seconds.
bounded() {
  local out rc
  out=$(timeout -s KILL "$LIMIT" "$@" 2>&1 </dev/null); rc=$?
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 2 ]; then
    echo "FAIL: $* exited $rc (expected 0 or 2 within ${LIMIT}s):" >&2
    tail -n 5 <<<"$out" >&2
    failures=$((failures + 1))
  fi
}
over='would take more than the 4 GiB this example allocates at most'
expect 2 "$over" "$bin/multi_device" --rows 1073741824 --cols 1073741824
expect 2 "$over" "$bin/multi_device" --contexts 64 --rows 1073741824 --cols 1073741824 --mib 4096
expect 2 '--rows must be between 1 and' "$bin/multi_device" --rows 1073741825
expect 2 '--cols must be between 1 and' "$bin/multi_device" --cols 1073741825
expect 2 '--mib must be between 0 and 4096' "$bin/multi_device" --mib 4097
expect 2 '--contexts must be between 1 and 64' "$bin/multi_device" --contexts 65
expect 2 '--mib copies between two contexts' "$bin/multi_device" --contexts 1 --mib 1
expect 2 "$over" "$bin/saxpy" --n 4294967295
expect 2 'invalid value "4294967296" for --n' "$bin/saxpy" --n 4294967296
expect 2 "$over" "$bin/bench_transfers" --size-mib 4096 --d2d-mib 4096 --iters 1 --arrays 18446744073709551615
expect 2 "$over" "$bin/bench_transfers" --arrays 1048577
expect 2 '--size-mib must be between 1 and 4096' "$bin/bench_transfers" --size-mib 4097
expect 2 '--d2d-mib must be between 1 and 4096' "$bin/bench_transfers" --d2d-mib 4097
expect 2 '--iters must be between 1 and 1000' "$bin/bench_transfers" --iters 1001
expect 2 '--size-mib must be between 1 and 4096' "$bin/bench_update" --size-mib 4097
expect 2 '--iters must be between 1 and 1000' "$bin/bench_update" --iters 1001
expect 2 "$over" "$bin/decode" --steps 65536 --layers 65536 --dim 65536
expect 2 '--dim must be between 1 and 65536' "$bin/decode" --dim 65537
expect 2 '--launches must be between 1 and 10000' "$bin/bench_launch" --launches 10001
expect 2 '--ops must be lengths between 1 and 100000' "$bin/bench_capture" --ops 100001
expect 2 '--repeat must be between 1 and 20' "$bin/bench_capture" --repeat 0
expect 2 '--mib must be between 1 and 4096' "$bin/cubecl_interop" --mib 4097
expect 2 '--iters must be between 1 and 100' "$bin/cubecl_interop" --iters 0
expect 2 '--steps must be between 1 and 1000000' "$bin/train" --steps 1000001
expect 2 '--layers must be between 3 and 1000000' "$bin/remat" --layers 1000001
expect 2 '--layers must be between 3 and 1000000' "$bin/remat" --layers 2
expect 0 '"layers":3,' "$bin/remat" --layers 3 --json
expect 1 'GPU_ARENA_MEM_FRACTION' env GPU_ARENA_MEM_FRACTION=abc "$bin/remat"
# A million-layer budget search: planned in bounded memory (a minute, not gigabytes).
bounded "$bin/remat" --layers 1000000 --json
# A file argument is read up to a bound: /dev/zero is refused, not read until memory ends.
expect 1 'more than 16 MiB' "$bin/memplan" /dev/zero

if [ "$failures" -gt 0 ]; then
  echo "examples' flags: $failures check(s) failed" >&2
  exit 1
fi
echo "examples' flags: $checked examples answer --help and refuse bad flags"
