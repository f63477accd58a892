#!/usr/bin/env python3
"""Writes dspark_draft_vocab.json for a trained pair: the token ids of the training corpus,
most frequent first (ties: lower id first), as a JSON list. `fathom serve --speculative dspark
--speculative-draft-vocab N` lets the draft stages propose only the first N of them
(model/draft_vocab.h; FR-Spec's frequency-ranked draft vocabulary).
"""
import argparse
import json
import os

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True, help="corpus.py's output folder (train.npy)")
    ap.add_argument("--out", required=True, help="the checkpoint folder")
    a = ap.parse_args()
    tokens = np.load(os.path.join(a.corpus, "train.npy")).astype(np.int64).ravel()
    ids, counts = np.unique(tokens, return_counts=True)
    order = np.lexsort((ids, -counts))  # count descending, then id ascending
    ranked = [int(i) for i in ids[order]]
    path = os.path.join(a.out, "dspark_draft_vocab.json")
    with open(path + ".tmp", "w") as f:
        json.dump(ranked, f)
    os.replace(path + ".tmp", path)
    covered = np.cumsum(counts[order]) / counts.sum()
    marks = [n for n in (1024, 4096, 8192, 16384, 32768) if n <= len(ranked)]
    print("draft_vocab: %d ids; corpus share of the first %s: %s" % (
        len(ranked), marks, ", ".join("%.4f" % covered[n - 1] for n in marks)))


if __name__ == "__main__":
    main()
