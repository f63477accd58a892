#include "tokenizer/pre_tokenizer.h"

#include <algorithm>

#include "core/utf8.h"
#include "tokenizer/unicode_props.h"

namespace fathom::tok {
namespace {

struct Span {
  size_t begin, end;
  bool is_match;
};

// Applies HF's SplitDelimiterBehavior to the alternating gap/match spans of one piece.
void emit_with_behavior(std::string_view piece, std::vector<Span>& spans, SplitBehavior behavior,
                        std::vector<std::string_view>& out) {
  std::vector<Span> merged;
  merged.reserve(spans.size());
  switch (behavior) {
    case SplitBehavior::kIsolated:
      merged = spans;
      break;
    case SplitBehavior::kRemoved:
      for (const Span& s : spans)
        if (!s.is_match) merged.push_back(s);
      break;
    case SplitBehavior::kContiguous: {
      bool prev_match = false;
      for (const Span& s : spans) {
        if (!merged.empty() && s.is_match == prev_match) {
          merged.back().end = s.end;
        } else {
          merged.push_back(s);
        }
        prev_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool prev_match = false;
      for (const Span& s : spans) {
        if (s.is_match && !prev_match && !merged.empty()) {
          merged.back().end = s.end;
        } else {
          merged.push_back(s);
        }
        prev_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool prev_match = false;
      for (size_t k = spans.size(); k-- > 0;) {
        const Span& s = spans[k];
        if (s.is_match && !prev_match && !merged.empty()) {
          merged.back().begin = s.begin;
        } else {
          merged.push_back(s);
        }
        prev_match = s.is_match;
      }
      std::reverse(merged.begin(), merged.end());
      break;
    }
  }
  for (const Span& s : merged)
    if (s.end > s.begin) out.push_back(piece.substr(s.begin, s.end - s.begin));
}

size_t char_len_at(std::string_view s, size_t i) {
  size_t n = utf8::valid_sequence_length(s, i);
  return n == 0 ? 1 : n;
}

}  // namespace

size_t PreTokenizer::safe_split_point(std::string_view, size_t) const {
  return std::string_view::npos;
}

Result<std::unique_ptr<SplitPreTokenizer>> SplitPreTokenizer::from_regex(std::string_view pattern,
                                                                         SplitBehavior behavior,
                                                                         bool invert) {
  std::unique_ptr<SplitPreTokenizer> p(new SplitPreTokenizer());
  FATHOM_ASSIGN_OR_RETURN(p->regex_, Regex::compile(pattern));
  p->behavior_ = behavior;
  p->invert_ = invert;
  return p;
}

std::unique_ptr<SplitPreTokenizer> SplitPreTokenizer::from_literal(std::string literal,
                                                                   SplitBehavior behavior,
                                                                   bool invert) {
  std::unique_ptr<SplitPreTokenizer> p(new SplitPreTokenizer());
  p->literal_ = std::move(literal);
  p->behavior_ = behavior;
  p->invert_ = invert;
  return p;
}

void SplitPreTokenizer::split(std::vector<std::string_view>& pieces,
                              PreTokenizeScratch& scratch) const {
  std::vector<std::string_view> out;
  out.reserve(pieces.size() * 2);
  std::vector<Span> spans;
  for (std::string_view piece : pieces) {
    spans.clear();
    size_t prev = 0, pos = 0;
    while (pos <= piece.size()) {
      size_t ms = 0, me = 0;
      if (regex_) {
        if (!regex_->find(piece, pos, &ms, &me, scratch.regex)) break;
      } else {
        if (literal_.empty()) break;
        ms = piece.find(literal_, pos);
        if (ms == std::string_view::npos) break;
        me = ms + literal_.size();
      }
      if (ms != prev) spans.push_back({prev, ms, false});
      spans.push_back({ms, me, true});
      prev = me;
      if (me == ms) {
        if (me >= piece.size()) break;
        pos = me + char_len_at(piece, me);
      } else {
        pos = me;
      }
    }
    if (prev != piece.size()) spans.push_back({prev, piece.size(), false});
    if (invert_)
      for (Span& s : spans) s.is_match = !s.is_match;
    emit_with_behavior(piece, spans, behavior_, out);
  }
  pieces.swap(out);
}

void DigitsPreTokenizer::split(std::vector<std::string_view>& pieces, PreTokenizeScratch&) const {
  std::vector<std::string_view> out;
  std::vector<Span> spans;
  const CharTable& table = char_table();
  for (std::string_view piece : pieces) {
    spans.clear();
    size_t gap = 0;
    for (size_t i = 0; i < piece.size();) {
      size_t len = 0;
      uint32_t cp = utf8::decode_at(piece, i, &len);
      if (char_flags(table, cp) & kNumber) {
        if (gap != i) spans.push_back({gap, i, false});
        spans.push_back({i, i + len, true});
        gap = i + len;
      }
      i += len;
    }
    if (gap != piece.size()) spans.push_back({gap, piece.size(), false});
    emit_with_behavior(piece, spans,
                       individual_ ? SplitBehavior::kIsolated : SplitBehavior::kContiguous, out);
  }
  pieces.swap(out);
}

Result<std::unique_ptr<ByteLevelPreTokenizer>> ByteLevelPreTokenizer::create(bool add_prefix_space,
                                                                             bool use_regex) {
  std::unique_ptr<ByteLevelPreTokenizer> p(new ByteLevelPreTokenizer());
  p->add_prefix_space_ = add_prefix_space;
  if (use_regex) {
    // The GPT-2 pattern HF's ByteLevel uses.
    FATHOM_ASSIGN_OR_RETURN(
        p->regex_,
        SplitPreTokenizer::from_regex(
            R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)",
            SplitBehavior::kIsolated, false));
  }
  return p;
}

void ByteLevelPreTokenizer::split(std::vector<std::string_view>& pieces,
                                  PreTokenizeScratch& scratch) const {
  if (add_prefix_space_) {
    for (std::string_view& piece : pieces) {
      if (!piece.empty() && piece[0] != ' ') {
        std::string& with_space = scratch.owned.emplace_back();
        with_space.reserve(piece.size() + 1);
        with_space.push_back(' ');
        with_space.append(piece);
        piece = with_space;
      }
    }
  }
  if (regex_) regex_->split(pieces, scratch);
}

void SequencePreTokenizer::split(std::vector<std::string_view>& pieces,
                                 PreTokenizeScratch& scratch) const {
  for (const auto& step : steps_) step->split(pieces, scratch);
}

}  // namespace fathom::tok
