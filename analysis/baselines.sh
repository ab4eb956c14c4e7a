#!/usr/bin/env bash
# Recipe: the comparison table of every registered algorithm (the book's "Algorithms" page).
#
# Every algorithm `fedsim algorithms --examples` lists (a new one joins by registering) runs
# each setting of scenarios/baselines/ with its registered example settings, seeds 1-3, as a
# resumable sweep into OUT/<setting>/. The algorithms on peers run over a ring (Metropolis-
# Hastings weights), every peer each round. A cell `fedsim check` refuses (a layer split the model cannot make) is not
# run: OUT/<setting>.md names it with the reason. OUT/<setting>.md is `fedsim report`'s table
# (mean ± std over seeds of the accuracy, bottom decile, rounds to the setting's
# `target_accuracy`, wall seconds); OUT/<setting>/report/ holds its CSV and figures.
#
#   bash analysis/baselines.sh [--tiny] [--table-only] [--out OUT] [SETTING ...]
#
# SETTING: a file name of scenarios/baselines/ without .yaml (all of them by default).
# OUT: results/algorithms by default. --tiny: seed 1, 2 rounds, evaluated at each, for CI; its
# default setting is synthetic_1_1. --table-only: table the cells finished so far, without
# running the others (the table's `seeds` column says how many each row has). On 2 cores the
# full table takes hours; the sweeps resume where a killed run left them.
set -euo pipefail
cd "$(dirname "$0")/.."
tiny=false
table_only=false
out=results/algorithms
settings=()
while [ $# -gt 0 ]; do
  case "$1" in
    --tiny) tiny=true ;;
    --table-only) table_only=true ;;
    --out) out=$2; shift ;;
    -*) echo "baselines.sh: unknown option $1 (allowed: --tiny, --table-only, --out OUT)" >&2; exit 2 ;;
    *) settings+=("$1") ;;
  esac
  shift
done
[ -n "${FEDSIM:-}" ] || bash scripts/setup.sh
fedsim=${FEDSIM:-target/release/fedsim}
if [ ${#settings[@]} -eq 0 ]; then
  if $tiny; then
    settings=(synthetic_1_1)
  else
    for f in scenarios/baselines/*.yaml; do settings+=("$(basename "$f" .yaml)"); done
  fi
fi
for setting in "${settings[@]}"; do
  [ -f "scenarios/baselines/$setting.yaml" ] || {
    echo "baselines.sh: no setting $setting (scenarios/baselines/$setting.yaml); known:" \
      "$(cd scenarios/baselines && ls *.yaml | sed 's/\.yaml$//' | tr '\n' ' ')" >&2
    exit 2
  }
done
# The registry data sets the settings read, fetched once.
for setting in "${settings[@]}"; do
  kind=$(sed -n 's/^data: {kind: \([a-z_]*\).*/\1/p' "scenarios/baselines/$setting.yaml")
  case "$kind" in
    mnist | fashion_mnist) "$fedsim" data fetch "$kind" >/dev/null ;;
  esac
done
mkdir -p "$out"
ring='{graph: {kind: ring}, mixing: {rule: metropolis_hastings}}'
if $tiny; then
  fixed='set: {rounds: 2, eval_every: 1}'
  seeds='[1]'
else
  fixed='set: {}'
  seeds='[1, 2, 3]'
fi
for setting in "${settings[@]}"; do
  base=$PWD/scenarios/baselines/$setting.yaml
  target=$(sed -n 's/^target_accuracy: *//p' "$base")
  sampled=$(sed -n 's/^sampling: *//p' "$base")
  algorithms=() topologies=() samplings=() refused=()
  while IFS=$'\t' read -r name on section _; do
    # Peers all train each round, over the ring.
    topology=null sampling=$sampled
    [ "$on" = peers ] && topology=$ring sampling='{}'
    if why=$("$fedsim" check "$base" --set "algorithm=$section" --set "topology=$topology" \
      --set "sampling=$sampling" 2>&1 >/dev/null); then
      algorithms+=("$section")
      topologies+=("$topology")
      samplings+=("$sampling")
    else
      # The reason, without the file and line it names.
      why=$(echo "$why" | tail -n 1 | sed -E 's/^error: [^ ]+\.yaml(:[0-9]+)?: //; s/\|/\\|/g')
      refused+=("| $name | $why |")
    fi
  done < <("$fedsim" algorithms --examples --trains-models)
  # An algorithm that trains no model (`noop`) has no metrics to table.
  trained=$("$fedsim" algorithms --examples --trains-models | cut -f1)
  while IFS=$'\t' read -r name _; do
    grep -qx "$name" <<<"$trained" ||
      refused+=("| $name | trains and evaluates no model (it records the system alone) |")
  done < <("$fedsim" algorithms --examples)
  sweep=$out/$setting.sweep.yaml
  {
    echo "# Written by analysis/baselines.sh: every registered algorithm on $setting."
    echo "name: baselines_$setting"
    echo "base: $base"
    echo "$fixed"
    echo "zip:"
    echo "  algorithm:"
    printf '    - %s\n' "${algorithms[@]}"
    echo "  topology:"
    printf '    - %s\n' "${topologies[@]}"
    echo "  sampling:"
    printf '    - %s\n' "${samplings[@]}"
    echo "seeds: $seeds"
  } >"$sweep"
  $table_only || "$fedsim" sweep "$sweep" --jobs 2 --out "$out/$setting"
  args=(--wall-time --skip-unreadable --out "$out/$setting/report")
  [ -n "$target" ] && args+=(--target-accuracy "$target")
  "$fedsim" report "$out/$setting" "${args[@]}" >"$out/$setting.report.txt" \
    2>"$out/$setting.report.err"
  {
    echo "### $setting"
    echo
    # The report's table (all of it in OUT/<setting>/report/report.md), cut to these columns.
    grep '^|' "$out/$setting.report.txt" | awk -F' [|] ' -v OFS=' | ' '
      NR == 2 { line = "|"; for (k = 1; k <= n; k++) if (want[k] in at) line = line "---|"; print line; next }
      NR == 1 {
        n = split("algorithm|model|seeds|accuracy|bottom decile|rounds to target|MB up|wall s", want, "|")
        for (i = 1; i <= NF; i++) { name = $i; sub(/^[|] /, "", name); sub(/ [|]$/, "", name); at[name] = i }
      }
      {
        line = ""
        for (k = 1; k <= n; k++) {
          if (!(want[k] in at)) continue
          cell = $(at[want[k]]); sub(/^[|] /, "", cell); sub(/ [|]$/, "", cell)
          line = line (line == "" ? "| " : " | ") cell
        }
        print line " |"
      }'

    if [ ${#refused[@]} -gt 0 ]; then
      echo
      echo "Not run (\`fedsim check\` refuses them on this setting, or they train no model):"
      echo
      echo "| algorithm | why |"
      echo "|---|---|"
      printf '%s\n' "${refused[@]}"
    fi
    if grep -q '^left out: ' "$out/$setting.report.err"; then
      echo
      echo "Not tabled (\`fedsim report\` could not read them):"
      echo
      sed -n 's/^left out: .*\/cell=\([0-9a-f]*\): reading [^:]*: /\1 /p' "$out/$setting.report.err" |
        while read -r cell why; do
          echo "- $(grep "^$cell," "$out/$setting/cells.csv" | cut -d, -f3- | sed 's/,null,.*//'): $why"
        done | sort -u
    fi
  } | tee "$out/$setting.md"
done
