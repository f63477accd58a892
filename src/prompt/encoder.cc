#include "prompt/encoder.h"

#include "core/thread_pool.h"

namespace fathom::prompt {

Result<PromptEncoder> PromptEncoder::create(const Tokenizer& tokenizer) {
  PromptEncoder e(tokenizer);
  for (const std::string& s : control_spellings()) {
    int32_t id = tokenizer.id_of(s);
    if (id >= 0) e.specials_[s] = id;
  }
  for (const char* required :
       {"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>"}) {
    if (!e.specials_.count(required)) {
      return not_found(std::string("the tokenizer has no special token ") + required);
    }
  }
  return e;
}

int32_t PromptEncoder::special_id(std::string_view spelling) const {
  auto it = specials_.find(std::string(spelling));
  return it == specials_.end() ? -1 : it->second;
}

Result<std::vector<int32_t>> PromptEncoder::encode(const Prompt& prompt, ThreadPool* pool) const {
  const auto& pieces = prompt.pieces();
  std::vector<std::vector<int32_t>> parts(pieces.size());
  std::vector<Status> errors(pieces.size());
  // Pieces this long are cut inside (Tokenizer's parallel path) after the others.
  constexpr size_t kBigPiece = 256 * 1024;
  auto run = [&](size_t i) {
    const PromptPiece& p = pieces[i];
    if (pool != nullptr && !p.special && p.text.size() >= kBigPiece) return;
    if (p.special) {
      int32_t id = special_id(p.text);
      if (id < 0) {
        errors[i] = not_found("the tokenizer has no special token " + p.text);
      } else {
        parts[i].push_back(id);
      }
      return;
    }
    std::vector<int32_t> local;  // thread-local buffer: no false sharing on parts[]
    errors[i] = tok_->encode_plain_into(p.text, local);
    parts[i] = std::move(local);
  };
  if (pool != nullptr && pieces.size() > 1) {
    pool->parallel_for(pieces.size(), run);
  } else {
    for (size_t i = 0; i < pieces.size(); ++i) run(i);
  }
  if (pool != nullptr) {
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (pieces[i].special || pieces[i].text.size() < kBigPiece) continue;
      auto r = tok_->encode_plain(pieces[i].text, pool);
      if (!r.is_ok()) return r.status();
      parts[i] = std::move(r).value();
    }
  }
  size_t total = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (!errors[i].is_ok()) return errors[i];
    total += parts[i].size();
  }
  std::vector<int32_t> ids;
  ids.reserve(total);
  for (const auto& p : parts) ids.insert(ids.end(), p.begin(), p.end());
  return ids;
}

}  // namespace fathom::prompt
