#!/usr/bin/env bash
# FedEM against the authors' update rule from the same weights and rows (issue 38, part 2; see
# docs/src/validation/fedem.md, "Round by round against the authors' update"):
#   bash analysis/fedem_authors_update.sh            # WRITERS=10 ROUNDS=3 SEED=1 LR=0.1
# Makes a Parquet file of the first WRITERS FEMNIST writers (80/20 train/test by row order),
# the authors' initial FemnistCNN components (torch.manual_seed(SEED + m), m = 0, 1, 2), runs
# fedsim for 1 … ROUNDS rounds from them (--save-models; batch 512, more than any writer's
# 467 training rows, so one full batch per epoch), re-runs their update in PyTorch
# (analysis/fedem_authors_update.py) and compares the global components after each round.
# Needs .venv-bench (torch 2.13 and safetensors; made here once, about 4.7 GB).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-results/fedem_authors_update}
WRITERS=${WRITERS:-10}
ROUNDS=${ROUNDS:-3}
SEED=${SEED:-1}
LR=${LR:-0.1}
bash scripts/setup.sh >/dev/null
if ! .venv-bench/bin/python -c 'import torch, safetensors, pyarrow' 2>/dev/null; then
  python3 -m venv .venv-bench
  .venv-bench/bin/pip install -q --disable-pip-version-check torch==2.13.0 numpy safetensors pyarrow
fi
py=.venv-bench/bin/python
mkdir -p "$OUT"
$py analysis/fedem_authors_update.py data "$OUT/data.parquet" --writers "$WRITERS"
$py scripts/torch_weights.py femnist-cnn --seed "$SEED" --components 3 --classes 62 \
  --out "$OUT/init.safetensors"
cat >"$OUT/scenario.yaml" <<YAML
name: fedem_authors_update
seed: $SEED
rounds: $ROUNDS
eval_every: $ROUNDS
data:
  kind: parquet
  path: $OUT/data.parquet
  split_column: split
  label_column: y
  features_column: x
  shape: [1, 28, 28]
  scale: 255
  classes: 62
model: {kind: cnn, init: {from: $OUT/init.safetensors}}
training: {local_epochs: 1, batch_size: 512, lr: $LR, momentum: 0.9, weight_decay: 5.0e-4, keep_momentum: true}
sampling: {fraction: 1.0}
algorithm: {name: fedem, components: 3}
YAML
runs=()
for r in $(seq 1 "$ROUNDS"); do
  target/release/fedsim run "$OUT/scenario.yaml" --set "rounds=$r" --set "eval_every=$r" \
    --save-models -q --out "$OUT/fedsim/rounds-$r" >/dev/null
  runs+=("$OUT/fedsim/rounds-$r")
done
$py analysis/fedem_authors_update.py update "$OUT/data.parquet" "$OUT/init.safetensors" \
  "$ROUNDS" "$OUT/reference" --lr "$LR"
$py analysis/fedem_authors_update.py compare "$OUT/reference" "${runs[@]}" | tee "$OUT/comparison.txt"
