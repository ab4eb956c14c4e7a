#!/usr/bin/env python3
"""The per-client test accuracies of finished runs as q-FFL's Table 1 reports them: the pooled
average, the worst and best 10 % of clients, the variance (×10⁴) and the clients at 0 %, each
client counting once, at each run's last evaluated round (the global model's test rows).

    python3 analysis/client_accuracy_table.py RUN_DIR_OR_SWEEP_DIR ...

A sweep folder stands for its `cell=*` runs. Standard library only (reads metrics.csv).
"""

import csv
import statistics
import sys
from pathlib import Path


def runs(paths):
    for p in map(Path, paths):
        cells = sorted(p.glob("cell=*"))
        yield from (cells if cells else [p])


def row(run):
    rows = list(csv.DictReader(open(run / "metrics.csv")))
    test = [r for r in rows if r["split"] == "test" and r["model"] == "global"]
    last = max(int(r["round"]) for r in test)
    test = [r for r in test if int(r["round"]) == last]
    acc = sorted(float(r["accuracy"]) for r in test)
    n = [int(r["n_samples"]) for r in test]
    k = max(1, len(acc) // 10)
    pooled = sum(float(r["accuracy"]) * m for r, m in zip(test, n)) / sum(n)
    scenario = (run / "scenario.yaml").read_text()
    lines = scenario.splitlines()
    q = next((l.split(":")[1].strip() for l in lines if l.strip().startswith("q:")), "")
    seed = next(l.split(":")[1].strip() for l in lines if l.startswith("seed:"))
    return (
        f"| {q} | {seed} | {100 * pooled:.1f} % | {100 * statistics.mean(acc[:k]):.1f} % "
        f"| {100 * statistics.mean(acc[-k:]):.1f} % | {10000 * statistics.pvariance(acc):.0f} "
        f"| {sum(a == 0 for a in acc)} |"
    )


if __name__ == "__main__":
    print("| q | seed | average (pooled) | worst 10 % | best 10 % | variance | clients at 0 % |")
    print("|---|---|---|---|---|---|---|")
    rows = [row(run) for run in runs(sys.argv[1:])]
    for line in sorted(rows, key=lambda r: (int(r.split("|")[2]), r.split("|")[1])):
        print(line)
