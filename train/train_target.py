#!/usr/bin/env python3
"""Trains the tiny pair's target: a V4.1-shaped model (train/v41.py) from a random initial
checkpoint (`fathom mkmodel`) on the corpus of train/corpus.py, next-token cross-entropy,
AdamW with warm-up and cosine decay, the FP8/FP4 weights fake-quantised in the forward
(straight-through) so that training sees the weights the engine serves.

Deterministic for a seed on one machine (fixed step count, seeded batches). Resumable: a state
file under --work is written every --save-every steps and picked up on restart.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from head_loss import head_cross_entropy  # noqa: E402
from v41 import V41  # noqa: E402

BOS = 0


def batches(stream, B, T, gen):
    n = len(stream) - T
    while True:
        starts = torch.randint(0, n, (B,), generator=gen)
        x = torch.stack([torch.from_numpy(stream[s:s + T].astype(np.int64)) for s in starts.tolist()])
        # Position 0 is BOS (every served prompt starts with it); the window's first token is
        # dropped for it, so the model predicts x[1:] from BOS + x[1:-1].
        x[:, 0] = BOS
        yield x


def lr_at(s, lr, warmup, steps):
    """Linear warm-up over `warmup` steps, then cosine decay to 10% at `steps`."""
    if s < warmup:
        return lr * (s + 1) / warmup
    t = (s - warmup) / max(1, steps - warmup)
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def resume(state_path, model, opt, gen, tag):
    """The step a saved state (save_state) resumes at, model, optimiser and batch generator
    restored; 0 without one."""
    if not os.path.exists(state_path):
        return 0
    st = torch.load(state_path)
    model.load_state_dict(st["model"])
    opt.load_state_dict(st["opt"])
    gen.set_state(st["gen"])
    print(f"{tag}: resumed at step {st['step']}")
    return st["step"]


def save_state(state_path, model, opt, gen, step):
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
                "gen": gen.get_state(), "step": step}, state_path + ".tmp")
    os.replace(state_path + ".tmp", state_path)


def param_groups(model, wd):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.dim() < 2 or "norm" in name or name.startswith("hc_") or ".hc_" in name
         else decay).append(p)
    return [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--init", required=True, help="random initial checkpoint (fathom mkmodel)")
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--work", required=True, help="state and log directory")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--wd", type=float, default=0.01)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--save-every", type=int, default=25)
    ap.add_argument("--no-fake-quant", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("TRAIN_THREADS", os.cpu_count() or 1)))
    torch.manual_seed(a.seed)
    os.makedirs(a.work, exist_ok=True)
    state_path = os.path.join(a.work, "target_state.pt")
    log_path = os.path.join(a.work, "target_log.jsonl")

    model = V41.from_checkpoint(a.init)
    model.train()
    # Training rounds the FP8/FP4 weights as served; BF16 rounding (embedding, head) is skipped
    # for speed and applied at export.
    model.fake_quant_bf16 = False
    stream = np.load(os.path.join(a.corpus, "train.npy"))
    held = np.load(os.path.join(a.corpus, "heldout.npy"))
    opt = torch.optim.AdamW(param_groups(model, a.wd), lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(a.seed)
    step = resume(state_path, model, opt, gen, "target")
    it = batches(stream, a.batch, a.seq, gen)

    fq = not a.no_fake_quant
    t0 = time.time()
    while step < a.steps:
        x = next(it)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a.lr, a.warmup, a.steps)
        hn, _ = model(x, fake_quant_weights=fq, return_normed=True)
        targets = torch.cat([x[:, 1:], torch.full((x.shape[0], 1), -100)], 1)
        loss = head_cross_entropy(hn, model.head.weight, targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        rec = {"step": step, "loss": round(loss.item(), 4), "grad_norm": round(gn.item(), 3),
               "lr": lr_at(step - 1, a.lr, a.warmup, a.steps), "tok_s": round(step * a.batch * a.seq / (time.time() - t0), 1)}
        if step % 10 == 0 or step == a.steps:
            print("target:", json.dumps(rec), flush=True)
        with open(log_path, "a") as f:
            f.write(json.dumps(rec) + "\n")
        if step % a.save_every == 0 or step == a.steps:
            save_state(state_path, model, opt, gen, step)
    # Held-out loss of the trained weights (as served: fake-quantised).
    model.eval()
    model.fake_quant_bf16 = True
    with torch.no_grad():
        T = a.seq
        xs = [torch.from_numpy(held[s:s + T].astype(np.int64)) for s in range(0, len(held) - T, T)][:16]
        x = torch.stack(xs)
        x[:, 0] = BOS
        logits, _ = model(x, fake_quant_weights=True)
        hl = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                               x[:, 1:].reshape(-1)).item()
    print(f"target: held-out loss {hl:.4f} (perplexity {math.exp(hl):.1f})")
    with open(os.path.join(a.work, "target_result.json"), "w") as f:
        json.dump({"steps": step, "heldout_loss": hl}, f)


if __name__ == "__main__":
    main()
