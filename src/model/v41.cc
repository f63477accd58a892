#include "model/v41.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <numeric>
#include <sstream>
#include <thread>

#include "core/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/cpu_features.h"
#include "kernels/dot.h"
#include "kernels/gemv.h"
#include "kernels/markov.h"
#include "kernels/norm.h"
#include "kernels/quant.h"
#include "model/attention.h"
#include "model/engram.h"
#include "model/layout.h"
#include "model/mhc.h"
#include "model/moe.h"
#include "model/moe_gate.h"
#include "model/rope.h"
#include "model/safetensors.h"
#include "model/v41_internal.h"
#include "tokenizer/tokenizer.h"

namespace fathom::model {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
}

int64_t sequence_position(const SequenceState& s) { return s.pos; }
void destroy_sequence(SequenceState* s) { delete s; }

// ---------------------------------------------------------------------------------------
// Building blocks. `strict` is the canonical arithmetic of the golden data (double
// accumulation rounded once, double-evaluated transcendentals); `fast` keeps every rounding
// point and fake-quant but accumulates in fp32 in the AVX2 kernels, threaded. Shared with
// dspark.cc through v41_internal.h.

namespace detail {

// y [rows, W.rows] = bf16(W · fake_quant(x)) for x [rows, W.cols].
void fp8_linear(const Exec& ex, const kernels::Fp8Matrix& w, const float* x, int64_t rows,
                float* y) {
  const std::unique_ptr<float[]> xq(new float[size_t(rows * w.cols)]);
  if (ex.fast) {
    for_rows(ex, rows, [&](int64_t r) {
      kernels::cpu::fake_quant_e4m3(x + r * w.cols, w.cols, xq.get() + r * w.cols);
    });
    kernels::cpu::matmul_fp8(w, xq.get(), rows, y, ex.pool);
    for_rows(ex, rows, [&](int64_t r) {
      for (int64_t i = r * w.rows; i < (r + 1) * w.rows; ++i) y[i] = kernels::round_to_bf16(y[i]);
    });
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    kernels::ref::fake_quant_e4m3(x + r * w.cols, w.cols, xq.get() + r * w.cols);
    kernels::ref::matmul_fp8(w, xq.get() + r * w.cols, 1, y + r * w.rows,
                             kernels::OutRounding::kBF16);
  }
}

// y [rows, W.rows] = x · W^T with bf16 weights W [m, k]; rounded once to bf16 or fp32.
void linear(const Exec& ex, const float* x, const kernels::Bf16Matrix& w, int64_t rows,
            bool to_bf16, float* y) {
  if (ex.fast) {
    kernels::cpu::matmul_bf16(w, x, rows, y, ex.pool);
    if (to_bf16)
      for (int64_t i = 0; i < rows * w.rows; ++i) y[i] = kernels::round_to_bf16(y[i]);
    return;
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < w.rows; ++j) {
      double acc = 0;
      const uint16_t* wr = w.weight + j * w.cols;
      for (int64_t i = 0; i < w.cols; ++i)
        acc += double(kernels::bf16_to_float(wr[i])) * double(x[r * w.cols + i]);
      y[r * w.rows + j] = to_bf16 ? kernels::round_double_to_bf16(acc) : float(acc);
    }
}

void rmsnorm(const Exec& ex, const float* x, const std::vector<float>& w, int64_t rows, float eps,
             float* y) {
  const int64_t dim = int64_t(w.size());
  if (ex.fast)
    for_rows(ex, rows, [&](int64_t r) {
      kernels::cpu::rmsnorm_bf16(x + r * dim, w.data(), 1, dim, eps, y + r * dim);
    });
  else
    kernels::ref::rmsnorm_bf16(x, w.data(), rows, dim, eps, y);
}

}  // namespace detail

using detail::attention_inputs;
using detail::attention_output;
using detail::Exec;
using detail::fp8_linear;
using detail::linear;
using detail::mhc_block;
using detail::rmsnorm;
using detail::RowPositions;
using detail::window_kv;

namespace {

Result<std::vector<float>> bf16_values(const Checkpoint& ck, const std::string& name,
                                       const std::vector<int64_t>& shape) {
  FATHOM_ASSIGN_OR_RETURN(const TensorInfo* t, find_tensor(ck, name, DType::kBF16, shape));
  std::vector<float> v(t->elements());
  for (size_t i = 0; i < v.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, t->data + 2 * i, 2);
    v[i] = kernels::bf16_to_float(h);
  }
  return v;
}

Result<const float*> f32_view(const Checkpoint& ck, const std::string& name,
                              const std::vector<int64_t>& shape) {
  FATHOM_ASSIGN_OR_RETURN(const TensorInfo* t, find_tensor(ck, name, DType::kF32, shape));
  return reinterpret_cast<const float*>(t->data);
}

Result<kernels::Bf16Matrix> bf16_view(const Checkpoint& ck, const std::string& name, int64_t rows,
                                      int64_t cols) {
  FATHOM_ASSIGN_OR_RETURN(const TensorInfo* t, find_tensor(ck, name, DType::kBF16, {rows, cols}));
  return kernels::Bf16Matrix{reinterpret_cast<const uint16_t*>(t->data), rows, cols};
}

Result<kernels::Fp8Matrix> fp8(const Checkpoint& ck, const std::string& name, int64_t out,
                               int64_t in) {
  FATHOM_ASSIGN_OR_RETURN(const TensorInfo* w,
                          find_tensor(ck, name + ".weight", DType::kF8E4M3, {out, in}));
  FATHOM_ASSIGN_OR_RETURN(const TensorInfo* s, find_tensor(ck, name + ".scale", DType::kF8E8M0,
                                                           {(out + 31) / 32, (in + 31) / 32}));
  return kernels::Fp8Matrix{w->data, s->data, out, in};
}

// An FP8 weight dequantised and rounded to bf16, as the reference's converter does for wo_a.
std::vector<uint16_t> dequantize_bf16(const kernels::Fp8Matrix& m) {
  std::vector<uint16_t> v(static_cast<size_t>(m.rows * m.cols));
  const int64_t kb = (m.cols + 31) / 32;
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t c = 0; c < m.cols; ++c)
      v[size_t(r * m.cols + c)] =
          kernels::float_to_bf16(kernels::e4m3_to_float(m.weight[r * m.cols + c]) *
                                 kernels::e8m0_to_float(m.scale[(r / 32) * kb + c / 32]));
  return v;
}

Status bind_block(const ModelWeights& W, int id, bool mtp, BlockWeights* b) {
  const ModelConfig& c = W.cfg;
  const Checkpoint& ck = *W.ck;
  const std::string p =
      mtp ? "mtp." + std::to_string(id - c.n_layers) + "." : "layers." + std::to_string(id) + ".";
  const int64_t D = c.dim, hd = c.head_dim, H = c.n_heads, q = c.q_lora_rank;
  b->id = id;
  b->ratio = c.compress_ratios[size_t(id)];
  auto has = [](const std::vector<int64_t>& v, int64_t x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  };
  if (!mtp) {
    b->kv_source = has(c.kv_source_layers, id);
    b->index_source = has(c.index_source_layers, id);
    b->candidate_source = b->index_source && id == c.candidate_source_layer;
    b->uses_candidates =
        b->index_source && c.candidate_source_layer >= 0 && c.candidate_source_layer < id;
    if (b->ratio > 0) {
      for (int64_t l = id; l >= 0; --l)
        if (has(c.kv_source_layers, l)) {
          b->kv_source_layer = int(l);
          break;
        }
      if (b->kv_source_layer < 0 || c.compress_ratios[size_t(b->kv_source_layer)] != b->ratio)
        return invalid_argument("layer " + std::to_string(id) +
                                " reads compressed KV but no kv source of its ratio precedes it");
    }
  }
  FATHOM_ASSIGN_OR_RETURN(b->attn_norm, bf16_values(ck, p + "attn_norm.weight", {D}));
  FATHOM_ASSIGN_OR_RETURN(b->ffn_norm, bf16_values(ck, p + "ffn_norm.weight", {D}));
  const int64_t mix = (2 + c.hc_mult) * c.hc_mult;
  for (int site = 0; site < 2; ++site) {
    const std::string s = p + (site == 0 ? "hc_attn_" : "hc_ffn_");
    HcMixParams hp;
    FATHOM_ASSIGN_OR_RETURN(hp.fn, f32_view(ck, s + "fn", {mix, c.hc_mult * D}));
    FATHOM_ASSIGN_OR_RETURN(hp.scale, f32_view(ck, s + "scale", {3}));
    FATHOM_ASSIGN_OR_RETURN(hp.base, f32_view(ck, s + "base", {mix}));
    hp.hidden = D;
    hp.sinkhorn_iters = int(c.hc_sinkhorn_iters);
    hp.norm_eps = float(c.norm_eps);
    hp.sinkhorn_eps = float(c.hc_eps);
    (site == 0 ? b->hc_attn : b->hc_ffn) = hp;
  }
  AttentionWeights& a = b->attn;
  const std::string at = p + "attn.";
  FATHOM_ASSIGN_OR_RETURN(a.wq_a, fp8(ck, at + "wq_a", q, D));
  FATHOM_ASSIGN_OR_RETURN(a.wq_b, fp8(ck, at + "wq_b", H * hd, q));
  FATHOM_ASSIGN_OR_RETURN(a.wkv, fp8(ck, at + "wkv", hd, D));
  FATHOM_ASSIGN_OR_RETURN(auto wo_a,
                          fp8(ck, at + "wo_a", c.o_groups * c.o_lora_rank, H * hd / c.o_groups));
  a.wo_a_fp8 = wo_a;
  if (W.strict) a.wo_a = dequantize_bf16(wo_a);
  FATHOM_ASSIGN_OR_RETURN(a.wo_b, fp8(ck, at + "wo_b", D, c.o_groups * c.o_lora_rank));
  FATHOM_ASSIGN_OR_RETURN(a.q_norm, bf16_values(ck, at + "q_norm.weight", {q}));
  FATHOM_ASSIGN_OR_RETURN(a.kv_norm, bf16_values(ck, at + "kv_norm.weight", {hd}));
  FATHOM_ASSIGN_OR_RETURN(a.sink, f32_view(ck, at + "attn_sink", {H}));
  if (b->kv_source) {
    FATHOM_ASSIGN_OR_RETURN(a.c_wkv, bf16_view(ck, at + "compressor.wkv.weight", hd, D));
    if (b->ratio > 1) {
      FATHOM_ASSIGN_OR_RETURN(a.c_wgate, bf16_view(ck, at + "compressor.wgate.weight", hd, D));
    }
    FATHOM_ASSIGN_OR_RETURN(a.c_norm, bf16_values(ck, at + "compressor.norm.weight", {hd}));
    FATHOM_ASSIGN_OR_RETURN(a.i_wk, bf16_view(ck, at + "indexer.wk.weight", c.index_head_dim, hd));
    FATHOM_ASSIGN_OR_RETURN(a.i_knorm,
                            bf16_values(ck, at + "indexer.k_norm.weight", {c.index_head_dim}));
  }
  if (b->index_source) {
    FATHOM_ASSIGN_OR_RETURN(a.i_wq_b,
                            fp8(ck, at + "indexer.wq_b", c.index_n_heads * c.index_head_dim, q));
    FATHOM_ASSIGN_OR_RETURN(a.i_wproj,
                            bf16_view(ck, at + "indexer.weights_proj.weight", c.index_n_heads, D));
  }
  b->n_experts = int(mtp ? c.dspark_n_routed_experts : c.n_routed_experts);
  b->top_k = int(mtp ? c.dspark_n_activated_experts : c.n_activated_experts);
  FATHOM_ASSIGN_OR_RETURN(b->gate_w, bf16_values(ck, p + "ffn.gate.weight", {b->n_experts, D}));
  FATHOM_ASSIGN_OR_RETURN(b->gate_bias, f32_view(ck, p + "ffn.gate.bias", {b->n_experts}));
  FATHOM_ASSIGN_OR_RETURN(
      b->moe, moe_weights(ck, p + "ffn.", b->n_experts, D, c.moe_inter_dim, float(c.swiglu_limit)));
  return Status::ok();
}

