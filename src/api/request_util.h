// Internal: small helpers the protocol adapters share (typed field access with
// client-facing errors, the shared validation rules). Not a public header.
#pragma once

#include <algorithm>
#include <cctype>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "api/conversation.h"
#include "api/models.h"
#include "core/py_json.h"
#include "core/status.h"

namespace fathom::api::detail {

using pyjson::Value;

inline Status bad(std::string m) { return invalid_argument(std::move(m)); }

inline const Value* field(const Value& o, std::string_view k) {
  const Value* v = o.find(k);
  return v == nullptr || v->is_null() ? nullptr : v;
}

// The request body as a JSON object: at most max_body_bytes, strict JSON (no NaN literals),
// nesting at most 128 deep.
inline Result<Value> parse_body_object(std::string_view body, size_t max_body_bytes) {
  if (body.size() > max_body_bytes)
    return bad("request body is larger than " + std::to_string(max_body_bytes) + " bytes");
  auto parsed = pyjson::parse(body, {.max_depth = 128, .allow_nan = false});
  if (!parsed.is_ok()) return bad("request body is not valid JSON: " + parsed.status().message());
  if (!parsed->is_object()) return bad("request body must be a JSON object");
  return std::move(*parsed);
}

// The 400 for a member `path` that the protocol does not define: OpenAI's wording
// (Unrecognized request argument supplied) with the path as the error's `param`, or
// Anthropic's (Extra inputs are not permitted). A path longer than 64 bytes is shown cut at a
// character boundary.
inline Status unknown_field_error(const std::string& path, bool anthropic) {
  std::string name = path;
  if (name.size() > 64) {
    size_t cut = 64;
    while (cut > 0 && (static_cast<unsigned char>(name[cut]) & 0xC0) == 0x80) --cut;
    name = name.substr(0, cut) + "...";
  }
  if (anthropic) return bad(name + ": Extra inputs are not permitted");
  // The message starts with the quoted name only when the quotes delimit it (errors.h reads
  // `param` from them).
  const std::string what = "Unrecognized request argument supplied: " + name;
  if (name.find('\'') != std::string::npos || name != path)
    return bad("a field is not a parameter of this API (" + what + ")");
  return bad("'" + name + "' is not a parameter of this API (" + what + ")");
}

// A member of the request object that the protocol does not define (not one of `known` or
// `also_known`), whatever its value: a 400 naming it, as OpenAI's and Anthropic's APIs answer,
// so a misspelt or unimplemented parameter is never silently dropped (and the members an
// adapter looks through stay few).
inline Status reject_unknown_fields(const Value& r, std::span<const std::string_view> known,
                                    std::span<const std::string_view> also_known,
                                    bool anthropic = false) {
  auto in = [](std::span<const std::string_view> names, const std::string& k) {
    return std::find(names.begin(), names.end(), k) != names.end();
  };
  for (const std::string& k : r.keys)
    if (!in(known, k) && !in(also_known, k)) return unknown_field_error(k, anthropic);
  return Status::ok();
}

// The same for a nested parameter object at `where` (e.g. "stream_options", "tools[2]" or
// Anthropic's "tools.2"): a member not in `known` is a 400 naming "where.member". REQUIRES:
// obj is an object.
inline Status reject_unknown_members(const Value& obj, const std::string& where,
                                     std::initializer_list<std::string_view> known,
                                     bool anthropic = false) {
  for (const std::string& k : obj.keys)
    if (std::find(known.begin(), known.end(), k) == known.end())
      return unknown_field_error(where + "." + k, anthropic);
  return Status::ok();
}

// OpenAI's stream_options (Chat and Completions): include_usage sets *include_usage; vLLM's
// continuous_usage_stats sets *continuous_usage (every chunk then carries the choice's usage
// so far; only with include_usage, as vLLM); include_obfuscation false is what this server
// does (no padding field in the chunks), true is a 400; any other member is a 400 naming it.
inline Status read_stream_options(const Value& r, bool stream, bool* include_usage,
                                  bool* continuous_usage) {
  const Value* so = field(r, "stream_options");
  if (so == nullptr) return Status::ok();
  if (!stream) return bad("'stream_options' is only allowed with stream=true");
  if (!so->is_object()) return bad("'stream_options' must be an object");
  FATHOM_RETURN_IF_ERROR(reject_unknown_members(
      *so, "stream_options", {"include_usage", "include_obfuscation", "continuous_usage_stats"}));
  if (const Value* iu = field(*so, "include_usage")) {
    if (iu->kind != Value::Kind::kBool)
      return bad("'stream_options.include_usage' must be a boolean");
    *include_usage = iu->boolean;
  }
  if (const Value* cu = field(*so, "continuous_usage_stats"); cu && !cu->is_null()) {
    if (cu->kind != Value::Kind::kBool)
      return bad("'stream_options.continuous_usage_stats' must be a boolean");
    *continuous_usage = cu->boolean && *include_usage;
  }
  if (const Value* ob = field(*so, "include_obfuscation")) {
    if (ob->kind != Value::Kind::kBool)
      return bad("'stream_options.include_obfuscation' must be a boolean");
    if (ob->boolean)
      return bad(
          "'stream_options.include_obfuscation' true is not supported by this server "
          "(its chunks carry no obfuscation padding)");
  }
  return Status::ok();
}

// The fields an OpenAI response or chunk opens with: {"id", "object", "created", "model"}.
inline Value response_head(const std::string& id, const char* object, int64_t created,
                           const std::string& model) {
  Value v = Value::object();
  v.set("id", Value::from_string(id));
  v.set("object", Value::from_string(object));
  v.set("created", Value::from_int(created));
  v.set("model", Value::from_string(model));
  return v;
}

// A response's choice responders in index order. REQUIRES: R has index().
template <typename R>
std::vector<const R*> by_index(const std::vector<R>& choices) {
  std::vector<const R*> sorted;
  for (const R& c : choices) sorted.push_back(&c);
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const R* a, const R* b) { return a->index() < b->index(); });
  return sorted;
}

