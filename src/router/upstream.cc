#include "router/upstream.h"

#include <algorithm>
#include <cstdio>

#include "core/py_json.h"
#include "kv/prefix_cache.h"

namespace fathom::router {

std::string upstream_salt_name(uint64_t salt) {
  char s[40];
  std::snprintf(s, sizeof s, "fathom-router-%016llx", (unsigned long long)salt);
  return s;
}

uint64_t replica_block_salt(uint64_t salt) {
  return salt == 0 ? 0 : kv::tenant_salt(upstream_salt_name(salt));
}

namespace {

using pyjson::Value;

bool is_int(const Value& v, int64_t* out) {
  return v.kind == Value::Kind::kInt && v.int_fits_int64(out);
}

Value id_list(std::span<const int32_t> a, std::span<const int32_t> b = {}) {
  Value v = Value::array();
  v.items.reserve(a.size() + b.size());
  for (int32_t t : a) v.items.push_back(Value::from_int(t));
  for (int32_t t : b) v.items.push_back(Value::from_int(t));
  return v;
}

std::string salt_name(uint64_t salt) { return upstream_salt_name(salt); }

// The sampling fields every kind shares (OpenAI / vLLM / SGLang spell them alike), on `b`.
void set_sampling(Value& b, const engine::GenerationRequest& g) {
  const engine::SamplingParams& s = g.sampling;
  b.set("temperature", Value::from_float(double(s.temperature)));
  b.set("top_p", Value::from_float(double(s.top_p)));
  if (s.top_k > 0) b.set("top_k", Value::from_int(s.top_k));
  if (s.min_p > 0) b.set("min_p", Value::from_float(double(s.min_p)));
  if (s.repetition_penalty != 1.0f)
    b.set("repetition_penalty", Value::from_float(double(s.repetition_penalty)));
  if (s.presence_penalty != 0.0f)
    b.set("presence_penalty", Value::from_float(double(s.presence_penalty)));
  if (s.frequency_penalty != 0.0f)
    b.set("frequency_penalty", Value::from_float(double(s.frequency_penalty)));
  if (g.ignore_eos) b.set("ignore_eos", Value::from_bool(true));
}

Status malformed(std::string what) {
  return Status(StatusCode::kCorrupt, "malformed upstream answer: " + std::move(what));
}

// The message of an error event: {"error": {"message"}} (vLLM >= 0.11, SGLang, Fathom),
// {"error": "text"}, or vLLM's older {"object": "error", "message"}.
std::string event_error_message(const Value& v) {
  const Value* e = v.find("error");
  if (e && e->is_string()) return e->text;
  if (e && e->is_object())
    if (const Value* m = e->find("message"); m && m->is_string()) return m->text;
  if (const Value* m = v.find("message"); m && m->is_string()) return m->text;
  return "an error event without a message";
}

bool is_error_event(const Value& v) {
  const Value* e = v.find("error");
  if (e && !e->is_null()) return true;
  const Value* o = v.find("object");
  return o && o->is_string() && o->text == "error";
}

}  // namespace

Result<UpstreamKind> parse_upstream_kind(std::string_view name) {
  if (name == "fathom") return UpstreamKind::kFathom;
  if (name == "vllm") return UpstreamKind::kVllm;
  if (name == "sglang") return UpstreamKind::kSglang;
  return invalid_argument("--upstream-kind must be fathom, vllm or sglang (got '" +
                          std::string(name) + "')");
}

const char* upstream_kind_name(UpstreamKind kind) {
  switch (kind) {
    case UpstreamKind::kFathom:
      return "fathom";
    case UpstreamKind::kVllm:
      return "vllm";
    case UpstreamKind::kSglang:
      return "sglang";
  }
  return "?";
}

Status check_upstream_supports(UpstreamKind kind, const engine::GenerationRequest&, int n) {
  if (kind == UpstreamKind::kSglang && n > 1)
    return unsupported("'n': more than one choice is not supported through an sglang upstream");
  return Status::ok();
}

UpstreamCall build_upstream_call(UpstreamKind kind, const engine::GenerationRequest& g, int n,
                                 std::span<const int32_t> sofar, const std::string& retention,
                                 const std::string& request_id) {
  UpstreamCall call;
  Value b = Value::object();
  const int64_t left = g.max_tokens - int64_t(sofar.size());
  switch (kind) {
    case UpstreamKind::kFathom:
      call.path = "/v1/completions";
      b.set("prompt", id_list(g.prompt));
      // A continuation: the replica recomputes the output so far as its own decode steps.
      if (!sofar.empty()) b.set("resume_output_ids", id_list(sofar));
      b.set("max_tokens", Value::from_int(g.max_tokens));
      set_sampling(b, g);
      if (g.seeded) b.set("seed", Value::from_int(int64_t(g.sampling.seed)));
      if (n > 1) b.set("n", Value::from_int(n));
      if (g.cache_salt != 0) b.set("cache_salt", Value::from_string(salt_name(g.cache_salt)));
      b.set("retention", Value::from_string(retention));
      break;
    case UpstreamKind::kVllm:
      call.path = "/v1/completions";
      // A continuation: the output so far goes on the prompt (vLLM has no resume field).
      b.set("prompt", id_list(g.prompt, sofar));
      b.set("max_tokens", Value::from_int(left));
      set_sampling(b, g);
      if (g.seeded) b.set("seed", Value::from_int(int64_t(g.sampling.seed)));
      if (n > 1) b.set("n", Value::from_int(n));
      // vLLM >= 0.9 salts its prefix-cache hashes with it, as Fathom does.
      if (g.cache_salt != 0) b.set("cache_salt", Value::from_string(salt_name(g.cache_salt)));
      break;
    case UpstreamKind::kSglang: {
      call.path = "/generate";
      b.set("input_ids", id_list(g.prompt, sofar));
      Value sp = Value::object();
      sp.set("max_new_tokens", Value::from_int(left));
      set_sampling(sp, g);
      if (g.seeded) sp.set("sampling_seed", Value::from_int(int64_t(g.sampling.seed)));
      b.set("sampling_params", std::move(sp));
      b.set("stream", Value::from_bool(true));
      b.set("rid", Value::from_string(request_id));
      // SGLang's prefix-cache namespace (what its OpenAI endpoints map cache_salt onto).
      if (g.cache_salt != 0) b.set("extra_key", Value::from_string(salt_name(g.cache_salt)));
      call.body = pyjson::dumps(b, true, true);
      return call;
    }
  }
  b.set("stream", Value::from_bool(true));
  Value so = Value::object();
  so.set("include_usage", Value::from_bool(true));
  b.set("stream_options", std::move(so));
  b.set("return_token_ids", Value::from_bool(true));
  call.body = pyjson::dumps(b, true, true);
  return call;
}

UpstreamStreamReader::UpstreamStreamReader(UpstreamKind kind, int n, int64_t vocab_size,
                                           std::span<const int32_t> prompt)
    : kind_(kind), n_(n), vocab_(vocab_size), prompt_(prompt), finished_(size_t(n), 0) {}

namespace {

// A list of token ids inside the vocabulary into *out.
Status read_ids(const Value* v, const char* name, int64_t vocab, std::vector<int32_t>* out) {
  if (v == nullptr || !v->is_array()) return malformed(std::string("'") + name + "' is not a list");
  out->reserve(out->size() + v->items.size());
  for (const Value& id : v->items) {
    int64_t t = 0;
    if (!is_int(id, &t)) return malformed(std::string("'") + name + "' holds a non-integer");
    if (t < 0 || t >= vocab)
      return malformed("token id " + std::to_string(t) + " in '" + name +
                       "' is outside the vocabulary");
    out->push_back(int32_t(t));
  }
  return Status::ok();
}

}  // namespace

Status UpstreamStreamReader::feed(std::string_view line, std::vector<Update>* out) {
  if (line.rfind("data:", 0) != 0) return Status::ok();  // blank lines, comments, `event:`
  std::string_view payload = line.substr(5);
  if (!payload.empty() && payload.front() == ' ') payload.remove_prefix(1);
  if (done_) return malformed("an event after [DONE]");
  if (payload == "[DONE]") {
    done_ = true;
    return Status::ok();
  }
  auto v = pyjson::parse(payload);
  if (!v.is_ok() || !v->is_object()) return malformed("a stream event that is not a JSON object");
  if (is_error_event(*v)) return Status(StatusCode::kIoError, event_error_message(*v));
  return kind_ == UpstreamKind::kSglang ? feed_generate(*v, out) : feed_completions(*v, out);
}

// OpenAI-style completion chunks (Fathom and vLLM): choices[{index, token_ids,
// finish_reason, prompt_token_ids?}], usage{prompt_tokens_details{cached_tokens}}.
Status UpstreamStreamReader::feed_completions(const Value& v, std::vector<Update>* out) {
  if (const Value* u = v.find("usage"); u && !u->is_null()) {
    if (!u->is_object()) return malformed("'usage' is not an object");
    if (const Value* d = u->find("prompt_tokens_details"); d && d->is_object())
      if (const Value* c = d->find("cached_tokens"); c && !c->is_null()) {
        int64_t cached = 0;
        if (!is_int(*c, &cached) || cached < 0)
          return malformed("'usage.prompt_tokens_details.cached_tokens' is not a count");
        cached_ = cached;
      }
  }
  const Value* choices = v.find("choices");
  if (choices == nullptr || !choices->is_array()) return malformed("'choices' is not a list");
  for (const Value& ch : choices->items) {
    if (!ch.is_object()) return malformed("a choice that is not an object");
    int64_t idx = 0;
    const Value* iv = ch.find("index");
    if (iv == nullptr || !is_int(*iv, &idx) || idx < 0 || idx >= n_)
      return malformed("a choice index that is missing or out of range");
    const size_t i = size_t(idx);
    if (const Value* p = ch.find("prompt_token_ids"); p && !p->is_null()) {
      std::vector<int32_t> ids;
      FATHOM_RETURN_IF_ERROR(read_ids(p, "prompt_token_ids", vocab_, &ids));
      if (!std::equal(ids.begin(), ids.end(), prompt_.begin(), prompt_.end()))
        return malformed("'prompt_token_ids' differ from the prompt sent");
    }
    Update up;
    up.choice = i;
    // Without token_ids (a server older than vLLM 0.10.2, or one that ignored
    // return_token_ids) the output cannot be read: never a silent empty answer.
    FATHOM_RETURN_IF_ERROR(read_ids(ch.find("token_ids"), "token_ids", vocab_, &up.tokens));
    if (finished_[i] && !up.tokens.empty()) return malformed("tokens after the choice finished");
    if (const Value* f = ch.find("finish_reason"); f && !f->is_null()) {
      if (!f->is_string()) return malformed("'finish_reason' is not a string");
      if (f->text == "stop")
        up.cause = engine::FinishCause::kEos;
      else if (f->text == "length")
        up.cause = engine::FinishCause::kLength;
      else
        return malformed("finish_reason '" + f->text + "'");
      if (finished_[i]) return malformed("a choice finished twice");
      finished_[i] = 1;
    }
    if (!up.tokens.empty() || up.cause != engine::FinishCause::kNone) out->push_back(std::move(up));
  }
  return Status::ok();
}

// SGLang's /generate objects: {text, output_ids, meta_info{id, finish_reason, prompt_tokens,
// completion_tokens, cached_tokens}}; output_ids cumulative or incremental.
Status UpstreamStreamReader::feed_generate(const Value& v, std::vector<Update>* out) {
  const Value* meta = v.find("meta_info");
  if (meta == nullptr || !meta->is_object()) return malformed("'meta_info' is not an object");
  std::vector<int32_t> ids;
  FATHOM_RETURN_IF_ERROR(read_ids(v.find("output_ids"), "output_ids", vocab_, &ids));
  int64_t total = 0;
  const Value* ct = meta->find("completion_tokens");
  if (ct == nullptr || !is_int(*ct, &total) || total < 0)
    return malformed("'meta_info.completion_tokens' is not a count");
  if (const Value* pt = meta->find("prompt_tokens"); pt && !pt->is_null()) {
    int64_t p = 0;
    if (!is_int(*pt, &p)) return malformed("'meta_info.prompt_tokens' is not a count");
    if (p != int64_t(prompt_.size()))
      return malformed("'meta_info.prompt_tokens' is " + std::to_string(p) + ", " +
                       std::to_string(prompt_.size()) + " were sent");
  }
  if (const Value* c = meta->find("cached_tokens"); c && !c->is_null()) {
    int64_t cached = 0;
    if (!is_int(*c, &cached) || cached < 0)
      return malformed("'meta_info.cached_tokens' is not a count");
    cached_ = cached;
  }
  const size_t have = sglang_ids_.size();
  Update up;
  if (total == int64_t(have + ids.size())) {
    up.tokens = std::move(ids);  // incremental (or the first chunk)
  } else if (total == int64_t(ids.size()) && ids.size() >= have &&
             std::equal(sglang_ids_.begin(), sglang_ids_.end(), ids.begin())) {
    up.tokens.assign(ids.begin() + std::ptrdiff_t(have), ids.end());  // cumulative
  } else {
    return malformed("'output_ids' (" + std::to_string(ids.size()) +
                     " ids) do not extend the output so far (" + std::to_string(have) +
                     " ids) to meta_info.completion_tokens (" + std::to_string(total) + ")");
  }
  if (finished_[0] && !up.tokens.empty()) return malformed("tokens after the request finished");
  sglang_ids_.insert(sglang_ids_.end(), up.tokens.begin(), up.tokens.end());
  if (const Value* f = meta->find("finish_reason"); f && !f->is_null()) {
    const Value* type = f->is_object() ? f->find("type") : nullptr;
    if (type == nullptr || !type->is_string())
      return malformed("'meta_info.finish_reason' is not an object with a 'type'");
    if (type->text == "abort") {
      const Value* m = f->find("message");
      return Status(StatusCode::kIoError,
                    "the upstream aborted the request" +
                        (m && m->is_string() ? ": " + m->text : std::string()));
    }
    if (type->text == "stop")
      up.cause = engine::FinishCause::kEos;
    else if (type->text == "length")
      up.cause = engine::FinishCause::kLength;
    else
      return malformed("meta_info.finish_reason type '" + type->text + "'");
    if (finished_[0]) return malformed("the request finished twice");
    finished_[0] = 1;
  }
  if (!up.tokens.empty() || up.cause != engine::FinishCause::kNone) out->push_back(std::move(up));
  return Status::ok();
}

}  // namespace fathom::router