// The k indices first under the golden tie rule (larger value first, equal values by lower
// index), in no particular order.
void top_k_indices(const float* v, int64_t n, int64_t k, std::vector<int32_t>* out) {
  out->resize(size_t(n));
  std::iota(out->begin(), out->end(), 0);
  // The order is total (ties by index), so the first k are one set however they are found;
  // callers use the set (in no particular order).
  if (k < n)
    std::nth_element(out->begin(), out->begin() + k, out->end(),
                     [&](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
  out->resize(size_t(k));
}

// Per-forward scratch shared between layers: the top-k of the latest index source and the
// candidate mask of the candidate source.
struct ForwardScratch {
  Exec ex;
  int64_t start = 0, T = 0;
  std::vector<int32_t> topk;  // [T, width], compressed positions or -1
  int64_t topk_width = 0;
  std::vector<uint8_t> candidates;  // [T, n] 1 = candidate
  int64_t candidates_n = 0;
};

}  // namespace

// ---------------------------------------------------------------------------------------
// Attention

namespace {

// The compressor of kv source `b` over the chunk's normed inputs: appends completed
// entries (RoPE-free latents) to `latents` with their entry index. The projections run once
// over all T rows.
void compress(const Exec& ex, const ModelWeights& W, const BlockWeights& b,
              SequenceState::Source& src, const float* xn, int64_t start, int64_t T,
              std::vector<float>* latents, std::vector<int64_t>* entry_ids) {
  const int64_t hd = W.cfg.head_dim, r = b.ratio;
  const float eps = float(W.cfg.norm_eps);
  const AttentionWeights& a = b.attn;
  std::vector<float> kv(static_cast<size_t>(T * hd));
  if (r == 1) {
    // Ratio 1: a bf16 linear and the norm; every token is an entry.
    linear(ex, xn, a.c_wkv, T, true, kv.data());
    latents->resize(size_t(T * hd));
    rmsnorm(ex, kv.data(), a.c_norm, T, eps, latents->data());
    for (int64_t t = 0; t < T; ++t) entry_ids->push_back(start + t);
    return;
  }
  // Ratio > 1: fp32 linears (the weights are promoted to fp32), the group's softmax over its
  // r tokens per channel in double, the weighted sum accumulated in double.
  std::vector<float> score(static_cast<size_t>(T * hd)), pooled(static_cast<size_t>(hd)),
      lat(static_cast<size_t>(hd));
  linear(ex, xn, a.c_wkv, T, false, kv.data());
  linear(ex, xn, a.c_wgate, T, false, score.data());
  if (src.kv_part.empty()) {
    src.kv_part.assign(size_t(r * hd), 0.0f);
    src.score_part.assign(size_t(r * hd), kNegInf);
  }
  for (int64_t t = 0; t < T; ++t) {
    const int64_t p = start + t, slot = p % r;
    std::copy_n(&kv[size_t(t * hd)], hd, src.kv_part.begin() + slot * hd);
    std::copy_n(&score[size_t(t * hd)], hd, src.score_part.begin() + slot * hd);
    if (src.logging) {
      src.undo_log.insert(src.undo_log.end(), &kv[size_t(t * hd)], &kv[size_t((t + 1) * hd)]);
      src.undo_log.insert(src.undo_log.end(), &score[size_t(t * hd)], &score[size_t((t + 1) * hd)]);
    }
    if ((p + 1) % r != 0) continue;
    for (int64_t ch = 0; ch < hd; ++ch) {
      float m = kNegInf;
      for (int64_t s = 0; s < r; ++s) m = std::max(m, src.score_part[s * hd + ch]);
      float e[16];
      double sum = 0;
      for (int64_t s = 0; s < r; ++s)
        sum += e[s] = float(std::exp(double(src.score_part[s * hd + ch] - m)));
      double acc = 0;
      for (int64_t s = 0; s < r; ++s) {
        const float prob = e[s] / float(sum);
        acc += double(src.kv_part[s * hd + ch] * prob);
      }
      pooled[size_t(ch)] = kernels::round_to_bf16(float(acc));
    }
    rmsnorm(ex, pooled.data(), a.c_norm, 1, eps, lat.data());
    latents->insert(latents->end(), lat.begin(), lat.end());
    entry_ids->push_back(p / r);
  }
}

// Index scores of one query row against `n` keys `stride` floats apart:
// Σ_h bf16(relu(bf16(q_h·k)) · w_h), accumulated in double and rounded to bf16.
void index_scores(const Exec& ex, const float* q, const float* w, const float* keys, int64_t n,
                  int64_t stride, int64_t heads, int64_t dim, float* out) {
  if (ex.fast) {
    for (int64_t j = 0; j < n; ++j) {
      float total = 0;
      for (int64_t h = 0; h < heads; ++h) {
        const float dot = kernels::dot_f32_lanes(q + h * dim, keys + j * stride, dim);
        total += kernels::round_to_bf16(std::max(kernels::round_to_bf16(dot), 0.0f) * w[h]);
      }
      out[j] = kernels::round_to_bf16(total);
    }
    return;
  }
  for (int64_t j = 0; j < n; ++j) {
    double total = 0;
    for (int64_t h = 0; h < heads; ++h) {
      double dot = 0;
      for (int64_t i = 0; i < dim; ++i)
        dot += double(q[h * dim + i]) * double(keys[j * stride + i]);
      const float s = std::max(kernels::round_double_to_bf16(dot), 0.0f);
      total += double(kernels::round_to_bf16(s * w[h]));
    }
    out[j] = kernels::round_double_to_bf16(total);
  }
}

// Kv source `b` over the chunk's normed inputs xn [T, dim] at positions start..: the
// compressor's completed entries (RoPE-free `latents`, entry indices `ids`) get a table row
// each, with their index keys written and published. Entries the table already holds (a
// replay over cached blocks) are dropped, so cached KV is never rewritten.
Status publish_entries(const Exec& ex, const ModelWeights& W, const BlockWeights& b,
                       SequenceState& st, const float* xn, int64_t start, int64_t T,
                       std::vector<float>* latents, std::vector<int64_t>* ids) {
  const ModelConfig& c = W.cfg;
  const int64_t hd = c.head_dim, ihd = c.index_head_dim, rd = c.rope_head_dim;
  SequenceState::Source& src = st.src[size_t(b.id)];
  compress(ex, W, b, src, xn, start, T, latents, ids);
  if (ids->empty()) return Status::ok();
  st.published_keys = b.id;
  if (!src.entries.initialised()) src.entries = kv::PagedRows(st.pool, hd + ihd);
  const int64_t have = src.entries.size();
  size_t skip = 0;
  while (skip < ids->size() && (*ids)[skip] < have) ++skip;
  if (skip > 0) {
    ids->erase(ids->begin(), ids->begin() + int64_t(skip));
    latents->erase(latents->begin(), latents->begin() + int64_t(skip) * hd);
  }
  const int64_t n = int64_t(ids->size());
  if (n == 0) return Status::ok();
  if ((*ids)[0] != have) return internal_error("compressed entries out of order");
  FATHOM_RETURN_IF_ERROR(src.entries.grow(n));
  // The new entries' index keys, from the RoPE-free latents, all at once.
  std::vector<float> key(static_cast<size_t>(n * ihd)), kn(static_cast<size_t>(n * ihd));
  linear(ex, latents->data(), b.attn.i_wk, n, true, key.data());
  rmsnorm(ex, key.data(), b.attn.i_knorm, n, float(c.norm_eps), kn.data());
  for (int64_t e = 0; e < n; ++e) {
    float* k = &kn[size_t(e * ihd)];
    W.rope_compressed->rotate(k + ihd - rd, (*ids)[size_t(e)] * b.ratio);
    (ex.fast ? kernels::cpu::fake_quant_e2m1 : kernels::ref::fake_quant_e2m1)(k, ihd, 32, false, k);
    std::copy_n(k, ihd, src.entries.row(have + e) + hd);
  }
  return Status::ok();
}

// The latents of publish_entries() rotated, FP4 fake-quantised and stored in their rows.
void store_latents(const Exec& ex, const ModelWeights& W, const BlockWeights& b, SequenceState& st,
                   const Rope& rope, std::vector<float>* latents, const std::vector<int64_t>& ids) {
  const int64_t hd = W.cfg.head_dim, rd = W.cfg.rope_head_dim;
  kv::PagedRows& rows = st.src[size_t(b.id)].entries;
  for (size_t e = 0; e < ids.size(); ++e) {
    float* lat = &(*latents)[e * size_t(hd)];
    rope.rotate(lat + hd - rd, ids[e] * b.ratio);
    (ex.fast ? kernels::cpu::fake_quant_e2m1 : kernels::ref::fake_quant_e2m1)(lat, hd, 16, true,
                                                                              lat);
    std::copy_n(lat, hd, rows.row(ids[e]));
  }
}

// The kv source whose index keys the reference's decode step at position `p` scores at
// layer `layer` (ModelOptions::own_index_keys false): the last source to have published an
// entry before that layer's indexer runs. In the step at `p` the sources at or below `layer`
// publish first (a source publishes when its group completes: (p + 1) % ratio == 0); before
// that, the steps at p - 1, p - 2, ... ; before `prompt_end`, the prompt's one-call prefill,
// whose last publisher is the last source that completed a group in it. -1 when none has.
int decode_key_layer(const ModelConfig& c, int64_t p, int64_t layer, int64_t prompt_end) {
  const auto& src = c.kv_source_layers;
  for (int64_t q = p; q >= prompt_end; --q)
    for (auto it = src.rbegin(); it != src.rend(); ++it)
      if ((q < p || *it <= layer) && (q + 1) % c.compress_ratios[size_t(*it)] == 0) return int(*it);
  for (auto it = src.rbegin(); it != src.rend(); ++it)
    if (prompt_end >= c.compress_ratios[size_t(*it)]) return int(*it);
  return -1;
}

Status indexer(const ModelWeights& W, const BlockWeights& b, SequenceState& st, ForwardScratch& f,
               const float* xn, const float* qr, const Rope& rope, bool own_keys,
               ForwardTrace* trace) {
  const ModelConfig& c = W.cfg;
  const int64_t T = f.T, start = f.start, r = b.ratio, nh = c.index_n_heads, ihd = c.index_head_dim,
                rd = c.rope_head_dim;
  const int64_t end = start + T, compress_len = end / r;
  const int64_t k = std::min(c.index_topk, compress_len);
  f.topk_width = k;
  f.topk.assign(size_t(T * k), -1);
  if (compress_len == 0) return Status::ok();
  // Whose index keys each row scores: prompt rows (and every row with own_index_keys) their
  // own source's; past the prompt's end each row those its decode step would score, however
  // many rows the call has (so a multi-row call past the prompt — a verify chunk, a
  // recompute — equals one-row decode steps); with no prompt end set, the call's last
  // published slot, as the reference computes a call of that many rows.
  auto key_layer_of = [&](int64_t p) {
    if (own_keys || p < st.prompt_end) return b.kv_source_layer;
    if (st.prompt_end > 0) return decode_key_layer(c, p, b.id, st.prompt_end);
    return st.published_keys;
  };
  const int64_t hd = c.head_dim;
  // Each row's key source, checked before any row runs.
  std::vector<int> key_layers(static_cast<size_t>(T));
  std::vector<int64_t> haves(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    const int64_t p = start + t, visible = (p + 1) / r;
    const int key_layer = key_layer_of(p);
    if (key_layer < 0)
      return internal_error("no index keys published before layer " + std::to_string(b.id));
    const kv::PagedRows& keys = st.src[size_t(key_layer)].entries;
    // A decode row scoring a later layer's keys needs them from the rows before it, which a
    // call computes only after this layer: a call of decode rows may reach as far as the
    // keys published before it (the engine runs them one per call past that; a verify chunk
    // of a few rows always fits).
    const bool decode_rule = !own_keys && st.prompt_end > 0 && p >= st.prompt_end;
    if (keys.size() < (decode_rule ? visible : compress_len))
      return decode_rule ? invalid_argument("decode row at position " + std::to_string(p) +
                                            " reaches past the index keys published before "
                                            "the call: run it in a later call")
                         : internal_error("index keys shorter than the visible compressed entries");
    key_layers[size_t(t)] = key_layer;
    haves[size_t(t)] = decode_rule ? std::min(compress_len, keys.size()) : compress_len;
  }
  // On AMX the keys a row scores are tile operands: each source's keys in bf16, once.
  const bool amx = f.ex.fast && kernels::cpu_path() == kernels::CpuPath::kAmx &&
                   kernels::cpu::sparse_attention_amx_supported(nh, ihd);
  std::map<int, std::vector<uint16_t>> bf16_keys;
  if (amx) {
    for (int64_t t = 0; t < T; ++t) {
      std::vector<uint16_t>& kb = bf16_keys[key_layers[size_t(t)]];
      const kv::PagedRows& keys = st.src[size_t(key_layers[size_t(t)])].entries;
      const int64_t n = std::min(compress_len, keys.size()), per_page = keys.rows_per_page();
      if (int64_t(kb.size()) >= n * ihd) continue;
      kb.assign(size_t((n + 15) / 16 * 16 * ihd), 0);
      for (int64_t j0 = 0; j0 < n; j0 += per_page)
        kernels::cpu::keys_to_bf16(keys.row(j0) + hd, std::min(per_page, n - j0), hd + ihd, ihd,
                                   &kb[size_t(j0 * ihd)]);
    }
  }
  // The query and head-weight projections of all rows at once.
  std::vector<float> qs(static_cast<size_t>(T * nh * ihd)), ws(static_cast<size_t>(T * nh));
  fp8_linear(f.ex, b.attn.i_wq_b, qr, T, qs.data());
  linear(f.ex, xn, b.attn.i_wproj, T, true, ws.data());
  if (b.candidate_source) {
    f.candidates_n = compress_len;
    f.candidates.assign(size_t(T * compress_len), 0);
  } else if (b.uses_candidates && f.candidates_n != compress_len) {
    return internal_error("candidate pool does not cover layer " + std::to_string(b.id));
  }
  const float wscale = float(std::pow(double(ihd), -0.5) * std::pow(double(nh), -0.5));
  // Rows are independent (each writes its own top-k and candidate rows): in fast numerics a
  // prefill spreads them over the pool.
  auto row = [&](int64_t t) {
    thread_local std::vector<float> scores;
    thread_local std::vector<int32_t> chosen;
    scores.resize(size_t(compress_len));
    const int64_t p = start + t, visible = (p + 1) / r, have = haves[size_t(t)];
    const kv::PagedRows& keys = st.src[size_t(key_layers[size_t(t)])].entries;
    const int64_t per_page = keys.rows_per_page();
    float* q = &qs[size_t(t * nh * ihd)];
    float* w = &ws[size_t(t * nh)];
    for (int64_t h = 0; h < nh; ++h) rope.rotate(q + h * ihd + ihd - rd, p);
    (f.ex.fast ? kernels::cpu::fake_quant_e2m1 : kernels::ref::fake_quant_e2m1)(q, nh * ihd, 32,
                                                                                false, q);
    for (int64_t h = 0; h < nh; ++h) w[h] = kernels::round_to_bf16(w[h] * wscale);
    if (amx) {
      kernels::cpu::index_scores_amx(q, w, nh, ihd, bf16_keys.at(key_layers[size_t(t)]).data(),
                                     have, scores.data());
    } else {
      for (int64_t j0 = 0; j0 < have; j0 += per_page)
        index_scores(f.ex, q, w, keys.row(j0) + hd, std::min(per_page, have - j0), hd + ihd, nh,
                     ihd, &scores[size_t(j0)]);
    }
    for (int64_t j = visible; j < compress_len; ++j) scores[size_t(j)] = kNegInf;
    if (b.candidate_source) {
      // Block scores: the max over each block; the block of the newest entry is pinned.
      const int64_t bs = c.candidate_block_size, nb = (compress_len + bs - 1) / bs;
      std::vector<float> block(size_t(nb), kNegInf);
      for (int64_t j = 0; j < compress_len; ++j)
        block[size_t(j / bs)] = std::max(block[size_t(j / bs)], scores[size_t(j)]);
      if (visible > 0) block[size_t((visible - 1) / bs)] = std::numeric_limits<float>::infinity();
      std::vector<int32_t> top;
      top_k_indices(block.data(), nb, std::min(c.candidate_topk_blocks, nb), &top);
      for (int32_t blk : top) {
        if (!(block[size_t(blk)] > kNegInf)) continue;
        for (int64_t j = blk * bs; j < std::min(compress_len, (blk + 1) * bs); ++j)
          f.candidates[size_t(t * compress_len + j)] = 1;
      }
    } else if (b.uses_candidates) {
      for (int64_t j = 0; j < compress_len; ++j)
        if (!f.candidates[size_t(t * compress_len + j)]) scores[size_t(j)] = kNegInf;
    }
    top_k_indices(scores.data(), compress_len, k, &chosen);
    std::sort(chosen.begin(), chosen.end());
    for (int64_t i = 0; i < k; ++i)
      f.topk[size_t(t * k + i)] = chosen[size_t(i)] < visible ? chosen[size_t(i)] : -1;
  };
  if (f.ex.fast && f.ex.pool != nullptr && T > 1)
    f.ex.pool->parallel_for(size_t(T), [&](size_t t) { row(int64_t(t)); });
  else
    for (int64_t t = 0; t < T; ++t) row(t);
  if (trace) {
    trace->topk[b.id] = f.topk;
    trace->topk_width[b.id] = k;
  }
  return Status::ok();
}

// The bf16 copies of the entries one prompt chunk's attention rows read on the AVX-512 BF16
// row (kernels::cpu::sparse_attention_avx512bf16_on_bf16): the chunk's own KV rows, the ring's
// rows before the chunk and the selected compressed entries, each converted once for the
// chunk instead of once per row that reads it (the row rounds a float entry the same way, so
// the bits do not change). Filled by the thread running the layer, then read by the rows.
struct ChunkEntriesBf16 {
  // The most bytes of compressed entries' copies a chunk makes: past it (long contexts whose
  // rows select mostly different entries) the rows convert their own.
  static constexpr int64_t kMaxCompBytes = int64_t(32) << 20;

  std::vector<uint16_t> own, ring, comp;
  std::vector<int32_t> comp_slot;  // compressed entry -> its row in comp, or -1

  // False (nothing to read) when the selected entries' copies would pass kMaxCompBytes.
  bool fill(const float* kv, int64_t T, int64_t hd, const kv::PagedRows& ring_rows,
            int64_t ring_from, int64_t start, int64_t win, const kv::PagedRows* entries,
            const int32_t* topk, int64_t n_topk) {
    int32_t n = 0;
    if (entries != nullptr) {
      comp_slot.assign(size_t(entries->size()), -1);
      for (int64_t i = 0; i < n_topk; ++i)
        if (topk[i] >= 0 && topk[i] < entries->size() && comp_slot[size_t(topk[i])] < 0)
          comp_slot[size_t(topk[i])] = n++;
      if (int64_t(n) * hd * 2 > kMaxCompBytes) return false;
    }
    own.resize(size_t(T * hd));
    kernels::cpu::entries_to_bf16(kv, T, hd, own.data());
    ring.resize(size_t(win * hd));
    for (int64_t pos = ring_from; pos < start; ++pos)
      kernels::cpu::entries_to_bf16(ring_rows.row(pos % win), 1, hd, &ring[size_t(pos % win * hd)]);
    if (entries == nullptr) return true;
    comp.resize(size_t(n) * size_t(hd));
    for (int64_t j = 0; j < entries->size(); ++j)
      if (comp_slot[size_t(j)] >= 0)
        kernels::cpu::entries_to_bf16(entries->row(j), 1, hd,
                                      &comp[size_t(comp_slot[size_t(j)]) * size_t(hd)]);
    return true;
  }
};

// The part of an attention sublayer that reads and writes one sequence's state, over its
// rows (f.T rows at positions f.start..): the compressor and indexer, the compressed entries
// stored, the attention rows themselves over the window and the selected entries (o
// [T, heads, head_dim] from q), and the window ring. qr, q and kv are the rows' attention
// inputs (attention_inputs()); xn their normed inputs.
Status attention_core(const ModelWeights& W, const BlockWeights& b, SequenceState& st,
                      ForwardScratch& f, const float* xn, const float* qr, const float* q,
                      const float* kv, bool own_keys, float* o, ForwardTrace* trace) {
  const ModelConfig& c = W.cfg;
  const AttentionWeights& a = b.attn;
  const int64_t T = f.T, start = f.start, H = c.n_heads, hd = c.head_dim, win = c.window_size;
  const Rope& rope = b.ratio > 0 ? *W.rope_compressed : *W.rope_window;
  const Exec& ex = f.ex;

  // Compressed KV: the source compresses, the index source selects, then the new entries
  // are rotated, FP4 fake-quantised and stored.
  if (b.ratio > 0) {
    std::vector<float> latents;
    std::vector<int64_t> ids;
    if (b.kv_source)
      FATHOM_RETURN_IF_ERROR(publish_entries(ex, W, b, st, xn, start, T, &latents, &ids));
    if (b.index_source) FATHOM_RETURN_IF_ERROR(indexer(W, b, st, f, xn, qr, rope, own_keys, trace));
    store_latents(ex, W, b, st, rope, &latents, ids);
  }

  // Attention rows: the window (the chunk's own KV and the ring), then the selected
  // compressed entries.
  FATHOM_RETURN_IF_ERROR(ensure_ring(st, size_t(b.id), win, hd));
  kv::PagedRows& ring = st.ring[size_t(b.id)];
  const int64_t floor = st.window_floor[size_t(b.id)];
  const int64_t width = start == 0 ? std::min(T, win) : win;
  const kv::PagedRows* comp = b.ratio > 0 ? &st.src[size_t(b.kv_source_layer)].entries : nullptr;
  const float scale = float(std::pow(double(hd), -0.5));
  // On AMX a row runs on one thread, alone or beside others (kernels/attention.h). The
  // AVX-512 BF16 row, like sparse_attention_fast, computes each head alone, so a decode row
  // may split its heads; which kernel runs is decided here, from all H heads, as attend()
  // decides it for a prompt row.
  const bool amx_attention = ex.fast && kernels::cpu_path() == kernels::CpuPath::kAmx &&
                             kernels::cpu::sparse_attention_amx_supported(H, hd);
  const bool bf16_attention = ex.fast && kernels::cpu_path() == kernels::CpuPath::kAvx512Bf16 &&
                              kernels::cpu::sparse_attention_amx_supported(H, hd);
  // A prompt chunk on the AVX-512 BF16 row reads each entry's bf16 copy, made once.
  thread_local ChunkEntriesBf16 chunk_entries;
  ChunkEntriesBf16& bf = chunk_entries;  // this thread's, which the rows below read
  const bool chunk_bf16 =
      bf16_attention && T > 1 &&
      bf.fill(kv, T, hd, ring, std::max({int64_t(0), start - win + 1, floor}), start, win, comp,
              f.topk.data(), b.ratio > 0 ? T * f.topk_width : 0);
  // Row t's entries in the kernel's order: the window (oldest first, empty slots last), then
  // the selected compressed entries; window_row(pos) and comp_row(j) give each entry's row.
  auto list_entries = [&]<typename E>(int64_t t, std::vector<const E*>& list, auto window_row,
                                      auto comp_row) {
    const int64_t p = start + t;
    list.assign(static_cast<size_t>(width), nullptr);
    list.reserve(size_t(width + f.topk_width));
    int64_t slot = 0;
    for (int64_t pos = std::max({int64_t(0), p - win + 1, floor}); pos <= p; ++pos, ++slot)
      list[size_t(slot)] = window_row(pos);
    if (b.ratio > 0) {
      for (int64_t i = 0; i < f.topk_width; ++i) {
        const int32_t j = f.topk[size_t(t * f.topk_width + i)];
        list.push_back(j < 0 ? nullptr : comp_row(j));
      }
    }
  };
  // Rows are independent: in fast numerics a prefill spreads them over the pool.
  auto row = [&](size_t ti) {
    const int64_t t = int64_t(ti);
    if (chunk_bf16) {
      thread_local std::vector<const uint16_t*> list;
      list_entries(
          t, list,
          [&](int64_t pos) {
            return pos >= start ? &bf.own[size_t((pos - start) * hd)]
                                : &bf.ring[size_t(pos % win * hd)];
          },
          [&](int32_t j) { return &bf.comp[size_t(bf.comp_slot[size_t(j)]) * size_t(hd)]; });
      kernels::cpu::sparse_attention_avx512bf16_on_bf16(&q[size_t(t * H * hd)], H, hd, list.data(),
                                                        int64_t(list.size()), a.sink, scale,
                                                        &o[size_t(t * H * hd)]);
      return;
    }
    thread_local std::vector<const float*> entries;
    list_entries(
        t, entries,
        [&](int64_t pos) {
          return pos >= start ? &kv[size_t((pos - start) * hd)] : ring.row(pos % win);
        },
        [&](int32_t j) { return comp->row(j); });
    if (ex.fast && ex.pool != nullptr && T == 1 && H >= 2 && !amx_attention) {
      // Decode: the heads in two halves, one per thread (which read this thread's list: a
      // thread_local is not captured).
      const int64_t half = H / 2;
      const float* const* list = entries.data();
      const int64_t n = int64_t(entries.size());
      ex.pool->parallel_for(2, [&](size_t i) {
        const int64_t h0 = int64_t(i) * half, nh = i == 0 ? half : H - half;
        (bf16_attention ? kernels::cpu::sparse_attention_avx512bf16 : sparse_attention_fast)(
            &q[size_t(h0 * hd)], nh, hd, list, n, a.sink + h0, scale, &o[size_t(h0 * hd)]);
      });
      return;
    }
    attend(ex.fast, &q[size_t(t * H * hd)], H, hd, entries.data(), int64_t(entries.size()), a.sink,
           scale, &o[size_t(t * H * hd)]);
  };
  if (ex.fast && ex.pool != nullptr && T > 1)
    ex.pool->parallel_for(size_t(T), row);
  else
    for (int64_t t = 0; t < T; ++t) row(size_t(t));
  for (int64_t t = std::max<int64_t>(0, T - win); t < T; ++t)
    std::copy(&kv[size_t(t * hd)], &kv[size_t((t + 1) * hd)], ring.row((start + t) % win));
  return Status::ok();
}

// One sequence's rows in a forward call over one or several sequences.
struct Segment {
  SequenceState* st = nullptr;
  int64_t row0 = 0;               // its first row in the call's row arrays
  int64_t start0 = 0, rows0 = 0;  // its position and rows when the call began
  ForwardScratch f;               // f.start, f.T: the rows (still) running
  bool own_keys = false;
  Status status;  // the first error; a failed segment's rows run on without its state
};

// One attention sublayer over the rows of every segment: xn [R, D] normed inputs -> out
// [R, D]. The projections run once over all rows; each sequence's state is read and written
// by attention_core(), side by side over the pool (one thread each, as forward_rows() sets
// their Exec) when there are several. One segment's error is returned; with several, a
// segment that fails keeps its error and the others go on.
Status attention(const ModelWeights& W, const BlockWeights& b, std::span<Segment> segs,
                 const Exec& ex, int64_t R, const float* xn, float* out, ForwardTrace* trace) {
  const ModelConfig& c = W.cfg;
  const int64_t H = c.n_heads, hd = c.head_dim, qd = c.q_lora_rank, D = c.dim;
  const Rope& rope = b.ratio > 0 ? *W.rope_compressed : *W.rope_window;
  std::vector<int64_t> pos(static_cast<size_t>(R));
  for (const Segment& g : segs)
    for (int64_t t = 0; t < g.f.T; ++t) pos[size_t(g.row0 + t)] = g.f.start + t;
  std::vector<float> qr(static_cast<size_t>(R * qd)), q(size_t(R * H * hd)),
      kv(static_cast<size_t>(R * hd)), o(static_cast<size_t>(R * H * hd));
  attention_inputs(ex, W, b.attn, rope, xn, R, RowPositions(pos.data()), qr.data(), q.data(),
                   kv.data());
  auto core = [&](Segment& g) {
    if (!g.status.is_ok()) return;
    const int64_t r0 = g.row0;
    g.status =
        attention_core(W, b, *g.st, g.f, xn + r0 * D, &qr[size_t(r0 * qd)], &q[size_t(r0 * H * hd)],
                       &kv[size_t(r0 * hd)], g.own_keys, &o[size_t(r0 * H * hd)], trace);
  };
  if (segs.size() == 1) {
    core(segs[0]);
    FATHOM_RETURN_IF_ERROR(segs[0].status);
  } else if (ex.pool != nullptr) {
    ex.pool->parallel_for(segs.size(), [&](size_t i) { core(segs[i]); });
  } else {
    for (Segment& g : segs) core(g);
  }
  attention_output(ex, W, b.attn, rope, o.data(), R, RowPositions(pos.data()), out);
  return Status::ok();
}

}  // namespace

namespace detail {

namespace {

// kv [T, head_dim] = e4m3 fake-quant(RoPE(kv_norm(proj))) at positions pos0.. for the wkv
// projection `proj` [T, head_dim].
void finish_window_kv(const Exec& ex, const ModelWeights& W, const AttentionWeights& a,
                      const Rope& rope, const float* proj, int64_t T, RowPositions pos, float* kv) {
  const int64_t hd = W.cfg.head_dim, rd = W.cfg.rope_head_dim;
  rmsnorm(ex, proj, a.kv_norm, T, float(W.cfg.norm_eps), kv);
  for_rows(ex, T, [&](int64_t t) {
    rope.rotate(kv + t * hd + hd - rd, pos[t]);
    (ex.fast ? kernels::cpu::fake_quant_e4m3 : kernels::ref::fake_quant_e4m3)(kv + t * hd, hd,
                                                                              kv + t * hd);
  });
}

}  // namespace

void window_kv(const Exec& ex, const ModelWeights& W, const AttentionWeights& a, const Rope& rope,
               const float* x, int64_t T, RowPositions pos, float* kv) {
  std::vector<float> tmp(static_cast<size_t>(T * W.cfg.head_dim));
  fp8_linear(ex, a.wkv, x, T, tmp.data());
  finish_window_kv(ex, W, a, rope, tmp.data(), T, pos, kv);
}

void attention_inputs(const Exec& ex, const ModelWeights& W, const AttentionWeights& a,
                      const Rope& rope, const float* xn, int64_t T, RowPositions pos, float* qr,
                      float* q, float* kv) {
  const ModelConfig& c = W.cfg;
  const int64_t H = c.n_heads, hd = c.head_dim, rd = c.rope_head_dim;
  std::vector<float> tq(static_cast<size_t>(T * c.q_lora_rank)), tkv(static_cast<size_t>(T * hd));
  if (ex.fast && ex.pool != nullptr && T == 1) {
    // Decode: the two projections of xn side by side, one thread each.
    const Exec one{true, nullptr};
    ex.pool->parallel_for(2, [&](size_t i) {
      if (i == 0)
        fp8_linear(one, a.wq_a, xn, 1, tq.data());
      else
        fp8_linear(one, a.wkv, xn, 1, tkv.data());
    });
  } else {
    fp8_linear(ex, a.wq_a, xn, T, tq.data());
    fp8_linear(ex, a.wkv, xn, T, tkv.data());
  }
  rmsnorm(ex, tq.data(), a.q_norm, T, float(c.norm_eps), qr);
  fp8_linear(ex, a.wq_b, qr, T, q);
  for_rows(ex, T, [&](int64_t t) { rope.rotate_heads(q + t * H * hd + hd - rd, H, hd, pos[t]); });
  finish_window_kv(ex, W, a, rope, tkv.data(), T, pos, kv);
}

void attention_output(const Exec& ex, const ModelWeights& W, const AttentionWeights& a,
                      const Rope& rope, float* o, int64_t T, RowPositions pos, float* out) {
  const ModelConfig& c = W.cfg;
  const int64_t H = c.n_heads, hd = c.head_dim, rd = c.rope_head_dim, gin = H * hd / c.o_groups,
                zr = c.o_groups * c.o_lora_rank, orank = c.o_lora_rank;
  std::vector<float> z(static_cast<size_t>(T * zr)), og(static_cast<size_t>(T * gin)),
      zg(static_cast<size_t>(T * orank));
  for_rows(ex, T,
           [&](int64_t t) { rope.rotate_heads(o + t * H * hd + hd - rd, H, hd, pos[t], true); });
  // Group g's rows of the FP8 wo_a (o_rank is a multiple of the 32-row scale block).
  auto fp8_group = [&](int64_t g) {
    const kernels::Fp8Matrix& m = a.wo_a_fp8;
    const int64_t row0 = g * orank;
    return kernels::Fp8Matrix{m.weight + row0 * m.cols,
                              m.scale + (row0 / 32) * ((m.cols + 31) / 32), orank, m.cols};
  };
  if (ex.fast && ex.pool != nullptr && T == 1) {
    // Decode: the groups side by side, one thread each.
    ex.pool->parallel_for(size_t(c.o_groups), [&](size_t gi) {
      const int64_t g = int64_t(gi);
      float* zd = &z[size_t(g * orank)];
      kernels::cpu::matmul_fp8(fp8_group(g), o + g * gin, 1, zd, nullptr);
      for (int64_t i = 0; i < orank; ++i) zd[i] = kernels::round_to_bf16(zd[i]);
    });
    fp8_linear(ex, a.wo_b, z.data(), T, out);
    return;
  }
  for (int64_t g = 0; g < c.o_groups; ++g) {
    for_rows(ex, T,
             [&](int64_t t) { std::copy_n(o + t * H * hd + g * gin, gin, &og[size_t(t * gin)]); });
    if (ex.fast) {
      kernels::cpu::matmul_fp8(fp8_group(g), og.data(), T, zg.data(), ex.pool);
    } else {
      const kernels::Bf16Matrix wg{&a.wo_a[size_t(g * orank * gin)], orank, gin};
      linear(ex, og.data(), wg, T, true, zg.data());
    }
    for_rows(ex, T, [&](int64_t t) {
      float* zt = &z[size_t(t * zr + g * orank)];
      const float* src = &zg[size_t(t * orank)];
      for (int64_t i = 0; i < orank; ++i) zt[i] = ex.fast ? kernels::round_to_bf16(src[i]) : src[i];
    });
  }
  fp8_linear(ex, a.wo_b, z.data(), T, out);
}

// The mixes of T rows of streams X [T, 4, D]: strict one by one; fast, a single row's dot
// products spread over the pool, several rows in blocks over the pool (the same bits): eight
// rows a block from 16 rows up, four below (so that a small batch still uses every thread).
void mixes_of(const Exec& ex, const float* X, int64_t T, int64_t D, const HcMixParams& p,
              HcMix* out) {
  if (!ex.fast) {
    for (int64_t t = 0; t < T; ++t) out[t] = hc_mix(X + t * 4 * D, p);
  } else if (T == 1) {
    out[0] = hc_mix_fast(X, p, ex.pool);
  } else {
    const int64_t per = T >= 16 ? 8 : 4, blocks = (T + per - 1) / per;
    auto block = [&](int64_t i) {
      const int64_t t0 = i * per;
      hc_mix_fast_rows(X + t0 * 4 * D, std::min(per, T - t0), p, out + t0);
    };
    for_each_row(ex.pool, blocks, block);
  }
}

Status mhc_block(const Exec& ex, const ModelWeights& W, const BlockWeights& b, int64_t T, float* X,
                 float* pre, const AttentionSublayer& attn, ForwardTrace* trace) {
  const int64_t D = W.cfg.dim;
  const float eps = float(W.cfg.norm_eps);
  std::vector<float> x(static_cast<size_t>(T * D)), xn(static_cast<size_t>(T * D)),
      y(static_cast<size_t>(T * D));
  std::vector<HcMix> mixes(static_cast<size_t>(T));
  mixes_of(ex, X, T, D, b.hc_attn, mixes.data());
  for_rows(ex, T, [&](int64_t t) { hc_pre(pre + t * 4, X + t * 4 * D, D, &x[size_t(t * D)]); });
  rmsnorm(ex, x.data(), b.attn_norm, T, eps, xn.data());
  FATHOM_RETURN_IF_ERROR(attn(xn.data(), y.data()));
  const std::string l = "layer" + std::to_string(b.id);
  if (trace && trace->keep_tensors) trace->tensors[l + "_attn_out"] = y;
  // The FFN site: its own mix from the updated streams, applied to the input chosen with
  // the attention site's pre.
  for_rows(ex, T, [&](int64_t t) {
    thread_local std::vector<float> mid;
    mid.resize(size_t(4 * D));
    float* xt = X + t * 4 * D;
    hc_post(mixes[size_t(t)], &y[size_t(t * D)], xt, D, mid.data());
    std::copy(mid.begin(), mid.end(), xt);
    hc_pre(mixes[size_t(t)].pre, xt, D, &x[size_t(t * D)]);
  });
  mixes_of(ex, X, T, D, b.hc_ffn, mixes.data());
  rmsnorm(ex, x.data(), b.ffn_norm, T, eps, xn.data());
  MoeGateParams gp{b.gate_w.data(), b.gate_bias, D, b.n_experts, b.top_k, float(W.cfg.route_scale)};
  std::vector<int32_t> all_experts(size_t(T * b.top_k));
  std::vector<float> all_weights(size_t(T * b.top_k));
  if (ex.fast) {
    // Eight rows a block over the pool (a row's route never depends on the split).
    for_each_row(ex.pool, (T + 7) / 8, [&](int64_t i) {
      const int64_t t0 = i * 8;
      route_tokens_fast(&xn[size_t(t0 * D)], std::min<int64_t>(8, T - t0), gp,
                        &all_experts[size_t(t0 * b.top_k)], &all_weights[size_t(t0 * b.top_k)]);
    });
    moe_forward_fast(b.moe, xn.data(), T, all_experts.data(), all_weights.data(), b.top_k, y.data(),
                     ex.pool);
  } else {
    for (int64_t t = 0; t < T; ++t) {
      route_token(&xn[size_t(t * D)], gp, &all_experts[size_t(t * b.top_k)],
                  &all_weights[size_t(t * b.top_k)]);
      moe_forward(b.moe, &xn[size_t(t * D)], &all_experts[size_t(t * b.top_k)],
                  &all_weights[size_t(t * b.top_k)], b.top_k, &y[size_t(t * D)]);
    }
  }
  if (trace) {
    trace->gate_idx[b.id] = all_experts;
    trace->gate_w[b.id] = all_weights;
  }
  if (trace && trace->keep_tensors) trace->tensors[l + "_ffn_out"] = y;
  for_rows(ex, T, [&](int64_t t) {
    thread_local std::vector<float> mid;
    mid.resize(size_t(4 * D));
    hc_post(mixes[size_t(t)], &y[size_t(t * D)], X + t * 4 * D, D, mid.data());
    std::copy(mid.begin(), mid.end(), X + t * 4 * D);
    std::copy(mixes[size_t(t)].pre, mixes[size_t(t)].pre + 4, pre + t * 4);
  });
  if (trace && trace->keep_tensors) {
    trace->tensors[l + "_out"] = std::vector<float>(X, X + T * 4 * D);
    trace->tensors[l + "_pre_mix"] = std::vector<float>(pre, pre + T * 4);
  }
  return Status::ok();
}

}  // namespace detail

namespace {

// The compressor and index keys alone of kv source `b` over T rows of streams X [T, 4, dim]
// (the attention site's input, as mhc_block forms it) at positions start..
Status compress_rows(const Exec& ex, const ModelWeights& W, const BlockWeights& b,
                     SequenceState& st, const float* X, const float* pre, int64_t start,
                     int64_t T) {
  const int64_t D = W.cfg.dim;
  std::vector<float> x(static_cast<size_t>(T * D)), xn(static_cast<size_t>(T * D)), latents;
  for (int64_t t = 0; t < T; ++t) hc_pre(pre + t * 4, X + t * 4 * D, D, &x[size_t(t * D)]);
  rmsnorm(ex, x.data(), b.attn_norm, T, float(W.cfg.norm_eps), xn.data());
  std::vector<int64_t> ids;
  FATHOM_RETURN_IF_ERROR(publish_entries(ex, W, b, st, xn.data(), start, T, &latents, &ids));
  store_latents(ex, W, b, st, *W.rope_compressed, &latents, ids);
  return Status::ok();
}

// Drops the first n rows of a row-major [rows, width] table.
template <typename V>
void drop_rows(std::vector<V>* rows, int64_t width, int64_t n) {
  const size_t k = size_t(std::min<int64_t>(int64_t(rows->size()), n * width));
  rows->erase(rows->begin(), rows->begin() + int64_t(k));
}

// The hc-mean of a token's streams, rounded to bf16 (DSpark's main input).
void hc_mean(const float* X, int64_t D, float* out) {
  for (int64_t i = 0; i < D; ++i) {
    double s = 0;
    for (int j = 0; j < 4; ++j) s += double(X[j * D + i]);
    out[i] = kernels::round_double_to_bf16(s / 4.0);
  }
}

std::string read_file(const std::string& path, bool* ok) {
  std::ifstream in(path, std::ios::binary);
  *ok = bool(in);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

// ---------------------------------------------------------------------------------------
// V41Model

V41Model::~V41Model() = default;

const ModelConfig& V41Model::config() const { return w_->cfg; }

Result<std::unique_ptr<V41Model>> V41Model::load(const std::string& dir,
                                                 const ModelOptions& options) {
  auto m = std::unique_ptr<V41Model>(new V41Model());
  m->options_ = options;
  m->pool_ = std::make_unique<ThreadPool>(
      options.threads > 0 ? size_t(options.threads)
                          : std::max<size_t>(1, std::thread::hardware_concurrency()));
  m->w_ = std::make_unique<ModelWeights>();
  ModelWeights& W = *m->w_;
  FATHOM_ASSIGN_OR_RETURN(W.cfg, load_model_config_dir(dir));
  W.strict = options.numerics == Numerics::kStrict;
  const ModelConfig& c = W.cfg;
  if (c.hc_mult != kHcStreams) return unsupported("hc_mult must be 4");
  if (c.head_dim > 1024 || c.rope_head_dim > c.head_dim || c.rope_head_dim > c.index_head_dim)
    return unsupported("head sizes outside what the CPU attention supports");
  FATHOM_ASSIGN_OR_RETURN(W.ck, Checkpoint::open(dir));
  FATHOM_RETURN_IF_ERROR(check_checkpoint(*W.ck, v41_layout(c)));
  FATHOM_ASSIGN_OR_RETURN(const TensorInfo* embed,
                          find_tensor(*W.ck, "embed.weight", DType::kBF16, {c.vocab_size, c.dim}));
  FATHOM_ASSIGN_OR_RETURN(const TensorInfo* head,
                          find_tensor(*W.ck, "head.weight", DType::kBF16, {c.vocab_size, c.dim}));
  W.embed = reinterpret_cast<const uint16_t*>(embed->data);
  W.head = reinterpret_cast<const uint16_t*>(head->data);
  FATHOM_ASSIGN_OR_RETURN(W.norm, bf16_values(*W.ck, "norm.weight", {c.dim}));
  W.rope_window = std::make_unique<Rope>(RopeParams{c.rope_head_dim, c.rope_theta, 1, 0, 32, 1});
  W.rope_compressed =
      std::make_unique<Rope>(RopeParams{c.rope_head_dim, c.compress_rope_theta, c.rope_factor,
                                        c.original_seq_len, c.beta_fast, c.beta_slow});
  W.blocks.resize(size_t(c.n_layers + c.n_mtp_layers));
  for (int64_t i = 0; i < int64_t(W.blocks.size()); ++i)
    FATHOM_RETURN_IF_ERROR(bind_block(W, int(i), i >= c.n_layers, &W.blocks[size_t(i)]));
  // Engram: the hasher from engram_tables.json when the folder has one, else built from the
  // tokenizer as the reference does.
  std::string engram_source;
  if (!c.engram_layer_ids.empty()) {
    bool ok = false;
    std::string tables = read_file(dir + "/engram_tables.json", &ok);
    if (ok) {
      FATHOM_ASSIGN_OR_RETURN(W.hasher, EngramHasher::from_tables_json(tables, c));
      engram_source = dir + "/engram_tables.json";
    } else if (!options.tokenizer_path.empty()) {
      engram_source = options.tokenizer_path;
      FATHOM_ASSIGN_OR_RETURN(auto tok, Tokenizer::load_file(options.tokenizer_path));
      FATHOM_ASSIGN_OR_RETURN(W.hasher, EngramHasher::from_tokenizer(*tok, c));
    } else {
      return not_found(dir +
                       "/engram_tables.json is missing and no tokenizer was given: the Engram "
                       "compressed-token map needs one of them");
    }
    for (size_t e = 0; e < c.engram_layer_ids.size(); ++e) {
      const int64_t l = c.engram_layer_ids[e];
      FATHOM_ASSIGN_OR_RETURN(EngramLayer el, bind_engram(*W.ck, c, int(l), int64_t(e)));
      W.engram.push_back(std::move(el));
      W.blocks[size_t(l)].engram = int(e);
    }
  }
  // DSpark stage tensors.
  if (c.n_mtp_layers > 0) {
    const int64_t D = c.dim, last = c.n_mtp_layers - 1;
    FATHOM_ASSIGN_OR_RETURN(W.main_proj, fp8(*W.ck, "mtp.0.main_proj", D, 3 * D));
    FATHOM_ASSIGN_OR_RETURN(W.main_norm, bf16_values(*W.ck, "mtp.0.main_norm.weight", {D}));
    const std::string p = "mtp." + std::to_string(last) + ".";
    FATHOM_ASSIGN_OR_RETURN(W.mtp_norm, bf16_values(*W.ck, p + "norm.weight", {D}));
    FATHOM_ASSIGN_OR_RETURN(W.markov_embed, bf16_values(*W.ck, p + "markov_head.embed.weight",
                                                        {c.vocab_size, c.dspark_markov_rank}));
    FATHOM_ASSIGN_OR_RETURN(W.markov_head, bf16_values(*W.ck, p + "markov_head.head.weight",
                                                       {c.vocab_size, c.dspark_markov_rank}));
    W.markov_head_norms.resize(size_t(c.vocab_size));
    kernels::markov_row_norms(W.markov_head.data(), c.vocab_size, c.dspark_markov_rank,
                              W.markov_head_norms.data());
    if (!options.draft_vocabulary.empty()) {
      std::vector<int32_t> ids = options.draft_vocabulary;
      std::sort(ids.begin(), ids.end());
      if (std::adjacent_find(ids.begin(), ids.end()) != ids.end() || ids.front() < 0 ||
          ids.back() >= c.vocab_size)
        return invalid_argument("the draft vocabulary must list distinct ids in [0, " +
                                std::to_string(c.vocab_size) + ")");
      const int64_t R = c.dspark_markov_rank, n = int64_t(ids.size());
      W.draft_head.resize(size_t(n * D));
      W.draft_markov_head.resize(size_t(n * R));
      W.draft_markov_norms.resize(size_t(n));
      for (int64_t i = 0; i < n; ++i) {
        const int64_t id = ids[size_t(i)];
        std::copy_n(W.head + id * D, D, &W.draft_head[size_t(i * D)]);
        std::copy_n(&W.markov_head[size_t(id * R)], R, &W.draft_markov_head[size_t(i * R)]);
        W.draft_markov_norms[size_t(i)] = W.markov_head_norms[size_t(id)];
      }
      W.draft_ids = std::move(ids);
    }
    FATHOM_ASSIGN_OR_RETURN(W.confidence, bf16_values(*W.ck, p + "confidence_head.proj.weight",
                                                      {1, D + c.dspark_markov_rank}));
  }
  if (options.prefault) {
    // Touch one byte per page of every tensor, in file order, reporting progress every 64 MiB.
    const int64_t total = int64_t(W.ck->total_bytes());
    int64_t done = 0, reported = 0;
    volatile uint8_t sink = 0;
    for (const auto& [name, t] : W.ck->tensors()) {
      const uint8_t* p = static_cast<const uint8_t*>(t->data);
      for (size_t off = 0; off < t->nbytes; off += 4096) sink = sink + p[off];
      done += int64_t(t->nbytes);
      if (options.progress && (done - reported >= (int64_t(64) << 20) || done == total)) {
        options.progress(done, total);
        reported = done;
      }
    }
    if (options.progress) options.progress(total, total);
  }
  m->fingerprint_ = model_fingerprint(dir, W, options, engram_source);
  return m;
}

int64_t V41Model::decode_weight_bytes() const {
  const ModelWeights& W = *w_;
  const ModelConfig& c = W.cfg;
  auto fp8 = [](const kernels::Fp8Matrix& m) {
    return m.rows * m.cols + ((m.rows + 31) / 32) * ((m.cols + 31) / 32);
  };
  auto fp4 = [](const kernels::Fp4Matrix& m) { return m.rows * m.cols / 2 + m.rows * m.cols / 32; };
  auto bf16 = [](const kernels::Bf16Matrix& m) { return 2 * m.rows * m.cols; };
  auto expert = [&](const ExpertWeights& e) {
    return e.fp4 ? fp4(e.w1_fp4) + fp4(e.w2_fp4) + fp4(e.w3_fp4)
                 : fp8(e.w1_fp8) + fp8(e.w2_fp8) + fp8(e.w3_fp8);
  };
  int64_t total = 2 * c.dim /* embedding row */ + 2 * c.vocab_size * c.dim /* head */ +
                  4 * c.dim /* final norm */;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const BlockWeights& b = W.blocks[size_t(l)];
    const AttentionWeights& a = b.attn;
    total += fp8(a.wq_a) + fp8(a.wq_b) + fp8(a.wkv) + fp8(a.wo_b) +
             (W.strict ? 2 * int64_t(a.wo_a.size()) : fp8(a.wo_a_fp8));
    if (b.kv_source)
      total += bf16(a.c_wkv) + (a.c_wgate.weight ? bf16(a.c_wgate) : 0) + bf16(a.i_wk);
    if (b.index_source) total += fp8(a.i_wq_b) + bf16(a.i_wproj);
    // The two mHC mixes (F32 [24, 4 * dim] each) and the norms.
    total += 2 * 4 * 24 * 4 * c.dim + 4 * int64_t(b.attn_norm.size() + b.ffn_norm.size() +
                                                  a.q_norm.size() + a.kv_norm.size());
    total +=
        4 * int64_t(b.gate_w.size()) + expert(b.moe.shared) + b.top_k * expert(b.moe.routed[0]);
    if (b.engram >= 0) {
      const EngramLayer& e = W.engram[size_t(b.engram)];
      total += fp8(e.wkv) + W.hasher.columns() * (e.head_dim + e.head_dim / 32);
    }
  }
  return total;
}

int64_t V41Model::checkpoint_bytes() const { return int64_t(w_->ck->total_bytes()); }

namespace {
// Entries per page of a private pool.
constexpr int64_t kDefaultPageEntries = 64;
}  // namespace

int64_t V41Model::page_bytes(int64_t entries) const {
  return entries * (w_->cfg.head_dim + w_->cfg.index_head_dim) * int64_t(sizeof(float));
}

std::unique_ptr<SequenceState> V41Model::new_sequence(kv::PagePool* pool) const {
  auto s = std::unique_ptr<SequenceState>(new SequenceState());
  if (pool == nullptr) {
    s->own_pool = std::make_unique<kv::PagePool>(page_bytes(kDefaultPageEntries), 0);
    pool = s->own_pool.get();
  }
  s->pool = pool;
  s->ring.resize(w_->blocks.size());
  s->window_floor.assign(w_->blocks.size(), 0);
  s->src.resize(w_->blocks.size());
  return s;
}

Status ensure_ring(SequenceState& st, size_t block, int64_t window, int64_t head_dim) {
  kv::PagedRows& ring = st.ring[block];
  if (ring.initialised()) return Status::ok();
  kv::PagedRows fresh(st.pool, head_dim);
  FATHOM_RETURN_IF_ERROR(fresh.grow(window));
  ring = std::move(fresh);
  return Status::ok();
}

int64_t V41Model::pages_needed(const SequenceState& s, int64_t tokens) const {
  const ModelConfig& c = w_->cfg;
  const int64_t ring_pages = kv::PagedRows(s.pool, c.head_dim).pages_to_grow(c.window_size);
  const kv::PagedRows no_entries(s.pool, c.head_dim + c.index_head_dim);
  int64_t pages = 0;
  for (int64_t l = 0; l < c.n_layers; ++l)  // forward() fills the backbone's rings only
    if (!s.ring[size_t(l)].initialised()) pages += ring_pages;
  for (int64_t l : c.kv_source_layers) {
    const int64_t r = c.compress_ratios[size_t(l)];
    const int64_t fresh = (s.pos + tokens) / r - s.pos / r;
    const kv::PagedRows& e = s.src[size_t(l)].entries;
    pages += (e.initialised() ? e : no_entries).pages_to_grow(fresh);
  }
  return pages;
}

Result<KvBlock> V41Model::export_block(const SequenceState& s, int64_t block_tokens,
                                       bool with_swa) const {
  const ModelConfig& c = w_->cfg;
  if (block_tokens <= 0 || s.pos < block_tokens || s.pos % block_tokens != 0)
    return invalid_argument("a prefix block must end on a block boundary");
  KvBlock out;
  out.pages.resize(w_->blocks.size());
  out.published_keys = s.published_keys;
  for (int64_t l : c.kv_source_layers) {
    const int64_t r = c.compress_ratios[size_t(l)];
    const kv::PagedRows& e = s.src[size_t(l)].entries;
    const int64_t per_page = e.rows_per_page(), first = (s.pos - block_tokens) / r,
                  last = s.pos / r;
    if (!e.initialised() || e.size() < last || block_tokens % r != 0 || first % per_page != 0 ||
        last % per_page != 0)
      return invalid_argument("the block's compressed entries are not whole pages");
    for (int64_t pg = first / per_page; pg < last / per_page; ++pg)
      out.pages[size_t(l)].push_back(e.pages()[size_t(pg)]);
    out.bytes += (last - first) / per_page * s.pool->page_bytes();
  }
  // Under decoder-side bounded replay the decoder layers' windows before the tail were never
  // filled: such a boundary gets no side object (a resume from it replays instead).
  if (with_swa && s.decoder_tail_start <= s.pos) {
    auto swa = std::unique_ptr<SequenceState>(new SequenceState());
    swa->pool = s.pool;
    swa->pos = s.pos;
    swa->window_floor = s.window_floor;
    swa->main_hidden = s.main_hidden;
    swa->main_hidden_pos = s.main_hidden_pos;
    out.bytes += int64_t(s.main_hidden.size() * sizeof(float));
    for (const auto& r : s.ring) {
      if (!r.initialised()) {
        swa->ring.emplace_back();
        continue;
      }
      FATHOM_ASSIGN_OR_RETURN(kv::PagedRows copy, r.copy_to(s.pool));
      out.bytes += copy.bytes();
      swa->ring.push_back(std::move(copy));
    }
    out.swa = std::move(swa);
  }
  return out;
}

Result<std::unique_ptr<SequenceState>> V41Model::resume(std::span<const KvBlock* const> chain,
                                                        int64_t block_tokens,
                                                        std::span<const int32_t> prefix,
                                                        kv::PagePool* pool) const {
  const ModelConfig& c = w_->cfg;
  const int64_t P = int64_t(chain.size()) * block_tokens;
  if (chain.empty() || int64_t(prefix.size()) != P)
    return invalid_argument("a resume needs its blocks and their tokens");
  auto s = new_sequence(pool);
  for (int64_t l : c.kv_source_layers) {
    const int64_t r = c.compress_ratios[size_t(l)];
    kv::PagedRows& e = s->src[size_t(l)].entries;
    e = kv::PagedRows(s->pool, c.head_dim + c.index_head_dim);
    for (const KvBlock* b : chain) {
      if (b->pages.size() != w_->blocks.size())
        return invalid_argument("a cached block of another model");
      FATHOM_RETURN_IF_ERROR(e.append_pages(b->pages[size_t(l)], block_tokens / r));
    }
  }
  const KvBlock& last = *chain.back();
  s->published_keys = last.published_keys;
  if (last.swa) {
    // The side object: the windows as they were at P, so the resume is exact.
    const SequenceState& w = *last.swa;
    for (size_t i = 0; i < w.ring.size() && i < s->ring.size(); ++i) {
      if (!w.ring[i].initialised()) continue;
      FATHOM_ASSIGN_OR_RETURN(s->ring[i], w.ring[i].copy_to(s->pool));
    }
    s->window_floor = w.window_floor;
    s->main_hidden = w.main_hidden;
    s->main_hidden_pos = w.main_hidden_pos;
    s->pos = P;
    s->tokens.assign(prefix.begin(), prefix.end());
    return s;
  }
  int64_t align = 1;
  for (int64_t r : c.compress_ratios)
    if (r > 0) align = std::lcm(align, r);
  const int64_t R = std::max<int64_t>(0, P - c.window_size) / align * align;
  s->pos = R;
  s->tokens.assign(prefix.begin(), prefix.begin() + R);
  std::fill(s->window_floor.begin(), s->window_floor.end(), R);
  s->main_hidden_pos = R;
  return s;
}

int64_t V41Model::pages_to_fork(const SequenceState& s) const {
  int64_t pages = 0;
  for (const auto& r : s.ring)
    if (r.initialised()) pages += int64_t(r.pages().size());
  for (const auto& src : s.src)
    if (src.entries.initialised()) pages += src.entries.pages_to_fork();
  return pages;
}

Result<std::unique_ptr<SequenceState>> V41Model::fork(const SequenceState& s) const {
  if (s.own_pool) return invalid_argument("a sequence on a private pool cannot be forked");
  auto out = std::unique_ptr<SequenceState>(new SequenceState());
  out->pool = s.pool;
  out->pos = s.pos;
  out->tokens = s.tokens;
  out->window_floor = s.window_floor;
  out->published_keys = s.published_keys;
  out->decoder_tail_start = s.decoder_tail_start;
  out->prompt_end = s.prompt_end;
  out->main_hidden = s.main_hidden;
  out->main_hidden_pos = s.main_hidden_pos;
  out->ring.resize(s.ring.size());
  for (size_t i = 0; i < s.ring.size(); ++i)
    if (s.ring[i].initialised()) {
      FATHOM_ASSIGN_OR_RETURN(out->ring[i], s.ring[i].copy_to(s.pool));
    }
  out->src.resize(s.src.size());
  for (size_t i = 0; i < s.src.size(); ++i) {
    const SequenceState::Source& from = s.src[i];
    SequenceState::Source& to = out->src[i];
    if (from.entries.initialised()) {
      FATHOM_ASSIGN_OR_RETURN(to.entries, from.entries.fork());
    }
    to.kv_part = from.kv_part;
    to.score_part = from.score_part;
  }
  return out;
}

void set_decoder_tail_start(SequenceState& s, int64_t position) {
  s.decoder_tail_start = std::max<int64_t>(0, position);
}

void set_prompt_end(SequenceState& s, int64_t position) {
  s.prompt_end = std::max<int64_t>(0, position);
}

Status V41Model::mark_rows(SequenceState& s, int64_t rows) const {
  const ModelConfig& c = w_->cfg;
  if (s.undo.pos >= 0) return invalid_argument("a row mark is already open");
  if (rows < 1 || rows > c.window_size)
    return invalid_argument("marked rows must be 1.." + std::to_string(c.window_size));
  if (s.prompt_end <= 0 || s.pos < s.prompt_end)
    return invalid_argument("rows are marked only past the prompt's end");
  SequenceState::Undo& u = s.undo;
  u.pos = s.pos;
  u.rows = rows;
  u.published_keys = s.published_keys;
  const int64_t hd = c.head_dim, win = c.window_size;
  // The buffers are kept from mark to mark (a speculative step marks every time).
  u.ring_rows.resize(size_t(c.n_layers));
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const kv::PagedRows& ring = s.ring[size_t(l)];
    std::vector<float>& saved = u.ring_rows[size_t(l)];
    saved.clear();
    if (!ring.initialised()) continue;
    saved.resize(size_t(rows * hd));
    for (int64_t i = 0; i < rows; ++i)
      std::copy_n(ring.row((s.pos + i) % win), hd, &saved[size_t(i * hd)]);
  }
  u.entries.assign(size_t(c.n_layers), 0);
  u.kv_part.resize(size_t(c.n_layers));
  u.score_part.resize(size_t(c.n_layers));
  for (int64_t l : c.kv_source_layers) {
    SequenceState::Source& src = s.src[size_t(l)];
    u.entries[size_t(l)] = src.entries.size();
    u.kv_part[size_t(l)] = src.kv_part;
    u.score_part[size_t(l)] = src.score_part;
    src.logging = true;
    src.undo_log.clear();
  }
  u.main_hidden = s.main_hidden;
  u.main_hidden_pos = s.main_hidden_pos;
  return Status::ok();
}

int64_t V41Model::max_decode_rows(const SequenceState& s, int64_t want) const {
  const ModelConfig& c = w_->cfg;
  if (s.prompt_end <= 0 || s.pos < s.prompt_end) return 0;
  if (options_.own_index_keys) return want;
  // The indexer's check for each row: a key source later than the indexing layer has only
  // its entries from before the call.
  auto fits = [&](int64_t n) {
    for (int64_t p = s.pos; p < s.pos + n; ++p)
      for (const BlockWeights& b : w_->blocks) {
        if (b.id >= c.n_layers || !b.index_source || b.ratio <= 0) continue;
        const int key = decode_key_layer(c, p, b.id, s.prompt_end);
        if (key < 0) return false;
        const int64_t held = key > b.id ? s.src[size_t(key)].entries.size()
                                        : (s.pos + n) / c.compress_ratios[size_t(key)];
        if (held < (p + 1) / b.ratio) return false;
      }
    return true;
  };
  int64_t n = 0;
  while (n < want && fits(n + 1)) ++n;
  return n;
}

Status V41Model::keep_rows(SequenceState& s, int64_t keep) const {
  const ModelConfig& c = w_->cfg;
  SequenceState::Undo& u = s.undo;
  if (u.pos < 0) return invalid_argument("no row mark is open");
  const int64_t done = s.pos - u.pos;
  if (keep < 0 || keep > done)
    return invalid_argument("keep " + std::to_string(keep) + " of " + std::to_string(done) +
                            " rows forwarded");
  const int64_t hd = c.head_dim, win = c.window_size, end = u.pos + keep;
  if (!c.dspark_target_layer_ids.empty() &&
      int64_t(s.main_hidden.size()) < done * c.dim * int64_t(c.dspark_target_layer_ids.size()))
    return invalid_argument("draft() ran between mark_rows and keep_rows");
  // Window slots the dropped rows overwrote hold the positions one window back again.
  for (int64_t l = 0; l < c.n_layers; ++l) {
    kv::PagedRows& ring = s.ring[size_t(l)];
    if (!ring.initialised()) continue;
    const std::vector<float>& saved = u.ring_rows[size_t(l)];
    for (int64_t i = keep; i < done; ++i) {
      float* slot = ring.row((u.pos + i) % win);
      if (saved.empty())
        std::fill_n(slot, hd, 0.0f);  // the ring was allocated (zeroed) by these rows
      else
        std::copy_n(&saved[size_t(i * hd)], hd, slot);
    }
  }
  // Partial groups: as marked, then the kept rows' writes again; entries past the kept rows'
  // groups are dropped.
  for (int64_t l : c.kv_source_layers) {
    SequenceState::Source& src = s.src[size_t(l)];
    const int64_t r = c.compress_ratios[size_t(l)];
    if (src.entries.initialised()) src.entries.truncate(end / r);
    if (r > 1 && keep < done) {
      src.kv_part = u.kv_part[size_t(l)];
      src.score_part = u.score_part[size_t(l)];
      if (src.kv_part.empty()) {
        src.kv_part.assign(size_t(r * hd), 0.0f);
        src.score_part.assign(size_t(r * hd), kNegInf);
      }
      for (int64_t i = 0; i < keep; ++i) {
        const int64_t slot = (u.pos + i) % r;
        const float* row = &src.undo_log[size_t(i * 2 * hd)];
        std::copy_n(row, hd, src.kv_part.begin() + slot * hd);
        std::copy_n(row + hd, hd, src.score_part.begin() + slot * hd);
      }
    }
    src.logging = false;
    src.undo_log.clear();
  }
  // The shared index-key slot: its last publisher among the kept rows, else as marked.
  s.published_keys = u.published_keys;
  for (int64_t p = end - 1, found = 0; p >= u.pos && !found; --p)
    for (auto it = c.kv_source_layers.rbegin(); it != c.kv_source_layers.rend(); ++it)
      if ((p + 1) % c.compress_ratios[size_t(*it)] == 0) {
        s.published_keys = int(*it);
        found = 1;
        break;
      }
  // DSpark inputs: those held at the mark, then the kept rows' (the last `done` rows held now;
  // done <= the window, so none of them was trimmed).
  if (!c.dspark_target_layer_ids.empty()) {
    const int64_t row = c.dim * int64_t(c.dspark_target_layer_ids.size());
    const auto first = s.main_hidden.end() - done * row;
    std::vector<float> rows(std::move(u.main_hidden));
    rows.insert(rows.end(), first, first + keep * row);
    s.main_hidden_pos = rows.size() == size_t(keep * row) ? u.pos : u.main_hidden_pos;
    const int64_t n = int64_t(rows.size()) / row;
    if (n > c.window_size) {
      rows.erase(rows.begin(), rows.begin() + (n - c.window_size) * row);
      s.main_hidden_pos += n - c.window_size;
    }
    s.main_hidden = std::move(rows);
  }
  s.tokens.resize(size_t(end));
  s.pos = end;
  u.pos = -1;  // closed; the buffers stay for the next mark
  u.rows = 0;
  return Status::ok();
}

Status V41Model::forward(SequenceState& st, std::span<const int32_t> tokens, float* logits,
                         ForwardTrace* trace, bool all_rows, float* hidden_out) const {
  return forward_on(pool_.get(), st, tokens, logits, trace, all_rows, hidden_out);
}

std::vector<Status> V41Model::forward_each(std::span<SequenceState* const> states,
                                           std::span<const std::span<const int32_t>> chunks,
                                           float* hidden_out,
                                           std::span<const bool> all_rows) const {
  std::vector<Status> out(states.size());
  if (states.size() != chunks.size() || (!all_rows.empty() && all_rows.size() != states.size())) {
    for (auto& s : out) s = invalid_argument("forward_each needs one chunk per sequence");
    return out;
  }
  const int64_t D = w_->cfg.dim;
  // Where each sequence's hidden rows start in hidden_out.
  std::vector<int64_t> out_row(states.size());
  for (size_t i = 0, row = 0; i < states.size(); ++i) {
    out_row[i] = int64_t(row);
    row += !all_rows.empty() && all_rows[i] ? chunks[i].size() : 1;
  }
  // One sequence whose last row is all it needs: forward() with the pool inside.
  if (states.size() == 1 && (all_rows.empty() || !all_rows[0])) {
    out[0] = forward_on(pool_.get(), *states[0], chunks[0], nullptr, nullptr, false, hidden_out);
    return out;
  }
  const std::vector<Status> run = forward_rows(states, chunks, hidden_out, out_row, all_rows);
  for (size_t i = 0; i < states.size(); ++i) {
    out[i] = run[i];
    // A chunk the batched pass does not run (one that needs every row's hidden never is one:
    // bounded replay is a prompt's, and all rows are asked for decode rows).
    if (out[i].code() == StatusCode::kUnsupported && (all_rows.empty() || !all_rows[i]))
      out[i] = forward_on(pool_.get(), *states[i], chunks[i], nullptr, nullptr, false,
                          hidden_out + out_row[i] * D);
  }
  return out;
}

namespace {

// The rows of a forward call: the chunks of one or several sequences, one after another.
// Every layer runs the row-wise work (mHC mixes, norms, projections, experts, Engram) once
// over all rows and each sequence's own work (compressor, indexer, attention, windows) in
// attention(); per-row arithmetic never depends on the other rows, so a sequence gets the
// same bits alone or among others.
struct RowsPass {
  const ModelWeights& W;
  const ModelOptions& options;
  ThreadPool* pool;
  std::vector<Segment> segs;
  int64_t R = 0;  // rows of all segments
  std::vector<int32_t> tokens;
  ForwardTrace* trace = nullptr;  // one segment only

  // Runs every layer. Rows past the decoder-bounded-replay cut (one segment only) are
  // dropped at the last kv source as forward() describes. hn receives the final normed
  // hidden of every row still running [rows, dim] and `first` the index of the first of them.
  Status run(std::vector<float>* hn, int64_t* first);
};

Status RowsPass::run(std::vector<float>* hn, int64_t* first) {
  const ModelConfig& c = W.cfg;
  const int64_t D = c.dim;
  const Exec ex{options.numerics == Numerics::kFast, pool};
  std::vector<float> X(static_cast<size_t>(R * 4 * D)), pre(size_t(R * 4), 0.0f);
  for (int64_t r = 0; r < R; ++r) {
    const uint16_t* e = W.embed + size_t(tokens[size_t(r)]) * size_t(D);
    for (int j = 0; j < 4; ++j)
      for (int64_t i = 0; i < D; ++i) X[size_t((r * 4 + j) * D + i)] = kernels::bf16_to_float(e[i]);
    pre[size_t(r * 4)] = 1.0f;
  }
  if (trace && trace->keep_tensors)
    for (int64_t r = 0; r < R; ++r)
      trace->tensors["embed_out"].insert(trace->tensors["embed_out"].end(), &X[size_t(r * 4 * D)],
                                         &X[size_t(r * 4 * D + D)]);
  // Engram rows of every row, in row order.
  std::vector<int64_t> hashes;
  int64_t hash_row = 0;
  if (!W.engram.empty()) {
    std::vector<int64_t> h;
    for (Segment& g : segs) {
      W.hasher.hash(g.st->tokens, g.f.start, g.f.T, &h);
      hash_row = int64_t(h.size()) / g.f.T;
      hashes.insert(hashes.end(), h.begin(), h.end());
    }
  }
  const auto& targets = c.dspark_target_layer_ids;
  const int64_t hidden_row = D * std::max<int64_t>(1, int64_t(targets.size()));
  std::vector<float> main_hidden(size_t(R * hidden_row));
  // Decoder-side bounded replay (one segment): rows before t0 stop at the last kv source's
  // compressor.
  const int64_t split = c.kv_source_layers.empty() ? -1 : c.kv_source_layers.back();
  Segment& s0 = segs[0];
  const int64_t start0 = s0.f.start;
  const int64_t t0 = split >= 0 && s0.st->decoder_tail_start > start0
                         ? std::min(s0.f.T, s0.st->decoder_tail_start - start0)
                         : 0;
  if (t0 > 0 && segs.size() > 1) return unsupported("bounded replay in a batched forward");
  int64_t row_off = 0;  // rows dropped from the front (bounded replay)
  int64_t rows = R;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const BlockWeights& b = W.blocks[size_t(l)];
    float* Xl = X.data() + row_off * 4 * D;
    float* prel = pre.data() + row_off * 4;
    if (t0 > 0 && l == split) {
      // The source's compressor and index keys see every row; the rest of the layer and
      // the layers after it only the tail, whose windows start at the tail.
      FATHOM_RETURN_IF_ERROR(compress_rows(s0.f.ex, W, b, *s0.st, Xl, prel, start0, t0));
      for (int64_t k = split; k < c.n_layers; ++k)
        s0.st->window_floor[size_t(k)] =
            std::max(s0.st->window_floor[size_t(k)], s0.st->decoder_tail_start);
      if (t0 == s0.f.T) break;
      drop_rows(&s0.f.topk, s0.f.topk_width, t0);
      drop_rows(&s0.f.candidates, s0.f.candidates_n, t0);
      s0.f.start += t0;
      s0.f.T -= t0;
      row_off = t0;
      rows = R - t0;
      Xl = X.data() + row_off * 4 * D;
      prel = pre.data() + row_off * 4;
    }
    if (b.engram >= 0) {
      engram_forward(W.engram[size_t(b.engram)], W.hasher, hashes.data() + row_off * hash_row, rows,
                     Xl, ex.fast ? ex.pool : nullptr, ex.fast);
      if (trace && trace->keep_tensors)
        trace->tensors["layer" + std::to_string(l) + "_engram_out"] = X;
    }
    auto it = std::find(targets.begin(), targets.end(), l);
    if (it != targets.end()) {
      const int64_t k = it - targets.begin();
      for (int64_t r = row_off; r < R; ++r)
        hc_mean(&X[size_t(r * 4 * D)], D, &main_hidden[size_t(r * hidden_row + k * D)]);
    }
    FATHOM_RETURN_IF_ERROR(mhc_block(
        ex, W, b, rows, Xl, prel,
        [&](const float* xn, float* y) { return attention(W, b, segs, ex, rows, xn, y, trace); },
        trace));
  }
  // DSpark inputs: each sequence's rows wait for its next draft() to enter the stage rings;
  // only the last window can.
  if (!targets.empty()) {
    for (Segment& g : segs) {
      if (!g.status.is_ok()) continue;
      SequenceState& st = *g.st;
      if (st.main_hidden.empty()) st.main_hidden_pos = g.start0;
      st.main_hidden.insert(st.main_hidden.end(), main_hidden.begin() + g.row0 * hidden_row,
                            main_hidden.begin() + (g.row0 + g.rows0) * hidden_row);
      const int64_t held = int64_t(st.main_hidden.size()) / hidden_row;
      if (held > c.window_size) {
        st.main_hidden.erase(st.main_hidden.begin(),
                             st.main_hidden.begin() + (held - c.window_size) * hidden_row);
        st.main_hidden_pos += held - c.window_size;
      }
    }
    if (trace && trace->keep_tensors) trace->tensors["main_hidden"] = main_hidden;
  }
  std::vector<float> h(static_cast<size_t>(rows * D));
  hn->resize(size_t(rows * D));
  for (int64_t r = 0; r < rows; ++r)
    hc_pre(&pre[size_t((row_off + r) * 4)], &X[size_t((row_off + r) * 4 * D)], D,
           &h[size_t(r * D)]);
  rmsnorm(ex, h.data(), W.norm, rows, float(c.norm_eps), hn->data());
  if (trace && trace->keep_tensors) {
    trace->tensors["final_hidden"] = h;
    trace->tensors["final_norm_out"] = *hn;
  }
  *first = row_off;
  return Status::ok();
}

}  // namespace

