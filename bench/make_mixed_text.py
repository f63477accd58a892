#!/usr/bin/env python3
"""Writes the benchmark's mixed text: every text of the golden tokenizer corpus (prose, code,
66 languages, emoji, whitespace and Unicode edge cases) followed by libstdc++ headers, cut to
exactly N bytes at a character boundary. Deterministic on any Debian 12 machine with g++ 12.

usage: make_mixed_text.py OUT [N_BYTES]
"""
import json
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
out_path = sys.argv[1]
limit = int(sys.argv[2]) if len(sys.argv) > 2 else 4_000_000
parts = []
with open(os.path.join(here, "..", "tests", "data", "tokenizer", "corpus_dev.jsonl"), encoding="utf-8") as f:
    for line in f:
        parts.append(json.loads(line)["text"].encode("utf-8"))
total = sum(len(p) for p in parts)
root = "/usr/include/c++/12"
for dirpath, dirnames, filenames in sorted(os.walk(root)):
    dirnames.sort()
    for name in sorted(filenames):
        if total >= limit:
            break
        with open(os.path.join(dirpath, name), "rb") as f:
            data = f.read()
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        parts.append(data)
        total += len(data)
blob = b"\n".join(parts)[:limit]
# Do not end inside a UTF-8 sequence.
while blob and (blob[-1] & 0xC0) == 0x80:
    blob = blob[:-1]
if blob and blob[-1] >= 0xC0:
    blob = blob[:-1]
with open(out_path, "wb") as f:
    f.write(blob)
print(f"{out_path}: {len(blob)} bytes")