// The OpenAI protocols' 'model' and 'stream' fields.
inline Status read_model_and_stream(const Value& r, ConversationRequest& req) {
  if (const Value* m = field(r, "model")) {
    if (!m->is_string()) return bad("'model' must be a string");
    req.model = m->text;
  }
  if (const Value* s = field(r, "stream")) {
    if (s->kind != Value::Kind::kBool) return bad("'stream' must be a boolean");
    req.stream = s->boolean;
  }
  return Status::ok();
}

// Resolves a request's model against the served models (when the server gave a list): the
// resolved name replaces `model`, and its default thinking mode is returned; `fallback`
// without a list.
inline Result<bool> apply_served_model(const std::vector<ServedModel>* models, bool fallback,
                                       std::string& model) {
  if (models == nullptr) return fallback;
  FATHOM_ASSIGN_OR_RETURN(const ServedModel* m, resolve_model(*models, model));
  model = m->name;
  return m->default_thinking;
}

// Fields this build does not implement: any that is present (not null) is a 400 naming it, in
// the OpenAI wording ('name' is not supported) or Anthropic's (name: not supported).
inline Status reject_fields(const Value& r, std::initializer_list<std::string_view> names,
                            bool anthropic = false) {
  for (std::string_view n : names) {
    if (field(r, n) == nullptr) continue;
    return bad(anthropic ? std::string(n) + ": not supported by this server"
                         : "'" + std::string(n) + "' is not supported by this server");
  }
  return Status::ok();
}

// A boolean field that is only implemented at one value (e.g. parallel_tool_calls: true).
inline Status require_bool(const Value& r, std::string_view name, bool supported,
                           bool anthropic = false) {
  const Value* v = field(r, name);
  if (v == nullptr) return Status::ok();
  std::string q = anthropic ? std::string(name) + ": " : "'" + std::string(name) + "' ";
  if (v->kind != Value::Kind::kBool) return bad(q + "must be a boolean");
  if (v->boolean != supported)
    return bad(q + (supported ? "false" : "true") + " is not supported by this server");
  return Status::ok();
}

// A function tool's `strict: true` asks for arguments guaranteed to match the schema, which
// needs the DSML tool-call block constrained by a grammar (not done: structured outputs cover
// the answer text only): a 400 at `path` rather than a promise silently not kept. strict false
// or absent is fine.
// A tool's `strict` flag (a boolean): true adds the tool's name to req.strict_tools (the server
// then constrains the call's arguments to the tool's schema).
inline Status read_strict_tool(const Value& tool, const std::string& path, const std::string& name,
                               ConversationRequest& req) {
  const Value* s = field(tool, "strict");
  if (s == nullptr || s->is_null()) return Status::ok();
  if (s->kind != Value::Kind::kBool) return bad(path + ": must be a boolean");
  if (s->boolean) req.strict_tools.push_back(name);
  return Status::ok();
}

