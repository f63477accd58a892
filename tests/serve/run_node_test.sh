#!/usr/bin/env bash
# Runs one of the server's node tests against `fathom serve` with the npm clients from the
# oracle cache (scripts/setup.sh --oracles). Usage: run_node_test.sh TEST.js FATHOM [ARGS...]
set -euo pipefail
test="$1"; fathom="$2"; shift 2
cache="${FATHOM_CACHE:-$HOME/.cache/fathom}"
modules="$cache/node/node_modules"
for m in openai @anthropic-ai/sdk; do
  if [[ ! -d "$modules/$m" ]]; then
    echo "FAIL: npm client $m missing in $modules (run scripts/setup.sh --oracles)"; exit 1
  fi
done
exec node "$test" "$fathom" "$modules" "$@"
