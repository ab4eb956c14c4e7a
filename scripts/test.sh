#!/usr/bin/env bash
# Sets up (if needed) and runs the whole test suite: unit tests, the integration tests
# (tests/integration/) and the doc tests, in release mode (the build the CLI uses).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo test --release --locked "$@"
