// Pre-tokenizers: the stage that cuts normalized text into pieces ("words") before BPE, as
// configured by tokenizer.json's "pre_tokenizer". Each implementation has one job: Split
// (regex or literal, every HF delimiter behaviour, optional invert), ByteLevel (optional
// GPT-2 regex and prefix space), Digits, Sequence, and DeepSeekPreTokenizer, a hand-written
// scanner equivalent to DeepSeek's three Split regexes. Instances are immutable and may be
// used from many threads at once, each with its own PreTokenizeScratch.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace fathom::tok {

// Per-thread working memory for pre-tokenization.
struct PreTokenizeScratch {
  std::vector<std::string_view> tmp;
  std::deque<std::string> owned;  // text created by pre-tokenizers (prefix spaces)
  RegexScratch regex;
  void reset() {
    tmp.clear();
    owned.clear();
  }
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces each piece with its sub-pieces, in order. Empty pieces are dropped. Pieces
  // point into the input text or into scratch.owned. REQUIRES: pieces are valid UTF-8.
  virtual void split(std::vector<std::string_view>& pieces, PreTokenizeScratch& scratch) const = 0;

  // A byte offset p in [from, text.size()) such that pre-tokenizing text[0, p) and
  // text[p, end) separately yields exactly the pieces of pre-tokenizing text whole, or npos
  // when the implementation cannot promise one. Used to encode one long text in parallel.
  virtual size_t safe_split_point(std::string_view text, size_t from) const;
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Splits on a regex (Oniguruma semantics) or a literal string.
class SplitPreTokenizer final : public PreTokenizer {
 public:
  static Result<std::unique_ptr<SplitPreTokenizer>> from_regex(std::string_view pattern,
                                                               SplitBehavior behavior, bool invert);
  static std::unique_ptr<SplitPreTokenizer> from_literal(std::string literal,
                                                         SplitBehavior behavior, bool invert);
  void split(std::vector<std::string_view>& pieces, PreTokenizeScratch& scratch) const override;

 private:
  SplitPreTokenizer() = default;
  std::unique_ptr<Regex> regex_;
  std::string literal_;
  SplitBehavior behavior_ = SplitBehavior::kIsolated;
  bool invert_ = false;
};

// Splits off every numeric character (individual) or runs of them.
class DigitsPreTokenizer final : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual) : individual_(individual) {}
  void split(std::vector<std::string_view>& pieces, PreTokenizeScratch& scratch) const override;

 private:
  bool individual_;
};

// HF's ByteLevel pre-tokenizer: optional prefix space, optional GPT-2 split regex. The byte
// to alphabet mapping itself happens inside BpeModel, which works on raw bytes.
class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  static Result<std::unique_ptr<ByteLevelPreTokenizer>> create(bool add_prefix_space,
                                                               bool use_regex);
  void split(std::vector<std::string_view>& pieces, PreTokenizeScratch& scratch) const override;
  bool is_noop() const { return !add_prefix_space_ && !regex_; }

 private:
  ByteLevelPreTokenizer() = default;
  bool add_prefix_space_ = false;
  std::unique_ptr<SplitPreTokenizer> regex_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  void split(std::vector<std::string_view>& pieces, PreTokenizeScratch& scratch) const override;

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

// The exact equivalent of DeepSeek's Sequence[Split(\p{N}{1,3}), Split(CJK/kana run),
// Split(main pattern), ByteLevel(no prefix, no regex)], all Isolated, in one linear pass.
class DeepSeekPreTokenizer final : public PreTokenizer {
 public:
  void split(std::vector<std::string_view>& pieces, PreTokenizeScratch& scratch) const override;
  size_t safe_split_point(std::string_view text, size_t from) const override;
  // Appends the pieces of one text (no allocation beyond `out`).
  void split_text(std::string_view text, std::vector<std::string_view>& out) const;

  static const char* const kDigitsPattern;
  static const char* const kCjkPattern;
  static const char* const kMainPattern;
};

}  // namespace fathom::tok
