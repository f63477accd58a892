#!/usr/bin/env bash
# Side-by-side prompt encoding: a 20 / 200 / 400-turn conversation (~7.5k characters a turn,
# so 200 turns is ~1.5M characters) rendered to its V4.1 prompt string and encoded in one
# call by Hugging Face `tokenizers` 0.23.2, against Fathom rendering + encoding it (text
# segments as plain BPE, in parallel). The ids must be identical. HF's time excludes the
# render. Needs `scripts/setup.sh --oracles` and a build.
# usage: bench/prompt_encode_vs_hf.sh [BUILD_DIR] [REPEAT]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
repeat="${2:-10}"
cache="${FATHOM_CACHE:-$HOME/.cache/fathom}"
tok="$cache/tokenizers/deepseek_v41_fixture/tokenizer.json"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for turns in 20 200 400; do
  python3 "$root/bench/make_conversation.py" "$work/conv.json" "$turns" >/dev/null
  "$build/fathom" render --format v41 <"$work/conv.json" >"$work/prompt.txt"
  hf="$(node "$root/bench/hf_tokenize.js" "$cache/node/node_modules" "$tok" "$work/prompt.txt" 3 "$work/hf_ids.json")"
  f1="$("$build/fathom" bench encode --tokenizer "$tok" --format v41 --input "$work/conv.json" --repeat "$repeat" --threads 1 --ids-out "$work/f1.json")"
  f2="$("$build/fathom" bench encode --tokenizer "$tok" --format v41 --input "$work/conv.json" --repeat "$repeat" --threads 2 --ids-out "$work/f2.json")"
  cmp -s "$work/hf_ids.json" "$work/f1.json" || { echo "FAIL: $turns turns: 1-thread ids differ from HF" >&2; exit 1; }
  cmp -s "$work/hf_ids.json" "$work/f2.json" || { echo "FAIL: $turns turns: 2-thread ids differ from HF" >&2; exit 1; }
  python3 - "$turns" "$hf" "$f1" "$f2" <<'PY'
import json, sys
turns = sys.argv[1]
hf, f1, f2 = (json.loads(a) for a in sys.argv[2:])
print(json.dumps({"turns": int(turns), "prompt_bytes": f1["prompt_bytes"], "tokens": f1["tokens"],
                  "hf_encode_ms": round(hf["seconds"] * 1e3, 1),
                  "fathom_1t_ms": round(f1["seconds"] * 1e3, 2), "fathom_2t_ms": round(f2["seconds"] * 1e3, 2),
                  "fathom_1t_render_ms": round(f1["render_seconds"] * 1e3, 2),
                  "speedup_1t": round(hf["seconds"] / f1["seconds"], 1),
                  "speedup_2t": round(hf["seconds"] / f2["seconds"], 1), "ids_identical": True}))
PY
done
