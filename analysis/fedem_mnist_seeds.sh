#!/usr/bin/env bash
# FedEM under the EMNIST protocol on MNIST (scenarios/paper/fedem_mnist_fedem.yaml: 100 clients,
# 10 % of the images, M = 3, lr 0.1) for 30 rounds, seed by seed, with the default E-step and/or
# the authors' float32 one (`algorithm.e_step`), then a table: per seed the weighted test
# accuracy, the bottom decile and how many clients hold a mixture weight at the floor (float64:
# ≤ 1e-8) or at exactly 0 (float32). Runs already in OUT are kept (a killed run starts over).
#
#   OUT=results/fedem_mnist_30 SEEDS="1 2 3" E_STEPS="float64 float32" bash analysis/fedem_mnist_seeds.sh
#
# About 5.5 minutes and 10 GB a run on 2 cores (`spill: off`). Needs pyarrow (python3 -m pip
# install pyarrow, or .venv-bench where analysis/fedem_authors_update.sh made it).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-results/fedem_mnist_30}
seeds=${SEEDS:-1 2 3 4 5 6 7 8 9 10}
e_steps=${E_STEPS:-float64}
[ -n "${FEDSIM:-}" ] || bash scripts/setup.sh
bin=${FEDSIM:-target/release/fedsim}
for e in $e_steps; do
  for s in $seeds; do
    dir=$out/$e/seed-$s
    [ -f "$dir/summary.csv" ] && continue
    rm -rf "$dir"
    "$bin" run scenarios/paper/fedem_mnist_fedem.yaml --seed "$s" --set rounds=30 --set eval_every=30 \
      --set training.spill=off --set algorithm.e_step="$e" -q --out "$dir" >/dev/null
  done
done
py=python3
[ -x .venv-bench/bin/python ] && py=.venv-bench/bin/python
"$py" - "$out" $e_steps <<'EOF'
import csv, statistics, sys
from pathlib import Path
import pyarrow.parquet as pq

out, e_steps = Path(sys.argv[1]), sys.argv[2:]
for e in e_steps:
    rows = []
    for d in sorted((out / e).glob("seed-*"), key=lambda p: int(p.name[5:])):
        summary = next(csv.DictReader(open(d / "summary.csv")))
        mix = pq.read_table(d / "mixtures.parquet").to_pylist()
        last = max(r["round"] for r in mix)
        floor = 0.0 if e == "float32" else 1e-8
        lost = {r["client"] for r in mix if r["round"] == last and r["weight"] <= floor}
        rows.append((d.name[5:], float(summary["test_acc_mean"]), float(summary["test_acc_bottom_decile"]), len(lost)))
    print(f"e_step: {e}")
    print("| seed | weighted test accuracy | bottom decile | clients with a weight at the floor |")
    print("|---|---|---|---|")
    for seed, acc, bottom, lost in rows:
        print(f"| {seed} | {100 * acc:.1f} | {100 * bottom:.1f} | {lost} |")
    accs = [r[1] for r in rows]
    if len(accs) > 1:
        print(f"mean {100 * statistics.mean(accs):.1f}, sd {100 * statistics.stdev(accs):.1f} over {len(accs)} seeds")
EOF
