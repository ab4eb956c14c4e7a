#!/usr/bin/env bash
# Recipe: FedEM Fig. 1 (left) on the FedEM synthetic benchmark: FedEM, FedAvg+ and FedAvg at
# sampling rates 0.05-1.0 (the same budget of client updates at every rate), seeds 1-3.
# Runs the sweep (resumable: finished cells are kept), then `fedsim report`, and copies the
# accuracy-vs-rate figure to analysis/figures/ (the picture in docs/src/guide/sweeps-and-reports.md).
#   bash analysis/sampling_rate.sh          (about 15 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
out=results/sampling_rate
target/release/fedsim sweep scenarios/studies/sampling_rate.yaml --jobs 2 --out "$out"
target/release/fedsim report "$out"
mkdir -p analysis/figures
cp "$out/report/accuracy_vs_sampling_fraction.png" analysis/figures/sampling_rate.png
cp "$out/report/accuracy_vs_sampling_fraction.svg" analysis/figures/sampling_rate.svg
