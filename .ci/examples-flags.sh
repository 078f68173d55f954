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
bin="${CARGO_TARGET_DIR:-target}/release/examples"
failures=0

# expect EXIT TEXT COMMAND...: COMMAND exits with EXIT and prints TEXT (stdout or stderr).
expect() {
  local want=$1 text=$2; shift 2
  local out rc
  out=$("$@" 2>&1 </dev/null); rc=$?
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
expect 2 '--iters must be at least 1' "$bin/bench_transfers" --iters 0
expect 2 "unexpected argument for option '--json'" "$bin/bench_timeline" --json=yes
expect 2 'invalid value "nope" for --trace' "$bin/bench_alloc" --trace nope
expect 2 'invalid value "nope" for --allocator' "$bin/bench_alloc" --allocator nope
expect 2 "missing argument for option '--out'" "$bin/memory_report" --out
expect 2 'unexpected argument "out/"' "$bin/memory_report" out/
expect 2 'unexpected argument "b.json"' "$bin/memplan" a.json b.json
expect 2 'unexpected argument "extra"' "$bin/tour" extra
expect 2 '--launches must be at least 1' "$bin/bench_launch" --launches 0
expect 2 '--dim must be between 1 and' "$bin/decode" --dim 99999999
expect 2 'invalid value "-1" for --n' "$bin/saxpy" --n -1
expect 2 "missing argument for option '--save'" "$bin/device_report" --save
expect 2 '--steps must be between 1 and' "$bin/train" --steps 0

if [ "$failures" -gt 0 ]; then
  echo "examples' flags: $failures check(s) failed" >&2
  exit 1
fi
echo "examples' flags: $checked examples answer --help and refuse bad flags"
