// The DSpark draft stages of V4.1 (shared/spec/model-v41.md §6.9; ref `Transformer.forward_spec`,
// `DSparkBlock`, `DSparkAttention`, the Markov and confidence heads) in the strict arithmetic
// of the golden data, which they reproduce bit for bit:
// - main_x = main_norm(main_proj(main_hidden)) per main position; each stage's ring holds
//   the window KV of main_x (its own wkv and kv_norm, RoPE at the main position, E4M3
//   fake-quant like the backbone's window); main_x enters nowhere else.
// - The block [token, noise x4] at positions pos..pos+4 runs through the stages as mHC blocks
//   (the pre mix carried from stage to stage, one-hot on stream 0 at the start); each
//   query sees the filled ring slots (slot order) and all 5 block entries.
// - hidden = hc_pre(stage-2 streams, the last FFN-site pre), logits = head(mtp_norm(hidden)).
// - Draft k: logits_k += fp32(markov_head · markov_embed[prev]) (prev = the previous id of the
//   block, the main token first), id = argmax (ties to the lower id; over the draft
//   vocabulary when the model has one and only ids are asked for), confidence_k =
//   fp32(proj · [hidden_k (before the norm), markov_embed[prev]]), divided by the config's
//   dspark_confidence_temperatures[k] when it has them (Fathom's calibration, not the ref).
#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/gemv.h"
#include "kernels/markov.h"
#include "kernels/quant.h"
#include "model/attention.h"
#include "model/mhc.h"
#include "model/v41_internal.h"

