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
  } else {
    bool handled = false;
    FATHOM_RETURN_IF_ERROR(append_common_role(out, index, msgs, role, mode, drop_thinking,
                                              last_user, Dialect::kV4, &handled));
    if (!handled) return reject("Unknown role: " + role);
  }
  return append_transition(out, index, msgs, mode, drop_thinking, last_user,
                           role == "user" || role == "developer");
}

}  // namespace

std::string_view v4_effort_absolute_maximum() { return kEffortMax; }

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
