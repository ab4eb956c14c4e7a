#!/usr/bin/env bash
# Recipe: FedEM Table 2, synthetic row, with the paper's own protocol: each client's own samples
# split 60/20/20 (train/val/test), 200 rounds, lr ×0.1 after rounds 100 and 150, on the authors'
# data (numpy seed 12345, labels corrected). All ten methods; seeds from $SEEDS (default "1 2 3").
# Results go to results/table2_synthetic_protocol/<method>/seed-<n>/, the table to table.md there.
#   SEEDS="1" bash analysis/table2_synthetic_protocol.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
out=results/table2_synthetic_protocol
for method in local fedavg fedprox fedavg_plus clustered pfedme apfl per_fedavg ditto fedem; do
  for seed in ${SEEDS:-1 2 3}; do
    dir="$out/$method/seed-$seed"
    if [ -f "$dir/summary.csv" ]; then continue; fi   # finished runs are kept
    target/release/fedsim run "scenarios/paper/fedem_synthetic_$method.yaml" --seed "$seed" \
      --out "$dir" --quiet \
      --set name="fedem_protocol_$method" \
      --set "split={kind: fractions, train: 0.6, val: 0.2, test: 0.2}" \
      --set rounds=200 \
      --set "training.lr_schedule={kind: multi_step, milestones: [100, 150], gamma: 0.1}" \
      >/dev/null
  done
done
target/release/fedsim report "$out" | grep '^|' | tee "$out/table.md"
# The ceiling: the Bayes-optimal classifier on the same data (true components and mixture weights).
target/release/fedsim describe scenarios/paper/fedem_synthetic_fedem.yaml \
  --set "split={kind: fractions, train: 0.6, val: 0.2, test: 0.2}" \
  | grep Bayes-optimal | tee -a "$out/table.md"
