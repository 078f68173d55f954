#!/usr/bin/env bash
# Builds the release binaries a GPU check needs and copies them, stripped, into .devbin/
# (git-ignored), for the `device` tool to carry to a machine with a real GPU (no toolchain there).
#   bash .ci/devbin.sh && then run: bash .ci/gpu-check.sh   (with carry [".devbin", ".gl"])
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --examples --tests
rm -rf .devbin && mkdir -p .devbin/tests
for ex in tour memplan bench_transfers bench_update memory_report; do
  [ -f "target/release/examples/$ex" ] && cp "target/release/examples/$ex" .devbin/
done
for t in device_layer transfers kernels_dus kernels_slice kernels_fill_copy kernels_limits; do
  bin=$(ls -t target/release/deps/${t}-* 2>/dev/null | grep -v '\.d$' | head -1 || true)
  [ -n "$bin" ] && cp "$bin" ".devbin/tests/$t"
done
strip .devbin/* .devbin/tests/* 2>/dev/null || true
du -sh .devbin
