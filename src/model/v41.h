// The DeepSeek-V4.1 forward pass on the CPU (shared/spec/model-v41.md §6): embeddings, the
// mHC streams, every attention role (sliding window, CSA2 compressors of ratio 2 and 1,
// indexers with top-k, the candidate-block pool and Reindex layers, Reuse layers), the MoE,
// Engram, the final mix, norm and head, and the DSpark draft stages. Numerics `strict` is the
// golden data's canonical arithmetic and reproduces DeepSeek's reference bit for bit.
//
// A V41Model is immutable after load and may serve many sequences from many threads; each
// SequenceState belongs to one sequence and one thread at a time. forward() runs a chunk of
// tokens at the sequence's next positions (a prefill of any length, or one decode token) and
// updates the state: sliding-window rings, compressed KV, index keys, compressor partial
// groups, Engram history.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "kv/block_format.h"
#include "kv/page_pool.h"
#include "model/config.h"

namespace fathom {
class ThreadPool;
}

namespace fathom::model {
struct SequenceState;
void destroy_sequence(SequenceState* s);
}  // namespace fathom::model

namespace std {
template <>
struct default_delete<fathom::model::SequenceState> {
  void operator()(fathom::model::SequenceState* s) const { fathom::model::destroy_sequence(s); }
};
}  // namespace std

namespace fathom::model {

enum class Numerics { kStrict, kFast };

struct ModelOptions {
  Numerics numerics = Numerics::kStrict;
  // Index keys: false = the reference's decode-time behaviour (a ratio-2 indexer that did
  // not complete a group scores against the last published key cache); true = every
  // indexer scores its own kv source's keys.
  bool own_index_keys = false;
  // Threads for the fast kernels (0 = one per hardware thread).
  int threads = 0;
  // tokenizer.json to build the Engram compressed-token map from when the checkpoint folder
  // has no engram_tables.json.
  std::string tokenizer_path;
  // Read every mapped weight page during load (so the first requests do not fault the
  // checkpoint in from disk), calling `progress(bytes_done, bytes_total)` as it goes.
  bool prefault = false;
  std::function<void(int64_t done, int64_t total)> progress;
  // DSpark's draft vocabulary (model/draft_vocab.h): distinct ids the draft stages may propose
  // when only ids are asked for (draft(..., with_logits = false), the engine's call); empty:
  // the whole vocabulary.
  std::vector<int32_t> draft_vocabulary;
};

// What a forward can record for tests and tools. Rows are the chunk's tokens.
struct ForwardTrace {
  // Index-source layer -> [T, k] selected compressed positions (ascending, -1 = empty).
  std::map<int, std::vector<int32_t>> topk;
  std::map<int, int64_t> topk_width;
  // Layer -> [T, top_k] routed experts and weights.
  std::map<int, std::vector<int32_t>> gate_idx;
  std::map<int, std::vector<float>> gate_w;
  // Named intermediates as the golden data names them (embed_out, layer{i}_attn_out, ...).
  bool keep_tensors = false;
  std::map<std::string, std::vector<float>> tensors;
};

// DSpark's output for one step: ids = [main token, block_size greedy draft tokens], the
// draft logits as the reference returns them (Markov bias included; only when asked for: the
// engine needs the ids alone, which fast numerics then find without the vocabulary-wide bias,
// kernels/markov.h) and the confidence logits (before the sigmoid).
struct DraftResult {
  std::vector<int32_t> ids;       // block_size + 1
  std::vector<float> logits;      // [block_size, vocab], or empty without with_logits
  std::vector<float> confidence;  // [block_size]
};

struct ModelWeights;

// What one prefix block of 128 (or any block_tokens) tokens added to a sequence's persistent
// KV: the pages of compressed KV and index keys of every kv source (shared with the sequence
// and with every sequence resumed from it; never rewritten), the reference's published
// index-key slot at the block's end and, only when asked for, the sequence's sliding-window
// state at the block's end (a side object that makes a resume exact instead of a replay).
struct KvBlock {
  std::vector<std::vector<kv::PageRef>> pages;  // per layer; empty on layers that are no source
  int published_keys = -1;
  std::unique_ptr<SequenceState> swa;
  int64_t bytes = 0;  // pages (and side object) held
};

class V41Model {
 public:
  // `dir` holds config.json and/or inference/config.json, the safetensors file(s), and
  // optionally engram_tables.json (the compressed-token map).
  static Result<std::unique_ptr<V41Model>> load(const std::string& dir,
                                                const ModelOptions& options = {});
  ~V41Model();
  V41Model(const V41Model&) = delete;
  V41Model& operator=(const V41Model&) = delete;

  const ModelConfig& config() const;
  const ModelOptions& options() const { return options_; }

  // A new sequence whose KV pages come from `pool` (which must outlive it and have pages of
  // page_bytes(n) for some n), or from a private unlimited pool when null.
  std::unique_ptr<SequenceState> new_sequence(kv::PagePool* pool = nullptr) const;
  // Bytes of one KV page holding `entries` compressed entries with their index keys.
  int64_t page_bytes(int64_t entries) const;
  // Pages a forward of `tokens` more tokens may take from the pool (an upper bound).
  int64_t pages_needed(const SequenceState& s, int64_t tokens) const;

