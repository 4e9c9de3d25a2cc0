#!/usr/bin/env python3
"""How far a run's refined training cameras are from a capture's own poses.

    scripts/pose-error.py CAPTURE VARIANT RUN/cameras.json

CAPTURE and VARIANT are COLMAP folders (sparse/0/images.bin) of the same photos: the capture as
shot and the variant the run trained on (`scripts/capture-variants.py ... --only poses`).
Prints, over the run's refined cameras, the mean turn and centre distance of the variant's
poses and of the refined ones from the capture's, and the part of the refined cameras' error
that all of them share (a turn and shift of the whole rig, which the training photos cannot
see and every held-out photo can). Standard library only, besides capture-variants.py.
"""

import argparse
import importlib.util
import json
import math
from pathlib import Path

HERE = Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location("variants", HERE / "capture-variants.py")
variants = importlib.util.module_from_spec(spec)
spec.loader.exec_module(variants)


def images(folder):
    path = Path(folder) / "sparse" / "0" / "images.bin"
    return {im["name"]: im for im in variants.read_images_bin(path)}


def angle(a, b):
    trace = sum(a[i][j] * b[i][j] for i in range(3) for j in range(3))
    return math.degrees(math.acos(max(-1.0, min(1.0, (trace - 1.0) / 2.0))))


def center(r, t):
    return [-(r[0][j] * t[0] + r[1][j] * t[1] + r[2][j] * t[2]) for j in range(3)]


def distance(a, b):
    return math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("capture")
    parser.add_argument("variant")
    parser.add_argument("cameras")
    args = parser.parse_args()
    clean, noisy = images(args.capture), images(args.variant)
    run = json.loads(Path(args.cameras).read_text())["cameras"]
    rows, shifts, turns = [], [], []
    for entry in run:
        if not entry["refined"]:
            continue
        name = entry["name"].split("/")[-1]
        c, v = clean[name], noisy[name]
        rc, rv = variants.quat_to_matrix(c["q"]), variants.quat_to_matrix(v["q"])
        r = entry["camera"]["rotation"]
        rr = [r[0:3], r[3:6], r[6:9]]
        t = entry["camera"]["translation"]
        cc, cr = center(rc, c["t"]), center(rr, t)
        rows.append((angle(rv, rc), distance(center(rv, v["t"]), cc), angle(rr, rc),
                     distance(cr, cc)))
        shifts.append([a - b for a, b in zip(cr, cc)])
        # The residual turn in world axes: the skew part of rc^T rr.
        m = [[sum(rc[k][i] * rr[k][j] for k in range(3)) for j in range(3)] for i in range(3)]
        turns.append([(m[2][1] - m[1][2]) / 2, (m[0][2] - m[2][0]) / 2, (m[1][0] - m[0][1]) / 2])
    n = len(rows)
    if n == 0:
        raise SystemExit(f"{args.cameras}: no refined cameras")
    mean = lambda k: sum(r[k] for r in rows) / n
    print(f"{n} training cameras: the variant {mean(0):.3f} deg, {mean(1):.4f} units off; "
          f"refined {mean(2):.3f} deg (at most {max(r[2] for r in rows):.3f}), {mean(3):.4f} "
          f"units (at most {max(r[3] for r in rows):.4f})")
    common_shift = [sum(s[i] for s in shifts) / n for i in range(3)]
    common_turn = [math.degrees(sum(t[i] for t in turns) / n) for i in range(3)]
    print(f"shared by all: a turn of {math.sqrt(sum(x * x for x in common_turn)):.3f} deg, "
          f"a shift of {math.sqrt(sum(x * x for x in common_shift)):.4f} units")


if __name__ == "__main__":
    main()
