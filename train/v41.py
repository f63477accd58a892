"""A trainable PyTorch implementation of the DeepSeek-V4.1-Flash forward pass (shared/spec/model-v41.md
§6) and its DSpark draft stages, computing the function of DeepSeek's reference `inference/model.py`
and of Fathom's C++ forward (src/model/v41.cc, dspark.cc), trainable in plain fp32.

    model = V41.from_checkpoint(dir)                       # config.json (+ engram_tables.json)
    logits, main_hidden = model(tokens)                    # [B,T,V], [B,T,3*dim]
    U, hidden = model.dspark(main_hidden, block_tokens, anchors=None)   # [B,A,5,V], [B,A,5,dim]
    draft_logits = U + model.markov_bias(prev_ids)         # [B,A,5,V]
    conf = model.confidence_logit(hidden, prev_ids)        # [B,A,5]
    write_checkpoint(out_dir, model.state_dict(), template_dir)       # safetensors_io

Everything runs vectorised over batch and positions: a full causal prefill from position 0 (no KV
cache, no per-token loops). Attention is a masked softmax over [window keys | compressed keys] with
the sink in the denominator; each index source's top-k (and the candidate-block pool) is a sort over
a [B, T, n_compressed] score tensor with causal visibility masks. The discrete choices (top-k,
routing) carry no gradient; gradients flow through the selected values and the routing weights.

Numerics. By default plain fp32: no bf16 rounding points and no activation fake-quant (the golden
README's "ordinary fp32 implementation"). Optional modes (per call or as constructor defaults), all
straight-through in the backward:
  - fake_quant_weights=True: every weight passes through its checkpoint format (FP8 E4M3 with 32x32
    UE8M0 blocks, FP4 E2M1 with UE8M0 per 32, Engram rows FP8 1x32, BF16 tensors rounded to bf16),
    so training sees exactly the weights write_checkpoint stores and the engine serves;
  - ref_rounding=True: the reference's activation rounding points (bf16 GEMM outputs, norms, RoPE,
    mHC mixes, caches, the attention probabilities before PV) and activation fake-quant (E4M3 per 32
    before FP8/FP4 GEMMs, the FP8 window KV, the FP4 compressed KV and MXFP4 index q/k), as in
    src/model/v41.cc's strict path, with fp32 accumulation (activation-aware QAT);
  - ref_rounding="exact": the same plus the golden data's canonical arithmetic (float64 accumulation
    and transcendentals rounded once, the sparse-attention kernel's 64-slot online-softmax chunks).
    It reproduces the golden files (and Fathom's strict C++ forward) bit for bit; slower, for tests.

Known differences from the C++ engine (by design): no KV cache or decode API (a decode step at
position P is row P of a prefill: the own-index-keys reading; the reference's decode-time ratio-2
indexers score stale keys on even positions, see the golden README); no image tokens (the C++
forward has none either: no bias_vl routing, no Engram gate/lookback stop); no bounded replay.
"""
import json
import math
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    from . import safetensors_io as sio  # noqa: F401
except ImportError:  # run as a script from train/
    import safetensors_io as sio

NEG_INF = float("-inf")


def _ste(x, q):
    """Straight-through: the value of q, the gradient of x."""
    return x + (q - x).detach()


# ---------------------------------------------------------------------------------------------
# parameter holders (their attribute names give the official tensor names)

class Leaf(nn.Module):
    """One weight tensor `weight` with its checkpoint format `kind`: fp8 (32x32 UE8M0 blocks),
    fp8row (1x32 blocks: Engram tables), fp4 (E2M1, UE8M0 per 32 along the input), bf16 or f32."""

    def __init__(self, shape, kind):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(*shape))
        self.weight.kind = kind
        self.kind = kind


def _param(shape, kind):
    p = nn.Parameter(torch.zeros(*shape))
    p.kind = kind
    return p


class Expert(nn.Module):
    def __init__(self, dim, inter, kind):
        super().__init__()
        self.w1 = Leaf((inter, dim), kind)
        self.w2 = Leaf((dim, inter), kind)
        self.w3 = Leaf((inter, dim), kind)


class Gate(nn.Module):
    def __init__(self, n, dim):
        super().__init__()
        self.weight = _param((n, dim), "bf16")
        # The selection biases: they pick experts and carry no gradient (noaux_tc).
        self.register_buffer("bias", torch.zeros(n))
        self.register_buffer("bias_vl", torch.zeros(n))


class MoE(nn.Module):
    def __init__(self, c, n_experts, top_k):
        super().__init__()
        self.n_experts, self.top_k = n_experts, top_k
        self.gate = Gate(n_experts, c["dim"])
        self.experts = nn.ModuleList(Expert(c["dim"], c["moe_inter_dim"], "fp4") for _ in range(n_experts))
        ns = c.get("n_shared_experts", 1)
        self.shared_experts = Expert(c["dim"], c["moe_inter_dim"] * ns, "fp8") if ns > 0 else None


class Compressor(nn.Module):
    def __init__(self, c, ratio):
        super().__init__()
        self.wkv = Leaf((c["head_dim"], c["dim"]), "bf16")
        if ratio > 1:
            self.wgate = Leaf((c["head_dim"], c["dim"]), "bf16")
        self.norm = Leaf((c["head_dim"],), "bf16")


class Indexer(nn.Module):
    def __init__(self, c, kv_source, index_source):
        super().__init__()
        if index_source:
            self.wq_b = Leaf((c["index_n_heads"] * c["index_head_dim"], c["q_lora_rank"]), "fp8")
            self.weights_proj = Leaf((c["index_n_heads"], c["dim"]), "bf16")
        if kv_source:
            self.wk = Leaf((c["index_head_dim"], c["head_dim"]), "bf16")
            self.k_norm = Leaf((c["index_head_dim"],), "bf16")


