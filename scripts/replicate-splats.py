#!/usr/bin/env python3
"""A larger benchmark input from a trained 3DGS PLY: each Gaussian becomes K smaller ones.

    scripts/replicate-splats.py IN.ply OUT.ply K [SEED]

Each copy's centre is moved by a normal draw of half the Gaussian's scale per axis, and its
log-scales shrink by ln(K)/3, so the K copies fill about the volume of the original and the
scene looks much the same at K times the Gaussian count (what `trainer bench view` and
`bench render` need to time a 1M-Gaussian scene on a machine that cannot train one). Binary
little-endian 3DGS PLY in and out, every property kept; plain Python, no dependencies.
"""
import math
import os
import random
import struct
import sys


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    source, target, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rng = random.Random(int(sys.argv[4]) if len(sys.argv) == 5 else 0)
    with open(source, "rb") as f:
        data = f.read()
    end = data.index(b"end_header\n") + len(b"end_header\n")
    header = data[:end].decode("ascii").splitlines()
    if "format binary_little_endian 1.0" not in header:
        sys.exit(f"{source}: not a binary little-endian PLY")
    names = [line.split()[-1] for line in header if line.startswith("property float")]
    if len(names) != sum(line.startswith("property") for line in header):
        sys.exit(f"{source}: every property must be a float")
    count = next(int(line.split()[-1]) for line in header if line.startswith("element vertex"))
    index = {name: i for i, name in enumerate(names)}
    xyz = [index[n] for n in ("x", "y", "z")]
    scales = [index[n] for n in ("scale_0", "scale_1", "scale_2")]
    row = struct.Struct("<" + "f" * len(names))
    shrink = math.log(k) / 3.0
    out_header = "\n".join(
        f"element vertex {count * k}" if line.startswith("element vertex") else line
        for line in header
    ) + "\n"
    # Written beside the target and renamed into place once whole (removed on failure), so an
    # interrupted run leaves neither a half file nor a stray temporary.
    tmp = target + ".partial"
    try:
        write(tmp, out_header, data, end, count, k, row, xyz, scales, shrink, rng)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    os.replace(tmp, target)


def write(tmp, out_header, data, end, count, k, row, xyz, scales, shrink, rng):
    with open(tmp, "wb") as out:
        out.write(out_header.encode("ascii"))
        for i in range(count):
            values = list(row.unpack_from(data, end + i * row.size))
            sigma = [0.5 * math.exp(values[s]) for s in scales]
            for s in scales:
                values[s] -= shrink
            centre = [values[a] for a in xyz]
            for _ in range(k):
                for axis, a in enumerate(xyz):
                    values[a] = centre[axis] + rng.gauss(0.0, sigma[axis])
                out.write(row.pack(*values))


if __name__ == "__main__":
    main()
