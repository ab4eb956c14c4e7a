#!/usr/bin/env python3
"""PyTorch weights as fedsim reads them (`model: {kind: ..., init: {from: FILE}}`), and back.

fedsim names a model's tensors by the layers that hold parameters, counted from 0 in forward
order: `K.weight`, `K.bias` (dense, convolution, normalisation), `K.weight` (embedding), and an
LSTM's own names (`K.weight_ih_l0`, ...); shapes and layouts are PyTorch's. A module whose
submodules are registered in forward order (as most are) maps by `fedsim_tensors`: the K-th
submodule that holds parameters itself becomes `K.`. Several models (FedEM's components) are
prefixed `M.`.

    # The FedEM authors' initial FemnistCNN components: torch.manual_seed(seed + m), then
    # PyTorch's default initialisation, for m = 0 .. components - 1.
    python scripts/torch_weights.py femnist-cnn --seed 1 --components 3 --classes 62 \\
        --out fedem_init.safetensors

    # A run's final models (fedsim run --save-models) loaded into PyTorch modules:
    #   from torch_weights import load_into; load_into(module, "models.safetensors", model=0)

Needs torch and safetensors (`bash benches/pytorch_cnn.sh` installs both into .venv-bench).
"""
import argparse

import torch
from safetensors.torch import load_file, save_file
from torch import nn
import torch.nn.functional as F


class FemnistCNN(nn.Module):
    """The FedEM authors' FemnistCNN (their models.py): fedsim's `cnn`."""

    def __init__(self, num_classes):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(32, 64, 5)
        self.fc1 = nn.Linear(64 * 4 * 4, 2048)
        self.output = nn.Linear(2048, num_classes)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = x.view(-1, 64 * 4 * 4)
        x = F.relu(self.fc1(x))
        return self.output(x)


def fedsim_tensors(module, prefix=""):
    """`module`'s parameters under fedsim's names (F32, contiguous), `prefix` before each."""
    out, k = {}, 0
    for _, sub in module.named_modules():
        own = list(sub.named_parameters(recurse=False))
        if not own:
            continue
        for name, p in own:
            out[f"{prefix}{k}.{name}"] = p.detach().float().contiguous().clone()
        k += 1
    return out


def load_into(module, path, model=None):
    """Loads fedsim's tensors of `path` (model `model` of several, or the only one) into
    `module`, by the same mapping as `fedsim_tensors`."""
    tensors = load_file(path)
    prefix = "" if model is None else f"{model}."
    names = fedsim_tensors(module)
    with torch.no_grad():
        params = dict(module.named_parameters())
        by_fedsim = dict(zip(names, params.values()))
        for name, p in by_fedsim.items():
            p.copy_(tensors[prefix + name])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", choices=["femnist-cnn"])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--components", type=int, default=1, help="models to write (M.)")
    parser.add_argument("--classes", type=int, default=62)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    tensors = {}
    for m in range(args.components):
        torch.manual_seed(args.seed + m)
        prefix = f"{m}." if args.components > 1 else ""
        tensors.update(fedsim_tensors(FemnistCNN(args.classes), prefix))
    save_file(tensors, args.out)
    print(f"{args.out}: {len(tensors)} tensors, {args.components} model(s)")


if __name__ == "__main__":
    main()
