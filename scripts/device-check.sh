#!/usr/bin/env bash
# The GPU check for a lent NVIDIA machine, in two halves (that machine has no Rust toolchain and
# no network, so the binaries are built here and carried there).
#
#   scripts/device-check.sh build   # here: release test + bench binaries with --features cuda,
#                                   # CUDA 13.0 bindings, stripped, into .device/ (git-ignored)
#   scripts/device-check.sh run     # there (carry .device): the GPU tests on cuda, then the
#                                   # field bench on ndarray and cuda; logs into $OUT
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
  cargo bench --features cuda --bench field --no-run --message-format=json \
    | grep -o '"executable":"[^"]*"' | cut -d'"' -f4 | grep '/field-' | head -1 > .device/bench.path
  cp "$(cat .device/test.path)" .device/all
  cp "$(cat .device/bench.path)" .device/field-bench
  strip .device/all .device/field-bench
  rm .device/test.path .device/bench.path
  du -sh .device/*
  echo "target dir: $target"
  ;;
run)
  out="${OUT:-/tmp/ember-device-out}"
  mkdir -p "$out"
  export CUDA_PATH="${CUDA_PATH:-/usr/local/cuda}"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
  # The GPU tests compare cuda (and wgpu, if compiled) against the CPU on random inputs.
  .device/all field_gpu --test-threads=1 2>&1 | tee "$out/test-cuda.log"
  # criterion writes under target/; keep it inside $OUT.
  mkdir -p target/tmp
  .device/field-bench --bench --warm-up-time 1 --measurement-time 3 2>&1 | tee "$out/bench-cuda.log"
  ;;
*)
  echo "usage: $0 build|run" >&2
  exit 2
  ;;
esac
