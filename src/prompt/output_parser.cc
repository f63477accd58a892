#include "prompt/output_parser.h"

#include <algorithm>
#include <cmath>

#include "core/py_json.h"
#include "core/utf8.h"
#include "prompt/prompt.h"

namespace fathom::prompt {
namespace {

// JSON string contents (no quotes) of valid UTF-8 text.
std::string json_fragment(std::string_view text) {
  std::string s = pyjson::dumps(pyjson::Value::from_string(std::string(text)), false);
  return s.substr(1, s.size() - 2);
}

bool all_finite(const pyjson::Value& v) {
  if (v.kind == pyjson::Value::Kind::kFloat) return std::isfinite(v.number);
  for (const auto& i : v.items)
    if (!all_finite(i)) return false;
  return true;
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// Length of the longest suffix of s that is a proper prefix of p.
size_t partial_suffix(std::string_view s, std::string_view p) {
  size_t best = 0;
  for (size_t n = 1; n < p.size() && n <= s.size(); ++n)
    if (s.substr(s.size() - n) == p.substr(0, n)) best = n;
  return best;
}

// Length of a trailing "<", "\n<", "\n\n<" (or the newlines alone): what may precede a
// DSML block, which the format opens with "\n\n<".
size_t markup_prefix_suffix(std::string_view s) {
  size_t n = s.size(), i = n;
  if (i > 0 && s[i - 1] == '<') --i;
  for (int k = 0; k < 2 && i > 0 && s[i - 1] == '\n'; ++k) --i;
  return n - i;
}

}  // namespace

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kToolCalls:
      return "tool_calls";
    case FinishReason::kStopSequence:
      return "stop_sequence";
    case FinishReason::kEndOfStream:
      return "end_of_stream";
  }
  return "stop";
}

Result<OutputParser> OutputParser::create(const Tokenizer& tokenizer, OutputParserOptions options) {
  OutputParser p(tokenizer, std::move(options));
  p.eos_ = tokenizer.id_of("<｜end▁of▁sentence｜>");
  p.think_end_ = tokenizer.id_of("</think>");
  p.think_start_ = tokenizer.id_of("<think>");
  p.dsml_ = tokenizer.id_of("｜DSML｜");
  if (p.eos_ < 0) return not_found("the tokenizer has no <｜end▁of▁sentence｜> token");
  if (p.opt_.thinking && p.think_end_ < 0) return not_found("the tokenizer has no </think> token");
  std::vector<std::string> stops;
  for (auto& s : p.opt_.stop_sequences)
    if (!s.empty()) stops.push_back(s);
  p.opt_.stop_sequences = std::move(stops);
  p.state_ = p.opt_.thinking ? State::kReasoning : State::kContent;
  if (p.opt_.start_in_tool_block) {
    p.state_ = State::kBetween;
    p.in_block_ = true;
  }
  return p;
}

void OutputParser::add(std::vector<ParserEvent>& out, ParserEvent::Kind k, std::string text) {
  if (!opt_.parse_tool_calls && k != ParserEvent::Kind::kReasoning &&
      k != ParserEvent::Kind::kContent && k != ParserEvent::Kind::kFinish) {
    return;  // markup is swallowed, not reported, when tool calls are off
  }
  if (text.empty() && (k == ParserEvent::Kind::kReasoning || k == ParserEvent::Kind::kContent ||
                       k == ParserEvent::Kind::kToolArguments)) {
    return;
  }
  ParserEvent e;
  e.kind = k;
  e.text = std::move(text);
  if (k != ParserEvent::Kind::kReasoning && k != ParserEvent::Kind::kContent &&
      k != ParserEvent::Kind::kFinish) {
    e.tool_index = tool_count_ - 1;
  }
  out.push_back(std::move(e));
}

Status OutputParser::push(int32_t id, std::vector<ParserEvent>& out) {
  if (state_ == State::kFinished) return Status::ok();
  stop_unchecked_ = ++pushed_ <= opt_.min_tokens;
  std::string_view bytes = tok_->token_bytes(id);
  if (bytes.empty())
    return out_of_range("token id " + std::to_string(id) + " is not in the vocabulary");
  bool control =
      id == eos_ || id == think_end_ || id == think_start_ || id == dsml_ || tok_->is_added(id);
  if (!control) {
    pending_bytes_.append(bytes);
    std::string text;
    size_t keep = utf8::append_lossy(text, pending_bytes_, false);
    pending_bytes_.erase(0, pending_bytes_.size() - keep);
    on_text(text, out);
    return Status::ok();
  }
  if (!pending_bytes_.empty()) {  // a control token ends any incomplete character
    std::string text;
    utf8::append_lossy(text, pending_bytes_, true);
    pending_bytes_.clear();
    on_text(text, out);
    if (state_ == State::kFinished) return Status::ok();
  }
  on_control(id, out);
  return Status::ok();
}

