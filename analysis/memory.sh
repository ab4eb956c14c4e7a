#!/usr/bin/env bash
# Recipe: peak memory of the deep real-data runs, with and without the spill file
# (`training.spill`), and a check that both give the same result files.
#   ROUNDS (default 5)   rounds of each run (evaluated at the last)
#   RUNS (default "fedem_mnist_fedavg fedem_mnist_fedem")   scenarios/paper/<name>.yaml to run;
#                        add fedem_femnist_fedem for FEMNIST's full FedEM (539 writers, M = 3;
#                        about 4 minutes a round on 2 cores, so ROUNDS=2 is the measurement)
#   SPILLS (default "large auto off")   the `training.spill` settings to compare
# Peak RSS comes from GNU time (`/usr/bin/time -f %M`); one line per run goes to
# $OUT/memory.csv (scenario, spill, rounds, seconds, peak_kb), and the script fails if two
# settings of one scenario give different result files.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
out=${OUT:-results/memory}
rounds=${ROUNDS:-5}
mkdir -p "$out"
[ -f "$out/memory.csv" ] || echo "scenario,spill,rounds,seconds,peak_kb" > "$out/memory.csv"
for run in ${RUNS:-fedem_mnist_fedavg fedem_mnist_fedem}; do
  case $run in fedem_mnist_*) target/release/fedsim data fetch mnist ;; esac
  first=
  for spill in ${SPILLS:-large auto off}; do
    dir=$out/$run/spill-$spill
    rm -rf "$dir"
    /usr/bin/time -o "$out/time.txt" -f "%e %M" target/release/fedsim run \
      "scenarios/paper/$run.yaml" --quiet --out "$dir" \
      --set "rounds=$rounds" --set "eval_every=$rounds" --set "training.spill=$spill"
    read -r seconds peak < "$out/time.txt"
    echo "$run,$spill,$rounds,$seconds,$peak" | tee -a "$out/memory.csv"
    if [ -z "$first" ]; then
      first=$dir
    else
      for f in "$first"/*.parquet "$first"/*.csv "$first"/scenario.yaml; do
        name=$(basename "$f")
        [ "$name" = summary.csv ] && continue  # its wall_seconds differ
        cmp -s "$f" "$dir/$name" || { echo "$run: $name differs between spill settings" >&2; exit 1; }
      done
    fi
  done
done
