#!/usr/bin/python3
"""End-to-end checks of `fathom render`, `fathom parse` and `fathom encode` as their CLI
contracts state, against the official goldens (tests/data/encoding) and with the V4.1
tokenizer fixture built by scripts/setup.sh."""
import json
import os
import subprocess
import sys

fathom, data = sys.argv[1], sys.argv[2]
cache = os.environ.get("FATHOM_CACHE", os.path.expanduser("~/.cache/fathom"))
tok = os.path.join(cache, "tokenizers/deepseek_v41_fixture/tokenizer.json")
failures = []


def run(args, stdin):
    return subprocess.run([fathom] + args, input=stdin.encode() if isinstance(stdin, str) else stdin, capture_output=True)


for fmt, files in (("v4", ["v4/cases_dev.jsonl", "v4/official/official_cases.jsonl"]),
                   ("v41", ["v41/cases_dev.jsonl", "v41/official_inline/cases_official_inline.jsonl"])):
    for f in files:
        for line in open(os.path.join(data, "encoding", f), encoding="utf-8"):
            c = json.loads(line)
            inp = {k: v for k, v in c.items() if k not in ("prompt", "images", "error", "error_type", "id", "tags")}
            p = run(["render", "--format", fmt], json.dumps(inp, ensure_ascii=False))
            ok = p.returncode == 2 if "error" in c else (p.returncode == 0 and p.stdout.decode() == c["prompt"])
            if not ok:
                failures.append(f"render {c['id']}: rc={p.returncode} {p.stderr[:200]!r}")

for fmt, files in (("v4", ["v4/parse_dev.jsonl", "v4/official/official_parse.jsonl"]),
                   ("v41", ["v41/parse_dev.jsonl", "v41/official_inline/parse_official_inline.jsonl"])):
    for f in files:
        for line in open(os.path.join(data, "encoding", f), encoding="utf-8"):
            c = json.loads(line)
            p = run(["parse", "--format", fmt, "--mode", "reference"],
                    json.dumps({"completion": c["completion"], "thinking_mode": c["thinking_mode"]}, ensure_ascii=False))
            ok = p.returncode == 2 if "error" in c else (p.returncode == 0 and json.loads(p.stdout) == c["parsed"])
            if not ok:
                failures.append(f"parse {c['id']}: rc={p.returncode} {p.stderr[:200]!r}")

# render --mode api: the spec's recipe-compatible example (prompt-format.md §7.2).
case = {"messages": [{"role": "user", "content": "first"}, {"role": "user", "content": "second"},
                     {"role": "assistant", "content": "answer", "reasoning_content": "prior reasoning"},
                     {"role": "system", "content": "new instruction"}], "thinking_mode": "thinking", "reasoning_effort": "minimal"}
want = ("<｜begin▁of▁sentence｜><｜System｜>Reasoning Effort: 50 (range 1-100, the higher the value, the more thorough the reasoning)\n\n"
        "<｜User｜>first\n\nsecond<｜Assistant｜><think>prior reasoning</think>answer<｜end▁of▁sentence｜>"
        "<｜System｜>new instruction<｜Assistant｜><think>")
p = run(["render", "--format", "v41", "--mode", "api"], json.dumps(case))
if p.returncode != 0 or p.stdout.decode() != want:
    failures.append(f"render --mode api: {p.returncode} {p.stdout.decode()!r}")

# encode: a good request gives ids and the prompt; a bad one exits 2 with the OpenAI error body.
body = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "<｜User｜>hi"}],
        "thinking": {"type": "disabled"}}
p = run(["encode", "--tokenizer", tok, "--format", "v41", "--protocol", "chat"], json.dumps(body))
try:
    r = json.loads(p.stdout)
    user_ids = [i for i in r["token_ids"] if i == 128803]
    if p.returncode != 0 or len(user_ids) != 1 or not r["prompt"].endswith("<｜Assistant｜></think>"):
        failures.append(f"encode: {p.returncode} {r}")
except Exception as e:  # noqa: BLE001
    failures.append(f"encode: {e} {p.stdout!r} {p.stderr!r}")
p = run(["encode", "--tokenizer", tok, "--format", "v41", "--protocol", "chat"], '{"messages": [], "model": "x"}')
if p.returncode != 2 or "invalid_request_error" not in json.loads(p.stdout)["error"]["type"]:
    failures.append(f"encode bad request: rc={p.returncode} {p.stdout!r}")

