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
#   scripts/device-check.sh build-captures  # here: the cuda trainer, lego_400's training
#                                   # split, mouse_colmap and a trained lego PLY (argument, default
#                                   # /tmp/lego-trained/splats.ply) into .device-captures/
#   scripts/device-check.sh captures  # there (carry .device-captures): the issue-17 and -19 GPU
#                                   # rows: `bench train` on lego with the photos uploaded per step
#                                   # and resident, on mouse_colmap at full resolution with 1M
#                                   # and 3M Gaussians; `bench render` of the trained lego at
#                                   # 800x800 and of a 1M copy at 1920x1080; `bench view` at
#                                   # 800x600 and 1920x1080 and its training cost; then the
#                                   # 7k-step lego run. Peak memory from nvidia-smi beside the
#                                   # allocator's own figure.
#   scripts/device-check.sh build-quality  # here: the cuda trainer and the three COLMAP captures
#                                   # (cup, figurine, mouse) into .device-quality/
#   scripts/device-check.sh quality  # there (carry .device-quality): configs/colmap.toml at full
#                                   # resolution on the three captures, run side by side on the one
#                                   # GPU (the steps are host-bound), each stopped at QUALITY_SECONDS
#                                   # (default 480), with QUALITY_ARGS added to each command line
#                                   # (e.g. "--set densify.strategy=\"mcmc\""); logs, eval.csv and
#                                   # train.csv of each into $OUT
#   scripts/device-check.sh h100-run  # there (carry .device-captures): `bench train` on lego
#                                   # with the loss read every step and every 100, then the
#                                   # full configs/h100.toml run (25 held-out views)
#   scripts/device-check.sh build-lease  # here: everything one 15-minute lease needs, for two
#                                   # calls: .device-lease/ (the cuda trainer, the cuda test
#                                   # binaries of ember-kernels and ember-field, lego_400's
#                                   # training split and every 8th test view) and .device-quality/
#                                   # (as build-quality)
#   scripts/device-check.sh lease-lego  # there, first call (carry .device-lease): the cuda tests,
#                                   # `bench train` on lego (launches, reads, host time per step),
#                                   # configs/h100.toml on lego (stopped at H100_SECONDS, default
#                                   # 170), then `bench render` of the trained lego at 800x800 and
#                                   # of a ~1M-Gaussian copy at 1920x1080, and `bench view` of both
#                                   # at 1920x1080; logs and CSVs into $OUT/lego.tar.gz
#   scripts/device-check.sh lease-captures  # there, second call, at once (carry .device-quality):
#                                   # `bench train` on mouse_colmap at full resolution with 3M
#                                   # Gaussians, then the quality mode; everything into
#                                   # $OUT/quality.tar.gz and one held-out image per capture
#
# With the device tool, a 15-minute lease: run(command="scripts/device-check.sh lease-lego",
# carry=[".device-lease"], timeout_s=420) (about 5 minutes: tests ~1, h100.toml 2-3, benches 1),
# then at once, while the machine is warm, run(command="QUALITY_SECONDS=N scripts/device-check.sh
# lease-captures", carry=[".device-quality"]) with N the budget left minus ~2 minutes. The older
# modes: run(command="scripts/device-check.sh run", carry=[".device", ".gl"]), then at once
# run(command="scripts/device-check.sh train", carry=[".device-train"]). Logs go to
# $OUT. `.gl` holds the Vulkan and GL loader packages the device lacks (wgpu needs the Vulkan
# loader; the NVIDIA driver there provides the ICD), downloaded once here as the device README
# says: `mkdir -p .gl && cd .gl && apt-get -oAPT::Architecture=amd64 download libvulkan1 libegl1
# libglvnd0 libopengl0 libgl1 libglx0 libgles2` (git-ignored through .git/info/exclude).
set -euo pipefail
cd "$(dirname "$0")/.."

measure() { # a time limit in seconds, a name, then the command
  # Runs the command into /tmp/NAME.log, appends that to $log (default $out/captures.log) with
  # the peak of nvidia-smi's used_memory for the process (sampled every 100 ms), prints the
  # lines with the results.
  local limit=$1 name=$2 max=0 used pid
  shift 2
  timeout "$limit" "$@" >"/tmp/$name.log" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    used=$(nvidia-smi --query-compute-apps=used_memory --format=csv,noheader,nounits | sort -n | tail -1)
    [ -n "$used" ] && [ "$used" -gt "$max" ] && max=$used
    sleep 0.1
  done
  wait "$pid" || echo "$name: exit $?"
  { echo "=== $name: $*"; tr '\r' '\n' <"/tmp/$name.log" | grep -v '^ *[0-9]*/'; echo "nvidia-smi peak: $max MiB"; } >>"${log:-$out/captures.log}"
  echo "=== $name (nvidia-smi peak $max MiB)"
  grep -E "^\||steps/s|peak device|resident|pairs over|FPS|costs|held-out|done:|^step|config|error|panicked" "/tmp/$name.log" | tail -24
}

