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
# The graph examples: one model turn per process (the approval example stops to ask twice).
turns=$(mktemp -d)
python3 - examples/graph/model-turns.json "$turns" <<'PY'
import json, sys
for i, turn in enumerate(json.load(open(sys.argv[1]))):
    json.dump([turn], open(f"{sys.argv[2]}/notes-{i}.json", "w"))
PY
store="$turns/graphs.db"
rm -f examples/graph/release-notes.cassette.jsonl examples/graph/brief.cassette.jsonl
notes=(--store "$store" --record examples/graph/release-notes.cassette.jsonl --append -q)
"$bin" graph run examples/graph/release-notes.toml --thread rec --input "$(cat examples/graph/changes.json)" \
  --mock-script "$turns/notes-0.json" "${notes[@]}" >/dev/null || [ $? = 16 ]
"$bin" graph resume --thread rec --value '"Put the fix first."' --mock-script "$turns/notes-1.json" "${notes[@]}" >/dev/null || [ $? = 16 ]
"$bin" graph run examples/graph/brief.toml --workspace examples/graph --input '{"file": "incident.md"}' \
  --mock-script examples/graph/brief-turns.json --store "$store" --record examples/graph/brief.cassette.jsonl -q >/dev/null
# A model writing a graph (it repairs a mistake the blueprint tool reports) and running it.
rm -f examples/graph/authoring.cassette.jsonl
authoring=$(mktemp -d)
cp examples/graph/incident.md "$authoring/"
"$bin" run "Write a graph that reads incident.md and writes a one-line headline for it, then run it" \
  --workspace "$authoring" --blueprints --yes --mock-script examples/graph/authoring-turns.json \
  --record examples/graph/authoring.cassette.jsonl -q >/dev/null
rm -rf "$turns" "$authoring"
echo "recorded the cassettes of examples/run, examples/rlm and examples/graph"
