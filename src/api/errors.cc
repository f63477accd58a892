#include "api/errors.h"

#include <cctype>

#include "core/json_write.h"

namespace fathom::api {

namespace {

constexpr std::string_view kModelPrefix = "The model `";
constexpr std::string_view kModelSuffix = "` does not exist or you do not have access to it.";

bool client_fault(StatusCode c) {
  return c == StatusCode::kInvalidArgument || c == StatusCode::kUnsupported ||
         c == StatusCode::kOutOfRange;
}

}  // namespace

Status model_not_found(std::string_view model) {
  return not_found(std::string(kModelPrefix) + std::string(model) + std::string(kModelSuffix));
}

bool is_model_not_found(const Status& s) {
  const std::string& m = s.message();
  return s.code() == StatusCode::kNotFound && m.rfind(kModelPrefix, 0) == 0 &&
         m.size() >= kModelPrefix.size() + kModelSuffix.size() &&
         m.compare(m.size() - kModelSuffix.size(), kModelSuffix.size(), kModelSuffix) == 0;
}

int http_status_of(const Status& s) {
  if (s.code() == StatusCode::kOk) return 200;
  if (client_fault(s.code())) return 400;
  if (s.code() == StatusCode::kNotFound) return 404;
  // Given up (the server is draining; a client that left never sees it): try again elsewhere.
  if (s.code() == StatusCode::kResourceExhausted || s.code() == StatusCode::kCancelled) return 503;
  return 500;
}

int anthropic_http_status_of(const Status& s) {
  return s.code() == StatusCode::kResourceExhausted ? 529 : http_status_of(s);
}

std::string error_param(const Status& s) {
  if (is_model_not_found(s)) return "model";
  if (!client_fault(s.code()) && s.code() != StatusCode::kNotFound) return "";
  const std::string& m = s.message();
  if (!m.empty() && m[0] == '\'') {
    size_t end = m.find('\'', 1);
    return end == std::string::npos ? "" : m.substr(1, end - 1);
  }
  // "messages[2]: ..." or Anthropic's "messages.2.content: ...": a path without spaces.
  size_t colon = m.find(": ");
  if (colon == std::string::npos || colon == 0) return "";
  for (size_t i = 0; i < colon; ++i) {
    unsigned char c = static_cast<unsigned char>(m[i]);
    if (!(std::isalnum(c) || c == '_' || c == '.' || c == '[' || c == ']')) return "";
  }
  return m.substr(0, colon);
}

std::string openai_error_json(const Status& s) {
  std::string out = "{\"error\":{\"message\":";
  json::append_string(out, s.message());
  out += ",\"type\":";
  json::append_string(out, http_status_of(s) < 500 ? "invalid_request_error" : "server_error");
  out += ",\"param\":";
  std::string param = error_param(s);
  if (param.empty()) {
    out += "null";
  } else {
    json::append_string(out, param);
  }
  out += ",\"code\":";
  if (is_model_not_found(s)) {
    out += "\"model_not_found\"";
  } else {
    json::append_string(out, status_code_name(s.code()));
  }
  out += "}}";
  return out;
}

const char* anthropic_error_type(const Status& s) {
  if (client_fault(s.code())) return "invalid_request_error";
  if (s.code() == StatusCode::kNotFound) return "not_found_error";
  if (s.code() == StatusCode::kResourceExhausted) return "overloaded_error";
  return "api_error";
}

std::string anthropic_error_json(const Status& s) {
  std::string out = "{\"type\":\"error\",\"error\":{\"type\":";
  json::append_string(out, anthropic_error_type(s));
  out += ",\"message\":";
  json::append_string(out, s.message());
  out += "}}";
  return out;
}

std::string openai_stream_error(const Status& s) {
  return "data: " + openai_error_json(s) + "\n\ndata: [DONE]\n\n";
}

std::string anthropic_stream_error(const Status& s) {
  return "event: error\ndata: " + anthropic_error_json(s) + "\n\n";
}

}  // namespace fathom::api
