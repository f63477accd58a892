// ModelRunner: what the engine needs from a model, and nothing more — new sequences, chunked
// forwards (one sequence over the whole machine, or many decoding sequences side by side),
// the batched head, the pages a forward or a fork takes, and prefix blocks to cache and
// resume from. The engine never includes a model header; the CLI (or a test) builds a runner
// for the loaded model (runner/v41_runner.h for DeepSeek-V4.1) and hands it to the Engine,
// which must not outlive it.
//
// A runner is immutable and may be called from any thread; each RunnerSequence belongs to one
// sequence and is used by one thread at a time (the engine's executor). A CachedBlock is
// immutable once exported, except that its side object may be dropped.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "kv/block_format.h"
#include "kv/page_pool.h"
#include "kv/prefix_cache.h"

namespace fathom::engine {

// One sequence's model state (windows, compressed KV, partial groups, history), opaque to
// the engine. Its KV pages come from the pool it was created with.
class RunnerSequence {
 public:
  virtual ~RunnerSequence() = default;
};

// What one prefix block added to a sequence's KV (kv/prefix_cache.h); the runner implements it.
using kv::CachedBlock;

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  // Config facts.
  virtual int64_t vocab_size() const = 0;
  virtual int64_t hidden_size() const = 0;  // the head's input width
  virtual int64_t window_size() const = 0;
  virtual int64_t context_length() const = 0;  // the model's maximum positions
  // Prefix blocks must be a multiple of this many tokens (every compression ratio divides
  // it); a block of B tokens then fills pages of page_bytes(B / block_alignment()).
  virtual int64_t block_alignment() const = 0;
  // Bytes of one KV page holding `entries` compressed entries with their index keys.
  virtual int64_t page_bytes(int64_t entries) const = 0;

  // A new, empty sequence whose pages come from `pool` (which must outlive it).
  virtual std::unique_ptr<RunnerSequence> new_sequence(kv::PagePool* pool) const = 0;
  // The position of the sequence's next token.
  virtual int64_t position(const RunnerSequence& s) const = 0;
  // Pages a forward of `tokens` more tokens may take (an upper bound).
  virtual int64_t pages_needed(const RunnerSequence& s, int64_t tokens) const = 0;
  // Decoder-side bounded replay (an approximation): see model::set_decoder_tail_start.
  virtual void set_decoder_tail_start(RunnerSequence& s, int64_t position) const = 0;
  // Positions below `position` are the prompt's: however its prefill is cut into chunks (one
  // token included), each row is computed as one prefill of the whole prompt computes it; rows
  // from `position` on are decode steps. See model::set_prompt_end.
  virtual void set_prompt_end(RunnerSequence& s, int64_t position) const = 0;

  // Runs `tokens` at the sequence's next positions; `hidden_out` [hidden_size], when non-null,
  // receives the last row's head input.
  virtual Status forward(RunnerSequence& s, std::span<const int32_t> tokens,
                         float* hidden_out) const = 0;
  // forward() of several sequences in one pass over the weights, each exactly as alone (a
  // sequence that fails gets its error, the others go on); every sequence's last-row head
  // input goes to hidden_out [n, hidden_size]. A sequence whose `verify` entry is true
  // (`verify` empty, or one per sequence) runs its chunk as verify() does (keep_rows then
  // keeps some of its rows; after a failure none are kept) and gets the head input of every
  // row: sequence i's rows start after the rows of those before it (one each, or all theirs).
  virtual std::vector<Status> forward_each(std::span<RunnerSequence* const> states,
                                           std::span<const std::span<const int32_t>> chunks,
                                           float* hidden_out,
                                           std::span<const bool> verify) const = 0;
  // logits [rows, vocab] = head · hidden [rows, hidden_size]; each row as a batch of one.
  virtual void head_logits(const float* hidden, int64_t rows, float* logits) const = 0;

