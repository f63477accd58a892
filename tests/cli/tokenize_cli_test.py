#!/usr/bin/python3
"""End-to-end check of `fathom tokenize` / `fathom detokenize` as the CLI contract states:
JSON lines in, one JSON line out per input line, in order, against the golden ids; bad
lines produce an error line in place and exit code 2."""
import json
import os
import subprocess
import sys

fathom, data = sys.argv[1], sys.argv[2]
cache = os.environ.get("FATHOM_CACHE", os.path.expanduser("~/.cache/fathom"))
tok = os.environ.get("FATHOM_TOKENIZER_JSON", os.path.join(cache, "tokenizers/deepseek_v3/tokenizer.json"))
failures = []

def run(args, stdin):
    return subprocess.run([fathom] + args, input=stdin, capture_output=True)

cases = [json.loads(l) for l in open(os.path.join(data, "tokenizer/corpus_dev.jsonl"), encoding="utf-8")]
stdin = "".join(json.dumps({"text": c["text"]}) + "\n" for c in cases).encode()
for plain, key in ((False, "ids"), (True, "ids_plain")):
    for threads in ("1", "2"):
        p = run(["tokenize", "--tokenizer", tok, "--threads", threads] + (["--plain"] if plain else []), stdin)
        lines = p.stdout.decode().splitlines()
        if p.returncode != 0 or len(lines) != len(cases):
            failures.append(f"tokenize plain={plain}: rc={p.returncode} lines={len(lines)} {p.stderr[:300]!r}")
            continue
        bad = [c["id"] for c, l in zip(cases, lines) if json.loads(l).get("ids") != c[key]]
        if bad:
            failures.append(f"tokenize plain={plain} threads={threads}: {len(bad)} mismatches, e.g. {bad[:5]}")

dec = [json.loads(l) for l in open(os.path.join(data, "tokenizer/decode_dev.jsonl"), encoding="utf-8")]
p = run(["detokenize", "--tokenizer", tok], "".join(json.dumps({"ids": c["ids"]}) + "\n" for c in dec).encode())
lines = p.stdout.decode("utf-8").splitlines()
if p.returncode != 0 or len(lines) != len(dec):
    failures.append(f"detokenize rc={p.returncode} lines={len(lines)}")
else:
    bad = [c["id"] for c, l in zip(dec, lines) if json.loads(l).get("text") != c["text"]]
    if bad:
        failures.append(f"detokenize: {len(bad)} mismatches, e.g. {bad[:5]}")

# Bad input: each bad line gets an error line in its place; good lines still work.
p = run(["tokenize", "--tokenizer", tok], b'{"text": "ok"}\nnot json\n{"txt": 1}\n{"text": "ok \xff"}\n{"text": "fine"}\n')
lines = p.stdout.decode().splitlines()
if p.returncode != 2 or len(lines) != 5 or "ids" not in json.loads(lines[0]) or "ids" not in json.loads(lines[4]) \
        or not all("error" in json.loads(l) for l in lines[1:4]):
    failures.append(f"bad-input handling: rc={p.returncode} out={lines}")
p = run(["detokenize", "--tokenizer", tok], b'{"ids": [1, 999999]}\n{"ids": "x"}\n{"ids": [19923]}\n')
lines = p.stdout.decode().splitlines()
if p.returncode != 2 or len(lines) != 3 or json.loads(lines[2]) != {"text": "Hello"}:
    failures.append(f"detokenize bad-input handling: rc={p.returncode} out={lines}")
p = run(["tokenize", "--tokenizer", "/nonexistent.json"], b"")
if p.returncode != 2 or b"not_found" not in p.stderr:
    failures.append(f"missing tokenizer file: rc={p.returncode} err={p.stderr!r}")

# bench tokenize prints one JSON line with the contract's fields.
text_file = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"fathom_cli_bench_{os.getpid()}.txt")
with open(text_file, "w", encoding="utf-8") as f:
    f.write("".join(c["text"] for c in cases[:200]))
p = run(["bench", "tokenize", "--tokenizer", tok, "--input", text_file, "--repeat", "2", "--threads", "2"], b"")
os.unlink(text_file)
try:
    r = json.loads(p.stdout.decode().strip())
    expect_tokens = sum(len(c["ids"]) for c in cases[:200])
    if not all(k in r for k in ("bytes", "seconds", "mb_per_s", "tokens")) or r["tokens"] <= 0:
        failures.append(f"bench tokenize output: {r}")
except Exception as e:  # noqa: BLE001
    failures.append(f"bench tokenize: {e}: {p.stdout!r} {p.stderr!r}")

for f in failures:
    print("FAIL:", f)
print(f"{0 if failures else 1} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
