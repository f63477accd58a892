#!/usr/bin/env bash
# The Engram compressed-token map of the V4.1 tokenizer fixture, `fathom engram-map` against
# the HF `tokenizers`-based oracle (engram_map.js). Needs scripts/setup.sh --oracles.
set -euo pipefail
fathom="$1"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${FATHOM_CACHE:-$HOME/.cache/fathom}"
tok="${FATHOM_V41_TOKENIZER_JSON:-$cache/tokenizers/deepseek_v41_fixture/tokenizer.json}"
modules="$cache/node/node_modules"
if [[ ! -d "$modules/tokenizers" ]]; then
  echo "FAIL: HF tokenizers oracle missing in $modules (run scripts/setup.sh --oracles)"; exit 1
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$fathom" engram-map --tokenizer "$tok" >"$work/map.json"
node "$here/engram_map.js" "$modules" "$tok" "$work/map.json"
