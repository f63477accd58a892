#include "router/pd_client.h"

#include "core/json_write.h"
#include "core/py_json.h"

namespace fathom::router {
namespace {

using pyjson::Value;

double number(const Value& v, std::string_view key) {
  const Value* x = v.find(key);
  if (x == nullptr) return 0;
  if (x->kind == Value::Kind::kFloat) return x->number;
  int64_t i = 0;
  return x->int_fits_int64(&i) ? double(i) : 0;
}

std::string prompt_body(std::string_view room, std::span<const int32_t> prompt,
                        std::string_view cache_salt) {
  std::string b = "{\"room\":";
  json::append_string(b, room);
  b += ",\"prompt\":";
  json::append_int_array(b, prompt);
  if (!cache_salt.empty()) {
    b += ",\"cache_salt\":";
    json::append_string(b, cache_salt);
  }
  return b;
}

}  // namespace

AsyncHttpExchange::Awaitable<Result<PdReservation>> pd_reserve(
    const Endpoint& d, std::string_view room, std::span<const int32_t> prompt,
    std::string_view cache_salt, const PdCallOptions& o, int64_t max_tokens,
    AsyncHttpExchange::Stop stop) {
  std::string body = prompt_body(room, prompt, cache_salt);
  if (max_tokens > 0) body += ",\"max_tokens\":" + std::to_string(max_tokens);
  body += "}";
  auto answer = co_await async_post(d, "/v1/pd/reserve", body, o.auth_header, o.connect_timeout_ms,
                                    o.timeout_ms, std::move(stop));
  if (!answer.is_ok()) co_return answer.status();
  const auto& r = *answer;
  // 503: no room for it now (kv_capacity, too_many_rooms); anything else is no refusal of
  // this request but a D that cannot take hand-offs (the attempt on D finds out why).
  if (r.first != 200)
    co_return Status(r.first == 503 ? StatusCode::kResourceExhausted : StatusCode::kInternal,
                     d.url + " refused the room (" + std::to_string(r.first) +
                         "): " + error_body_message(r.second));
  auto v = pyjson::parse(r.second);
  if (!v.is_ok() || !v->is_object()) co_return io_error(d.url + ": a reservation that is not JSON");
  PdReservation out;
  out.expect_blocks = int64_t(number(*v, "expect_blocks"));
  co_return out;
}

AsyncHttpExchange::Awaitable<Result<PdPrefillResult>> pd_prefill(
    const Endpoint& p, std::string_view room, std::span<const int32_t> prompt,
    std::string_view cache_salt, std::string_view retention, std::string_view push_to,
    const PdCallOptions& o, AsyncHttpExchange::Stop stop) {
  std::string body = prompt_body(room, prompt, cache_salt);
  if (!retention.empty()) {
    body += ",\"retention\":";
    json::append_string(body, retention);
  }
  body += ",\"push_to\":";
  json::append_string(body, push_to);
  body += "}";
  auto answer = co_await async_post(p, "/v1/pd/prefill", body, o.auth_header, o.connect_timeout_ms,
                                    o.timeout_ms, std::move(stop));
  if (!answer.is_ok()) co_return answer.status();
  const auto& r = *answer;
  if (r.first != 200)
    co_return internal_error(p.url + " (" + std::to_string(r.first) +
                             "): " + error_body_message(r.second));
  auto v = pyjson::parse(r.second);
  if (!v.is_ok() || !v->is_object())
    co_return io_error(p.url + ": a prefill answer that is not JSON");
  PdPrefillResult out;
  out.blocks = int64_t(number(*v, "blocks"));
  out.bytes = int64_t(number(*v, "bytes"));
  out.cached_tokens = int64_t(number(*v, "cached_tokens"));
  out.prefill_seconds = number(*v, "prefill_seconds");
  out.push_seconds = number(*v, "push_seconds");
  co_return out;
}

Result<std::string> pd_push(const Endpoint& d, std::string_view room, std::string_view body,
                            const PdCallOptions& o) {
  const std::string path = "/v1/kv_push?room=" + std::string(room);
  FATHOM_ASSIGN_OR_RETURN(auto x, HttpExchange::start(d, "POST", path, body, o.auth_header,
                                                      o.connect_timeout_ms, o.timeout_ms));
  FATHOM_ASSIGN_OR_RETURN(std::string answer, x->read_all(o.timeout_ms, size_t(1) << 20));
  if (x->status() != 200)
    return corrupt(d.url + " refused the push (" + std::to_string(x->status()) +
                   "): " + error_body_message(answer));
  return answer;
}

}  // namespace fathom::router
