#!/usr/bin/env bash
# Opacus's time for the `dp_sgd_epoch` benchmark, with the same torch==2.13.0 that fedsim links
# against: installs the full torch wheel set (about 4.7 GB, as benches/pytorch_cnn.sh does) and
# opacus==1.6.0 into .venv-bench once, then runs benches/opacus_dp_sgd.py with 1 thread.
#   bash benches/opacus_dp_sgd.sh
set -euo pipefail
cd "$(dirname "$0")/.."
if ! .venv-bench/bin/python -c 'import torch, safetensors, opacus' 2>/dev/null; then
  python3 -m venv .venv-bench
  .venv-bench/bin/pip install -q --disable-pip-version-check torch==2.13.0 numpy safetensors \
    pyarrow opacus==1.6.0
fi
THREADS=1 .venv-bench/bin/python benches/opacus_dp_sgd.py
