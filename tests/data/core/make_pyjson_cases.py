#!/usr/bin/python3
"""Writes pyjson_cases.json: JSON texts with what CPython's json module makes of them
(json.dumps(json.loads(text)) with ensure_ascii True and False, or the fact that loads
rejects it), plus random doubles with repr(float). The oracle for core/py_json."""
import json, math, random, struct
random.seed(7)
texts = [
    '{}', '[]', '""', 'null', 'true', 'false', '0', '-0', '-0.0', '1.50', '1e2', '1E+2', '1e-7',
    '100.0', '1440.0', '1e-06', '6.02e+23', '0.0001', '0.00001', '1e16', '1e15', '123456789012345678',
    '99999999999999999999999999999999999999', '-12345678901234567890', '1.7976931348623157e308',
    '1e999', '-1e999', '5e-324', '2.5e-320', 'NaN', 'Infinity', '-Infinity', '[NaN, Infinity]',
    '{"a": 1, "b": 2, "a": 3}', '{"z": 1, "a": {"y": [1, 2, {"x": null}]}}',
    '{"k":"v","n":[1,2.5,-3e-5],"t":true}', '  {"spaced" :  [ 1 ,2 ] }  ',
    '"caf\\u00e9 \\u4e2d \\ud83d\\ude00"', '"raw é 中 😀"', '"\\n\\r\\t\\b\\f\\"\\\\\\/"',
    '"\\u0000\\u001f\\u007f"', '"\\u2028\\u2029"', '{"\\u00e9": "\\u00e9"}',
    '[1, [2, [3, [4]]]]', '"tab\\tquote\\"back\\\\"', '3.141592653589793', '0.1', '0.30000000000000004',
    '1.0e0', '12345.678e-3', '-0e5', '[-0.0, 0.0, -0]',
    # rejected by json.loads
    '', ' ', '{', '[1,]', '{"a":}', "{'a': 1}", '01', '1.', '.5', '+1', '"\\x41"', '"a\nb"',
    '[1] 2', 'nul', 'True', '{"a" 1}', '"\\ud800"', '"\\udc00x"', '"unterminated', 'nan', 'inf',
]
# Objects past 32 members (where the parser indexes its keys), with duplicates of keys first
# seen before and after the 32nd member.
big = ['"k%d": %d' % (i, i) for i in range(70)]
big.insert(40, '"k3": "dup-early"')
big.insert(60, '"k50": "dup-late"')
big.append('"k0": "dup-last"')
texts.append('{' + ', '.join(big) + '}')
texts.append('{' + ', '.join('"%s": %d' % (chr(0x4e00 + i % 50), i) for i in range(120)) + '}')
cases = []
for t in texts:
    try:
        v = json.loads(t)
    except (ValueError, RecursionError):
        cases.append({"text": t, "error": True})
        continue
    try:
        a = json.dumps(v, ensure_ascii=False)
        b = json.dumps(v, ensure_ascii=True)
        a.encode("utf-8")
    except UnicodeEncodeError:
        cases.append({"text": t, "error": True})  # lone surrogates: Fathom rejects them on input
        continue
    cases.append({"text": t, "dumps": a, "dumps_ascii": b})
floats = []
for i in range(3000):
    kind = i % 3
    if kind == 0:
        x = struct.unpack("<d", struct.pack("<Q", random.getrandbits(64)))[0]
    elif kind == 1:
        x = random.uniform(-1, 1) * 10 ** random.randint(-30, 30)
    else:
        x = round(random.uniform(0, 1000), random.randint(0, 6))
    if math.isnan(x):
        continue
    floats.append({"bits": struct.unpack("<Q", struct.pack("<d", x))[0], "repr": json.dumps(x)})
path = __file__.replace("make_pyjson_cases.py", "pyjson_cases.json")
with open(path, "w", encoding="utf-8") as f:
    json.dump({"origin": "tests/data/core/make_pyjson_cases.py with CPython 3.11 json", "cases": cases, "floats": floats}, f, ensure_ascii=False)
print(path, len(cases), len(floats))
