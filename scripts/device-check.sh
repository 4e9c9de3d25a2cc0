#!/usr/bin/env bash
# The GPU check for a lent NVIDIA machine, in two halves (that machine has no Rust toolchain and
# no network, so the binaries are built here and carried there).
#
#   scripts/device-check.sh build   # here: release test + bench binaries with --features cuda,
#                                   # CUDA 13.0 bindings, stripped, and the data files the GPU
#                                   # tests and benches read, into .device/ (git-ignored)
#   scripts/device-check.sh run     # there (carry .device): the GPU tests on cuda, then the
#                                   # raster and field benches' cuda rows; logs into $OUT
#
# With the device tool: run(command="scripts/device-check.sh run", carry=[".device"]).
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
build)
  export CUDARC_CUDA_VERSION=13000
  target="${CARGO_TARGET_DIR:-target}"
  mkdir -p .device
  cargo test --release --features cuda --test all --no-run --message-format=json \
    | grep -o '"executable":"[^"]*"' | cut -d'"' -f4 | grep '/all-' | head -1 > .device/test.path
  for bench in field raster; do
    cargo bench --features cuda --bench "$bench" --no-run --message-format=json \
      | grep -o '"executable":"[^"]*"' | cut -d'"' -f4 | grep "/$bench-" | head -1 > .device/bench.path
    cp "$(cat .device/bench.path)" ".device/$bench-bench"
  done
  cp "$(cat .device/test.path)" .device/all
  strip .device/all .device/field-bench .device/raster-bench
  # Compressed, so that the three fit the 64 MiB the device tool carries.
  gzip -9 -f .device/all .device/field-bench .device/raster-bench
  rm .device/test.path .device/bench.path
  # The data the GPU tests and benches read (../shared/data does not travel).
  data="${EMBER_DATA_DIR:-../shared/data}"
  mkdir -p .device/data/oracle .device/data/garden_points
  cp -r "$data/oracle/gsplat_cases" .device/data/oracle/
  cp "$data/garden_points/test_garden.npz" .device/data/garden_points/
  du -sh .device/*
  echo "target dir: $target"
  ;;
run)
  out="${OUT:-/tmp/ember-device-out}"
  mkdir -p "$out"
  export CUDA_PATH="${CUDA_PATH:-/usr/local/cuda}"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
  gunzip -f .device/*.gz
  export EMBER_DATA_DIR="$PWD/.device/data" EMBER_REQUIRE_DATA=1
  # The GPU tests compare cuda against the CPU on random inputs and against the gsplat oracle.
  # (A failing test is reported in the log; the benches still run.)
  .device/all gpu cuda --test-threads=1 2>&1 | tee "$out/test-cuda.log" || true
  # criterion writes under target/. Peak device memory: the largest `used_memory` nvidia-smi
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
  .device/raster-bench --bench render_cuda --warm-up-time 1 --measurement-time 2 \
    >"$out/bench-raster-cuda.log" 2>&1 &
  peak $! | tee "$out/raster-memory.txt"
  wait || true
  tail -40 "$out/bench-raster-cuda.log"
  .device/field-bench --bench cuda --warm-up-time 1 --measurement-time 2 2>&1 \
    | tee "$out/bench-field-cuda.log" | tail -30
  ;;
*)
  echo "usage: $0 build|run" >&2
  exit 2
  ;;
esac
