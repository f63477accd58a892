#include "api/logit_controls.h"

#include <cstdint>

#include "api/request_util.h"

namespace fathom::api {

using pyjson::Value;
using namespace detail;

namespace {

// At most this many bad words (vLLM's default VLLM_MAX_NUM_BAD_WORDS is 128 tokenized forms).
constexpr size_t kMaxBadWords = 128;
// At most this many bytes of bad words in all (they are tokenized before their 1,024 ids are
// counted).
constexpr size_t kMaxBadWordBytes = 65536;

// A non-empty list of token ids; `what` says what it must be when it is not.
Result<std::vector<int32_t>> id_list(const Value& v, const std::string& name,
                                     const std::string& what) {
  if (!v.is_array() || v.items.empty()) return bad("'" + name + "' " + what);
  return token_ids(v, name);
}

// OpenAI's logit_bias: {"<token id>": bias in [-100, 100], ...}.
Status read_logit_bias(const Value& v, const std::string& name, SamplingParams& sp) {
  if (!v.is_object())
    return bad("'" + name + "' must be an object mapping token ids to biases in [-100, 100]");
  sp.logit_bias.clear();
  sp.logit_bias.reserve(v.keys.size());
  for (size_t i = 0; i < v.keys.size(); ++i) {
    const std::string& k = v.keys[i];
    int64_t id = 0;
    bool digits = !k.empty() && k.size() <= 10;
    for (char c : k) {
      digits = digits && c >= '0' && c <= '9';
      if (digits) id = id * 10 + (c - '0');
    }
    if (!digits || id > INT32_MAX)
      return bad("'" + name + "' keys must be token ids (decimal integers in [0, 2147483647])");
    const Value& b = v.items[i];
    int64_t n = 0;
    double bias = 0;
    if (b.kind == Value::Kind::kFloat)
      bias = b.number;
    else if (b.kind == Value::Kind::kInt && b.int_fits_int64(&n))
      bias = double(n);
    else
      return bad("'" + name + "' values must be numbers in [-100, 100]");
    if (!(bias >= -100 && bias <= 100))
      return bad("'" + name + "' values must be numbers in [-100, 100]");
    sp.logit_bias.emplace_back(int32_t(id), bias);
  }
  return Status::ok();
}

}  // namespace

Status read_logit_controls(const Value& r, SamplingParams& sp, const LogitControlFields& f) {
  auto named = [&](const char* k) { return f.prefix + k; };
  if (const Value* v = field(r, "logit_bias"))
    FATHOM_RETURN_IF_ERROR(read_logit_bias(*v, named("logit_bias"), sp));
  if (const Value* v = field(r, f.min_tokens)) {
    const std::string name = named(f.min_tokens);
    FATHOM_ASSIGN_OR_RETURN(int64_t n, integer(*v, name.c_str()));
    if (n < 0) return bad("'" + name + "' must be non-negative");
    sp.min_tokens = n;
  }
  if (!f.allowed_and_bad_words) return Status::ok();
  if (const Value* v = field(r, "allowed_token_ids")) {
    FATHOM_ASSIGN_OR_RETURN(sp.allowed_token_ids, id_list(*v, named("allowed_token_ids"),
                                                          "must be a non-empty list of token ids"));
  }
  if (const Value* v = field(r, "bad_words")) {
    const std::string name = named("bad_words");
    if (!v->is_array()) return bad("'" + name + "' must be a list of strings");
    if (v->items.size() > kMaxBadWords)
      return bad("'" + name + "' holds more than " + std::to_string(kMaxBadWords) + " words");
    size_t bytes = 0;
    for (const Value& w : v->items) {
      if (!w.is_string()) return bad("'" + name + "' must be a list of strings");
      if (w.text.empty()) return bad("'" + name + "' cannot contain an empty string");
      if ((bytes += w.text.size()) > kMaxBadWordBytes)
        return bad("'" + name + "' holds more than " + std::to_string(kMaxBadWordBytes) +
                   " bytes in all");
      sp.bad_words.push_back(w.text);
    }
  }
  if (const Value* v = field(r, "bad_words_ids"); v && f.bad_words_ids) {
    const std::string name = named("bad_words_ids");
    if (!v->is_array()) return bad("'" + name + "' must be a list of token id lists");
    for (const Value& w : v->items) {
      FATHOM_ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                              id_list(w, name, "entries must be non-empty lists of token ids"));
      sp.bad_words_ids.push_back(std::move(ids));
    }
  }
  return Status::ok();
}

}  // namespace fathom::api
