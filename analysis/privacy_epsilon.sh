#!/usr/bin/env bash
# Recipe: the accuracy-ε study of client-level differential privacy (issue 39): FedAvg and
# FedEM on MNIST over 1 000 clients without privacy, with clipping alone, and at ε = 8, 4, 2, 1
# (scenarios/studies/privacy_epsilon.yaml), seeds 1-3; the sweep is resumable (finished cells
# are kept), then `fedsim report` tables the mean and bottom-decile accuracy per cell.
#   bash analysis/privacy_epsilon.sh          (a few minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${FEDSIM:-}" ] || bash scripts/setup.sh
fedsim=${FEDSIM:-target/release/fedsim}
out=results/privacy_epsilon
"$fedsim" data fetch mnist >/dev/null
"$fedsim" sweep scenarios/studies/privacy_epsilon.yaml --jobs 2 --out "$out"
"$fedsim" report "$out" | grep '^|' | tee "$out/table.md"
