# Sourced by the FedGMM recipes: the learning-rate schedule of the FedGMM (and FedEM) authors'
# runs, `--lr_scheduler multi_step`, for a run of K rounds: the rate is multiplied by 0.1 after
# rounds K//2 and 3·(K//4) (their utils/optim.py), so a shortened run decays where theirs would.
#   authors_schedule K multi_step   prints {kind: multi_step, milestones: [K//2, 3·(K//4)], gamma: 0.1}
#   authors_schedule K constant     prints {kind: constant} (one rate throughout)
# A milestone that is 0 or not after the one before is left out (K < 4).
authors_schedule() {
  local rounds=$1 schedule=$2 milestones=""
  case $schedule in
    multi_step)
      [ $((rounds / 2)) -eq 0 ] || milestones=$((rounds / 2))
      [ $((3 * (rounds / 4))) -le $((rounds / 2)) ] || milestones+=", $((3 * (rounds / 4)))"
      echo "{kind: multi_step, milestones: [$milestones], gamma: 0.1}" ;;
    constant) echo "{kind: constant}" ;;
    *) echo "SCHEDULE must be multi_step or constant, got '$schedule'" >&2; return 2 ;;
  esac
}
