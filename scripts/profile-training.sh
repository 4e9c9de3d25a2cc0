#!/usr/bin/env bash
# Profiles a training preset and writes a flame graph.
#
#   scripts/profile-training.sh [PRESET|CONFIG.toml] [trainer arguments...]
#
# PRESET names a file in configs/ (default: micro, 100 steps). The trainer is built with the
# `profiling` cargo profile (release code with debug line tables, no LTO) and run under
# `cargo flamegraph` when it is installed, else under `perf record` with `inferno` turning the
# samples into an SVG. Output: target/profile/<preset>/flamegraph.svg (and the run's own outputs
# in target/profile/<preset>/run). See docs/PROFILING.md for reading the result.
set -euo pipefail
cd "$(dirname "$0")/.."

preset="${1:-micro}"
[ $# -gt 0 ] && shift
if [ -f "$preset" ]; then
  config="$preset"
  name="$(basename "$preset" .toml)"
else
  config="configs/$preset.toml"
  name="$preset"
fi
if [ ! -f "$config" ]; then
  echo "profile-training: no preset $config (presets: $(ls configs | sed 's/\.toml//' | tr '\n' ' '))" >&2
  exit 2
fi

out="target/profile/$name"
mkdir -p "$out"
target="${CARGO_TARGET_DIR:-target}"
args=(--config "$config" --out "$out/run" "$@")

if command -v cargo-flamegraph >/dev/null 2>&1; then
  cargo flamegraph --profile profiling -p trainer -o "$out/flamegraph.svg" -- "${args[@]}"
elif command -v perf >/dev/null 2>&1 && command -v inferno-collapse-perf >/dev/null 2>&1 \
  && command -v inferno-flamegraph >/dev/null 2>&1; then
  cargo build --profile profiling -p trainer
  # DWARF unwinding: the profile keeps line tables but Rust omits frame pointers.
  perf record -F 499 --call-graph dwarf,32768 -o "$out/perf.data" -- \
    "$target/profiling/trainer" "${args[@]}"
  perf script -i "$out/perf.data" 2>/dev/null | inferno-collapse-perf > "$out/stacks.folded"
  inferno-flamegraph --title "trainer $name" < "$out/stacks.folded" > "$out/flamegraph.svg"
else
  echo "profile-training: needs cargo-flamegraph, or perf with inferno" >&2
  echo "  cargo install flamegraph      # or: cargo install inferno (and perf from linux-tools)" >&2
  exit 1
fi
echo "wrote $out/flamegraph.svg"
