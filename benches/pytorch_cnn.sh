#!/usr/bin/env bash
# PyTorch's time for the `cnn_epoch` benchmark, with the torch==2.13.0 that fedsim links against
# (.venv, from scripts/setup.sh): installs the pure-Python packages `import torch` needs into
# .venv (once), then runs benches/pytorch_cnn.py with 1 and 2 threads.
#   bash benches/pytorch_cnn.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
if ! .venv/bin/python -c 'import torch' 2>/dev/null; then
  .venv/bin/pip install -q --disable-pip-version-check typing_extensions sympy networkx jinja2 \
    fsspec filelock numpy
fi
for t in 1 2; do THREADS=$t .venv/bin/python benches/pytorch_cnn.py; done
