#!/usr/bin/env bash
# Re-records the example cassettes from their scripted model turns (`model-turns.json`).
# Run it after changing anything that shapes a request (prompts, tool descriptions), from the
# repository root: ./examples/record.sh
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/cargo build --quiet --release -p recursive
bin=target/release/recursive

rm -f examples/run/inventory.cassette.jsonl
"$bin" run "Which items are below their reorder point, and how many units should we order of each under our policy?" \
  --workspace examples/run/inventory --mock-script examples/run/model-turns.json \
  --record examples/run/inventory.cassette.jsonl -q >/dev/null

rm -f examples/rlm/station-log.cassette.jsonl
"$bin" rlm "Which access code opens the east server room now, and who issued it?" \
  --input examples/rlm/station-log.txt --mock-script examples/rlm/model-turns.json \
  --record examples/rlm/station-log.cassette.jsonl -q >/dev/null
echo "recorded examples/run/inventory.cassette.jsonl and examples/rlm/station-log.cassette.jsonl"
