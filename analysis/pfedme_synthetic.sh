#!/usr/bin/env bash
# Recipe: pFedMe paper Table 1, Synthetic(0.5, 0.5) MLR row, on the paper's own data
# (numpy_seed 0): FedAvg and pFedMe (personalized and global model), 600 rounds, training seeds
# 1-3, then a markdown table of mean ± std. About 3 minutes on 2 cores (pFedMe: 41-44 s per seed
# in cohorts; 8.5 minutes with every client alone).
# Finished runs in results/pfedme_synthetic/<method>/seed-<n>/ are kept.
#   bash analysis/pfedme_synthetic.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
out=results/pfedme_synthetic
for method in fedavg pfedme; do
  for seed in 1 2 3; do
    dir="$out/$method/seed-$seed"
    if [ -f "$dir/summary.csv" ]; then continue; fi   # finished runs are kept
    target/release/fedsim run "scenarios/paper/pfedme_synthetic_$method.yaml" --seed "$seed" \
      --out "$dir" --quiet >/dev/null
  done
done
target/release/fedsim report "$out/fedavg" "$out/pfedme" --out "$out/report" | grep '^|' | tee "$out/table.md"
