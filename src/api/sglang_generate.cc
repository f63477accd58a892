#include "api/sglang_generate.h"

#include <cmath>

#include "api/logit_controls.h"
#include "api/request_util.h"
#include "api/stop_matcher.h"
#include "core/json_write.h"

namespace fathom::api {

using pyjson::Value;
using namespace detail;

namespace {

// A list of token ids, each in [0, 2^31).
Status read_ids(const Value& list, const std::string& name, std::vector<int32_t>* out) {
  for (const Value& v : list.items) {
    int64_t x = 0;
    if (v.kind != Value::Kind::kInt || !v.int_fits_int64(&x) || x < 0 || x > INT32_MAX)
      return bad("'" + name + "' must be a list of token ids (integers in [0, 2147483647])");
    out->push_back(int32_t(x));
  }
  return Status::ok();
}

Result<double> ranged(const Value& v, const std::string& name, double lo, double hi, bool lo_open,
                      const char* range) {
  FATHOM_ASSIGN_OR_RETURN(double x, number(v, name.c_str()));
  if (!std::isfinite(x) || x < lo || x > hi || (lo_open && x == lo))
    return bad("'" + name + "' must be in " + range);
  return x;
}

Status read_bool(const Value& o, const char* key, const std::string& name, bool* out) {
  if (const Value* v = field(o, key)) {
    if (v->kind != Value::Kind::kBool) return bad("'" + name + "' must be a boolean");
    *out = v->boolean;
  }
  return Status::ok();
}

// SGLang's sampling_params (sampling/sampling_params.py), with its ranges.
Status read_sampling_params(const Value& sp, GenerateRequest& req) {
  if (!sp.is_object()) return bad("'sampling_params' must be an object");
  static const char* const kKnown[] = {"max_new_tokens",
                                       "temperature",
                                       "top_p",
                                       "top_k",
                                       "min_p",
                                       "frequency_penalty",
                                       "presence_penalty",
                                       "repetition_penalty",
                                       "sampling_seed",
                                       "ignore_eos",
                                       "skip_special_tokens",
                                       "spaces_between_special_tokens",
                                       "stop",
                                       "stop_token_ids",
                                       "json_schema",
                                       "regex",
                                       "n",
                                       "no_stop_trim",
                                       "min_new_tokens",
                                       "ebnf",
                                       "structural_tag",
                                       "stop_regex",
                                       "logit_bias",
                                       "custom_params",
                                       "stream_interval"};
  for (const std::string& k : sp.keys) {
    bool known = false;
    for (const char* n : kKnown) known |= k == n;
    if (!known) return bad("'sampling_params." + k + "' is not a sampling parameter");
  }
  const std::string p = "sampling_params.";
  SamplingParams& s = req.sampling;
  s.max_tokens = 128;  // SGLang's default
  if (const Value* v = field(sp, "max_new_tokens")) {
    FATHOM_ASSIGN_OR_RETURN(int64_t t, integer(*v, (p + "max_new_tokens").c_str()));
    if (t < 1) return bad("'" + p + "max_new_tokens' must be at least 1");
    s.max_tokens = t;
  }
  if (const Value* v = field(sp, "temperature")) {
    FATHOM_ASSIGN_OR_RETURN(double t,
                            ranged(*v, p + "temperature", 0, 1e9, false, "[0, inf) (0 is greedy)"));
    s.temperature = t;
  }
  if (const Value* v = field(sp, "top_p")) {
    FATHOM_ASSIGN_OR_RETURN(double t, ranged(*v, p + "top_p", 0, 1, true, "(0, 1]"));
    s.top_p = t;
  }
  if (const Value* v = field(sp, "top_k")) {
    FATHOM_ASSIGN_OR_RETURN(int64_t k, integer(*v, (p + "top_k").c_str()));
    if (k != -1 && (k < 1 || k > INT32_MAX))
      return bad("'" + p + "top_k' must be -1 (the whole vocabulary) or at least 1");
    if (k > 0) s.top_k = k;
  }
  if (const Value* v = field(sp, "min_p")) {
    FATHOM_ASSIGN_OR_RETURN(double t, ranged(*v, p + "min_p", 0, 1, false, "[0, 1]"));
    s.min_p = t;
  }
  for (auto [k, dst] :
       {std::pair<const char*, std::optional<double>*>{"frequency_penalty", &s.frequency_penalty},
        {"presence_penalty", &s.presence_penalty}}) {
    if (const Value* v = field(sp, k)) {
      FATHOM_ASSIGN_OR_RETURN(double t, ranged(*v, p + k, -2, 2, false, "[-2, 2]"));
      *dst = t;
    }
  }
  if (const Value* v = field(sp, "repetition_penalty")) {
    FATHOM_ASSIGN_OR_RETURN(double t, ranged(*v, p + "repetition_penalty", 0, 2, true, "(0, 2]"));
    s.repetition_penalty = t;
  }
  if (const Value* v = field(sp, "sampling_seed")) {
    FATHOM_ASSIGN_OR_RETURN(int64_t seed, integer(*v, (p + "sampling_seed").c_str()));
    s.seed = seed;
  }
  FATHOM_RETURN_IF_ERROR(read_bool(sp, "ignore_eos", p + "ignore_eos", &s.ignore_eos));
  FATHOM_RETURN_IF_ERROR(
      read_bool(sp, "skip_special_tokens", p + "skip_special_tokens", &req.skip_special_tokens));
  // SGLang joins special tokens' text with spaces by default when it keeps them; this server
  // writes their exact spelling, so keeping them needs spaces_between_special_tokens: false.
  bool spaces = true;
  FATHOM_RETURN_IF_ERROR(
      read_bool(sp, "spaces_between_special_tokens", p + "spaces_between_special_tokens", &spaces));
  if (!req.skip_special_tokens && spaces)
    return unsupported("'" + p +
                       "spaces_between_special_tokens' must be false when skip_special_tokens "
                       "is false (special tokens are written as spelled, without spaces)");
  FATHOM_RETURN_IF_ERROR(read_stop_field(sp, &s.stop));
  if (const Value* v = field(sp, "stop_token_ids")) {
    if (!v->is_array()) return bad("'" + p + "stop_token_ids' must be a list of token ids");
    FATHOM_RETURN_IF_ERROR(read_ids(*v, p + "stop_token_ids", &req.stop_token_ids));
  }
  if (const Value* v = field(sp, "n")) {
    FATHOM_ASSIGN_OR_RETURN(int64_t n, integer(*v, (p + "n").c_str()));
    if (n != 1) return unsupported("'" + p + "n': only 1 is supported by this server");
  }
  bool no_stop_trim = false;
  FATHOM_RETURN_IF_ERROR(read_bool(sp, "no_stop_trim", p + "no_stop_trim", &no_stop_trim));
  if (no_stop_trim) return unsupported("'" + p + "no_stop_trim' is not supported by this server");
  FATHOM_RETURN_IF_ERROR(read_logit_controls(
      sp, s, {.prefix = p, .min_tokens = "min_new_tokens", .allowed_and_bad_words = false}));
  for (const char* k : {"ebnf", "structural_tag", "stop_regex", "custom_params", "stream_interval"})
    if (field(sp, k)) return unsupported("'" + p + k + "' is not supported by this server");
  if (const Value* v = field(sp, "json_schema")) {
    if (!v->is_string()) return bad("'" + p + "json_schema' must be a string (a JSON Schema)");
    FATHOM_RETURN_IF_ERROR(set_json_schema(*v, p + "json_schema", req.structured));
  }
  if (const Value* v = field(sp, "regex")) {
    if (!v->is_string()) return bad("'" + p + "regex' must be a string");
    if (req.structured.active())
      return bad("'" + p + "regex': only one of regex, json_schema or ebnf can be set");
    req.structured.kind = StructuredOutput::Kind::kRegex;
    req.structured.text = v->text;
    req.structured.field = p + "regex";
  }
  return Status::ok();
}

}  // namespace

Result<GenerateRequest> parse_generate_request(std::string_view body, size_t max_body_bytes) {
  FATHOM_ASSIGN_OR_RETURN(const Value r, parse_body_object(body, max_body_bytes));
  static const char* const kKnown[] = {"text",
                                       "input_ids",
                                       "sampling_params",
                                       "stream",
                                       "rid",
                                       "extra_key",
                                       "return_logprob",
                                       "return_text_in_logprobs",
                                       "logprob_start_len",
                                       "top_logprobs_num",
                                       "token_ids_logprob",
                                       "log_metrics",
                                       "return_hidden_states"};
  for (const std::string& k : r.keys) {
    bool known = false;
    for (const char* n : kKnown) known |= k == n;
    if (!known) return unsupported("'" + k + "' is not supported by this server");
  }
  GenerateRequest req;
  const Value* text = field(r, "text");
  const Value* ids = field(r, "input_ids");
  if ((text == nullptr) == (ids == nullptr))
    return bad("exactly one of 'text' or 'input_ids' is required");
  if (text) {
    if (text->is_array()) return bad("'text': batches are not supported; send one prompt");
    if (!text->is_string()) return bad("'text' must be a string");
    if (text->text.empty()) return bad("'text' is empty");
    req.text = text->text;
  } else {
    if (!ids->is_array()) return bad("'input_ids' must be a list of token ids");
    if (!ids->items.empty() && ids->items[0].is_array())
      return bad("'input_ids': batches are not supported; send one prompt");
    FATHOM_RETURN_IF_ERROR(read_ids(*ids, "input_ids", &req.input_ids));
    if (req.input_ids.empty()) return bad("'input_ids' is empty");
    req.prompt_is_ids = true;
  }
  if (const Value* sp = field(r, "sampling_params")) {
    FATHOM_RETURN_IF_ERROR(read_sampling_params(*sp, req));
  } else {
    req.sampling.max_tokens = 128;
  }
  FATHOM_RETURN_IF_ERROR(read_bool(r, "stream", "stream", &req.stream));
  if (const Value* v = field(r, "rid")) {
    if (!v->is_string() || v->text.empty()) return bad("'rid' must be a non-empty string");
    req.rid = v->text;
  }
  if (const Value* v = field(r, "extra_key")) {
    if (!v->is_string() || v->text.empty()) return bad("'extra_key' must be a non-empty string");
    req.sampling.cache_salt = v->text;
  }
  bool flag = false;
  FATHOM_RETURN_IF_ERROR(read_bool(r, "return_logprob", "return_logprob", &flag));
  if (flag) return unsupported("'return_logprob' is not supported by this server");
  FATHOM_RETURN_IF_ERROR(read_bool(r, "return_hidden_states", "return_hidden_states", &flag));
  if (flag) return unsupported("'return_hidden_states' is not supported by this server");
  FATHOM_RETURN_IF_ERROR(read_bool(r, "return_text_in_logprobs", "return_text_in_logprobs", &flag));
  FATHOM_RETURN_IF_ERROR(read_bool(r, "log_metrics", "log_metrics", &flag));
  for (const char* k : {"logprob_start_len", "top_logprobs_num", "token_ids_logprob"})
    if (field(r, k))
      return unsupported("'" + std::string(k) +
                         "' needs logprobs, which this server does not return here");
  return req;
}

std::string generate_output_json(const std::string& text, const std::vector<int32_t>& output_ids,
                                 const std::string& id, const GenerateFinish& finish,
                                 const GenerateUsage& usage, double e2e_seconds) {
  Value meta = Value::object();
  meta.set("id", Value::from_string(id));
  Value f;
  switch (finish.kind) {
    case GenerateFinish::Kind::kNone:
      break;
    case GenerateFinish::Kind::kStopToken:
      f = Value::object();
      f.set("type", Value::from_string("stop"));
      f.set("matched", Value::from_int(finish.token));
      break;
    case GenerateFinish::Kind::kStopString:
      f = Value::object();
      f.set("type", Value::from_string("stop"));
      f.set("matched", Value::from_string(finish.text));
      break;
    case GenerateFinish::Kind::kLength:
      f = Value::object();
      f.set("type", Value::from_string("length"));
      f.set("length", Value::from_int(finish.length));
      break;
  }
  meta.set("finish_reason", std::move(f));
  meta.set("prompt_tokens", Value::from_int(usage.prompt_tokens));
  meta.set("completion_tokens", Value::from_int(usage.completion_tokens));
  meta.set("cached_tokens", Value::from_int(usage.cached_tokens));
  if (finish.kind != GenerateFinish::Kind::kNone)
    meta.set("e2e_latency", Value::from_float(e2e_seconds));
  Value out = Value::object();
  out.set("text", Value::from_string(text));
  Value ids = Value::array();
  ids.items.reserve(output_ids.size());
  for (int32_t t : output_ids) ids.items.push_back(Value::from_int(t));
  out.set("output_ids", std::move(ids));
  out.set("meta_info", std::move(meta));
  return pyjson::dumps(out, false, true);
}

std::string sglang_error_json(const Status& s) {
  std::string out = "{\"error\":{\"message\":";
  json::append_string(out, s.message());
  return out + "}}";
}

std::string sglang_stream_error(const Status& s) {
  return "data: " + sglang_error_json(s) + "\n\ndata: [DONE]\n\n";
}

}  // namespace fathom::api