std::vector<Status> V41Model::forward_rows(std::span<SequenceState* const> states,
                                           std::span<const std::span<const int32_t>> chunks,
                                           float* hidden_out, std::span<const int64_t> out_row,
                                           std::span<const bool> all_rows) const {
  const ModelWeights& W = *w_;
  const ModelConfig& c = W.cfg;
  const int64_t D = c.dim;
  std::vector<Status> out(states.size());
  RowsPass pass{W, options_, pool_.get(), {}, 0, {}, nullptr};
  std::vector<size_t> index;  // segment -> sequence
  for (size_t i = 0; i < states.size(); ++i) {
    SequenceState& st = *states[i];
    const std::span<const int32_t> tokens = chunks[i];
    const int64_t T = int64_t(tokens.size());
    Status bad;
    if (T == 0) bad = invalid_argument("forward needs at least one token");
    for (int32_t id : tokens)
      if (bad.is_ok() && (id < 0 || id >= c.vocab_size))
        bad = out_of_range("token id " + std::to_string(id) + " outside the vocabulary");
    if (bad.is_ok() && st.undo.pos >= 0 && st.pos + T > st.undo.pos + st.undo.rows)
      bad = invalid_argument("forward past the rows marked for verification (" +
                             std::to_string(st.undo.rows) + ")");
    if (bad.is_ok() && !c.kv_source_layers.empty() && st.decoder_tail_start > st.pos)
      bad = unsupported("bounded replay in a batched forward");
    if (!bad.is_ok()) {
      out[i] = bad;
      continue;
    }
    Segment g;
    g.st = &st;
    g.row0 = pass.R;
    g.start0 = g.f.start = st.pos;
    g.rows0 = g.f.T = T;
    // One thread each for the sequence's own work (attention()), no threading inside.
    g.f.ex = Exec{options_.numerics == Numerics::kFast, nullptr};
    g.own_keys = options_.own_index_keys || st.pos < st.prompt_end;
    pass.segs.push_back(std::move(g));
    pass.tokens.insert(pass.tokens.end(), tokens.begin(), tokens.end());
    st.tokens.insert(st.tokens.end(), tokens.begin(), tokens.end());
    pass.R += T;
    index.push_back(i);
  }
  if (pass.segs.empty()) return out;
  std::vector<float> hn;
  int64_t first = 0;
  const Status st = pass.run(&hn, &first);
  for (size_t k = 0; k < pass.segs.size(); ++k) {
    Segment& g = pass.segs[k];
    const size_t i = index[k];
    out[i] = st.is_ok() ? g.status : st;
    if (!out[i].is_ok()) continue;
    g.st->pos += g.f.T;
    if (!all_rows.empty() && all_rows[i])
      std::copy_n(&hn[size_t(g.row0 * D)], size_t(g.f.T * D), hidden_out + out_row[i] * D);
    else
      std::copy_n(&hn[size_t((g.row0 + g.f.T - 1) * D)], D, hidden_out + out_row[i] * D);
  }
  return out;
}