void OutputParser::on_control(int32_t id, std::vector<ParserEvent>& out) {
  if (id == eos_) {
    on_end(FinishReason::kStop, out);
  } else if (id == think_end_) {
    if (state_ == State::kReasoning) {
      add(out, ParserEvent::Kind::kReasoning, std::move(hold_));
      hold_.clear();
      stop_from_ = 0;
      state_ = State::kContent;
    }
    // An extra </think> elsewhere is dropped.
  } else if (id == dsml_) {
    on_dsml(out);
  }
  // Other control tokens (<think>, role markers, placeholders) are not text: dropped.
}

Status OutputParser::push_text(std::string_view text, std::vector<ParserEvent>& out) {
  if (state_ == State::kFinished) return Status::ok();
  FATHOM_RETURN_IF_ERROR(utf8::validate(text, "model output text"));
  if (text_controls_.empty()) {
    // The prompt format's control tokens, as the tokenizer spells them.
    for (const std::string& sp : control_spellings()) {
      int32_t id = tok_->id_of(sp);
      if (id >= 0) text_controls_.emplace_back(sp, id);
    }
  }
  text_hold_.append(text);
  for (;;) {
    size_t best = std::string::npos, len = 0;
    int32_t which = -1;
    for (const auto& [sp, id] : text_controls_) {
      size_t p = text_hold_.find(sp);
      if (p < best || (p == best && p != std::string::npos && sp.size() > len)) {
        best = p;
        len = sp.size();
        which = id;
      }
    }
    if (which < 0) break;
    on_text(std::string_view(text_hold_).substr(0, best), out);
    text_hold_.erase(0, best + len);
    if (state_ == State::kFinished) return Status::ok();
    on_control(which, out);
    if (state_ == State::kFinished) return Status::ok();
  }
  size_t keep = 0;
  for (const auto& [sp, id] : text_controls_) keep = std::max(keep, partial_suffix(text_hold_, sp));
  on_text(std::string_view(text_hold_).substr(0, text_hold_.size() - keep), out);
  text_hold_.erase(0, text_hold_.size() - keep);
  return Status::ok();
}

void OutputParser::finish(FinishReason reason, std::vector<ParserEvent>& out) {
  if (state_ == State::kFinished) return;
  if (!text_hold_.empty()) {
    std::string held = std::move(text_hold_);
    text_hold_.clear();
    on_text(held, out);
    if (state_ == State::kFinished) return;
  }
  if (!pending_bytes_.empty()) {
    std::string text;
    utf8::append_lossy(text, pending_bytes_, true);
    pending_bytes_.clear();
    on_text(text, out);
    if (state_ == State::kFinished) return;
  }
  on_end(reason, out);
}

void OutputParser::emit_plain(std::vector<ParserEvent>& out, bool final) {
  bool content = state_ == State::kContent;
  auto kind = content ? ParserEvent::Kind::kContent : ParserEvent::Kind::kReasoning;
  stop_from_ = std::min(stop_from_, hold_.size());
  if (content && !opt_.stop_sequences.empty() && !stop_unchecked_) {
    size_t best = std::string::npos;
    const std::string* which = nullptr;
    for (const auto& s : opt_.stop_sequences) {
      size_t p = hold_.find(s, stop_from_ >= s.size() ? stop_from_ - s.size() + 1 : 0);
      if (p != std::string::npos && p < best) {
        best = p;
        which = &s;
      }
    }
    if (which != nullptr) {
      add(out, kind, hold_.substr(0, best + (opt_.include_stop_sequence ? which->size() : 0)));
      hold_.clear();
      ParserEvent e;
      e.kind = ParserEvent::Kind::kFinish;
      e.finish = FinishReason::kStopSequence;
      e.stop_sequence = *which;
      out.push_back(std::move(e));
      state_ = State::kFinished;
      return;
    }
  }
  size_t keep = 0;
  if (!final) {
    keep = markup_prefix_suffix(hold_);
    if (content)
      for (const auto& s : opt_.stop_sequences) keep = std::max(keep, partial_suffix(hold_, s));
    // Never split a UTF-8 character (hold_ is valid UTF-8 as a whole).
    while (keep < hold_.size() &&
           (static_cast<unsigned char>(hold_[hold_.size() - keep]) & 0xC0) == 0x80)
      ++keep;
  }
  add(out, kind, hold_.substr(0, hold_.size() - keep));
  const size_t sent = hold_.size() - keep;
  hold_.erase(0, sent);
  // What is left of the text within min_tokens stays unchecked.
  stop_from_ = stop_unchecked_ ? hold_.size() : stop_from_ - std::min(stop_from_, sent);
}

