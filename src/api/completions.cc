#include "api/completions.h"

#include <algorithm>
#include <cmath>

#include "api/errors.h"
#include "api/logit_controls.h"
#include "api/request_util.h"
#include "api/stop_matcher.h"
#include "core/utf8.h"

namespace fathom::api {

using pyjson::Value;
using namespace detail;

namespace {

Value ids_json(const std::vector<int32_t>& ids) {
  Value a = Value::array();
  for (int32_t t : ids) a.items.push_back(Value::from_int(t));
  return a;
}

Status read_prompt(const Value& r, CompletionsRequest& req) {
  const Value* p = field(r, "prompt");
  if (p == nullptr) return bad("'prompt' is required");
  if (p->is_string()) {
    req.prompt_text = p->text;
  } else if (p->is_array() && !p->items.empty() && p->items[0].kind == Value::Kind::kInt) {
    FATHOM_ASSIGN_OR_RETURN(req.prompt_ids, token_ids(*p, "prompt"));
    req.prompt_is_ids = true;
  } else if (p->is_array() &&
             (p->items.empty() || p->items[0].is_string() || p->items[0].is_array())) {
    // A list of prompts: one is a plain prompt, more are a batch.
    if (p->items.size() != 1)
      return bad("'prompt': batched prompts are not supported; send one prompt per request");
    const Value& only = p->items[0];
    if (only.is_string()) {
      req.prompt_text = only.text;
    } else {
      FATHOM_ASSIGN_OR_RETURN(req.prompt_ids, token_ids(only, "prompt"));
      req.prompt_is_ids = true;
    }
  } else {
    return bad("'prompt' must be a string or a list of token ids");
  }
  if (req.prompt_is_ids ? req.prompt_ids.empty() : req.prompt_text.empty())
    return bad("'prompt' is empty");
  return Status::ok();
}

// Fathom's id-level fields (logprob_ids, reasoning_budget, think_end_id, grammar_after_think).
Status read_id_level_fields(const Value& r, CompletionsRequest& req) {
  if (const Value* v = field(r, "logprob_ids")) {
    if (v->kind == Value::Kind::kBool) return bad("'logprob_ids' must be an integer in [0, 20]");
    FATHOM_ASSIGN_OR_RETURN(int64_t k, integer(*v, "logprob_ids"));
    if (k < 0 || k > 20) return bad("'logprob_ids' must be in [0, 20]");
    if (!req.return_token_ids)
      return bad(
          "'logprob_ids' requires 'return_token_ids' to be true (its entries align with "
          "token_ids)");
    if (req.logprobs) return bad("'logprob_ids' cannot be combined with 'logprobs'");
    req.logprob_ids = int(k);
  }
  if (const Value* v = field(r, "think_end_id")) {
    FATHOM_ASSIGN_OR_RETURN(int64_t t, integer(*v, "think_end_id"));
    if (t < 0 || t > INT32_MAX) return bad("'think_end_id' must be a token id");
    req.think_end_id = int32_t(t);
  }
  if (const Value* v = field(r, "reasoning_budget")) {
    FATHOM_ASSIGN_OR_RETURN(int64_t b, integer(*v, "reasoning_budget"));
    if (b < 0) return bad("'reasoning_budget' must not be negative");
    if (req.think_end_id < 0)
      return bad("'reasoning_budget' requires 'think_end_id' (the id it forces)");
    req.reasoning_budget = b;
  }
  if (const Value* v = field(r, "grammar_after_think")) {
    if (v->kind != Value::Kind::kBool) return bad("'grammar_after_think' must be a boolean");
    req.grammar_after_think = v->boolean;
    if (req.grammar_after_think && req.think_end_id < 0)
      return bad("'grammar_after_think' requires 'think_end_id'");
    if (req.grammar_after_think && !req.structured.active())
      return bad("'grammar_after_think' requires a structured output constraint");
  }
  if (req.think_end_id >= 0 && req.reasoning_budget < 0 && !req.grammar_after_think)
    return bad("'think_end_id' is only used with 'reasoning_budget' or 'grammar_after_think'");
  return Status::ok();
}

// Every top-level field of a Completions request this adapter reads: OpenAI's, vLLM's and
// llama-server's extensions and Fathom's own (the router's), including those it rejects with
// their own message. Any other is a 400.
// clang-format off
constexpr std::string_view kCompletionsFields[] = {
    // OpenAI
    "model", "prompt", "stream", "stream_options", "max_tokens", "n", "best_of", "logprobs",
    "echo", "suffix", "user", "temperature", "top_p", "presence_penalty", "frequency_penalty",
    "seed", "stop", "logit_bias",
    // vLLM
    "top_k", "min_p", "repetition_penalty", "ignore_eos", "return_token_ids", "cache_salt",
    "stop_token_ids", "min_tokens", "bad_words", "allowed_token_ids", "prompt_logprobs",
    "use_beam_search", "truncate_prompt_tokens", "include_stop_str_in_output",
    "skip_special_tokens", "spaces_between_special_tokens", "structured_outputs", "guided_json",
    "guided_regex", "guided_choice", "guided_grammar", "guided_json_object",
    // llama-server
    "grammar", "json_schema",
    // Fathom (the router's among them)
    "retention", "grammar_spec", "resume_output_ids", "sample_index", "logprob_ids",
    "think_end_id", "reasoning_budget", "grammar_after_think", "bad_words_ids"
};
// clang-format on

}  // namespace

Result<CompletionsRequest> parse_completions_request(std::string_view body,
                                                     const CompletionsOptions& opt) {
  FATHOM_ASSIGN_OR_RETURN(const Value r, parse_body_object(body, opt.max_body_bytes));
  FATHOM_RETURN_IF_ERROR(reject_unknown_fields(r, kCompletionsFields, opt.caller_fields));
  CompletionsRequest req;
  if (const Value* m = field(r, "model")) {
    if (!m->is_string()) return bad("'model' must be a string");
    req.model = m->text;
  }
  if (auto m = apply_served_model(opt.models, false, req.model); !m.is_ok()) return m.status();
  FATHOM_RETURN_IF_ERROR(read_prompt(r, req));
  if (const Value* s = field(r, "stream")) {
    if (s->kind != Value::Kind::kBool) return bad("'stream' must be a boolean");
    req.stream = s->boolean;
  }
  FATHOM_RETURN_IF_ERROR(
      read_stream_options(r, req.stream, &req.include_usage, &req.continuous_usage));
  FATHOM_RETURN_IF_ERROR(reject_unimplemented_sampling_extensions(r, /*completions=*/true));
  if (const Value* v = field(r, "skip_special_tokens")) {
    if (v->kind != Value::Kind::kBool) return bad("'skip_special_tokens' must be a boolean");
    req.skip_special_tokens = v->boolean;
  }
  FATHOM_RETURN_IF_ERROR(read_vllm_structured_outputs(r, req.structured));
  FATHOM_RETURN_IF_ERROR(read_llama_structured_outputs(r, req.structured));
  FATHOM_RETURN_IF_ERROR(read_grammar_spec(r, req.structured));
  if (const Value* v = field(r, "echo")) {
    if (v->kind != Value::Kind::kBool) return bad("'echo' must be a boolean");
    req.echo = v->boolean;
  }
  if (const Value* s = field(r, "suffix")) {
    if (!s->is_string()) return bad("'suffix' must be a string");
    if (!s->text.empty()) return bad("'suffix' (insertion) is not supported by this server");
  }
  FATHOM_RETURN_IF_ERROR(optional_string(r, "user"));
  SamplingParams& sp = req.sampling;
  FATHOM_RETURN_IF_ERROR(read_cache_salt(r, sp, {"user"}));
  FATHOM_RETURN_IF_ERROR(read_retention(r, sp));
  FATHOM_RETURN_IF_ERROR(read_temperature_top_p(r, sp));
  FATHOM_RETURN_IF_ERROR(read_min_p_repetition_penalty(r, sp));
  FATHOM_RETURN_IF_ERROR(read_logit_controls(r, sp, {.bad_words_ids = true}));
  FATHOM_RETURN_IF_ERROR(read_truncation_and_stop_inclusion(r, sp));
  sp.max_tokens = 16;
  if (const Value* v = field(r, "max_tokens")) {
    FATHOM_ASSIGN_OR_RETURN(int64_t t, integer(*v, "max_tokens"));
    if (t <= 0) return bad("'max_tokens' must be positive");
    sp.max_tokens = t;
  }
  for (auto [k, dst] :
       {std::pair<const char*, std::optional<double>*>{"presence_penalty", &sp.presence_penalty},
        {"frequency_penalty", &sp.frequency_penalty}}) {
    if (const Value* v = field(r, k)) {
      FATHOM_ASSIGN_OR_RETURN(double t, number(*v, k));
      if (!(t >= -2 && t <= 2)) return bad(std::string("'") + k + "' must be in [-2, 2]");
      *dst = t;
    }
  }
  if (const Value* v = field(r, "seed")) {
    FATHOM_ASSIGN_OR_RETURN(int64_t s, integer(*v, "seed"));
    sp.seed = s;
  }
  if (const Value* v = field(r, "top_k")) {
    FATHOM_ASSIGN_OR_RETURN(int64_t k, integer(*v, "top_k"));
    if (k < -1) return bad("'top_k' must be -1 (off) or at least 0");
    if (k > 0) sp.top_k = k;
  }
  if (const Value* v = field(r, "return_token_ids")) {
    if (v->kind != Value::Kind::kBool) return bad("'return_token_ids' must be a boolean");
    req.return_token_ids = v->boolean;
  }
  if (const Value* v = field(r, "ignore_eos")) {
    if (v->kind != Value::Kind::kBool) return bad("'ignore_eos' must be a boolean");
    sp.ignore_eos = v->boolean;
  }
  FATHOM_RETURN_IF_ERROR(read_stop_field(r, &sp.stop));
  if (const Value* v = field(r, "n")) {
    FATHOM_ASSIGN_OR_RETURN(int64_t n, integer(*v, "n"));
    if (n < 1 || n > 128) return bad("'n' must be in [1, 128]");
    req.n = int(n);
  }
  if (const Value* v = field(r, "best_of")) {
    FATHOM_ASSIGN_OR_RETURN(int64_t b, integer(*v, "best_of"));
    if (b != req.n)
      return bad("'best_of' other than n is not supported by this server (choices are not ranked)");
  }
  if (const Value* v = field(r, "resume_output_ids")) {
    if (!v->is_array()) return bad("'resume_output_ids' must be a list of token ids");
    FATHOM_ASSIGN_OR_RETURN(req.resume_output_ids, token_ids(*v, "resume_output_ids"));
    if (!req.resume_output_ids.empty() && req.n != 1) return bad("'resume_output_ids' needs n = 1");
  }
  if (const Value* v = field(r, "sample_index")) {
    FATHOM_ASSIGN_OR_RETURN(int64_t i, integer(*v, "sample_index"));
    if (i < 0 || i > 127) return bad("'sample_index' must be in [0, 127]");
    if (req.n != 1)
      return bad("'sample_index' needs n = 1 (the choices of n > 1 are numbered by the server)");
    req.sample_index = int(i);
  }
  if (const Value* v = field(r, "logprobs")) {
    if (v->kind == Value::Kind::kBool) return bad("'logprobs' must be an integer in [0, 20]");
    FATHOM_ASSIGN_OR_RETURN(int64_t k, integer(*v, "logprobs"));
    if (k < 0 || k > 20) return bad("'logprobs' must be in [0, 20]");
    req.logprobs = int(k);
  }
  if (const Value* v = field(r, "stop_token_ids")) {
    if (!v->is_array()) return bad("'stop_token_ids' must be a list of token ids");
    FATHOM_ASSIGN_OR_RETURN(req.stop_token_ids, token_ids(*v, "stop_token_ids"));
  }
  FATHOM_RETURN_IF_ERROR(read_id_level_fields(r, req));
  if (req.echo && (req.logprobs || req.logprob_ids >= 0))
    return bad(
        "'echo' with logprobs needs the prompt's log probabilities, which this server "
        "does not compute");
  if (req.echo && !req.resume_output_ids.empty())
    return bad("'echo' cannot be combined with 'resume_output_ids'");
  return req;
}

// ---- output ---------------------------------------------------------------------------

namespace {

const char* finish_name(prompt::FinishReason r) {
  return r == prompt::FinishReason::kLength ? "length" : "stop";
}

Value usage_json(const Usage& u) {
  Value v = Value::object(), details = Value::object();
  v.set("prompt_tokens", Value::from_int(u.prompt_tokens));
  v.set("completion_tokens", Value::from_int(u.completion_tokens));
  v.set("total_tokens", Value::from_int(u.prompt_tokens + u.completion_tokens));
  details.set("cached_tokens", Value::from_int(u.cached_tokens));
  v.set("prompt_tokens_details", details);
  return v;
}

Value logprob_value(float lp) { return Value::from_float(std::isfinite(lp) ? lp : -9999.0); }

// Characters (code points) a token's bytes start: every byte that is not a UTF-8 continuation.
int64_t char_count(const std::string& bytes) {
  int64_t n = 0;
  for (unsigned char c : bytes) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace

Value CompletionsResponder::logprobs_json(const std::vector<TokenLogprob>& tokens,
                                          int64_t* offset) const {
  if (!choice_.logprobs) return Value();
  Value toks = Value::array(), lps = Value::array(), tops = Value::array(),
        offsets = Value::array();
  for (const TokenLogprob& t : tokens) {
    toks.items.push_back(Value::from_string(utf8::to_lossy(t.token)));
    lps.items.push_back(logprob_value(t.logprob));
    Value top = Value::object();
    for (const auto& [tok, lp] : t.top) top.set(utf8::to_lossy(tok), logprob_value(lp));
    tops.items.push_back(std::move(top));
    offsets.items.push_back(Value::from_int(*offset));
    *offset += char_count(t.token);
  }
  Value v = Value::object();
  v.set("tokens", std::move(toks));
  v.set("token_logprobs", std::move(lps));
  v.set("top_logprobs", std::move(tops));
  v.set("text_offset", std::move(offsets));
  return v;
}

Value CompletionsResponder::choice_json(const std::string& text, const Value& logprobs,
                                        const char* finish_reason) const {
  Value c = Value::object();
  c.set("index", Value::from_int(choice_.index));
  c.set("text", Value::from_string(text));
  c.set("logprobs", logprobs);
  c.set("finish_reason", finish_reason ? Value::from_string(finish_reason) : Value());
  return c;
}

std::string CompletionsResponder::chunk(Value choice) const {
  Value c = response_head(id_, "text_completion", created_, model_);
  Value choices = Value::array();
  choices.items.push_back(std::move(choice));
  c.set("choices", std::move(choices));
  if (choice_.include_usage)
    c.set("usage", choice_.continuous_usage ? usage_json(live_usage_) : Value());
  return "data: " + pyjson::dumps(c, false, true) + "\n\n";
}

void CompletionsResponder::set_token_ids(Value& c, const std::vector<int32_t>& ids,
                                         const std::vector<IdLogprob>& lps,
                                         bool with_prompt) const {
  c.set("prompt_token_ids",
        with_prompt && choice_.prompt_ids ? ids_json(*choice_.prompt_ids) : Value());
  c.set("token_ids", ids_json(ids));
  if (!choice_.logprob_ids) return;
  Value a = Value::array();
  auto lp = [](float x) { return std::isfinite(x) ? Value::from_float(x) : Value(); };
  for (const IdLogprob& l : lps) {
    Value e = Value::object(), top = Value::array();
    e.set("id", Value::from_int(l.id));
    e.set("logprob", lp(l.logprob));
    for (const auto& [id, p] : l.top) {
      Value pair = Value::array();
      pair.items.push_back(Value::from_int(id));
      pair.items.push_back(lp(p));
      top.items.push_back(std::move(pair));
    }
    e.set("top", std::move(top));
    a.items.push_back(std::move(e));
  }
  c.set("logprob_ids", std::move(a));
}

void CompletionsResponder::add_token_ids(const std::vector<int32_t>& ids) {
  if (!choice_.token_ids) return;
  pending_ids_.insert(pending_ids_.end(), ids.begin(), ids.end());
  token_ids_.insert(token_ids_.end(), ids.begin(), ids.end());
}

void CompletionsResponder::add_logprob_ids(std::vector<IdLogprob> lps) {
  if (!choice_.logprob_ids) return;
  lp_ids_.insert(lp_ids_.end(), lps.begin(), lps.end());
  pending_lp_ids_.insert(pending_lp_ids_.end(), std::make_move_iterator(lps.begin()),
                         std::make_move_iterator(lps.end()));
}

std::string CompletionsResponder::stream(const std::string& text,
                                         const std::vector<TokenLogprob>& logprobs) {
  if (choice_.logprobs) pending_.insert(pending_.end(), logprobs.begin(), logprobs.end());
  if (text.empty()) return "";
  Value lp = logprobs_json(pending_, &stream_offset_);
  pending_.clear();
  Value c = choice_json(text, lp, nullptr);
  if (choice_.token_ids) {
    set_token_ids(c, pending_ids_, pending_lp_ids_, !prompt_ids_sent_);
    prompt_ids_sent_ = true;
    pending_ids_.clear();
    pending_lp_ids_.clear();
  }
  return chunk(std::move(c));
}

std::string CompletionsResponder::stream_finish(prompt::FinishReason reason, const Usage& usage) {
  finish_ = reason;
  finished_ = true;
  pending_.clear();
  Value c = choice_json("", Value(), finish_name(reason));
  if (choice_.token_ids) {
    set_token_ids(c, pending_ids_, pending_lp_ids_, !prompt_ids_sent_);
    prompt_ids_sent_ = true;
    pending_ids_.clear();
    pending_lp_ids_.clear();
  }
  std::string out = chunk(std::move(c));
  if (choice_.n == 1) out += stream_tail(usage);
  return out;
}

std::string CompletionsResponder::stream_tail(const Usage& total) const {
  std::string out;
  if (choice_.include_usage) {
    Value c = response_head(id_, "text_completion", created_, model_);
    c.set("choices", Value::array());
    c.set("usage", usage_json(total));
    out += "data: " + pyjson::dumps(c, false, true) + "\n\n";
  }
  return out + "data: [DONE]\n\n";
}

std::string CompletionsResponder::stream_error(const Status& s) const {
  return openai_stream_error(s);
}

void CompletionsResponder::add(const std::string& text, const std::vector<TokenLogprob>& logprobs) {
  text_ += text;
  if (choice_.logprobs) logprobs_.insert(logprobs_.end(), logprobs.begin(), logprobs.end());
}

void CompletionsResponder::finish(prompt::FinishReason reason) {
  finish_ = reason;
  finished_ = true;
}

std::string completion_json(const std::vector<CompletionsResponder>& choices, const Usage& usage) {
  const std::vector<const CompletionsResponder*> sorted = by_index(choices);
  const CompletionsResponder& first = *sorted.front();
  Value r = response_head(first.id_, "text_completion", first.created_, first.model_);
  Value out = Value::array();
  for (const CompletionsResponder* c : sorted) {
    int64_t offset = 0;
    Value choice =
        c->choice_json(c->text_, c->logprobs_json(c->logprobs_, &offset),
                       finish_name(c->finished_ ? c->finish_ : prompt::FinishReason::kStop));
    if (c->choice_.token_ids) c->set_token_ids(choice, c->token_ids_, c->lp_ids_, true);
    out.items.push_back(std::move(choice));
  }
  r.set("choices", std::move(out));
  r.set("usage", usage_json(usage));
  return pyjson::dumps(r, false, true);
}

std::string CompletionsResponder::complete(const Usage& usage) const {
  return completion_json({*this}, usage);
}

}  // namespace fathom::api
