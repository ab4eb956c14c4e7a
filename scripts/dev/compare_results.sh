#!/usr/bin/env bash
# Runs the same scenarios with two fedsim binaries and compares every reproducible result file
# byte for byte (summary.csv too, less its wall_seconds column). A refactor must leave them
# identical.
#
#   bash scripts/dev/compare_results.sh OLD_BIN NEW_BIN [OUT_DIR]
#
# The scenarios: the quickstart, every scenarios/paper/*.yaml and scenarios/studies/*.yaml
# scenario (sweeps are skipped), with rounds cut to FEDSIM_COMPARE_ROUNDS (default 5) and real
# data cut to 5 % so the set runs in minutes on 2 cores; FEMNIST and the registry data sets run
# only where their data is present. Extra `--set` arguments for every run: FEDSIM_COMPARE_SET
# (space-separated); only the scenarios whose path matches FEDSIM_COMPARE_MATCH (a regex).
# Summary columns only the new binary writes: FEDSIM_COMPARE_NEW_COLUMNS (left out of its side).
# With FEDSIM_COMPARE_VARIANTS=1, the variants below run instead: the quickstart under FedBuff,
# with rows on demand, with Markov availability and `available_only`, with a deadline and late
# updates, and FedGMM with a projection file (4 and 3 rounds).
set -euo pipefail
old=$(realpath "$1")
new=$(realpath "$2")
out=${3:-/tmp/fedsim-compare}
rounds=${FEDSIM_COMPARE_ROUNDS:-5}
cd "$(dirname "$0")/../.."
rm -rf "$out"
mkdir -p "$out"
extra=()
for s in ${FEDSIM_COMPARE_SET:-}; do extra+=(--set "$s"); done
same=0
differ=0
skipped=0

# summary.csv without its wall_seconds column and the columns named after the file (those a
# new binary adds: FEDSIM_COMPARE_NEW_COLUMNS, space-separated, e.g. "noise_multiplier epsilon").
strip() { python3 -c '
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
names = ["wall_seconds"] + sys.argv[2:]
drop = {rows[0].index(n) for n in names if rows and n in rows[0]}
for r in rows:
    print(",".join(v for i, v in enumerate(r) if i not in drop))' "$@"; }

# compare NAME ARGS...: `fedsim ARGS` with both binaries into $out/NAME/{old,new}.
compare() {
  local name=$1
  shift
  if ! "$old" "$@" --out "$out/$name/old" >"$out/$name.old.log" 2>&1; then
    if grep -qE 'not in the cache|No such file|cannot open' "$out/$name.old.log"; then
      echo "skipped  $name (its data is not here)"
      skipped=$((skipped + 1))
      return
    fi
  fi
  "$new" "$@" --out "$out/$name/new" >"$out/$name.new.log" 2>&1 || true
  local bad=()
  # Both runs failing alike is no comparison.
  [ -e "$out/$name/new/summary.csv" ] || bad+=("no results (see $out/$name.new.log)")
  for file in scenario.yaml metrics.parquet metrics.csv rounds.parquet jobs.parquet \
    clients.parquet clients.csv gossip.parquet mixtures.parquet extras.parquet novelty.parquet; do
    local a="$out/$name/old/$file" b="$out/$name/new/$file"
    if [ -e "$a" ] || [ -e "$b" ]; then
      cmp -s "$a" "$b" || bad+=("$file")
    fi
  done
  if [ -e "$out/$name/old/summary.csv" ] || [ -e "$out/$name/new/summary.csv" ]; then
    if ! diff -q <(strip "$out/$name/old/summary.csv" 2>/dev/null) \
      <(strip "$out/$name/new/summary.csv" ${FEDSIM_COMPARE_NEW_COLUMNS:-} 2>/dev/null) >/dev/null; then
      bad+=(summary.csv)
    fi
  fi
  if [ ${#bad[@]} -eq 0 ]; then
    echo "same     $name"
    same=$((same + 1))
  else
    echo "DIFFER   $name: ${bad[*]}"
    differ=$((differ + 1))
  fi
}

if [ "${FEDSIM_COMPARE_VARIANTS:-0}" = 1 ]; then
  q=(run scenarios/quickstart.yaml -q --threads 2 --set rounds=4 "${extra[@]}")
  compare fedbuff "${q[@]}" --set 'policy={kind: fedbuff, concurrency: 10, buffer_size: 5}' \
    --set 'sampling={}'
  compare on_demand "${q[@]}" --set data.on_demand=true
  compare markov "${q[@]}" --set sampling.available_only=true \
    --set 'system.availability={kind: markov, mean_online_s: 60, mean_offline_s: 30}'
  compare deadline "${q[@]}" \
    --set 'policy={kind: synchronous, deadline_s: 20, late_updates: next_round}'
  # A projection of FedGMM's 32 features onto 2: the sums of the first and the last 16.
  python3 -c "print('\n'.join('1,0' if i < 16 else '0,1' for i in range(32)))" \
    >"$out/projection.csv"
  compare fedgmm_projection run scenarios/paper/fedgmm_synthetic_fedgmm.yaml -q --threads 2 \
    --set rounds=3 --set eval_every=3 --set "algorithm.projection=$out/projection.csv" \
    "${extra[@]}"
else
  for f in scenarios/quickstart.yaml scenarios/paper/*.yaml scenarios/studies/*.yaml; do
    grep -q '^base:' "$f" && continue
    [[ "$f" =~ ${FEDSIM_COMPARE_MATCH:-.} ]] || continue
    name=$(basename "$f" .yaml)
    # A scenario that states `evaluation.every` takes the evaluation period there.
    every=eval_every
    grep -qE '^evaluation:.*every:' "$f" && every=evaluation.every
    args=(run "$f" -q --threads 2 --set "rounds=$rounds" --set "$every=$rounds" "${extra[@]}")
    # Real data sets cut to a few minutes: 5 % of FEMNIST's writers, 5 % of the image sets.
    # (A FEMNIST scenario that pools the writers, `partition: {kind: iid}`, keeps 0.5 % of
    # FEMNIST's images instead.)
    if grep -q 'kind: femnist' "$f"; then
      if grep -q 'partition: {kind: iid' "$f"; then
        args+=(--set data.fraction=0.005)
      else
        args+=(--set data.partition.fraction=0.05)
      fi
    fi
    if grep -qE 'kind: (mnist|fashion_mnist)' "$f"; then
      args+=(--set data.fraction=0.05)
      # ... and a partition over more than 100 clients to a twentieth of them, so each keeps rows.
      clients=$(grep -oE 'clients: [0-9]+' "$f" | head -1 | grep -oE '[0-9]+' || true)
      [ "${clients:-0}" -le 100 ] || args+=(--set "data.partition.clients=$((clients / 20))")
    fi
    grep -q 'kind: shakespeare' "$f" && args+=(--set data.fraction=0.02 --set data.max_samples=50)
    compare "$name" "${args[@]}"
  done
fi
echo "$same identical, $differ differ, $skipped skipped (results in $out)"
[ "$differ" -eq 0 ]
