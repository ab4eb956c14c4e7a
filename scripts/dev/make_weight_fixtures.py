"""Writes tests/data/weights/: a LeNet-5 made and run by PyTorch, for the test that fedsim's
`lenet5` loaded from PyTorch's weights (`model.init`) computes what PyTorch computes.

    bash benches/pytorch_cnn.sh >/dev/null   # once: .venv-bench with torch and safetensors
    .venv-bench/bin/python scripts/dev/make_weight_fixtures.py

- lenet5.safetensors: PyTorch's default initialisation after torch.manual_seed(0), under
  fedsim's tensor names (scripts/torch_weights.py's `fedsim_tensors`), 1×28×28 inputs, 10 classes;
- lenet5_io.safetensors: `x` [5, 784], five images of uniform [0, 1) pixels (seed 1), and
  `logits` [5, 10], PyTorch's forward pass of them (float32, CPU).
"""
import os
import sys

import torch
from safetensors.torch import save_file
from torch import nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from torch_weights import fedsim_tensors  # noqa: E402


class LeNet5(nn.Module):
    """fedsim's `lenet5` (src/models/lenet.rs) in PyTorch."""

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
print("tests/data/weights: lenet5.safetensors, lenet5_io.safetensors")
