#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "core/thread_pool.h"
#include "kernels/activation.h"
#include "kernels/norm.h"
#include "kernels/quant.h"
#include "model/layout.h"
#include "model/safetensors.h"

namespace fathom::model {
namespace {

constexpr int64_t kMaxDim = 8192;

// One projection [out, in] as FP4 (two codes per byte, scale [out, in/32]) or FP8 (32x32).
Status projection(const Checkpoint& ck, const std::string& name, bool fp4, int64_t out, int64_t in,
                  kernels::Fp4Matrix* m4, kernels::Fp8Matrix* m8) {
  if (fp4) {
    FATHOM_ASSIGN_OR_RETURN(const TensorInfo* w,
                            find_tensor(ck, name + ".weight", DType::kI8, {out, in / 2}));
    FATHOM_ASSIGN_OR_RETURN(const TensorInfo* s,
                            find_tensor(ck, name + ".scale", DType::kF8E8M0, {out, in / 32}));
    *m4 = kernels::Fp4Matrix{w->data, s->data, out, in};
  } else {
    FATHOM_ASSIGN_OR_RETURN(const TensorInfo* w,
                            find_tensor(ck, name + ".weight", DType::kF8E4M3, {out, in}));
    FATHOM_ASSIGN_OR_RETURN(const TensorInfo* s, find_tensor(ck, name + ".scale", DType::kF8E8M0,
                                                             {(out + 31) / 32, (in + 31) / 32}));
    *m8 = kernels::Fp8Matrix{w->data, s->data, out, in};
  }
  return Status::ok();
}

Status expert(const Checkpoint& ck, const std::string& prefix, bool fp4, int64_t hidden,
              int64_t inter, ExpertWeights* e) {
  e->fp4 = fp4;
  e->hidden = hidden;
  e->inter = inter;
  Status s = projection(ck, prefix + "w1", fp4, inter, hidden, &e->w1_fp4, &e->w1_fp8);
  if (s.is_ok()) s = projection(ck, prefix + "w3", fp4, inter, hidden, &e->w3_fp4, &e->w3_fp8);
  if (s.is_ok()) s = projection(ck, prefix + "w2", fp4, hidden, inter, &e->w2_fp4, &e->w2_fp8);
  return s;
}

// x is already fake-quantised; y rounded once to bf16.
void project(const ExpertWeights& e, const kernels::Fp4Matrix& m4, const kernels::Fp8Matrix& m8,
             const float* x, float* y) {
  if (e.fp4)
    kernels::ref::matmul_fp4(m4, x, 1, y, kernels::OutRounding::kBF16);
  else
    kernels::ref::matmul_fp8(m8, x, 1, y, kernels::OutRounding::kBF16);
}

// One expert on the quantised input xq; a routed expert scales its hidden by `weight`.
void run_expert(const ExpertWeights& e, const float* xq, const float* weight, float limit,
                float* y) {
  float g[kMaxDim], u[kMaxDim];
  project(e, e.w1_fp4, e.w1_fp8, xq, g);
  project(e, e.w3_fp4, e.w3_fp8, xq, u);
  for (int64_t i = 0; i < e.inter; ++i) {
    const float up = std::clamp(u[i], -limit, limit);
    const float gate = std::min(g[i], limit);
    const float silu = float(double(gate) / (1.0 + std::exp(-double(gate))));
    float h = silu * up;
    if (weight != nullptr) h = h * *weight;
    g[i] = kernels::round_to_bf16(h);
  }
  kernels::ref::fake_quant_e4m3(g, e.inter, g);
  project(e, e.w2_fp4, e.w2_fp8, g, y);
}

}  // namespace

Result<MoeWeights> moe_weights(const Checkpoint& ck, const std::string& prefix, int n_routed,
                               int64_t hidden, int64_t inter, float swiglu_limit) {
  if (hidden <= 0 || inter <= 0 || hidden > kMaxDim || inter > kMaxDim || hidden % 32 ||
      inter % 32 || n_routed <= 0)
    return unsupported("MoE sizes outside what the strict experts support");
  MoeWeights w;
  w.swiglu_limit = swiglu_limit;
  w.routed.resize(size_t(n_routed));
  for (int e = 0; e < n_routed; ++e) {
    Status s = expert(ck, prefix + "experts." + std::to_string(e) + ".", true, hidden, inter,
                      &w.routed[size_t(e)]);
    if (!s.is_ok()) return s;
  }
  Status s = expert(ck, prefix + "shared_experts.", false, hidden, inter, &w.shared);
  if (!s.is_ok()) return s;
  return w;
}

void moe_forward(const MoeWeights& w, const float* x, const int32_t* experts, const float* weights,
                 int k, float* y) {
  const int64_t hidden = w.shared.hidden;
  float xq[kMaxDim], out[kMaxDim], acc[kMaxDim];
  kernels::ref::fake_quant_e4m3(x, hidden, xq);
  std::fill(acc, acc + hidden, 0.0f);
  // The reference visits experts by index, adding each one's tokens in turn.
  for (int32_t e = 0; e < int32_t(w.routed.size()); ++e) {
    for (int j = 0; j < k; ++j) {
      if (experts[j] != e) continue;
      run_expert(w.routed[size_t(e)], xq, &weights[j], w.swiglu_limit, out);
      for (int64_t i = 0; i < hidden; ++i) acc[i] += out[i];
    }
  }
  run_expert(w.shared, xq, nullptr, w.swiglu_limit, out);
  for (int64_t i = 0; i < hidden; ++i) y[i] = kernels::round_to_bf16(acc[i] + out[i]);
}

namespace {

void project_fast(const ExpertWeights& e, const kernels::Fp4Matrix& m4,
                  const kernels::Fp8Matrix& m8, const float* x, int64_t rows, float* y) {
  if (e.fp4)
    kernels::cpu::matmul_fp4(m4, x, rows, y, nullptr);
  else
    kernels::cpu::matmul_fp8(m8, x, rows, y, nullptr);
}

// One expert over `rows` quantised inputs xq [rows, hidden], on the calling thread; weights[r]
// scales row r's hidden (null for the shared expert). y [rows, hidden] in fp32 (bf16 values);
// g and u hold rows * inter floats each.
void run_expert_fast(const ExpertWeights& e, const float* xq, int64_t rows, const float* weights,
                     float limit, float* y, float* g, float* u) {
  const int64_t inter = e.inter;
  project_fast(e, e.w1_fp4, e.w1_fp8, xq, rows, g);
  project_fast(e, e.w3_fp4, e.w3_fp8, xq, rows, u);
  for (int64_t r = 0; r < rows; ++r) {
    float* gr = g + r * inter;
    kernels::cpu::swiglu_bf16(gr, u + r * inter, inter, limit,
                              weights != nullptr ? weights[r] : 1.0f, gr);
    kernels::cpu::fake_quant_e4m3(gr, inter, gr);
  }
  project_fast(e, e.w2_fp4, e.w2_fp8, g, rows, y);
  for (int64_t i = 0; i < rows * e.hidden; ++i) y[i] = kernels::round_to_bf16(y[i]);
}

// Floats that grow to the largest size asked of them and are never zero-filled (each user
// writes what it reads): a prefill's MoE buffers are tens of MB, and fresh zeroed vectors
// cost their page faults and a memset on every call. One per thread (thread_local where
// used); the pointer stays valid until the next get() on that thread.
class FloatScratch {
 public:
  float* get(int64_t n) {
    if (n > size_) {
      p_.reset(new float[size_t(n)]);
      size_ = n;
    }
    return p_.get();
  }

