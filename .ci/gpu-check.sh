#!/usr/bin/env bash
# The GPU check, run on a machine with a real GPU from binaries built by .ci/devbin.sh:
# heaps and plan, preallocation latency, the tests on a discrete (staging) path, and the
# transfer and dynamic_update_slice benchmarks. Writes everything under $OUT (or ./gpu-check).
set -u
OUT="${OUT:-gpu-check}"; mkdir -p "$OUT"
if [ -d .gl ] && ! ldconfig -p | grep -q libvulkan.so.1; then
  for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
fi
export XDG_RUNTIME_DIR=/tmp
B=.devbin
if [ -f $B/bins.tar.xz ]; then
  # tar's xz, or Python's lzma where the machine has no xz binary.
  tar -C $B -xJf $B/bins.tar.xz 2>/dev/null ||
    python3 -c "import tarfile; tarfile.open('$B/bins.tar.xz').extractall('$B')"
fi
run() { local name=$1; shift; echo "== $name"; timeout "${T:-120}" "$@" > "$OUT/$name.txt" 2>&1; echo "rc $?"; tail -n "${TAIL:-40}" "$OUT/$name.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/nvidia-smi.txt" 2>&1 || true
vulkaninfo --summary > "$OUT/vulkaninfo.txt" 2>&1 || true
if ! grep -q "NVIDIA" "$OUT/vulkaninfo.txt"; then
  # The device README's fallback when the loader does not find the NVIDIA ICD by itself.
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
  vulkaninfo --summary > "$OUT/vulkaninfo.txt" 2>&1 || true
fi
grep -E "deviceName|driverVersion|apiVersion" "$OUT/vulkaninfo.txt" | head
TAIL=5 run memplan $B/memplan
TAIL=60 run tour $B/tour
for m in $(cat $B/tests/modules); do
  TAIL=3 T=300 run "test-$m" $B/tests/gpu "$m::" --test-threads=2
done
TAIL=12 run bench_transfers $B/bench_transfers
TAIL=20 run bench_update $B/bench_update --json
GPU_ARENA_CACHE_DIR=/tmp/gpu-arena-cache TAIL=20 run bench_update_cached $B/bench_update
# Kernel tuning: every shape against the fixed and the tuned one (issue 48's rows), and a second
# process that must read the tuning file and measure nothing.
TAIL=20 T=240 run bench_update_variants $B/bench_update --variants --size-mib 256 --iters 15
GPU_ARENA_CACHE_DIR=/tmp/gpu-arena-cache TAIL=3 run bench_update_variants_cached $B/bench_update --variants --size-mib 1 --iters 15
# Users' kernels and sequences, the device report (full size, with the
# memory table saved), device-to-device copies, and training under each checkpointing policy.
TAIL=10 run bench_launch $B/bench_launch --json
TAIL=10 run bench_capture $B/bench_capture --json
TAIL=10 run decode $B/decode --steps 256 --dim 1024 --layers 8
TAIL=200 T=180 run device_report $B/device_report --save "$OUT"
# Kernel tuning timed by the GPU's timestamps (the timeline asks the device for them) beside the
# wall-clock tuning of the report above: the two tables should choose alike.
GPU_ARENA_TIMELINE=on TAIL=24 T=120 run device_report_timestamps $B/device_report --quick
TAIL=20 run multi_device $B/multi_device --mib 1024
TAIL=20 T=300 run train $B/train --large