lego_views() { # lego_400 source folder, target folder: the training split and every 8th test view (25)
  mkdir -p "$2"
  cp -r "$1/train" "$1/transforms_train.json" "$2/"
  python3 - "$1" "$2" <<'PY'
import json, os, shutil, sys
source, target = sys.argv[1], sys.argv[2]
with open(os.path.join(source, "transforms_test.json")) as f:
    meta = json.load(f)
meta["frames"] = meta["frames"][::8]
os.makedirs(os.path.join(target, "test"), exist_ok=True)
for frame in meta["frames"]:
    name = frame["file_path"].lstrip("./") + ".png"
    shutil.copy(os.path.join(source, name), os.path.join(target, name))
with open(os.path.join(target, "transforms_test.json"), "w") as f:
    json.dump(meta, f)
PY
}

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
build-captures)
  export CUDARC_CUDA_VERSION=13000
  ply="${2:-/tmp/lego-trained/splats.ply}"
  data="${EMBER_DATA_DIR:-../shared/data}"
  rm -rf .device-captures
  mkdir -p .device-captures/data
  cargo build --release --features cuda -p trainer
  cp "${CARGO_TARGET_DIR:-target}/release/trainer" .device-captures/trainer
  strip .device-captures/trainer
  gzip -9 .device-captures/trainer
  lego_views "$data/lego_400" .device-captures/data/lego_400
  cp -r "$data/mouse_colmap" .device-captures/data/
  gzip -9 -c "$ply" >.device-captures/lego-trained.ply.gz
  cp configs/h100-7k.toml configs/colmap.toml scripts/replicate-splats.py .device-captures/
  du -sh .device-captures
  ;;
captures)
  out="${OUT:-/tmp/ember-device-out}"
  mkdir -p "$out"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
  cd .device-captures
  gunzip -f trainer.gz lego-trained.ply.gz
  python3 replicate-splats.py lego-trained.ply lego-1m.ply 10
  # Every command's output goes to one log (the tool returns at most 8 files); each prints its
  # table and the peak of nvidia-smi's used_memory for the process, sampled every 100 ms.
  train=(./trainer --backend cuda bench train)
  lego=(--config h100-7k.toml --data data/lego_400)
  measure 60 lego-host "${train[@]}" "${lego[@]}" --steps 300 --set data.image_budget_mb=0 --json "$out/lego-host.json"
  measure 60 lego-resident "${train[@]}" "${lego[@]}" --steps 300 --json "$out/lego-resident.json"
  measure 60 lego-resident-sync "${train[@]}" "${lego[@]}" --steps 300 --sync-phases --json /tmp/lego-sync.json
  mouse=(--config colmap.toml --data data/mouse_colmap --set 'init.mode="random"' --warmup 5 --steps 40)
  measure 90 mouse-1m-host "${train[@]}" "${mouse[@]}" --set init.random_count=1000000 --set data.image_budget_mb=0 --json /tmp/m1h.json
  measure 90 mouse-1m "${train[@]}" "${mouse[@]}" --set init.random_count=1000000 --json /tmp/m1.json
  measure 90 mouse-3m "${train[@]}" "${mouse[@]}" --set init.random_count=3000000 --json /tmp/m3.json
  measure 90 mouse-3m-sync "${train[@]}" "${mouse[@]}" --set init.random_count=3000000 --sync-phases --json /tmp/m3s.json
  measure 60 render-lego ./trainer --backend cuda bench render --ply lego-trained.ply --repeats 20 --json /tmp/r1.json
  measure 90 render-1m ./trainer --backend cuda bench render --ply lego-1m.ply --resolution 1920x1080 --repeats 10 --json /tmp/r2.json
  measure 45 view-lego ./trainer --backend cuda bench view lego-trained.ply --frames 120 --json /tmp/v1.json
  measure 45 view-lego-1080 ./trainer --backend cuda bench view lego-trained.ply --width 1920 --height 1080 --frames 120 --json /tmp/v2.json
  measure 60 view-1m-1080 ./trainer --backend cuda bench view lego-1m.ply --width 1920 --height 1080 --frames 60 --json /tmp/v3.json
  measure 90 view-train ./trainer --backend cuda bench view lego-trained.ply --train "${lego[@]}" --steps 300 --json /tmp/v4.json
  # Where a training step's GPU time goes, kernel by kernel (3 steps of lego).
  if command -v ncu >/dev/null; then
    timeout 90 ncu --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
      "${train[@]}" "${lego[@]}" --warmup 1 --steps 3 --json /tmp/ncu.json >"$out/ncu-train.log" 2>&1 \
      || echo "ncu: exit $?"
  fi
  measure 120 lego-7k ./trainer --config h100-7k.toml --backend cuda --data data/lego_400 --out /tmp/lego7k
  ;;
