#!/usr/bin/env python3
"""The PyTorch side of the `cnn_epoch` benchmark (benches/kernel.rs): one local epoch of the FedEM
authors' FemnistCNN (10 classes) over 1000 MNIST-shaped images, batch 128, SGD (lr 0.01, momentum
0.9, weight decay 5e-4), with torch.set_num_threads(THREADS) (default 1, as a fedsim trainer
worker). Prints the median of REPEATS epochs after one warm-up.

    bash benches/pytorch_cnn.sh            # sets up .venv's torch and runs this with 1 and 2 threads
"""
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "scripts"))
from torch_weights import FemnistCNN  # noqa: E402  (the authors' FemnistCNN, one copy)


def main():
    threads = int(os.environ.get("THREADS", "1"))
    repeats = int(os.environ.get("REPEATS", "10"))
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    x = torch.rand(1000, 1, 28, 28)
    y = torch.randint(0, 10, (1000,))
    model = FemnistCNN(10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)

    def epoch():
        perm = torch.randperm(1000)
        for s in range(0, 1000, 128):
            idx = perm[s : s + 128]
            opt.zero_grad()
            loss = F.cross_entropy(model(x[idx]), y[idx])
            loss.backward()
            opt.step()

    epoch()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        epoch()
        times.append(time.perf_counter() - t)
    print(f"pytorch {torch.__version__}, {threads} thread(s): one epoch of FemnistCNN over 1000 "
          f"images, median of {repeats}: {1000 * statistics.median(times):.1f} ms")


if __name__ == "__main__":
    sys.exit(main())