class Attention(nn.Module):
    def __init__(self, c, layer, backbone):
        super().__init__()
        D, H, hd, q = c["dim"], c["n_heads"], c["head_dim"], c["q_lora_rank"]
        G, R = c["o_groups"], c["o_lora_rank"]
        self.wq_a = Leaf((q, D), "fp8")
        self.q_norm = Leaf((q,), "bf16")
        self.wq_b = Leaf((H * hd, q), "fp8")
        self.wkv = Leaf((hd, D), "fp8")
        self.kv_norm = Leaf((hd,), "bf16")
        self.wo_a = Leaf((G * R, H * hd // G), "fp8")
        self.wo_b = Leaf((D, G * R), "fp8")
        self.attn_sink = _param((H,), "f32")
        ratio = c["compress_ratios"][layer]
        kv_src = backbone and layer in c["kv_source_layers"]
        idx_src = backbone and layer in c["index_source_layers"]
        if kv_src:
            self.compressor = Compressor(c, ratio)
        if kv_src or idx_src:
            self.indexer = Indexer(c, kv_src, idx_src)


class Engram(nn.Module):
    def __init__(self, c, rows):
        super().__init__()
        cols = (c["engram_max_ngram_size"] - 1) * c["engram_n_heads"]
        self.embed = Leaf((rows, c["engram_head_dim"]), "fp8row")
        self.wkv = Leaf(((c["hc_mult"] + 1) * c["dim"], cols * c["engram_head_dim"]), "fp8")
        self.q_weight = _param((c["hc_mult"], c["dim"]), "bf16")
        self.k_weight = _param((c["hc_mult"], c["dim"]), "bf16")


class MarkovHead(nn.Module):
    def __init__(self, V, R):
        super().__init__()
        self.embed = Leaf((V, R), "bf16")
        self.head = Leaf((V, R), "bf16")


class ConfidenceHead(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.proj = Leaf((1, n), "bf16")


class Block(nn.Module):
    """One layer (layers.L or mtp.S): attention and MoE, each wrapped in single-pass mHC."""

    def __init__(self, c, layer, backbone):
        super().__init__()
        D, hc = c["dim"], c["hc_mult"]
        mix = (2 + hc) * hc
        self.layer = layer
        self.ratio = c["compress_ratios"][layer]
        self.attn = Attention(c, layer, backbone)
        self.attn_norm = Leaf((D,), "bf16")
        self.ffn_norm = Leaf((D,), "bf16")
        for site in ("attn", "ffn"):
            setattr(self, f"hc_{site}_fn", _param((mix, hc * D), "f32"))
            setattr(self, f"hc_{site}_base", _param((mix,), "f32"))
            setattr(self, f"hc_{site}_scale", _param((3,), "f32"))
        if backbone:
            self.ffn = MoE(c, c["n_routed_experts"], c["n_activated_experts"])
        else:
            self.ffn = MoE(c, c["dspark_n_routed_experts"], c["dspark_n_activated_experts"])
        if backbone and layer in c.get("engram_layer_ids", []):
            k = c["engram_layer_ids"].index(layer)
            self.engram = Engram(c, c["engram_num_embeddings"][k])
        # Source resolution (ref Attention.__init__): the nearest source at or below the layer.
        self.kv_source = backbone and layer in c["kv_source_layers"]
        self.index_source = backbone and layer in c["index_source_layers"]
        cand = c.get("candidate_source_layer", -1)
        self.candidate_source = self.index_source and layer == cand
        self.uses_candidates = self.index_source and 0 <= cand < layer
        self.kv_source_layer = -1
        if backbone and self.ratio > 0:
            srcs = [s for s in c["kv_source_layers"] if s <= layer]
            if not srcs or c["compress_ratios"][max(srcs)] != self.ratio:
                raise ValueError(f"layer {layer} reads compressed KV but no kv source of its ratio precedes it")
            self.kv_source_layer = max(srcs)


# ---------------------------------------------------------------------------------------------
# the model

class V41(nn.Module):
    def __init__(self, cfg, engram_tables=None, fake_quant_weights=False, ref_rounding=False):
        super().__init__()
        c = sio.normalise_config(cfg)
        self.cfg = c
        self.fake_quant_weights = fake_quant_weights
        self.ref_rounding = ref_rounding
        # Compute index scores with autograd (for an auxiliary indexer loss on trace["index_scores_L*"]);
        # the selection itself never carries a gradient.
        self.indexer_grad = False
        D, V = c["dim"], c["vocab_size"]
        L, S = c["n_layers"], c.get("n_mtp_layers", 0)
        if c["hc_mult"] != 4:
            raise ValueError("hc_mult must be 4")
        self.embed = Leaf((V, D), "bf16")
        self.layers = nn.ModuleList(Block(c, l, True) for l in range(L))
        self.norm = Leaf((D,), "bf16")
        self.head = Leaf((V, D), "bf16")
        self.mtp = nn.ModuleList(Block(c, L + s, False) for s in range(S))
        if S > 0:
            n_t = len(c["dspark_target_layer_ids"])
            self.mtp[0].main_proj = Leaf((D, n_t * D), "fp8")
            self.mtp[0].main_norm = Leaf((D,), "bf16")
            last = self.mtp[S - 1]
            last.norm = Leaf((D,), "bf16")
            last.markov_head = MarkovHead(V, c["dspark_markov_rank"])
            last.confidence_head = ConfidenceHead(D + c["dspark_markov_rank"])
        # Engram hashing tables (engram_tables.json): numpy, not module state.
        self.engram_layers = list(c.get("engram_layer_ids", []))
        self._tables = None
        if self.engram_layers:
            if engram_tables is None:
                raise ValueError("the config has Engram layers: pass engram_tables (engram_tables.json)")
            self._set_tables(engram_tables)
        self._rope_cache = {}
        self._wq = None  # per-call cache of fake-quantised weights
        self._fq = False
        # With fake_quant_weights: whether BF16 tensors are rounded too (training may skip it:
        # the embedding and head are large, and bf16 rounding is far below the FP8/FP4 error).
        self.fake_quant_bf16 = True
        self._ref = False
        self._exact = False

    # ---------------------------------------------------------------- loading and saving
    @classmethod
    def from_checkpoint(cls, d, **kw):
        cfg, tensors = sio.load_checkpoint(d)
        tables = None
        p = os.path.join(d, "engram_tables.json")
        if os.path.exists(p):
            with open(p) as f:
                tables = json.load(f)
        m = cls(cfg, tables, **kw)
        m.load_checkpoint_tensors(tensors)
        return m

    def load_checkpoint_tensors(self, tensors):
        """Loads {official name: fp32 tensor} (load_checkpoint's output). Every model tensor must be
        present; the checkpoint may carry the DSpark embed/head copies, which must equal embed/head."""
        own = self.state_dict()
        missing = [k for k in own if k not in tensors]
        if missing:
            raise KeyError(f"checkpoint lacks {missing[:5]} ({len(missing)} tensors)")
        for k in tensors:
            if k in own:
                continue
            src = sio.alias_source(k, tensors)
            if src is None:
                raise KeyError(f"checkpoint has an unexpected tensor {k}")
            if not torch.equal(tensors[k], tensors[src]):
                raise ValueError(f"{k} differs from {src}: the model shares {src}")
        with torch.no_grad():
            for k, v in own.items():
                if tuple(v.shape) != tuple(tensors[k].shape):
                    raise ValueError(f"{k}: shape {tuple(tensors[k].shape)}, model {tuple(v.shape)}")
                v.copy_(tensors[k])

    def checkpoint_tensors(self):
        """{official name: fp32 tensor} including the DSpark copies (mtp.0.embed, mtp.S.head)."""
        sd = {k: v.detach() for k, v in self.state_dict().items()}
        S = self.cfg.get("n_mtp_layers", 0)
        if S > 0:
            sd["mtp.0.embed.weight"] = sd["embed.weight"]
            sd[f"mtp.{S - 1}.head.weight"] = sd["head.weight"]
        return sd

    def save_checkpoint(self, d, template_dir):
        sio.write_checkpoint(d, self.checkpoint_tensors(), template_dir)

    def tensor_kinds(self):
        """{parameter name: checkpoint format kind}."""
        return {n: getattr(p, "kind", "f32") for n, p in self.named_parameters()}

    def _set_tables(self, t):
        c = self.cfg
        self._tables = {
            "token_map": np.asarray(t["token_map"], np.int64),
            "pad": int(t["pad_compressed_id"]),
            "mult": np.array([[int(x) for x in row] for row in t.get("multipliers_str", t["multipliers"])],
                             dtype=np.int64),
            "primes": np.asarray(t["primes"], np.int64).reshape(len(self.engram_layers), -1),
            "offsets": np.asarray(t["offsets"], np.int64).reshape(len(self.engram_layers), -1),
        }
        if len(self._tables["token_map"]) != c["vocab_size"]:
            raise ValueError("engram token_map does not cover the vocabulary")

    # ---------------------------------------------------------------- numerics helpers
    def _w(self, p):
        """A weight as the forward uses it: itself, or (fake_quant_weights) its checkpoint format
        with a straight-through gradient."""
        if not self._fq:
            return p
        q = self._wq.get(id(p))
        if q is None:
            kind = getattr(p, "kind", "f32")
            if kind == "fp8":
                q = _ste(p, sio.fake_quant_fp8_t(p.detach(), 32, 32))
            elif kind == "fp4":
                q = _ste(p, sio.fake_quant_fp4_t(p.detach()))
            elif kind == "bf16":
                q = _ste(p, sio.round_bf16_t(p.detach())) if self.fake_quant_bf16 else p
            else:  # f32 (and fp8row, quantised per gathered row)
                q = p
            self._wq[id(p)] = q
        return q

    def _rows(self, p, idx):
        """Rows p[idx] of a BF16 table (embeddings) as _w(p)[idx], quantising only the rows used."""
        r = p[idx]
        return _ste(r, sio.round_bf16_t(r.detach())) if self._fq and self.fake_quant_bf16 else r

    def _bf(self, x):
        return _ste(x, sio.round_bf16_t(x.detach())) if self._ref else x

    # Reductions and transcendentals. In exact mode (ref_rounding="exact") they follow the golden
    # data's canonical arithmetic: accumulated / evaluated in float64 and rounded once to fp32.
    def _mm(self, x, w):
        """x @ w^T (F.linear)."""
        if self._exact:
            return F.linear(x.double(), w.double()).float()
        return F.linear(x, w)

    def _matmul(self, a, b):
        if self._exact:
            return torch.matmul(a.double(), b.double()).float()
        return torch.matmul(a, b)

    def _einsum(self, eq, a, b):
        if self._exact:
            return torch.einsum(eq, a.double(), b.double()).float()
        return torch.einsum(eq, a, b)

    def _sum(self, x, dim, keepdim=False):
        if self._exact:
            return x.double().sum(dim, keepdim=keepdim).float()
        return x.sum(dim, keepdim=keepdim)

    def _mean(self, x, dim, keepdim=False):
        if self._exact:
            return (x.double().sum(dim, keepdim=keepdim) / x.shape[dim]).float()
        return x.mean(dim, keepdim=keepdim)

    def _exp(self, x):
        return torch.exp(x.double()).float() if self._exact else torch.exp(x)

    def _sigmoid(self, x):
        return torch.sigmoid(x.double()).float() if self._exact else torch.sigmoid(x)

    def _rsqrt(self, x):
        return torch.rsqrt(x.double()).float() if self._exact else torch.rsqrt(x)

    def _silu(self, x):
        return F.silu(x.double()).float() if self._exact else F.silu(x)

    def _softplus(self, x):
        return F.softplus(x.double()).float() if self._exact else F.softplus(x)

    def _aq(self, x):
        return _ste(x, sio.act_quant_e4m3_t(x.detach())) if self._ref else x

    def _fp4q(self, x, block, e4m3_scale):
        return _ste(x, sio.act_quant_e2m1_t(x.detach(), block, e4m3_scale)) if self._ref else x

    def _fp8_linear(self, x, leaf):
        """An FP8-weight GEMM: (activation fake-quant) x · W^T (rounded to bf16)."""
        return self._bf(self._mm(self._aq(x), self._w(leaf.weight)))

    def _bf16_linear(self, x, leaf, to_bf16=True):
        y = self._mm(x, self._w(leaf.weight))
        return self._bf(y) if to_bf16 else y

    def _rmsnorm(self, x, leaf):
        eps = self.cfg["norm_eps"]
        n = x * self._rsqrt(self._mean(x * x, -1, keepdim=True) + eps)
        return self._bf(n * self._w(leaf.weight))

    def _rope_tables(self, kind, n):
        """(cos, sin) [n, rope_head_dim/2] for positions 0..n-1: kind 'window' (rope_theta, no YaRN)
        or 'compressed' (compress_rope_theta with YaRN), as src/model/rope.cc computes them."""
        key = (kind, n)
        if key in self._rope_cache:
            return self._rope_cache[key]
        c = self.cfg
        dim = c["rope_head_dim"]
        half = dim // 2
        base = float(c["rope_theta"] if kind == "window" else c["compress_rope_theta"])
        e = (2.0 * np.arange(half, dtype=np.float32)) / np.float32(dim)
        freqs = (1.0 / np.power(base, e.astype(np.float64)).astype(np.float32)).astype(np.float32)
        if kind != "window" and c.get("original_seq_len", 0) > 0:
            orig = float(c["original_seq_len"])

            def corr(rot):
                return dim * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))

            low = max(math.floor(corr(float(c["beta_fast"]))), 0.0)
            high = min(math.ceil(corr(float(c["beta_slow"]))), float(dim - 1))
            if low == high:
                high += 0.001
            ramp = np.clip((np.arange(half, dtype=np.float32) - np.float32(low)) / np.float32(high - low),
                           0, 1).astype(np.float32)
            smooth = (1 - ramp).astype(np.float32)
            factor = np.float32(c["rope_factor"])
            freqs = (freqs / factor * (1 - smooth) + freqs * smooth).astype(np.float32)
        ang = (np.arange(n, dtype=np.float32)[:, None] * freqs[None, :]).astype(np.float32)
        cs = (torch.from_numpy(np.cos(ang.astype(np.float64)).astype(np.float32)),
              torch.from_numpy(np.sin(ang.astype(np.float64)).astype(np.float32)))
        self._rope_cache[key] = cs
        return cs

    def _rope(self, x, cos, sin, inverse=False):
        """Rotates the last rope_head_dim dims of x (interleaved pairs). cos/sin broadcast against
        x[..., :rd/2] (the caller shapes them)."""
        rd = self.cfg["rope_head_dim"]
        head, tail = x[..., :-rd], x[..., -rd:]
        t = tail.reshape(*tail.shape[:-1], rd // 2, 2)
        a, b = t[..., 0], t[..., 1]
        s = -sin if inverse else sin
        if self._exact:  # the complex product in double, rounded once
            a, b, cd, sd = a.double(), b.double(), cos.double(), s.double()
            out = torch.stack((a * cd - b * sd, a * sd + b * cd), -1).float().reshape(tail.shape)
        else:
            out = torch.stack((a * cos - b * s, a * s + b * cos), -1).reshape(tail.shape)
        return torch.cat((head, self._bf(out)), -1)

    # ---------------------------------------------------------------- mHC
    def _hc_mix(self, X, fn, scale, base):
        """(pre [..,4], post [..,4], comb [..,4,4]) from the streams X [.., 4, D]."""
        c = self.cfg
        hc, eps = c["hc_mult"], c["hc_eps"]
        v = X.flatten(-2)
        r = self._rsqrt(self._mean(v * v, -1, keepdim=True) + c["norm_eps"])
        m = self._mm(v, fn) * r
        pre = self._sigmoid(m[..., :hc] * scale[0] + base[:hc]) + eps
        post = 2 * self._sigmoid(m[..., hc:2 * hc] * scale[1] + base[hc:2 * hc])
        C = (m[..., 2 * hc:] * scale[2] + base[2 * hc:]).reshape(*m.shape[:-1], hc, hc)
        if self._exact:  # the kernel's softmax: fp32 max, double exp, double sum, fp32 division
            e = self._exp(C - C.amax(-1, keepdim=True))
            C = e / self._sum(e, -1, keepdim=True) + eps
        else:
            C = torch.softmax(C, -1) + eps
        C = C / (self._sum(C, -2, keepdim=True) + eps)
        for _ in range(c["hc_sinkhorn_iters"] - 1):
            C = C / (self._sum(C, -1, keepdim=True) + eps)
            C = C / (self._sum(C, -2, keepdim=True) + eps)
        return pre, post, C

    def _hc_pre(self, pre, X):
        return self._bf(self._sum(pre.unsqueeze(-1) * X, -2))

    def _hc_post(self, post, C, y, X):
        # X'[j] = post[j] * y + sum_i C[i][j] * X[i]
        if self._exact:  # fp32 products, the sum over i in double
            mixed = self._sum(C.unsqueeze(-1) * X.unsqueeze(-2), -3)
        else:
            mixed = torch.einsum("...ij,...id->...jd", C, X)
        return self._bf(post.unsqueeze(-1) * y.unsqueeze(-2) + mixed)

    def _block(self, blk, X, pre, attn_fn, trace=None, tag=None):
        a_pre, a_post, a_C = self._hc_mix(X, blk.hc_attn_fn, blk.hc_attn_scale, blk.hc_attn_base)
        x = self._hc_pre(pre, X)
        y = attn_fn(self._rmsnorm(x, blk.attn_norm))
        if trace is not None:
            trace[f"{tag}_attn_out"] = y.detach()
        X = self._hc_post(a_post, a_C, y, X)
        f_pre, f_post, f_C = self._hc_mix(X, blk.hc_ffn_fn, blk.hc_ffn_scale, blk.hc_ffn_base)
        x = self._hc_pre(a_pre, X)
        y = self._moe(blk.ffn, self._rmsnorm(x, blk.ffn_norm), trace, tag)
        if trace is not None:
            trace[f"{tag}_ffn_out"] = y.detach()
        X = self._hc_post(f_post, f_C, y, X)
        return X, f_pre

    # ---------------------------------------------------------------- MoE
    def _expert(self, e, xq, weight=None):
        lim = self.cfg["swiglu_limit"]
        g = self._bf(self._mm(xq, self._w(e.w1.weight)))
        u = self._bf(self._mm(xq, self._w(e.w3.weight)))
        u = torch.clamp(u, -lim, lim)
        g = torch.clamp(g, max=lim)
        h = self._silu(g) * u
        if weight is not None:
            h = h * weight.unsqueeze(-1)
        h = self._aq(self._bf(h))
        return self._bf(self._mm(h, self._w(e.w2.weight)))

    def _moe(self, ffn, x, trace=None, tag=None):
        shp = x.shape
        xf = x.reshape(-1, shp[-1])
        logits = self._mm(xf, self._w(ffn.gate.weight))
        s = torch.sqrt(self._softplus(logits))
        biased = (s + ffn.gate.bias).detach()
        # (score + bias) descending, ties to the lower expert id.
        idx = torch.sort(biased, dim=-1, descending=True, stable=True).indices[:, : ffn.top_k]
        sw = torch.gather(s, 1, idx)
        w = sw / (self._sum(sw, -1, keepdim=True) + 1e-20) * self.cfg["route_scale"]
        if trace is not None:
            lt = tag.replace("layer", "L")
            trace[f"gate_idx_{lt}"] = idx.reshape(*shp[:-1], -1)
            trace[f"gate_w_{lt}"] = w.detach().reshape(*shp[:-1], -1)
        xq = self._aq(xf)
        y = torch.zeros_like(xf)
        for e in range(ffn.n_experts):
            rows, slot = (idx == e).nonzero(as_tuple=True)
            if rows.numel() == 0:
                continue
            y = y.index_add(0, rows, self._expert(ffn.experts[e], xq[rows], w[rows, slot]))
        if ffn.shared_experts is not None:
            y = y + self._expert(ffn.shared_experts, xq)
        return self._bf(y).reshape(shp)

    # ---------------------------------------------------------------- attention
    def _attend(self, qh, kv_parts, masks, sink, slots=None):
        """Softmax attention over the concatenated key sets with the sink in the denominator, as the
        reference's sparse_attn. qh [..., H, Tq, hd]; kv_parts[i] [..., 1, n_i, hd] (keys = values);
        masks[i] bool, broadcastable to [..., H, Tq, n_i] (False = not attended). Returns
        [..., H, Tq, hd]. Exact mode follows the kernel's online softmax over chunks of 64 slots
        (slots[i]: each entry's slot index in the kernel's entry list, broadcastable like masks;
        None = all in one chunk), each chunk's probabilities taken against the running max and
        rounded to bf16 for PV, the sink added after the loop."""
        scale = self.cfg["head_dim"] ** -0.5
        s = torch.cat([self._matmul(qh, kv.transpose(-1, -2)).mul(scale).masked_fill(~mk, NEG_INF)
                       for kv, mk in zip(kv_parts, masks)], -1)
        V = torch.cat(kv_parts, -2)
        sk = sink.reshape(*([1] * (s.dim() - 3)), -1, 1, 1)
        if not self._exact or slots is None:
            m = s.amax(-1, keepdim=True).detach()
            p = self._exp(s - m)
            denom = self._sum(p, -1, keepdim=True) + self._exp(sk - m)
            o = self._matmul(self._bf(p), V)  # bf16 probabilities for PV
            return self._bf(o / denom)
        lead = s.shape[:-1]
        slot = torch.cat([torch.broadcast_to(sl, (*lead, mk.shape[-1])) for sl, mk in zip(slots, masks)], -1)
        running = torch.full_like(s[..., :1], -1e30)
        denom = torch.zeros_like(running)
        acc = 0
        for ch in range(int(slot.max()) // 64 + 1):
            inc = (slot // 64 == ch) & (s > NEG_INF)
            sc = s.masked_fill(~inc, NEG_INF)
            prev = running
            running = torch.maximum(prev, sc.amax(-1, keepdim=True))
            rescale = self._exp(prev - running)
            p = self._exp(sc - running)
            denom = denom * rescale + self._sum(p, -1, keepdim=True)
            acc = acc * rescale + self._matmul(self._bf(p), V)
        denom = denom + self._exp(sk - running)
        return self._bf(acc / denom)

    def _attn_out(self, a, o, cos, sin):
        """o [.., H, hd] at the query positions -> inverse RoPE -> grouped wo_a -> wo_b."""
        c = self.cfg
        G, R = c["o_groups"], c["o_lora_rank"]
        o = self._rope(o, cos.unsqueeze(-2), sin.unsqueeze(-2), inverse=True)
        og = o.reshape(*o.shape[:-2], G, -1)
        wo_a = self._w(a.wo_a.weight).reshape(G, R, -1)  # the converter's bf16 copy: no act quant
        z = self._bf(self._einsum("...gi,gri->...gr", og, wo_a)).flatten(-2)
        return self._fp8_linear(z, a.wo_b)

    def _q_kv(self, a, xn, cos, sin):
        c = self.cfg
        qr = self._rmsnorm(self._fp8_linear(xn, a.wq_a), a.q_norm)
        q = self._fp8_linear(qr, a.wq_b).reshape(*xn.shape[:-1], c["n_heads"], c["head_dim"])
        q = self._rope(q, cos.unsqueeze(-2), sin.unsqueeze(-2))
        kv = self._window_kv(a, xn, cos, sin)
        return qr, q, kv

    def _window_kv(self, a, x, cos, sin):
        kv = self._rmsnorm(self._fp8_linear(x, a.wkv), a.kv_norm)
        return self._aq(self._rope(kv, cos, sin))  # E4M3 over all head_dim channels

    def _compress(self, blk, xn, T):
        """Kv source: the compressed latents (RoPE'd, the attention's KV) and the index keys
        [B, Nc, .] for entries j = 0..T//ratio-1 at positions j*ratio."""
        a, c, r = blk.attn, self.cfg, blk.ratio
        B = xn.shape[0]
        hd = c["head_dim"]
        Nc = T // r
        comp = a.compressor
        if r == 1:
            lat = self._rmsnorm(self._bf16_linear(xn, comp.wkv, True), comp.norm)
        else:
            kv = self._bf16_linear(xn[:, : Nc * r], comp.wkv, False).reshape(B, Nc, r, hd)
            sc = self._bf16_linear(xn[:, : Nc * r], comp.wgate, False).reshape(B, Nc, r, hd)
            e = self._exp(sc - sc.amax(2, keepdim=True))
            pooled = self._bf(self._sum(kv * (e / self._sum(e, 2, keepdim=True)), 2))
            lat = self._rmsnorm(pooled, comp.norm)
        cos, sin = self._rope_tables("compressed", max(1, (Nc - 1) * r + 1))
        cos, sin = cos[:: r][:Nc], sin[:: r][:Nc]
        keys = self._rmsnorm(self._bf16_linear(lat, a.indexer.wk, True), a.indexer.k_norm)
        keys = self._fp4q(self._rope(keys, cos, sin), 32, False)
        lat = self._fp4q(self._rope(lat, cos, sin), 16, True)
        return lat, keys

    def _indexer(self, blk, xn, qr, keys, ctx, trace):
        """The top-k selection of an index source: a bool mask [B, T, Nc] of the compressed entries
        each query attends to."""
        a, c, r = blk.attn, self.cfg, blk.ratio
        B, T = xn.shape[:2]
        Nc = keys.shape[1]
        nh, ihd = c["index_n_heads"], c["index_head_dim"]
        k = min(c["index_topk"], Nc)
        t = torch.arange(T)
        visible = torch.arange(Nc)[None, :] < ((t + 1) // r)[:, None]  # [T, Nc]
        with torch.set_grad_enabled(torch.is_grad_enabled() and self.indexer_grad):
            cos, sin = self._rope_tables("compressed", T)
            qi = self._fp8_linear(qr, a.indexer.wq_b).reshape(B, T, nh, ihd)
            qi = self._fp4q(self._rope(qi, cos[:, None], sin[:, None]), 32, False)
            w = self._bf16_linear(xn, a.indexer.weights_proj, True)
            w = self._bf(w * (ihd ** -0.5 * nh ** -0.5))
            dots = self._bf(self._einsum("bthd,bnd->bthn", qi, keys))
            if self._ref:  # per-head bf16 products, then the bf16 sum over heads
                score = self._bf(self._sum(self._bf(torch.relu(dots) * w.unsqueeze(-1)), 2))
            else:
                score = torch.einsum("bthn,bth->btn", torch.relu(dots), w)
            score = score.masked_fill(~visible, NEG_INF)
            if trace is not None:  # differentiable when indexer_grad (for an auxiliary loss)
                trace[f"index_scores_L{blk.layer}"] = score if self.indexer_grad else score.detach()
        score = score.detach()
        if blk.candidate_source:
            bs = c["candidate_block_size"]
            nb = -(-Nc // bs)
            padded = F.pad(score, (0, nb * bs - Nc), value=NEG_INF)
            block = padded.reshape(B, T, nb, bs).amax(-1)
            vis = (t + 1) // r
            newest = torch.clamp((vis - 1) // bs, min=0)
            pin = F.one_hot(newest, nb).bool() & (vis > 0)[:, None]
            block = block.masked_fill(pin, float("inf"))
            kb = min(c["candidate_topk_blocks"], nb)
            top = torch.sort(block, dim=-1, descending=True, stable=True).indices[..., :kb]
            chosen = torch.zeros(B, T, nb, dtype=torch.bool).scatter_(-1, top, True)
            chosen &= block > NEG_INF
            ctx["candidates"] = chosen.repeat_interleave(bs, -1)[..., :Nc]
            if trace is not None:
                trace[f"candidates_L{blk.layer}"] = ctx["candidates"]
        elif blk.uses_candidates:
            cand = ctx["candidates"]
            if cand.shape[-1] != Nc:
                raise RuntimeError(f"candidate pool does not cover layer {blk.layer}")
            score = score.masked_fill(~cand, NEG_INF)
        top = torch.sort(score, dim=-1, descending=True, stable=True).indices[..., :k]
        sel = torch.zeros(B, T, Nc, dtype=torch.bool).scatter_(-1, top, True) & visible
        if trace is not None:
            ids = torch.where(torch.gather(visible.expand(B, T, Nc), -1, top), top, torch.full_like(top, Nc))
            ids = torch.sort(ids, -1).values
            trace[f"topk_L{blk.layer}"] = torch.where(ids == Nc, torch.full_like(ids, -1), ids)
        return sel

    def _attention(self, blk, xn, ctx, trace):
        c = self.cfg
        a = blk.attn
        B, T = xn.shape[:2]
        win = c["window_size"]
        cos, sin = self._rope_tables("compressed" if blk.ratio > 0 else "window", T)
        qr, q, kv = self._q_kv(a, xn, cos, sin)
        if blk.ratio > 0:
            if blk.kv_source:
                ctx["comp"][blk.layer] = self._compress(blk, xn, T)
            if blk.index_source:
                keys = ctx["comp"][blk.kv_source_layer][1]
                ctx["sel"] = self._indexer(blk, xn, qr, keys, ctx, trace)
        qh = q.transpose(1, 2)  # [B, H, T, hd]
        t = torch.arange(T)
        band = (t[None, :] <= t[:, None]) & (t[None, :] > t[:, None] - win)  # window(t) = t-win+1..t
        kv_parts, masks = [kv.unsqueeze(1)], [band]
        # The kernel's entry list (for exact mode's 64-slot chunks): the window slots from
        # max(0, t-win+1) on, padded to min(T, win), then the selected entries ascending.
        slots = [t[None, :] - torch.clamp(t - win + 1, min=0)[:, None]]
        if blk.ratio > 0 and T // blk.ratio > 0:
            sel = ctx["sel"].unsqueeze(1)  # [B, 1, T, Nc]
            kv_parts.append(ctx["comp"][blk.kv_source_layer][0].unsqueeze(1))
            masks.append(sel)
            slots.append(min(T, win) + torch.cumsum(sel.long(), -1) - 1)
        o = self._attend(qh, kv_parts, masks, self._w(a.attn_sink), slots if self._exact else None)
        o = o.transpose(1, 2)  # [B, T, H, hd]
        return self._attn_out(a, o, cos, sin)

    # ---------------------------------------------------------------- Engram
    def engram_hashes(self, tokens):
        """Row ids [B, T, n_engram_layers, (max_ngram-1)*heads] (int64) of a prefill from 0."""
        tb = self._tables
        c = self.cfg
        tok = np.asarray(tokens.cpu() if isinstance(tokens, torch.Tensor) else tokens, np.int64)
        B, T = tok.shape
        ng, heads = c["engram_max_ngram_size"], c["engram_n_heads"]
        cm = tb["token_map"][tok]
        hist = [cm]
        for s in range(1, ng):
            h = np.full_like(cm, tb["pad"])
            h[:, s:] = cm[:, :-s] if s < T else h[:, s:]
            hist.append(h)
        out = np.zeros((B, T, len(self.engram_layers), (ng - 1) * heads), np.int64)
        with np.errstate(over="ignore"):
            for li in range(len(self.engram_layers)):
                m = tb["mult"][li].astype(np.uint64)
                rolling = hist[0].astype(np.uint64) * m[0]
                for n in range(1, ng):
                    rolling = rolling ^ (hist[n].astype(np.uint64) * m[n])
                    h = rolling.view(np.int64)
                    for k in range(heads):
                        col = (n - 1) * heads + k
                        out[:, :, li, col] = np.mod(h, tb["primes"][li, col]) + tb["offsets"][li, col]
        return torch.from_numpy(out)

    def _engram(self, e, X, rows):
        """X [B,T,4,D] += gate * V for one Engram layer; rows [B,T,cols]."""
        c = self.cfg
        D = c["dim"]
        emb = e.embed.weight[rows]  # [B,T,cols,head_dim]
        if self._fq:
            flat = emb.reshape(-1, emb.shape[-1])
            emb = _ste(flat, sio.fake_quant_fp8_t(flat.detach(), 1, 32)).reshape(emb.shape)
        emb = self._bf(emb).flatten(-2)
        kv = self._fp8_linear(emb, e.wkv)
        K = kv[..., : 4 * D].reshape(*kv.shape[:-1], 4, D)
        Vv = kv[..., 4 * D:]
        qk = self._w(e.q_weight) * self._w(e.k_weight)
        eps = c["norm_eps"]
        dot = self._sum(X * qk * K, -1)
        rs = self._rsqrt(self._mean(X * X, -1) + eps) * self._rsqrt(self._mean(K * K, -1) + eps)
        d = dot * rs * (D ** -0.5)
        gate = self._sigmoid(torch.copysign(torch.sqrt(torch.clamp(d.abs(), min=1e-6)), d))
        return self._bf(X + gate.unsqueeze(-1) * Vv.unsqueeze(-2))

    # ---------------------------------------------------------------- forward
    def _begin(self, fake_quant_weights, ref_rounding):
        self._fq = self.fake_quant_weights if fake_quant_weights is None else bool(fake_quant_weights)
        mode = self.ref_rounding if ref_rounding is None else ref_rounding
        self._ref = bool(mode)
        self._exact = mode == "exact"
        self._wq = {}

    def forward(self, tokens, fake_quant_weights=None, ref_rounding=None, trace=None,
                return_normed=False):
        """tokens LongTensor [B, T] (a prefill from position 0) -> (logits [B, T, V], main_hidden
        [B, T, len(dspark_target_layer_ids) * dim]). `trace` (a dict) receives the intermediates
        named as the golden data names them (layer{i}_out, ...), topk_L{l}, gate_idx_L{l}, ...
        With return_normed the first output is the head's input (the final norm's output
        [B, T, dim]) instead of the logits, for a loss that applies the head itself."""
        self._begin(fake_quant_weights, ref_rounding)
        try:
            return self._forward(tokens, trace, return_normed)
        finally:
            self._wq = None

    def _forward(self, tokens, trace, return_normed=False):
        c = self.cfg
        B, T = tokens.shape
        D = c["dim"]
        X = self._rows(self.embed.weight, tokens)
        if trace is not None:
            trace["embed_out"] = X.detach()
        X = X.unsqueeze(-2).expand(B, T, 4, D)
        pre = F.one_hot(torch.zeros(B, T, dtype=torch.long), 4).float()
        hashes = None
        if self.engram_layers:
            hashes = self.engram_hashes(tokens)
            if trace is not None:
                trace["engram_hash_ids"] = hashes
        targets = list(c.get("dspark_target_layer_ids", []))
        saved = {}
        ctx = {"comp": {}, "sel": None, "candidates": None}
        for l, blk in enumerate(self.layers):
            if hasattr(blk, "engram"):
                X = self._engram(blk.engram, X, hashes[:, :, self.engram_layers.index(l)])
                if trace is not None:
                    trace[f"layer{l}_engram_out"] = X.detach()
            if l in targets:
                saved[l] = self._bf(self._mean(X, -2))
            X, pre = self._block(blk, X, pre, lambda xn, blk=blk: self._attention(blk, xn, ctx, trace),
                                 trace, f"layer{l}" if trace is not None else None)
            if trace is not None:
                trace[f"layer{l}_out"] = X.detach()
                trace[f"layer{l}_pre_mix"] = pre.detach()
        h = self._hc_pre(pre, X)
        hn = self._rmsnorm(h, self.norm)
        logits = hn if return_normed else self._mm(hn, self._w(self.head.weight))
        main_hidden = torch.cat([saved[l] for l in targets], -1) if targets else h.new_zeros(B, T, 0)
        if trace is not None:
            trace["final_hidden"] = h.detach()
            trace["final_norm_out"] = hn.detach()
            trace["main_hidden"] = main_hidden.detach()
        return logits, main_hidden

    # ---------------------------------------------------------------- DSpark
    def dspark(self, main_hidden, block_tokens, anchors=None, fake_quant_weights=None, ref_rounding=None):
        """The DSpark draft stages in training form. For each anchor p (default every position
        0..T-1) the block is [token_p, noise x (block-1)] at positions p+1..p+block; each stage's
        attention sees its ring (the window KV of main_x over main positions max(0, p-window+1)..p)
        and all block entries (bidirectional in the block), exactly as the reference's forward_spec
        after the main sequence has run up to position p.

        main_hidden [B, T, n_targets*dim] (forward's second output). block_tokens: [B, T] (token_p
        at column p), or with `anchors` [B, A] one per anchor (a [B, T] tensor is indexed by the
        anchors when T != A). anchors: LongTensor [A] of positions (shared by the batch).
        Returns (logits [B, A, block, V] without the Markov bias, hidden [B, A, block, dim] before
        the mtp norm)."""
        self._begin(fake_quant_weights, ref_rounding)
        try:
            return self._dspark(main_hidden, block_tokens, anchors)
        finally:
            self._wq = None

    def _dspark(self, main_hidden, block_tokens, anchors):
        c = self.cfg
        B, T, _ = main_hidden.shape
        D, win = c["dim"], c["window_size"]
        nb = c["dspark_block_size"]
        if anchors is None:
            anchors = torch.arange(T)
            tok0 = block_tokens
        else:
            anchors = torch.as_tensor(anchors, dtype=torch.long)
            tok0 = block_tokens if block_tokens.shape[1] == anchors.numel() else block_tokens[:, anchors]
        A = anchors.numel()
        toks = torch.cat([tok0.reshape(B, A, 1), torch.full((B, A, nb - 1), c["dspark_noise_token_id"],
                                                            dtype=torch.long)], -1)
        pos = anchors[:, None] + 1 + torch.arange(nb)[None, :]  # [A, nb]
        cos_all, sin_all = self._rope_tables("window", max(T, int(pos.max()) + 1))
        cos_b, sin_b = cos_all[pos], sin_all[pos]  # [A, nb, rd/2]
        cos_m, sin_m = cos_all[:T], sin_all[:T]
        m0 = self.mtp[0]
        main_x = self._rmsnorm(self._fp8_linear(main_hidden, m0.main_proj), m0.main_norm)
        ring_idx = anchors[:, None] - win + 1 + torch.arange(win)[None, :]  # [A, win]
        ring_ok = ring_idx >= 0
        ring_idx = ring_idx.clamp(min=0)
        X = self._rows(self.embed.weight, toks).unsqueeze(-2).expand(B, A, nb, 4, D)
        pre = F.one_hot(torch.zeros(B, A, nb, dtype=torch.long), 4).float()

        def attn(blk, xn):  # xn [B, A, nb, D]
            a = blk.attn
            _, q, kv = self._q_kv(a, xn, cos_b, sin_b)  # q [B,A,nb,H,hd], kv [B,A,nb,hd]
            ring = self._window_kv(a, main_x, cos_m, sin_m)[:, ring_idx]  # [B, A, win, hd]
            qh = q.transpose(2, 3)  # [B, A, H, nb, hd]
            # The ring's filled slots and every block entry (<= window + block entries: one chunk).
            o = self._attend(qh, [ring.unsqueeze(2), kv.unsqueeze(2)],
                             [ring_ok[None, :, None, None, :], torch.ones(1, dtype=torch.bool)],
                             self._w(a.attn_sink))
            return self._attn_out(a, o.transpose(2, 3), cos_b, sin_b)

        for blk in self.mtp:
            X, pre = self._block(blk, X, pre, lambda xn, blk=blk: attn(blk, xn))
        last = self.mtp[-1]
        hidden = self._hc_pre(pre, X)
        logits = self._mm(self._rmsnorm(hidden, last.norm), self._w(self.head.weight))
        return logits, hidden

    def markov_bias(self, prev_tokens, fake_quant_weights=None, ref_rounding=None):
        """The DSpark Markov bias [..., V] of the previous tokens: markov_head · markov_embed[prev]."""
        self._begin(fake_quant_weights, ref_rounding)
        try:
            mh = self.mtp[-1].markov_head
            return self._mm(self._rows(mh.embed.weight, prev_tokens), self._w(mh.head.weight))
        finally:
            self._wq = None

    def confidence_logit(self, hidden, prev_tokens, fake_quant_weights=None, ref_rounding=None):
        """The confidence logit [...] of a draft: proj · [hidden (before the mtp norm),
        markov_embed[prev]] (no sigmoid)."""
        self._begin(fake_quant_weights, ref_rounding)
        try:
            last = self.mtp[-1]
            x = torch.cat([hidden, self._rows(last.markov_head.embed.weight, prev_tokens)], -1)
            return self._mm(x, self._w(last.confidence_head.proj.weight))[..., 0]
        finally:
            self._wq = None

    def draft_greedy(self, logits_no_bias, first_prev, ref_rounding=None):
        """Sequential greedy drafting as forward_spec does: ids [.., block] where draft k is the
        argmax of logits_k + markov_bias(previous id), the previous of draft 0 being first_prev."""
        prev = first_prev
        ids = []
        for k in range(logits_no_bias.shape[-2]):
            lk = logits_no_bias[..., k, :] + self.markov_bias(prev, ref_rounding=ref_rounding)
            prev = lk.argmax(-1)
            ids.append(prev)
        return torch.stack(ids, -1)
