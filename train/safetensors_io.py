"""Dependency-free safetensors I/O and the V4.1 quantisation codecs (numpy + torch).

Formats (shared/spec/model-v41.md §7.1, golden README "Checkpoint layout"):
  - FP8 weight: F8_E4M3 codes with F8_E8M0 (UE8M0) scales, one per 32x32 block (Engram tables: one
    per 1x32 block of a row); value = e4m3 * 2^(scale_byte - 127) (the scale is multiplied).
  - FP4 routed-expert weight: an I8 tensor [out, in/2] holding two E2M1 codes per byte (low nibble
    = even element; magnitudes {0, .5, 1, 1.5, 2, 3, 4, 6}, bit 3 = sign) with F8_E8M0 scales
    [out, in/32].
  - BF16, F32 and the integer types are stored as is.

Decoders are exact. Encoders choose, per block, the UE8M0 scale 2^ceil(log2(amax / fmax)) (fmax =
448 for E4M3, 6 for E2M1; amax / fmax computed in fp32) and round to nearest, ties to even,
saturating; fp32 -> bf16 is round-to-nearest-even.

Public API:
  read_safetensors(path) -> (header: dict name -> {dtype, shape, data_offsets}, arrays: dict name ->
      numpy array in its storage representation (uint16 for BF16, uint8 for F8_*, int8 for I8, ...))
  write_safetensors(path, entries: list of (name, dtype, shape, numpy array), metadata=None,
      header_bytes=None)
  decode_tensor(name, header, arrays) / load_checkpoint(dir) -> (config dict, {name: fp32 tensor})
  write_checkpoint(dir, tensors_fp32, template_dir)
  codecs: bf16_to_f32, f32_to_bf16, e4m3_to_f32, f32_to_e4m3, e8m0_to_f32, e2m1_to_f32,
      f32_to_e2m1, dequant_fp8, quant_fp8, dequant_fp4, quant_fp4 (numpy), and the torch
      fake-quantisers round_e4m3_t, round_e2m1_t, fake_quant_fp8_t, fake_quant_fp4_t, round_bf16_t.
"""
import json
import mmap
import os
import shutil
import struct

import numpy as np
import torch

# ---------------------------------------------------------------------------------------------
# safetensors container

_NP_DTYPES = {
    "BF16": np.uint16, "F16": np.float16, "F32": np.float32, "F64": np.float64,
    "F8_E4M3": np.uint8, "F8_E8M0": np.uint8, "I8": np.int8, "U8": np.uint8, "I16": np.int16,
    "I32": np.int32, "I64": np.int64, "BOOL": np.bool_,
}
_SIZES = {k: np.dtype(v).itemsize for k, v in _NP_DTYPES.items()}


