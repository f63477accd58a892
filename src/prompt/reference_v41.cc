// Port of DeepSeek-V4.1's official encoder (encoding/encoding.py, release revision), step
// for step: process_image_messages -> merge_tool_messages -> sort_tool_results_by_call_order
// -> drop-thinking -> render_message per message. Python behaviours the output depends on
// (truthiness, str(), json.dumps) come from pyobj.h and core/py_json.
#include <algorithm>
#include <cmath>

#include "prompt/pyobj.h"
#include "prompt/reference.h"
#include "prompt/reference_common.h"

namespace fathom::prompt {
namespace {

using pyjson::Value;
using namespace py;

constexpr std::string_view kPlaceholder = "<｜deepseek_image｜>";

Status reject(std::string m) { return invalid_argument(std::move(m)); }

// --- images -------------------------------------------------------------------------------

Result<Value> extract_image(const Value& block) {
  Value rec = Value::object();
  rec.set("type", Value::from_string("image"));
  if (role_type_is(block, "image_url")) {
    const Value* iu = get(block, "image_url");
    if (is_str(iu)) {
      rec.set("url", *iu);
    } else if (iu != nullptr && iu->is_object()) {
      const Value* u = get(*iu, "url");
      rec.set("url", u ? *u : Value::from_string(""));
    } else if (!truthy(iu)) {
      rec.set("url", Value::from_string(""));
    } else {
      return reject("image_url must be a string or an object");
    }
  } else {
    for (const char* k : {"source", "url", "data"})
      if (const Value* v = get(block, k)) rec.set(k, *v);
  }
  bool any = false;
  for (const char* k : {"source", "url", "data"}) any |= truthy(get(rec, k));
  if (!any) return reject("Image block does not contain a valid source");
  return rec;
}

Status process_image_blocks(Value& blocks, std::vector<Value>& images) {
  for (Value& block : blocks.items) {
    if (!block.is_object()) continue;
    const Value* type = get(block, "type");
    if (is_str(type) && (type->text == "image" || type->text == "image_url")) {
      FATHOM_ASSIGN_OR_RETURN(Value rec, extract_image(block));
      Value text = Value::object();
      text.set("type", Value::from_string("text"));
      text.set("text", Value::from_string(std::string(kPlaceholder)));
      block = std::move(text);
      images.push_back(std::move(rec));
    } else if (is_str(type) && type->text == "tool_result" && get(block, "content") &&
               get(block, "content")->is_array()) {
      Value content = *get(block, "content");
      FATHOM_RETURN_IF_ERROR(process_image_blocks(content, images));
      block.set("content", std::move(content));
    } else if (is_str(type) && type->text == "text") {
      const Value* t = get(block, "text");
      if (is_str(t) && t->text.find(kPlaceholder) != std::string::npos) {
        return reject("Text block contains image placeholder");
      }
    }
  }
  return Status::ok();
}

Status process_image_messages(Value& messages, std::vector<Value>& images) {
  for (Value& msg : messages.items) {
    if (!msg.is_object()) return reject("each message must be an object");
    const Value* content = get(msg, "content");
    if (is_str(content) && content->text.find(kPlaceholder) != std::string::npos) {
      return reject("Message content contains image special token");
    }
    const Value* rc = get(msg, "reasoning_content");
    if (is_str(rc) && rc->text.find(kPlaceholder) != std::string::npos) {
      return reject("reasoning_content contains image special token");
    }
    if (content != nullptr && content->is_array() && get(msg, "content_blocks") == nullptr) {
      Value blocks = *content;
      // dict.pop: the key goes away.
      for (size_t i = 0; i < msg.keys.size(); ++i) {
        if (msg.keys[i] == "content") {
          msg.keys.erase(msg.keys.begin() + long(i));
          msg.items.erase(msg.items.begin() + long(i));
          break;
        }
      }
      msg.set("content_blocks", std::move(blocks));
    }
    const Value* cb = get(msg, "content_blocks");
    if (truthy(cb)) {
      if (!cb->is_array()) return reject("content_blocks must be a list");
      Value blocks = *cb;
      FATHOM_RETURN_IF_ERROR(process_image_blocks(blocks, images));
      msg.set("content_blocks", blocks);
      if (!is_str(get(msg, "content"))) {
        std::string joined;
        bool first = true;
        for (const Value& b : blocks.items) {
          if (!b.is_object() || !role_type_is(b, "text")) continue;
          const Value* t = get(b, "text");
          if (!first) joined += "\n\n";
          first = false;
          if (t == nullptr) continue;
          if (!is_str(t)) return reject("sequence item: expected str instance");
          joined += t->text;
        }
        msg.set("content", Value::from_string(joined));
      }
    }
  }
  return Status::ok();
}

// --- rendering ------------------------------------------------------------------------------

int find_last_user_index(const std::vector<Value>& msgs) {
  for (int i = int(msgs.size()) - 1; i >= 0; --i) {
    if (role_is(msgs[size_t(i)], "user") || (role_is(msgs[size_t(i)], "system") && i > 0)) return i;
  }
  return -1;
}

Result<std::string> reasoning_effort_prompt(size_t index, const std::string& mode,
                                            const Value& effort) {
  int64_t budget = 75;
  if (effort.is_null()) {
    budget = 75;
  } else if (effort.kind == Value::Kind::kInt) {
    int64_t v = 0;
    if (!effort.int_fits_int64(&v) || v < 1 || v > 100)
      return reject("Invalid reasoning effort for deepseek_v41");
    budget = v;
  } else if (effort.is_string() &&
             (effort.text == "low" || effort.text == "high" || effort.text == "max")) {
    budget = effort.text == "low" ? 50 : effort.text == "high" ? 75 : 100;
  } else {
    return reject("Invalid reasoning effort for deepseek_v41");
  }
  if (index == 0 && mode == "thinking") {
    return "Reasoning Effort: " + std::to_string(budget) +
           " (range 1-100, the higher the value, the more thorough the reasoning)\n\n";
  }
  return std::string();
}

Status render_message(size_t index, const std::vector<Value>& msgs, const std::string& mode,
                      bool drop_thinking, const Value& effort, Prompt& out) {
  if (mode != "chat" && mode != "thinking") return reject("Invalid thinking_mode `" + mode + "`");
  const Value& msg = msgs[index];
  int last_user = find_last_user_index(msgs);
  const Value* role_v = get(msg, "role");
  std::string role =
      is_str(role_v) ? role_v->text : (role_v == nullptr || role_v->is_null() ? "None" : "?");
  const Value* content = get(msg, "content");

  FATHOM_ASSIGN_OR_RETURN(std::string effort_text, reasoning_effort_prompt(index, mode, effort));
  if (index == 0 && (!effort_text.empty() || role == "system")) out.append_special("<｜System｜>");
  out.append_template(effort_text);

  if (role == "system") {
    if (index > 0) out.append_special("<｜System｜>");
    FATHOM_RETURN_IF_ERROR(append_str_or_empty(out, content));
    FATHOM_RETURN_IF_ERROR(append_tools_and_format(out, msg, Dialect::kV41));
  } else {
    bool handled = false;
    FATHOM_RETURN_IF_ERROR(append_common_role(out, index, msgs, role, mode, drop_thinking,
                                              last_user, Dialect::kV41, &handled));
    if (!handled) return Status(StatusCode::kInvalidArgument, "Unknown role: " + role);
  }
  return append_transition(out, index, msgs, mode, drop_thinking, last_user,
                           role == "user" || (role == "system" && index > 0));
}

}  // namespace

Result<ReferenceOutput> render_v41_reference(const ReferenceRequest& req) {
  ReferenceOutput result;
  Value messages = req.messages;
  Value context = req.context.is_array() ? req.context : Value::array();
  std::vector<Value> context_images;
  if (!context.items.empty())
    FATHOM_RETURN_IF_ERROR(process_image_messages(context, context_images));
  FATHOM_RETURN_IF_ERROR(process_image_messages(messages, result.images));
  ReferenceDialect d{Dialect::kV41, find_last_user_index, render_message};
  FATHOM_RETURN_IF_ERROR(
      encode_reference_messages(req, messages.items, context.items, d, result.prompt));
  return result;
}

}  // namespace fathom::prompt