  // The block of `block_tokens` tokens that ends at the sequence's position (which must be a
  // multiple of block_tokens, with every kv source's entries on page boundaries there).
  Result<KvBlock> export_block(const SequenceState& s, int64_t block_tokens, bool with_swa) const;
  // A sequence resumed from a chain of cached blocks (block 1 first) covering prefix[0, P),
  // P = chain.size() * block_tokens. With the last block's side object it stands exactly at
  // P. Without it (SWA bounded replay, shared/spec/algorithms.md §3.2): it stands at
  // R = max(0, P - window) (rounded down to every compression ratio), holds the compressed KV
  // and index keys of [0, P), and the caller forwards prefix[R, P) again: those rows rebuild
  // the window KV, their attention reads no window below R, and they do not rewrite the
  // cached entries. An approximation of a full prefill, exact when R = 0.
  Result<std::unique_ptr<SequenceState>> resume(std::span<const KvBlock* const> chain,
                                                int64_t block_tokens,
                                                std::span<const int32_t> prefix,
                                                kv::PagePool* pool) const;

  // The model's identity for the KV store: XXH3-128 of the config file(s), the Engram tables
  // (or the tokenizer they were built from), every tensor's name, dtype, shape and sampled
  // bytes, and the options that shape KV values (numerics, index keys). Computed at load.
  const kv::Fingerprint& fingerprint() const { return fingerprint_; }
  // The KV store's objects (kv/block_format.h) for a cached block. A block object holds
  // section 0x01 (the block's token ids, int32 [block_tokens]), 0x02 (the published
  // index-key slot, int32 [1]) and 0x100 + l for every kv source layer l (its compressed
  // entries, float32 [block_tokens / ratio, head_dim + index_head_dim]). A window object
  // holds 0x10 (int64 [2]: position, DSpark input position), 0x11 (window floors, int64 [one
  // per block]), 0x12 (DSpark input rows, float32 [n, dim * targets]) and 0x200 + i for
  // every allocated window ring i (float32 [window, head_dim]).
  std::string encode_block(const KvBlock& b, const kv::ObjectHeader& h,
                           std::span<const int32_t> ids) const;
  // kInvalidArgument when the block has no side object.
  Result<std::string> encode_window(const KvBlock& b, const kv::ObjectHeader& h) const;
  // A block read back from a store: every header field and section checked against `expect`,
  // this model's shapes and `ids` (kCorrupt with a kv::BlockFault otherwise); its pages come
  // from `pool` (kResourceExhausted when it is full).
  Result<KvBlock> decode_block(std::string_view bytes, const kv::ObjectHeader& expect,
                               std::span<const int32_t> ids, kv::PagePool* pool) const;
  // Checks a window object as decode_block() does and makes it `block`'s side object.
  Status decode_window(std::string_view bytes, const kv::ObjectHeader& expect, kv::PagePool* pool,
                       KvBlock* block) const;

  // A copy of a sequence that continues on its own (n samples of one prompt): the pages of
  // compressed KV and index keys are shared (full pages by reference; a partially filled last
  // page is copied), the window rings, compressor partial groups and history are copied.
  // Takes at most pages_to_fork(s) pages from the sequence's pool. REQUIRES: the sequence's
  // pages come from a pool the caller gave new_sequence() (kInvalidArgument otherwise).
  Result<std::unique_ptr<SequenceState>> fork(const SequenceState& s) const;
  int64_t pages_to_fork(const SequenceState& s) const;

  // Bytes of weights the fast path reads for one decode token of one sequence: every
  // layer's mHC mixes, norms, attention, router, shared expert and top-k routed experts, the
  // Engram projections and rows, the final norm and head (the DSpark stages excluded).
  int64_t decode_weight_bytes() const;
  // Size of the mapped checkpoint files.
  int64_t checkpoint_bytes() const;

  // Runs `tokens` at positions state.position().. and writes logits [T, vocab] (every row),
  // or only the last row's [vocab] when `all_rows` is false, when `logits` is non-null.
  // `hidden_out` [dim], when non-null, receives the last row's final normed hidden (the head's
  // input), so that a caller can batch the head over many sequences with head_logits().
  Status forward(SequenceState& state, std::span<const int32_t> tokens, float* logits,
                 ForwardTrace* trace = nullptr, bool all_rows = true,
                 float* hidden_out = nullptr) const;
  // forward() of several sequences at once (for steps with many decoding sequences): one pass
  // over the layers whose projections, experts and mixes run over every sequence's rows
  // together (each weight read once for all of them) and whose attention runs each
  // sequence's rows on one thread of the pool: bit for bit what forward() gives each alone,
  // since no kernel's per-row arithmetic depends on the other rows or the thread split.
  // A sequence whose forward fails gets its error (its state is then unusable) and the
  // others go on. Writes every sequence's last-row normed hidden to hidden_out [n, dim], or,
  // for a sequence whose `all_rows` entry is true (`all_rows` empty, or one per sequence), the
  // normed hidden of each of its rows: sequence i's rows then start after the rows of those
  // before it (one each, or all theirs).
  std::vector<Status> forward_each(std::span<SequenceState* const> states,
                                   std::span<const std::span<const int32_t>> chunks,
                                   float* hidden_out, std::span<const bool> all_rows = {}) const;
  // logits [rows, vocab] = head · hidden [rows, dim].
  void head_logits(const float* hidden, int64_t rows, float* logits) const;

