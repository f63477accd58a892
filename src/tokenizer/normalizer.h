// Normalizers: the first stage of the pipeline, rewriting text before pre-tokenization as
// tokenizer.json's "normalizer" says (Unicode NFC/NFD/NFKC/NFKD via utf8proc, Lowercase,
// StripAccents, Strip, Replace, Prepend, Sequence). Immutable; safe to use from many threads.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace fathom::tok {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Rewrites `text` in place. REQUIRES: valid UTF-8; the result is valid UTF-8.
  virtual Status normalize(std::string& text, RegexScratch& scratch) const = 0;
};

enum class UnicodeForm { kNFC, kNFD, kNFKC, kNFKD };

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(UnicodeForm form) : form_(form) {}
  Status normalize(std::string& text, RegexScratch& scratch) const override;

 private:
  UnicodeForm form_;
};

class LowercaseNormalizer final : public Normalizer {
 public:
  Status normalize(std::string& text, RegexScratch& scratch) const override;
};

// Removes combining marks (Unicode categories Mn, Mc, Me), as HF's StripAccents
// (`is_combining_mark`).
class StripAccentsNormalizer final : public Normalizer {
 public:
  Status normalize(std::string& text, RegexScratch& scratch) const override;
};

class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  Status normalize(std::string& text, RegexScratch& scratch) const override;

 private:
  bool left_, right_;
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  Status normalize(std::string& text, RegexScratch& scratch) const override;

 private:
  std::string prefix_;
};

// Replaces every match of a literal or a regex with `content`.
class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(std::string literal, std::unique_ptr<Regex> regex, std::string content)
      : literal_(std::move(literal)), regex_(std::move(regex)), content_(std::move(content)) {}
  Status normalize(std::string& text, RegexScratch& scratch) const override;

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
  std::string content_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  Status normalize(std::string& text, RegexScratch& scratch) const override;
  bool empty() const { return steps_.empty(); }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace fathom::tok
