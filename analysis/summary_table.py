#!/usr/bin/env python3
"""Markdown table of mean ± std over seeds, per algorithm, from fedsim's summary.csv files.

Usage: python3 analysis/summary_table.py RESULTS_DIR...
Every summary.csv below the given folders is read (one row per run); runs are grouped by
`name`, `algorithm` and `model` (pFedMe reports its personalized and its global model). Columns: test accuracy weighted mean, bottom decile, 10th percentile,
worst-10% mean, in percent (and novel-sample detection AUROC, AP and max-F1 where runs score
them). Needs only the Python standard library.
"""
import csv
import statistics
import sys
from pathlib import Path

COLUMNS = [
    ("test_acc_mean", "mean"),
    ("test_acc_bottom_decile", "bottom decile"),
    ("test_acc_p10", "p10"),
    ("test_acc_worst10_mean", "worst-10% mean"),
]
# Novel-sample detection (runs on data with novel rows): shown when any run has them.
NOVELTY = [
    ("novelty_auroc", "AUROC"),
    ("novelty_ap", "AP"),
    ("novelty_max_f1", "max-F1"),
]


def main(dirs):
    groups = {}
    for d in dirs:
        for path in sorted(Path(d).rglob("summary.csv")):
            with open(path, newline="") as f:
                for row in csv.DictReader(f):
                    groups.setdefault((row["name"], row["algorithm"], row.get("model", "")), []).append(row)
    if not groups:
        sys.exit(f"no summary.csv under {' '.join(dirs)}")
    columns = list(COLUMNS)
    if any(r.get(k) for rows in groups.values() for r in rows for k, _ in NOVELTY):
        columns += NOVELTY
    print("| scenario | algorithm | model | seeds | " + " | ".join(c[1] for c in columns) + " |")
    print("|---" * (4 + len(columns)) + "|")
    for (name, algorithm, model), rows in sorted(groups.items()):
        cells = []
        for key, _ in columns:
            values = [100 * float(r[key]) for r in rows if r.get(key)]
            if not values:
                cells.append("–")
                continue
            std = statistics.stdev(values) if len(values) > 1 else 0.0
            cells.append(f"{statistics.mean(values):.2f} ± {std:.2f}")
        seeds = ",".join(sorted((r["seed"] for r in rows), key=int))
        print(f"| {name} | {algorithm} | {model} | {seeds} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1:] or ["results"])
