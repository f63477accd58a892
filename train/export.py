#!/usr/bin/env python3
"""Writes the trained tiny pair as a checkpoint `fathom serve` loads unchanged: the initial
checkpoint's layout (tensor names, dtypes, shapes; FP8/FP4 weights re-quantised with fresh
block scales), its config.json plus the draft calibration (dspark_confidence_temperatures),
and its engram_tables.json.
"""
import argparse
import collections
import json
import os
import shutil
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_io import write_checkpoint  # noqa: E402
from v41 import V41  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--init", required=True)
    ap.add_argument("--state", required=True, help="train_dspark.py's dspark_state.pt")
    ap.add_argument("--calibration", help="train_dspark.py's dspark_result.json")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    model = V41.from_checkpoint(a.init)
    model.load_state_dict(torch.load(a.state)["model"])
    os.makedirs(a.out, exist_ok=True)
    tensors = {k: v.detach().float() for k, v in model.state_dict().items()}
    write_checkpoint(a.out, tensors, a.init)
    with open(os.path.join(a.init, "config.json")) as f:
        cfg = json.load(f, object_pairs_hook=collections.OrderedDict)
    if a.calibration:
        with open(a.calibration) as f:
            cfg["dspark_confidence_temperatures"] = json.load(f)["calibration_temperatures"]
    with open(os.path.join(a.out, "config.json.tmp"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    os.replace(os.path.join(a.out, "config.json.tmp"), os.path.join(a.out, "config.json"))
    shutil.copyfile(os.path.join(a.init, "engram_tables.json"),
                    os.path.join(a.out, "engram_tables.json"))
    print(f"export: {a.out}")


if __name__ == "__main__":
    main()