 private:
  std::unique_ptr<float[]> p_;
  int64_t size_ = 0;
};

}  // namespace

void moe_forward_fast(const MoeWeights& w, const float* x, int64_t T, const int32_t* experts,
                      const float* weights, int k, float* y, ThreadPool* pool) {
  const int64_t hidden = w.shared.hidden;
  thread_local FloatScratch xq_scratch, out_scratch;
  float* xq = xq_scratch.get(T * hidden);
  // Rows over the pool only at prefill sizes (a decode step's few rows are not worth a hand-off).
  ThreadPool* rows_pool = T > 4 ? pool : nullptr;
  for_each_row(rows_pool, T, [&](int64_t t) {
    kernels::cpu::fake_quant_e4m3(x + t * hidden, hidden, xq + t * hidden);
  });
  // One job per expert in use (routed in index order, then the shared one), each with the
  // rows routed to it; the jobs' outputs [rows, hidden] follow one another in `out`, job j's
  // from row `first`.
  struct Job {
    const ExpertWeights* e;
    std::vector<int64_t> rows;
    std::vector<float> rw;
    int64_t first = 0;
  };
  std::vector<Job> jobs;
  // The output row of token t's q-th routed expert: ascending in the experts' index.
  std::vector<int64_t> out_row(size_t(T * k));
  int64_t out_rows = 0;
  for (int32_t e = 0; e < int32_t(w.routed.size()); ++e) {
    Job j{&w.routed[size_t(e)], {}, {}, out_rows};
    for (int64_t t = 0; t < T; ++t)
      for (int q = 0; q < k; ++q)
        if (experts[t * k + q] == e) {
          out_row[size_t(t * k + q)] = out_rows++;
          j.rows.push_back(t);
          j.rw.push_back(weights[t * k + q]);
        }
    if (!j.rows.empty()) jobs.push_back(std::move(j));
  }
  Job shared{&w.shared, {}, {}, out_rows};
  for (int64_t t = 0; t < T; ++t) shared.rows.push_back(t);
  out_rows += T;
  jobs.push_back(std::move(shared));
  float* out = out_scratch.get(out_rows * hidden);
  // The jobs in pieces of at most kPieceRows rows, the shared expert's first (the biggest job:
  // FP8, twice the bytes of an FP4 one): each piece runs on one thread, its products with no
  // synchronisation inside, the pieces side by side over the pool. A product's rows are
  // computed as they would be alone, so the split changes no value.
  constexpr int64_t kPieceRows = 256;
  struct Piece {
    const Job* job;
    int64_t r0, r1;
  };
  std::vector<Piece> pieces;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Job& j = jobs[i == 0 ? jobs.size() - 1 : i - 1];
    for (int64_t r0 = 0; r0 < int64_t(j.rows.size()); r0 += kPieceRows)
      pieces.push_back({&j, r0, std::min(int64_t(j.rows.size()), r0 + kPieceRows)});
  }
  for_each_row(pool, int64_t(pieces.size()), [&](int64_t i) {
    const Piece& p = pieces[size_t(i)];
    const Job& j = *p.job;
    const int64_t n = p.r1 - p.r0, inter = j.e->inter;
    thread_local FloatScratch piece_scratch;
    float* in = piece_scratch.get(n * (hidden + 2 * inter));
    for (int64_t r = 0; r < n; ++r)
      std::copy_n(xq + j.rows[size_t(p.r0 + r)] * hidden, hidden, in + r * hidden);
    run_expert_fast(*j.e, in, n, j.rw.empty() ? nullptr : j.rw.data() + p.r0, w.swiglu_limit,
                    out + (j.first + p.r0) * hidden, in + n * hidden, in + n * (hidden + inter));
  });
  // Each token's routed outputs added in expert-index order, then the shared expert's, with
  // the one rounding.
  const float* shared_out = out + jobs.back().first * hidden;
  for_each_row(rows_pool, T, [&](int64_t t) {
    thread_local std::vector<int64_t> rows;
    thread_local std::vector<float> acc;
    rows.assign(out_row.begin() + t * k, out_row.begin() + (t + 1) * k);
    std::sort(rows.begin(), rows.end());
    acc.assign(size_t(hidden), 0.0f);
    for (int64_t r : rows) {
      const float* o = out + r * hidden;
      for (int64_t c = 0; c < hidden; ++c) acc[size_t(c)] += o[c];
    }
    const float* so = shared_out + t * hidden;
    for (int64_t c = 0; c < hidden; ++c)
      y[t * hidden + c] = kernels::round_to_bf16(acc[size_t(c)] + so[c]);
  });
}

}  // namespace fathom::model
