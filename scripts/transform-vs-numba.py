#!/usr/bin/env python3
"""Ember's CPU Gaussian transform beside a numba kernel, timed in one run on one machine.

    pip install numba numpy            # once, into any Python 3.9+ environment
    python3 scripts/transform-vs-numba.py [--sizes 100000,1000000,4000000] [--ember-only]

The peer is the numba kernel one writes the obvious way: `@njit(parallel=True,
fastmath=True)`, one `prange` over Gaussians, the quaternion product, rotate, scale, translate
and the log-scale shift (plus, for SH degree 3, each band's 3x3, 5x5, 7x7 matrix per channel),
into preallocated outputs of Ember's layout (means [N, 3], quats [N, 4], log-scales [N, 3],
SH [N, 15, 3], f32). Its medians come first (after JIT compilation and a warm-up), then the
script runs `cargo bench --bench transform -- 'fused|copy'` and prints both side by side with
the ratio. Both use all cores (numba's threads, rayon's pool).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
from numba import njit, prange

SIZES = [100_000, 1_000_000, 4_000_000]


@njit(parallel=True, fastmath=True)
def transform_geometry(means, quats, log_scales, rot, scale, shift, q, log_s,
                       out_means, out_quats, out_scales):
    for i in prange(means.shape[0]):
        x, y, z = means[i, 0], means[i, 1], means[i, 2]
        for r in range(3):
            out_means[i, r] = scale * (rot[r, 0] * x + rot[r, 1] * y + rot[r, 2] * z) + shift[r]
        bw, bx, by, bz = quats[i, 0], quats[i, 1], quats[i, 2], quats[i, 3]
        aw, ax, ay, az = q[0], q[1], q[2], q[3]
        out_quats[i, 0] = aw * bw - ax * bx - ay * by - az * bz
        out_quats[i, 1] = aw * bx + ax * bw + ay * bz - az * by
        out_quats[i, 2] = aw * by - ax * bz + ay * bw + az * bx
        out_quats[i, 3] = aw * bz + ax * by - ay * bx + az * bw
        for c in range(3):
            out_scales[i, c] = log_scales[i, c] + log_s


@njit(inline="always", fastmath=True)
def rotate_band(sh, out_sh, i, first, band):
    n = band.shape[0]
    for row in range(n):
        for ch in range(3):
            acc = np.float32(0.0)
            for col in range(n):
                acc += band[row, col] * sh[i, first + col, ch]
            out_sh[i, first + row, ch] = acc


@njit(parallel=True, fastmath=True)
def transform_with_sh(means, quats, log_scales, sh, rot, scale, shift, q, log_s, sh1, sh2, sh3,
                      out_means, out_quats, out_scales, out_sh):
    for i in prange(means.shape[0]):
        x, y, z = means[i, 0], means[i, 1], means[i, 2]
        for r in range(3):
            out_means[i, r] = scale * (rot[r, 0] * x + rot[r, 1] * y + rot[r, 2] * z) + shift[r]
        bw, bx, by, bz = quats[i, 0], quats[i, 1], quats[i, 2], quats[i, 3]
        aw, ax, ay, az = q[0], q[1], q[2], q[3]
        out_quats[i, 0] = aw * bw - ax * bx - ay * by - az * bz
        out_quats[i, 1] = aw * bx + ax * bw + ay * bz - az * by
        out_quats[i, 2] = aw * by - ax * bz + ay * bw + az * bx
        out_quats[i, 3] = aw * bz + ax * by - ay * bx + az * bw
        for c in range(3):
            out_scales[i, c] = log_scales[i, c] + log_s
        rotate_band(sh, out_sh, i, 0, sh1)
        rotate_band(sh, out_sh, i, 3, sh2)
        rotate_band(sh, out_sh, i, 8, sh3)


def rotation(axis, angle):
    """Rotation matrix and unit quaternion (w, x, y, z) of an axis-angle, float64."""
    axis = np.asarray(axis, dtype=np.float64)
    axis /= np.linalg.norm(axis)
    w, (x, y, z) = np.cos(angle / 2), np.sin(angle / 2) * axis
    matrix = np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ])
    return matrix, np.array([w, x, y, z])


def median_ms(call, seconds=2.0, warm_up=0.5, min_runs=10):
    """Median wall time of `call`, ms: warm-up first, then at least `min_runs` timed calls."""
    end = time.perf_counter() + warm_up
    while time.perf_counter() < end:
        call()
    times = []
    end = time.perf_counter() + seconds
    while len(times) < min_runs or time.perf_counter() < end:
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times))


def numba_medians(sizes):
    """{(sh, n): ms} of the numba kernels; checks the geometry against NumPy first."""
    rot, quat = rotation([0.3, -1.0, 0.4], 0.9)
    scale, shift, log_s = 1.7, np.array([0.5, -1.0, 2.0]), np.log(1.7)
    rng = np.random.default_rng(1)
    f32 = lambda a: np.ascontiguousarray(a, dtype=np.float32)
    rot32, shift32, quat32 = f32(rot), f32(shift), f32(quat)
    # Timing only: the SH matrices are random (the work is the same as a rotation's).
    bands = [f32(rng.standard_normal((n, n))) for n in (3, 5, 7)]
    medians = {}
    for n in sizes:
        src = [f32(rng.random((n, 3)) - 0.5), f32(rng.random((n, 4)) - 0.5),
               f32(rng.random((n, 3)) - 0.5), f32(rng.random((n, 15, 3)) - 0.5)]
        dst = [np.empty_like(a) for a in src]
        geometry = (rot32, np.float32(scale), shift32, quat32, np.float32(log_s))

        def no_sh():
            transform_geometry(*src[:3], *geometry, *dst[:3])

        def sh3():
            transform_with_sh(*src, *geometry, *bands, *dst)

        no_sh()
        expected = scale * (src[0].astype(np.float64) @ rot.T) + shift
        error = np.abs(dst[0] - expected).max()
        if error > 1e-4:
            sys.exit(f"numba kernel is wrong: means off by {error}")
        medians[("no SH", n)] = median_ms(no_sh)
        medians[("SH degree 3", n)] = median_ms(sh3)
        print(f"numba {n}: no SH {medians[('no SH', n)]:.3f} ms, "
              f"SH degree 3 {medians[('SH degree 3', n)]:.3f} ms", flush=True)
    return medians


def ember_medians(json_path):
    """{(sh, n, row): ms} from Ember's bench report (criterion's medians)."""
    with open(json_path) as f:
        report = json.load(f)
    medians = {}
    for result in report["results"]:
        # transform/no_sh/fused/1000000
        parts = result["name"].split("/")
        if len(parts) == 4 and parts[0] == "transform":
            sh = "no SH" if parts[1] == "no_sh" else "SH degree 3"
            medians[(sh, int(parts[3]), parts[2])] = result["median_ms"]
    return medians


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--numba-only", action="store_true",
                        help="time the numba kernels only (no cargo bench)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    numba = numba_medians(sizes)
    if args.numba_only:
        return
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "transform.json")
        env = dict(os.environ, EMBER_BENCH_JSON=report)
        subprocess.run(["cargo", "bench", "--bench", "transform", "--", "fused|copy"],
                       cwd=root, env=env, check=True)
        ember = ember_medians(report)
    print()
    print("| SH | N | Ember fused ms | copy ms | fused of copy speed | numba ms | numba / Ember |")
    print("|---|---|---|---|---|---|---|")
    for (sh, n), numba_ms in sorted(numba.items(), key=lambda item: (item[0][0] != "no SH", item[0][1])):
        fused, copy = ember.get((sh, n, "fused")), ember.get((sh, n, "copy"))
        if fused is None or copy is None:
            continue
        print(f"| {sh} | {n} | {fused:.3f} | {copy:.3f} | {100 * copy / fused:.0f}% | "
              f"{numba_ms:.3f} | {numba_ms / fused:.2f}x |")


if __name__ == "__main__":
    main()
