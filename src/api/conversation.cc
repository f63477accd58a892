#include "api/conversation.h"

#include "prompt/reference.h"

namespace fathom::api {

using pyjson::Value;

prompt::OutputParserOptions ConversationRequest::parsing_options() const {
  prompt::OutputParserOptions o;
  o.thinking = thinking;
  o.parse_tool_calls = !tools.items.empty() && tool_choice != ToolChoice::kNone;
  o.stop_sequences = sampling.stop;
  o.start_in_tool_block = o.parse_tool_calls && tool_choice == ToolChoice::kRequired;
  return o;
}

Result<prompt::Prompt> render_api(const ConversationRequest& req, PromptFormat format) {
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
  }
  bool need_system = start == 1 || with_tools || req.json_object;
  if (need_system) messages.items.push_back(first_system);
  for (size_t i = start; i < req.messages.items.size(); ++i)
    messages.items.push_back(req.messages.items[i]);
  r.messages = std::move(messages);
  r.thinking_mode = Value::from_string(req.thinking ? "thinking" : "chat");
  r.drop_thinking = false;  // recipe: every historical turn keeps its reasoning
  if (format == PromptFormat::kV41) {
    int64_t budget = 75;
    if (req.budget) {
      budget = *req.budget;
    } else if (req.effort) {
      budget = *req.effort == Effort::kLow ? 50 : *req.effort == Effort::kMax ? 100 : 75;
    }
    r.reasoning_effort = Value::from_int(budget);
  } else {
    // V4 (preview table): only max adds a prefix.
    r.reasoning_effort =
        req.effort && *req.effort == Effort::kMax ? Value::from_string("max") : Value();
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
