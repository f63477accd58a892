// Port of DeepSeek-V4's official encoder (encoding_dsv4.py): no system token, a `developer`
// role, "max" as the only effort with a prefix, arguments through one json.loads, and no
// images. Shares the preprocessing and DSML pieces with the V4.1 port.
#include "prompt/pyobj.h"
#include "prompt/reference.h"
#include "prompt/reference_common.h"

namespace fathom::prompt {
namespace {

using pyjson::Value;
using namespace py;

constexpr std::string_view kEffortMax =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, "
    "considered alternative, and rejected hypothesis to ensure absolutely no assumption is left "
    "unchecked.\n\n";

Status reject(std::string m) { return invalid_argument(std::move(m)); }

int find_last_user_index(const std::vector<Value>& msgs) {
  for (int i = int(msgs.size()) - 1; i >= 0; --i) {
    if (role_is(msgs[size_t(i)], "user") || role_is(msgs[size_t(i)], "developer")) return i;
  }
  return -1;
}

Status render_message(size_t index, const std::vector<Value>& msgs, const std::string& mode,
                      bool drop_thinking, const Value& effort, Prompt& out) {
  if (mode != "chat" && mode != "thinking") return reject("Invalid thinking_mode `" + mode + "`");
  const Value& msg = msgs[index];
  int last_user = find_last_user_index(msgs);
  const Value* role_v = get(msg, "role");
  std::string role = is_str(role_v) ? role_v->text : "None";
  const Value* content = get(msg, "content");

  // An object {"prefix": TEXT} is Fathom's own (API mode, other checkpoints' effort tables):
  // TEXT replaces the preview table's prefix.
  const Value* prefix = effort.is_object() ? get(effort, "prefix") : nullptr;
  bool effort_ok = effort.is_null() || is_str(prefix) ||
                   (effort.is_string() && (effort.text == "max" || effort.text == "high"));
  if (!effort_ok) return reject("Invalid reasoning effort");
  if (index == 0 && mode == "thinking") {
    if (is_str(prefix)) {
      out.append_template(prefix->text);
    } else if (effort.is_string() && effort.text == "max") {
      out.append_template(kEffortMax);
    }
  }

  if (role == "system") {
    FATHOM_RETURN_IF_ERROR(append_str_or_empty(out, content));
    FATHOM_RETURN_IF_ERROR(append_tools_and_format(out, msg, Dialect::kV4));
  } else if (role == "developer") {
    if (!truthy(content)) return reject("Invalid message for role `developer`");
    if (!is_str(content)) return reject("TypeError: developer content must be a string");
    out.append_special("<｜User｜>");
    out.append_text(content->text);
    FATHOM_RETURN_IF_ERROR(append_tools_and_format(out, msg, Dialect::kV4));
  } else if (role == "user") {
    out.append_special("<｜User｜>");
    const Value* blocks = get(msg, "content_blocks");
    if (truthy(blocks)) {
      FATHOM_RETURN_IF_ERROR(append_content_blocks(out, *blocks));
    } else {
      FATHOM_RETURN_IF_ERROR(append_str_or_empty(out, content));
    }
  } else if (role == "latest_reminder") {
    out.append_special("<｜latest_reminder｜>");
    FATHOM_ASSIGN_OR_RETURN(std::string s, str(content));
    out.append_text(s);
  } else if (role == "assistant") {
    bool prev_task = index >= 1 && !is_none(get(msgs[index - 1], "task"));
    if (mode == "thinking" && !prev_task && (!drop_thinking || int(index) > last_user)) {
      FATHOM_RETURN_IF_ERROR(append_str_or_empty(out, get(msg, "reasoning_content")));
      out.append_special("</think>");
    }
    FATHOM_RETURN_IF_ERROR(append_str_or_empty(out, content));
    FATHOM_RETURN_IF_ERROR(append_tool_calls(out, msg, Dialect::kV4));
    if (!truthy(get(msg, "wo_eos"))) out.append_special("<｜end▁of▁sentence｜>");
  } else {
    return reject("Unknown role: " + role);
  }

  if (index + 1 < msgs.size()) {
    const Value* next = get(msgs[index + 1], "role");
    std::string nr = is_str(next) ? next->text : "";
    if (nr != "assistant" && nr != "latest_reminder") return Status::ok();
  }
  const Value* task = get(msg, "task");
  if (!is_none(task)) {
    FATHOM_ASSIGN_OR_RETURN(std::string tok, task_token(*task));
    if (task->text != "action") {
      out.append_special(tok);
    } else {
      out.append_special("<｜Assistant｜>");
      out.append_special(mode != "thinking" ? "</think>" : "<think>");
      out.append_special(tok);
    }
  } else if (role == "user" || role == "developer") {
    out.append_special("<｜Assistant｜>");
    bool open = mode == "thinking" && (!drop_thinking || int(index) >= last_user);
    out.append_special(open ? "<think>" : "</think>");
  }
  return Status::ok();
}

}  // namespace

Result<ReferenceOutput> render_v4_reference(const ReferenceRequest& req) {
  ReferenceOutput result;
  std::vector<Value> context = req.context.is_array() ? req.context.items : std::vector<Value>();
  for (const Value& m : req.messages.items)
    if (!m.is_object()) return reject("each message must be an object");
  ReferenceDialect d{Dialect::kV4, find_last_user_index, render_message};
  FATHOM_RETURN_IF_ERROR(
      encode_reference_messages(req, req.messages.items, context, d, result.prompt));
  return result;
}

}  // namespace fathom::prompt
