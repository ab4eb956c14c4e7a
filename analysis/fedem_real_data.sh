#!/usr/bin/env bash
# Recipe: FedEM paper Table 2's real-data rows with their models.
#   DATA=mnist         the EMNIST protocol on MNIST (10 % of the images, Dirichlet(0.4), 100
#                      clients, 60/20/20, their CNN): Local, FedAvg, FedAvg+, FedEM (M = 3)
#   DATA=fashion_mnist the same on Fashion-MNIST
#   DATA=femnist       FEMNIST, 15 % of the writers (539), 80/20, their CNN: Local, FedAvg, FedEM
#   DATA=shakespeare   Shakespeare by role, their LSTM, 80 rounds: FedAvg, FedEM
# 200 rounds (80 for Shakespeare), training seeds ${SEEDS:-1 2 3}; extra --set arguments pass
# through, e.g. a reduced CPU run:
#   ROUNDS=20 SEEDS=1 DATA=femnist bash analysis/fedem_real_data.sh --set data.partition.fraction=0.02
# Finished runs in results/fedem_<data>/<method>/seed-<n>/ are kept, so give runs with other
# --set arguments their own folder with OUT, e.g. the MNIST protocol with 30 % of the images:
#   OUT=results/fedem_mnist_f03 ROUNDS=100 SEEDS=1 DATA=mnist bash analysis/fedem_real_data.sh \
#     --set data.fraction=0.3 --set "training.lr_schedule={kind: constant}"
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
data=${DATA:-mnist}
case $data in
  mnist|fashion_mnist) scen=fedem_mnist; methods="local fedavg fedavg_plus fedem"
                       target/release/fedsim data fetch "$data" ;;
  femnist) scen=fedem_femnist; methods="local fedavg fedem" ;;
  shakespeare) scen=fedem_shakespeare; methods="fedavg fedem"
               target/release/fedsim data fetch shakespeare ;;
  *) echo "DATA must be mnist, fashion_mnist, femnist or shakespeare" >&2; exit 2 ;;
esac
out=${OUT:-results/fedem_$data${ROUNDS:+_r$ROUNDS}}
extra=()
case $data in mnist|fashion_mnist) extra+=(--set "data.kind=$data") ;; esac
[ -n "${ROUNDS:-}" ] && extra+=(--set "rounds=$ROUNDS" --set "eval_every=$ROUNDS")
for method in $methods; do
  for seed in ${SEEDS:-1 2 3}; do
    dir="$out/$method/seed-$seed"
    if [ -f "$dir/summary.csv" ]; then continue; fi   # finished runs are kept
    target/release/fedsim run "scenarios/paper/${scen}_$method.yaml" --seed "$seed" \
      "${extra[@]}" "$@" --out "$dir" --quiet >/dev/null
  done
done
target/release/fedsim report $(for m in $methods; do echo "$out/$m"; done) --out "$out/report" \
  | grep '^|' | tee "$out/table.md"
