// Protocol error bodies. A request error is a Status (kInvalidArgument -> HTTP 400, anything
// else -> 500); these render it in each protocol's own error JSON. Pure functions.
#pragma once

#include <string>

#include "core/status.h"

namespace fathom::api {

int http_status_of(const Status& s);
// {"error": {"message", "type", "param", "code"}} (OpenAI Chat Completions and Responses).
std::string openai_error_json(const Status& s);
// {"type": "error", "error": {"type", "message"}} (Anthropic Messages).
std::string anthropic_error_json(const Status& s);

}  // namespace fathom::api