namespace fathom::model {

using detail::attention_inputs;
using detail::attention_output;
using detail::Exec;
using detail::fp8_linear;
using detail::rmsnorm;
using detail::RowPositions;
using detail::window_kv;

Status V41Model::draft(SequenceState& st, int32_t main_token, DraftResult* out,
                       bool with_logits) const {
  if (out == nullptr) return invalid_argument("draft needs a DraftResult");
  SequenceState* const states[] = {&st};
  return draft_each(states, std::span(&main_token, 1), std::span(out, 1), with_logits).front();
}

std::vector<Status> V41Model::draft_each(std::span<SequenceState* const> states,
                                         std::span<const int32_t> main_tokens,
                                         std::span<DraftResult> out, bool with_logits) const {
  const ModelWeights& W = *w_;
  const ModelConfig& c = W.cfg;
  std::vector<Status> status(states.size());
  if (main_tokens.size() != states.size() || out.size() != states.size()) {
    for (auto& s : status) s = invalid_argument("draft_each needs one token and result each");
    return status;
  }
  const int64_t D = c.dim, H = c.n_heads, hd = c.head_dim, win = c.window_size,
                B = c.dspark_block_size, V = c.vocab_size, R = c.dspark_markov_rank;
  const int64_t L = c.n_layers, S = c.n_mtp_layers;
  const Rope& rope = *W.rope_window;
  const float eps = float(c.norm_eps);
  const Exec ex{options_.numerics == Numerics::kFast, pool_.get()};

  // The sequences that draft: each one's rows the rings have not taken yet enter them first:
  // main_x = main_norm(main_proj(main_hidden)), and each stage's window KV of it (E4M3
  // fake-quant, as the backbone's window) at the rows' main positions. Every row of a prefill
  // enters, as the reference's prefill forward_spec does.
  std::vector<size_t> drafting;
  for (size_t r = 0; r < states.size(); ++r) {
    SequenceState& st = *states[r];
    const int32_t main_token = main_tokens[r];
    Status& bad = status[r];
    if (c.n_mtp_layers <= 0) bad = unsupported("the checkpoint has no DSpark stages");
    if (bad.is_ok() && (main_token < 0 || main_token >= c.vocab_size))
      bad = out_of_range("token id " + std::to_string(main_token) + " outside the vocabulary");
    for (int64_t s = 0; bad.is_ok() && s < S; ++s) bad = ensure_ring(st, size_t(L + s), win, hd);
    if (!bad.is_ok()) continue;
    const int64_t in = D * int64_t(c.dspark_target_layer_ids.size());
    const int64_t n = int64_t(st.main_hidden.size()) / in;
    if (n > 0) {
      std::vector<float> proj(size_t(n * D)), main_x(size_t(n * D)), kv(size_t(n * hd));
      fp8_linear(ex, W.main_proj, st.main_hidden.data(), n, proj.data());
      rmsnorm(ex, proj.data(), W.main_norm, n, eps, main_x.data());
      for (int64_t s = 0; s < S; ++s) {
        const BlockWeights& b = W.blocks[size_t(L + s)];
        kv::PagedRows& ring = st.ring[size_t(L + s)];
        window_kv(ex, W, b.attn, rope, main_x.data(), n, st.main_hidden_pos, kv.data());
        for (int64_t t = 0; t < n; ++t) {
          const int64_t p = st.main_hidden_pos + t;
          std::copy(&kv[size_t(t * hd)], &kv[size_t((t + 1) * hd)], ring.row(p % win));
        }
      }
      st.main_hidden.clear();
      st.main_hidden_pos = st.pos;
    }
    drafting.push_back(r);
  }
  if (drafting.empty()) return status;

  // Each sequence's block [main_token, noise x (B-1)] at its positions pos.., broadcast to the
  // 4 streams; the stages run every sequence's block as rows of one mHC block (the row-wise
  // work over all of them at once), each sequence's attention over its own ring.
  const int64_t N = int64_t(drafting.size()), T = N * B;
  std::vector<float> X(size_t(T * 4 * D)), pre(size_t(T * 4), 0.0f);
  for (int64_t q = 0; q < N; ++q)
    for (int64_t i = 0; i < B; ++i) {
      const int32_t id =
          i == 0 ? main_tokens[drafting[size_t(q)]] : int32_t(c.dspark_noise_token_id);
      const uint16_t* e = W.embed + size_t(id) * size_t(D);
      const int64_t row = q * B + i;
      for (int j = 0; j < 4; ++j)
        for (int64_t k = 0; k < D; ++k)
          X[size_t((row * 4 + j) * D + k)] = kernels::bf16_to_float(e[k]);
      pre[size_t(row * 4)] = 1.0f;
    }
  const float scale = float(std::pow(double(hd), -0.5));
  std::vector<int64_t> positions(static_cast<size_t>(T));  // row -> its position
  for (int64_t g = 0; g < N; ++g)
    for (int64_t i = 0; i < B; ++i)
      positions[size_t(g * B + i)] = states[drafting[size_t(g)]]->pos + i;
  for (int64_t s = 0; s < S; ++s) {
    const BlockWeights& b = W.blocks[size_t(L + s)];
    // Projections and output over every sequence's rows at once (per-row positions); the
    // attention itself per sequence, over its ring and its own block.
    auto attn = [&](const float* xn, float* y) -> Status {
      std::vector<float> qr(size_t(T * c.q_lora_rank)), q(size_t(T * H * hd)), kv(size_t(T * hd)),
          o(size_t(T * H * hd));
      attention_inputs(ex, W, b.attn, rope, xn, T, RowPositions(positions.data()), qr.data(),
                       q.data(), kv.data());
      std::vector<const float*> entries;
      for (int64_t g = 0; g < N; ++g) {
        const SequenceState& st = *states[drafting[size_t(g)]];
        const kv::PagedRows& ring = st.ring[size_t(L + s)];
        const int64_t n_ring = std::min(win, st.pos);
        entries.clear();
        for (int64_t k = 0; k < n_ring; ++k) entries.push_back(ring.row(k));
        for (int64_t i = 0; i < B; ++i) entries.push_back(&kv[size_t((g * B + i) * hd)]);
        for (int64_t i = 0; i < B; ++i)
          attend(ex.fast, &q[size_t((g * B + i) * H * hd)], H, hd, entries.data(),
                 int64_t(entries.size()), b.attn.sink, scale, &o[size_t((g * B + i) * H * hd)]);
      }
      attention_output(ex, W, b.attn, rope, o.data(), T, RowPositions(positions.data()), y);
      return Status::ok();
    };
    const Status st = detail::mhc_block(ex, W, b, T, X.data(), pre.data(), attn, nullptr);
    if (!st.is_ok()) {
      for (size_t r : drafting) status[r] = st;
      return status;
    }
  }

  // The head over every sequence's rows: the stage-2 streams reduced with the last pre, mtp
  // norm, the shared head.
  // Asked for ids alone, with a draft vocabulary: the head's rows of those ids only, and
  // `logits` / the Markov head / `V` below are over that vocabulary (ids mapped back at the end).
  const bool subset = !with_logits && !W.draft_ids.empty();
  const int64_t Vd = subset ? int64_t(W.draft_ids.size()) : V;
  std::vector<float> h(size_t(T * D)), hn(size_t(T * D)), logits(size_t(T * Vd));
  for (int64_t i = 0; i < T; ++i)
    hc_pre(&pre[size_t(i * 4)], &X[size_t(i * 4 * D)], D, &h[size_t(i * D)]);
  rmsnorm(ex, h.data(), W.mtp_norm, T, eps, hn.data());
  kernels::Bf16Matrix head{subset ? W.draft_head.data() : W.head, Vd, D};
  const float* markov_head = subset ? W.draft_markov_head.data() : W.markov_head.data();
  const double* markov_norms = subset ? W.draft_markov_norms.data() : W.markov_head_norms.data();
  if (ex.fast)
    kernels::cpu::matmul_bf16(head, hn.data(), T, logits.data(), ex.pool);
  else
    kernels::ref::matmul_bf16(head, hn.data(), T, logits.data());

  // Per sequence, sequential greedy sampling with the Markov bias of the previous token.
  auto sample = [&](int64_t g) {
    DraftResult& d = out[drafting[size_t(g)]];
    if (with_logits)  // (then Vd == V)
      d.logits.assign(logits.begin() + g * B * V, logits.begin() + (g + 1) * B * V);
    else
      d.logits.clear();
    std::vector<float> scratch;  // strict numerics without with_logits
    d.ids.assign(size_t(B + 1), 0);
    d.ids[0] = main_tokens[drafting[size_t(g)]];
    d.confidence.assign(size_t(B), 0.0f);
    for (int64_t i = 0; i < B; ++i) {
      const int32_t prev = d.ids[size_t(i)];
      const float* me = &W.markov_embed[size_t(prev) * size_t(R)];
      int32_t best = 0;
      const float* row = &logits[size_t((g * B + i) * Vd)];
      if (with_logits) {
        float* lg = &d.logits[size_t(i * V)];
        // The same bits either way (kernels/markov.h).
        if (ex.fast)
          kernels::cpu::markov_bias(markov_head, V, R, me, lg);
        else
          kernels::ref::markov_bias(markov_head, V, R, me, lg);
        for (int64_t v = 1; v < V; ++v)
          if (lg[v] > lg[best]) best = int32_t(v);
      } else if (ex.fast) {
        // The same id without the vocabulary-wide bias (kernels/markov.h).
        best = kernels::cpu::markov_argmax(markov_head, markov_norms, Vd, R, me, row);
      } else {
        scratch.resize(size_t(Vd));
        best = kernels::ref::markov_argmax(markov_head, Vd, R, me, row, scratch.data());
      }
      if (subset) best = W.draft_ids[size_t(best)];
      d.ids[size_t(i + 1)] = best;
      const float* hx = &h[size_t((g * B + i) * D)];
      double acc = 0;
      for (int64_t k = 0; k < D; ++k) acc += double(hx[k]) * double(W.confidence[size_t(k)]);
      for (int64_t r = 0; r < R; ++r) acc += double(me[r]) * double(W.confidence[size_t(D + r)]);
      if (!c.dspark_confidence_temperatures.empty())
        acc /= c.dspark_confidence_temperatures[size_t(i)];
      d.confidence[size_t(i)] = float(acc);
    }
  };
  if (ex.fast && ex.pool != nullptr && N > 1)
    ex.pool->parallel_for(size_t(N), [&](size_t g) { sample(int64_t(g)); });
  else
    for (int64_t g = 0; g < N; ++g) sample(g);
  return status;
}

}  // namespace fathom::model
