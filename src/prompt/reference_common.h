// Internal: pieces shared by the V4 and V4.1 reference ports (tool schemas, DSML tool calls,
// content blocks, tool-message merging and sorting, tasks).
#pragma once

#include <string>
#include <vector>

#include "core/py_json.h"
#include "core/status.h"
#include "prompt/prompt.h"

namespace fathom::prompt {

enum class Dialect { kV4, kV41 };

bool role_type_is(const pyjson::Value& block, std::string_view type);
void remove_key(pyjson::Value& obj, std::string_view key);

// Appends str(v) unless v is falsy (Python's `v or ""`).
Status append_str_or_empty(Prompt& out, const pyjson::Value* v);
// "\n\n" + tools template if the message has tools; "\n\n" + response format if it has one.
Status append_tools_and_format(Prompt& out, const pyjson::Value& msg, Dialect d);
// "\n\n".join of the rendered blocks (text, tool_result, [Unsupported x]).
Status append_content_blocks(Prompt& out, const pyjson::Value& blocks);
// "\n\n" + the DSML block for msg["tool_calls"], if any.
Status append_tool_calls(Prompt& out, const pyjson::Value& msg, Dialect d);
// The roles both versions render alike: user, latest_reminder, assistant. Sets *handled.
Status append_common_role(Prompt& out, size_t index, const std::vector<pyjson::Value>& msgs,
                          const std::string& role, const std::string& mode, bool drop_thinking,
                          int last_user, Dialect d, bool* handled);
// What follows a message: nothing before a non-assistant turn; else the task token, or (for
// a role that opens a turn) `<｜Assistant｜>` + `<think>`/`</think>`.
Status append_transition(Prompt& out, size_t index, const std::vector<pyjson::Value>& msgs,
                         const std::string& mode, bool drop_thinking, int last_user,
                         bool opens_turn);
// The task's special token; rejects unknown tasks.
Result<std::string> task_token(const pyjson::Value& task);

// Preprocessing (merge_tool_messages; sort_tool_results_by_call_order).
Result<std::vector<pyjson::Value>> merge_tool_messages(const std::vector<pyjson::Value>& msgs,
                                                       Dialect d = Dialect::kV41);
Status sort_tool_results_by_call_order(std::vector<pyjson::Value>& msgs);

std::string to_json(const pyjson::Value& v);  // json.dumps(ensure_ascii=False)

struct ReferenceRequest;

// The per-version parts of encode_messages().
struct ReferenceDialect {
  Dialect dialect;
  int (*last_user_index)(const std::vector<pyjson::Value>& msgs);
  Status (*render_message)(size_t index, const std::vector<pyjson::Value>& msgs,
                           const std::string& mode, bool drop_thinking, const pyjson::Value& effort,
                           Prompt& out);
};

// encode_messages() after image processing: merge and sort tool results, resolve
// drop_thinking, drop messages, render each one.
Status encode_reference_messages(const ReferenceRequest& req,
                                 const std::vector<pyjson::Value>& messages,
                                 const std::vector<pyjson::Value>& context,
                                 const ReferenceDialect& d, Prompt& out);

}  // namespace fathom::prompt
