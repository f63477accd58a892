#!/usr/bin/env python3
"""End-to-end checks of `fathom forward` and `fathom mkmodel`.

forward on the golden tiny checkpoint (tests/data/model/v41-tiny, DeepSeek's reference run)
must write the golden logits bit for bit: one prefill, and --prefill K with the rest decoded
one token at a time (decode_9_33). mkmodel must write checkpoints that `inspect` validates
against the layout and that `forward` runs on (finite logits, same bytes for the same seed).
inspect's KV store sizes: on the published V4.1-Flash config, DeepSeek's packed figures from
shared/spec/serving.md §1 (113,920 B a 128-token block, 20 x 134 x 528 = 1,415,040 B of window
state, hits <= L - 134); on the tiny config, Fathom's objects as the model encodes them (the
lengths engine_tests KvStoreObjects.InspectSizesAreTheLengthsOfEncodedObjects measures on
real encoded objects, and README states).
Exit code 0 = pass. Usage: model_cli_test.py FATHOM DATA_DIR
"""
import json
import hashlib
import os
import struct
import subprocess
import sys
import tempfile


def read_npy_f32(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:6] == b"\x93NUMPY", path
    hlen = struct.unpack("<H", data[8:10])[0]
    header = data[10:10 + hlen].decode("latin1")
    assert "'<f4'" in header, header
    body = data[10 + hlen:]
    return [body[i:i + 4] for i in range(0, len(body), 4)]


def read_npy_i32(path):
    with open(path, "rb") as f:
        data = f.read()
    hlen = struct.unpack("<H", data[8:10])[0]
    body = data[10 + hlen:]
    return list(struct.unpack("<%di" % (len(body) // 4), body))


def words(path):
    with open(path, "rb") as f:
        data = f.read()
    return [data[i:i + 4] for i in range(0, len(data), 4)]


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, **kw)


def main():
    fathom, data = sys.argv[1], sys.argv[2]
    tiny = os.path.join(data, "model", "v41-tiny")
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "logits.bin")
        # One prefill of prefill_37.
        ids = read_npy_i32(os.path.join(tiny, "prefill_37", "tokens.npy"))
        r = run([fathom, "forward", "--model", tiny, "--ids", ",".join(map(str, ids)), "--out", out])
        if r.returncode != 0:
            failures.append("forward prefill_37: " + r.stderr)
        elif words(out) != read_npy_f32(os.path.join(tiny, "prefill_37", "prefill_logits.npy")):
            failures.append("forward prefill_37: logits differ from the golden file")
        # Prefill 9, then 24 decode steps (decode_9_33).
        d = os.path.join(tiny, "decode_9_33")
        ids = read_npy_i32(os.path.join(d, "tokens.npy"))
        r = run([fathom, "forward", "--model", tiny, "--ids", ",".join(map(str, ids)), "--prefill", "9",
                 "--out", out])
        want = read_npy_f32(os.path.join(d, "prefill_logits.npy")) + read_npy_f32(os.path.join(d, "step_logits.npy"))
        if r.returncode != 0:
            failures.append("forward decode_9_33: " + r.stderr)
        elif words(out) != want:
            failures.append("forward --prefill 9: logits differ from the golden files")
        # Bad input: a clear error, exit code 2.
        for bad in (["--ids", "1,x"], ["--ids", "5000"], ["--ids", "1,2", "--prefill", "3"],
                    ["--ids", "1", "--numerics", "loose"]):
            r = run([fathom, "forward", "--model", tiny, "--out", out] + bad)
            if r.returncode != 2 or "fathom:" not in r.stderr:
                failures.append("forward %s: expected a usage error, got %d %s" % (bad, r.returncode, r.stderr))
        # mkmodel: valid layout, runs, deterministic.
        digests = []
        for run_no in range(2):
            m = os.path.join(tmp, "m%d" % run_no)
            r = run([fathom, "mkmodel", "--preset", "tiny", "--seed", "7", "--out", m])
            if r.returncode != 0:
                failures.append("mkmodel: " + r.stderr)
                continue
            with open(os.path.join(m, "model.safetensors"), "rb") as f:
                digests.append(hashlib.sha256(f.read()).hexdigest())
        if len(digests) == 2 and digests[0] != digests[1]:
            failures.append("mkmodel: the same seed wrote different weights")
        m = os.path.join(tmp, "m0")
        r = run([fathom, "inspect", "--model", m])
        if r.returncode != 0 or json.loads(r.stdout)["checkpoint_tensors_checked"] != 1028:
            failures.append("inspect of a mkmodel checkpoint: " + r.stdout + r.stderr)
        r = run([fathom, "forward", "--model", m, "--ids", "0,17,400,2,1000,3", "--numerics", "fast", "--out", out])
        if r.returncode != 0:
            failures.append("forward on mkmodel output: " + r.stderr)
        else:
            vals = struct.unpack("<%df" % (6 * 1024), open(out, "rb").read())
            if not all(abs(v) < 100 for v in vals):
                failures.append("forward on mkmodel output: logits not finite or out of range")
    # KV store sizes (inspect --config).
    r = run([fathom, "inspect", "--config", os.path.join(data, "model", "v41_flash_config.json")])
    kv = json.loads(r.stdout)["kv_store"] if r.returncode == 0 else {}
    want = {"packed_block_bytes": 113920, "packed_window_bytes": 1415040, "packed_window_layers": 20,
            "packed_window_entries": 134, "hit_cap": "L - 134", "block_tokens": 128}
    for k, v in want.items():
        if kv.get(k) != v:
            failures.append("inspect V4.1-Flash kv_store.%s = %r, want %r (%s)" % (k, kv.get(k), v, r.stderr))
    if sum(kv.get("packed_block_source_bytes", {}).values()) != 113920:
        failures.append("inspect V4.1-Flash: per-source packed bytes do not add up: %r" % kv)
    r = run([fathom, "inspect", "--config", os.path.join(tiny, "config.json")])
    kv = json.loads(r.stdout)["kv_store"] if r.returncode == 0 else {}
    if kv.get("block_object_bytes") != 197276 or kv.get("window_object_bytes") != 131472:
        failures.append("inspect tiny: Fathom object sizes %r" % kv)
    for f in failures:
        print("FAIL:", f)
    print("model_cli: %d failures" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
