#include "model/engram.h"

#include <cmath>
#include <cstring>

#include "core/py_json.h"
#include "core/thread_pool.h"
#include "kernels/norm.h"
#include "kernels/quant.h"
#include "model/layout.h"
#include "model/safetensors.h"

namespace fathom::model {
namespace {

Status bad(const std::string& m) { return corrupt("engram_tables.json: " + m); }

Status int_list(const pyjson::Value* v, const char* what, std::vector<int64_t>* out) {
  if (v == nullptr || !v->is_array()) return bad(std::string("\"") + what + "\" must be a list");
  out->clear();
  for (const auto& e : v->items) {
    int64_t x = 0;
    if (!e.int_fits_int64(&x)) return bad(std::string("\"") + what + "\" must hold integers");
    out->push_back(x);
  }
  return Status::ok();
}

}  // namespace

Result<EngramHasher> EngramHasher::from_tables_json(std::string_view json, const ModelConfig& c) {
  FATHOM_ASSIGN_OR_RETURN(pyjson::Value root, pyjson::parse(json));
  if (!root.is_object()) return bad("the top level must be an object");
  EngramHasher h;
  std::vector<int64_t> map;
  FATHOM_RETURN_IF_ERROR(int_list(root.find("token_map"), "token_map", &map));
  if (int64_t(map.size()) != c.vocab_size)
    return bad("token_map has " + std::to_string(map.size()) + " entries, the vocabulary " +
               std::to_string(c.vocab_size));
  for (int64_t m : map)
    if (m < 0 || m >= c.engram_compressed_vocab_size) return bad("token_map entry out of range");
  h.token_map_.assign(map.begin(), map.end());
  const pyjson::Value* pad = root.find("pad_compressed_id");
  if (pad == nullptr || !pad->int_fits_int64(&h.pad_)) return bad("\"pad_compressed_id\" missing");
  h.max_ngram_ = c.engram_max_ngram_size;
  h.heads_ = c.engram_n_heads;
  h.columns_ = (h.max_ngram_ - 1) * h.heads_;
  const size_t layers = c.engram_layer_ids.size();
  const pyjson::Value* mult = root.find("multipliers");
  const pyjson::Value* primes = root.find("primes");
  const pyjson::Value* offs = root.find("offsets");
  if (!mult || !mult->is_array() || mult->items.size() != layers || !primes ||
      !primes->is_array() || primes->items.size() != layers || !offs || !offs->is_array() ||
      offs->items.size() != layers)
    return bad("multipliers, primes and offsets need one entry per Engram layer");
  for (size_t l = 0; l < layers; ++l) {
    std::vector<int64_t> m, o, p;
    FATHOM_RETURN_IF_ERROR(int_list(&mult->items[l], "multipliers", &m));
    FATHOM_RETURN_IF_ERROR(int_list(&offs->items[l], "offsets", &o));
    const auto& pl = primes->items[l];
    if (!pl.is_array() || int64_t(pl.items.size()) != h.max_ngram_ - 1)
      return bad("primes need max_ngram - 1 lists per layer");
    for (const auto& n : pl.items) {
      std::vector<int64_t> row;
      FATHOM_RETURN_IF_ERROR(int_list(&n, "primes", &row));
      if (int64_t(row.size()) != h.heads_) return bad("primes need one entry per head");
      p.insert(p.end(), row.begin(), row.end());
    }
    if (int64_t(m.size()) != h.max_ngram_ || int64_t(o.size()) != h.columns_)
      return bad("multipliers or offsets have the wrong length");
    int64_t total = 0;
    for (int64_t i = 0; i < h.columns_; ++i) {
      if (p[size_t(i)] <= 0 || o[size_t(i)] != total)
        return bad("offsets must be the prime prefix sums");
      total += p[size_t(i)];
    }
    if (total != c.engram_num_embeddings[l])
      return bad("the primes of layer " + std::to_string(l) + " do not sum to its table rows");
    h.multipliers_.push_back(std::move(m));
    h.primes_.push_back(std::move(p));
    h.offsets_.push_back(std::move(o));
  }
  return h;
}

void EngramHasher::hash(const std::vector<int32_t>& tokens, int64_t start, int64_t T,
                        std::vector<int64_t>* rows) const {
  const int64_t L = layers();
  rows->assign(size_t(T * L * columns_), 0);
  std::vector<int64_t> hist(static_cast<size_t>(max_ngram_));
  for (int64_t t = 0; t < T; ++t) {
    const int64_t p = start + t;
    for (int64_t s = 0; s < max_ngram_; ++s)
      hist[size_t(s)] = p - s >= 0 ? token_map_[size_t(tokens[size_t(p - s)])] : pad_;
    for (int64_t l = 0; l < L; ++l) {
      const auto& m = multipliers_[size_t(l)];
      uint64_t rolling = uint64_t(hist[0]) * uint64_t(m[0]);
      for (int64_t n = 1; n < max_ngram_; ++n) {
        rolling ^= uint64_t(hist[size_t(n)]) * uint64_t(m[size_t(n)]);
        const int64_t h = int64_t(rolling);
        for (int64_t k = 0; k < heads_; ++k) {
          const int64_t col = (n - 1) * heads_ + k;
          const int64_t prime = primes_[size_t(l)][size_t(col)];
          int64_t r = h % prime;
          if (r < 0) r += prime;
          (*rows)[size_t((t * L + l) * columns_ + col)] = r + offsets_[size_t(l)][size_t(col)];
        }
      }
    }
  }
}

Result<EngramLayer> bind_engram(const Checkpoint& ck, const ModelConfig& c, int layer,
                                int64_t index) {
  const std::string p = "layers." + std::to_string(layer) + ".engram.";
  EngramLayer e;
  e.index = index;
  e.rows = c.engram_num_embeddings[size_t(index)];
  e.head_dim = c.engram_head_dim;
  e.dim = c.dim;
  e.eps = float(c.norm_eps);
  const int64_t cols = (c.engram_max_ngram_size - 1) * c.engram_n_heads;
  FATHOM_ASSIGN_OR_RETURN(const TensorInfo* t, find_tensor(ck, p + "embed.weight", DType::kF8E4M3,
                                                           {e.rows, e.head_dim}));
  FATHOM_ASSIGN_OR_RETURN(const TensorInfo* s, find_tensor(ck, p + "embed.scale", DType::kF8E8M0,
                                                           {e.rows, e.head_dim / 32}));
  e.table = t->data;
  e.scale = s->data;
  const int64_t in = cols * e.head_dim, out = (c.hc_mult + 1) * c.dim;
  FATHOM_ASSIGN_OR_RETURN(const TensorInfo* w,
                          find_tensor(ck, p + "wkv.weight", DType::kF8E4M3, {out, in}));
  FATHOM_ASSIGN_OR_RETURN(const TensorInfo* ws, find_tensor(ck, p + "wkv.scale", DType::kF8E8M0,
                                                            {(out + 31) / 32, (in + 31) / 32}));
  e.wkv = kernels::Fp8Matrix{w->data, ws->data, out, in};
  for (int which = 0; which < 2; ++which) {
    FATHOM_ASSIGN_OR_RETURN(
        const TensorInfo* v,
        find_tensor(ck, p + (which ? "k_weight" : "q_weight"), DType::kBF16, {c.hc_mult, c.dim}));
    std::vector<float>& dst = which ? e.k_weight : e.q_weight;
    dst.resize(v->elements());
    for (size_t i = 0; i < dst.size(); ++i) {
      uint16_t b;
      std::memcpy(&b, v->data + 2 * i, 2);
      dst[i] = kernels::bf16_to_float(b);
    }
  }
  return e;
}

namespace {

// rsqrt(mean(v^2) + eps): squares in fp32, the mean in double rounded to fp32, the rsqrt in
// double rounded to fp32.
float rstd(const float* v, int64_t n, float eps) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += double(v[i] * v[i]);
  const float mean = float(s / double(n));
  return float(1.0 / std::sqrt(double(mean + eps)));
}

}  // namespace

