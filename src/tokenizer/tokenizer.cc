#include "tokenizer/tokenizer.h"

#include <atomic>
#include <fstream>
#include <sstream>

#include "core/thread_pool.h"
#include "core/utf8.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer_impl.h"

namespace fathom {

namespace {

std::atomic<uint64_t> g_next_serial{1};

struct ScratchSlot {
  uint64_t serial;
  std::unique_ptr<EncodeScratch> scratch;
};

}  // namespace

EncodeScratch& Tokenizer::Impl::scratch() const {
  constexpr size_t kSlots = 4;
  thread_local std::vector<ScratchSlot> slots;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].serial == serial) {
      if (i != 0) std::swap(slots[i], slots[0]);
      return *slots[0].scratch;
    }
  }
  if (slots.size() == kSlots) slots.pop_back();
  slots.insert(slots.begin(), ScratchSlot{serial, std::make_unique<EncodeScratch>()});
  return *slots[0].scratch;
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  impl_->serial = g_next_serial.fetch_add(1);
}
Tokenizer::~Tokenizer() = default;

Result<std::unique_ptr<Tokenizer>> Tokenizer::load_json(std::string_view json,
                                                        TokenizerLoadOptions options) {
  FATHOM_ASSIGN_OR_RETURN(auto impl, load_tokenizer_json(json, options));
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::load_file(const std::string& path,
                                                        TokenizerLoadOptions options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open tokenizer file '" + path + "'");
  std::string data;
  in.seekg(0, std::ios::end);
  auto size = in.tellg();
  if (size < 0) return io_error("cannot read tokenizer file '" + path + "'");
  if (size > (std::streamoff(1) << 31))
    return invalid_argument("tokenizer file '" + path + "' is larger than 2 GiB");
  data.resize(static_cast<size_t>(size));
  in.seekg(0);
  in.read(data.data(), size);
  if (!in) return io_error("cannot read tokenizer file '" + path + "'");
  auto r = load_json(data, options);
  if (!r.is_ok()) return Status(r.status().code(), path + ": " + r.status().message());
  return r;
}

void Tokenizer::Impl::pre_tokenize_and_bpe(std::string_view text, std::vector<int32_t>& out,
                                           EncodeScratch& s) const {
  if (text.empty()) return;
  s.pieces.clear();
  if (fast_pre != nullptr) {
    fast_pre->split_text(text, s.pieces);
  } else {
    s.pieces.push_back(text);
    if (pre) pre->split(s.pieces, s.pre);
  }
  for (std::string_view p : s.pieces) bpe->encode_word(p, out, &s.cache);
  s.pre.owned.clear();
}

Status Tokenizer::Impl::encode_segment(std::string_view text, bool match_added,
                                       std::vector<int32_t>& out, EncodeScratch& s) const {
  if (normalizer) {
    s.normalized.assign(text);
    FATHOM_RETURN_IF_ERROR(normalizer->normalize(s.normalized, s.pre.regex));
    text = s.normalized;
  }
  if (match_added && added.has_normalized_tokens()) {
    s.sub_segments.clear();
    added.split(text, true, s.sub_segments);
    for (const tok::Segment& seg : s.sub_segments) {
      if (seg.token_id >= 0) {
        out.push_back(seg.token_id);
      } else {
        pre_tokenize_and_bpe(seg.text, out, s);
      }
    }
    return Status::ok();
  }
  pre_tokenize_and_bpe(text, out, s);
  return Status::ok();
}

namespace {

// A unit of parallel work: a text range to encode or a single added-token id.
struct WorkUnit {
  std::string_view text;
  int32_t token_id = -1;
  bool whole_segment = false;  // run normalization and normalized-token matching too
};

constexpr size_t kParallelChunkBytes = 64 * 1024;

}  // namespace

Result<std::vector<int32_t>> Tokenizer::encode(std::string_view text, EncodeOptions options,
                                               ThreadPool* pool) const {
  FATHOM_RETURN_IF_ERROR(utf8::validate(text));
  const Impl& im = *impl_;
  std::vector<int32_t> ids;
  bool match = options.match_added_tokens && !im.added.empty();
  bool parallel = pool != nullptr && pool->size() > 1 && text.size() >= 2 * kParallelChunkBytes;

  if (!parallel) {
    EncodeScratch* s = &im.scratch();
    ids.reserve(text.size() / 3 + 8);
    Status st;
    if (match) {
      s->segments.clear();
      im.added.split(text, false, s->segments);
      for (const tok::Segment& seg : s->segments) {
        if (seg.token_id >= 0) {
          ids.push_back(seg.token_id);
        } else {
          st = im.encode_segment(seg.text, true, ids, *s);
          if (!st.is_ok()) break;
        }
      }
    } else {
      st = im.encode_segment(text, false, ids, *s);
    }
    if (!st.is_ok()) return st;
  } else {
    // Build the units: added tokens, then text cut at safe points when possible.
    std::vector<tok::Segment> segs;
    if (match) {
      im.added.split(text, false, segs);
    } else {
      segs.push_back({text, -1});
    }
    std::vector<WorkUnit> units;
    bool can_cut = !im.normalizer && im.pre != nullptr;
    for (const tok::Segment& seg : segs) {
      if (seg.token_id >= 0) {
        units.push_back({{}, seg.token_id, false});
        continue;
      }
      if (!can_cut) {
        units.push_back({seg.text, -1, true});
        continue;
      }
      std::vector<tok::Segment> subs;
      if (match && im.added.has_normalized_tokens()) {
        im.added.split(seg.text, true, subs);
      } else {
        subs.push_back(seg);
      }
      for (const tok::Segment& sub : subs) {
        if (sub.token_id >= 0) {
          units.push_back({{}, sub.token_id, false});
          continue;
        }
        std::string_view rest = sub.text;
        while (rest.size() > 2 * kParallelChunkBytes) {
          size_t cut = im.pre->safe_split_point(rest, kParallelChunkBytes);
          if (cut == std::string_view::npos || cut >= rest.size()) break;
          units.push_back({rest.substr(0, cut), -1, false});
          rest.remove_prefix(cut);
        }
        units.push_back({rest, -1, false});
      }
    }
    std::vector<std::vector<int32_t>> parts(units.size());
    std::vector<Status> errors(units.size());
    pool->parallel_for(units.size(), [&](size_t i) {
      const WorkUnit& u = units[i];
      if (u.token_id >= 0) {
        parts[i].push_back(u.token_id);
        return;
      }
      EncodeScratch& s = im.scratch();
      // Encode into a vector owned by this thread's stack: pushing into parts[i] directly
      // would bounce the cache line holding neighbouring parts[] headers between cores.
      std::vector<int32_t> local;
      local.reserve(u.text.size() / 3 + 8);
      if (u.whole_segment) {
        errors[i] = im.encode_segment(u.text, match, local, s);
      } else {
        im.pre_tokenize_and_bpe(u.text, local, s);
      }
      parts[i] = std::move(local);
    });
    size_t total = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      if (!errors[i].is_ok()) return errors[i];
      total += parts[i].size();
    }
    ids.reserve(total + 8);
    for (auto& p : parts) ids.insert(ids.end(), p.begin(), p.end());
  }
  if (options.add_special_tokens) {
    const SpecialTemplate& t = im.special_template;
    ids.insert(ids.begin(), t.prefix.begin(), t.prefix.end());
    ids.insert(ids.end(), t.suffix.begin(), t.suffix.end());
  }
  return ids;
}

