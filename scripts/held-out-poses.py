#!/usr/bin/env python3
"""A capture whose held-out cameras take the turn pose refinement gave their neighbours.

    scripts/held-out-poses.py CAPTURE RUN/cameras.json OUT [--neighbours 2]
    trainer eval RUN --data OUT

CAPTURE is the COLMAP folder (sparse/0/images.bin) a run with `poses.refine = true` trained on;
RUN/cameras.json its refined training cameras. Each refined camera's correction is the turn
from CAPTURE's pose to the refined one. Every other camera of CAPTURE (the held-out ones) is
turned about its own centre by the mean correction of its nearest refined cameras (by centre
distance), and OUT receives CAPTURE with those poses (photos and points copied unchanged).

Why: a held-out camera keeps its given pose, so a run that corrected its training cameras is
measured from poses it has moved away from. Where the given poses' errors are alike between
neighbouring cameras (a reconstruction that drifts along the walk), the held-out camera between
two training ones most likely shares their error; measured at the poses this writes, the field
is judged with that error taken out the way the run took it out of its neighbours (BENCHMARKS.md,
"Camera pose refinement"). Where the errors are each camera's own (a variant's random noise),
the neighbours say nothing of it and the poses this writes measure worse. Standard library
only, besides capture-variants.py.
"""

import argparse
import importlib.util
import json
import math
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location("variants", HERE / "capture-variants.py")
variants = importlib.util.module_from_spec(spec)
spec.loader.exec_module(variants)


def matrix_to_quat(r):
    """The unit quaternion (w, x, y, z) of a rotation matrix (Shepperd's method)."""
    trace = r[0][0] + r[1][1] + r[2][2]
    if trace > 0:
        s = 2.0 * math.sqrt(1.0 + trace)
        q = [s / 4, (r[2][1] - r[1][2]) / s, (r[0][2] - r[2][0]) / s, (r[1][0] - r[0][1]) / s]
    else:
        i = max(range(3), key=lambda k: r[k][k])
        j, k = (i + 1) % 3, (i + 2) % 3
        s = 2.0 * math.sqrt(1.0 + r[i][i] - r[j][j] - r[k][k])
        q = [0.0] * 4
        q[0] = (r[k][j] - r[j][k]) / s
        q[1 + i] = s / 4
        q[1 + j] = (r[j][i] + r[i][j]) / s
        q[1 + k] = (r[k][i] + r[i][k]) / s
    if q[0] < 0:
        q = [-c for c in q]
    return q


def rotation_vector(q):
    """The axis times the angle (radians) of unit quaternion `q`."""
    w, v = q[0], q[1:]
    norm = math.sqrt(sum(c * c for c in v))
    if norm < 1e-15:
        return [0.0, 0.0, 0.0]
    angle = 2.0 * math.atan2(norm, w)
    return [c / norm * angle for c in v]


def quat_of_vector(w):
    angle = math.sqrt(sum(c * c for c in w))
    if angle < 1e-15:
        return [1.0, 0.0, 0.0, 0.0]
    s = math.sin(angle / 2) / angle
    return [math.cos(angle / 2)] + [c * s for c in w]


def correction(given, refined):
    """The turn `w` with exp(w) R_given = R_refined, radians (camera axes)."""
    r = [[sum(refined[i][k] * given[j][k] for k in range(3)) for j in range(3)] for i in range(3)]
    return rotation_vector(matrix_to_quat(r))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("capture", type=Path)
    parser.add_argument("cameras", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--neighbours", type=int, default=2)
    args = parser.parse_args()
    if args.out.exists():
        raise SystemExit(f"{args.out} exists: choose a new folder (nothing is overwritten)")
    images = variants.read_images_bin(args.capture / "sparse" / "0" / "images.bin")
    by_name = {im["name"]: im for im in images}
    turns = {}
    for entry in json.loads(args.cameras.read_text())["cameras"]:
        name = entry["name"].split("/")[-1]
        if entry["refined"] and name in by_name:
            r = entry["camera"]["rotation"]
            given = variants.quat_to_matrix(by_name[name]["q"])
            turns[name] = correction(given, [r[0:3], r[3:6], r[6:9]])
    if not turns:
        raise SystemExit(f"{args.cameras}: no refined camera of {args.capture}")
    centres = {im["name"]: variants.camera_centre(im) for im in images}

    def distance(a, b):
        return math.sqrt(sum((x - y) ** 2 for x, y in zip(centres[a], centres[b])))

    moved = []
    for im in images:
        name = im["name"]
        if name in turns:
            moved.append(im)
            continue
        nearest = sorted(turns, key=lambda other: distance(name, other))[: args.neighbours]
        turn = [sum(turns[n][c] for n in nearest) / len(nearest) for c in range(3)]
        q = variants.quat_mul(quat_of_vector(turn), im["q"])
        r = variants.quat_to_matrix(q)
        centre = centres[name]
        t = [-sum(r[i][k] * centre[k] for k in range(3)) for i in range(3)]
        moved.append(dict(im, q=q, t=t))
        degrees = math.degrees(math.sqrt(sum(c * c for c in turn)))
        print(f"{name}: turned {degrees:.3f} deg, the mean of {', '.join(nearest)}")
    shutil.copytree(args.capture, args.out)
    variants.write_images_bin(args.out / "sparse" / "0" / "images.bin", moved)


if __name__ == "__main__":
    main()
