#!/usr/bin/env bash
# The main job as far as it exists today: build Fathom and run its tokenizer on a sample
# conversation snippet with DeepSeek's tokenizer (encode with and without added-token
# matching, then decode). The server with an embedded demo model comes with later issues.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${FATHOM_CACHE:-$HOME/.cache/fathom}"
tok="$cache/tokenizers/deepseek_v3/tokenizer.json"
cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$root/build" -j "$(nproc)" --target fathom
fathom="$root/build/fathom"
sample='{"text": "<｜User｜>How many r are in strawberry? 草莓里有几个r？<｜Assistant｜>"}'
echo "tokenizer: $tok"
echo "input:     $sample"
printf '%s\n' "$sample" | "$fathom" tokenize --tokenizer "$tok" | sed 's/^/encode:    /'
printf '%s\n' "$sample" | "$fathom" tokenize --tokenizer "$tok" --plain | sed 's/^/plain:     /'
printf '%s\n' "$sample" | "$fathom" tokenize --tokenizer "$tok" | "$fathom" detokenize --tokenizer "$tok" | sed 's/^/decode:    /'
