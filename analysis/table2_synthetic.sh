#!/usr/bin/env bash
# Recipe: FedEM Table 2, synthetic row, in the authors' setting (their exact data, corrected
# labels, 1000 extra test samples, 100 rounds): Local, FedAvg, FedProx, FedAvg+, Clustered FL,
# pFedMe, APFL, Per-FedAvg, Ditto and FedEM over
# seeds 1-3, then a markdown table of mean ± std.
# Results go to results/table2_synthetic/<method>/seed-<n>/.
#   bash analysis/table2_synthetic.sh
# The same runs as one sweep (each cell is exactly one of these scenario files; a test checks it):
#   target/release/fedsim sweep scenarios/paper/fedem_table2_synthetic.yaml --jobs 2
#   target/release/fedsim report results/fedem_table2_synthetic
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
out=results/table2_synthetic
for method in local fedavg fedprox fedavg_plus clustered pfedme apfl per_fedavg ditto fedem; do
  for seed in 1 2 3; do
    dir="$out/$method/seed-$seed"
    if [ -f "$dir/summary.csv" ]; then continue; fi   # finished runs are kept
    target/release/fedsim run "scenarios/paper/fedem_synthetic_$method.yaml" --seed "$seed" --out "$dir" --quiet >/dev/null
  done
done
target/release/fedsim report "$out" | grep '^|' | tee "$out/table.md"
# The ceiling: the Bayes-optimal classifier on the same data (true components and mixture weights).
target/release/fedsim describe scenarios/paper/fedem_synthetic_fedem.yaml \
  | grep Bayes-optimal | tee -a "$out/table.md"