void OutputParser::on_text(std::string_view text, std::vector<ParserEvent>& out) {
  if (text.empty()) return;
  switch (state_) {
    case State::kReasoning:
    case State::kContent:
      hold_.append(text);
      emit_plain(out, false);
      return;
    case State::kParamValue:
      if (value_is_string_) {
        hold_.append(text);
        // Keep back a trailing "<" or "</": the closing tag's start.
        size_t keep = 0;
        if (!hold_.empty() && hold_.back() == '<') keep = 1;
        if (hold_.size() >= 2 && hold_.compare(hold_.size() - 2, 2, "</") == 0) keep = 2;
        add(out, ParserEvent::Kind::kToolArguments,
            json_fragment(std::string_view(hold_).substr(0, hold_.size() - keep)));
        hold_.erase(0, hold_.size() - keep);
      } else {
        value_.append(text);
      }
      return;
    case State::kBetween:
    case State::kAfterBlock:
      tag_.append(text);
      if (tag_.size() > 2) tag_.erase(0, tag_.size() - 2);  // only the "</" matters
      return;
    case State::kFinished:
      return;
    default:
      tag_.append(text);
      process_tag(out);
      return;
  }
}

void OutputParser::on_dsml(std::vector<ParserEvent>& out) {
  switch (state_) {
    case State::kReasoning:
    case State::kContent: {
      // The "\n\n<" before the marker belongs to the markup.
      size_t n = markup_prefix_suffix(hold_);
      hold_.erase(hold_.size() - n);
      emit_plain(out, true);
      if (state_ == State::kFinished) return;
      in_block_ = true;
      closing_ = false;
      break;
    }
    case State::kParamValue:
      close_value(out);
      closing_ = true;
      break;
    case State::kBetween:
    case State::kAfterBlock:
      closing_ = tag_.size() >= 2 && tag_.compare(tag_.size() - 2, 2, "</") == 0;
      break;
    case State::kFinished:
      return;
    default:
      // A marker inside a tag that never ended: drop the tag (a key without a value gets null).
      if (state_ == State::kParamType) add(out, ParserEvent::Kind::kToolArguments, "null");
      closing_ = false;
      break;
  }
  tag_.clear();
  state_ = State::kTagName;
}

