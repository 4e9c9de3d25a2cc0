#!/usr/bin/env python3
"""How much a COLMAP capture's own photos differ in exposure and white balance.

    scripts/photo-exposures.py CAPTURE [--test-every 8] [--csv OUT.csv] [--normalised OUT]

CAPTURE is a folder with images/ and sparse/0/images.bin. Every registered photo sees some of
the capture's 3D points at known pixels (COLMAP's keypoints). A point looks the same from every
photo up to each photo's exposure, so per colour channel the log of the colour photo i shows
at point k is modelled as

    ln y_ik = g_i + c_k

and the photos' log-gains g (centred on zero) and the points' colours c are fitted by least
squares over every observation that is neither near black nor saturated, twice: the second fit
leaves out the observations the first one misses by over three times their median residual
(a keypoint on an edge, a highlight that moves with the view). This is a panorama stitcher's
gain compensation; nothing is rendered, so it says what the photos themselves do, before any
training.

Prints each photo's gains (as factors, R G B), marked `held out` for the photos Ember holds out
with `data.test_every = N` (sorted by name, every N-th from the first), and the spread of the
training and held-out photos' gains. A spread of a few percent is what a phone's automatic
exposure does along a walk around an object; `appearance.kind = "exposure"` takes each
training photo's out of the field, and a held-out photo is then compared with the capture's
average exposure (README, "Real captures as people shoot them").

`--normalised OUT` also writes a copy of the capture whose every photo (held-out ones included)
is divided by its gains (JPEG, quality 100, 4:4:4; values past white clip): the capture as a
camera with locked exposure and white balance would have shot it, to within this fit. Issue 51
measures the exposure transform on a variant of that copy, so that the held-out photos' own
exposures do not count against a field that takes them out of the training photos.

Needs Pillow (`pip install pillow`); nothing else outside the standard library.
"""

import argparse
import importlib.util
import math
import shutil
import struct
import sys
from pathlib import Path

from PIL import Image

HERE = Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location("variants", HERE / "capture-variants.py")
variants = importlib.util.module_from_spec(spec)
spec.loader.exec_module(variants)

# 8-bit values kept: a darker one is mostly noise, a brighter one may be clipped.
DARKEST, BRIGHTEST = 8.0, 247.0
NO_POINT = 2**64 - 1


def observations(capture, images):
    """Per photo, the (point id, [r, g, b]) it shows at its keypoints (3x3 pixel means)."""
    seen = []
    for im in images:
        photo = Image.open(Path(capture) / "images" / im["name"]).convert("RGB")
        width, height = photo.size
        pixels = photo.load()
        raw = im["points"]
        (count,) = struct.unpack_from("<Q", raw, 0)
        points = []
        for n in range(count):
            x, y, point = struct.unpack_from("<ddQ", raw, 8 + 24 * n)
            if point == NO_POINT:
                continue
            # A pixel's centre is at (column + 0.5, row + 0.5) in COLMAP's coordinates.
            px = min(max(int(x), 1), width - 2)
            py = min(max(int(y), 1), height - 2)
            total = [0.0, 0.0, 0.0]
            for dy in (-1, 0, 1):
                for dx in (-1, 0, 1):
                    value = pixels[px + dx, py + dy]
                    for c in range(3):
                        total[c] += value[c]
            points.append((point, [t / 9.0 for t in total]))
        seen.append(points)
    return seen


