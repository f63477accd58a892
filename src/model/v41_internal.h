// The V4.1 model's private pieces, shared by v41.cc (the backbone) and dspark.cc (the DSpark
// draft stages): the bound weights, the per-sequence state and the building blocks. Not part
// of the model's interface; nothing outside src/model includes it. The weights are immutable
// after load; the functions write only the outputs they are handed.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kernels/gemv.h"
#include "kv/page_pool.h"
#include "model/config.h"
#include "model/engram.h"
#include "model/mhc.h"
#include "model/moe.h"
#include "model/rope.h"
#include "model/safetensors.h"
#include "model/v41.h"

namespace fathom::model {

struct AttentionWeights {
  kernels::Fp8Matrix wq_a{}, wq_b{}, wkv{}, wo_b{};
  // wo_a [groups * o_rank, heads * head_dim / groups]: the checkpoint's FP8 (the fast path
  // multiplies it directly: its values are exactly the reference's bf16 dequantisation) and,
  // for strict numerics only, that bf16 copy.
  kernels::Fp8Matrix wo_a_fp8{};
  std::vector<uint16_t> wo_a;
  std::vector<float> q_norm, kv_norm;
  const float* sink = nullptr;
  // Compressor (kv sources): ratio 2 has a gate and runs in fp32, ratio 1 in bf16.
  kernels::Bf16Matrix c_wkv{}, c_wgate{};  // views into the checkpoint
  std::vector<float> c_norm;
  // Indexer (index sources); wk and k_norm on kv sources only.
  kernels::Fp8Matrix i_wq_b{};
  kernels::Bf16Matrix i_wproj{}, i_wk{};
  std::vector<float> i_knorm;
};

struct BlockWeights {
  int id = 0;
  int64_t ratio = 0;
  bool kv_source = false, index_source = false, candidate_source = false, uses_candidates = false;
  int kv_source_layer = -1;  // whose compressed KV this layer reads
  int engram = -1;           // index into ModelWeights::engram, or -1
  std::vector<float> attn_norm, ffn_norm;
  HcMixParams hc_attn, hc_ffn;
  AttentionWeights attn;
  std::vector<float> gate_w;
  const float* gate_bias = nullptr;
  int n_experts = 0, top_k = 0;
  MoeWeights moe;
};

struct ModelWeights {
  ModelConfig cfg;
  bool strict = true;  // numerics the weights are prepared for
  std::unique_ptr<Checkpoint> ck;
  const uint16_t* embed = nullptr;  // [vocab, dim] bf16
  const uint16_t* head = nullptr;   // [vocab, dim] bf16
  std::vector<float> norm;
  std::vector<BlockWeights> blocks;  // n_layers, then the DSpark stages
  std::unique_ptr<Rope> rope_window, rope_compressed;
  std::vector<EngramLayer> engram;
  EngramHasher hasher;
  // DSpark
  kernels::Fp8Matrix main_proj{};
  std::vector<float> main_norm, mtp_norm, markov_embed, markov_head, confidence;
  std::vector<double> markov_head_norms;  // kernels::markov_row_norms(markov_head)
  // The draft vocabulary (ModelOptions::draft_vocabulary; empty: the whole vocabulary): its
  // ids ascending and, in that order, their head rows, Markov head rows and row norms.
  std::vector<int32_t> draft_ids;
  std::vector<uint16_t> draft_head;  // [n, dim] bf16
  std::vector<float> draft_markov_head;
  std::vector<double> draft_markov_norms;
};

struct SequenceState {
  struct Source {
    // [n, head_dim + index_head_dim]: each compressed entry's latent (RoPE'd, FP4
    // fake-quantised), then its index key. Rows are appended, never rewritten.
    kv::PagedRows entries;
    std::vector<float> kv_part, score_part;  // [ratio, head_dim] fp32 partial group
    // While a row mark is open (V41Model::mark_rows): every row's partial-group write, its
    // kv then its score row [rows, 2 * head_dim], so keep_rows() can replay the kept ones.
    bool logging = false;
    std::vector<float> undo_log;
  };
  // What the rows forwarded under an open mark overwrote (V41Model::mark_rows/keep_rows).
  struct Undo {
    int64_t pos = -1, rows = 0;  // pos < 0: no mark open
    int published_keys = -1;
    std::vector<std::vector<float>> ring_rows;  // per block: the window slots of the marked
                                                // positions [rows, head_dim]; empty: no ring
    std::vector<int64_t> entries;               // per layer: compressed entries held
    std::vector<std::vector<float>> kv_part, score_part;  // per layer, as marked
    std::vector<float> main_hidden;
    int64_t main_hidden_pos = 0;
  };
  std::unique_ptr<kv::PagePool> own_pool;  // when the caller gave no pool (destroyed last)
  kv::PagePool* pool = nullptr;
  int64_t pos = 0;
  std::vector<int32_t> tokens;
  std::vector<kv::PagedRows> ring;    // per block (DSpark stages last): [window, head_dim]
  std::vector<int64_t> window_floor;  // per block: no window KV below this position
  std::vector<Source> src;            // per layer; used on kv sources
  int published_keys = -1;            // the reference's shared index-key slot
  int64_t decoder_tail_start = 0;     // see set_decoder_tail_start()
  int64_t prompt_end = 0;             // see set_prompt_end()
  // DSpark input rows [n, 3 * dim] of positions main_hidden_pos.. pos - 1 that the stage
  // rings have not taken yet (at most one window: older rows never reach a ring).
  std::vector<float> main_hidden;
  int64_t main_hidden_pos = 0;
  Undo undo;
};

// The model's store fingerprint (V41Model::fingerprint()); `engram_source` is the file the
// Engram token map came from (engram_tables.json or the tokenizer), empty without Engram.
kv::Fingerprint model_fingerprint(const std::string& dir, const ModelWeights& w,
                                  const ModelOptions& options, const std::string& engram_source);

// A ring's row for position p, the ring allocated (zeroed) on first use.
Status ensure_ring(SequenceState& st, size_t block, int64_t window, int64_t head_dim);

namespace detail {

// How a building block runs: `strict` is the canonical arithmetic of the golden data, `fast`
// the fast kernels on `pool`.
struct Exec {
  bool fast = false;
  ThreadPool* pool = nullptr;
};

// Runs fn(t) for the rows [0, T): over the pool in fast numerics when there are several (a
// row's arithmetic never depends on the others or on the split), else in order.
template <typename Fn>
void for_rows(const Exec& ex, int64_t T, Fn fn) {
  for_each_row(ex.fast ? ex.pool : nullptr, T, fn);
}

// The positions of a call's rows: pos0, pos0 + 1, ... or one per row (rows of several
// sequences in one call). Implicit from a first position.
struct RowPositions {
  RowPositions(int64_t first) : pos0(first) {}  // NOLINT(google-explicit-constructor)
  explicit RowPositions(const int64_t* per_row) : rows(per_row) {}
  int64_t operator[](int64_t t) const { return rows != nullptr ? rows[t] : pos0 + t; }
  int64_t pos0 = 0;
  const int64_t* rows = nullptr;
};

// y [rows, W.rows] = bf16(W · fake_quant(x)) for x [rows, W.cols].
void fp8_linear(const Exec& ex, const kernels::Fp8Matrix& w, const float* x, int64_t rows,
                float* y);

// y [rows, W.rows] = x · W^T with bf16 weights W [m, k]; rounded once to bf16 or fp32.
void linear(const Exec& ex, const float* x, const kernels::Bf16Matrix& w, int64_t rows,
            bool to_bf16, float* y);

// y [rows, w.size()] = the bf16 RMSNorm of x with weight w.
void rmsnorm(const Exec& ex, const float* x, const std::vector<float>& w, int64_t rows, float eps,
             float* y);

// kv [T, head_dim] = the window KV of x [T, dim] at positions pos: kv_norm(wkv · x), RoPE
// on the tail, then E4M3 fake-quant over all head_dim channels.
void window_kv(const Exec& ex, const ModelWeights& W, const AttentionWeights& a, const Rope& rope,
               const float* x, int64_t T, RowPositions pos, float* kv);

// qr [T, q_lora_rank] = q_norm(wq_a · xn), q [T, heads, head_dim] = wq_b · qr with RoPE at
// positions pos on each head's tail, and kv [T, head_dim] as window_kv() makes it.
void attention_inputs(const Exec& ex, const ModelWeights& W, const AttentionWeights& a,
                      const Rope& rope, const float* xn, int64_t T, RowPositions pos, float* qr,
                      float* q, float* kv);

// out [T, dim] = wo_b · wo_a(o) for T rows of attention output o [T, heads, head_dim] at
// positions pos, after the inverse RoPE (applied to o in place). The projections run once
// over all rows.
void attention_output(const Exec& ex, const ModelWeights& W, const AttentionWeights& a,
                      const Rope& rope, float* o, int64_t T, RowPositions pos, float* out);

// An attention sublayer: xn [T, dim] normed inputs -> out [T, dim].
using AttentionSublayer = std::function<Status(const float* xn, float* out)>;

// One block (attention and MoE, each wrapped in mHC) over the streams X [T, 4, dim]; pre [T, 4]
// is the input mix and becomes the block's FFN-site pre.
Status mhc_block(const Exec& ex, const ModelWeights& W, const BlockWeights& b, int64_t T, float* X,
                 float* pre, const AttentionSublayer& attn, ForwardTrace* trace);

}  // namespace detail
}  // namespace fathom::model