  // Speculative decoding (DSpark). Draft tokens per draft() (0: the model has no draft
  // stages).
  virtual int64_t draft_block_size() const = 0;
  // After a forward whose last row gave `main_token`: the draft stages' greedy tokens for the
  // positions after it (draft_block_size() of them, into `drafts`) and their confidence
  // logits (before the sigmoid). Leaves nothing in the state a rejected draft would undo.
  virtual Status draft(RunnerSequence& s, int32_t main_token, std::vector<int32_t>* drafts,
                       std::vector<float>* confidence) const = 0;
  // draft() of several sequences at once, each getting what it gets alone (the stages' weights
  // read once for all); a sequence that fails gets its error and the others go on.
  virtual std::vector<Status> draft_each(std::span<RunnerSequence* const> states,
                                         std::span<const int32_t> main_tokens,
                                         std::span<std::vector<int32_t>> drafts,
                                         std::span<std::vector<float>> confidence) const = 0;
  // The most rows (up to `want`) a verify() at the sequence's position computes exactly as
  // one-token decode steps; 0 before the prompt's end.
  virtual int64_t max_verify_rows(const RunnerSequence& s, int64_t want) const = 0;
  // Decode rows in one call: logits [tokens, vocab], each row exactly as that token's
  // one-token decode step gives it; afterwards keep_rows(k) keeps the first k rows, leaving
  // the state as if only they had run (their KV pages go back to the pool).
  // REQUIRES: tokens.size() <= max_verify_rows(s, ...).
  virtual Status verify(RunnerSequence& s, std::span<const int32_t> tokens,
                        float* logits) const = 0;
  virtual Status keep_rows(RunnerSequence& s, int64_t keep) const = 0;

  // A copy that continues on its own, sharing full KV pages (n samples of one prompt); takes
  // at most pages_to_fork(s) pages.
  virtual Result<std::unique_ptr<RunnerSequence>> fork(const RunnerSequence& s) const = 0;
  virtual int64_t pages_to_fork(const RunnerSequence& s) const = 0;

  // The block of `block_tokens` tokens ending at the sequence's position, with the window
  // side object when `with_side_object`.
  virtual Result<std::unique_ptr<CachedBlock>> export_block(const RunnerSequence& s,
                                                            int64_t block_tokens,
                                                            bool with_side_object) const = 0;
  // A sequence resumed from a chain of cached blocks covering prefix (block 1 first): exactly
  // at the chain's end with the last block's side object, else SWA bounded replay (the caller
  // forwards prefix[position(), P) again).
  virtual Result<std::unique_ptr<RunnerSequence>> resume(std::span<const CachedBlock* const> chain,
                                                         int64_t block_tokens,
                                                         std::span<const int32_t> prefix,
                                                         kv::PagePool* pool) const = 0;

  // The KV store (kv/store.h, kv/block_format.h). The model's identity: blocks of another
  // fingerprint are never used.
  virtual kv::Fingerprint fingerprint() const = 0;
  // A cached block as a store object (header `h`; `ids` are its tokens).
  virtual std::string encode_block(const CachedBlock& b, const kv::ObjectHeader& h,
                                   std::span<const int32_t> ids) const = 0;
  // Its window side object as a store object; kInvalidArgument when it has none.
  virtual Result<std::string> encode_window(const CachedBlock& b,
                                            const kv::ObjectHeader& h) const = 0;
  // A block read back: validated against `expect`, the model's shapes and `ids` (kCorrupt,
  // with a kv::BlockFault, when any check fails); its pages come from `pool`.
  virtual Result<std::unique_ptr<CachedBlock>> decode_block(std::string_view bytes,
                                                            const kv::ObjectHeader& expect,
                                                            std::span<const int32_t> ids,
                                                            kv::PagePool* pool) const = 0;
  // A window object read back, validated the same way, becomes `block`'s side object.
  // REQUIRES: `block` came from decode_block() and is not cached yet.
  virtual Status decode_window(std::string_view bytes, const kv::ObjectHeader& expect,
                               kv::PagePool* pool, CachedBlock& block) const = 0;
};

}  // namespace fathom::engine
