#!/usr/bin/python3
"""Builds a DeepSeek-V4.1 tokenizer.json fixture from DeepSeek-V3's.

DeepSeek's V4.1 tokenizer.json cannot be fetched here, but its 128,000-entry base BPE and
pre-tokenizer equal V3's (prompt-format.md §8). V4/V4.1 have 1,283 added tokens and an id
space of exactly 129,280. This keeps V3's model, normalizer, pre-tokenizer and decoder, keeps
BOS/EOS/pad (0, 1, 2) and the User/Assistant tokens (128803, 128804), puts the V4/V4.1
control tokens at their published ids, and fills every other id in 128000..129279 with a
placeholder. <｜System｜>'s id is not published: this fixture uses 128847 (an otherwise
unassigned id). Fathom looks every special token up by spelling, so the real file works
unchanged.

usage: make_v41_tokenizer.py V3_TOKENIZER_JSON OUT_TOKENIZER_JSON
"""
import json
import sys

src, dst = sys.argv[1], sys.argv[2]
with open(src, encoding="utf-8") as f:
    tok = json.load(f)

VOCAB_SIZE = 129280
SYSTEM_ID = 128847  # unpublished; chosen for this fixture
published = {
    0: ("<｜begin▁of▁sentence｜>", True),
    1: ("<｜end▁of▁sentence｜>", True),
    2: ("<｜▁pad▁｜>", True),
    128803: ("<｜User｜>", False),
    128804: ("<｜Assistant｜>", False),
    128821: ("<think>", False),
    128822: ("</think>", False),
    128825: ("｜DSML｜", False),
    128828: ("<｜latest_reminder｜>", False),
    128829: ("<｜action｜>", False),
    128830: ("<｜query｜>", False),
    128831: ("<｜authority｜>", False),
    128832: ("<｜domain｜>", False),
    128836: ("<｜title｜>", False),
    128845: ("<｜read_url｜>", False),
    129264: ("<｜deepseek_image｜>", False),
    SYSTEM_ID: ("<｜System｜>", False),
}
added = []
for i in [0, 1, 2] + list(range(128000, VOCAB_SIZE)):
    content, special = published.get(i, (f"<｜place▁holder▁no▁{i - 128000}｜>", True))
    added.append({"id": i, "content": content, "single_word": False, "lstrip": False,
                  "rstrip": False, "normalized": False, "special": special})
tok["added_tokens"] = added
with open(dst, "w", encoding="utf-8") as f:
    json.dump(tok, f, ensure_ascii=False)
print(f"{dst}: {len(added)} added tokens, ids 0..{VOCAB_SIZE - 1}")
