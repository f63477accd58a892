#include "router/upstream.h"

#include <algorithm>
#include <cstdio>

#include <cmath>
#include <limits>

#include "api/structured_output.h"
#include "core/py_json.h"
#include "kv/prefix_cache.h"
#include "router/http_client.h"

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
  if (!g.logit_bias.empty()) {
    Value bias = Value::object();
    // Unique ids (prepare_logit_controls): appended, not set() (a search per key).
    bias.keys.reserve(g.logit_bias.size());
    bias.items.reserve(g.logit_bias.size());
    for (const auto& [id, v] : g.logit_bias) {
      bias.keys.push_back(std::to_string(id));
      bias.items.push_back(Value::from_float(v));
    }
    b.set("logit_bias", std::move(bias));
  }
}

// The logits controls an upstream takes as vLLM spells them (all but logit_bias, which
// set_sampling writes): min_tokens counts what the continuation has not yet generated.
void set_vllm_controls(Value& b, const engine::GenerationRequest& g, std::span<const int32_t> sofar,
                       bool resumes) {
  if (!g.allowed_token_ids.empty()) b.set("allowed_token_ids", id_list(g.allowed_token_ids));
  const int64_t min_tokens = resumes ? g.min_tokens : g.min_tokens - int64_t(sofar.size());
  if (min_tokens > 0) b.set("min_tokens", Value::from_int(min_tokens));
}

using GKind = grammar::GrammarSpec::Kind;

