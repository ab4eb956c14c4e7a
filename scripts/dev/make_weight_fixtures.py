"""Writes tests/data/weights/: a LeNet-5 and a FemnistCNN made and run by PyTorch, for the tests
that fedsim's `lenet5`, and the FedEM authors' FemnistCNN written as a layer list, loaded from
PyTorch's weights (`model.init`) compute what PyTorch computes.

    bash benches/pytorch_cnn.sh >/dev/null   # once: .venv-bench with torch and safetensors
    .venv-bench/bin/python scripts/dev/make_weight_fixtures.py

- lenet5.safetensors: PyTorch's default initialisation after torch.manual_seed(0), under
  fedsim's tensor names (scripts/torch_weights.py's `fedsim_tensors`), 1×28×28 inputs, 10 classes;
- lenet5_io.safetensors: `x` [5, 784], five images of uniform [0, 1) pixels (seed 1), and
  `logits` [5, 10], PyTorch's forward pass of them (float32, CPU);
- femnist_cnn16.safetensors, femnist_cnn16_io.safetensors: the same for the FedEM authors'
  FemnistCNN (scripts/torch_weights.py) on 1×16×16 images (on their 28×28 images the file would
  be 8 MB), 10 classes, and in `parameters` the number of parameters of their class as they
  use it (28×28 images, 62 classes);
- femnist_cnn16_model.yaml: that FemnistCNN as the `model:` section `scripts/torch_weights.py
  layers` writes for it;
- femnist_cnn16.pt: that FemnistCNN traced by TorchScript (`scripts/torch_weights.py script`),
  for `model: {kind: torchscript}`; femnist_cnn16_script.yaml its `model:` section (the path
  relative to the repository);
- noisy.pt: a linear model of 1×16×16 images (10 classes) that adds `randn_like` noise to its
  logits, which fedsim refuses (it would draw from libtorch's global generator).

Rerunning it rewrites lenet5_io.safetensors with logits that may differ in their last bits
(another machine's float rounding); the tests' tolerance covers either.
"""
import os
import sys

import torch
from safetensors.torch import save_file
from torch import nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from torch_weights import (FemnistCNN, fedsim_layers, fedsim_tensors, flops_per_row,  # noqa: E402
                           model_section, traced)


class LeNet5(nn.Module):
    """fedsim's `lenet5` (crates/world/src/models/lenet.rs) in PyTorch."""

    def __init__(self, classes):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 4 * 4, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = x.flatten(1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


torch.manual_seed(0)
model = LeNet5(10)
x = torch.rand(5, 1, 28, 28, generator=torch.Generator().manual_seed(1))
with torch.no_grad():
    logits = model(x)
out = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "weights")
os.makedirs(out, exist_ok=True)
save_file(fedsim_tensors(model), os.path.join(out, "lenet5.safetensors"))
save_file({"x": x.reshape(5, 784).contiguous(), "logits": logits.contiguous()},
          os.path.join(out, "lenet5_io.safetensors"))

torch.manual_seed(0)
model = FemnistCNN(10, side=16)
x = torch.rand(5, 1, 16, 16, generator=torch.Generator().manual_seed(1))
with torch.no_grad():
    logits = model(x)
theirs = sum(p.numel() for p in FemnistCNN(62).parameters())
save_file(fedsim_tensors(model), os.path.join(out, "femnist_cnn16.safetensors"))
save_file({"x": x.reshape(5, 256).contiguous(), "logits": logits.contiguous(),
           "parameters": torch.tensor([theirs], dtype=torch.int64)},
          os.path.join(out, "femnist_cnn16_io.safetensors"))
with open(os.path.join(out, "femnist_cnn16_model.yaml"), "w") as f:
    f.write(model_section(fedsim_layers(model, (1, 16, 16))))
traced(model, (1, 16, 16)).save(os.path.join(out, "femnist_cnn16.pt"))
with open(os.path.join(out, "femnist_cnn16_script.yaml"), "w") as f:
    f.write("model: {kind: torchscript, path: tests/data/weights/femnist_cnn16.pt, "
            f"flops: {flops_per_row(model, (1, 16, 16))}}}\n")


class Noisy(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(256, 10)

    def forward(self, x):
        z = self.fc(x.flatten(1))
        return z + 0.01 * torch.randn_like(z)


torch.manual_seed(0)
traced(Noisy(), (1, 16, 16)).save(os.path.join(out, "noisy.pt"))
print("tests/data/weights: lenet5.safetensors, lenet5_io.safetensors, "
      "femnist_cnn16.safetensors, femnist_cnn16_io.safetensors, femnist_cnn16_model.yaml, "
      "femnist_cnn16.pt, femnist_cnn16_script.yaml, noisy.pt")