// A string field accepted for its documented no-effect-on-output meaning.
inline Status optional_string(const Value& r, std::string_view name, bool anthropic = false) {
  const Value* v = field(r, name);
  if (v != nullptr && !v->is_string())
    return bad(anthropic ? std::string(name) + ": must be a string"
                         : "'" + std::string(name) + "' must be a string");
  return Status::ok();
}

// The vLLM sampling extensions this build does not implement, in both
// OpenAI protocols that vLLM extends (Chat Completions, Completions). (vLLM's structured
// outputs are read by read_vllm_structured_outputs; Completions reads stop_token_ids and
// skip_special_tokens itself.)
inline Status reject_unimplemented_sampling_extensions(const Value& r, bool completions = false) {
  if (!completions) FATHOM_RETURN_IF_ERROR(reject_fields(r, {"stop_token_ids"}));
  FATHOM_RETURN_IF_ERROR(reject_fields(r, {"prompt_logprobs", "use_beam_search"}));
  if (!completions) FATHOM_RETURN_IF_ERROR(require_bool(r, "skip_special_tokens", true));
  // Without effect here, as in vLLM with a fast tokenizer (special tokens are written as
  // spelled, without spaces), and with nothing to space when they are skipped.
  if (const Value* v = field(r, "spaces_between_special_tokens");
      v && v->kind != Value::Kind::kBool)
    return bad("'spaces_between_special_tokens' must be a boolean");
  return Status::ok();
}

inline Result<double> number(const Value& v, const char* name) {
  int64_t i = 0;
  if (v.kind == Value::Kind::kFloat) return v.number;
  if (v.int_fits_int64(&i)) return double(i);
  return bad(std::string("'") + name + "' must be a number");
}

inline Result<int64_t> integer(const Value& v, const char* name) {
  int64_t i = 0;
  if (v.kind == Value::Kind::kInt && v.int_fits_int64(&i)) return i;
  if (v.kind == Value::Kind::kInt) return bad(std::string("'") + name + "' is out of range");
  return bad(std::string("'") + name + "' must be an integer");
}

// vLLM's truncate_prompt_tokens (-1: as many as the context length, else a positive count)
// and include_stop_str_in_output (a boolean), into `sp`.
inline Status read_truncation_and_stop_inclusion(const Value& r, SamplingParams& sp) {
  if (const Value* v = field(r, "truncate_prompt_tokens")) {
    FATHOM_ASSIGN_OR_RETURN(int64_t k, integer(*v, "truncate_prompt_tokens"));
    if (k < -1 || k == 0)
      return bad("'truncate_prompt_tokens' must be -1 (the context length) or a positive count");
    sp.truncate_prompt_tokens = k;
  }
  if (const Value* v = field(r, "include_stop_str_in_output")) {
    if (v->kind != Value::Kind::kBool) return bad("'include_stop_str_in_output' must be a boolean");
    sp.include_stop_str = v->boolean;
  }
  return Status::ok();
}

// A list of token ids (its elements; the caller checks it is a list), each in [0, 2^31).
inline Result<std::vector<int32_t>> token_ids(const Value& list, const std::string& name) {
  std::vector<int32_t> ids;
  ids.reserve(list.items.size());
  for (const Value& v : list.items) {
    int64_t x = 0;
    if (v.kind != Value::Kind::kInt || !v.int_fits_int64(&x) || x < 0 || x > INT32_MAX)
      return bad("'" + name + "' token ids must be integers in [0, 2147483647]");
    ids.push_back(int32_t(x));
  }
  return ids;
}

// Text of a string content or of a list of text parts (joined with "\n\n").
inline Result<std::string> text_content(const Value* c, const std::string& where) {
  if (c == nullptr) return std::string();
  if (c->is_string()) return c->text;
  if (!c->is_array()) return bad(where + ": 'content' must be a string or a list of parts");
  std::string out;
  for (size_t i = 0; i < c->items.size(); ++i) {
    const Value& p = c->items[i];
    const Value* type = p.is_object() ? field(p, "type") : nullptr;
    const Value* text = p.is_object() ? field(p, "text") : nullptr;
    if (type == nullptr || !type->is_string() || type->text != "text" || text == nullptr ||
        !text->is_string()) {
      return bad(where + ": only text parts are allowed here");
    }
    if (i) out += "\n\n";
    out += text->text;
  }
  return out;
}

inline bool valid_tool_name(const std::string& n) {
  if (n.empty() || n.size() > 128) return false;
  for (unsigned char c : n)
    if (!(std::isalnum(c) || c == '_' || c == '-')) return false;
  return true;
}

