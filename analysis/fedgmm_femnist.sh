#!/usr/bin/env bash
# Recipe: FedGMM Table 2's FEMNIST row (Wu et al. 2023) — FedGMM, FedEM and FedAvg on LEAF's
# writers with the joint-distribution shift (scenarios/paper/fedgmm_femnist_*.yaml), seeds from
# $SEEDS (default "1 2 3"). The defaults are the reduced version for 2 cores that the validation
# page reports: $FRACTION of the writers (default 0.014, 50 writers), $ROUNDS rounds (default
# 30), every method at lr $LR (default 0.1) with batch $BATCH (default 32). The paper's setting
# is a GPU job:
#   FRACTION=0.15 ROUNDS=200 LR= BATCH=128 bash analysis/fedgmm_femnist.sh   (add FEDSIM_ARGS="--device cuda")
# (an empty LR keeps each scenario's own rate). $LRS sets rates per method, over LR:
# LRS="fedavg=0.0316 fedem=0.1 fedgmm=0.1". Every rate is multiplied by 0.1 after rounds K/2 and
# 3K/4 of the K rounds run, as in the authors' runs (analysis/authors_schedule.sh);
# SCHEDULE=constant keeps one rate throughout. The test accuracy is measured
# every $EVAL_EVERY rounds (default: once, at the end). Results go to
# results/fedgmm_femnist/$NAME/<method>/seed-<n>/ ($NAME: default f<fraction>-r<rounds>-<schedule>),
# the table to table.md there; finished runs are kept (rerun to resume). Reads
# ../shared/data/femnist (or --set data.path=…). libtorch's CPU kernels follow the processor's
# instruction sets, so the validation page's rows are held to AVX2 (each run's machine.yaml says
# so): prefix ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${FEDSIM:-}" ] || bash scripts/setup.sh
fedsim=${FEDSIM:-target/release/fedsim}
fraction=${FRACTION:-0.014}
rounds=${ROUNDS:-30}
lr=${LR-0.1}
batch=${BATCH:-32}
eval_every=${EVAL_EVERY:-$rounds}
schedule=${SCHEDULE:-multi_step}
source analysis/authors_schedule.sh
schedule_yaml=$(authors_schedule "$rounds" "$schedule")
out=results/fedgmm_femnist/${NAME:-f$fraction-r$rounds-$schedule}
for seed in ${SEEDS:-1 2 3}; do
  for method in ${METHODS:-fedavg fedem fedgmm}; do
    dir="$out/$method/seed-$seed"
    [ -f "$dir/summary.csv" ] && continue
    settings=(--set data.partition.fraction="$fraction" --set rounds="$rounds"
      --set eval_every="$eval_every" --set training.batch_size="$batch"
      --set training.lr_schedule="$schedule_yaml")
    method_lr=$lr
    for pair in ${LRS:-}; do
      [ "${pair%%=*}" != "$method" ] || method_lr=${pair#*=}
    done
    [ -z "$method_lr" ] || settings+=(--set training.lr="$method_lr")
    # shellcheck disable=SC2086 # FEDSIM_ARGS is a list of words
    "$fedsim" run "scenarios/paper/fedgmm_femnist_$method.yaml" --seed "$seed" "${settings[@]}" \
      ${FEDSIM_ARGS:-} --out "$dir" --quiet >/dev/null
  done
done
"$fedsim" report "$out" | grep '^|' | tee "$out/table.md"