Status V41Model::forward_on(ThreadPool* pool, SequenceState& st, std::span<const int32_t> tokens,
                            float* logits, ForwardTrace* trace, bool all_rows,
                            float* hidden_out) const {
  const ModelWeights& W = *w_;
  const ModelConfig& c = W.cfg;
  const int64_t T = int64_t(tokens.size()), D = c.dim;
  if (T == 0) return invalid_argument("forward needs at least one token");
  for (int32_t id : tokens)
    if (id < 0 || id >= c.vocab_size)
      return out_of_range("token id " + std::to_string(id) + " outside the vocabulary");
  if (st.undo.pos >= 0 && st.pos + T > st.undo.pos + st.undo.rows)
    return invalid_argument("forward past the rows marked for verification (" +
                            std::to_string(st.undo.rows) + ")");
  const int64_t split = c.kv_source_layers.empty() ? -1 : c.kv_source_layers.back();
  const int64_t t0 = split >= 0 && st.decoder_tail_start > st.pos
                         ? std::min(T, st.decoder_tail_start - st.pos)
                         : 0;
  if (t0 > 0 && logits != nullptr && all_rows)
    return invalid_argument("every row's logits asked for under decoder bounded replay");
  if (t0 == T && (logits != nullptr || hidden_out != nullptr))
    return invalid_argument("logits asked for a chunk that ends before the decoder tail");
  RowsPass pass{W,    options_, pool, {}, T, std::vector<int32_t>(tokens.begin(), tokens.end()),
                trace};
  Segment g;
  g.st = &st;
  g.f.ex = Exec{options_.numerics == Numerics::kFast, pool};
  g.start0 = g.f.start = st.pos;
  g.rows0 = g.f.T = T;
  // Prompt rows score their own kv source's index keys, as every row of a one-chunk prefill
  // does (there each index source's kv source has published in the same call); only decode
  // steps keep the reference's last-published slot.
  g.own_keys = options_.own_index_keys || st.pos < st.prompt_end;
  pass.segs.push_back(std::move(g));
  st.tokens.insert(st.tokens.end(), tokens.begin(), tokens.end());
  std::vector<float> hn;
  int64_t first = 0;
  FATHOM_RETURN_IF_ERROR(pass.run(&hn, &first));
  FATHOM_RETURN_IF_ERROR(pass.segs[0].status);
  const int64_t rows = T - first;
  if (hidden_out != nullptr && rows > 0) std::copy_n(&hn[size_t((rows - 1) * D)], D, hidden_out);
  if (logits != nullptr && rows > 0)
    head_logits(all_rows ? hn.data() : &hn[size_t((rows - 1) * D)], all_rows ? rows : 1, logits);
  st.pos += T;
  return Status::ok();
}

void V41Model::head_logits(const float* hidden, int64_t rows, float* logits) const {
  const ModelWeights& W = *w_;
  kernels::Bf16Matrix head{W.head, W.cfg.vocab_size, W.cfg.dim};
  if (options_.numerics == Numerics::kFast)
    kernels::cpu::matmul_bf16(head, hidden, rows, logits, pool_.get());
  else
    kernels::ref::matmul_bf16(head, hidden, rows, logits);
}

int64_t sequence_bytes(const SequenceState& s) {
  int64_t b = int64_t(s.tokens.size() * sizeof(int32_t) + s.main_hidden.size() * sizeof(float));
  for (const auto& r : s.ring) b += r.bytes();
  for (const auto& src : s.src)
    b +=
        src.entries.bytes() + int64_t((src.kv_part.size() + src.score_part.size()) * sizeof(float));
  return b;
}

}  // namespace fathom::model
