#!/usr/bin/env python3
"""LPIPS reference values for Ember's LPIPS test (crates/train/tests/all/lpips.rs).

Runs the reference implementation, the `lpips` package 0.1.4 (PyTorch), with the weights of
`alex.safetensors` (its AlexNet and calibration layers loaded into the package's network), on
image pairs from the NeRF-Synthetic lego views in the shared data folder, and prints the
distances the Rust test checks to 1e-4. The pairs are defined here and in the test alike:
RGBA PNGs composited over white in float32 (`rgb * a + (1 - a)`), then cropped.

    python3 -m venv /tmp/lpips-env
    /tmp/lpips-env/bin/pip install torch==2.5.1 torchvision==0.20.1 lpips==0.1.4 numpy pillow safetensors
    /tmp/lpips-env/bin/python scripts/lpips-fixtures.py [DATA_DIR]     # default ../shared/data
"""

import json
import sys
from pathlib import Path

import lpips
import numpy as np
import torch
from PIL import Image
from safetensors.torch import load_file

# (first image, second image, rows, columns): crops as [start, end).
PAIRS = [
    ("test/r_0.png", "test/r_1.png", (0, 400), (0, 400)),
    ("test/r_100.png", "test/r_101.png", (40, 340), (0, 400)),
    ("val/r_0.png", "val/r_0.png", (0, 398), (0, 400)),
    # Small enough for a software GPU (lavapipe) in CI.
    ("test/r_50.png", "test/r_51.png", (136, 264), (136, 264)),
]
# The third pair's second image is the first moved up by two rows.
SHIFTED = {2: (2, 400)}

# The stage of the package's AlexNet (net.slice1..5) that holds each `features` convolution.
SLICES = {0: 1, 3: 2, 6: 3, 8: 4, 10: 5}


def image(path, rows, columns):
    rgba = np.asarray(Image.open(path).convert("RGBA"), dtype=np.float32) / np.float32(255)
    rgb, alpha = rgba[..., :3], rgba[..., 3:]
    white = rgb * alpha + (np.float32(1) - alpha)
    crop = white[rows[0]:rows[1], columns[0]:columns[1]]
    return torch.from_numpy(np.ascontiguousarray(crop)).permute(2, 0, 1).unsqueeze(0)


def main():
    data = Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/data")
    weights = load_file(str(data / "lpips/alex.safetensors"))
    model = lpips.LPIPS(net="alex", version="0.1", pretrained=True, pnet_rand=True, verbose=False)
    state = model.state_dict()
    for name, tensor in weights.items():
        if name.startswith("features."):
            index = int(name.split(".")[1])
            key = f"net.slice{SLICES[index]}.{name[len('features.'):]}"
        else:
            key = name
        assert key in state, key
        state[key] = tensor
    model.load_state_dict(state)
    model.eval()
    lego = data / "lego_400"
    out = []
    with torch.no_grad():
        for i, (first, second, rows, columns) in enumerate(PAIRS):
            a = image(lego / first, rows, columns)
            b = image(lego / second, SHIFTED.get(i, rows), columns)
            distance = model(a, b, normalize=True).item()
            out.append({"a": first, "b": second, "rows": rows, "columns": columns,
                        "b_rows": SHIFTED.get(i, rows), "lpips": distance})
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
