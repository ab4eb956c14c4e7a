#!/usr/bin/env python3
"""The PyTorch/Opacus side of the `dp_sgd_epoch` benchmark (benches/kernel.rs): one local epoch
over 1000 MNIST-shaped rows (random pixels in [0, 1); the time does not depend on them), batch
128, SGD (lr 0.01, momentum 0.9, weight decay 5e-4) for the linear model, an MLP
784 -> 256 -> 256 -> 10 and the FedEM authors' FemnistCNN (fedsim's `linear`, `mlp` and `cnn`),
plain and with Opacus's DP-SGD (Poisson sampling at 1/8, so 128 expected rows and 8 steps;
max_grad_norm 1, noise multiplier 1), with torch.set_num_threads(THREADS) (default 1, as a
fedsim trainer worker). Prints the median of REPEATS epochs after one warm-up, and the ratio.

    bash benches/opacus_dp_sgd.sh      # installs torch and opacus into .venv-bench, runs this
"""
import os
import statistics
import sys
import time
import warnings

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "scripts"))
from torch_weights import FemnistCNN  # noqa: E402  (the authors' FemnistCNN, one copy)

N, BATCH = 1000, 128


def models():
    yield "linear", nn.Sequential(nn.Flatten(), nn.Linear(784, 10))
    yield "mlp_256_256", nn.Sequential(
        nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
        nn.Linear(256, 10))
    yield "femnist_cnn", FemnistCNN(10)


def median_epoch(model, loader, optimizer, repeats):
    def epoch():
        for xb, yb in loader:
            optimizer.zero_grad()
            F.cross_entropy(model(xb), yb).backward()
            optimizer.step()

    epoch()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        epoch()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    from opacus import PrivacyEngine
    import opacus

    warnings.filterwarnings("ignore")
    threads = int(os.environ.get("THREADS", "1"))
    repeats = int(os.environ.get("REPEATS", "10"))
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    x = torch.rand(N, 1, 28, 28)
    y = torch.randint(0, 10, (N,))
    data = torch.utils.data.TensorDataset(x, y)
    print(f"torch {torch.__version__}, opacus {opacus.__version__}, {threads} thread(s); "
          f"one epoch over {N} rows, batch {BATCH}, median of {repeats}")
    for name, model in models():
        sgd = lambda m: torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
        loader = torch.utils.data.DataLoader(data, batch_size=BATCH, shuffle=True)
        plain = median_epoch(model, loader, sgd(model), repeats)
        engine = PrivacyEngine(accountant="rdp")
        private_model, optimizer, private_loader = engine.make_private(
            module=model, optimizer=sgd(model), data_loader=loader,
            noise_multiplier=1.0, max_grad_norm=1.0, poisson_sampling=True)
        private = median_epoch(private_model, private_loader, optimizer, repeats)
        print(f"  {name:12s} plain {1000 * plain:8.1f} ms   opacus {1000 * private:8.1f} ms   "
              f"x{private / plain:.2f}")


if __name__ == "__main__":
    sys.exit(main())
