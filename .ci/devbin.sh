#!/usr/bin/env bash
# Builds the release binaries a GPU check needs and copies them, stripped, into .devbin/
# (git-ignored), for the `device` tool to carry to a machine with a real GPU (no toolchain there).
#   bash .ci/devbin.sh, then with the device tool: run `bash .ci/gpu-check.sh` carrying
#   [".devbin", ".gl"] (.gl: the loader debs, fetched below when missing). The binaries travel
#   compressed (xz) to stay under the 64 MiB limit.
set -euo pipefail
cd "$(dirname "$0")/.."
# The Vulkan loader (and vulkaninfo) for the GPU machine, which has the NVIDIA driver but no
# loader: amd64 .debs fetched here once (the device README's recipe), unpacked there by
# gpu-check.sh.
if ! ls .gl/*.deb >/dev/null 2>&1; then
  mkdir -p .gl /tmp/amd64/partial
  o=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64)
  apt-get "${o[@]}" update -qq
  (cd .gl && apt-get "${o[@]}" download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 \
    libgles2 vulkan-tools libwayland-client0)
fi
# The examples (benchmarks among them) from the `figures` profile, as a user's release build
# has this crate (no debug assertions or lock-order checks); the tests from `--release`, with
# them on.
cargo build --profile figures --examples
cargo build --release --tests
rm -rf .devbin && mkdir -p .devbin/tests
for ex in tour memplan bench_transfers bench_update memory_report bench_launch bench_capture \
  decode saxpy device_report multi_device train; do
  [ -f "target/figures/examples/$ex" ] && cp "target/figures/examples/$ex" .devbin/
done
# The GPU tests are one binary (tests/gpu/); gpu-check.sh runs the modules named in
# .devbin/tests/modules, each as a run of its own.
for bin in $(ls -t target/release/deps/gpu-* 2>/dev/null); do
  case "$bin" in *.d) ;; *) cp "$bin" .devbin/tests/gpu; break ;; esac
done
echo device_layer transfers kernels_dus kernels_slice kernels_fill_copy kernels_limits \
  user_kernels noncoherent multi_device backprop train kernel_checks recording_model \
  public_ops_threads memory_ownership submission_counts gathered_ops >.devbin/tests/modules
strip .devbin/* .devbin/tests/* 2>/dev/null || true
# xz with a large window: the binaries share most of their code (wgpu is linked into each), so
# the archive is about a fifth of a gzip one (15 MiB instead of 68 for 21 binaries).
tar -C .devbin -cf - . | xz -9 -T2 > /tmp/gpu-arena-bins.tar.xz && rm -rf .devbin && mkdir .devbin
mv /tmp/gpu-arena-bins.tar.xz .devbin/bins.tar.xz
du -sh .devbin
