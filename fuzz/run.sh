#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (build-fuzz/) and runs each for SECONDS (default
# 600) with seeds from the test data, in parallel. Crashes land in build-fuzz/crashes/.
# usage: fuzz/run.sh [SECONDS]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
secs="${1:-600}"
b="$root/build-fuzz"
cmake -S "$root" -B "$b" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DFATHOM_FUZZ=ON -DFATHOM_TESTS=OFF >/dev/null
cmake --build "$b" -j "$(nproc)" --target fuzz_tokenizer_load fuzz_encode_decode
rm -rf "$b/corpus/load"
mkdir -p "$b/crashes" "$b/corpus/load" "$b/corpus/encode"
# Seeds: small tokenizer.json variants and golden texts.
/usr/bin/python3 - "$root/tests/data/tokenizer" "$b/corpus" <<'PY'
import json, os, sys
data, out = sys.argv[1], sys.argv[2]
syn = json.load(open(os.path.join(data, "synthetic_cases.json"), encoding="utf-8"))
base = syn["base"]
# A small model (byte tokens plus 40 merges) keeps each seed far below -max_len.
merges = base["model"]["merges"][:40]
vocab = base["model"]["vocab"]
keep = {t for t, i in vocab.items() if i < 256}
for a, b in merges:
    keep |= {a, b, a + b}
base["model"] = dict(base["model"], merges=merges, vocab={t: i for t, i in vocab.items() if t in keep})
for i, c in enumerate(syn["cases"]):
    j = dict(base)
    for k, v in c["patch"].items():
        if k != "model":
            j[k] = v
    open(os.path.join(out, "load", f"seed{i}.json"), "w").write(json.dumps(j))
for i, line in enumerate(open(os.path.join(data, "corpus_dev.jsonl"), encoding="utf-8")):
    if i % 10 == 0:
        t = json.loads(line)["text"][:2000]
        open(os.path.join(out, "encode", f"seed{i}.txt"), "wb").write(t.encode())
PY
run() {
  local name="$1" dir="$2"
  local extra=(); [[ $name == fuzz_tokenizer_load ]] && extra=(-dict="$root/fuzz/tokenizer_json.dict")
  (cd "$b/crashes" && "$b/fuzz/$name" "${extra[@]}" -max_total_time="$secs" -max_len=65536 -timeout=30 -rss_limit_mb=4096 \
     -print_final_stats=1 "$b/corpus/$dir" >"$b/$name.log" 2>&1) && echo "$name: OK" || { echo "$name: FAILED (see $b/$name.log)"; return 1; }
}
run fuzz_tokenizer_load load & p1=$!
run fuzz_encode_decode encode & p2=$!
rc=0; wait $p1 || rc=1; wait $p2 || rc=1
for n in fuzz_tokenizer_load fuzz_encode_decode; do echo "== $n"; grep -E "^stat::|Done|ERROR|SUMMARY" "$b/$n.log" | head -12; done
exit $rc
