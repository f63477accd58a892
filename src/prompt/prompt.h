// Prompt: what a renderer produces — a sequence of text segments and special tokens. Special
// tokens are kept by spelling here and become ids only in the encoder (looked up in the
// loaded tokenizer), so no text segment can ever turn into a control token. Plain data.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fathom::prompt {

struct PromptPiece {
  bool special = false;  // true: `text` is the spelling of one special token
  std::string text;
};

class Prompt {
 public:
  // Untrusted text (user, tool, model-written fields): always plain BPE.
  void append_text(std::string_view text);
  // One special token, by spelling.
  void append_special(std::string_view spelling);
  // Template text written by Fathom itself: control-token spellings in it (from the list
  // `control_spellings()`) become special tokens, the rest plain text. This is how the
  // official encoders' template text tokenizes.
  void append_template(std::string_view text);

  const std::vector<PromptPiece>& pieces() const { return pieces_; }
  // Special tokens written as their spellings: the string the official encoders return.
  std::string to_string() const;

 private:
  std::vector<PromptPiece> pieces_;
};

// The V4/V4.1 control-token spellings that template text may contain.
const std::vector<std::string>& control_spellings();

}  // namespace fathom::prompt