void engram_forward(const EngramLayer& e, const EngramHasher& h, const int64_t* rows, int64_t T,
                    float* X, ThreadPool* pool, bool fast) {
  const int64_t cols = h.columns(), L = h.layers(), hd = e.head_dim, D = e.dim, in = cols * hd;
  // Every row's embeddings, fake-quantised, then the projection over all rows at once (the
  // fast kernels give each row what it gets alone).
  std::vector<float> xq(static_cast<size_t>(T * in)), kv(static_cast<size_t>(T * 5 * D));
  // Fast: the row loops over the pool too (a row's arithmetic never depends on the split).
  ThreadPool* rows_pool = fast ? pool : nullptr;
  for_each_row(rows_pool, T, [&](int64_t t) {
    const int64_t* r = rows + (t * L + e.index) * cols;
    float* emb = &xq[size_t(t * in)];
    for (int64_t c = 0; c < cols; ++c)
      for (int64_t i = 0; i < hd; ++i)
        emb[c * hd + i] =
            kernels::round_to_bf16(kernels::e4m3_to_float(e.table[r[c] * hd + i]) *
                                   kernels::e8m0_to_float(e.scale[r[c] * (hd / 32) + i / 32]));
    (fast ? kernels::cpu::fake_quant_e4m3 : kernels::ref::fake_quant_e4m3)(emb, in, emb);
  });
  if (fast) {
    kernels::cpu::matmul_fp8(e.wkv, xq.data(), T, kv.data(), pool);
    for_each_row(pool, T, [&](int64_t t) {
      for (int64_t i = t * 5 * D; i < (t + 1) * 5 * D; ++i)
        kv[size_t(i)] = kernels::round_to_bf16(kv[size_t(i)]);
    });
  } else {
    for (int64_t t = 0; t < T; ++t)
      kernels::ref::matmul_fp8(e.wkv, &xq[size_t(t * in)], 1, &kv[size_t(t * 5 * D)],
                               kernels::OutRounding::kBF16);
  }
  const float inv_sqrt_dim = float(std::pow(double(D), -0.5));
  for_each_row(rows_pool, T, [&](int64_t t) {
    const float* value = &kv[size_t((t * 5 + 4) * D)];
    for (int64_t j = 0; j < 4; ++j) {
      float* x = X + (t * 4 + j) * D;
      const float* key = &kv[size_t((t * 5 + j) * D)];
      double dot = 0;
      for (int64_t i = 0; i < D; ++i) {
        const float w = e.q_weight[size_t(j * D + i)] * e.k_weight[size_t(j * D + i)];
        dot += double(x[i] * w * key[i]);
      }
      const float rs = rstd(x, D, e.eps) * rstd(key, D, e.eps);
      const float d = float(dot) * rs * inv_sqrt_dim;
      const float mag = std::sqrt(std::max(std::fabs(d), 1e-6f));
      const float gate = float(1.0 / (1.0 + std::exp(-double(std::copysign(mag, d)))));
      for (int64_t i = 0; i < D; ++i) x[i] = kernels::round_to_bf16(x[i] + gate * value[i]);
    }
  });
}

}  // namespace fathom::model
