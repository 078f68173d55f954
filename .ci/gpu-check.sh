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
# Every step runs under its own limit T and under the whole check's DEADLINE (seconds since the
# start): a step that would begin past it is skipped, and none runs past it, so that the device
# tool's one call (10 minutes at most) always returns what was measured. The steps run the most
# wanted figures first.
DEADLINE="${DEADLINE:-520}"
run() {
  local name=$1; shift; local left=$((DEADLINE - SECONDS)); local t=${T:-120}
  echo "== $name (at ${SECONDS}s)"
  if [ "$left" -lt 10 ]; then echo "skipped: past the deadline"; return; fi
  [ "$t" -gt "$left" ] && t=$left
  timeout "$t" "$@" > "$OUT/$name.txt" 2>&1; echo "rc $?"; tail -n "${TAIL:-40}" "$OUT/$name.txt"
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/nvidia-smi.txt" 2>&1 || true
vulkaninfo --summary > "$OUT/vulkaninfo.txt" 2>&1 || true
if ! grep -q "NVIDIA" "$OUT/vulkaninfo.txt"; then
  # The device README's fallback when the loader does not find the NVIDIA ICD by itself.
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
  vulkaninfo --summary > "$OUT/vulkaninfo.txt" 2>&1 || true
fi
grep -E "deviceName|driverVersion|apiVersion" "$OUT/vulkaninfo.txt" | head
TAIL=5 T=30 run memplan $B/memplan
TAIL=30 T=60 run tour $B/tour
# Issue 48: every library kernel of 256 MiB against the device's copy, tuned against fixed and
# against the fastest shape.
TAIL=30 T=150 run bench_update_variants $B/bench_update --variants --size-mib 256 --iters 15
TAIL=20 T=60 run bench_update $B/bench_update --json
# Issue 45: a captured step against a sequence, launches against raw wgpu, capture cost.
TAIL=12 T=60 run decode $B/decode --json --steps 256 --dim 1024 --layers 8
TAIL=10 T=60 run bench_launch $B/bench_launch --json
TAIL=10 T=90 run bench_capture $B/bench_capture --json
TAIL=12 T=60 run bench_transfers $B/bench_transfers
TAIL=40 T=120 run device_report $B/device_report --save "$OUT"
# A captured step whose temporaries take several blocks at the device's own array limit.
BIG=temporaries_beyond_the_devices_largest_array_take_several_blocks
TAIL=14 T=120 run test-large-temporaries $B/tests/gpu "captured_steps::$BIG" --nocapture
# The tests on a discrete (staging) path, each module a run of its own.
for m in $(cat $B/tests/modules); do
  TAIL=3 T=90 run "test-$m" $B/tests/gpu "$m::" --test-threads=2 --skip "$BIG"
done
# A second process must read the tuning file and measure nothing.
GPU_ARENA_CACHE_DIR=/tmp/gpu-arena-cache TAIL=3 T=60 run bench_update_variants_first $B/bench_update --variants --size-mib 1 --iters 15
GPU_ARENA_CACHE_DIR=/tmp/gpu-arena-cache TAIL=3 T=60 run bench_update_variants_cached $B/bench_update --variants --size-mib 1 --iters 15
# Kernel tuning timed by the GPU's timestamps beside the wall-clock tuning of the report above.
GPU_ARENA_TIMELINE=on TAIL=24 T=90 run device_report_timestamps $B/device_report --quick
TAIL=20 T=60 run multi_device $B/multi_device --mib 1024
TAIL=20 T=120 run train $B/train --large
echo "done at ${SECONDS}s"
# The device tool brings back at most 8 files: everything travels as one archive.
tar -C "$OUT" -czf /tmp/gpu-check.tgz . && find "$OUT" -mindepth 1 -delete && mv /tmp/gpu-check.tgz "$OUT/"
