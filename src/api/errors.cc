#include "api/errors.h"

#include "core/json_write.h"

namespace fathom::api {

int http_status_of(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk:
      return 200;
    case StatusCode::kInvalidArgument:
    case StatusCode::kUnsupported:
    case StatusCode::kOutOfRange:
      return 400;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kResourceExhausted:
      return 429;
    default:
      return 500;
  }
}

std::string openai_error_json(const Status& s) {
  std::string out = "{\"error\":{\"message\":";
  json::append_string(out, s.message());
  out += ",\"type\":";
  json::append_string(out, http_status_of(s) < 500 ? "invalid_request_error" : "internal_error");
  out += ",\"param\":null,\"code\":";
  json::append_string(out, status_code_name(s.code()));
  out += "}}";
  return out;
}

std::string anthropic_error_json(const Status& s) {
  std::string out = "{\"type\":\"error\",\"error\":{\"type\":";
  json::append_string(out, http_status_of(s) < 500 ? "invalid_request_error" : "api_error");
  out += ",\"message\":";
  json::append_string(out, s.message());
  out += "}}";
  return out;
}

}  // namespace fathom::api
