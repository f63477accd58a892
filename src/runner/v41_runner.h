// V41Runner: the engine's ModelRunner over a loaded DeepSeek-V4.1 model (model/v41.h). A thin
// adapter: each call forwards to V41Model; sequences and cached blocks wrap the model's own
// SequenceState and KvBlock. Built by whoever loads the model (the CLI, tests) and handed to
// the Engine; it must outlive the engine and the model must outlive it. Immutable; any thread.
#pragma once

#include "engine/model_runner.h"

namespace fathom::model {
class V41Model;
}

namespace fathom::runner {

class V41Runner : public engine::ModelRunner {
 public:
  explicit V41Runner(const model::V41Model& model) : model_(model) {}

  int64_t vocab_size() const override;
  int64_t hidden_size() const override;
  int64_t window_size() const override;
  int64_t context_length() const override;
  int64_t block_alignment() const override;
  int64_t page_bytes(int64_t entries) const override;

  std::unique_ptr<engine::RunnerSequence> new_sequence(kv::PagePool* pool) const override;
  int64_t position(const engine::RunnerSequence& s) const override;
  int64_t pages_needed(const engine::RunnerSequence& s, int64_t tokens) const override;
  void set_decoder_tail_start(engine::RunnerSequence& s, int64_t position) const override;
  void set_prompt_end(engine::RunnerSequence& s, int64_t position) const override;

  Status forward(engine::RunnerSequence& s, std::span<const int32_t> tokens,
                 float* hidden_out) const override;
  std::vector<Status> forward_each(std::span<engine::RunnerSequence* const> states,
                                   std::span<const std::span<const int32_t>> chunks,
                                   float* hidden_out, std::span<const bool> verify) const override;
  void head_logits(const float* hidden, int64_t rows, float* logits) const override;

  int64_t draft_block_size() const override;
  Status draft(engine::RunnerSequence& s, int32_t main_token, std::vector<int32_t>* drafts,
               std::vector<float>* confidence) const override;
  std::vector<Status> draft_each(std::span<engine::RunnerSequence* const> states,
                                 std::span<const int32_t> main_tokens,
                                 std::span<std::vector<int32_t>> drafts,
                                 std::span<std::vector<float>> confidence) const override;
  int64_t max_verify_rows(const engine::RunnerSequence& s, int64_t want) const override;
  Status verify(engine::RunnerSequence& s, std::span<const int32_t> tokens,
                float* logits) const override;
  Status keep_rows(engine::RunnerSequence& s, int64_t keep) const override;

  Result<std::unique_ptr<engine::RunnerSequence>> fork(
      const engine::RunnerSequence& s) const override;
  int64_t pages_to_fork(const engine::RunnerSequence& s) const override;

  Result<std::unique_ptr<engine::CachedBlock>> export_block(const engine::RunnerSequence& s,
                                                            int64_t block_tokens,
                                                            bool with_side_object) const override;
  Result<std::unique_ptr<engine::RunnerSequence>> resume(
      std::span<const engine::CachedBlock* const> chain, int64_t block_tokens,
      std::span<const int32_t> prefix, kv::PagePool* pool) const override;

  kv::Fingerprint fingerprint() const override;
  std::string encode_block(const engine::CachedBlock& b, const kv::ObjectHeader& h,
                           std::span<const int32_t> ids) const override;
  Result<std::string> encode_window(const engine::CachedBlock& b,
                                    const kv::ObjectHeader& h) const override;
  Result<std::unique_ptr<engine::CachedBlock>> decode_block(std::string_view bytes,
                                                            const kv::ObjectHeader& expect,
                                                            std::span<const int32_t> ids,
                                                            kv::PagePool* pool) const override;
  Status decode_window(std::string_view bytes, const kv::ObjectHeader& expect, kv::PagePool* pool,
                       engine::CachedBlock& block) const override;

 private:
  const model::V41Model& model_;
};

}  // namespace fathom::runner
