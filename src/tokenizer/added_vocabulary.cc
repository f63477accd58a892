#include "tokenizer/added_vocabulary.h"

#include <cstring>

#include "core/utf8.h"
#include "tokenizer/unicode_props.h"

namespace fathom::tok {

void SpellingMatcher::add(std::string_view spelling, int32_t index) {
  if (spelling.empty()) return;
  int32_t node = 0;
  for (unsigned char c : spelling) {
    int32_t child = -1;
    for (const auto& [b, n] : nodes_[size_t(node)].next) {
      if (b == c) {
        child = n;
        break;
      }
    }
    if (child < 0) {
      child = static_cast<int32_t>(nodes_.size());
      nodes_[size_t(node)].next.emplace_back(c, child);
      nodes_.emplace_back();
    }
    node = child;
  }
  // A later duplicate spelling replaces an earlier one.
  nodes_[size_t(node)].terminal = index;
  unsigned char f = static_cast<unsigned char>(spelling[0]);
  if (!first_[f]) {
    first_[f] = true;
    single_first_ = ++distinct_first_ == 1 ? f : -1;
  }
}

bool SpellingMatcher::find(std::string_view s, size_t pos, size_t* start, size_t* end,
                           int32_t* index) const {
  if (empty()) return false;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = pos; i < s.size(); ++i) {
    if (single_first_ >= 0) {
      const void* hit = std::memchr(p + i, single_first_, s.size() - i);
      if (hit == nullptr) return false;
      i = static_cast<size_t>(static_cast<const unsigned char*>(hit) - p);
    } else if (!first_[p[i]]) {
      continue;
    }
    int32_t node = 0, best = -1;
    size_t best_end = 0;
    for (size_t j = i; j < s.size(); ++j) {
      int32_t child = -1;
      for (const auto& [b, n] : nodes_[size_t(node)].next) {
        if (b == p[j]) {
          child = n;
          break;
        }
      }
      if (child < 0) break;
      node = child;
      if (nodes_[size_t(node)].terminal >= 0) {
        best = nodes_[size_t(node)].terminal;
        best_end = j + 1;
      }
    }
    if (best >= 0) {
      *start = i;
      *end = best_end;
      *index = best;
      return true;
    }
  }
  return false;
}

Result<AddedVocabulary> AddedVocabulary::build(std::vector<AddedToken> tokens,
                                               const std::vector<std::string>& normalized) {
  AddedVocabulary v;
  v.tokens_ = std::move(tokens);
  for (size_t i = 0; i < v.tokens_.size(); ++i) {
    const AddedToken& t = v.tokens_[i];
    if (t.id < 0)
      return corrupt("tokenizer.json: added token '" + t.content + "' has a negative id");
    if (!utf8::is_valid(t.content))
      return corrupt("tokenizer.json: added token content is not valid UTF-8");
    v.by_id_[t.id] = i;
    v.by_content_[t.content] = t.id;
    if (t.content.empty()) continue;
    if (t.normalized) {
      v.normalized_.add(i < normalized.size() ? std::string_view(normalized[i]) : t.content,
                        static_cast<int32_t>(i));
    } else {
      v.raw_.add(t.content, static_cast<int32_t>(i));
    }
  }
  return v;
}

const AddedToken* AddedVocabulary::by_id(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

int32_t AddedVocabulary::id_of(std::string_view content) const {
  auto it = by_content_.find(std::string(content));
  return it == by_content_.end() ? -1 : it->second;
}

namespace {

uint32_t last_char(std::string_view s) {
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  size_t len = 0;
  return utf8::decode_at(s, i, &len);
}

}  // namespace

void AddedVocabulary::split(std::string_view text, bool normalized_set,
                            std::vector<Segment>& out) const {
  const SpellingMatcher& m = normalized_set ? normalized_ : raw_;
  size_t start_offset = 0, pos = 0;
  size_t ms = 0, me = 0;
  int32_t idx = -1;
  while (pos < text.size() && m.find(text, pos, &ms, &me, &idx)) {
    pos = me;
    const AddedToken& t = tokens_[size_t(idx)];
    size_t start = ms, stop = me;
    if (t.single_word) {
      bool start_space = start == 0 || !is_word_char(last_char(text.substr(0, start)));
      size_t l = 0;
      bool stop_space = stop == text.size() || !is_word_char(utf8::decode_at(text, stop, &l));
      if (!start_space || !stop_space) continue;
    }
    if (start < start_offset) continue;  // overlaps whitespace an rstrip already took
    if (t.lstrip) {
      size_t s = start;
      while (s > start_offset) {
        size_t b = s - 1;
        while (b > 0 && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
        size_t l = 0;
        if (!(char_flags(utf8::decode_at(text, b, &l)) & kSpace)) break;
        s = b;
      }
      start = s;
    }
    if (t.rstrip) {
      while (stop < text.size()) {
        size_t l = 0;
        if (!(char_flags(utf8::decode_at(text, stop, &l)) & kSpace)) break;
        stop += l;
      }
    }
    if (start_offset < start) out.push_back({text.substr(start_offset, start - start_offset), -1});
    out.push_back({text.substr(start, stop - start), t.id});
    start_offset = stop;
  }
  if (start_offset < text.size()) out.push_back({text.substr(start_offset), -1});
}

}  // namespace fathom::tok
