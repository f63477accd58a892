#!/usr/bin/env python3
"""Trains the tiny pair's DSpark draft stages (mtp.*) against the frozen target, with the
DSpark paper's loss (shared/spec/algorithms.md §1.1-1.2):

  for every anchor p (the target has read x[0..p]; the block is [x[p+1], noise x4]),
  draft k = 0..4 predicts x[p+2+k] with p_d,k = softmax(U_k + Markov(x[p+1+k])):
    0.1 * CE(p_d,k, x[p+2+k]) + 0.9 * TV(p_d,k, p_t(. | x[..p+1+k])) + 1.0 * BCE(c_k, 1 - TV)
  each term weighted by w_k = exp(-k / 5); the confidence target 1 - TV is the analytic
  acceptance rate (no gradient through it).

Then Sequential Temperature Scaling on held-out data: per draft position, left to right, the
temperature that minimises the ECE of the cumulative confidence product against the observed
greedy survival. Deterministic for a seed; resumable like train_target.py.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from v41 import V41  # noqa: E402
from train_target import BOS, batches, lr_at, resume, save_state  # noqa: E402

GAMMA = 5


def draft_terms(model, x, anchors):
    """Draft logits (Markov bias added), confidence logits and the target's distributions for
    the given anchors: returns (logits [B,A,5,V], conf [B,A,5], p_t [B,A,5,V], next ids)."""
    B = x.shape[0]
    with torch.no_grad():
        hn, main_hidden = model(x, fake_quant_weights=True, return_normed=True)
    idx = anchors[None, :, None] + 1 + torch.arange(GAMMA)[None, None, :]  # p+1+k: [1,A,5]
    idx = idx.expand(B, -1, -1)
    prev = torch.gather(x, 1, idx.reshape(B, -1)).reshape(idx.shape)  # x[p+1+k]
    nxt = torch.gather(x, 1, (idx + 1).reshape(B, -1)).reshape(idx.shape)  # x[p+2+k]
    with torch.no_grad():
        # The target's distribution after x[..p+1+k], only at the rows the drafts need.
        rows = torch.gather(hn, 1, idx.reshape(B, -1, 1).expand(-1, -1, hn.shape[-1]))
        p_t = torch.softmax(rows @ model.head.weight.t(), -1).reshape(*idx.shape, -1)
    U, hidden = model.dspark(main_hidden, x[:, anchors + 1], anchors=anchors,
                             fake_quant_weights=True)
    logits = U + model.markov_bias(prev, fake_quant_weights=True)
    conf = model.confidence_logit(hidden, prev, fake_quant_weights=True)
    return logits, conf, p_t, nxt


def loss_fn(logits, conf, p_t, nxt):
    w = torch.exp(-torch.arange(GAMMA, dtype=torch.float32) / GAMMA)
    logp = torch.log_softmax(logits, -1)
    ce = -torch.gather(logp, -1, nxt[..., None])[..., 0]  # [B,A,5]
    tv = 0.5 * (logp.exp() - p_t).abs().sum(-1)
    bce = F.binary_cross_entropy_with_logits(conf, (1 - tv).detach().clamp(0, 1), reduction="none")
    per_k = (0.1 * ce + 0.9 * tv + bce).mean(dim=(0, 1))
    total = (per_k * w).sum() / w.sum()
    return total, {"ce": ce.mean().item(), "tv": tv.mean().item(), "bce": bce.mean().item(),
                   "accept_rate": (1 - tv).mean(dim=(0, 1)).tolist()}


def ece(pred, obs, bins=10):
    e = 0.0
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        m = (pred >= lo) & ((pred < hi) if b < bins - 1 else (pred <= hi))
        if m.any():
            e += m.float().mean().item() * abs(pred[m].mean().item() - obs[m].mean().item())
    return e


def calibrate(conf, accepted):
    """Sequential temperature scaling: conf [N,5] logits, accepted [N,5] greedy acceptance of
    each draft (given the previous ones were accepted). Returns the temperatures and ECEs."""
    surv = torch.cumprod(accepted.float(), 1)
    temps, before, after = [], [], []
    cum = torch.ones(conf.shape[0])
    cum_raw = torch.ones(conf.shape[0])
    grid = [0.25 * 1.05 ** i for i in range(80)]
    for k in range(GAMMA):
        cum_raw = cum_raw * torch.sigmoid(conf[:, k])
        before.append(ece(cum_raw, surv[:, k]))
        best = min(grid, key=lambda T: ece(cum * torch.sigmoid(conf[:, k] / T), surv[:, k]))
        temps.append(best)
        cum = cum * torch.sigmoid(conf[:, k] / best)
        after.append(ece(cum, surv[:, k]))
    return temps, before, after


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True, help="train_target.py's work dir (target_state.pt)")
    ap.add_argument("--init", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--anchors", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--save-every", type=int, default=25)
    a = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("TRAIN_THREADS", os.cpu_count() or 1)))
    torch.manual_seed(a.seed)
    os.makedirs(a.work, exist_ok=True)
    state_path = os.path.join(a.work, "dspark_state.pt")
    log_path = os.path.join(a.work, "dspark_log.jsonl")

    model = V41.from_checkpoint(a.init)
    model.load_state_dict(torch.load(os.path.join(a.target, "target_state.pt"))["model"])
    model.fake_quant_bf16 = False  # as in train_target.py; the calibration below rounds all
    for name, p in model.named_parameters():
        p.requires_grad_(name.startswith("mtp."))
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=a.lr, betas=(0.9, 0.95), weight_decay=0.01)
    stream = np.load(os.path.join(a.corpus, "train.npy"))
    held = np.load(os.path.join(a.corpus, "heldout.npy"))
    gen = torch.Generator().manual_seed(a.seed)
    step = resume(state_path, model, opt, gen, "dspark")
    it = batches(stream, a.batch, a.seq, gen)

    model.train()
    t0 = time.time()
    while step < a.steps:
        x = next(it)
        anchors = torch.sort(torch.randperm(a.seq - GAMMA - 2, generator=gen)[:a.anchors]).values
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a.lr, a.warmup, a.steps)
        loss, parts = loss_fn(*draft_terms(model, x, anchors))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        opt.step()
        step += 1
        rec = {"step": step, "loss": round(loss.item(), 4), **{k: (round(v, 4) if isinstance(v, float)
               else [round(u, 3) for u in v]) for k, v in parts.items()}, "grad_norm": round(gn.item(), 3),
               "s_per_step": round((time.time() - t0) / step, 2)}
        if step % 10 == 0 or step == a.steps:
            print("dspark:", json.dumps(rec), flush=True)
        with open(log_path, "a") as f:
            f.write(json.dumps(rec) + "\n")
        if step % a.save_every == 0 or step == a.steps:
            save_state(state_path, model, opt, gen, step)

    # Calibration on held-out windows: every anchor, greedy acceptance of each draft against the
    # target's argmax (teacher-forced on the data, as in training).
    model.eval()
    model.fake_quant_bf16 = True
    confs, accs, tvs = [], [], []
    with torch.no_grad():
        T = a.seq
        for s in list(range(0, len(held) - T, T))[:48]:
            x = torch.from_numpy(held[s:s + T].astype(np.int64))[None].clone()
            x[:, 0] = BOS
            anchors = torch.arange(0, T - GAMMA - 2)
            logits, conf, p_t, _ = draft_terms(model, x, anchors)
            accs.append((logits.argmax(-1) == p_t.argmax(-1)).reshape(-1, GAMMA))
            confs.append(conf.reshape(-1, GAMMA))
            tvs.append(0.5 * (torch.softmax(logits, -1) - p_t).abs().sum(-1).reshape(-1, GAMMA))
    conf, acc, tv = torch.cat(confs), torch.cat(accs), torch.cat(tvs)
    temps, before, after = calibrate(conf, acc)
    surv = torch.cumprod(acc.float(), 1)
    res = {"steps": step, "heldout_anchors": conf.shape[0],
           "greedy_accept_rate_per_position": acc.float().mean(0).tolist(),
           "greedy_survival_per_position": surv.mean(0).tolist(),
           "greedy_mean_accepted_length": surv.sum(1).mean().item(),
           "analytic_accept_rate_per_position": (1 - tv).mean(0).tolist(),
           "calibration_temperatures": temps, "ece_before": before, "ece_after": after}
    print("dspark:", json.dumps(res))
    with open(os.path.join(a.work, "dspark_result.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
