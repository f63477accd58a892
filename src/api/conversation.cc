#include "api/conversation.h"

#include "prompt/reference.h"

namespace fathom::api {

using pyjson::Value;

prompt::OutputParserOptions ConversationRequest::parsing_options() const {
  prompt::OutputParserOptions o;
  o.thinking = thinking;
  o.parse_tool_calls = !tools.items.empty() && tool_choice != ToolChoice::kNone;
  o.stop_sequences = sampling.stop;
  o.min_tokens = sampling.min_tokens;
  o.include_stop_sequence = sampling.include_stop_str;
  o.start_in_tool_block = o.parse_tool_calls && tool_choice == ToolChoice::kRequired;
  return o;
}

namespace {

constexpr std::string_view kBeyondMaximum =
    "Reasoning Effort: Beyond maximum \xE2\x80\x94 exhaustive, relentless, and uncompromising.\n"
    "You MUST reason with the utmost depth and rigor, leaving absolutely nothing to chance: "
    "exhaustively "
    "decompose the problem into its most fundamental components, trace every causal chain to its "
    "root, "
    "and resolve the underlying cause rather than any surface symptom.\n"
    "Do not stop reasoning until you have independently verified the solution from multiple angles "
    "and "
    "are certain that no assumption remains unchecked and no error remains undiscovered.\n\n";

}  // namespace

std::string v4_effort_prefix(Checkpoint c, std::optional<Effort> effort) {
  if (c == Checkpoint::kV4_0731) {
    // deepseek-recipe's dsv4.rs: Low -> "", no effort / High / Xhigh -> the high text, Max -> max.
    if (effort == Effort::kLow) return "";
    if (effort == Effort::kMax) return std::string(kBeyondMaximum);
    return std::string(prompt::v4_effort_absolute_maximum());
  }
  // V4 preview: only max adds a prefix.
  return effort == Effort::kMax ? std::string(prompt::v4_effort_absolute_maximum()) : std::string();
}

int64_t v41_effort_budget(Checkpoint c, std::optional<Effort> effort) {
  if (c == Checkpoint::kV41PreRelease) {
    if (!effort) return 50;
    switch (*effort) {
      case Effort::kLow:
        return 25;
      case Effort::kHigh:
        return 50;
      case Effort::kXhigh:
        return 75;
      case Effort::kMax:
        return 100;
    }
  }
  if (!effort) return 75;
  return *effort == Effort::kLow ? 50 : *effort == Effort::kMax ? 100 : 75;
}

Result<prompt::Prompt> render_api(const ConversationRequest& req, PromptFormat format,
                                  Checkpoint checkpoint) {
  prompt::ReferenceRequest r;
  Value messages = Value::array();
  // Tools and the JSON response format ride on the first system message (inserted if none).
  Value first_system = Value::object();
  first_system.set("role", Value::from_string("system"));
  first_system.set("content", Value::from_string(""));
  size_t start = 0;
  if (!req.messages.items.empty() && req.messages.items[0].find("role") &&
      req.messages.items[0].find("role")->text == "system") {
    first_system = req.messages.items[0];
    start = 1;
  }
  bool with_tools = !req.tools.items.empty() && req.tool_choice != ToolChoice::kNone;
  if (with_tools) first_system.set("tools", req.tools);
  if (req.json_object) {
    Value rf = Value::object();
    rf.set("type", Value::from_string("json_object"));
    first_system.set("response_format", rf);
  } else if (!req.response_format.is_null()) {
    first_system.set("response_format", req.response_format);
  }
  bool need_system = start == 1 || with_tools || req.json_object || !req.response_format.is_null();
  if (need_system) messages.items.push_back(first_system);
  for (size_t i = start; i < req.messages.items.size(); ++i)
    messages.items.push_back(req.messages.items[i]);
  r.messages = std::move(messages);
  r.thinking_mode = Value::from_string(req.thinking ? "thinking" : "chat");
  r.drop_thinking = false;  // recipe: every historical turn keeps its reasoning
  if (format == PromptFormat::kV41) {
    r.reasoning_effort =
        Value::from_int(req.budget ? *req.budget : v41_effort_budget(checkpoint, req.effort));
  } else {
    Value e = Value::object();
    e.set("prefix", Value::from_string(v4_effort_prefix(checkpoint, req.effort)));
    r.reasoning_effort = std::move(e);
  }
  auto out = format == PromptFormat::kV41 ? prompt::render_v41_reference(r)
                                          : prompt::render_v4_reference(r);
  if (!out.is_ok()) return out.status();
  prompt::Prompt p = std::move(out->prompt);
  // The generation header is always there (the reference omits it after an assistant turn).
  const auto& pieces = p.pieces();
  bool has_header = pieces.size() >= 2 && pieces[pieces.size() - 2].special &&
                    pieces[pieces.size() - 2].text == "<｜Assistant｜>";
  if (!has_header) {
    p.append_special("<｜Assistant｜>");
    p.append_special(req.thinking ? "<think>" : "</think>");
  }
  if (with_tools && req.tool_choice == ToolChoice::kRequired) {
    p.append_template(format == PromptFormat::kV41 ? "\n\n<｜DSML｜ calls>\n"
                                                   : "\n\n<｜DSML｜tool_calls>\n");
  }
  return p;
}

}  // namespace fathom::api
