#!/usr/bin/env python3
"""FedEM's update as the authors' code runs it, re-run in PyTorch from the same weights and rows
as fedsim (issue 38, part 2): does fedsim's FedEM match theirs round by round?

    python analysis/fedem_authors_update.py data   OUT/data.parquet [--writers 10]
    python analysis/fedem_authors_update.py update OUT/data.parquet INIT ROUNDS OUT/reference
    python analysis/fedem_authors_update.py compare OUT/reference FEDSIM_RUNS...

`data`: the first `--writers` writers of ../shared/data/femnist (client = writer), each writer's
first 80 % of rows `train`, the rest `test`, as a Parquet file fedsim reads (`kind: parquet` with
`split_column`), so both sides train on the same rows.

`update`: their FedEM (the FedEM authors' code, as ../shared/reference/seed-implementations.md
records it) with FemnistCNN components from INIT (scripts/torch_weights.py femnist-cnn), every
client every round, one local epoch of one full batch (the batch holds all of a client's
training rows, so no shuffling enters), SGD with momentum 0.9 and weight decay 5e-4 (PyTorch's
rule), one optimiser per client and component whose momentum persists across rounds. Per round
and client: the E-step with the global components on the client's training rows,
q(i, m) = softmax_m(log π_m − ℓ_m(i)), π = mean_i q (float64, as fedsim; their code is float32);
then per component the loss Σ_i q(i, m) ℓ_m(i) / batch size and one SGD step from the global
component; then each component the average of the clients' weighted by their training rows.
Writes the global components after each round r as `round-r.safetensors` (fedsim's names).

`compare`: each fedsim run folder (`fedsim run --save-models` with `rounds: r`) against
`round-r.safetensors`: the largest |difference| of each component, relative to its largest
|value|. Exit status 1 if any exceeds 1e-4.
"""
import argparse
import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "scripts"))
from torch_weights import FemnistCNN, fedsim_tensors, load_into  # noqa: E402

FEMNIST = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "femnist",
                       "femnist_by_writer.parquet")


def make_data(out, writers):
    table = pq.read_table(FEMNIST, filters=[("client", "<", writers)])
    client = table.column("client").to_numpy()
    split = []
    for c in range(writers):
        n = int((client == c).sum())
        cut = int(0.8 * n)
        split += ["train"] * cut + ["test"] * (n - cut)
    order = np.argsort(client, kind="stable")
    table = table.take(pa.array(order)).select(["client", "x", "y"])
    table = table.append_column("split", pa.array(split))
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    pq.write_table(table, out)
    print(f"{out}: {writers} writers, {table.num_rows} rows")


def clients_of(path):
    t = pq.read_table(path)
    client = t.column("client").to_numpy()
    x = np.stack(t.column("x").to_numpy(zero_copy_only=False)).astype(np.float32) / 255.0
    y = t.column("y").to_numpy()
    train = np.array([s == "train" for s in t.column("split").to_pylist()])
    out = []
    for c in sorted(set(client.tolist())):
        rows = (client == c) & train
        out.append((torch.from_numpy(x[rows]).reshape(-1, 1, 28, 28),
                    torch.from_numpy(y[rows]).long()))
    return out


