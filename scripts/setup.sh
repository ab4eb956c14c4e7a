#!/usr/bin/env bash
# Sets up everything fedsim needs, idempotently: LibTorch (from the PyPI wheel torch==2.13.0,
# which tch 0.26 expects) in .venv, then a release build. Fast when already done.
#   FEDSIM_CUDA=1 bash scripts/setup.sh   installs the full CUDA wheel set (4.7 GB) and builds
#                                         with --features cuda.
set -euo pipefail
cd "$(dirname "$0")/.."

TORCH_VERSION=2.13.0
say() { echo "setup: $*" >&2; }

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo is not installed; install a Rust toolchain (https://rustup.rs) first" >&2
  exit 1
fi

python=""
for p in python3.11 python3.12 python3.10 python3; do
  if command -v "$p" >/dev/null 2>&1; then python="$p"; break; fi
done
if [ -z "$python" ]; then
  say "installing python3 (Debian packages)"
  apt-get update -qq && apt-get install -y -qq python3 python3-venv python3-pip >/dev/null
  python=python3
fi

flavour=cpu
[ "${FEDSIM_CUDA:-0}" = 1 ] && flavour=cuda
stamp=".venv/.fedsim-torch-$TORCH_VERSION-$flavour"
if [ ! -f "$stamp" ] || [ ! -e .venv/libtorch/lib/libtorch_cpu.so ]; then
  if [ ! -x .venv/bin/pip ]; then
    say "creating .venv with $python"
    if ! "$python" -m venv .venv 2>/dev/null; then
      apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
      rm -rf .venv && "$python" -m venv .venv
    fi
  fi
  if [ "$flavour" = cuda ]; then
    say "installing torch==$TORCH_VERSION with its CUDA libraries (about 4.7 GB)"
    .venv/bin/pip install -q --disable-pip-version-check "torch==$TORCH_VERSION"
  else
    # libtorch_cpu needs libcudart and libcupti at load time even on CPU: those two small
    # packages instead of the whole CUDA set (1.25 GB instead of 4.7 GB).
    say "installing torch==$TORCH_VERSION for CPU (about 1.25 GB)"
    .venv/bin/pip install -q --disable-pip-version-check --no-deps "torch==$TORCH_VERSION" \
      nvidia-cuda-runtime==13.0.96 nvidia-cuda-cupti==13.0.85
  fi
  site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  ln -sfn "${site#"$PWD/.venv/"}/torch" .venv/libtorch
  rm -f .venv/.fedsim-torch-*
  touch "$stamp"
fi

features=()
[ "$flavour" = cuda ] && features=(--features cuda)
# The binary only: the tests and benches are built by the commands that run them, and share
# every dependency with it (Cargo.toml unifies the features that would split them).
say "building (cargo build --release --bin fedsim)"
cargo build --release --locked --bin fedsim "${features[@]}"