Status Tokenizer::encode_plain_into(std::string_view text, std::vector<int32_t>& out) const {
  FATHOM_RETURN_IF_ERROR(utf8::validate(text));
  return impl_->encode_segment(text, false, out, impl_->scratch());
}

Result<std::vector<std::vector<int32_t>>> Tokenizer::encode_batch(
    std::span<const std::string_view> texts, EncodeOptions options, ThreadPool* pool) const {
  std::vector<std::vector<int32_t>> out(texts.size());
  std::vector<Status> errors(texts.size());
  auto run = [&](size_t i) {
    auto r = encode(texts[i], options, nullptr);
    if (r.is_ok()) {
      out[i] = std::move(r).value();
    } else {
      errors[i] = r.status();
    }
  };
  if (pool != nullptr) {
    pool->parallel_for(texts.size(), run);
  } else {
    for (size_t i = 0; i < texts.size(); ++i) run(i);
  }
  for (size_t i = 0; i < errors.size(); ++i) {
    if (!errors[i].is_ok()) {
      return Status(errors[i].code(), "text " + std::to_string(i) + ": " + errors[i].message());
    }
  }
  return out;
}

Result<std::string> Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  const Impl& im = *impl_;
  std::string bytes;
  if (!im.byte_level_decoder) {
    // HF without a decoder: token spellings joined by spaces.
    for (int32_t id : ids) {
      if (id < 0 || size_t(id) >= im.id_kind.size() || im.id_kind[size_t(id)] == 0) {
        return out_of_range("token id " + std::to_string(id) + " is not in the vocabulary");
      }
      if (skip_special && im.id_kind[size_t(id)] == 3) continue;
      if (!bytes.empty()) bytes.push_back(' ');
      bytes += im.id_bytes[size_t(id)];
    }
    return utf8::to_lossy(bytes);
  }
  for (int32_t id : ids) {
    if (id < 0 || size_t(id) >= im.id_kind.size() || im.id_kind[size_t(id)] == 0) {
      return out_of_range("token id " + std::to_string(id) + " is not in the vocabulary");
    }
    if (skip_special && im.id_kind[size_t(id)] == 3) continue;
    bytes += im.id_bytes[size_t(id)];
  }
  return utf8::to_lossy(bytes);
}