void OutputParser::process_tag(std::vector<ParserEvent>& out) {
  for (;;) {
    if (state_ == State::kTagName) {
      std::string_view t = tag_;
      if (!t.empty() && t[0] == ' ') t.remove_prefix(1);
      static constexpr std::string_view kInvoke = "invoke name=\"", kParam = "parameter name=\"";
      static constexpr std::string_view kBlocks[] = {"calls>", "tool_calls>"};
      static constexpr std::string_view kInvokeEnd = "invoke>", kParamEnd = "parameter>";
      auto take = [&](std::string_view prefix, State next) {
        std::string rest(t.substr(prefix.size()));
        tag_ = std::move(rest);
        state_ = next;
      };
      if (!closing_ && starts_with(t, kInvoke)) {
        take(kInvoke, State::kInvokeName);
        continue;
      }
      if (!closing_ && starts_with(t, kParam)) {
        take(kParam, State::kParamName);
        continue;
      }
      bool matched = false;
      for (std::string_view b : kBlocks) {
        if (starts_with(t, b)) {
          if (closing_) {
            close_invoke(out);
            take(b, State::kAfterBlock);
          } else {
            take(b, State::kBetween);
          }
          matched = true;
          break;
        }
      }
      if (matched) return;
      if (closing_ && starts_with(t, kInvokeEnd)) {
        close_invoke(out);
        take(kInvokeEnd, State::kBetween);
        return;
      }
      if (closing_ && starts_with(t, kParamEnd)) {
        take(kParamEnd, State::kBetween);
        return;
      }
      // Wait while the text can still become one of the tags; otherwise skip it.
      bool could = false;
      for (std::string_view c : {kInvoke, kParam, kBlocks[0], kBlocks[1], kInvokeEnd, kParamEnd})
        could |=
            c.substr(0, std::min(c.size(), t.size())) == t.substr(0, std::min(c.size(), t.size()));
      if (!could) {
        tag_.clear();
        state_ = in_block_ ? State::kBetween : State::kAfterBlock;
      }
      return;
    }
    if (state_ == State::kInvokeName) {
      size_t e = tag_.find("\">");
      if (e == std::string::npos) return;
      close_invoke(out);  // an invoke opened inside an open invoke closes the first
      ++tool_count_;
      in_invoke_ = true;
      params_ = 0;
      add(out, ParserEvent::Kind::kToolCallBegin, tag_.substr(0, e));
      tag_.erase(0, e + 2);
      state_ = State::kBetween;
      if (tag_.size() > 2) tag_.erase(0, tag_.size() - 2);
      return;
    }
    if (state_ == State::kParamName) {
      size_t e = tag_.find('"');
      if (e == std::string::npos) return;
      if (!in_invoke_) {  // a parameter outside any invoke: give it an anonymous call
        ++tool_count_;
        in_invoke_ = true;
        params_ = 0;
        add(out, ParserEvent::Kind::kToolCallBegin, "");
      }
      std::string key = tag_.substr(0, e);
      add(out, ParserEvent::Kind::kToolArguments,
          std::string(params_ == 0 ? "{" : ", ") +
              pyjson::dumps(pyjson::Value::from_string(key), false) + ": ");
      ++params_;
      tag_.erase(0, e + 1);
      state_ = State::kParamType;
      continue;
    }
    if (state_ == State::kParamType) {
      size_t e = tag_.find('>');
      if (e == std::string::npos) return;
      value_is_string_ = tag_.substr(0, e) != " string=\"false\"";
      std::string rest = tag_.substr(e + 1);
      tag_.clear();
      hold_.clear();
      value_.clear();
      if (value_is_string_) add(out, ParserEvent::Kind::kToolArguments, "\"");
      state_ = State::kParamValue;
      on_text(rest, out);
      return;
    }
    return;
  }
}

void OutputParser::close_value(std::vector<ParserEvent>& out) {
  std::string& v = value_is_string_ ? hold_ : value_;
  if (v.size() >= 2 && v.compare(v.size() - 2, 2, "</") == 0) {
    v.erase(v.size() - 2);
  } else if (!v.empty() && v.back() == '<') {
    v.pop_back();
  }
  if (value_is_string_) {
    add(out, ParserEvent::Kind::kToolArguments, json_fragment(hold_) + "\"");
  } else {
    // A string="false" value must be JSON; anything else is passed on as a JSON string.
    auto parsed = pyjson::parse(value_);
    bool ok = parsed.is_ok() && all_finite(*parsed) && !value_.empty();
    add(out, ParserEvent::Kind::kToolArguments,
        ok ? value_ : pyjson::dumps(pyjson::Value::from_string(value_), false));
  }
  hold_.clear();
  value_.clear();
}

void OutputParser::close_invoke(std::vector<ParserEvent>& out) {
  if (!in_invoke_) return;
  add(out, ParserEvent::Kind::kToolArguments, params_ == 0 ? "{}" : "}");
  add(out, ParserEvent::Kind::kToolCallEnd, "");
  in_invoke_ = false;
}

void OutputParser::on_end(FinishReason reason, std::vector<ParserEvent>& out) {
  // A closed tool block is a complete turn even if the EOS after it never came.
  if (reason == FinishReason::kEndOfStream && state_ == State::kAfterBlock && tool_count_ > 0) {
    reason = FinishReason::kStop;
  }
  switch (state_) {
    case State::kReasoning:
    case State::kContent:
      emit_plain(out, true);
      if (state_ == State::kFinished) return;
      break;
    case State::kParamValue:
      close_value(out);
      close_invoke(out);
      break;
    case State::kFinished:
      return;
    default:
      if (state_ == State::kParamType) add(out, ParserEvent::Kind::kToolArguments, "null");
      close_invoke(out);
      break;
  }
  if (reason == FinishReason::kStop && tool_count_ > 0 && opt_.parse_tool_calls)
    reason = FinishReason::kToolCalls;
  ParserEvent e;
  e.kind = ParserEvent::Kind::kFinish;
  e.finish = reason;
  out.push_back(std::move(e));
  state_ = State::kFinished;
}

}  // namespace fathom::prompt
