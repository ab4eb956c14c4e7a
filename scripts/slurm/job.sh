#!/usr/bin/env bash
# A fedsim sweep as a Slurm job array: copy this file, adjust the #SBATCH lines to your
# cluster (partition, time limit, account), and run it from the folder the scenario paths are
# relative to:
#
#   bash job.sh SWEEP.yaml [OUT]
#
# Run outside a job, it submits itself: an array of one task per cell (`fedsim sweep --list
# --count`; at most MAX_TASKS tasks, each then runs its shard of the cells), each task with
# CPUS_PER_TASK cores and requeued when preempted, and a report job that runs `fedsim report
# OUT` once every task has ended well. Inside the array, a task runs its shard
# (`fedsim sweep --shard auto`: the shard from SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT).
# A requeued task skips the cells it finished and resumes the cell it was cut short in from
# that cell's last checkpoint (every CHECKPOINT_EVERY), with the files an uninterrupted run
# writes.
#
# Settings (environment): FEDSIM, the fedsim binary [default: fedsim on PATH];
# CPUS_PER_TASK [1]; MAX_TASKS [the number of cells]; CHECKPOINT_EVERY [5m: a number of
# rounds, a wall-clock time such as 90s or 5m, or off]; SBATCH_ARGS, more sbatch options for
# every job (e.g. "--partition=cpu --time=02:00:00"). Each job's log is
# slurm-logs/<job>_<task>.out.
#SBATCH --job-name=fedsim-sweep
#SBATCH --requeue
#SBATCH --open-mode=append
set -euo pipefail
fedsim=${FEDSIM:-fedsim}
sweep=${1:?usage: bash job.sh SWEEP.yaml [OUT]}
out=${2:-results/$(basename "$sweep" .yaml)}

if [ -n "${FEDSIM_SLURM_REPORT:-}" ]; then
  # The report job.
  exec "$fedsim" report "$out"
fi
if [ -n "${SLURM_ARRAY_TASK_ID:-}" ]; then
  # One task of the array: its shard, one cell at a time on its cores.
  exec "$fedsim" sweep "$sweep" --out "$out" --shard auto --jobs 1 --quiet \
    --checkpoint-every "${CHECKPOINT_EVERY:-5m}"
fi

cells=$("$fedsim" sweep "$sweep" --list --count)
tasks=$cells
if [ -n "${MAX_TASKS:-}" ] && [ "$MAX_TASKS" -lt "$tasks" ]; then
  tasks=$MAX_TASKS
fi
if [ "$tasks" -lt 1 ]; then
  echo "job.sh: $sweep has no cells" >&2
  exit 2
fi
mkdir -p slurm-logs
# shellcheck disable=SC2086 # SBATCH_ARGS is a list of options
array=$(sbatch --parsable ${SBATCH_ARGS:-} --array="0-$((tasks - 1))" \
  --cpus-per-task="${CPUS_PER_TASK:-1}" --output="slurm-logs/%A_%a.out" \
  --export=ALL,FEDSIM="$fedsim" "$0" "$sweep" "$out")
# shellcheck disable=SC2086
report=$(sbatch --parsable ${SBATCH_ARGS:-} --dependency="afterok:${array%%;*}" \
  --job-name=fedsim-report --output="slurm-logs/%j.out" \
  --export=ALL,FEDSIM="$fedsim",FEDSIM_SLURM_REPORT=1 "$0" "$sweep" "$out")
echo "job.sh: $cells cells in $tasks tasks: array job ${array%%;*}, report job ${report%%;*}"
