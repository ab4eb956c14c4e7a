#!/usr/bin/env bash
# The peer benchmark's cross-device workload (`mlp`) over several seeds, fedsim against the
# PyTorch loop: whether their final accuracies differ by more than their seeds do. Each seed
# draws its own initial weights, clients and batches (fedsim: `--set seed=S`; the loop: SEED=S,
# for torch's seed, its client sampler and its batch generator). Prints each run's final
# accuracy, then each framework's mean ± sample std.
#
#   bash benches/peers/seeds.sh [--same-init] [FIRST LAST]   (seeds 1 to 12 by default; 2 cores:
#                                                            ~6 min)
#
# --same-init: fedsim starts from the loop's initial weights of the same seed (written by
# scripts/torch_weights.py, read through `model.init`), so that only the clients and batches
# drawn differ between the two.
#
# Run benches/peers/run.sh once first: it installs the peers (.venv-peers) and writes the data.
# FEDSIM (default target/release/fedsim) and PEERS (default .venv-peers/bin/python) choose the
# binary and the Python that runs the loop.
set -euo pipefail
cd "$(dirname "$0")/../.."
same_init=false
if [ "${1:-}" = --same-init ]; then same_init=true; shift; fi
first=${1:-1} last=${2:-12}
OUT=target/peers
PEERS=${PEERS:-.venv-peers/bin/python}
[ -f "$OUT/mnist_1000.parquet" ] || { echo "no $OUT/mnist_1000.parquet: run benches/peers/run.sh first" >&2; exit 2; }
export PYTHONPATH="$PWD/benches/peers"
runs=$OUT/seeds.txt
: >"$runs"
for seed in $(seq "$first" "$last"); do
  init=()
  if $same_init; then
    # The loop's first draw after torch.manual_seed(SEED) is its model (common.start, model).
    $PEERS scripts/torch_weights.py weights \
      "benches/peers/common.py:(torch.manual_seed($seed), Mlp())[1]" --input 1,28,28 \
      --out "$OUT/mlp_init_seed$seed.safetensors" >/dev/null
    init=(--set "model.init={from: $OUT/mlp_init_seed$seed.safetensors}")
  fi
  ${FEDSIM:-target/release/fedsim} run benches/peers/fedsim_mlp.yaml --set "seed=$seed" \
    "${init[@]}" --out "$OUT/fedsim_mlp_seed$seed" --threads 2 -q >/dev/null
  acc=$($PEERS -c 'import csv, sys; print(next(csv.DictReader(open(sys.argv[1])))["test_acc_mean"])' \
    "$OUT/fedsim_mlp_seed$seed/summary.csv")
  echo "fedsim $seed $acc" | tee -a "$runs"
  acc=$(SEED=$seed THREADS=2 $PEERS benches/peers/torch_loop.py mlp "$OUT/mnist_1000.parquet" |
    $PEERS -c 'import json, sys; print(json.loads(sys.stdin.readlines()[-1])["accuracy"])')
  echo "pytorch $seed $acc" | tee -a "$runs"
done
$PEERS - "$runs" <<'PY'
import statistics, sys
by = {}
for line in open(sys.argv[1]):
    framework, _, acc = line.split()
    by.setdefault(framework, []).append(100 * float(acc))
for framework, accs in by.items():
    spread = statistics.stdev(accs) if len(accs) > 1 else 0.0
    print(f"{framework}: {statistics.mean(accs):.2f} ± {spread:.2f} % over {len(accs)} seeds")
PY
