#!/usr/bin/env python3
"""Makes the imperfect variants of a COLMAP capture that issue 51 measures against.

    scripts/capture-variants.py CAPTURE OUT [--test-every 8] [--seed 51]
                                [--only exposure|poses|exposure-undone]

CAPTURE is a folder with images/ and sparse/0/{cameras,images,points3D}.bin. OUT receives
    OUT/exposure/  every training photo's exposure scaled by a gain drawn in [0.55, 1.6] and its
                   white balance by +-8% per channel (JPEG, quality 95, 4:4:4);
    OUT/poses/     every training camera rotated by 1 degree about a random axis and its centre
                   moved by 1% of the cameras' mean distance from their centroid;
    OUT/exposure-undone/
                   OUT/exposure's photos divided by their gains again (JPEG, quality 100): what a
                   perfect per-photo transform could give back, with the clipping and the
                   requantisation the variant's gains did left in (an oracle to measure against).
Held-out photos and cameras are left untouched (copied byte for byte). Which photos are held out
follows Ember's split for `data.test_every = N`: the registered photos sorted by name, every
N-th from the first. The points (points3D.bin) are the clean capture's in both variants.

The gains are drawn log-uniform and shifted so that their logarithms average zero over the
training photos (each channel's too): a capture's absolute exposure is known only from its
photos, and a held-out photo of it lies at their average, not at one end of the range.

Needs Pillow (`pip install pillow`); nothing else outside the standard library.
"""

import argparse
import math
import random
import shutil
import struct
import sys
from pathlib import Path

from PIL import Image

GAIN_RANGE = (0.55, 1.6)
WHITE_BALANCE = 0.08
ROTATION_DEG = 1.0
SHIFT_FRACTION = 0.01


def read_images_bin(path):
    """COLMAP images.bin as a list of dicts (id, q, t, camera, name, points as raw bytes)."""
    data = path.read_bytes()
    (count,) = struct.unpack_from("<Q", data, 0)
    offset = 8
    images = []
    for _ in range(count):
        image_id, qw, qx, qy, qz, tx, ty, tz, camera = struct.unpack_from("<I7dI", data, offset)
        offset += struct.calcsize("<I7dI")
        end = data.index(b"\0", offset)
        name = data[offset:end].decode("utf-8")
        offset = end + 1
        (points,) = struct.unpack_from("<Q", data, offset)
        size = 8 + points * 24
        raw_points = data[offset : offset + size]
        offset += size
        images.append(
            dict(id=image_id, q=[qw, qx, qy, qz], t=[tx, ty, tz], camera=camera, name=name,
                 points=raw_points)
        )
    if offset != len(data):
        sys.exit(f"{path}: {len(data) - offset} bytes after the last image")
    return images


def write_images_bin(path, images):
    parts = [struct.pack("<Q", len(images))]
    for im in images:
        parts.append(struct.pack("<I7dI", im["id"], *im["q"], *im["t"], im["camera"]))
        parts.append(im["name"].encode("utf-8") + b"\0")
        parts.append(im["points"])
    tmp = path.with_name(path.name + ".partial")
    tmp.write_bytes(b"".join(parts))
    tmp.replace(path)


def quat_to_matrix(q):
    w, x, y, z = q
    n = math.sqrt(w * w + x * x + y * y + z * z)
    w, x, y, z = w / n, x / n, y / n, z / n
    return [
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ]


def quat_mul(a, b):
    aw, ax, ay, az = a
    bw, bx, by, bz = b
    return [
        aw * bw - ax * bx - ay * by - az * bz,
        aw * bx + ax * bw + ay * bz - az * by,
        aw * by - ax * bz + ay * bw + az * bx,
        aw * bz + ax * by - ay * bx + az * bw,
    ]


def camera_centre(im):
    r = quat_to_matrix(im["q"])
    t = im["t"]
    return [-sum(r[k][i] * t[k] for k in range(3)) for i in range(3)]


def unit_vector(rng):
    while True:
        v = [rng.gauss(0.0, 1.0) for _ in range(3)]
        n = math.sqrt(sum(c * c for c in v))
        if n > 1e-9:
            return [c / n for c in v]


def split(images, test_every):
    """(training names, held-out names) as Ember splits the registered photos."""
    names = sorted(im["name"] for im in images)
    held_out = {n for i, n in enumerate(names) if test_every and i % test_every == 0}
    return [n for n in names if n not in held_out], held_out


def copy_capture(capture, out):
    if out.exists():
        sys.exit(f"{out} exists: choose a new folder (nothing is overwritten)")
    shutil.copytree(capture / "sparse", out / "sparse")
    shutil.copytree(capture / "images", out / "images")


