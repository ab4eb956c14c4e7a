#!/usr/bin/env bash
# Straggler study (issue 4): FedAvg and FedEM on the FedEM synthetic data, on devices whose
# slowest ones hold most of mixture component 0, with and without a deadline that drops the
# slowest ~20 % of jobs each round. Writes results/stragglers/table.md.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=target/release/fedsim
out=results/stragglers
for a in fedavg fedem; do
  $bin run scenarios/studies/stragglers_$a.yaml --out $out/$a-deadline --quiet
  $bin run scenarios/studies/stragglers_$a.yaml --set policy.deadline_s=null --out $out/$a-no-deadline --quiet
done
python3 analysis/stragglers.py $out/fedavg-no-deadline $out/fedavg-deadline \
  $out/fedem-no-deadline $out/fedem-deadline | tee $out/table.md
