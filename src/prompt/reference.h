// Reference renderers: byte-exact ports of DeepSeek's official prompt encoders
// (V4 `encoding_dsv4.py`, V4.1 `encoding.py` release), quirks included, working on the
// encoders' own input shape (OpenAI-style message dicts as Python JSON values). They are
// the ground truth the API-mode renderer and the goldens are checked against. Pure
// functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "core/py_json.h"
#include "core/status.h"
#include "prompt/prompt.h"

namespace fathom::prompt {

// The arguments of the official encode_messages().
struct ReferenceRequest {
  pyjson::Value messages = pyjson::Value::array();
  pyjson::Value context;           // null or an array of messages
  pyjson::Value thinking_mode;     // "chat" | "thinking" (anything else is rejected)
  pyjson::Value reasoning_effort;  // null, a name, or (V4.1) an int 1..100
  bool drop_thinking = true;
  bool add_default_bos_token = true;

  // Reads a golden-case object (messages, context, thinking_mode, reasoning_effort,
  // drop_thinking, add_default_bos_token).
  static Result<ReferenceRequest> from_case(const pyjson::Value& c);
};

struct ReferenceOutput {
  Prompt prompt;
  std::vector<pyjson::Value> images;  // V4.1: image records in prompt order (not context's)
};

// A rejected conversation is kInvalidArgument (the official encoder raised).
Result<ReferenceOutput> render_v41_reference(const ReferenceRequest& request);
Result<ReferenceOutput> render_v4_reference(const ReferenceRequest& request);
// V4 preview's `max` effort prefix (REASONING_EFFORT_MAX), which V4-0731 uses for `high`.
std::string_view v4_effort_absolute_maximum();

}  // namespace fathom::prompt

namespace fathom::prompt {

// Port of the official parse_message_from_completion_text(): a completion string to
// {"role", "content", "reasoning_content", "tool_calls"} exactly as DeepSeek's parser returns
// it, quirks included (string="false" values pasted into `arguments` unvalidated). A
// completion the official parser rejects is kInvalidArgument. For text only: the API-facing
// parser works on token ids.
Result<pyjson::Value> parse_completion_reference(std::string_view completion, bool thinking,
                                                 bool v41);

}  // namespace fathom::prompt