def exposure_variant(capture, out, train, rng):
    copy_capture(capture, out)
    lo, hi = math.log(GAIN_RANGE[0]), math.log(GAIN_RANGE[1])
    logs = [[rng.uniform(lo, hi)] * 3 for _ in train]
    for row in logs:
        for c in range(3):
            row[c] += math.log(1.0 + rng.uniform(-WHITE_BALANCE, WHITE_BALANCE))
    means = [sum(row[c] for row in logs) / len(logs) for c in range(3)]
    lines = ["name,gain_r,gain_g,gain_b"]
    for name, row in zip(train, logs):
        gains = [math.exp(row[c] - means[c]) for c in range(3)]
        path = out / "images" / name
        with Image.open(capture / "images" / name) as photo:
            channels = photo.convert("RGB").split()
            scaled = [ch.point(lambda v, g=g: min(255, round(v * g))) for ch, g in zip(channels, gains)]
            tmp = path.with_name(path.name + ".partial")
            Image.merge("RGB", scaled).save(tmp, format="JPEG", quality=95, subsampling=0)
            tmp.replace(path)
        lines.append(f"{name},{gains[0]:.4f},{gains[1]:.4f},{gains[2]:.4f}")
    (out / "gains.csv").write_text("\n".join(lines) + "\n")


def undone_variant(variant, out):
    if out.exists():
        sys.exit(f"{out} exists: choose a new folder (nothing is overwritten)")
    if not (variant / "gains.csv").is_file():
        sys.exit(f"{variant / 'gains.csv'}: make the exposure variant first")
    shutil.copytree(variant / "sparse", out / "sparse")
    shutil.copytree(variant / "images", out / "images")
    rows = (variant / "gains.csv").read_text().splitlines()[1:]
    for row in rows:
        name, *gains = row.split(",")
        path = out / "images" / name
        with Image.open(path) as photo:
            channels = photo.convert("RGB").split()
            undone = [
                ch.point(lambda v, g=float(g): min(255, round(v / g))) for ch, g in zip(channels, gains)
            ]
            tmp = path.with_name(path.name + ".partial")
            Image.merge("RGB", undone).save(tmp, format="JPEG", quality=100, subsampling=0)
            tmp.replace(path)


def pose_variant(capture, out, images, train, rng):
    copy_capture(capture, out)
    train = set(train)
    centres = [camera_centre(im) for im in images if im["name"] in train]
    centroid = [sum(c[i] for c in centres) / len(centres) for i in range(3)]
    distance = sum(math.dist(c, centroid) for c in centres) / len(centres)
    shift = SHIFT_FRACTION * distance
    angle = math.radians(ROTATION_DEG)
    lines = ["name,rotation_deg,shift"]
    for im in images:
        if im["name"] not in train:
            continue
        axis = unit_vector(rng)
        dq = [math.cos(angle / 2)] + [math.sin(angle / 2) * a for a in axis]
        centre = camera_centre(im)
        moved = [c + shift * d for c, d in zip(centre, unit_vector(rng))]
        im["q"] = quat_mul(dq, im["q"])
        r = quat_to_matrix(im["q"])
        im["t"] = [-sum(r[i][k] * moved[k] for k in range(3)) for i in range(3)]
        lines.append(f"{im['name']},{ROTATION_DEG},{shift:.6g}")
    write_images_bin(out / "sparse" / "0" / "images.bin", images)
    (out / "poses.csv").write_text("\n".join(lines) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("capture", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--test-every", type=int, default=8)
    parser.add_argument("--seed", type=int, default=51)
    parser.add_argument("--only", choices=["exposure", "poses", "exposure-undone"])
    args = parser.parse_args()
    images_bin = args.capture / "sparse" / "0" / "images.bin"
    if not images_bin.is_file():
        sys.exit(f"{images_bin}: no COLMAP binary model there")
    images = read_images_bin(images_bin)
    train, held_out = split(images, args.test_every)
    print(f"{args.capture}: {len(train)} training photos changed, {len(held_out)} held out untouched")
    if args.only in (None, "exposure"):
        exposure_variant(args.capture, args.out / "exposure", train, random.Random(args.seed))
        print(f"wrote {args.out / 'exposure'}")
    if args.only == "exposure-undone":
        undone_variant(args.out / "exposure", args.out / "exposure-undone")
        print(f"wrote {args.out / 'exposure-undone'}")
    if args.only in (None, "poses"):
        pose_variant(args.capture, args.out / "poses", images, train, random.Random(args.seed + 1))
        print(f"wrote {args.out / 'poses'}")


if __name__ == "__main__":
    main()
