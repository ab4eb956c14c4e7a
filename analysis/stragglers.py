#!/usr/bin/env python3
"""Per-client accuracy against device speed, from fedsim result folders (clients.csv,
summary.csv). Clients are cut into speed quintiles (slowest first); for each run the table
shows the test accuracy of each quintile and the share of its jobs that were aggregated.

Usage: python3 analysis/stragglers.py RESULT_DIR...   (one folder per run)
"""
import csv
import sys
from pathlib import Path


def quintiles(rows):
    rows = sorted(rows, key=lambda r: float(r["samples_per_second"]))
    n = len(rows)
    return [rows[i * n // 5:(i + 1) * n // 5] for i in range(5)]


def mean(xs):
    xs = list(xs)
    return sum(xs) / len(xs) if xs else float("nan")


def main(dirs):
    head = ("| run | weighted mean | p10 | time to target (s) | clients missing an aggregation, per round "
            "| accuracy by speed quintile, slowest → fastest | jobs aggregated by quintile |")
    print(head)
    print("|---|---|---|---|---|---|---|")
    for d in map(Path, dirs):
        clients = [r for r in csv.DictReader(open(d / "clients.csv")) if r["unseen"] != "true"]
        summary = list(csv.DictReader(open(d / "summary.csv")))[-1]
        acc, share = [], []
        for q in quintiles(clients):
            acc.append(100 * mean(float(r["test_accuracy"]) for r in q))
            jobs = sum(sum(int(r[k]) for k in r if k.startswith("jobs_")) for r in q)
            share.append(100 * sum(int(r["jobs_aggregated"]) for r in q) / max(jobs, 1))
        ttt = summary.get("time_to_target_s")
        ttt = f"{float(ttt):.1f}" if ttt else "never"
        rounds = int(summary["final_round"])
        aggregated = sum(int(r["jobs_aggregated"]) for r in clients)
        missing = 100 * (1 - aggregated / (rounds * len(clients)))
        print(f"| {d.name} | {100 * float(summary['test_acc_mean']):.2f} | "
              f"{100 * float(summary['test_acc_p10']):.2f} | {ttt} | {missing:.1f} % | "
              + " / ".join(f"{a:.1f}" for a in acc) + " | "
              + " / ".join(f"{s:.0f} %" for s in share) + " |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
