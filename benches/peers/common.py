"""What every Python side of the peer benchmark shares: the two workloads, their models (the
same layers as fedsim's `mlp` with `hidden: [200]` and `cnn`, the FedEM authors' FemnistCNN),
and reading prepare.py's table into per-client tensors.

Nothing here is tuned for one framework: each framework's script uses these pieces through its
own documented API.
"""

import functools
import json
import os
import sys

import numpy as np
import pyarrow.parquet as pq
import torch
from torch import nn
import torch.nn.functional as F

# name -> (clients, rounds, clients per round); every workload: one local epoch of plain SGD,
# batch 32, lr 0.05, FedAvg weighted by training rows, the global model evaluated on every
# client's test rows after the last round.
WORKLOADS = {"mlp": (1000, 50, 100), "cnn": (100, 20, 10)}
BATCH, LR, EPOCHS = 32, 0.05, 1
THREADS = int(os.environ.get("THREADS", "2"))
# The seed of the initial weights, the clients drawn and the batches (benches/peers/seeds.sh
# varies it; every other script of the benchmark uses 1).
SEED = int(os.environ.get("SEED", "1"))


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(784, 200)
        self.out = nn.Linear(200, 10)

    def forward(self, x):
        return self.out(F.relu(self.hidden(x.flatten(1))))


class FemnistCnn(nn.Module):
    """The FedEM authors' FemnistCNN for 28x28 images and 10 classes."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5)
        self.conv2 = nn.Conv2d(32, 64, 5)
        self.fc1 = nn.Linear(64 * 4 * 4, 2048)
        self.output = nn.Linear(2048, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.output(F.relu(self.fc1(x.flatten(1))))


def start():
    """The command line's workload and table (`SCRIPT mlp|cnn DATA.parquet`), with torch's
    threads and seed set: (workload, (clients, rounds, clients per round), each client's data)."""
    workload, path = sys.argv[1], sys.argv[2]
    torch.set_num_threads(THREADS)
    torch.manual_seed(SEED)
    return workload, WORKLOADS[workload], load(path, WORKLOADS[workload][0])


def model(workload):
    return Mlp() if workload == "mlp" else FemnistCnn()


@functools.lru_cache(maxsize=1)
def load(path, clients):
    """Each client's (train_x, train_y, test_x, test_y): float32 images in [0, 1] shaped
    [n, 1, 28, 28], int64 labels. Kept for the process's next call (a Flower ClientApp
    process reads the table once)."""
    t = pq.read_table(path)
    client = t["client"].to_numpy()
    test = np.asarray(t["split"].to_pylist()) == "test"
    y = t["y"].to_numpy().astype(np.int64)
    x = np.asarray(t["x"].combine_chunks().flatten()).reshape(-1, 1, 28, 28)
    # Rows by (client, split), in file order within each.
    order = np.lexsort((np.arange(len(y)), test, client))
    key = client[order] * 2 + test[order]
    bounds = np.searchsorted(key, np.arange(2 * clients + 1))
    x = x[order].astype(np.float32)
    x /= 255.0  # in place: no second float copy of the images
    x, y = torch.from_numpy(x), torch.from_numpy(y[order])
    out = []
    for c in range(clients):
        (a, b), (_, d) = bounds[2 * c : 2 * c + 2], bounds[2 * c + 1 : 2 * c + 3]
        out.append((x[a:b], y[a:b], x[b:d], y[b:d]))
    return out


def train_epoch(net, x, y, generator):
    """One epoch of plain SGD over (x, y) in shuffled batches; returns the rows seen."""
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    net.train()
    order = torch.randperm(len(y), generator=generator)
    for start in range(0, len(y), BATCH):
        rows = order[start : start + BATCH]
        opt.zero_grad()
        F.cross_entropy(net(x[rows]), y[rows]).backward()
        opt.step()
    return len(y)


@torch.no_grad()
def evaluate(net, data):
    """Accuracy of `net` on every client's test rows, pooled."""
    net.eval()
    hits = rows = 0
    for _, _, x, y in data:
        hits += (net(x).argmax(1) == y).sum().item()
        rows += len(y)
    return hits / rows


def report(framework, workload, accuracy):
    """The line run.sh reads: the framework's final accuracy."""
    print(json.dumps({"framework": framework, "workload": workload, "accuracy": accuracy}))
    sys.stdout.flush()
