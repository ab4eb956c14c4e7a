#!/usr/bin/env bash
# Recipe: one small CNN three ways on MNIST FedAvg (scenarios/studies/custom_model.yaml's
# setting: 10 % of MNIST, Dirichlet(0.4) over 20 clients, 10 rounds), seeds 1-3:
#   preset      {kind: small_cnn, dropout: 0}
#   layer list  the same layers written out (`model: {kind: layers, ...}`)
#   TorchScript the PyTorch class SmallCNN (scripts/torch_weights.py) traced in eval mode
#               (`model: {kind: torchscript, ...}`), trained per client
#   list_from_module  the layer list started from the module's weights (`model.init`)
# Dropout is off in all: a traced module runs in eval mode. The preset and the list draw their
# initial weights from each seed's stream; the module starts from the weights PyTorch gave it
# (torch.manual_seed(seed)), and so does the fourth row, which isolates the code path. Prints one row per model and seed: test accuracy, wall
# seconds of the run, seconds per round; results in results/custom_model_three_ways/.
#   bash analysis/custom_model_three_ways.sh      (about 10 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
[ -x .venv-bench/bin/python ] || bash benches/pytorch_cnn.sh >/dev/null
out=results/custom_model_three_ways
mkdir -p "$out"
list='{kind: layers, layers: [{kind: conv, channels: 32, kernel: 3}, relu, {kind: conv, channels: 64, kernel: 3}, relu, max_pool, flatten, {kind: dense, units: 128}, relu, dense]}'
echo "model,seed,test_accuracy,wall_seconds,seconds_per_round"
for seed in 1 2 3; do
  section=$(.venv-bench/bin/python - "$seed" "$out/small_cnn_$seed.pt" <<'PY'
import sys
seed, path = sys.argv[1], sys.argv[2]
sys.path.insert(0, "scripts")
import torch
from safetensors.torch import save_file
from torch_weights import SmallCNN, fedsim_tensors, flops_per_row, traced
torch.manual_seed(int(seed))
module = SmallCNN(10)
traced(module, (1, 28, 28)).save(path)
save_file(fedsim_tensors(module), path.replace(".pt", ".safetensors"))
print(f"{{kind: torchscript, path: {path}, flops: {flops_per_row(module, (1, 28, 28))}}}")
PY
)
  for model in preset list torchscript list_from_module; do
    case $model in
      preset) m='{kind: small_cnn, dropout: 0}' ;;
      list) m=$list ;;
      torchscript) m=$section ;;
      list_from_module) m="${list%\}}, init: {from: $out/small_cnn_$seed.safetensors}}" ;;
    esac
    dir=$out/$model-$seed
    target/release/fedsim run scenarios/studies/custom_model.yaml -q --force --set "seed=$seed" \
      --set "model=$m" --out "$dir"
    python3 - "$model" "$seed" "$dir/summary.csv" <<'PY'
import csv, sys
model, seed, path = sys.argv[1:]
row = next(csv.DictReader(open(path)))
wall = float(row["wall_seconds"])
print(f"{model},{seed},{100 * float(row['test_acc_mean']):.2f},{wall:.1f},{wall / int(row['final_round']):.2f}")
PY
  done
done
