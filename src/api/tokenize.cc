#include "api/tokenize.h"

#include <cstdint>

#include "api/request_util.h"
#include "core/json_write.h"

namespace fathom::api {

using pyjson::Value;
using namespace detail;

namespace {

// clang-format off
// The parameters of vLLM's TokenizeCompletionRequest.
constexpr std::string_view kTokenizePromptFields[] = {
    "model", "prompt", "add_special_tokens", "return_token_strs"
};
// The parameters of vLLM's DetokenizeRequest.
constexpr std::string_view kDetokenizeFields[] = {"model", "tokens"};
// clang-format on

Result<bool> optional_bool(const Value& r, std::string_view name, bool fallback) {
  const Value* v = field(r, name);
  if (v == nullptr || v->is_null()) return fallback;
  if (v->kind != Value::Kind::kBool) return bad("'" + std::string(name) + "' must be a boolean");
  return v->boolean;
}

// `model`, when present, names a served model.
Status check_model(const Value& r, const ChatOptions& chat) {
  const Value* m = field(r, "model");
  if (m == nullptr || m->is_null()) return Status::ok();
  if (!m->is_string()) return bad("'model' must be a string");
  if (chat.models == nullptr) return Status::ok();
  return resolve_model(*chat.models, m->text).status();
}

}  // namespace

Result<TokenizeRequest> parse_tokenize_request(std::string_view body, ChatOptions chat) {
  FATHOM_ASSIGN_OR_RETURN(const Value r, parse_body_object(body, chat.max_body_bytes));
  TokenizeRequest out;
  FATHOM_ASSIGN_OR_RETURN(out.return_token_strs, optional_bool(r, "return_token_strs", false));
  if (field(r, "messages") != nullptr) {
    chat.tokenize = true;
    chat.caller_fields = {};
    FATHOM_ASSIGN_OR_RETURN(ConversationRequest c, parse_chat_request(body, chat));
    FATHOM_RETURN_IF_ERROR(require_bool(r, "add_special_tokens", false));
    out.add_special_tokens = false;
    out.chat = std::move(c);
    return out;
  }
  FATHOM_RETURN_IF_ERROR(reject_unknown_fields(r, kTokenizePromptFields, {}));
  FATHOM_RETURN_IF_ERROR(check_model(r, chat));
  const Value* p = field(r, "prompt");
  if (p == nullptr || !p->is_string()) return bad("'prompt' must be a string");
  out.prompt = p->text;
  FATHOM_ASSIGN_OR_RETURN(out.add_special_tokens, optional_bool(r, "add_special_tokens", true));
  return out;
}

Result<std::vector<int32_t>> parse_detokenize_request(std::string_view body,
                                                      const ChatOptions& chat) {
  FATHOM_ASSIGN_OR_RETURN(const Value r, parse_body_object(body, chat.max_body_bytes));
  FATHOM_RETURN_IF_ERROR(reject_unknown_fields(r, kDetokenizeFields, {}));
  FATHOM_RETURN_IF_ERROR(check_model(r, chat));
  const Value* t = field(r, "tokens");
  if (t == nullptr || !t->is_array()) return bad("'tokens' must be a list of token ids");
  std::vector<int32_t> ids;
  ids.reserve(t->items.size());
  for (const Value& e : t->items) {
    int64_t x = 0;
    if (!e.int_fits_int64(&x) || x < 0 || x > INT32_MAX)
      return bad("'tokens' must be a list of token ids");
    ids.push_back(int32_t(x));
  }
  return ids;
}

std::string tokenize_response_json(std::span<const int32_t> ids, int64_t max_model_len,
                                   const std::vector<std::string_view>* token_strs) {
  std::string out = "{\"count\":" + std::to_string(ids.size()) +
                    ",\"max_model_len\":" + std::to_string(max_model_len) + ",\"tokens\":";
  json::append_int_array(out, ids);
  out += ",\"token_strs\":";
  if (token_strs == nullptr) {
    out += "null";
  } else {
    out += "[";
    for (size_t i = 0; i < token_strs->size(); ++i) {
      if (i) out += ",";
      json::append_string(out, (*token_strs)[i]);
    }
    out += "]";
  }
  out += "}";
  return out;
}

}  // namespace fathom::api