int32_t Tokenizer::id_of(std::string_view spelling) const {
  int32_t id = impl_->added.id_of(spelling);
  if (id >= 0) return id;
  const auto& sp = impl_->bpe->id_spelling();
  std::string bytes;
  if (tok::byte_level::token_to_bytes(spelling, &bytes)) {
    int32_t v = impl_->bpe->id_of_bytes(bytes);
    if (v >= 0 && sp[size_t(v)] == spelling) return v;
  }
  // A vocabulary entry outside the byte-level alphabet: linear search (rare; not hot).
  for (size_t i = 0; i < sp.size(); ++i)
    if (!impl_->bpe->id_is_byte_level(int32_t(i)) && !sp[i].empty() && sp[i] == spelling)
      return int32_t(i);
  return -1;
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || size_t(id) >= impl_->id_bytes.size()) return {};
  return impl_->id_bytes[size_t(id)];
}

std::string_view Tokenizer::spelling(int32_t id) const {
  if (const tok::AddedToken* a = impl_->added.by_id(id)) return a->content;
  const auto& sp = impl_->bpe->id_spelling();
  if (id < 0 || size_t(id) >= sp.size()) return {};
  return sp[size_t(id)];
}

bool Tokenizer::is_added(int32_t id) const {
  return id >= 0 && size_t(id) < impl_->id_kind.size() && impl_->id_kind[size_t(id)] >= 2;
}
bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && size_t(id) < impl_->id_kind.size() && impl_->id_kind[size_t(id)] == 3;
}
size_t Tokenizer::vocab_size() const { return impl_->vocab_size; }
const std::vector<tok::AddedToken>& Tokenizer::added_tokens() const {
  return impl_->added.tokens();
}
bool Tokenizer::uses_fast_pre_tokenizer() const { return impl_->fast_pre != nullptr; }

Status StreamDecoder::push(int32_t id, std::string& out) {
  const Tokenizer::Impl& im = *tok_.impl_;
  if (id < 0 || size_t(id) >= im.id_kind.size() || im.id_kind[size_t(id)] == 0) {
    return out_of_range("token id " + std::to_string(id) + " is not in the vocabulary");
  }
  if (skip_special_ && im.id_kind[size_t(id)] == 3) return Status::ok();
  pending_ += im.id_bytes[size_t(id)];
  size_t keep = utf8::append_lossy(out, pending_, false);
  pending_.erase(0, pending_.size() - keep);
  return Status::ok();
}

void StreamDecoder::finish(std::string& out) {
  utf8::append_lossy(out, pending_, true);
  pending_.clear();
}

}  // namespace fathom
