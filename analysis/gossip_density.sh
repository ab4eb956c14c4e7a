#!/usr/bin/env bash
# Recipe: accuracy and consensus of D-FedEM and D-PSGD against the density of the peers' graph
# (G(300, p), p = 0.03, 0.1, 0.5) and the mixing rule (Metropolis–Hastings, FMMC), seed 1.
# Runs the sweep (resumable) and `fedsim report` (accuracy, mean spectral gap and final
# consensus distance per cell: results/gossip_density/report/report.md).
#   bash analysis/gossip_density.sh          (about 4 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
out=results/gossip_density
target/release/fedsim sweep scenarios/studies/gossip_density.yaml --jobs 2 --out "$out"
target/release/fedsim report "$out"
mkdir -p analysis/figures
cp "$out/report/accuracy_vs_topology_graph_p.png" analysis/figures/gossip_density.png
cp "$out/report/accuracy_vs_topology_graph_p.svg" analysis/figures/gossip_density.svg
