#include "prompt/reference_common.h"

#include <algorithm>
#include <cmath>

#include "prompt/pyobj.h"
#include "prompt/reference.h"

namespace fathom::prompt {

using pyjson::Value;
using namespace py;

namespace py {

Result<std::string> str(const Value* v) {
  if (v == nullptr || v->is_null()) return std::string("None");
  switch (v->kind) {
    case Value::Kind::kBool:
      return std::string(v->boolean ? "True" : "False");
    case Value::Kind::kInt:
      return v->text;
    case Value::Kind::kFloat:
      if (std::isnan(v->number)) return std::string("nan");
      if (std::isinf(v->number)) return std::string(v->number > 0 ? "inf" : "-inf");
      return pyjson::float_repr(v->number);
    case Value::Kind::kString:
      return v->text;
    default:
      return unsupported("formatting a list or dict into the prompt (Python repr)");
  }
}

}  // namespace py

namespace {
constexpr std::string_view kPlaceholder = "<｜deepseek_image｜>";
Status reject(std::string m) { return invalid_argument(std::move(m)); }

std::string dsml(Dialect d, std::string_view name) {
  return std::string("｜DSML｜") + (d == Dialect::kV41 ? " " : "") + std::string(name);
}
std::string block_name(Dialect d) {
  return d == Dialect::kV41 ? dsml(d, "calls") : dsml(d, "tool_calls");
}

std::string tools_template_head(Dialect d) {
  std::string b = block_name(d), inv = dsml(d, "invoke"), par = dsml(d, "parameter");
  return "## Tools\n\nYou have access to a set of tools to help answer the user's question. You "
         "can "
         "invoke tools by writing a \"<" +
         b + ">\" block like the following:\n\n<" + b + ">\n<" + inv + " name=\"$TOOL_NAME\">\n<" +
         par + " name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</" + par +
         ">\n...\n</" + inv + ">\n<" + inv + " name=\"$TOOL_NAME2\">\n...\n</" + inv + ">\n</" + b +
         ">\n\nString parameters should be specified as is and set `string=\"true\"`. For all "
         "other "
         "types (numbers, booleans, arrays, objects), pass the value in JSON format and set "
         "`string=\"false\"`.\n\nIf thinking_mode is enabled (triggered by <think>), you MUST "
         "output "
         "your complete reasoning inside <think>...</think> BEFORE any tool calls or final "
         "response.\n\nOtherwise, output directly after </think> with tool calls or final "
         "response.\n\n### Available Tool Schemas\n\n";
}
constexpr std::string_view kToolsTail =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool "
    "calls.\n";

}  // namespace

std::string to_json(const Value& v) { return pyjson::dumps(v, false); }

bool role_type_is(const Value& block, std::string_view type) {
  const Value* t = get(block, "type");
  return is_str(t) && t->text == type;
}

void remove_key(Value& obj, std::string_view key) {
  for (size_t i = 0; i < obj.keys.size(); ++i) {
    if (obj.keys[i] == key) {
      obj.keys.erase(obj.keys.begin() + long(i));
      obj.items.erase(obj.items.begin() + long(i));
      return;
    }
  }
}

Status append_str_or_empty(Prompt& out, const Value* v) {
  if (!truthy(v)) return Status::ok();
  FATHOM_ASSIGN_OR_RETURN(std::string s, str(v));
  out.append_text(s);
  return Status::ok();
}

Status append_tools_and_format(Prompt& out, const Value& msg, Dialect d) {
  const Value* tools = get(msg, "tools");
  if (truthy(tools)) {
    if (!tools->is_array()) return reject("tools must be a list");
    out.append_template("\n\n");
    out.append_template(tools_template_head(d));
    for (size_t i = 0; i < tools->items.size(); ++i) {
      const Value& t = tools->items[i];
      const Value* f = t.is_object() ? get(t, "function") : nullptr;
      if (f == nullptr) return reject("KeyError: 'function'");
      if (i) out.append_text("\n");
      out.append_text(to_json(*f));
    }
    out.append_template(kToolsTail);
  }
  const Value* rf = get(msg, "response_format");
  if (truthy(rf)) {
    out.append_template(
        "\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n");
    out.append_text(to_json(*rf));
  }
  return Status::ok();
}

namespace {

// One text part of a content block list: the image placeholder is a special token.
void append_part(Prompt& out, const std::string& text) {
  if (text == kPlaceholder) {
    out.append_special(kPlaceholder);
  } else {
    out.append_text(text);
  }
}

Result<std::string> text_of(const Value& block) {
  const Value* t = get(block, "text");
  if (t == nullptr) return std::string();
  if (!is_str(t)) return reject("sequence item: expected str instance");
  return t->text;
}

}  // namespace

Status append_content_blocks(Prompt& out, const Value& blocks) {
  if (!blocks.is_array()) return reject("content_blocks must be a list");
  for (size_t i = 0; i < blocks.items.size(); ++i) {
    const Value& b = blocks.items[i];
    if (!b.is_object()) return reject("AttributeError: content block is not a dict");
    if (i) out.append_text("\n\n");
    const Value* type = get(b, "type");
    if (role_type_is(b, "text")) {
      FATHOM_ASSIGN_OR_RETURN(std::string t, text_of(b));
      append_part(out, t);
    } else if (role_type_is(b, "tool_result")) {
      const Value* c = get(b, "content");
      out.append_text("<tool_result>");
      if (c != nullptr && c->is_array()) {
        for (size_t k = 0; k < c->items.size(); ++k) {
          const Value& p = c->items[k];
          if (!p.is_object()) return reject("AttributeError: tool content part is not a dict");
          if (k) out.append_text("\n\n");
          if (role_type_is(p, "text")) {
            FATHOM_ASSIGN_OR_RETURN(std::string t, text_of(p));
            append_part(out, t);
          } else {
            FATHOM_ASSIGN_OR_RETURN(std::string ty, str(get(p, "type")));
            out.append_text("[Unsupported " + ty + "]");
          }
        }
      } else if (c == nullptr) {
        // block.get("content", "") -> ""
      } else {
        FATHOM_ASSIGN_OR_RETURN(std::string s, str(c));
        out.append_text(s);
      }
      out.append_text("</tool_result>");
    } else {
      FATHOM_ASSIGN_OR_RETURN(std::string ty, str(type));
      out.append_text("[Unsupported " + ty + "]");
    }
  }
  return Status::ok();
}

namespace {

// V4.1: a dict, a JSON string, or a double-encoded JSON string; else {"arguments": raw}.
Value v41_arguments(const Value& raw) {
  Value a = raw;
  if (!a.is_object()) {
    for (int k = 0; k < 2; ++k) {
      if (!a.is_string()) break;
      auto parsed = pyjson::parse(a.text);
      if (!parsed.is_ok()) break;
      a = std::move(parsed).value();
    }
    if (!a.is_object()) {
      Value wrapped = Value::object();
      wrapped.set("arguments", raw);
      return wrapped;
    }
  }
  return a;
}

// V4: json.loads of the string (invalid JSON -> {"arguments": raw}); a dict as given is
// wrapped whole; JSON that is not an object raises.
Result<Value> v4_arguments(const Value& raw) {
  if (raw.is_string()) {
    auto parsed = pyjson::parse(raw.text);
    if (!parsed.is_ok()) {
      Value wrapped = Value::object();
      wrapped.set("arguments", raw);
      return wrapped;
    }
    if (!parsed->is_object()) return reject("AttributeError: arguments JSON is not an object");
    return std::move(parsed).value();
  }
  Value wrapped = Value::object();
  wrapped.set("arguments", raw);
  return wrapped;
}

}  // namespace

Status append_tool_calls(Prompt& out, const Value& msg, Dialect d) {
  const Value* calls = get(msg, "tool_calls");
  if (!truthy(calls)) return Status::ok();
  if (!calls->is_array()) return reject("tool_calls must be a list");
  std::string block = block_name(d), inv = dsml(d, "invoke"), par = dsml(d, "parameter");
  out.append_template("\n\n<" + block + ">\n");
  for (size_t i = 0; i < calls->items.size(); ++i) {
    const Value& tc = calls->items[i];
    const Value* f = tc.is_object() ? get(tc, "function") : nullptr;
    if (f == nullptr || !f->is_object()) return reject("KeyError: 'function'");
    const Value* name = get(*f, "name");
    const Value* args = get(*f, "arguments");
    if (name == nullptr) return reject("KeyError: 'name'");
    if (args == nullptr) return reject("KeyError: 'arguments'");
    if (i) out.append_text("\n");
    out.append_template("<" + inv + " name=\"");
    FATHOM_ASSIGN_OR_RETURN(std::string n, str(name));
    out.append_text(n);
    out.append_template("\">\n");
    Value a;
    if (d == Dialect::kV41) {
      a = v41_arguments(*args);
    } else {
      FATHOM_ASSIGN_OR_RETURN(a, v4_arguments(*args));
    }
    for (size_t k = 0; k < a.keys.size(); ++k) {
      if (k) out.append_text("\n");
      const Value& v = a.items[k];
      out.append_template("<" + par + " name=\"");
      out.append_text(a.keys[k]);
      out.append_template(std::string("\" string=\"") + (v.is_string() ? "true" : "false") + "\">");
      out.append_text(v.is_string() ? v.text : to_json(v));
      out.append_template("</" + par + ">");
    }
    out.append_template("\n</" + inv + ">");
  }
  out.append_template("\n</" + block + ">");
  return Status::ok();
}

Status append_common_role(Prompt& out, size_t index, const std::vector<Value>& msgs,
                          const std::string& role, const std::string& mode, bool drop_thinking,
                          int last_user, Dialect d, bool* handled) {
  const Value& msg = msgs[index];
  const Value* content = get(msg, "content");
  *handled = true;
  if (role == "user") {
    out.append_special("<｜User｜>");
    const Value* blocks = get(msg, "content_blocks");
    if (truthy(blocks)) return append_content_blocks(out, *blocks);
    return append_str_or_empty(out, content);
  }
  if (role == "latest_reminder") {
    out.append_special("<｜latest_reminder｜>");
    FATHOM_ASSIGN_OR_RETURN(std::string s, str(content));
    out.append_text(s);
    return Status::ok();
  }
  if (role == "assistant") {
    bool prev_task = index >= 1 && !is_none(get(msgs[index - 1], "task"));
    if (mode == "thinking" && !prev_task && (!drop_thinking || int(index) > last_user)) {
      FATHOM_RETURN_IF_ERROR(append_str_or_empty(out, get(msg, "reasoning_content")));
      out.append_special("</think>");
    }
    FATHOM_RETURN_IF_ERROR(append_str_or_empty(out, content));
    FATHOM_RETURN_IF_ERROR(append_tool_calls(out, msg, d));
    if (!truthy(get(msg, "wo_eos"))) out.append_special("<｜end▁of▁sentence｜>");
    return Status::ok();
  }
  *handled = false;
  return Status::ok();
}

Status append_transition(Prompt& out, size_t index, const std::vector<Value>& msgs,
                         const std::string& mode, bool drop_thinking, int last_user,
                         bool opens_turn) {
  if (index + 1 < msgs.size()) {
    const Value* next = get(msgs[index + 1], "role");
    std::string nr = is_str(next) ? next->text : "";
    if (nr != "assistant" && nr != "latest_reminder") return Status::ok();
  }
  const Value* task = get(msgs[index], "task");
  if (!is_none(task)) {
    FATHOM_ASSIGN_OR_RETURN(std::string tok, task_token(*task));
    if (task->text != "action") {
      out.append_special(tok);
    } else {
      out.append_special("<｜Assistant｜>");
      out.append_special(mode != "thinking" ? "</think>" : "<think>");
      out.append_special(tok);
    }
  } else if (opens_turn) {
    out.append_special("<｜Assistant｜>");
    bool open = mode == "thinking" && (!drop_thinking || int(index) >= last_user);
    out.append_special(open ? "<think>" : "</think>");
  }
  return Status::ok();
}

Result<std::string> task_token(const Value& task) {
  static const char* const kTasks[] = {"action", "query", "authority",
                                       "domain", "title", "read_url"};
  if (task.is_string()) {
    for (const char* t : kTasks)
      if (task.text == t) return "<｜" + task.text + "｜>";
  }
  FATHOM_ASSIGN_OR_RETURN(std::string s, str(&task));
  return reject("Invalid task: '" + s + "'");
}

Result<std::vector<Value>> merge_tool_messages(const std::vector<Value>& msgs, Dialect d) {
  std::vector<Value> merged;
  for (const Value& m0 : msgs) {
    Value msg = m0;
    if (!msg.is_object()) return reject("each message must be an object");
    bool last_is_user_blocks = !merged.empty() && role_is(merged.back(), "user") &&
                               get(merged.back(), "content_blocks") != nullptr;
    if (role_is(msg, "tool")) {
      Value block = Value::object();
      block.set("type", Value::from_string("tool_result"));
      const Value* id = get(msg, "tool_call_id");
      block.set("tool_use_id", id ? *id : Value::from_string(""));
      const Value* c = get(msg, "content");
      block.set("content", c ? *c : Value::from_string(""));
      if (last_is_user_blocks) {
        Value blocks = *get(merged.back(), "content_blocks");
        blocks.items.push_back(std::move(block));
        merged.back().set("content_blocks", std::move(blocks));
      } else {
        Value u = Value::object();
        u.set("role", Value::from_string("user"));
        Value blocks = Value::array();
        blocks.items.push_back(std::move(block));
        u.set("content_blocks", std::move(blocks));
        merged.push_back(std::move(u));
      }
    } else if (role_is(msg, "user") && d == Dialect::kV4) {
      // V4 builds one text block from `content` and keeps only content, task, wo_eos, mask.
      Value t = Value::object();
      t.set("type", Value::from_string("text"));
      const Value* c = get(msg, "content");
      t.set("text", c ? *c : Value::from_string(""));
      if (last_is_user_blocks && is_none(get(merged.back(), "task"))) {
        Value prev = *get(merged.back(), "content_blocks");
        prev.items.push_back(std::move(t));
        merged.back().set("content_blocks", std::move(prev));
      } else {
        Value u = Value::object();
        u.set("role", Value::from_string("user"));
        u.set("content", c ? *c : Value::from_string(""));
        Value blocks = Value::array();
        blocks.items.push_back(std::move(t));
        u.set("content_blocks", std::move(blocks));
        for (const char* k : {"task", "wo_eos", "mask"})
          if (const Value* v = get(msg, k)) u.set(k, *v);
        merged.push_back(std::move(u));
      }
    } else if (role_is(msg, "user")) {
      const Value* cb = get(msg, "content_blocks");
      Value blocks;
      if (cb == nullptr || cb->is_null()) {
        blocks = Value::array();
        Value t = Value::object();
        t.set("type", Value::from_string("text"));
        const Value* c = get(msg, "content");
        t.set("text", c ? *c : Value::from_string(""));
        blocks.items.push_back(std::move(t));
      } else {
        blocks = *cb;
      }
      if (last_is_user_blocks && is_none(get(merged.back(), "task"))) {
        Value prev = *get(merged.back(), "content_blocks");
        if (!prev.is_array() || !blocks.is_array()) return reject("content_blocks must be a list");
        prev.items.insert(prev.items.end(), blocks.items.begin(), blocks.items.end());
        merged.back().set("content_blocks", std::move(prev));
      } else {
        msg.set("content_blocks", std::move(blocks));
        merged.push_back(std::move(msg));
      }
    } else {
      merged.push_back(std::move(msg));
    }
  }
  return merged;
}

Status sort_tool_results_by_call_order(std::vector<Value>& msgs) {
  std::vector<std::pair<std::string, int>> order;  // tool call id -> index (last wins)
  auto lookup = [&](const Value* id) {
    if (!is_str(id)) return 0;
    for (auto it = order.rbegin(); it != order.rend(); ++it)
      if (it->first == id->text) return it->second;
    return 0;
  };
  for (Value& msg : msgs) {
    if (role_is(msg, "assistant") && truthy(get(msg, "tool_calls"))) {
      order.clear();
      const Value* calls = get(msg, "tool_calls");
      if (!calls->is_array()) continue;
      for (size_t i = 0; i < calls->items.size(); ++i) {
        const Value& tc = calls->items[i];
        if (!tc.is_object()) continue;
        const Value* id = get(tc, "id");
        if (!truthy(id)) {
          const Value* f = get(tc, "function");
          id = f && f->is_object() ? get(*f, "id") : nullptr;
        }
        if (truthy(id) && id->is_string()) order.emplace_back(id->text, int(i));
      }
    } else if (role_is(msg, "user") && truthy(get(msg, "content_blocks"))) {
      Value blocks = *get(msg, "content_blocks");
      if (!blocks.is_array()) continue;
      std::vector<Value> tool_blocks;
      for (const Value& b : blocks.items)
        if (b.is_object() && role_type_is(b, "tool_result")) tool_blocks.push_back(b);
      if (tool_blocks.size() > 1 && !order.empty()) {
        std::stable_sort(tool_blocks.begin(), tool_blocks.end(),
                         [&](const Value& x, const Value& y) {
                           return lookup(get(x, "tool_use_id")) < lookup(get(y, "tool_use_id"));
                         });
        size_t k = 0;
        for (Value& b : blocks.items)
          if (b.is_object() && role_type_is(b, "tool_result")) b = tool_blocks[k++];
        msg.set("content_blocks", std::move(blocks));
      }
    }
  }
  return Status::ok();
}

namespace {

std::vector<Value> drop_thinking_messages(const std::vector<Value>& msgs,
                                          const ReferenceDialect& d) {
  int last = d.last_user_index(msgs);
  std::vector<Value> out;
  for (size_t i = 0; i < msgs.size(); ++i) {
    const Value& m = msgs[i];
    const Value* role = get(m, "role");
    std::string r = is_str(role) ? role->text : "";
    bool keep = r == "user" || r == "system" || r == "tool" || r == "latest_reminder" ||
                r == "direct_search_results";
    if (keep || int(i) >= last) {
      out.push_back(m);
    } else if (r == "assistant") {
      Value c = m;
      remove_key(c, "reasoning_content");
      out.push_back(std::move(c));
    }
  }
  return out;
}

}  // namespace

Status encode_reference_messages(const ReferenceRequest& req, const std::vector<Value>& messages,
                                 const std::vector<Value>& context, const ReferenceDialect& d,
                                 Prompt& out) {
  FATHOM_ASSIGN_OR_RETURN(std::vector<Value> msgs, merge_tool_messages(messages, d.dialect));
  std::vector<Value> ctx = context;
  {
    std::vector<Value> joined = ctx;
    joined.insert(joined.end(), msgs.begin(), msgs.end());
    FATHOM_RETURN_IF_ERROR(sort_tool_results_by_call_order(joined));
    msgs.assign(joined.begin() + long(ctx.size()), joined.end());
  }
  if (!ctx.empty()) {
    FATHOM_ASSIGN_OR_RETURN(ctx, merge_tool_messages(ctx, d.dialect));
    FATHOM_RETURN_IF_ERROR(sort_tool_results_by_call_order(ctx));
  }
  std::vector<Value> full = ctx;
  full.insert(full.end(), msgs.begin(), msgs.end());
  if (req.add_default_bos_token && ctx.empty()) out.append_special("<｜begin▁of▁sentence｜>");
  bool drop = req.drop_thinking;
  for (const Value& m : full)
    if (truthy(get(m, "tools"))) drop = false;
  std::string mode = req.thinking_mode.is_string() ? req.thinking_mode.text : "<invalid>";
  size_t num_to_render = msgs.size(), context_len = ctx.size();
  if (mode == "thinking" && drop) {
    full = drop_thinking_messages(full, d);
    num_to_render = full.size() - drop_thinking_messages(ctx, d).size();
    context_len = full.size() - num_to_render;
  }
  for (size_t i = 0; i < num_to_render; ++i) {
    FATHOM_RETURN_IF_ERROR(
        d.render_message(i + context_len, full, mode, drop, req.reasoning_effort, out));
  }
  return Status::ok();
}

}  // namespace fathom::prompt
