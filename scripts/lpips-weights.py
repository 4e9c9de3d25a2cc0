#!/usr/bin/env python3
"""Writes the LPIPS (v0.1, AlexNet) weights file Ember reads (`eval.lpips_weights`,
`--lpips-weights`, `EMBER_LPIPS_WEIGHTS`) from the public sources:

- AlexNet's five convolutions: torchvision's ImageNet AlexNet (`AlexNet_Weights.IMAGENET1K_V1`,
  BSD-3-Clause), downloaded by torchvision, or a saved state dict given with `--alexnet FILE.pth`;
- the five calibration layers: `weights/v0.1/alex.pth` of the `lpips` package 0.1.4
  (BSD-2-Clause), installed with it.

The file keeps PyTorch's layout and names: `features.{0,3,6,8,10}.{weight,bias}` and
`lin{0..4}.model.1.weight`, float32.

    python3 -m venv /tmp/lpips-env
    /tmp/lpips-env/bin/pip install torch torchvision lpips==0.1.4 safetensors
    /tmp/lpips-env/bin/python scripts/lpips-weights.py alex.safetensors [--alexnet FILE.pth]
"""

import argparse
import os
from pathlib import Path

import lpips
import torch
from safetensors.torch import save_file

CONVS = [0, 3, 6, 8, 10]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the safetensors file to write")
    parser.add_argument("--alexnet", type=Path, help="a torchvision AlexNet state dict (.pth)")
    args = parser.parse_args()
    if args.alexnet:
        features = torch.load(args.alexnet, map_location="cpu", weights_only=True)
    else:
        import torchvision

        net = torchvision.models.alexnet(weights=torchvision.models.AlexNet_Weights.IMAGENET1K_V1)
        features = net.state_dict()
    calibration = torch.load(
        Path(lpips.__file__).parent / "weights/v0.1/alex.pth", map_location="cpu", weights_only=True
    )
    tensors = {}
    for index in CONVS:
        for part in ("weight", "bias"):
            name = f"features.{index}.{part}"
            tensors[name] = features[name].float().contiguous()
    for k in range(5):
        name = f"lin{k}.model.1.weight"
        tensors[name] = calibration[name].float().contiguous()
    # Written beside the target and renamed: an interrupted run leaves no partial file.
    temporary = args.out.with_name(args.out.name + ".tmp")
    save_file(tensors, str(temporary))
    os.replace(temporary, args.out)
    print(f"{args.out}: {len(tensors)} tensors")


if __name__ == "__main__":
    main()
