#!/usr/bin/env bash
# Recipe: the communication and robustness studies of issue 40 on MNIST over 1 000 clients
# (scenarios/studies/<study>.yaml, seeds 1-3), each a resumable sweep into results/<study>/
# tabled by `fedsim report` (in table.md there; plots in report/):
#   compression  FedAvg uncompressed and with top-k, random-k, QSGD, scaled sign and 8-bit
#                quantization on a slow uplink, 300 rounds: accuracy, time to 85 %, MB up, and
#                accuracy against simulated time (3.3 min on 2 cores)
#   byzantine    20 % malicious clients: no attack, sign flipping, label flipping, Gaussian,
#                ALIE, IPM × the mean, median, trimmed mean, Krum, Multi-Krum, Bulyan,
#                geometric median, centered clipping, norm bounding (6.4 min)
#   backdoor     a boosted or plain backdoor from 1 %, 5 % or 20 % of the clients × the mean,
#                norm bounding, median, trimmed mean, Krum: accuracy and backdoor success
#                (2.0 min)
#   alie_mlp     ALIE against the mean, median, trimmed mean and Krum in a setting like
#                Baruch et al.'s: an MLP, 50 workers, one SGD step a round (12 min)
#   client_selection  uniform draws, power-of-choice and Oort on FedScale-format device and
#                availability traces: time to 85 % (traces written into
#                results/fedscale_traces/ first; 0.5 min)
#   downlink     the uplink alone or both links compressed on a link slow both ways, K = 100
#                of 1 000 clients or all of 100: time to 85 % and MB down (6.5 min)
#   bash analysis/communication_studies.sh [STUDY ...]     (all six by default)
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${FEDSIM:-}" ] || bash scripts/setup.sh
fedsim=${FEDSIM:-target/release/fedsim}
"$fedsim" data fetch mnist >/dev/null
python3 scripts/dev/fedscale_large.py results/fedscale_traces 1000
for study in ${@:-compression byzantine backdoor alie_mlp client_selection downlink}; do
  out=results/$study
  "$fedsim" sweep "scenarios/studies/$study.yaml" --jobs 2 --out "$out"
  "$fedsim" report "$out" | grep '^|' | tee "$out/table.md"
  if [ "$study" = client_selection ]; then
    cp "$out/report/convergence_accuracy_time.png" analysis/figures/client_selection_time.png
  fi
done
