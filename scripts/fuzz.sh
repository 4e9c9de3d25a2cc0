#!/usr/bin/env bash
# Builds and runs the libFuzzer targets of fuzz/ on the stable toolchain, without cargo-fuzz:
# the coverage instrumentation (SanitizerCoverage) is plain `-C` flags; no sanitizer runtime is
# linked (those need nightly). Overflow checks and debug assertions are on, so an arithmetic
# overflow in a reader is a crash. See FUZZING.md.
#
#   scripts/fuzz.sh build                     every target
#   scripts/fuzz.sh seed                      corpora from the real files in $EMBER_DATA_DIR
#   scripts/fuzz.sh run TARGET [SECONDS] [RUNS]  one target for SECONDS (default 600) or RUNS
#                                             executions, whichever comes first; corpus kept
#   scripts/fuzz.sh smoke [SECONDS]           every target, SECONDS in all (default 60), for CI
#
# Environment: EMBER_FUZZ_TARGET_DIR (the build's target dir, default
# /var/cache/ember-fuzz-target), EMBER_FUZZ_CORPUS (default /var/cache/ember-fuzz-corpus),
# EMBER_DATA_DIR (default ../shared/data).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

target_dir=${EMBER_FUZZ_TARGET_DIR:-/var/cache/ember-fuzz-target}
corpus_root=${EMBER_FUZZ_CORPUS:-/var/cache/ember-fuzz-corpus}
data=${EMBER_DATA_DIR:-$root/../shared/data}
triple=$(rustc -vV | sed -n 's/^host: //p')
bin_dir=$target_dir/$triple/release
targets=(splat_ply dot_splat spz ply colmap_binary colmap_text transforms_json camera_json
  camera_path config_toml checkpoint)

build() {
  local flags=(
    -Cpasses=sancov-module
    -Cllvm-args=-sanitizer-coverage-level=4
    -Cllvm-args=-sanitizer-coverage-inline-8bit-counters
    -Cllvm-args=-sanitizer-coverage-pc-table
    -Cllvm-args=-sanitizer-coverage-trace-compares
    -Cllvm-args=-sanitizer-coverage-stack-depth
    -Cllvm-args=-simplifycfg-branch-fold-threshold=0
    --cfg fuzzing
    -Cdebug-assertions
  )
  # `--target` keeps the flags off build scripts and proc macros, which are not fuzzed.
  RUSTFLAGS="${flags[*]}" CARGO_TARGET_DIR=$target_dir cargo build --release --locked \
    --manifest-path fuzz/Cargo.toml --target "$triple" --bins
}

# Copies files under $data matching a find(1) expression, at most `limit` bytes each, into
# the target's corpus.
seed_from() {
  local target=$1 limit=$2
  shift 2
  mkdir -p "$corpus_root/$target"
  find -L "$data" -type f -size "-${limit}c" \( "$@" \) -print0 |
    while IFS= read -r -d '' file; do
      cp "$file" "$corpus_root/$target/$(echo "$file" | md5sum | cut -c1-16)"
    done
}

seed() {
  [ -d "$data" ] || { echo "no data at $data: set EMBER_DATA_DIR" >&2; exit 1; }
  seed_from splat_ply 400000 -name '*.ply' -path '*splat*'
  seed_from dot_splat 400000 -name '*.splat'
  seed_from spz 400000 -name '*.spz'
  seed_from ply 400000 -name '*.ply'
  seed_from colmap_binary 300000 -name '*.bin'
  seed_from colmap_text 300000 -name '*.txt' -path '*sparse*'
  seed_from transforms_json 300000 -name 'transforms*.json'
  # Formats with no real files in the data: the seeds in fuzz/seeds and the presets.
  for target in camera_json camera_path checkpoint colmap_text; do
    mkdir -p "$corpus_root/$target"
    cp "$root/fuzz/seeds/$target"/* "$corpus_root/$target/"
  done
  mkdir -p "$corpus_root/config_toml"
  cp "$root"/configs/*.toml "$corpus_root/config_toml/"
  for target in "${targets[@]}"; do
    printf '%-16s %5d files\n' "$target" "$(find "$corpus_root/$target" -type f | wc -l)"
  done
}

# Runs one target for `seconds`, over its corpus; every allocation above 1 GB is a crash (the
# seeds are at most 400 KB: a reader that allocates more trusts a header it should not).
run_target() {
  local target=$1 seconds=$2 runs=${3:--1}
  local log=$corpus_root/logs/$target.log
  mkdir -p "$corpus_root/$target" "$corpus_root/artifacts/$target" "$corpus_root/logs"
  if ! "$bin_dir/$target" "$corpus_root/$target" \
    -max_total_time="$seconds" -runs="$runs" -malloc_limit_mb=1024 -rss_limit_mb=4096 -timeout=10 \
    -print_final_stats=1 -artifact_prefix="$corpus_root/artifacts/$target/" >"$log" 2>&1; then
    tail -n 40 "$log"
    echo "$target: FAILED (the input is in $corpus_root/artifacts/$target/, the log in $log)"
    return 1
  fi
  local executions coverage
  executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  coverage=$(grep -E '^#[0-9]+[[:space:]]' "$log" | tail -n 1 |
    grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9/]+[a-zA-Z]*' || true)
  echo "$target: $executions executions, $coverage, no crash"
}

case "${1:-}" in
  build) build ;;
  seed) seed ;;
  run)
    [ -n "${2:-}" ] || { echo "usage: $0 run TARGET [SECONDS] [RUNS]" >&2; exit 2; }
    run_target "$2" "${3:-600}" "${4:--1}"
    ;;
  smoke)
    total=${2:-60}
    each=$((total / ${#targets[@]}))
    for target in "${targets[@]}"; do
      echo "--- $target (${each} s)"
      run_target "$target" "$each"
    done
    ;;
  *)
    sed -n '2,16p' "$0" >&2
    exit 2
    ;;
esac
