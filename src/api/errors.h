// Protocol error bodies and HTTP statuses. A request error is a Status; its code says whose
// fault it is and these functions render it in each protocol's own error JSON, before a
// response starts (a body with an HTTP status) or in the middle of a stream (an SSE event).
//
//   code                          OpenAI (Chat, Completions, Responses)       Anthropic
//   kInvalidArgument, kUnsupported,
//   kOutOfRange                   400 invalid_request_error                   400
//   invalid_request_error kNotFound                     404 invalid_request_error 404
//   not_found_error
//                                 (code "model_not_found" for model_not_found())
//   kResourceExhausted            503 server_error (vLLM's and OpenAI's       529 overloaded_error
//                                 "overloaded, try again later")              (Anthropic's own
//                                 status)
//   anything else                 500 server_error                            500 api_error
//
// `param` (OpenAI) is the request field the message starts with: "'temperature' must be..."
// names temperature, "messages[2]: ..." names messages[2].
//
// Pure functions; safe from any thread.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace fathom::api {

// kNotFound with OpenAI's message ("The model `x` does not exist or you do not have access to
// it."); is_model_not_found() recognises it, so the bodies get param "model" and code
// "model_not_found".
Status model_not_found(std::string_view model);
bool is_model_not_found(const Status& s);

// HTTP status for the OpenAI protocols and for Anthropic Messages (529 when overloaded).
int http_status_of(const Status& s);
int anthropic_http_status_of(const Status& s);

// The request field an error message names ("" when none).
std::string error_param(const Status& s);

// {"error": {"message", "type", "param", "code"}} (OpenAI Chat Completions, Completions and
// Responses).
std::string openai_error_json(const Status& s);
// {"type": "error", "error": {"type", "message"}} (Anthropic Messages).
std::string anthropic_error_json(const Status& s);
// Anthropic's error type ("invalid_request_error", "not_found_error", "overloaded_error",
// "api_error").
const char* anthropic_error_type(const Status& s);

// Ends an OpenAI Chat Completions or Completions stream with an error, as vLLM does:
// `data: {"error": {...}}` (the body of openai_error_json) and then `data: [DONE]`.
std::string openai_stream_error(const Status& s);
// Anthropic's mid-stream error event: `event: error` with the anthropic_error_json body. No
// message_stop follows.
std::string anthropic_stream_error(const Status& s);

}  // namespace fathom::api
