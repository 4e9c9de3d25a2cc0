#!/usr/bin/env bash
# The GPU check for a lent NVIDIA machine (no Rust toolchain and no network there, so the
# binaries are built here and carried there), in four parts:
#
#   scripts/device-check.sh build   # here: release test binaries (one per crate) and bench binaries with
#                                   # --features cuda,wgpu and the trainer with --features cuda
#                                   # (CUDA 13.0 bindings), stripped and
#                                   # compressed, plus the data they read, into .device/ and
#                                   # .device-train/ (both git-ignored; each under the 64 MiB a
#                                   # device call carries)
#   scripts/device-check.sh run     # there (carry .device and .gl): the GPU tests on cuda and
#                                   # wgpu, then the cuda rows of the raster, field (forward),
#                                   # transform and sort benches, the wgpu rows of the raster
#                                   # bench and an Nsight Compute summary of the raster kernels
#   scripts/device-check.sh train   # there (carry .device-train): lego_400 on cuda with the
#                                   # 7k-step schedule, then `trainer bench render` of the result
#   scripts/device-check.sh bench-train  # there (carry .device-train): `trainer bench train`,
#                                   # 300 and 1500 steps, with and without --sync-phases
#
# With the device tool: run(command="scripts/device-check.sh run", carry=[".device", ".gl"]),
# then at once run(command="scripts/device-check.sh train", carry=[".device-train"]). Logs go to
# $OUT. `.gl` holds the Vulkan and GL loader packages the device lacks (wgpu needs the Vulkan
# loader; the NVIDIA driver there provides the ICD), downloaded once here as the device README
# says: `mkdir -p .gl && cd .gl && apt-get -oAPT::Architecture=amd64 download libvulkan1 libegl1
# libglvnd0 libopengl0 libgl1 libglx0 libgles2` (git-ignored through .git/info/exclude).
set -euo pipefail
cd "$(dirname "$0")/.."

executable() {
  # The path of the executable cargo built for target `$1` from JSON messages on stdin.
  grep -o '"executable":"[^"]*"' | cut -d'"' -f4 | grep "/$1-" | head -1
}

case "${1:-}" in
build)
  export CUDARC_CUDA_VERSION=13000
  rm -rf .device .device-train
  mkdir -p .device/data/oracle .device/data/garden_points .device-train/data/lego_400
  # One test binary per crate: the kernels' (one module per op), the field's (render) and the
  # root's (what crosses crates).
  for package in ember-kernels ember-field ember; do
    cp "$(cargo test --release -p "$package" --features cuda,wgpu --test all --no-run \
      --message-format=json | executable all)" ".device/test-$package"
  done
  for bench in raster field transform sort; do
    cp "$(cargo bench --features cuda,wgpu --bench "$bench" --no-run --message-format=json | executable "$bench")" \
      ".device/$bench-bench"
  done
  cargo build --release --features cuda -p trainer
  cp "${CARGO_TARGET_DIR:-target}/release/trainer" .device-train/trainer
  strip .device/test-* .device/*-bench .device-train/trainer
  gzip -9 -f .device/test-* .device/*-bench .device-train/trainer
  # The data the GPU tests, benches and training read (../shared/data does not travel).
  data="${EMBER_DATA_DIR:-../shared/data}"
  cp -r "$data/oracle/gsplat_cases" .device/data/oracle/
  cp "$data/garden_points/test_garden.npz" .device/data/garden_points/
  # Train and test only: the loader checks every split it finds a transforms file for.
  cp -r "$data/lego_400/train" "$data/lego_400/test" "$data"/lego_400/transforms_train.json \
    "$data"/lego_400/transforms_test.json .device-train/data/lego_400/
  cp configs/h100-7k.toml .device-train/
  du -sh .device .device-train
  ;;
run)
  out="${OUT:-/tmp/ember-device-out}"
  mkdir -p "$out"
  export CUDA_PATH="${CUDA_PATH:-/usr/local/cuda}"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
  gunzip -f .device/*.gz
  export EMBER_DATA_DIR="$PWD/.device/data" EMBER_REQUIRE_DATA=1
  # The Vulkan loader for wgpu (see the top of this file).
  if ls .gl/*.deb >/dev/null 2>&1; then
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
    icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
    [ -f "$icd" ] && export VK_DRIVER_FILES="$icd"
  fi
  # The GPU tests compare cuda and wgpu against the CPU on random inputs and against the gsplat
  # oracle. (A failing test is reported in the log; the benches still run.)
  for tests in .device/test-*; do
    timeout 240 "$tests" gpu cuda wgpu --test-threads=1 2>&1 | tee -a "$out/test-gpu.log" \
      | grep -E "^test |result|panicked|worst|error" || true
  done
  # A criterion binary run without `--bench` only tests its benchmarks once. criterion writes
  # under target/. Peak device memory: the largest `used_memory` nvidia-smi
  # reports for the bench process, sampled every 100 ms.
  mkdir -p target/tmp
  peak() {
    local pid=$1 max=0 used
    while kill -0 "$pid" 2>/dev/null; do
      used=$(nvidia-smi --query-compute-apps=used_memory --format=csv,noheader,nounits | sort -n | tail -1)
      [ -n "$used" ] && [ "$used" -gt "$max" ] && max=$used
      sleep 0.1
    done
    echo "peak device memory (nvidia-smi used_memory): ${max} MiB"
  }
  # The device tool returns at most 8 files: every bench's log goes into one file.
  bench() { # a name, then the bench binary's arguments: runs it, prints its tables
    local log="/tmp/$1.log"
    shift
    "$@" >"$log" 2>&1 || echo "$1: exit $?"
    { echo "=== $*"; cat "$log"; } >>"$out/benches.log"
    grep -E "^\|" "$log" || tail -20 "$log"
  }
  .device/raster-bench --bench render_cuda --warm-up-time 1 --measurement-time 2 \
    >/tmp/bench-raster-cuda.log 2>&1 &
  peak $! | tee "$out/raster-memory.txt"
  wait || true
  { echo "=== raster-bench --bench render_cuda"; cat /tmp/bench-raster-cuda.log; } >>"$out/benches.log"
  grep -E "^\|" /tmp/bench-raster-cuda.log || tail -20 /tmp/bench-raster-cuda.log
  # An earlier build's raster bench, when one is carried in .device-old/ (git-ignored), for an
  # A/B of a kernel change on the same card in the same call.
  if [ -f .device-old/raster-bench.gz ]; then
    gunzip -f .device-old/raster-bench.gz
    bench bench-raster-cuda-old .device-old/raster-bench --bench render_cuda --warm-up-time 1 \
      --measurement-time 2
  fi
  bench bench-field-cuda .device/field-bench --bench "cuda/.*/forward/" --warm-up-time 1
  bench bench-transform .device/transform-bench --bench cuda_rows_only --warm-up-time 1 --measurement-time 1
  bench bench-sort .device/sort-bench --bench sort_cuda --warm-up-time 1 --measurement-time 1
  # wgpu on the same card (Vulkan), the rasterizer's render op only.
  EMBER_BENCH_WGPU=1 bench bench-raster-wgpu .device/raster-bench --bench render_wgpu --warm-up-time 1 \
    --measurement-time 2
  # Where the GPU time of one render goes: Nsight Compute's per-kernel durations over the
  # bench's set-up renders (every case, forward and forward+backward) and one forward.
  if command -v ncu >/dev/null; then
    timeout 90 ncu --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
      .device/raster-bench "render_cuda_cam0_800x800/forward$" >"$out/ncu-raster.log" 2>&1 \
      || echo "ncu: exit $?"
    grep -cE "^  [A-Za-z_]" "$out/ncu-raster.log" || true
  fi
  ;;
