#include "prompt/prompt.h"

namespace fathom::prompt {

const std::vector<std::string>& control_spellings() {
  static const std::vector<std::string> v = {"<｜begin▁of▁sentence｜>",
                                             "<｜end▁of▁sentence｜>",
                                             "<｜User｜>",
                                             "<｜Assistant｜>",
                                             "<｜System｜>",
                                             "<｜latest_reminder｜>",
                                             "<think>",
                                             "</think>",
                                             "｜DSML｜",
                                             "<｜action｜>",
                                             "<｜query｜>",
                                             "<｜authority｜>",
                                             "<｜domain｜>",
                                             "<｜title｜>",
                                             "<｜read_url｜>",
                                             "<｜deepseek_image｜>"};
  return v;
}

void Prompt::append_text(std::string_view text) {
  if (text.empty()) return;
  if (!pieces_.empty() && !pieces_.back().special) {
    pieces_.back().text.append(text);
  } else {
    pieces_.push_back({false, std::string(text)});
  }
}

void Prompt::append_special(std::string_view spelling) {
  pieces_.push_back({true, std::string(spelling)});
}

void Prompt::append_template(std::string_view text) {
  const auto& specials = control_spellings();
  size_t i = 0, run = 0;
  while (i < text.size()) {
    size_t matched = 0;
    for (const std::string& s : specials) {
      if (s.size() > matched && text.compare(i, s.size(), s) == 0) matched = s.size();
    }
    if (matched == 0) {
      ++i;
      continue;
    }
    append_text(text.substr(run, i - run));
    append_special(text.substr(i, matched));
    i += matched;
    run = i;
  }
  append_text(text.substr(run));
}

std::string Prompt::to_string() const {
  std::string out;
  for (const auto& p : pieces_) out += p.text;
  return out;
}

}  // namespace fathom::prompt
