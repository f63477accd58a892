#!/usr/bin/env bash
# Every Unicode scalar value, in a probe text that exposes its pre-tokenizer class, encoded
# by Hugging Face `tokenizers` 0.23.2 (npm) and by `fathom tokenize`: the ids must match.
# Needs scripts/setup.sh --oracles.
set -euo pipefail
fathom="$1"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${FATHOM_CACHE:-$HOME/.cache/fathom}"
tok="${FATHOM_TOKENIZER_JSON:-$cache/tokenizers/deepseek_v3/tokenizer.json}"
modules="$cache/node/node_modules"
if [[ ! -d "$modules/tokenizers" ]]; then
  echo "FAIL: HF tokenizers oracle missing in $modules (run scripts/setup.sh --oracles)"; exit 1
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
node "$here/hf_codepoints.js" "$modules" "$tok" "$work/in.jsonl" "$work/hf.jsonl"
"$fathom" tokenize --tokenizer "$tok" --threads 2 <"$work/in.jsonl" >"$work/fathom.jsonl"
lines=$(wc -l <"$work/in.jsonl")
if cmp -s "$work/hf.jsonl" "$work/fathom.jsonl"; then
  echo "all $lines code-point probes identical"; echo "1 passed, 0 failed"
else
  diff <(paste -d'\t' "$work/in.jsonl" "$work/hf.jsonl") <(paste -d'\t' "$work/in.jsonl" "$work/fathom.jsonl") | head -20
  echo "0 passed, 1 failed"; exit 1
fi