def solve(matrix, rhs):
    """Gaussian elimination with partial pivoting (the matrix is copied)."""
    n = len(rhs)
    a = [row[:] + [rhs[i]] for i, row in enumerate(matrix)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(col + 1, n):
            f = a[r][col] / a[col][col]
            if f:
                row, top = a[r], a[col]
                for k in range(col, n + 1):
                    row[k] -= f * top[k]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        x[r] = (a[r][n] - sum(a[r][k] * x[k] for k in range(r + 1, n))) / a[r][r]
    return x


def fit(photos, tracks):
    """Centred log-gains g of `photos` photos from `tracks` {point: [(photo, ln y)]}.

    The points' colours are eliminated (each is the mean of its observations less their
    photos' gains), which leaves a photos x photos system; its one free direction, a gain
    shared by all, is fixed by adding the centring term (sum g)^2 / photos."""
    a = [[1.0 / photos] * photos for _ in range(photos)]
    b = [0.0] * photos
    for track in tracks.values():
        if len(track) < 2:
            continue
        inv = 1.0 / len(track)
        mean = sum(v for _, v in track) * inv
        for i, v in track:
            a[i][i] += 1.0
            b[i] += v - mean
            for j, _ in track:
                a[i][j] -= inv
    g = solve(a, b)
    shift = sum(g) / photos
    return [x - shift for x in g]


def residuals(g, tracks):
    """Each observation's miss `(point, photo) -> ln y - g - c` under gains `g`."""
    out = {}
    for point, track in tracks.items():
        if len(track) < 2:
            continue
        colour = sum(v - g[i] for i, v in track) / len(track)
        for i, v in track:
            out[(point, i)] = v - g[i] - colour
    return out


def channel_gains(seen, channel):
    tracks = {}
    for i, points in enumerate(seen):
        for point, rgb in points:
            value = rgb[channel]
            if DARKEST < value < BRIGHTEST:
                tracks.setdefault(point, []).append((i, math.log(value)))
    g = fit(len(seen), tracks)
    miss = residuals(g, tracks)
    spread = sorted(abs(m) for m in miss.values())
    bound = 3.0 * spread[len(spread) // 2]
    kept = {}
    for point, track in tracks.items():
        track = [(i, v) for i, v in track if abs(miss.get((point, i), 0.0)) <= bound]
        if len(track) >= 2:
            kept[point] = track
    return fit(len(seen), kept)


def spread(values):
    """Standard deviation of log-gains, as a percentage."""
    mean = sum(values) / len(values)
    return 100.0 * math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def write_normalised(capture, out, rows):
    """`capture` copied to `out` with each photo divided by its gains."""
    if out.exists():
        sys.exit(f"{out} exists: choose a new folder (nothing is overwritten)")
    shutil.copytree(capture / "sparse", out / "sparse")
    (out / "images").mkdir()
    for name, _, gains in rows:
        path = out / "images" / name
        with Image.open(capture / "images" / name) as photo:
            channels = photo.convert("RGB").split()
            divided = [
                ch.point(lambda v, g=g: min(255, round(v / g))) for ch, g in zip(channels, gains)
            ]
            tmp = path.with_name(path.name + ".partial")
            Image.merge("RGB", divided).save(tmp, format="JPEG", quality=100, subsampling=0)
            tmp.replace(path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("capture", type=Path)
    parser.add_argument("--test-every", type=int, default=8)
    parser.add_argument("--csv", type=Path, help="also write name,split,gain_r,gain_g,gain_b")
    parser.add_argument(
        "--normalised", type=Path, help="also write the capture with the gains divided out here"
    )
    args = parser.parse_args()
    images = sorted(
        variants.read_images_bin(args.capture / "sparse" / "0" / "images.bin"),
        key=lambda im: im["name"],
    )
    _, held_out = variants.split(images, args.test_every)
    seen = observations(args.capture, images)
    gains = [channel_gains(seen, c) for c in range(3)]
    rows = []
    for i, im in enumerate(images):
        split = "held out" if im["name"] in held_out else "train"
        rows.append((im["name"], split, [math.exp(gains[c][i]) for c in range(3)]))
        factors = " ".join(f"{math.exp(gains[c][i]):.3f}" for c in range(3))
        print(f"{im['name']:>24}  {factors}  {split if split == 'held out' else ''}")
    for label, keep in (("training", "train"), ("held-out", "held out")):
        chosen = [i for i, row in enumerate(rows) if row[1] == keep]
        if chosen:
            sds = " ".join(f"{spread([gains[c][i] for i in chosen]):.1f}%" for c in range(3))
            print(f"{label} photos ({len(chosen)}): their exposures spread by {sds} (R G B)")
    if args.csv:
        tmp = args.csv.with_name(args.csv.name + ".tmp")
        with open(tmp, "w") as f:
            f.write("name,split,gain_r,gain_g,gain_b\n")
            for name, split, g in rows:
                f.write(f"{name},{split},{g[0]:.5f},{g[1]:.5f},{g[2]:.5f}\n")
        tmp.replace(args.csv)
    if args.normalised:
        write_normalised(args.capture, args.normalised, rows)


if __name__ == "__main__":
    main()
