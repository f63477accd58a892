#!/usr/bin/python3
"""Writes utf8_cases.json: random byte strings biased towards UTF-8 edge cases, with
Python's bytes.decode('utf-8', 'replace') (CPython's decoder, an independent implementation
of the Unicode 'maximal subpart' replacement) and strict validity."""
import json, random
random.seed(2024)
pieces = [b"a", b"\x00", b"\x7f", b"\x80", b"\xbf", b"\xc0", b"\xc1", b"\xc2", b"\xdf", b"\xe0", b"\xe0\xa0",
          b"\xed", b"\xed\xa0", b"\xed\x9f\xbf", b"\xef\xbf\xbd", b"\xf0", b"\xf0\x90", b"\xf0\x90\x80",
          b"\xf4\x8f\xbf\xbf", b"\xf4\x90", b"\xf5", b"\xff", "中".encode(), "😀".encode(), "é".encode()]
cases = []
for i in range(3000):
    b = b"".join(random.choice(pieces) if random.random() < 0.8 else bytes([random.randrange(256)])
                 for _ in range(random.randrange(0, 12)))
    try:
        b.decode("utf-8")
        valid = True
    except UnicodeDecodeError:
        valid = False
    cases.append({"hex": b.hex(), "lossy": b.decode("utf-8", "replace"), "valid": valid})
with open(__file__.replace("make_utf8_cases.py", "utf8_cases.json"), "w") as f:
    json.dump({"origin": "tests/data/core/make_utf8_cases.py, CPython 3.11 bytes.decode('utf-8','replace')", "cases": cases}, f, ensure_ascii=False)
