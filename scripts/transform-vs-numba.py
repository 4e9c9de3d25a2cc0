#!/usr/bin/env python3
"""Ember's CPU Gaussian transform beside a numba kernel, timed in one run on one machine.

    pip install numba numpy            # once, into any Python 3.9+ environment
    python3 scripts/transform-vs-numba.py [--sizes 100000,1000000,4000000] [--rounds 3] [--numba-only]

The peer is the numba kernel one writes the obvious way: `@njit(parallel=True,
fastmath=True)`, one `prange` over Gaussians, the quaternion product, rotate, scale, translate
and the log-scale shift (plus, for SH degree 3, each band's 3x3, 5x5, 7x7 matrix per channel),
into preallocated outputs of Ember's layout (means [N, 3], quats [N, 4], log-scales [N, 3],
SH [N, 15, 3], f32). Row by row (SH setting and size), it times numba (the median of calls
over 1 s after JIT compilation and a warm-up) and right after it Ember's `fused` and `copy`
rows (`cargo bench --bench transform` filtered to that row, criterion's medians): a shared
machine's memory bandwidth drifts by tens of percent between minutes, so the two sides of a
ratio are measured seconds apart. It does `--rounds` rounds over all rows and prints the
medians over rounds. Both use all cores (numba's threads, rayon's pool).
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


def numba_calls(n, rng):
    """{sh: call} of the numba kernels on random sets of `n` Gaussians (geometry checked
    against NumPy)."""
    rot, quat = rotation([0.3, -1.0, 0.4], 0.9)
    scale, shift, log_s = 1.7, np.array([0.5, -1.0, 2.0]), np.log(1.7)
    f32 = lambda a: np.ascontiguousarray(a, dtype=np.float32)
    geometry = (f32(rot), np.float32(scale), f32(shift), f32(quat), np.float32(log_s))
    # Timing only: the SH matrices are random (the work is the same as a rotation's).
    bands = [f32(rng.standard_normal((m, m))) for m in (3, 5, 7)]
    src = [f32(rng.random((n, 3)) - 0.5), f32(rng.random((n, 4)) - 0.5),
           f32(rng.random((n, 3)) - 0.5), f32(rng.random((n, 15, 3)) - 0.5)]
    dst = [np.empty_like(a) for a in src]

    def no_sh():
        transform_geometry(*src[:3], *geometry, *dst[:3])

    def sh3():
        transform_with_sh(*src, *geometry, *bands, *dst)

    no_sh()
    sh3()
    expected = scale * (src[0].astype(np.float64) @ rot.T) + shift
    error = np.abs(dst[0] - expected).max()
    if error > 1e-4:
        sys.exit(f"numba kernel is wrong: means off by {error}")
    return {"no SH": no_sh, "SH degree 3": sh3}


def ember_row(root, sh, n):
    """(fused ms, copy ms): criterion's medians of one row of Ember's bench."""
    key = "no_sh" if sh == "no SH" else "sh3"
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "transform.json")
        env = dict(os.environ, EMBER_BENCH_JSON=report)
        subprocess.run(["cargo", "bench", "--quiet", "--bench", "transform", "--",
                        "--warm-up-time", "0.5", "--measurement-time", "1",
                        f"transform/{key}/(fused|copy)/{n}$"],
                       cwd=root, env=env, check=True, stdout=subprocess.DEVNULL)
        with open(report) as f:
            results = {r["name"]: r["median_ms"] for r in json.load(f)["results"]}
    return results[f"transform/{key}/fused/{n}"], results[f"transform/{key}/copy/{n}"]


def median(values):
    return float(np.median(values))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds over every row; the table has medians over them")
    parser.add_argument("--numba-only", action="store_true",
                        help="time the numba kernels only (no cargo bench)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not args.numba_only:
        subprocess.run(["cargo", "bench", "--bench", "transform", "--no-run"], cwd=root,
                       check=True)
    rng = np.random.default_rng(1)
    rows = {}
    for round_ in range(args.rounds):
        for n in sizes:
            calls = numba_calls(n, rng)
            for sh in ["no SH", "SH degree 3"]:
                numba_ms = median_ms(calls[sh], seconds=1.0)
                fused, copy = (None, None) if args.numba_only else ember_row(root, sh, n)
                rows.setdefault((sh, n), []).append((numba_ms, fused, copy))
                ember = "" if fused is None else f"; Ember fused {fused:.3f} ms, copy {copy:.3f} ms"
                print(f"round {round_ + 1}, {sh}, {n}: numba {numba_ms:.3f} ms{ember}",
                      flush=True)
            del calls
    if args.numba_only:
        return
    print()
    print(f"Medians over {args.rounds} round(s); each row's numba and Ember times are taken")
    print("one right after the other, and its ratios are the medians of each round's.")
    print()
    print("| SH | N | Ember fused ms | copy ms | fused of copy speed | numba ms | numba / Ember |")
    print("|---|---|---|---|---|---|---|")
    for (sh, n), runs in sorted(rows.items(), key=lambda row: (row[0][0] != "no SH", row[0][1])):
        numba_ms, fused, copy = (median([r[i] for r in runs]) for i in range(3))
        of_copy = median([c / f for _, f, c in runs])
        ratio = median([nb / f for nb, f, _ in runs])
        print(f"| {sh} | {n} | {fused:.3f} | {copy:.3f} | {100 * of_copy:.0f}% | "
              f"{numba_ms:.3f} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
