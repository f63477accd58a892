#!/usr/bin/python3
"""Forward+backward throughput of train/v41.py.

    /usr/bin/python3 train/bench_v41.py [checkpoint_dir] [--batch 4] [--seq 128] [--steps 3]
        [--threads 2] [--anchors 32]

Default checkpoint: /tmp/demo-seed0 (`build/fathom mkmodel --preset demo --seed 0 --out /tmp/demo-seed0`).
Reports tokens/s of a next-token cross-entropy step (forward, loss, backward) in plain fp32 and with
fake_quant_weights (median step time; the first step is a warm-up), and of a DSpark training step (target forward without grad, dspark at --anchors
anchors, loss, backward).
"""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from v41 import V41  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ckpt", nargs="?", default="/tmp/demo-seed0")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--anchors", type=int, default=32)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    t0 = time.time()
    m = V41.from_checkpoint(a.ckpt)
    V = m.cfg["vocab_size"]
    print(f"loaded {a.ckpt} in {time.time() - t0:.1f}s: vocab {V}, dim {m.cfg['dim']}, "
          f"{sum(p.numel() for p in m.parameters()) / 1e6:.1f}M parameters; threads {a.threads}")
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, V, (a.batch, a.seq), generator=g)
    x[:, 0] = 0
    for fq in (False, True):
        times = []
        for s in range(a.steps + 1):
            m.zero_grad(set_to_none=True)
            t = time.time()
            logits, _ = m(x, fake_quant_weights=fq)
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, V), x[:, 1:].reshape(-1))
            loss.backward()
            times.append(time.time() - t)
        dt = sorted(times[1:])[a.steps // 2]  # median; the first step warms up
        print(f"target step, fake_quant_weights={fq}: B={a.batch} T={a.seq}: median {dt:.2f} s/step "
              f"(all: {', '.join(f'{v:.2f}' for v in times[1:])}), "
              f"{a.batch * a.seq / dt:.0f} tokens/s (loss {loss.item():.3f})")
    for p in m.parameters():
        p.requires_grad_(False)
    for n, p in m.named_parameters():
        p.requires_grad_(n.startswith("mtp."))
    anchors = torch.sort(torch.randperm(a.seq - 7, generator=g)[: a.anchors]).values
    times = []
    for s in range(a.steps + 1):
        m.zero_grad(set_to_none=True)
        t = time.time()
        with torch.no_grad():
            _, mh = m(x, fake_quant_weights=True)
        idx = anchors[:, None] + 1 + torch.arange(5)
        U, hid = m.dspark(mh, x[:, anchors + 1], anchors=anchors, fake_quant_weights=True)
        dl = U + m.markov_bias(x[:, idx], fake_quant_weights=True)
        conf = m.confidence_logit(hid, x[:, idx], fake_quant_weights=True)
        loss = F.cross_entropy(dl.reshape(-1, V), x[:, idx + 1].reshape(-1)) + \
            F.binary_cross_entropy_with_logits(conf, torch.full_like(conf, 0.5))
        loss.backward()
        times.append(time.time() - t)
    dt = sorted(times[1:])[a.steps // 2]
    print(f"DSpark step (fake-quant, {a.anchors} anchors x 5): B={a.batch} T={a.seq}: median {dt:.2f} s/step "
          f"(all: {', '.join(f'{v:.2f}' for v in times[1:])}), "
          f"{a.batch * a.seq / dt:.0f} target tokens/s")


if __name__ == "__main__":
    main()