# parse --protocol chat: model output ids (control tokens as ids) -> a tool call response.
completion = ("Let me check.\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get_weather\">\n<｜DSML｜ parameter name=\"city\" "
              "string=\"true\">Paris</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls><｜end▁of▁sentence｜>")
ids = json.loads(run(["tokenize", "--tokenizer", tok], json.dumps({"text": completion})).stdout)["ids"]
req = {"messages": [{"role": "user", "content": "weather in Paris?"}], "thinking": {"type": "disabled"},
       "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}}]}
p = run(["parse", "--tokenizer", tok, "--format", "v41", "--protocol", "chat"], json.dumps({"request": req, "output_ids": ids, "finish": "stop"}))
try:
    r = json.loads(p.stdout)
    ch = r["choices"][0]
    if (ch["finish_reason"] != "tool_calls" or ch["message"]["content"] != "Let me check." or
            json.loads(ch["message"]["tool_calls"][0]["function"]["arguments"]) != {"city": "Paris"}):
        failures.append(f"parse chat: {r}")
except Exception as e:  # noqa: BLE001
    failures.append(f"parse chat: {e} {p.stdout!r} {p.stderr!r}")
p = run(["parse", "--tokenizer", tok, "--format", "v41", "--protocol", "chat", "--stream"],
        json.dumps({"request": req, "output_ids": ids, "finish": "stop"}))
lines = [l for l in p.stdout.decode().split("\n\n") if l]
if p.returncode != 0 or lines[-1] != "data: [DONE]" or not all(l.startswith("data: ") for l in lines):
    failures.append(f"parse chat --stream: {p.returncode} {lines[-3:]}")

# The Messages protocol: errors in Anthropic's shape, and the stream's event names.
p = run(["encode", "--tokenizer", tok, "--format", "v41", "--protocol", "messages"], '{"model": "x", "messages": [{"role": "user", "content": "hi"}]}')
if p.returncode != 2 or json.loads(p.stdout).get("type") != "error":
    failures.append(f"messages bad request: rc={p.returncode} {p.stdout!r}")
mreq = {"model": "x", "max_tokens": 50, "messages": [{"role": "user", "content": "weather in Paris?"}], "thinking": {"type": "disabled"},
        "tools": [{"name": "get_weather", "input_schema": {"type": "object", "properties": {}}}]}
p = run(["parse", "--tokenizer", tok, "--format", "v41", "--protocol", "messages", "--stream"],
        json.dumps({"request": mreq, "output_ids": ids, "finish": "stop"}))
names = [l[7:] for l in p.stdout.decode().splitlines() if l.startswith("event: ")]
if p.returncode != 0 or names[0] != "message_start" or names[-1] != "message_stop" or "ping" not in names:
    failures.append(f"messages stream: {p.returncode} {names}")
p = run(["parse", "--tokenizer", tok, "--format", "v41", "--protocol", "messages"], json.dumps({"request": mreq, "output_ids": ids, "finish": "stop"}))
try:
    m = json.loads(p.stdout)
    if m["stop_reason"] != "tool_use" or m["content"][-1]["input"] != {"city": "Paris"}:
        failures.append(f"messages complete: {m}")
except Exception as e:  # noqa: BLE001
    failures.append(f"messages complete: {e} {p.stdout!r}")

# The Responses protocol.
rreq = {"model": "x", "input": "weather in Paris?", "reasoning": {"effort": "none"},
        "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}]}
p = run(["parse", "--tokenizer", tok, "--format", "v41", "--protocol", "responses"], json.dumps({"request": rreq, "output_ids": ids, "finish": "stop"}))
try:
    r = json.loads(p.stdout)
    calls = [o for o in r["output"] if o["type"] == "function_call"]
    if r["status"] != "completed" or len(calls) != 1 or json.loads(calls[0]["arguments"]) != {"city": "Paris"}:
        failures.append(f"responses complete: {r}")
except Exception as e:  # noqa: BLE001
    failures.append(f"responses complete: {e} {p.stdout!r}")
p = run(["encode", "--tokenizer", tok, "--format", "v41", "--protocol", "responses"], '{"input": "hi", "previous_response_id": "r"}')
if p.returncode != 2 or "previous_response_id" not in json.loads(p.stdout)["error"]["message"]:
    failures.append(f"responses bad request: {p.returncode} {p.stdout!r}")

for f in failures[:30]:
    print("FAIL:", f)
print(f"{0 if failures else 1} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
