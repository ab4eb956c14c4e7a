#!/usr/bin/env bash
# Recipe: the differential privacy studies of issue 39 on MNIST over 1 000 clients
# (scenarios/studies/privacy_<study>.yaml, seeds 1-3), each a resumable sweep into
# results/privacy_<study>/ tabled by `fedsim report` (mean and bottom-decile accuracy per cell,
# in table.md there):
#   epsilon        FedAvg and FedEM without privacy, clipping alone, ε = 8, 4, 2, 1 (3.4 min)
#   clipping       adaptive against fixed clipping bounds, clipping alone and ε = 8, 4 (70 s)
#   clipping_poisson  the same under Poisson participation (PLD), ε = 4, 2
#   participation  K of N against Poisson participation at ε = 8, 4, 2 (48 s)
#   dp_sgd         FedAvg and FedEM with DP-SGD: none, clipping alone, σ = 0.7, 1, 2 (8.6 min)
#   accountants    RDP against PLD at ε = 4, 2; DP-FTRL at σ = 5, 10, 20 (Poisson q = 0.1) (72 s)
#   secure_aggregation  SecAgg and SecAgg+ at dropout 0, 10, 30 % (round time, bytes, failures)
#   distributed    distributed DP under SecAgg at dropout 0, 5, 10 %, against central noise
#   bash analysis/privacy_studies.sh [STUDY ...]     (all eight by default; 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${FEDSIM:-}" ] || bash scripts/setup.sh
fedsim=${FEDSIM:-target/release/fedsim}
"$fedsim" data fetch mnist >/dev/null
for study in "${@:-epsilon clipping clipping_poisson participation dp_sgd accountants secure_aggregation distributed}"; do
  for name in $study; do
    file=scenarios/studies/privacy_$name.yaml
    [ -f "$file" ] || file=scenarios/studies/$name.yaml
    out=results/$(basename "$file" .yaml)
    "$fedsim" sweep "$file" --jobs 2 --out "$out"
    "$fedsim" report "$out" | grep '^|' | tee "$out/table.md"
  done
done