build-quality)
  export CUDARC_CUDA_VERSION=13000
  data="${EMBER_DATA_DIR:-../shared/data}"
  rm -rf .device-quality
  mkdir -p .device-quality/data
  cargo build --release --features cuda -p trainer
  cp "${CARGO_TARGET_DIR:-target}/release/trainer" .device-quality/trainer
  strip .device-quality/trainer
  gzip -9 .device-quality/trainer
  cp -r "$data/cup_colmap" "$data/figurine_colmap" "$data/mouse_colmap" .device-quality/data/
  cp configs/colmap.toml .device-quality/
  du -sh .device-quality
  ;;
quality)
  out="${OUT:-/tmp/ember-device-out}"
  mkdir -p "$out"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
  cd .device-quality
  [ ! -f trainer.gz ] || gunzip -f trainer.gz
  pids=()
  for scene in cup figurine mouse; do
    timeout "${QUALITY_SECONDS:-480}" ./trainer --config colmap.toml --backend cuda \
      --data "data/${scene}_colmap" --out "/tmp/q-$scene" ${QUALITY_ARGS:-} >"/tmp/q-$scene.log" 2>&1 &
    pids+=($!)
  done
  sleep 2
  for i in 0 1 2; do echo "$(pgrep -P "${pids[$i]}") ${pids[$i]}"; done >"$out/pids.txt"
  # nvidia-smi's per-process peak, every 500 ms, while any run is alive.
  : >/tmp/q-smi.csv
  while pgrep -f "trainer --config colmap.toml" >/dev/null; do
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits >>/tmp/q-smi.csv
    sleep 0.5
  done
  wait || true
  # The device tool returns at most 8 files: the logs and CSVs go into one archive, with one
  # held-out image (render beside photo) per capture from its last evaluation beside it.
  q=/tmp/quality-out
  mkdir -p "$q"
  cp "$out/pids.txt" "$q/"
  awk -F', *' '{ if ($2 > m[$1]) m[$1] = $2 } END { for (p in m) print p, m[p], "MiB" }' \
    /tmp/q-smi.csv >"$q/nvidia-smi-peaks.txt"
  for scene in cup figurine mouse; do
    tr '\r' '\n' <"/tmp/q-$scene.log" | grep -v '^ *[0-9]*/' >"$q/$scene.log"
    for f in eval.csv train.csv; do
      [ -f "/tmp/q-$scene/$f" ] && cp "/tmp/q-$scene/$f" "$q/$scene-$f"
    done
    image=$(ls /tmp/q-"$scene"/eval/*.png 2>/dev/null | tail -1 || true)
    [ -n "$image" ] && cp "$image" "$out/$scene-$(basename "$image")"
    echo "=== $scene"
    grep -E "config|held-out|done:|peak device|^step" "$q/$scene.log" | tail -8
  done
  cat "$q/nvidia-smi-peaks.txt"
  [ -n "${log:-}" ] && [ -f "$log" ] && cp "$log" "$q/"
  tar -czf "$out/quality.tar.gz" -C /tmp quality-out
  ;;
h100-run)
  out="${OUT:-/tmp/ember-device-out}"
  mkdir -p "$out"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
  cd .device-captures
  gunzip -f trainer.gz
  for every in 1 100; do
    echo "=== lego, output.loss_every=$every"
    timeout 60 ./trainer --backend cuda bench train --config h100-7k.toml --data data/lego_400 \
      --steps 300 --set "output.loss_every=$every" --json "$out/lego-loss-every-$every.json" 2>&1 \
      | grep -E "^\||steps/s"
  done
  echo "=== configs/h100.toml"
  timeout "${TRAIN_SECONDS:-230}" ./trainer --config ../configs/h100.toml --backend cuda \
    --data data/lego_400 --out /tmp/h100 2>&1 | tr '\r' '\n' | grep -v '^ *[0-9]*/' \
    | tee "$out/h100.log" | grep -E "^step|done:|peak device|held-out|config" || true
  ;;
build-lease)
  export CUDARC_CUDA_VERSION=13000
  data="${EMBER_DATA_DIR:-../shared/data}"
  rm -rf .device-lease
  mkdir -p .device-lease/data/oracle .device-lease/data/garden_points
  for package in ember-kernels ember-field; do
    cp "$(cargo test --release -p "$package" --features cuda --test all --no-run \
      --message-format=json | executable all)" ".device-lease/test-$package"
  done
  "$0" build-quality
  cp .device-quality/trainer.gz .device-lease/
  strip .device-lease/test-*
  gzip -9 -f .device-lease/test-*
  cp -r "$data/oracle/gsplat_cases" .device-lease/data/oracle/
  cp "$data/garden_points/test_garden.npz" .device-lease/data/garden_points/
  lego_views "$data/lego_400" .device-lease/data/lego_400
  cp configs/h100.toml configs/h100-7k.toml scripts/replicate-splats.py .device-lease/
  du -sh .device-lease .device-quality
  ;;
