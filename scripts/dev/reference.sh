#!/usr/bin/env bash
# Regenerates the book's scenario field reference and the committed JSON Schema from the code
# (a unit test, scenario::reference, fails when they are stale).
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/setup.sh
target/release/fedsim schema --markdown >docs/src/reference/scenario.md
target/release/fedsim schema >docs/src/reference/scenario.schema.json
echo "reference: docs/src/reference/scenario.md and scenario.schema.json regenerated" >&2
