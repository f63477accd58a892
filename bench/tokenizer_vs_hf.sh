#!/usr/bin/env bash
# Side-by-side tokenizer benchmark: Hugging Face `tokenizers` 0.23.2 (npm, native) and Fathom
# encode the same 4 MB mixed text as one text, in one run; the ids must be identical.
# Prints each JSON line and the ratios. Needs `scripts/setup.sh --oracles` and a build.
# usage: bench/tokenizer_vs_hf.sh [BUILD_DIR] [REPEAT]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
repeat="${2:-10}"
cache="${FATHOM_CACHE:-$HOME/.cache/fathom}"
tok="$cache/tokenizers/deepseek_v3/tokenizer.json"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

python3 "$root/bench/make_mixed_text.py" "$work/mixed.txt" 4000000 >/dev/null
hf="$(node "$root/bench/hf_tokenize.js" "$cache/node/node_modules" "$tok" "$work/mixed.txt" 3 "$work/hf_ids.json")"
echo "$hf"
f1="$("$build/fathom" bench tokenize --tokenizer "$tok" --input "$work/mixed.txt" --repeat "$repeat" --threads 1 --ids-out "$work/f1_ids.json")"
echo "$f1"
f2="$("$build/fathom" bench tokenize --tokenizer "$tok" --input "$work/mixed.txt" --repeat "$repeat" --threads 2 --ids-out "$work/f2_ids.json")"
echo "$f2"
cmp -s "$work/hf_ids.json" "$work/f1_ids.json" || { echo "FAIL: 1-thread ids differ from HF" >&2; exit 1; }
cmp -s "$work/hf_ids.json" "$work/f2_ids.json" || { echo "FAIL: 2-thread ids differ from HF" >&2; exit 1; }
python3 - "$hf" "$f1" "$f2" <<'PY'
import json, sys
hf, f1, f2 = (json.loads(a) for a in sys.argv[1:])
print(json.dumps({
    "ids_identical": True,
    "fathom_1t_vs_hf": round(hf["seconds"] / f1["seconds"], 1),
    "fathom_1t_cold_vs_hf_cold": round(hf["first_seconds"] / f1["first_seconds"], 1),
    "fathom_2t_vs_1t": round(f1["seconds"] / f2["seconds"], 2),
    "fathom_load_ms": round(f1["load_seconds"] * 1e3, 1),
    "hf_load_ms": round(hf["load_seconds"] * 1e3, 1),
}))
PY
