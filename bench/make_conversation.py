#!/usr/bin/env python3
"""Writes a long multi-turn conversation in the `fathom render` input shape, built from the
golden tokenizer corpus texts (prose, code, 66 languages), for the prompt-encoding benchmark.
Texts that spell a special token are left out, so HF encoding of the rendered string and
Fathom's encoding give the same ids. Deterministic.

usage: make_conversation.py OUT TURNS [CHARS_PER_TURN]
"""
import json
import os
import random
import sys

here = os.path.dirname(os.path.abspath(__file__))
out, turns = sys.argv[1], int(sys.argv[2])
per_turn = int(sys.argv[3]) if len(sys.argv) > 3 else 7500
texts = []
with open(os.path.join(here, "..", "tests", "data", "tokenizer", "corpus_dev.jsonl"), encoding="utf-8") as f:
    for line in f:
        t = json.loads(line)["text"]
        if "｜" in t or "<think>" in t or "</think>" in t or not t.strip():
            continue
        texts.append(t)
rng = random.Random(turns)

def chunk(n):
    s = ""
    while len(s) < n:
        s += rng.choice(texts) + "\n"
    return s[:n]

messages = [{"role": "system", "content": "You are a helpful assistant. " + chunk(200)}]
for i in range(turns):
    messages.append({"role": "user", "content": chunk(per_turn // 2)})
    if i + 1 < turns:
        messages.append({"role": "assistant", "content": chunk(per_turn // 2), "reasoning_content": ""})
case = {"messages": messages, "thinking_mode": "chat", "reasoning_effort": None,
        "drop_thinking": True, "add_default_bos_token": True, "context": None}
with open(out, "w", encoding="utf-8") as f:
    json.dump(case, f, ensure_ascii=False)
print(out, turns, "turns", sum(len(m["content"]) for m in messages), "chars")
