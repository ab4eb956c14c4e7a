#!/usr/bin/env bash
# PyTorch's time for the `cnn_epoch` benchmark, with the same torch==2.13.0 that fedsim links
# against. Python's `import torch` needs the CUDA libraries even on a CPU (fedsim's own .venv
# leaves them out), so this installs the full wheel set (about 4.7 GB) into .venv-bench once,
# then runs benches/pytorch_cnn.py with 1 and 2 threads.
#   bash benches/pytorch_cnn.sh
set -euo pipefail
cd "$(dirname "$0")/.."
if ! .venv-bench/bin/python -c 'import torch, safetensors, pyarrow' 2>/dev/null; then
  python3 -m venv .venv-bench
  .venv-bench/bin/pip install -q --disable-pip-version-check torch==2.13.0 numpy safetensors pyarrow
fi
for t in 1 2; do THREADS=$t .venv-bench/bin/python benches/pytorch_cnn.py; done
