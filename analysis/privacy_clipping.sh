#!/usr/bin/env bash
# Recipe: adaptive against fixed clipping under client-level DP (issue 39; Andrew et al. 2021):
# FedAvg on MNIST over 1 000 clients with clipping alone and at ε = 8 and 4, the bound fixed at
# 0.03 … 3 or adaptive to the median update norm (scenarios/studies/privacy_clipping.yaml),
# seeds 1-3; the sweep is resumable, then `fedsim report` tables the mean and bottom-decile
# accuracy per cell.
#   bash analysis/privacy_clipping.sh          (70 s on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${FEDSIM:-}" ] || bash scripts/setup.sh
fedsim=${FEDSIM:-target/release/fedsim}
out=results/privacy_clipping
"$fedsim" data fetch mnist >/dev/null
"$fedsim" sweep scenarios/studies/privacy_clipping.yaml --jobs 2 --out "$out"
"$fedsim" report "$out" | grep '^|' | tee "$out/table.md"
