#!/usr/bin/env bash
# Recipe: FedGMM Table 2 (synthetic row) and Table 4 (novel-sample detection) analogues, and
# Table 3 (Beta, Laplace and their "partial" variants, 30 clients): FedGMM, FedEM and FedAvg,
# seeds from $SEEDS (default "1 2 3"). Results go to results/fedgmm_synthetic/<setting>/<method>/
# seed-<n>/, the tables to table.md there; finished runs are kept (rerun to resume).
#   SEEDS="1" SETTINGS="gaussian" bash analysis/fedgmm_synthetic.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
out=results/fedgmm_synthetic
run() { # setting method seed extra-overrides...
  local setting=$1 method=$2 seed=$3; shift 3
  local dir="$out/$setting/$method/seed-$seed"
  if [ -f "$dir/summary.csv" ]; then return; fi
  target/release/fedsim run "scenarios/paper/fedgmm_synthetic_$method.yaml" --seed "$seed" \
    --out "$dir" --quiet --set name="fedgmm_${setting}_$method" "$@" >/dev/null
}
# Table 3's settings: 30 clients; "partial": the first 20 clients Gaussian, the last 10 not.
small=(--set data.clients=30)
for setting in ${SETTINGS:-gaussian beta laplace beta_partial laplace_partial}; do
  case $setting in
    gaussian) extra=() ;;
    beta|laplace) extra=("${small[@]}" --set data.marginal=$setting) ;;
    *_partial) extra=("${small[@]}" --set data.marginal=${setting%_partial} --set data.gaussian_clients=20) ;;
  esac
  for method in fedgmm fedem fedavg; do
    for seed in ${SEEDS:-1 2 3}; do
      run "$setting" "$method" "$seed" ${extra[@]+"${extra[@]}"}
    done
  done
  target/release/fedsim report "$out/$setting" | grep '^|' | tee "$out/$setting/table.md"
  # The ceilings, per seed (each seed draws its own data): the Bayes-optimal classifier (true
  # components, labelling functions and π) and novel-sample detection by the true densities.
  for seed in ${SEEDS:-1 2 3}; do
    echo "seed $seed:" | tee -a "$out/$setting/table.md"
    target/release/fedsim describe scenarios/paper/fedgmm_synthetic_fedgmm.yaml --seed "$seed" \
      ${extra[@]+"${extra[@]}"} | grep -E "Bayes-optimal|true densities" | tee -a "$out/$setting/table.md"
  done
done
