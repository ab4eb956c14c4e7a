#!/usr/bin/env bash
# The peer benchmark's cross-device workload (`mlp`) over several seeds, fedsim against the
# PyTorch loop: whether their final accuracies differ by more than their seeds do. Each seed
# draws its own initial weights, clients and batches (fedsim: `--set seed=S`; the loop: SEED=S,
# for torch's seed, its client sampler and its batch generator). Prints each run's final
# accuracy, then each framework's mean ± sample std.
#
#   bash benches/peers/seeds.sh [FIRST LAST]      (seeds 1 to 12 by default; 2 cores: ~6 min)
#
# Run benches/peers/run.sh once first: it installs the peers (.venv-peers) and writes the data.
# FEDSIM (default target/release/fedsim) and PEERS (default .venv-peers/bin/python) choose the
# binary and the Python that runs the loop.
set -euo pipefail
cd "$(dirname "$0")/../.."
first=${1:-1} last=${2:-12}
OUT=target/peers
PEERS=${PEERS:-.venv-peers/bin/python}
[ -f "$OUT/mnist_1000.parquet" ] || { echo "no $OUT/mnist_1000.parquet: run benches/peers/run.sh first" >&2; exit 2; }
export PYTHONPATH="$PWD/benches/peers"
runs=$OUT/seeds.txt
: >"$runs"
for seed in $(seq "$first" "$last"); do
  ${FEDSIM:-target/release/fedsim} run benches/peers/fedsim_mlp.yaml --set "seed=$seed" \
    --out "$OUT/fedsim_mlp_seed$seed" --threads 2 -q >/dev/null
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
    print(f"{framework}: {statistics.mean(accs):.2f} ± {statistics.stdev(accs):.2f} % over {len(accs)} seeds")
PY