  // DSpark after a forward: drafts block_size tokens following `main_token` (the token
  // sampled from the last forward's last row), greedily, at positions position()... First
  // it writes the DSpark inputs of every token forwarded since the previous draft (at most
  // the last window of them) into the stages' rings; drafting leaves no other trace in the
  // state, so a rejected draft needs no rollback.
  Status draft(SequenceState& state, int32_t main_token, DraftResult* out,
               bool with_logits = true) const;
  // draft() of several sequences at once: the stages' row-wise work (mixes, norms,
  // projections, experts) and the head run over every sequence's block together (each weight
  // read once for all), each sequence's attention over its own rings: bit for bit what draft()
  // gives each alone. A sequence that fails (its token, a ring's pages) gets its error and the
  // others go on.
  std::vector<Status> draft_each(std::span<SequenceState* const> states,
                                 std::span<const int32_t> main_tokens, std::span<DraftResult> out,
                                 bool with_logits = true) const;

  // Speculative verification's undo. mark_rows(s, n) opens a mark before forwarding up to n
  // rows in all (decode rows past the prompt's end; 1 <= n <= the window); keep_rows(s, k)
  // closes it, keeping the first k rows forwarded since: the state is then exactly as if only
  // those k had been forwarded (ring slots, partial compression groups, compressed entries —
  // their pages go back to the pool —, tokens, DSpark inputs). forward() refuses rows past
  // the mark. keep_rows with every row forwarded keeps them all.
  Status mark_rows(SequenceState& s, int64_t rows) const;
  Status keep_rows(SequenceState& s, int64_t keep) const;
  // The most decode rows (up to `want`) one call at the sequence's position can run exactly:
  // each row's index keys must have been published before the call (see set_prompt_end).
  // 0 before the prompt's end.
  int64_t max_decode_rows(const SequenceState& s, int64_t want) const;

 private:
  V41Model() = default;
  // forward_each() in one pass (kUnsupported for a chunk the pass does not run: bounded
  // replay); sequence i's hidden rows go to hidden_out from row out_row[i].
  std::vector<Status> forward_rows(std::span<SequenceState* const> states,
                                   std::span<const std::span<const int32_t>> chunks,
                                   float* hidden_out, std::span<const int64_t> out_row,
                                   std::span<const bool> all_rows) const;
  Status forward_on(ThreadPool* pool, SequenceState& state, std::span<const int32_t> tokens,
                    float* logits, ForwardTrace* trace, bool all_rows, float* hidden_out) const;
  ModelOptions options_;
  kv::Fingerprint fingerprint_;
  std::unique_ptr<ModelWeights> w_;
  std::unique_ptr<ThreadPool> pool_;
};

// The position of the next token of a sequence.
int64_t sequence_position(const SequenceState& s);
// Bytes the state holds (pages of rings, compressed KV and index keys, partial groups,
// history); shared pages count in full.
int64_t sequence_bytes(const SequenceState& s);
// Decoder-side SWA bounded replay (shared/spec/algorithms.md §3.3), an approximation: prefill
// rows at positions below `position` run the layers after the last kv source not at all
// (that source's compressor still runs on them), and those layers' windows start at
// `position`. The engine sets it to prompt length - KEEP. 0 (the default) = exact.
void set_decoder_tail_start(SequenceState& s, int64_t position);
// Rows at positions below `position` are prompt rows: forward() computes them as one prefill
// of the whole prompt would, however the prompt is cut into chunks. Rows at or past it (and
// every row while it is 0, the default) are computed as the reference computes a call of
// that many rows: a one-token call is a decode step, whose ratio-2 indexers at an even
// position score against the last published index keys (ModelOptions::own_index_keys). A
// one-token chunk of a prompt (a chunk cut at a block boundary or by the step's budget, or
// the one token left after a prefix-cache hit) otherwise runs as such a decode step and
// differs from the prefill. With it set, rows past it score the index keys their own
// one-token decode step would, so a call of several decode rows (a speculative verify
// chunk) equals that many decode steps bit for bit, as long as no row reaches past the keys
// published before the call (about twice the call's start position on V4.1's ratios; a row
// that does is an invalid_argument, never a different answer). The engine sets it to the
// prompt's length.
void set_prompt_end(SequenceState& s, int64_t position);

}  // namespace fathom::model
