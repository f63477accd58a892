// Regex: a compiled PCRE2 (JIT) pattern with the semantics Hugging Face `tokenizers` gets
// from Oniguruma: UTF-8, Unicode properties, and \s meaning exactly Unicode White_Space
// (PCRE2's own \s differs, so patterns are rewritten on compile). Character properties
// come from PCRE2's tables (Unicode 14 in Debian 12), older than HF's. Immutable after compile()
// and shareable across threads; each thread passes its own RegexScratch to find().
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"

namespace fathom::tok {

// Per-thread matching state (PCRE2 match data and JIT stack). Not shareable.
class RegexScratch {
 public:
  RegexScratch();
  ~RegexScratch();
  RegexScratch(const RegexScratch&) = delete;
  RegexScratch& operator=(const RegexScratch&) = delete;
  void* match_data() const { return match_data_; }
  void* match_context() const { return match_context_; }

 private:
  void* match_data_ = nullptr;
  void* match_context_ = nullptr;
  void* jit_stack_ = nullptr;
};

class Regex {
 public:
  // Compiles an Oniguruma-style pattern. Errors name the pattern and the offset.
  static Result<std::unique_ptr<Regex>> compile(std::string_view pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Finds the leftmost match in subject at or after byte `start` (a character boundary).
  // REQUIRES: subject is valid UTF-8.
  bool find(std::string_view subject, size_t start, size_t* match_start, size_t* match_end,
            RegexScratch& scratch) const;

  const std::string& pattern() const { return pattern_; }

  // The PCRE2 pattern compile() builds from an Oniguruma one (exposed for tests).
  static std::string translate_oniguruma(std::string_view pattern);

 private:
  Regex() = default;
  std::string pattern_;
  void* code_ = nullptr;
  bool jit_ = false;
};

}  // namespace fathom::tok