train)
  out="${OUT:-/tmp/ember-device-out}"
  mkdir -p "$out"
  nvidia-smi --query-gpu=name --format=csv,noheader | tee "$out/gpu.txt"
  gunzip -f .device-train/trainer.gz
  cd .device-train
  # Bounded so that the call returns inside its limit whatever the step time turns out to be.
  timeout "${TRAIN_SECONDS:-420}" ./trainer --config h100-7k.toml --backend cuda \
    --data data/lego_400 --out "$out/lego" 2>&1 | tr '\r' '\n' | grep -v "^ *$" \
    | tee "$out/train.log" | grep -vE "^\s*[0-9]+/" | tail -40 || true
  if [ -f "$out/lego/splats.ply" ]; then
    ./trainer --backend cuda bench render --ply "$out/lego/splats.ply" --data data/lego_400 \
      --json "$out/bench-render-cuda.json" 2>&1 | tail -12 || true
    gzip -9 "$out/lego/splats.ply"
  fi
  ls -la "$out" "$out/lego" || true
  ;;
bench-train)
  # `trainer bench train` on lego as the BENCHMARKS GPU rows, each step count with and without
  # `--sync-phases` (every phase waits for the device, so each holds its own GPU time).
  out="${OUT:-/tmp/ember-device-out}"
  mkdir -p "$out"
  nvidia-smi --query-gpu=name --format=csv,noheader | tee "$out/gpu.txt"
  gunzip -f .device-train/trainer.gz
  cd .device-train
  for steps in 300 1500; do
    for sync in "" --sync-phases; do
      name="bench-train-$steps${sync:+-sync}"
      timeout 120 ./trainer --backend cuda bench train --config h100-7k.toml --data data/lego_400 \
        --steps "$steps" $sync --json "$out/$name.json" >"/tmp/$name.log" 2>&1 || echo "$name: exit $?"
      { echo "=== $name"; cat "/tmp/$name.log"; } >>"$out/bench-train.log"
      tail -14 "/tmp/$name.log"
    done
  done
  ;;
*)
  echo "usage: $0 build|run|train|bench-train" >&2
  exit 2
  ;;
esac