// A string literal of SGLang's EBNF (XGrammar's): quotes, backslashes and control bytes escaped.
std::string ebnf_literal(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

// vLLM's structured_outputs object (StructuredOutputsParams) for a spec other than dsml.
Value vllm_structured_outputs(const grammar::GrammarSpec& spec) {
  Value so = Value::object();
  switch (spec.kind) {
    case GKind::kJsonSchema: {
      auto schema = pyjson::parse(spec.text);
      so.set("json", schema.is_ok() ? std::move(*schema) : Value::from_string(spec.text));
      if (spec.json.whitespace == grammar::JsonSchemaOptions::Whitespace::kCompact)
        so.set("disable_any_whitespace", Value::from_bool(true));
      if (spec.json.strict_additional_properties)
        so.set("disable_additional_properties", Value::from_bool(true));
      break;
    }
    case GKind::kRegex:
      so.set("regex", Value::from_string(spec.text));
      break;
    case GKind::kChoice: {
      Value c = Value::array();
      for (const std::string& x : spec.choices) c.items.push_back(Value::from_string(x));
      so.set("choice", std::move(c));
      break;
    }
    case GKind::kGbnf:
      so.set("grammar", Value::from_string(spec.text));
      break;
    case GKind::kDsml:  // check_upstream_supports refused it
      break;
  }
  return so;
}

// SGLang's constraint in sampling_params (one of json_schema, regex, ebnf).
void set_sglang_constraint(Value& sp, const grammar::GrammarSpec& spec) {
  switch (spec.kind) {
    case GKind::kJsonSchema:
      sp.set("json_schema", Value::from_string(spec.text));
      break;
    case GKind::kRegex:
      sp.set("regex", Value::from_string(spec.text));
      break;
    case GKind::kGbnf:
      sp.set("ebnf", Value::from_string(spec.text));
      break;
    case GKind::kChoice: {
      std::string g = "root ::= ";
      for (size_t i = 0; i < spec.choices.size(); ++i)
        g += (i ? " | " : "") + ebnf_literal(spec.choices[i]);
      sp.set("ebnf", Value::from_string(g));
      break;
    }
    case GKind::kDsml:  // check_upstream_supports refused it
      break;
  }
}

Status malformed(std::string what) {
  return Status(StatusCode::kCorrupt, "malformed upstream answer: " + std::move(what));
}

std::string event_error_message(const Value& v) {
  std::string m = error_message_of(v);
  return m.empty() ? "an error event without a message" : m;
}

// An error event that says the request was at fault (OpenAI's and Fathom's
// invalid_request_error, vLLM's BadRequestError or code 400), as a replica's engine reports a
// request it fails mid-stream for its own parameters. SGLang's {"error": {"message"}} does
// not say: a replica's fault.
bool client_fault_event(const Value& v) {
  const Value* e = v.find("error");
  const Value& o = e && e->is_object() ? *e : v;
  const Value* type = o.find("type");
  if (type && type->is_string() &&
      (type->text == "invalid_request_error" || type->text == "BadRequestError"))
    return true;
  const Value* code = o.find("code");
  int64_t c = 0;
  return code && code->kind == Value::Kind::kInt && code->int_fits_int64(&c) && c == 400;
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

Status check_upstream_supports(UpstreamKind kind, const engine::GenerationRequest& g, int n) {
  if (kind == UpstreamKind::kSglang && n > 1)
    return unsupported("'n': more than one choice is not supported through an sglang upstream");
  if (g.grammar && !g.grammar_spec)
    return unsupported(
        "structured outputs: this request's grammar has no source to send to a replica");
  const char* name = kind == UpstreamKind::kVllm ? "vllm" : "sglang";
  if (kind != UpstreamKind::kFathom && g.grammar_spec && g.grammar_spec->kind == GKind::kDsml)
    return unsupported(std::string("'tools': strict tools (a grammar over the tool-call block) "
                                   "are not supported through a ") +
                       name + " upstream");
  if (kind == UpstreamKind::kSglang && g.reasoning_budget >= 0 && g.think_end_id >= 0)
    return unsupported(
        "'thinking.budget_tokens': a reasoning budget is not supported through an sglang "
        "upstream");
  if (kind == UpstreamKind::kSglang && !g.allowed_token_ids.empty())
    return unsupported("'allowed_token_ids' is not supported through an sglang upstream");
  if (kind == UpstreamKind::kSglang && !g.bad_words.empty())
    return unsupported("'bad_words' is not supported through an sglang upstream");
  if (kind == UpstreamKind::kVllm && g.bad_words_from_ids > 0)
    return unsupported(
        "'bad_words_ids' is not supported through a vllm upstream (it takes bad_words)");
  if (kind != UpstreamKind::kFathom && g.sample_index != 0)
    return unsupported(std::string("'sample_index' is not supported through a ") + name +
                       " upstream (it has no field that selects a sample's random numbers)");
  return Status::ok();
}

UpstreamCall build_upstream_call(UpstreamKind kind, const engine::GenerationRequest& g, int n,
                                 std::span<const int32_t> sofar, const std::string& retention,
                                 const std::string& request_id, int choice) {
  UpstreamCall call;
  Value b = Value::object();
  const int64_t left = g.max_tokens - int64_t(sofar.size());
  // One choice of the n (a request of its own), or all of them.
  const int samples = choice >= 0 ? 1 : n;
  // The choice whose random numbers a single-sample attempt draws (fathom's sample_index): the
  // choice continued, or a single-sample request's own (a client's sample_index).
  const int sample_index = n == 1 ? g.sample_index : std::max(choice, 0);
  switch (kind) {
    case UpstreamKind::kFathom:
      call.path = "/v1/completions";
      b.set("prompt", id_list(g.prompt));
      // A continuation: the replica recomputes the output so far as its own decode steps.
      if (!sofar.empty()) b.set("resume_output_ids", id_list(sofar));
      b.set("max_tokens", Value::from_int(g.max_tokens));
      set_sampling(b, g);
      if (g.seeded) b.set("seed", Value::from_int(int64_t(g.sampling.seed)));
      if (samples > 1) b.set("n", Value::from_int(samples));
      if (sample_index != 0) b.set("sample_index", Value::from_int(sample_index));
      if (g.cache_salt != 0) b.set("cache_salt", Value::from_string(salt_name(g.cache_salt)));
      b.set("retention", Value::from_string(retention));
      // The id-level features, computed by the replica as it would alone (README).
      if (!g.stop_ids.empty()) b.set("stop_token_ids", id_list(g.stop_ids));
      set_vllm_controls(b, g, sofar, /*resumes=*/true);
      if (!g.bad_words.empty()) {
        Value words = Value::array();
        for (const std::vector<int32_t>& w : g.bad_words) words.items.push_back(id_list(w));
        b.set("bad_words_ids", std::move(words));
      }
      if (g.top_logprobs >= 0) b.set("logprob_ids", Value::from_int(g.top_logprobs));
      if (g.think_end_id >= 0 &&
          (g.reasoning_budget >= 0 || (g.grammar_spec && g.grammar_after_think))) {
        b.set("think_end_id", Value::from_int(g.think_end_id));
        if (g.reasoning_budget >= 0) b.set("reasoning_budget", Value::from_int(g.reasoning_budget));
      }
      if (g.grammar_spec) {
        b.set("grammar_spec", api::grammar_spec_json(*g.grammar_spec));
        if (g.grammar_after_think && g.think_end_id >= 0)
          b.set("grammar_after_think", Value::from_bool(true));
      }
      break;
    case UpstreamKind::kVllm:
      call.path = "/v1/completions";
      // A continuation: the output so far goes on the prompt (vLLM has no resume field).
      b.set("prompt", id_list(g.prompt, sofar));
      b.set("max_tokens", Value::from_int(left));
      set_sampling(b, g);
      // One choice continued alone keeps the request's seed: vLLM cannot select a sample's
      // random numbers (the header comment).
      if (g.seeded) b.set("seed", Value::from_int(int64_t(g.sampling.seed)));
      if (samples > 1) b.set("n", Value::from_int(samples));
      // vLLM >= 0.9 salts its prefix-cache hashes with it, as Fathom does.
      if (g.cache_salt != 0) b.set("cache_salt", Value::from_string(salt_name(g.cache_salt)));
      if (!g.stop_ids.empty()) b.set("stop_token_ids", id_list(g.stop_ids));
      set_vllm_controls(b, g, sofar, /*resumes=*/false);
      if (!g.bad_words_text.empty()) {
        Value words = Value::array();
        for (const std::string& w : g.bad_words_text) words.items.push_back(Value::from_string(w));
        b.set("bad_words", std::move(words));
      }
      if (g.top_logprobs >= 0) {
        b.set("logprobs", Value::from_int(g.top_logprobs));
        b.set("return_tokens_as_token_ids", Value::from_bool(true));  // "token_id:N", no text
      }
      if (g.reasoning_budget >= 0 && g.think_end_id >= 0) {
        // The budget left: the reasoning so far is on the prompt of a continuation.
        int64_t thought = 0;
        for (int32_t t : sofar) {
          if (t == g.think_end_id) break;
          ++thought;
        }
        b.set("thinking_token_budget",
              Value::from_int(std::max<int64_t>(0, g.reasoning_budget - thought)));
      }
      if (g.grammar_spec) b.set("structured_outputs", vllm_structured_outputs(*g.grammar_spec));
      break;
    case UpstreamKind::kSglang: {
      call.path = "/generate";
      b.set("input_ids", id_list(g.prompt, sofar));
      Value sp = Value::object();
      sp.set("max_new_tokens", Value::from_int(left));
      set_sampling(sp, g);
      if (g.seeded) sp.set("sampling_seed", Value::from_int(int64_t(g.sampling.seed)));
      if (!g.stop_ids.empty()) sp.set("stop_token_ids", id_list(g.stop_ids));
      if (g.min_tokens > int64_t(sofar.size()))
        sp.set("min_new_tokens", Value::from_int(g.min_tokens - int64_t(sofar.size())));
      if (g.grammar_spec) set_sglang_constraint(sp, *g.grammar_spec);
      b.set("sampling_params", std::move(sp));
      if (g.top_logprobs >= 0) {
        b.set("return_logprob", Value::from_bool(true));
        b.set("top_logprobs_num", Value::from_int(g.top_logprobs));
      }
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
                                           std::span<const int32_t> prompt, int top_logprobs)
    : kind_(kind),
      n_(n),
      top_logprobs_(top_logprobs),
      vocab_(vocab_size),
      prompt_(prompt),
      finished_(size_t(n), 0) {}

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

// A token id inside the vocabulary.
bool read_id(const Value& v, int64_t vocab, int32_t* out) {
  int64_t t = 0;
  if (!is_int(v, &t) || t < 0 || t >= vocab) return false;
  *out = int32_t(t);
  return true;
}

// A log probability: a number (at or below -9999, the upstreams' stand-in for -inf: -inf), or
// null (-inf).
bool read_logprob(const Value& v, float* out) {
  double d = 0;
  int64_t i = 0;
  if (v.is_null()) {
    d = -INFINITY;
  } else if (v.kind == Value::Kind::kFloat) {
    d = v.number;
  } else if (is_int(v, &i)) {
    d = double(i);
  } else {
    return false;
  }
  if (std::isnan(d) || d == INFINITY) return false;
  *out = d <= -9999 ? -INFINITY : float(d);
  return true;
}

}  // namespace

Status UpstreamStreamReader::read_fathom_logprobs(const Value* v, Update& up) const {
  if (v == nullptr || !v->is_array()) return malformed("'logprob_ids' is not a list");
  if (v->items.size() != up.tokens.size())
    return malformed("'logprob_ids' has " + std::to_string(v->items.size()) + " entries for " +
                     std::to_string(up.tokens.size()) + " token ids");
  for (size_t k = 0; k < up.tokens.size(); ++k) {
    const Value& e = v->items[k];
    engine::TokenLogprob& l = up.logprobs.emplace_back();
    const Value* id = e.is_object() ? e.find("id") : nullptr;
    const Value* lp = e.is_object() ? e.find("logprob") : nullptr;
    const Value* top = e.is_object() ? e.find("top") : nullptr;
    if (id == nullptr || !read_id(*id, vocab_, &l.token) || l.token != up.tokens[k])
      return malformed("a 'logprob_ids' entry whose id is not its token's");
    if (lp == nullptr || !read_logprob(*lp, &l.logprob))
      return malformed("a 'logprob_ids' entry without a log probability");
    if (top == nullptr || !top->is_array() || int64_t(top->items.size()) > top_logprobs_)
      return malformed("a 'logprob_ids' entry whose 'top' is not a list of at most " +
                       std::to_string(top_logprobs_) + " alternatives");
    for (const Value& t : top->items) {
      auto& [tid, tlp] = l.top[size_t(l.top_count)];
      if (!t.is_array() || t.items.size() != 2 || !read_id(t.items[0], vocab_, &tid) ||
          !read_logprob(t.items[1], &tlp))
        return malformed("a 'logprob_ids' alternative that is not [id, logprob]");
      ++l.top_count;
    }
  }
  return Status::ok();
}

namespace {

// vLLM's "token_id:N" (return_tokens_as_token_ids).
bool read_token_id_string(const std::string& s, int64_t vocab, int32_t* out) {
  constexpr std::string_view kPrefix = "token_id:";
  if (s.size() <= kPrefix.size() || s.compare(0, kPrefix.size(), kPrefix) != 0 ||
      s.size() > kPrefix.size() + 10)
    return false;
  int64_t t = 0;
  for (size_t i = kPrefix.size(); i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    t = t * 10 + (s[i] - '0');
  }
  if (t >= vocab) return false;
  *out = int32_t(t);
  return true;
}

}  // namespace

Status UpstreamStreamReader::read_vllm_logprobs(const Value* v, Update& up) const {
  if (v == nullptr || !v->is_object()) return malformed("'logprobs' is not an object");
  const Value* toks = v->find("tokens");
  const Value* lps = v->find("token_logprobs");
  const Value* tops = v->find("top_logprobs");
  const size_t n = up.tokens.size();
  if (toks == nullptr || !toks->is_array() || toks->items.size() != n || lps == nullptr ||
      !lps->is_array() || lps->items.size() != n)
    return malformed("'logprobs.tokens' / 'logprobs.token_logprobs' do not match token_ids");
  if (top_logprobs_ > 0 && (tops == nullptr || !tops->is_array() || tops->items.size() != n))
    return malformed("'logprobs.top_logprobs' does not match token_ids");
  for (size_t k = 0; k < n; ++k) {
    engine::TokenLogprob& l = up.logprobs.emplace_back();
    const Value& t = toks->items[k];
    if (!t.is_string() || !read_token_id_string(t.text, vocab_, &l.token) ||
        l.token != up.tokens[k])
      return malformed(
          "'logprobs.tokens' entry is not \"token_id:<its id>\" (send "
          "return_tokens_as_token_ids)");
    if (!read_logprob(lps->items[k], &l.logprob))
      return malformed("'logprobs.token_logprobs' holds a non-number");
    if (top_logprobs_ <= 0) continue;
    const Value& top = tops->items[k];
    if (top.is_null()) continue;
    if (!top.is_object() || int64_t(top.items.size()) > top_logprobs_ + 1)
      return malformed("'logprobs.top_logprobs' entry is not an object of at most " +
                       std::to_string(top_logprobs_ + 1) + " tokens");
    // vLLM lists the K most likely and the sampled token (K + 1 at most): most likely first,
    // the K first kept (the sampled one, when it is not among them, is the least likely).
    std::vector<std::pair<int32_t, float>> all;
    for (size_t j = 0; j < top.keys.size(); ++j) {
      std::pair<int32_t, float> e;
      if (!read_token_id_string(top.keys[j], vocab_, &e.first) ||
          !read_logprob(top.items[j], &e.second))
        return malformed("'logprobs.top_logprobs' entry is not {\"token_id:<id>\": logprob}");
      all.push_back(e);
    }
    std::stable_sort(all.begin(), all.end(),
                     [](const auto& a, const auto& b) { return a.second > b.second; });
    for (size_t j = 0; j < all.size() && int64_t(j) < top_logprobs_; ++j)
      l.top[size_t(l.top_count++)] = all[j];
  }
  return Status::ok();
}

Status UpstreamStreamReader::read_sglang_logprobs(const Value& meta, size_t from,
                                                  Update& up) const {
  const Value* lps = meta.find("output_token_logprobs");
  const Value* tops = meta.find("output_top_logprobs");
  const size_t n = up.tokens.size();
  if (lps == nullptr || !lps->is_array() || lps->items.size() < from + n)
    return malformed("'meta_info.output_token_logprobs' does not cover output_ids");
  if (top_logprobs_ > 0 && (tops == nullptr || !tops->is_array() || tops->items.size() < from + n))
    return malformed("'meta_info.output_top_logprobs' does not cover output_ids");
  // [logprob, token_id, text or null]
  auto entry = [&](const Value& e, int32_t* id, float* lp) {
    return e.is_array() && e.items.size() == 3 && read_logprob(e.items[0], lp) &&
           read_id(e.items[1], vocab_, id);
  };
  for (size_t k = 0; k < n; ++k) {
    engine::TokenLogprob& l = up.logprobs.emplace_back();
    if (!entry(lps->items[from + k], &l.token, &l.logprob) || l.token != up.tokens[k])
      return malformed("'meta_info.output_token_logprobs' entry is not [logprob, its id, text]");
    if (top_logprobs_ <= 0) continue;
    const Value& top = tops->items[from + k];
    if (top.is_null()) continue;
    if (!top.is_array() || int64_t(top.items.size()) > top_logprobs_)
      return malformed("'meta_info.output_top_logprobs' entry is not a list of at most " +
                       std::to_string(top_logprobs_) + " [logprob, id, text]");
    for (const Value& e : top.items) {
      auto& [tid, tlp] = l.top[size_t(l.top_count)];
      if (!entry(e, &tid, &tlp))
        return malformed("'meta_info.output_top_logprobs' entry is not [logprob, id, text]");
      ++l.top_count;
    }
  }
  return Status::ok();
}

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
  if (is_error_event(*v))
    return Status(client_fault_event(*v) ? StatusCode::kInvalidArgument : StatusCode::kIoError,
                  event_error_message(*v));
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
    if (top_logprobs_ >= 0 && !up.tokens.empty()) {
      if (kind_ == UpstreamKind::kFathom)
        FATHOM_RETURN_IF_ERROR(read_fathom_logprobs(ch.find("logprob_ids"), up));
      else
        FATHOM_RETURN_IF_ERROR(read_vllm_logprobs(ch.find("logprobs"), up));
    }
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
  size_t from = 0;  // where the new ids start in this object's lists
  if (total == int64_t(have + ids.size())) {
    up.tokens = std::move(ids);  // incremental (or the first chunk)
  } else if (total == int64_t(ids.size()) && ids.size() >= have &&
             std::equal(sglang_ids_.begin(), sglang_ids_.end(), ids.begin())) {
    up.tokens.assign(ids.begin() + std::ptrdiff_t(have), ids.end());  // cumulative
    from = have;
  } else {
    return malformed("'output_ids' (" + std::to_string(ids.size()) +
                     " ids) do not extend the output so far (" + std::to_string(have) +
                     " ids) to meta_info.completion_tokens (" + std::to_string(total) + ")");
  }
  if (finished_[0] && !up.tokens.empty()) return malformed("tokens after the request finished");
  // The logprob lists are cumulative or incremental as output_ids are.
  if (top_logprobs_ >= 0 && !up.tokens.empty())
    FATHOM_RETURN_IF_ERROR(read_sglang_logprobs(*meta, from, up));
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
