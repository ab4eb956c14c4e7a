"""The peer benchmark's table from run.sh's measurements: for each workload and framework,
the median over its last REPEATS runs of wall time and peak memory, and the final accuracy.

  python table.py target/peers/runs.jsonl REPEATS
"""

import importlib.metadata
import json
import platform
import statistics
import sys
import time

NAMES = {
    "fedsim": "fedsim",
    "pytorch": "PyTorch loop",
    "pfl": "pfl-research",
    "flower": "Flower (simulation)",
}


def main():
    path, repeats = sys.argv[1], int(sys.argv[2])
    runs = {}
    for line in open(path):
        r = json.loads(line)
        runs.setdefault((r["workload"], r["framework"]), []).append(r)
    print(f"{time.strftime('%Y-%m-%d')}, {platform.machine()}, {len(__import__('os').sched_getaffinity(0))} cores; "
          + ", ".join(f"{p} {importlib.metadata.version(p)}" for p in ("torch", "flwr", "pfl")))
    print()
    print("| workload | framework | wall time | peak memory (PSS / RSS, all processes) | processes | accuracy |")
    print("|---|---|---|---|---|---|")
    for (workload, framework), rs in runs.items():
        rs = rs[-repeats:]
        m = [r["measured"] for r in rs]
        wall = statistics.median(x["wall_s"] for x in m)
        pss = statistics.median(x["peak_pss_mb"] for x in m)
        rss = statistics.median(x["peak_rss_mb"] for x in m)
        most = max(x["processes"] for x in m)
        walls = " / ".join(f"{x['wall_s']:.1f}" for x in m)
        accs = " / ".join(f"{100 * r['accuracy']:.2f}" for r in rs)
        print(f"| {workload} | {NAMES.get(framework, framework)} | {wall:.1f} s ({walls}) | "
              f"{pss / 1024:.2f} / {rss / 1024:.2f} GB | {most} | {accs} % |")


if __name__ == "__main__":
    main()