lease-lego)
  out="${OUT:-/tmp/ember-device-out}"
  log=/tmp/lego-out/lego.log
  mkdir -p "$out" /tmp/lego-out
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
  cd .device-lease
  gunzip -f ./*.gz
  # The GPU tests: cuda against the CPU on random inputs and against the gsplat oracle.
  for tests in ./test-*; do
    EMBER_DATA_DIR="$PWD/data" EMBER_REQUIRE_DATA=1 timeout 120 "$tests" cuda gpu --test-threads=1 \
      2>&1 | tee -a /tmp/lego-out/tests.log | grep -E "^test .*FAILED|test result|panicked" || true
  done
  # Issue 36's counts on CUDA: launches and reads per step, the host's time on an idle device.
  measure 40 bench-train-lego ./trainer --backend cuda bench train --config h100-7k.toml \
    --data data/lego_400 --steps 30 --json /tmp/lego-out/bench-train-lego.json
  measure "${H100_SECONDS:-170}" h100 ./trainer --config h100.toml --backend cuda \
    --data data/lego_400 --out /tmp/h100
  ply=/tmp/h100/splats.ply
  if [ -f "$ply" ]; then
    count=$(grep -a -m1 "^element vertex" "$ply" | cut -d' ' -f3)
    python3 replicate-splats.py "$ply" /tmp/lego-1m.ply $(( (1000000 + count - 1) / count ))
    render=(./trainer --backend cuda bench render)
    measure 40 render-lego "${render[@]}" --ply "$ply" --repeats 20 --json /tmp/lego-out/render-lego.json
    measure 50 render-1m-1080 "${render[@]}" --ply /tmp/lego-1m.ply --resolution 1920x1080 \
      --repeats 10 --json /tmp/lego-out/render-1m-1080.json
    view=(./trainer --backend cuda bench view --width 1920 --height 1080)
    measure 40 view-lego-1080 "${view[@]}" "$ply" --frames 120 --json /tmp/lego-out/view-lego-1080.json
    measure 50 view-1m-1080 "${view[@]}" /tmp/lego-1m.ply --frames 60 --json /tmp/lego-out/view-1m-1080.json
  fi
  for f in eval.csv train.csv; do [ -f "/tmp/h100/$f" ] && cp "/tmp/h100/$f" "/tmp/lego-out/h100-$f"; done
  image=$(ls /tmp/h100/eval/*.png 2>/dev/null | tail -1 || true)
  [ -n "$image" ] && cp "$image" "$out/lego-$(basename "$image")"
  tar -czf "$out/lego.tar.gz" -C /tmp lego-out
  ;;
lease-captures)
  out="${OUT:-/tmp/ember-device-out}"
  export log=/tmp/scale.log
  mkdir -p "$out" /tmp/quality-out
  (
    cd .device-quality
    gunzip -f trainer.gz
    measure 80 mouse-3m ./trainer --backend cuda bench train --config colmap.toml \
      --data data/mouse_colmap --set 'init.mode="random"' --set init.random_count=3000000 \
      --warmup 55 --steps 60 --json /tmp/quality-out/mouse-3m.json
  )
  "$0" quality
  ;;
*)
  echo "usage: $0 build|run|train|bench-train|build-captures|captures|h100-run|build-quality|quality|build-lease|lease-lego|lease-captures" >&2
  exit 2
  ;;
esac