def read_header(path):
    """(header dict without __metadata__, metadata dict or None, raw header bytes, data start)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        raw = f.read(n)
    hdr = json.loads(raw.decode("utf-8"))
    meta = hdr.pop("__metadata__", None)
    return hdr, meta, raw, 8 + n


def read_safetensors(path):
    """Header and every tensor as a numpy array in storage representation (read-only views of a
    memory map, so large files are not read until touched)."""
    hdr, meta, _, start = read_header(path)
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    arrays = {}
    for name, spec in hdr.items():
        dt = spec["dtype"]
        if dt not in _NP_DTYPES:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {dt}")
        b, e = spec["data_offsets"]
        count = int(np.prod(spec["shape"], dtype=np.int64))
        if e - b != count * _SIZES[dt]:
            raise ValueError(f"{path}: tensor {name}: {e - b} bytes for {count} x {dt}")
        a = np.frombuffer(mm, dtype=_NP_DTYPES[dt], count=count, offset=start + b)
        arrays[name] = a.reshape(spec["shape"])
    return hdr, arrays


def write_safetensors(path, entries, metadata=None, header_bytes=None):
    """entries: list of (name, dtype string, shape, numpy array with the storage bytes). Data is
    laid out in list order. `header_bytes`, when given, is written verbatim instead of a freshly
    serialised header (it must describe exactly this layout)."""
    hdr = {}
    if metadata is not None:
        hdr["__metadata__"] = metadata
    off = 0
    for name, dt, shape, arr in entries:
        n = int(np.prod(shape, dtype=np.int64)) * _SIZES[dt]
        if arr.nbytes != n:
            raise ValueError(f"{name}: {arr.nbytes} bytes for shape {shape} {dt}")
        hdr[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    if header_bytes is None:
        raw = json.dumps(hdr, separators=(",", ":")).encode("utf-8")
        raw += b" " * (-len(raw) % 8)
    else:
        raw = header_bytes
        chk = json.loads(raw.decode("utf-8"))
        for name, spec in hdr.items():
            if name != "__metadata__" and chk.get(name) != spec:
                raise ValueError(f"template header disagrees on {name}")
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for _, _, _, arr in entries:
            f.write(np.ascontiguousarray(arr).tobytes())
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------
# scalar formats (numpy)

def _e4m3_table():
    t = np.zeros(256, np.float32)
    for b in range(256):
        s, e, m = b >> 7, (b >> 3) & 0xF, b & 7
        if e == 0xF and m == 7:
            v = np.nan
        elif e == 0:
            v = np.ldexp(float(m), -9)
        else:
            v = np.ldexp(1.0 + m / 8.0, e - 7)
        t[b] = -v if s else v
    return t


E4M3_TABLE = _e4m3_table()
E2M1_TABLE = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0.0, -.5, -1, -1.5, -2, -3, -4, -6], np.float32)
E8M0_TABLE = np.array([np.ldexp(1.0, b - 127) for b in range(255)] + [np.nan], np.float32)
E8M0_TABLE[0] = np.float32(2.0 ** -127)


def bf16_to_f32(u16):
    return (np.asarray(u16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x):
    """fp32 -> bf16 bits, round to nearest even (NaN kept quiet)."""
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    r = ((b >> 16) & 1) + np.uint32(0x7FFF)
    out = ((b + r) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(x, np.float32))
    if nan.any():
        out[nan] = ((b[nan] >> 16) | 0x40).astype(np.uint16)
    return out


def e4m3_to_f32(u8):
    return E4M3_TABLE[np.asarray(u8, np.uint8)]


def e8m0_to_f32(u8):
    return E8M0_TABLE[np.asarray(u8, np.uint8)]


def e2m1_to_f32(code):
    return E2M1_TABLE[np.asarray(code, np.uint8) & 0xF]


def round_e4m3(a):
    """fp32 values -> nearest E4M3 value (ties to even), saturating at +-448 (numpy, exact)."""
    a = np.asarray(a, np.float32)
    mag = np.abs(a)
    _, e = np.frexp(mag)  # mag = f * 2^e, f in [0.5, 1)
    e = np.maximum(e.astype(np.int32) - 1, -6)
    step = np.ldexp(np.float32(1), e - 3).astype(np.float32)
    q = (np.rint(mag / step) * step).astype(np.float32)  # rint: ties to even
    q = np.minimum(q, np.float32(448))
    return np.copysign(q, a).astype(np.float32)


def f32_to_e4m3(v):
    """E4M3 values (already on the grid) -> code bytes; the sign bit follows signbit (so -0 ->
    0x80)."""
    v = np.asarray(v, np.float32)
    sign = np.signbit(v).astype(np.uint8) << 7
    mag = np.abs(v)
    _, e = np.frexp(mag)
    e = e.astype(np.int32) - 1
    normal = mag >= np.float32(2.0 ** -6)
    en = np.where(normal, e, 0)
    man_n = np.rint(mag / np.ldexp(np.float32(1), en - 3) - 8).astype(np.int32)
    code_n = ((en + 7) << 3) | man_n
    code_s = np.rint(mag / np.float32(2.0 ** -9)).astype(np.int32)
    code = np.where(normal, code_n, code_s).astype(np.uint8)
    return code | sign


def round_e2m1(a):
    """fp32 -> nearest E2M1 value, ties to the even code, saturating at +-6 (as the kernels)."""
    a = np.asarray(a, np.float32)
    m = np.abs(a)
    q = np.select([m > 5, m >= 3.5, m > 2.5, m >= 1.75, m > 1.25, m >= 0.75, m > 0.25],
                  [6, 4, 3, 2, 1.5, 1, 0.5], 0).astype(np.float32)
    return np.copysign(q, a).astype(np.float32)


def f32_to_e2m1(v):
    """E2M1 values (on the grid) -> 4-bit codes (sign from signbit)."""
    v = np.asarray(v, np.float32)
    mag = np.abs(v)
    code = np.searchsorted(E2M1_TABLE[:8], mag).astype(np.uint8)
    return code | (np.signbit(v).astype(np.uint8) << 3)


def pow2_scale_exponent(amax, fmax):
    """k with 2^k = 2^ceil(log2(amax / fmax)) (amax / fmax in fp32), clamped to UE8M0's range;
    an all-zero block gets the smallest exponent that the generators use (2^-120)."""
    v = np.maximum(np.asarray(amax, np.float32) / np.float32(fmax), np.float32(2.0 ** -120))
    f, e = np.frexp(v)
    k = np.where(f == 0.5, e - 1, e).astype(np.int32)
    return np.clip(k, -126, 127)


# ---------------------------------------------------------------------------------------------
# block-quantised tensors (numpy)

def _blocks(shape, br, bc):
    return -(-shape[0] // br), -(-shape[1] // bc)


def dequant_fp8(w_u8, s_u8, block_rows=32, block_cols=32):
    w = e4m3_to_f32(w_u8)
    s = e8m0_to_f32(s_u8)
    s = np.repeat(np.repeat(s, block_rows, 0), block_cols, 1)[: w.shape[0], : w.shape[1]]
    return (w * s).astype(np.float32)


def _block_amax(x, br, bc):
    R, C = x.shape
    nr, nc = _blocks(x.shape, br, bc)
    pad = np.zeros((nr * br, nc * bc), np.float32)
    pad[:R, :C] = np.abs(x)
    return pad.reshape(nr, br, nc, bc).max(axis=(1, 3))


def _prefer_hint(k, hint_u8, exact_under):
    """Per block: keep the hinted scale exponent (a template's) where it is the other valid choice
    (k + 1: the block's amax is exactly half the format's range under it, so the ceil rule picks k)
    and encodes the block exactly; elsewhere the ceil rule's k."""
    if hint_u8 is None:
        return k
    kh = np.asarray(hint_u8, np.int32) - 127
    use = (kh == k + 1) & exact_under(kh)
    return np.where(use, kh, k)


def quant_fp8(x, block_rows=32, block_cols=32, hint_scale=None):
    """fp32 [rows, cols] -> (E4M3 codes uint8 [rows, cols], UE8M0 scales uint8 [nr, nc]).

    The scale is 2^ceil(log2(amax / 448)). A block whose amax is exactly 224 * 2^j has two exact
    encodings (scale 2^(j-1) with top code 448, or 2^j with top code 224) that decode to the same
    values; `hint_scale` (uint8, e.g. the template checkpoint's) picks the second where it is exact,
    so unchanged weights re-encode to their original bytes."""
    x = np.asarray(x, np.float32)
    k = pow2_scale_exponent(_block_amax(x, block_rows, block_cols), 448.0)

    def exact_under(kh):
        s = np.ldexp(np.float32(1), kh).astype(np.float32)
        se = np.repeat(np.repeat(s, block_rows, 0), block_cols, 1)[: x.shape[0], : x.shape[1]]
        y = x / se
        ok = (round_e4m3(y) == y) & (y * se == x)
        R, C = x.shape
        nr, nc = s.shape
        pad = np.ones((nr * block_rows, nc * block_cols), bool)
        pad[:R, :C] = ok
        return pad.reshape(nr, block_rows, nc, block_cols).all(axis=(1, 3))

    k = _prefer_hint(k, hint_scale, exact_under)
    s = np.ldexp(np.float32(1), k).astype(np.float32)
    se = np.repeat(np.repeat(s, block_rows, 0), block_cols, 1)[: x.shape[0], : x.shape[1]]
    q = round_e4m3(x / se)
    return f32_to_e4m3(q), (k + 127).astype(np.uint8)


def dequant_fp4(w_i8, s_u8):
    """I8 [out, in/2] packed E2M1 (low nibble = even element) + UE8M0 [out, in/32] -> fp32 [out, in]."""
    b = np.asarray(w_i8).view(np.uint8)
    out = np.empty((b.shape[0], b.shape[1] * 2), np.float32)
    out[:, 0::2] = E2M1_TABLE[b & 0xF]
    out[:, 1::2] = E2M1_TABLE[b >> 4]
    s = np.repeat(e8m0_to_f32(s_u8), 32, 1)[:, : out.shape[1]]
    return (out * s).astype(np.float32)


def quant_fp4(x, hint_scale=None):
    """fp32 [out, in] -> (packed int8 [out, in/2], UE8M0 scales uint8 [out, in/32]); scale
    2^ceil(log2(amax / 6)); `hint_scale` as in quant_fp8 (amax exactly 3 * 2^j is ambiguous)."""
    x = np.asarray(x, np.float32)
    R, C = x.shape
    k = pow2_scale_exponent(np.abs(x).reshape(R, C // 32, 32).max(-1), 6.0)

    def exact_under(kh):
        s = np.repeat(np.ldexp(np.float32(1), kh).astype(np.float32), 32, 1)
        y = x / s
        ok = (round_e2m1(y) == y) & (y * s == x)
        return ok.reshape(R, C // 32, 32).all(-1)

    k = _prefer_hint(k, hint_scale, exact_under)
    s = np.repeat(np.ldexp(np.float32(1), k).astype(np.float32), 32, 1)
    codes = f32_to_e2m1(round_e2m1(x / s))
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    return packed.view(np.int8), (k + 127).astype(np.uint8)


# ---------------------------------------------------------------------------------------------
# torch fake-quantisers (value -> value on the format's grid); used for weight QAT and for the
# optional reference-rounding emulation of activations. None of them carries a gradient by itself;
# callers wrap them in a straight-through estimator.

def round_bf16_t(x):
    return x.to(torch.bfloat16).to(torch.float32)


def round_e4m3_t(x):
    mag = x.abs()
    _, e = torch.frexp(mag)
    e = torch.clamp(e - 1, min=-6)
    step = torch.pow(2.0, (e - 3).to(torch.float32))
    q = torch.clamp(torch.round(mag / step) * step, max=448.0)  # torch.round: ties to even
    return torch.copysign(q, x)


def round_e2m1_t(x):
    m = x.abs()
    q = torch.zeros_like(m)
    for thr, val, strict in ((0.25, 0.5, True), (0.75, 1.0, False), (1.25, 1.5, True),
                             (1.75, 2.0, False), (2.5, 3.0, True), (3.5, 4.0, False),
                             (5.0, 6.0, True)):
        q = torch.where((m > thr) if strict else (m >= thr), torch.full_like(m, val), q)
    return torch.copysign(q, x)


def pow2_ceil_t(v):
    """2^ceil(log2(v)) for positive fp32 v (exact, via frexp)."""
    f, e = torch.frexp(v)
    k = torch.where(f == 0.5, e - 1, e)
    return torch.pow(2.0, k.to(torch.float32))


def fake_quant_fp8_t(w, block_rows=32, block_cols=32):
    """A weight [rows, cols] as the FP8 checkpoint stores it (32x32 or 1x32 UE8M0 blocks)."""
    R, C = w.shape
    nr, nc = -(-R // block_rows), -(-C // block_cols)
    pad = torch.zeros(nr * block_rows, nc * block_cols, dtype=w.dtype)
    pad[:R, :C] = w
    blk = pad.view(nr, block_rows, nc, block_cols)
    amax = blk.abs().amax(dim=(1, 3), keepdim=True)
    s = pow2_ceil_t(torch.clamp(amax / 448.0, min=2.0 ** -120))
    q = round_e4m3_t(blk / s) * s
    return q.view(nr * block_rows, nc * block_cols)[:R, :C]


def fake_quant_fp4_t(w):
    """A routed-expert weight [out, in] as the FP4 checkpoint stores it (UE8M0 per 32 along in)."""
    R, C = w.shape
    blk = w.reshape(R, C // 32, 32)
    s = pow2_ceil_t(torch.clamp(blk.abs().amax(-1, keepdim=True) / 6.0, min=2.0 ** -120))
    return (round_e2m1_t(blk / s) * s).reshape(R, C)


def act_quant_e4m3_t(x, block=32):
    """The reference's activation fake-quant `act_quant` (per `block` along the last dim:
    scale = 2^ceil(log2(max(amax, 1e-4) * fp32(1/448))), e4m3 RNE)."""
    shp = x.shape
    b = x.reshape(*shp[:-1], shp[-1] // block, block)
    amax = torch.clamp(b.abs().amax(-1, keepdim=True), min=1e-4)
    s = pow2_ceil_t(amax * torch.tensor(1.0 / 448.0, dtype=torch.float32))
    return (round_e4m3_t(b / s) * s).reshape(shp)


def act_quant_e2m1_t(x, block, e4m3_scale):
    """The reference's `fp4_act_quant`: E8M0 scales (blocks of 32; index q/k) or E4M3 scales
    e4m3(max(amax, 6*2^-9) / 6) (blocks of 16; the compressed KV)."""
    shp = x.shape
    b = x.reshape(*shp[:-1], shp[-1] // block, block)
    amax = b.abs().amax(-1, keepdim=True)
    if e4m3_scale:
        s = round_e4m3_t(torch.clamp(amax, min=6.0 * 2.0 ** -9) / 6.0)
    else:
        s = pow2_ceil_t(torch.clamp(amax, min=6.0 * 2.0 ** -126) *
                        torch.tensor(1.0 / 6.0, dtype=torch.float32))
    return (round_e2m1_t(torch.clamp(b / s, -6.0, 6.0)) * s).reshape(shp)


# ---------------------------------------------------------------------------------------------
# checkpoints

def checkpoint_files(d):
    """The safetensors files of a checkpoint folder (sharded with an index, or one file)."""
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        return [os.path.join(d, s) for s in shards]
    return [os.path.join(d, "model.safetensors")]


def read_checkpoint_raw(d):
    """(header, arrays) merged over every shard of the folder."""
    hdr, arrays = {}, {}
    for p in checkpoint_files(d):
        h, a = read_safetensors(p)
        for k in h:
            if k in hdr:
                raise ValueError(f"tensor {k} appears in two shards")
        hdr.update(h)
        arrays.update(a)
    return hdr, arrays


def scale_block_rows(weight_shape, scale_shape):
    """Rows per UE8M0 block of an FP8 weight: 1 for per-row scales (Engram tables), else 32."""
    return 1 if scale_shape[0] == weight_shape[0] and weight_shape[0] > 1 else 32


def decode_tensor(name, hdr, arrays):
    """The fp32 value of a non-scale tensor (numpy), dequantised with its `.scale` companion."""
    dt = hdr[name]["dtype"]
    a = arrays[name]
    base = name[: -len(".weight")] if name.endswith(".weight") else None
    sname = base + ".scale" if base is not None else None
    if dt == "F8_E4M3":
        s = arrays[sname]
        return dequant_fp8(a, s, scale_block_rows(a.shape, s.shape), 32)
    if dt == "I8" and sname in arrays and hdr[sname]["dtype"] == "F8_E8M0":
        return dequant_fp4(a, arrays[sname])
    if dt == "BF16":
        return bf16_to_f32(a)
    if dt in ("F32", "F16", "F64"):
        return np.asarray(a, np.float32)
    return np.array(a)  # integers as they are


def is_scale(name, hdr):
    if not name.endswith(".scale"):
        return False
    w = name[: -len(".scale")] + ".weight"
    return w in hdr and hdr[name]["dtype"] == "F8_E8M0"


def normalise_config(cfg):
    """The flat reference config (inference/config.json key names) from either spelling."""
    t = cfg.get("text_config", cfg)
    out = dict(t)
    alias = {
        "hidden_size": "dim", "num_hidden_layers": "n_layers", "num_nextn_predict_layers": "n_mtp_layers",
        "num_attention_heads": "n_heads", "qk_rope_head_dim": "rope_head_dim",
        "moe_intermediate_size": "moe_inter_dim", "num_experts_per_tok": "n_activated_experts",
        "scoring_func": "score_func", "routed_scaling_factor": "route_scale", "rms_norm_eps": "norm_eps",
        "sliding_window": "window_size", "kv_source_layer_ids": "kv_source_layers",
        "index_source_layer_ids": "index_source_layers", "candidate_source_layer_id": "candidate_source_layer",
        "engram_pad_token_id": "engram_pad_id", "dspark_num_experts_per_tok": "dspark_n_activated_experts",
    }
    for k, v in alias.items():
        if k in t and v not in out:
            out[v] = t[k]
    rs = t.get("rope_scaling")
    if isinstance(rs, dict):
        out.setdefault("rope_factor", rs.get("factor"))
        out.setdefault("beta_fast", rs.get("beta_fast"))
        out.setdefault("beta_slow", rs.get("beta_slow"))
        out.setdefault("original_seq_len", rs.get("original_max_position_embeddings"))
    if "image_token_id" in cfg:
        out["image_token_id"] = cfg["image_token_id"]
    out.setdefault("n_mtp_layers", 0)
    out.setdefault("n_shared_experts", 1)
    return out


def load_config(d):
    for p in (os.path.join(d, "inference", "config.json"), os.path.join(d, "config.json")):
        if os.path.exists(p):
            with open(p) as f:
                return normalise_config(json.load(f))
    raise FileNotFoundError(f"no config.json in {d}")


def load_checkpoint(d):
    """(flat config dict, {name: fp32 torch.Tensor}) with every FP8/FP4 weight dequantised and the
    `.scale` companions folded in (they are not returned)."""
    cfg = load_config(d)
    hdr, arrays = read_checkpoint_raw(d)
    out = {}
    for name in hdr:
        if is_scale(name, hdr):
            continue
        v = decode_tensor(name, hdr, arrays)
        out[name] = torch.from_numpy(np.array(v, copy=True))
    return cfg, out


# Copies the released checkpoints carry (the golden README, "Checkpoint layout"): filled from
# their source when the dict handed to write_checkpoint lacks them.
def alias_source(name, names):
    if name == "mtp.0.embed.weight":
        return "embed.weight"
    if name.startswith("mtp.") and name.endswith(".head.weight") and name.count(".") == 3:
        return "head.weight"
    return None


def encode_tensor(name, spec, scale_spec, value, hint_scale=None):
    """Storage arrays for one template tensor: [(name, dtype, shape, array)] (+ its scale, as
    (None, ...)). `hint_scale`: the template's scale bytes, to resolve ambiguous blocks."""
    dt, shape = spec["dtype"], spec["shape"]
    v = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
    if dt == "F8_E4M3":
        br = scale_block_rows(shape, scale_spec["shape"])
        v = v.astype(np.float32).reshape(shape)
        codes, scale = quant_fp8(v, br, 32, hint_scale)
        if list(scale.shape) != list(scale_spec["shape"]):
            raise ValueError(f"{name}: scale shape {scale.shape} vs template {scale_spec['shape']}")
        return [(name, dt, shape, codes), (None, "F8_E8M0", scale_spec["shape"], scale)]
    if dt == "I8" and scale_spec is not None:
        v = v.astype(np.float32).reshape(shape[0], shape[1] * 2)
        packed, scale = quant_fp4(v, hint_scale)
        return [(name, dt, shape, packed), (None, "F8_E8M0", scale_spec["shape"], scale)]
    if dt == "BF16":
        return [(name, dt, shape, f32_to_bf16(v.astype(np.float32).reshape(shape)))]
    if dt in ("F32", "F16", "F64", "I8", "U8", "I16", "I32", "I64", "BOOL"):
        return [(name, dt, shape, v.astype(_NP_DTYPES[dt]).reshape(shape))]
    raise ValueError(f"{name}: cannot encode dtype {dt}")


def write_checkpoint(d, tensors_fp32, template_dir, copy_aux=True, scale_hints=True):
    """Writes the checkpoint of `tensors_fp32` (name -> fp32 tensor, dequantised shapes, no .scale
    entries) to folder `d` with exactly the template's tensor names, dtypes, shapes, order and
    sharding: every tensor quantised to the template's dtype, scales recomputed. With copy_aux the
    template's config files and engram_tables.json are copied too, so the folder loads as is.
    With scale_hints the template's scale bytes resolve blocks with two exact encodings (see
    quant_fp8): an unchanged tensor is then written byte for byte as the template holds it."""
    os.makedirs(d, exist_ok=True)
    idx = os.path.join(template_dir, "model.safetensors.index.json")
    for path in checkpoint_files(template_dir):
        hdr, meta, raw, _ = read_header(path)
        tmpl = read_safetensors(path)[1] if scale_hints else {}
        order = sorted(hdr, key=lambda k: hdr[k]["data_offsets"][0])
        enc = {}
        for name in order:
            if is_scale(name, hdr):
                continue
            src = name if name in tensors_fp32 else alias_source(name, tensors_fp32)
            if src is None or src not in tensors_fp32:
                raise KeyError(f"write_checkpoint: no value for {name}")
            sname = name[: -len(".weight")] + ".scale" if name.endswith(".weight") else None
            sspec = hdr.get(sname) if sname is not None and sname in hdr and is_scale(sname, hdr) else None
            hint = tmpl.get(sname) if sspec is not None else None
            for ename, dt, shape, arr in encode_tensor(name, hdr[name], sspec, tensors_fp32[src], hint):
                enc[ename if ename is not None else sname] = (dt, shape, arr)
        entries = []
        for name in order:
            if name not in enc:
                raise KeyError(f"write_checkpoint: {name} was not produced")
            dt, shape, arr = enc[name]
            if dt != hdr[name]["dtype"] or list(shape) != list(hdr[name]["shape"]):
                raise ValueError(f"{name}: produced {dt} {shape}, template {hdr[name]}")
            entries.append((name, dt, shape, arr))
        write_safetensors(os.path.join(d, os.path.basename(path)), entries, meta, header_bytes=raw)
    if os.path.exists(idx):
        shutil.copyfile(idx, os.path.join(d, "model.safetensors.index.json"))
    if copy_aux:
        for rel in ("config.json", os.path.join("inference", "config.json"), "engram_tables.json"):
            src = os.path.join(template_dir, rel)
            dst = os.path.join(d, rel)
            if os.path.exists(src) and os.path.abspath(src) != os.path.abspath(dst):
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                shutil.copyfile(src, dst)