def update(data, init, rounds, out, lr, momentum, weight_decay, classes):
    torch.set_num_threads(2)
    clients = clients_of(data)
    tensors = load_file(init)
    components = len({k.split(".")[0] for k in tensors})
    global_models = []
    for m in range(components):
        model = FemnistCNN(classes)
        load_into(model, init, model=m if components > 1 else None)
        global_models.append(model)
    n_total = sum(len(y) for _, y in clients)
    pis = [np.full(components, 1.0 / components) for _ in clients]
    buffers = [[None] * components for _ in clients]
    os.makedirs(out, exist_ok=True)
    for r in range(1, rounds + 1):
        sums = [{k: torch.zeros_like(v, dtype=torch.float64)
                 for k, v in g.state_dict().items()} for g in global_models]
        for i, (x, y) in enumerate(clients):
            with torch.no_grad():
                losses = np.stack([F.cross_entropy(g(x), y, reduction="none").double().numpy()
                                   for g in global_models])
            logits = np.log(pis[i])[:, None] - losses
            logits -= logits.max(axis=0, keepdims=True)
            q = np.exp(logits)
            q /= q.sum(axis=0, keepdims=True)
            pis[i] = np.maximum(q.mean(axis=1), 1e-8)
            pis[i] /= pis[i].sum()
            for m, g in enumerate(global_models):
                local = FemnistCNN(classes)
                local.load_state_dict(g.state_dict())
                weights = torch.from_numpy(q[m].astype(np.float32))
                loss = (weights * F.cross_entropy(local(x), y, reduction="none")).sum() / len(y)
                local.zero_grad()
                loss.backward()
                with torch.no_grad():
                    params = list(local.parameters())
                    if buffers[i][m] is None:
                        buffers[i][m] = [torch.zeros_like(p) for p in params]
                        first = True
                    else:
                        first = False
                    for p, b in zip(params, buffers[i][m]):
                        d = p.grad + weight_decay * p
                        if first:
                            b.copy_(d)
                        else:
                            b.mul_(momentum).add_(d)
                        p.sub_(lr * b)
                share = len(y) / n_total
                for k, v in local.state_dict().items():
                    sums[m][k] += share * v.double()
        for g, s in zip(global_models, sums):
            g.load_state_dict({k: v.float() for k, v in s.items()})
        named = {}
        for m, g in enumerate(global_models):
            named.update(fedsim_tensors(g, f"{m}." if components > 1 else ""))
        save_file(named, os.path.join(out, f"round-{r}.safetensors"))
        print(f"round {r}: π of client 0 {np.round(pis[0], 4).tolist()}")


def compare(reference, runs):
    worst = 0.0
    for run in runs:
        rounds = [line.split(":")[1].strip() for line in open(os.path.join(run, "scenario.yaml"))
                  if line.startswith("rounds:")][0]
        ours = load_file(os.path.join(run, "models.safetensors"))
        theirs = load_file(os.path.join(reference, f"round-{rounds}.safetensors"))
        by_model = {}
        for name, t in theirs.items():
            model = name.split(".")[0]
            diff = (ours[name].double() - t.double()).abs().max().item()
            scale = t.abs().max().item()
            d, s = by_model.get(model, (0.0, 0.0))
            by_model[model] = (max(d, diff), max(s, scale))
        for model, (diff, scale) in sorted(by_model.items()):
            rel = diff / scale
            worst = max(worst, rel)
            print(f"round {rounds} component {model}: max |fedsim − reference| = {diff:.3e} "
                  f"({rel:.2e} of max |value| {scale:.3f})")
    print(f"largest relative difference: {worst:.2e} (target ≤ 1e-4)")
    return 0 if worst <= 1e-4 else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    d = sub.add_parser("data")
    d.add_argument("out")
    d.add_argument("--writers", type=int, default=10)
    u = sub.add_parser("update")
    u.add_argument("data")
    u.add_argument("init")
    u.add_argument("rounds", type=int)
    u.add_argument("out")
    u.add_argument("--lr", type=float, default=0.1)
    u.add_argument("--momentum", type=float, default=0.9)
    u.add_argument("--weight-decay", type=float, default=5e-4)
    u.add_argument("--classes", type=int, default=62)
    c = sub.add_parser("compare")
    c.add_argument("reference")
    c.add_argument("runs", nargs="+")
    a = p.parse_args()
    if a.what == "data":
        make_data(a.out, a.writers)
    elif a.what == "update":
        update(a.data, a.init, a.rounds, a.out, a.lr, a.momentum, a.weight_decay, a.classes)
    else:
        sys.exit(compare(a.reference, a.runs))


if __name__ == "__main__":
    main()
