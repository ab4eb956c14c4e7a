#!/usr/bin/env bash
# Sets up (if needed) and runs fedsim with the given arguments, e.g.
#   bash scripts/fedsim.sh run scenarios/quickstart.yaml
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bash "$root/scripts/setup.sh"
exec "$root/target/release/fedsim" "$@"
