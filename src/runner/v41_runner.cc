#include "runner/v41_runner.h"

#include <algorithm>
#include <memory>
#include <numeric>

#include "model/v41.h"

namespace fathom::runner {
namespace {

struct Sequence final : engine::RunnerSequence {
  explicit Sequence(std::unique_ptr<model::SequenceState> s) : state(std::move(s)) {}
  std::unique_ptr<model::SequenceState> state;
};

struct Block final : engine::CachedBlock {
  explicit Block(model::KvBlock b) : kv(std::move(b)) {}
  int64_t bytes() const override { return kv.bytes; }
  bool has_side_object() const override { return kv.swa != nullptr; }
  void drop_side_object() override {
    if (!kv.swa) return;
    kv.bytes -= model::sequence_bytes(*kv.swa);
    kv.swa.reset();
  }
  bool frees_pages() const override {
    if (kv.swa) return true;
    for (const auto& pages : kv.pages)
      if (!pages.empty() && pages.front().use_count() == 1) return true;
    return false;
  }
  model::KvBlock kv;
};

model::SequenceState& state(engine::RunnerSequence& s) { return *static_cast<Sequence&>(s).state; }
const model::SequenceState& state(const engine::RunnerSequence& s) {
  return *static_cast<const Sequence&>(s).state;
}

}  // namespace

int64_t V41Runner::vocab_size() const { return model_.config().vocab_size; }
int64_t V41Runner::hidden_size() const { return model_.config().dim; }
int64_t V41Runner::window_size() const { return model_.config().window_size; }

int64_t V41Runner::context_length() const {
  const model::ModelConfig& c = model_.config();
  return c.rope_factor > 1 ? int64_t(double(c.original_seq_len) * c.rope_factor)
                           : c.original_seq_len;
}

int64_t V41Runner::block_alignment() const {
  const model::ModelConfig& c = model_.config();
  int64_t ratios = 1;
  for (int64_t l : c.kv_source_layers) ratios = std::lcm(ratios, c.compress_ratios[size_t(l)]);
  return ratios;
}

int64_t V41Runner::page_bytes(int64_t entries) const { return model_.page_bytes(entries); }

std::unique_ptr<engine::RunnerSequence> V41Runner::new_sequence(kv::PagePool* pool) const {
  return std::make_unique<Sequence>(model_.new_sequence(pool));
}

int64_t V41Runner::draft_block_size() const {
  const model::ModelConfig& c = model_.config();
  return c.n_mtp_layers > 0 ? c.dspark_block_size : 0;
}

Status V41Runner::draft(engine::RunnerSequence& s, int32_t main_token, std::vector<int32_t>* drafts,
                        std::vector<float>* confidence) const {
  model::DraftResult d;
  FATHOM_RETURN_IF_ERROR(model_.draft(state(s), main_token, &d, false));
  drafts->assign(d.ids.begin() + 1, d.ids.end());
  confidence->assign(d.confidence.begin(), d.confidence.end());
  return Status::ok();
}

std::vector<Status> V41Runner::draft_each(std::span<engine::RunnerSequence* const> states,
                                          std::span<const int32_t> main_tokens,
                                          std::span<std::vector<int32_t>> drafts,
                                          std::span<std::vector<float>> confidence) const {
  std::vector<model::SequenceState*> raw;
  raw.reserve(states.size());
  for (engine::RunnerSequence* s : states) raw.push_back(&state(*s));
  std::vector<model::DraftResult> d(states.size());
  std::vector<Status> out = model_.draft_each(raw, main_tokens, d, false);
  for (size_t i = 0; i < states.size(); ++i) {
    if (!out[i].is_ok()) continue;
    drafts[i].assign(d[i].ids.begin() + 1, d[i].ids.end());
    confidence[i].assign(d[i].confidence.begin(), d[i].confidence.end());
  }
  return out;
}

int64_t V41Runner::max_verify_rows(const engine::RunnerSequence& s, int64_t want) const {
  return model_.max_decode_rows(state(s), std::min(want, model_.config().window_size));
}

Status V41Runner::verify(engine::RunnerSequence& s, std::span<const int32_t> tokens,
                         float* logits) const {
  model::SequenceState& st = state(s);
  FATHOM_RETURN_IF_ERROR(model_.mark_rows(st, int64_t(tokens.size())));
  const Status r = model_.forward(st, tokens, logits, nullptr, true);
  if (!r.is_ok()) (void)model_.keep_rows(st, 0);
  return r;
}

Status V41Runner::keep_rows(engine::RunnerSequence& s, int64_t keep) const {
  return model_.keep_rows(state(s), keep);
}

int64_t V41Runner::position(const engine::RunnerSequence& s) const {
  return model::sequence_position(state(s));
}

int64_t V41Runner::pages_needed(const engine::RunnerSequence& s, int64_t tokens) const {
  return model_.pages_needed(state(s), tokens);
}

void V41Runner::set_decoder_tail_start(engine::RunnerSequence& s, int64_t position) const {
  model::set_decoder_tail_start(state(s), position);
}

void V41Runner::set_prompt_end(engine::RunnerSequence& s, int64_t position) const {
  model::set_prompt_end(state(s), position);
}

Status V41Runner::forward(engine::RunnerSequence& s, std::span<const int32_t> tokens,
                          float* hidden_out) const {
  return model_.forward(state(s), tokens, nullptr, nullptr, false, hidden_out);
}

std::vector<Status> V41Runner::forward_each(std::span<engine::RunnerSequence* const> states,
                                            std::span<const std::span<const int32_t>> chunks,
                                            float* hidden_out, std::span<const bool> verify) const {
  if (verify.empty()) {
    std::vector<model::SequenceState*> raw;
    raw.reserve(states.size());
    for (engine::RunnerSequence* s : states) raw.push_back(&state(*s));
    return model_.forward_each(raw, chunks, hidden_out);
  }
  // The verify sequences' rows are marked first, as verify() marks them; one whose mark is
  // refused gets that error and stays out of the pass (its hidden rows are left as they are).
  // The pass writes the others' rows packed; they move to the caller's layout after it.
  const int64_t D = hidden_size();
  std::vector<Status> out(states.size());
  std::vector<model::SequenceState*> raw;
  std::vector<std::span<const int32_t>> run_chunks;
  std::vector<size_t> index;  // pass -> sequence
  const std::unique_ptr<bool[]> run_all(new bool[states.size()]);
  std::vector<int64_t> out_row(states.size());
  size_t rows = 0;
  for (size_t i = 0, row = 0; i < states.size(); ++i) {
    const bool v = i < verify.size() && verify[i];
    const size_t n = v ? chunks[i].size() : 1;
    out_row[i] = int64_t(row);
    row += n;
    if (v) out[i] = model_.mark_rows(state(*states[i]), int64_t(chunks[i].size()));
    if (!out[i].is_ok()) continue;
    run_all[index.size()] = v;
    raw.push_back(&state(*states[i]));
    run_chunks.push_back(chunks[i]);
    index.push_back(i);
    rows += n;
  }
  std::vector<float> hidden(rows * size_t(D));
  const std::vector<Status> ran = model_.forward_each(
      raw, run_chunks, hidden.data(), std::span<const bool>(run_all.get(), index.size()));
  for (size_t k = 0, from = 0; k < index.size(); ++k) {
    const size_t i = index[k], n = run_all[k] ? run_chunks[k].size() : 1;
    out[i] = ran[k];
    if (out[i].is_ok())
      std::copy_n(&hidden[from * size_t(D)], n * size_t(D), hidden_out + out_row[i] * D);
    else if (run_all[k])
      (void)model_.keep_rows(*raw[k], 0);
    from += n;
  }
  return out;
}

void V41Runner::head_logits(const float* hidden, int64_t rows, float* logits) const {
  model_.head_logits(hidden, rows, logits);
}

Result<std::unique_ptr<engine::RunnerSequence>> V41Runner::fork(
    const engine::RunnerSequence& s) const {
  FATHOM_ASSIGN_OR_RETURN(auto forked, model_.fork(state(s)));
  return std::unique_ptr<engine::RunnerSequence>(std::make_unique<Sequence>(std::move(forked)));
}

int64_t V41Runner::pages_to_fork(const engine::RunnerSequence& s) const {
  return model_.pages_to_fork(state(s));
}

Result<std::unique_ptr<engine::CachedBlock>> V41Runner::export_block(
    const engine::RunnerSequence& s, int64_t block_tokens, bool with_side_object) const {
  FATHOM_ASSIGN_OR_RETURN(model::KvBlock b,
                          model_.export_block(state(s), block_tokens, with_side_object));
  return std::unique_ptr<engine::CachedBlock>(std::make_unique<Block>(std::move(b)));
}

Result<std::unique_ptr<engine::RunnerSequence>> V41Runner::resume(
    std::span<const engine::CachedBlock* const> chain, int64_t block_tokens,
    std::span<const int32_t> prefix, kv::PagePool* pool) const {
  std::vector<const model::KvBlock*> blocks;
  blocks.reserve(chain.size());
  for (const engine::CachedBlock* b : chain) blocks.push_back(&static_cast<const Block*>(b)->kv);
  FATHOM_ASSIGN_OR_RETURN(auto resumed, model_.resume(blocks, block_tokens, prefix, pool));
  return std::unique_ptr<engine::RunnerSequence>(std::make_unique<Sequence>(std::move(resumed)));
}

kv::Fingerprint V41Runner::fingerprint() const { return model_.fingerprint(); }

std::string V41Runner::encode_block(const engine::CachedBlock& b, const kv::ObjectHeader& h,
                                    std::span<const int32_t> ids) const {
  return model_.encode_block(static_cast<const Block&>(b).kv, h, ids);
}

Result<std::string> V41Runner::encode_window(const engine::CachedBlock& b,
                                             const kv::ObjectHeader& h) const {
  return model_.encode_window(static_cast<const Block&>(b).kv, h);
}

Result<std::unique_ptr<engine::CachedBlock>> V41Runner::decode_block(std::string_view bytes,
                                                                     const kv::ObjectHeader& expect,
                                                                     std::span<const int32_t> ids,
                                                                     kv::PagePool* pool) const {
  FATHOM_ASSIGN_OR_RETURN(model::KvBlock b, model_.decode_block(bytes, expect, ids, pool));
  return std::unique_ptr<engine::CachedBlock>(std::make_unique<Block>(std::move(b)));
}

Status V41Runner::decode_window(std::string_view bytes, const kv::ObjectHeader& expect,
                                kv::PagePool* pool, engine::CachedBlock& block) const {
  return model_.decode_window(bytes, expect, pool, &static_cast<Block&>(block).kv);
}

}  // namespace fathom::runner
