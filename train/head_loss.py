"""The head and its cross-entropy over the 129,280-token vocabulary without materialising the
[N, V] logits and their gradient: rows in chunks, logits as a BF16 product (AMX/AVX-512 BF16
through oneDNN where the CPU has it) accumulated in fp32, and the gradients of the hidden rows
and the head computed in the same pass (the backward only scales them)."""
import torch


class ChunkedHeadCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, W, targets, chunk):
        # h [N, D], W [V, D], targets [N] (negative = ignored). Returns the mean over the kept rows.
        keep = targets >= 0
        count = max(int(keep.sum()), 1)
        Wb = W.detach().to(torch.bfloat16)
        gh = torch.zeros_like(h)
        gW = torch.zeros(W.shape, dtype=torch.float32)
        total = torch.zeros((), dtype=torch.float64)
        for s in range(0, h.shape[0], chunk):
            hc = h[s:s + chunk].detach()
            tc = targets[s:s + chunk]
            kc = keep[s:s + chunk]
            tgt = tc.clamp(min=0)
            hb = hc.to(torch.bfloat16)
            logits = (hb @ Wb.t()).float()
            lse = torch.logsumexp(logits, -1)
            nll = lse - logits.gather(1, tgt[:, None])[:, 0]
            total += nll[kc].double().sum()
            p = torch.exp(logits.sub_(lse[:, None]))
            p[torch.arange(p.shape[0]), tgt] -= 1
            p[~kc] = 0
            p /= count
            pb = p.to(torch.bfloat16)
            gh[s:s + chunk] = (pb @ Wb).float()
            gW += (pb.t() @ hb).float()
        ctx.save_for_backward(gh, gW)
        return (total / count).float()

    @staticmethod
    def backward(ctx, g):
        gh, gW = ctx.saved_tensors
        return gh * g, (gW * g).to(gh.dtype), None, None


def head_cross_entropy(h, W, targets, chunk=256):
    """Mean next-token cross-entropy of softmax(h @ W^T) against targets (-100 = ignored)."""
    return ChunkedHeadCrossEntropy.apply(h.reshape(-1, h.shape[-1]), W, targets.reshape(-1), chunk)