inline bool mentions_json(const Value& v) {
  if (v.is_string()) {
    std::string lower;
    for (unsigned char c : v.text) lower.push_back(char(std::tolower(c)));
    return lower.find("json") != std::string::npos;
  }
  for (const Value& i : v.items)
    if (mentions_json(i)) return true;
  return false;
}

// A literal image placeholder in client text would be taken for an image.
inline Status check_no_placeholder(const Value& v) {
  if (v.is_string()) {
    for (std::string_view ph : {"<｜image｜>", "<｜deepseek_image｜>"}) {
      if (v.text.find(ph) != std::string::npos) {
        return bad("The sub-string \"" + std::string(ph) +
                   "\" in your input is not allowed; images must be sent as image parts.");
      }
    }
    return Status::ok();
  }
  for (const Value& i : v.items) FATHOM_RETURN_IF_ERROR(check_no_placeholder(i));
  return Status::ok();
}

// vLLM's sampling extensions: min_p in [0, 1], repetition_penalty in (0, 10].
inline Status read_min_p_repetition_penalty(const Value& r, SamplingParams& sp) {
  if (const Value* v = field(r, "min_p")) {
    FATHOM_ASSIGN_OR_RETURN(double t, number(*v, "min_p"));
    if (!(t >= 0 && t <= 1)) return bad("'min_p' must be in [0, 1]");
    sp.min_p = t;
  }
  if (const Value* v = field(r, "repetition_penalty")) {
    FATHOM_ASSIGN_OR_RETURN(double t, number(*v, "repetition_penalty"));
    if (!(t > 0 && t <= 10)) return bad("'repetition_penalty' must be in (0, 10]");
    sp.repetition_penalty = t;
  }
  return Status::ok();
}

// The tenant salt of the prefix cache: vLLM's cache_salt, else the first of `fallbacks` (the
// OpenAI fields that name the end user) that is a non-empty string.
inline Status read_cache_salt(const Value& r, SamplingParams& sp,
                              std::initializer_list<const char*> fallbacks) {
  if (const Value* v = field(r, "cache_salt")) {
    if (!v->is_string() || v->text.empty()) return bad("'cache_salt' must be a non-empty string");
    sp.cache_salt = v->text;
    return Status::ok();
  }
  for (const char* k : fallbacks)
    if (const Value* v = field(r, k); v && v->is_string() && !v->text.empty()) {
      sp.cache_salt = v->text;
      break;
    }
  return Status::ok();
}

// Fathom's `retention`: the name of one of the server's KV-store retention classes (the
// server checks the name; here it must be a non-empty string).
inline Status read_retention(const Value& r, SamplingParams& sp, bool anthropic = false) {
  const Value* v = field(r, "retention");
  if (v == nullptr) return Status::ok();
  if (!v->is_string() || v->text.empty())
    return bad(anthropic ? "retention: must be a string naming a retention class"
                         : "'retention' must be a string naming a retention class");
  sp.retention = v->text;
  return Status::ok();
}

// temperature in [0, 2] and top_p in (0, 1], the rules all three protocols share.
inline Status read_temperature_top_p(const Value& r, SamplingParams& sp) {
  if (const Value* v = field(r, "temperature")) {
    FATHOM_ASSIGN_OR_RETURN(double t, number(*v, "temperature"));
    if (!(t >= 0 && t <= 2)) return bad("'temperature' must be in [0, 2]");
    sp.temperature = t;
  }
  if (const Value* v = field(r, "top_p")) {
    FATHOM_ASSIGN_OR_RETURN(double t, number(*v, "top_p"));
    if (!(t > 0 && t <= 1)) return bad("'top_p' must be in (0, 1]");
    sp.top_p = t;
  }
  return Status::ok();
}

// A named tool_choice: keep only that tool and require a call.
inline void keep_only_tool(ConversationRequest& req, const std::string& name) {
  Value kept = Value::array();
  for (const Value& t : req.tools.items)
    if (t.find("function")->find("name")->text == name) kept.items.push_back(t);
  req.tools = std::move(kept);
  req.tool_choice = ToolChoice::kRequired;
}

// Text blocks joined with "\n\n" (the encoders' own join) unless an image is among them.
inline Value joined_or_blocks(Value blocks, bool has_image) {
  if (has_image) return blocks;
  std::string joined;
  for (size_t i = 0; i < blocks.items.size(); ++i) {
    if (i) joined += "\n\n";
    joined += blocks.items[i].find("text")->text;
  }
  return Value::from_string(joined);
}

}  // namespace fathom::api::detail
