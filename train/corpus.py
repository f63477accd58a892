#!/usr/bin/env python3
"""Builds the tiny pair's training corpus: Debian's `fortunes` package (the fortune-mod data
files, plain English prose and quotations), split into records, shuffled with a seed, tokenized
with Fathom's own tokenizer and written as token-id streams.

Output (DIR): train.npy and heldout.npy (uint32 token streams, each record followed by EOS 1),
heldout.jsonl (one {"ids": [...]} per held-out record, no EOS) and corpus.json (counts, sources).
Deterministic: the same package version, seed and tokenizer give the same bytes.
"""
import argparse
import json
import os
import random
import subprocess
import sys

import numpy as np

FORTUNE_DIR = "/usr/share/games/fortunes"
SKIP = {"art", "ascii-art"}  # drawings, not prose
EOS = 1


def records(root):
    out = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if "." in name or name in SKIP or not os.path.isfile(path) or os.path.islink(path):
            continue
        with open(path, "rb") as f:
            text = f.read().decode("utf-8", errors="replace")
        for rec in text.split("\n%\n"):
            rec = rec.strip("\n%").strip()
            if rec and "\ufffd" not in rec:
                out.append(rec)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fathom", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--heldout", type=float, default=0.02)
    a = ap.parse_args()
    recs = records(FORTUNE_DIR)
    if len(recs) < 1000:
        sys.exit(f"corpus: only {len(recs)} records under {FORTUNE_DIR}; is `fortunes` installed?")
    random.Random(a.seed).shuffle(recs)
    lines = "".join(json.dumps({"text": r}) + "\n" for r in recs)
    p = subprocess.run([a.fathom, "tokenize", "--plain", "--tokenizer", a.tokenizer],
                       input=lines.encode(), capture_output=True, check=True)
    ids = [json.loads(l)["ids"] for l in p.stdout.decode().splitlines()]
    assert len(ids) == len(recs), (len(ids), len(recs))
    n_held = max(1, int(len(ids) * a.heldout))
    train, held = ids[:-n_held], ids[-n_held:]
    os.makedirs(a.out, exist_ok=True)

    def stream(rs):
        return np.array([t for r in rs for t in r + [EOS]], dtype=np.uint32)

    np.save(os.path.join(a.out, "train.npy"), stream(train))
    np.save(os.path.join(a.out, "heldout.npy"), stream(held))
    with open(os.path.join(a.out, "heldout.jsonl"), "w") as f:
        for r in held:
            f.write(json.dumps({"ids": r}) + "\n")
    meta = {"source": FORTUNE_DIR, "records": len(recs), "train_records": len(train),
            "heldout_records": len(held), "train_tokens": int(sum(len(r) + 1 for r in train)),
            "heldout_tokens": int(sum(len(r) + 1 for r in held)),
            "distinct_ids": len({t for r in ids for t in r}), "seed": a.seed}
    with open(os.path.join(a.out, "corpus.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print("corpus:", json.dumps(meta))


if __name__ == "__main__":
    main()
