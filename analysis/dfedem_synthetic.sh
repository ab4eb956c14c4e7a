#!/usr/bin/env bash
# Recipe: FedEM Table 6, synthetic row: D-FedEM on G(300, 0.5) with FMMC weights next to FedEM
# and FedAvg in the same setting, seeds 1-3, then a markdown table of mean ± std.
# Results go to results/table2_synthetic/<method>/seed-<n>/ (shared with table2_synthetic.sh,
# whose finished FedEM and FedAvg runs are reused).
#   bash analysis/dfedem_synthetic.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
out=results/table2_synthetic
run() {  # scenario file, method folder
  for seed in 1 2 3; do
    dir="$out/$2/seed-$seed"
    if [ -f "$dir/summary.csv" ]; then continue; fi   # finished runs are kept
    target/release/fedsim run "$1" --seed "$seed" --out "$dir" --quiet >/dev/null
  done
}
run scenarios/paper/dfedem_synthetic.yaml d_fedem
run scenarios/paper/fedem_synthetic_fedem.yaml fedem
run scenarios/paper/fedem_synthetic_fedavg.yaml fedavg
mkdir -p results/dfedem_synthetic
target/release/fedsim report "$out/d_fedem" "$out/fedem" "$out/fedavg" --out results/dfedem_synthetic \
  | grep '^|' | tee results/dfedem_synthetic/table.md
