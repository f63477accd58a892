#include "api/chat_completions.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include "api/errors.h"
#include "api/logit_controls.h"
#include "api/request_util.h"
#include "api/stop_matcher.h"
#include "core/utf8.h"

namespace fathom::api {

using pyjson::Value;

namespace {

using namespace detail;

Result<Value> user_content(const Value* c, size_t index, const ChatOptions& opt) {
  std::string where = "messages[" + std::to_string(index) + "]";
  if (c == nullptr) return bad(where + ": a user message needs 'content'");
  if (c->is_string()) return *c;
  if (!c->is_array()) return bad(where + ": 'content' must be a string or a list of parts");
  Value blocks = Value::array();
  bool has_image = false;
  for (size_t k = 0; k < c->items.size(); ++k) {
    const Value& p = c->items[k];
    const Value* type = p.is_object() ? field(p, "type") : nullptr;
    if (type == nullptr || !type->is_string())
      return bad(where + ": each content part needs a 'type'");
    if (type->text == "text") {
      const Value* t = field(p, "text");
      if (t == nullptr || !t->is_string())
        return bad(where + ": a text part needs a string 'text'");
      Value b = Value::object();
      b.set("type", Value::from_string("text"));
      b.set("text", *t);
      blocks.items.push_back(std::move(b));
    } else if (type->text == "image_url" || type->text == "file") {
      if (!opt.images) {
        return bad(where + ".content[" + std::to_string(k) + "]: " + type->text +
                   " parts are not supported: this model has no vision input");
      }
      std::string url;
      if (type->text == "image_url") {
        const Value* iu = field(p, "image_url");
        const Value* u = iu && iu->is_object() ? field(*iu, "url") : iu;
        if (u == nullptr || !u->is_string())
          return bad(where + ": an image_url part needs a 'url'");
        url = u->text;
      } else {
        const Value* f = field(p, "file");
        if (f && field(*f, "file_id"))
          return bad(where + ": 'file_id' is not supported; send file_data");
        const Value* d = f ? field(*f, "file_data") : nullptr;
        if (d == nullptr || !d->is_string()) return bad(where + ": a file part needs 'file_data'");
        url = d->text;
      }
      bool data_url = url.rfind("data:", 0) == 0;
      bool http = url.rfind("http://", 0) == 0 || url.rfind("https://", 0) == 0;
      if (!data_url && !http) return bad(where + ": an image must be a data URL or an http(s) URL");
      if (http && url.size() > 8192) return bad(where + ": image URLs are limited to 8192 bytes");
      if (opt.format == PromptFormat::kV4) return bad(where + ": this model does not take images");
      Value b = Value::object(), iu = Value::object();
      b.set("type", Value::from_string("image_url"));
      iu.set("url", Value::from_string(url));
      b.set("image_url", iu);
      blocks.items.push_back(std::move(b));
      has_image = true;
    } else {
      return bad(where + ".content[" + std::to_string(k) + "]: unsupported content part type '" +
                 type->text + "'");
    }
  }
  return joined_or_blocks(std::move(blocks), has_image);
}

// Every top-level field of a Chat Completions request this adapter reads: OpenAI's and the vLLM
// extensions, including those it rejects with their own message. Any other is a 400.
// clang-format off
constexpr std::string_view kChatFields[] = {
    // OpenAI
    "model", "messages", "stream", "stream_options", "n", "logprobs", "top_logprobs", "max_tokens",
    "max_completion_tokens", "temperature", "top_p", "presence_penalty", "frequency_penalty",
    "seed", "stop", "reasoning_effort", "tools", "tool_choice", "parallel_tool_calls",
    "response_format", "user", "safety_identifier", "prompt_cache_key", "metadata", "modalities",
    "service_tier", "verbosity", "store", "audio", "prediction", "web_search_options", "functions",
    "function_call", "logit_bias", "moderation", "prompt_cache_options", "prompt_cache_retention",
    // vLLM
    "top_k", "min_p", "repetition_penalty", "ignore_eos", "chat_template_kwargs", "echo",
    "continue_final_message", "add_generation_prompt", "cache_salt", "best_of", "chat_template",
    "documents", "mm_processor_kwargs", "stop_token_ids", "min_tokens", "bad_words",
    "allowed_token_ids", "prompt_logprobs", "use_beam_search", "truncate_prompt_tokens",
    "include_stop_str_in_output", "skip_special_tokens", "spaces_between_special_tokens",
    "structured_outputs", "guided_json",
    "guided_regex", "guided_choice", "guided_grammar", "guided_json_object",
    // DeepSeek (thinking), Fathom (retention)
    "thinking", "retention"
};
// The parameters of vLLM's TokenizeChatRequest (POST /tokenize with messages).
constexpr std::string_view kTokenizeChatFields[] = {
    "model", "messages", "tools", "chat_template_kwargs", "add_generation_prompt",
    "continue_final_message", "chat_template", "mm_processor_kwargs", "media_io_kwargs",
    "add_special_tokens", "return_token_strs"
};
// clang-format on

// OpenAI and vLLM request fields this build does not implement (a 400 naming the field), and
// those accepted only at the value that means "nothing to do". Fields with no effect on the
// output by definition (metadata, user, safety_identifier, prompt_cache_key) are accepted.
Status reject_unimplemented(const Value& r) {
  FATHOM_RETURN_IF_ERROR(reject_unimplemented_sampling_extensions(r));
  FATHOM_RETURN_IF_ERROR(reject_fields(
      r, {"audio", "prediction", "web_search_options", "functions", "function_call", "best_of",
          "chat_template", "documents", "mm_processor_kwargs", "media_io_kwargs", "moderation",
          "prompt_cache_options", "prompt_cache_retention"}));
  FATHOM_RETURN_IF_ERROR(require_bool(r, "parallel_tool_calls", true));
  FATHOM_RETURN_IF_ERROR(require_bool(r, "store", false));
  FATHOM_RETURN_IF_ERROR(require_bool(r, "echo", false));
  FATHOM_RETURN_IF_ERROR(require_bool(r, "continue_final_message", false));
  FATHOM_RETURN_IF_ERROR(require_bool(r, "add_generation_prompt", true));
  for (const char* k : {"user", "safety_identifier", "prompt_cache_key"})
    FATHOM_RETURN_IF_ERROR(optional_string(r, k));
  if (const Value* m = field(r, "metadata"); m && !m->is_object())
    return bad("'metadata' must be an object");
  if (const Value* m = field(r, "modalities")) {
    if (!m->is_array()) return bad("'modalities' must be a list");
    for (const Value& x : m->items)
      if (!x.is_string() || x.text != "text")
        return bad("'modalities' other than \"text\" are not supported by this server");
  }
  if (const Value* t = field(r, "service_tier")) {
    if (!t->is_string() || (t->text != "auto" && t->text != "default"))
      return bad("'service_tier' must be \"auto\" or \"default\" on this server");
  }
  if (const Value* v = field(r, "verbosity")) {
    if (!v->is_string() || v->text != "medium")
      return bad("'verbosity' other than \"medium\" is not supported by this server");
  }
  return Status::ok();
}

}  // namespace

Result<ConversationRequest> parse_chat_request(std::string_view body, const ChatOptions& opt) {
  FATHOM_ASSIGN_OR_RETURN(const Value r, parse_body_object(body, opt.max_body_bytes));
  FATHOM_RETURN_IF_ERROR(opt.tokenize ? reject_unknown_fields(r, kTokenizeChatFields, {})
                                      : reject_unknown_fields(r, kChatFields, opt.caller_fields));
  ConversationRequest req;
  FATHOM_RETURN_IF_ERROR(read_model_and_stream(r, req));
  FATHOM_ASSIGN_OR_RETURN(const bool default_thinking,
                          apply_served_model(opt.models, opt.default_thinking, req.model));
  FATHOM_RETURN_IF_ERROR(reject_unimplemented(r));
  req.include_usage = !req.stream;
  FATHOM_RETURN_IF_ERROR(
      read_stream_options(r, req.stream, &req.include_usage, &req.continuous_usage));
  if (const Value* n = field(r, "n")) {
    FATHOM_ASSIGN_OR_RETURN(int64_t v, integer(*n, "n"));
    if (v < 1 || v > 128) return bad("'n' must be in [1, 128]");
    req.n = int(v);
  }
  if (const Value* v = field(r, "logprobs")) {
    if (v->kind != Value::Kind::kBool) return bad("'logprobs' must be a boolean");
    req.logprobs = v->boolean;
  }
  if (const Value* v = field(r, "top_logprobs")) {
    FATHOM_ASSIGN_OR_RETURN(int64_t k, integer(*v, "top_logprobs"));
    if (k < 0 || k > 20) return bad("'top_logprobs' must be in [0, 20]");
    if (!req.logprobs) return bad("'top_logprobs' requires 'logprobs' to be true");
    req.top_logprobs = int(k);
  }
  if (const Value* v = field(r, "ignore_eos")) {
    if (v->kind != Value::Kind::kBool) return bad("'ignore_eos' must be a boolean");
    req.sampling.ignore_eos = v->boolean;
  }
  SamplingParams& sp = req.sampling;
  FATHOM_RETURN_IF_ERROR(read_cache_salt(r, req.sampling, {"safety_identifier", "user"}));
  FATHOM_RETURN_IF_ERROR(read_retention(r, req.sampling));
  FATHOM_RETURN_IF_ERROR(read_temperature_top_p(r, req.sampling));
  for (const char* k : {"max_tokens", "max_completion_tokens"}) {
    if (const Value* v = field(r, k)) {
      FATHOM_ASSIGN_OR_RETURN(int64_t t, integer(*v, k));
      if (t <= 0) return bad(std::string("'") + k + "' must be positive");
      sp.max_tokens = t;
    }
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
  FATHOM_RETURN_IF_ERROR(read_min_p_repetition_penalty(r, sp));
  FATHOM_RETURN_IF_ERROR(read_logit_controls(r, sp));
  FATHOM_RETURN_IF_ERROR(read_truncation_and_stop_inclusion(r, sp));
  if (const Value* v = field(r, "seed")) {
    FATHOM_ASSIGN_OR_RETURN(int64_t s, integer(*v, "seed"));
    sp.seed = s;
  }
  if (const Value* v = field(r, "top_k")) {
    FATHOM_ASSIGN_OR_RETURN(int64_t k, integer(*v, "top_k"));
    if (k < 0) return bad("'top_k' must not be negative");
    sp.top_k = k;
  }
  FATHOM_RETURN_IF_ERROR(read_stop_field(r, &sp.stop));
  // Thinking and effort.
  req.thinking = default_thinking;
  std::optional<std::string> effort_name;
  const Value* effort_field = field(r, "reasoning_effort");
  if (effort_field != nullptr && effort_field->kind == Value::Kind::kInt) {
    // Fathom extension: a V4.1 integer budget 1..100.
    int64_t b = 0;
    if (!effort_field->int_fits_int64(&b) || b < 1 || b > 100)
      return bad("an integer 'reasoning_effort' must be in [1, 100]");
    req.budget = b;
    req.thinking = true;
  } else if (const Value* e = effort_field) {
    if (!e->is_string()) return bad("'reasoning_effort' must be a string or an integer budget");
    effort_name = e->text;
    static const std::set<std::string> kEfforts = {"none", "minimal", "low", "medium",
                                                   "high", "xhigh",   "max"};
    if (!kEfforts.count(e->text))
      return bad("'reasoning_effort' must be one of none, minimal, low, medium, high, xhigh, max");
    req.thinking = e->text != "none";
    if (e->text == "minimal" || e->text == "low") req.effort = Effort::kLow;
    if (e->text == "medium" || e->text == "high") req.effort = Effort::kHigh;
    if (e->text == "xhigh") req.effort = Effort::kXhigh;
    if (e->text == "max") req.effort = Effort::kMax;
  }
  if (const Value* t = field(r, "thinking")) {
    if (!t->is_object()) return bad("'thinking' must be an object");
    const Value* type = field(*t, "type");
    if (type == nullptr || !type->is_string() ||
        (type->text != "enabled" && type->text != "disabled")) {
      return bad("'thinking.type' must be \"enabled\" or \"disabled\"");
    }
    FATHOM_RETURN_IF_ERROR(reject_unknown_members(*t, "thinking", {"type", "budget_tokens"}));
    req.thinking = type->text == "enabled";
    // Anthropic's reasoning budget, with Anthropic's rules, on the DeepSeek thinking object.
    if (const Value* b = field(*t, "budget_tokens")) {
      if (!req.thinking) return bad("'thinking.budget_tokens' requires thinking.type \"enabled\"");
      FATHOM_ASSIGN_OR_RETURN(int64_t budget, integer(*b, "thinking.budget_tokens"));
      if (budget < 1024) return bad("'thinking.budget_tokens' must be at least 1024");
      if (sp.max_tokens && budget >= *sp.max_tokens)
        return bad("'thinking.budget_tokens' must be less than max_tokens");
      req.reasoning_budget = budget;
    }
  }
  if (const Value* kw = field(r, "chat_template_kwargs")) {
    // vLLM's way to switch DeepSeek thinking: {"thinking": bool}; nothing else is honoured.
    if (!kw->is_object()) return bad("'chat_template_kwargs' must be an object");
    for (size_t i = 0; i < kw->keys.size(); ++i) {
      const Value& v = kw->items[i];
      if (v.is_null()) continue;
      if (kw->keys[i] != "thinking" || v.kind != Value::Kind::kBool) {
        return bad("'chat_template_kwargs." + kw->keys[i] +
                   "' is not supported by this server (only a boolean 'thinking' is)");
      }
      req.thinking = v.boolean;
    }
  }
  // Tools.
  std::set<std::string> tool_names;
  if (const Value* tools = field(r, "tools")) {
    if (!tools->is_array()) return bad("'tools' must be a list");
    for (size_t i = 0; i < tools->items.size(); ++i) {
      const Value& t = tools->items[i];
      std::string where = "tools[" + std::to_string(i) + "]";
      const Value* type = t.is_object() ? field(t, "type") : nullptr;
      const Value* fn = t.is_object() ? field(t, "function") : nullptr;
      if (type == nullptr || !type->is_string() || type->text != "function" || fn == nullptr ||
          !fn->is_object()) {
        return bad(where +
                   ": only {\"type\": \"function\", \"function\": {...}} tools are supported");
      }
      // The function object is rendered as given (its own members included); the tool's are not.
      FATHOM_RETURN_IF_ERROR(reject_unknown_members(t, where, {"type", "function"}));
      const Value* name = field(*fn, "name");
      if (name == nullptr || !name->is_string() || !valid_tool_name(name->text)) {
        return bad(where + ": the function name must be 1-128 characters of [A-Za-z0-9_-]");
      }
      if (!tool_names.insert(name->text).second)
        return bad(where + ": duplicate tool name '" + name->text + "'");
      if (const Value* params = field(*fn, "parameters")) {
        const Value* pt = params->is_object() ? field(*params, "type") : nullptr;
        if (pt == nullptr || !pt->is_string() || pt->text != "object") {
          return bad(where + ": 'parameters' must be a JSON Schema with \"type\": \"object\"");
        }
        if (const Value* props = field(*params, "properties"); props && !props->is_object()) {
          return bad(where + ": 'parameters.properties' must be an object");
        }
      }
      // Strict mode: the arguments follow the schema (the server's DSML grammar).
      FATHOM_RETURN_IF_ERROR(
          read_strict_tool(*fn, where + ".function.strict", field(*fn, "name")->text, req));
      if (const Value* d = field(*fn, "description"); d && !d->is_string())
        return bad(where + ": 'description' must be a string");
      // The renderer writes the function object as given, as the official encoder does.
      Value tool = Value::object();
      tool.set("type", Value::from_string("function"));
      tool.set("function", *fn);
      req.tools.items.push_back(std::move(tool));
    }
  }
  if (const Value* tc = field(r, "tool_choice")) {
    if (tc->is_string() && tc->text == "none") {
      req.tool_choice = ToolChoice::kNone;
    } else if (tc->is_string() && tc->text == "auto") {
      req.tool_choice = ToolChoice::kAuto;
    } else if (tc->is_string() && tc->text == "required") {
      req.tool_choice = ToolChoice::kRequired;
    } else if (tc->is_object()) {
      FATHOM_RETURN_IF_ERROR(reject_unknown_members(*tc, "tool_choice", {"type", "function"}));
      const Value* fn = field(*tc, "function");
      if (fn && fn->is_object())
        FATHOM_RETURN_IF_ERROR(reject_unknown_members(*fn, "tool_choice.function", {"name"}));
      const Value* name = fn && fn->is_object() ? field(*fn, "name") : nullptr;
      if (name == nullptr || !name->is_string()) return bad("'tool_choice' names no function");
      if (!tool_names.count(name->text))
        return bad("'tool_choice' names an unknown tool '" + name->text + "'");
      keep_only_tool(req, name->text);
    } else {
      return bad("'tool_choice' must be none, auto, required or {\"type\": \"function\", ...}");
    }
    if (req.tool_choice == ToolChoice::kRequired && req.tools.items.empty())
      return bad("'tool_choice' requires 'tools'");
  }
  if (req.thinking && req.tool_choice == ToolChoice::kRequired)
    return bad("Thinking mode does not support this tool_choice");
  if (const Value* rf = field(r, "response_format")) {
    if (!rf->is_object()) return bad("'response_format' must be an object");
    const Value* type = field(*rf, "type");
    if (type == nullptr || !type->is_string()) return bad("'response_format.type' is required");
    FATHOM_RETURN_IF_ERROR(reject_unknown_members(*rf, "response_format", {"type", "json_schema"}));
    if (type->text == "json_object") {
      req.json_object = true;
      req.structured.kind = StructuredOutput::Kind::kJsonObject;
      req.structured.field = "response_format";
    } else if (type->text == "json_schema") {
      const Value* js = field(*rf, "json_schema");
      if (js == nullptr || !js->is_object())
        return bad("'response_format.json_schema' must be an object");
      FATHOM_RETURN_IF_ERROR(reject_unknown_members(*js, "response_format.json_schema",
                                                    {"name", "description", "schema", "strict"}));
      if (const Value* st = field(*js, "strict"); st && st->kind != Value::Kind::kBool)
        return bad("'response_format.json_schema.strict' must be a boolean");
      const Value* schema = field(*js, "schema");
      if (schema == nullptr) return bad("'response_format.json_schema.schema' is required");
      FATHOM_RETURN_IF_ERROR(
          set_json_schema(*schema, "response_format.json_schema.schema", req.structured));
      req.response_format = *rf;
    } else if (type->text != "text") {
      return bad("'response_format.type' must be text, json_object or json_schema");
    }
  }
  FATHOM_RETURN_IF_ERROR(read_vllm_structured_outputs(r, req.structured));
  // Messages.
  const Value* msgs = field(r, "messages");
  if (msgs == nullptr || !msgs->is_array() || msgs->items.empty())
    return bad("'messages' must be a non-empty list");
  FATHOM_RETURN_IF_ERROR(check_no_placeholder(*msgs));
  std::vector<std::string> pending_calls;  // call ids still waiting for their tool message
  std::set<std::string> answered;
  for (size_t i = 0; i < msgs->items.size(); ++i) {
    const Value& m = msgs->items[i];
    std::string where = "messages[" + std::to_string(i) + "]";
    const Value* role = m.is_object() ? field(m, "role") : nullptr;
    if (role == nullptr || !role->is_string()) return bad(where + ": 'role' is required");
    if (role->text != "tool" && !pending_calls.empty()) {
      return bad(where + ": tool call '" + pending_calls.front() + "' has no tool message");
    }
    // A participant name would tell the model who speaks; the template has no place for it.
    // (On a tool message it repeats the function's name, which tool_call_id already gives.)
    if (role->text != "tool" && field(m, "name"))
      return bad(where + ".name: participant names are not supported by this server");
    for (const char* k : {"audio", "function_call"})
      if (field(m, k)) return bad(where + "." + k + ": not supported by this server");
    Value out = Value::object();
    if (role->text == "system" || role->text == "developer") {
      FATHOM_ASSIGN_OR_RETURN(std::string text, text_content(field(m, "content"), where));
      if (text.empty()) continue;  // an empty system message is dropped
      out.set("role", Value::from_string("system"));
      out.set("content", Value::from_string(text));
    } else if (role->text == "user") {
      FATHOM_ASSIGN_OR_RETURN(Value content, user_content(field(m, "content"), i, opt));
      out.set("role", Value::from_string("user"));
      out.set("content", std::move(content));
    } else if (role->text == "latest_reminder") {
      FATHOM_ASSIGN_OR_RETURN(std::string text, text_content(field(m, "content"), where));
      out.set("role", Value::from_string("latest_reminder"));
      out.set("content", Value::from_string(text));
    } else if (role->text == "assistant") {
      if (field(m, "prefix")) return bad(where + ": 'prefix' continuation is not supported yet");
      FATHOM_ASSIGN_OR_RETURN(std::string text, text_content(field(m, "content"), where));
      const Value* calls = m.find("tool_calls");
      out.set("role", Value::from_string("assistant"));
      out.set("content", Value::from_string(text));
      if (const Value* rc = field(m, "reasoning_content")) {
        if (!rc->is_string()) return bad(where + ": 'reasoning_content' must be a string");
        out.set("reasoning_content", *rc);
      }
      if (calls != nullptr && !calls->is_null()) {
        if (!calls->is_array() || calls->items.empty())
          return bad(where + ": 'tool_calls' must be a non-empty list");
        Value out_calls = Value::array();
        std::set<std::string> ids;
        for (const Value& c : calls->items) {
          const Value* id = c.is_object() ? field(c, "id") : nullptr;
          const Value* fn = c.is_object() ? field(c, "function") : nullptr;
          const Value* name = fn && fn->is_object() ? field(*fn, "name") : nullptr;
          const Value* args = fn && fn->is_object() ? field(*fn, "arguments") : nullptr;
          if (id == nullptr || !id->is_string() || name == nullptr || !name->is_string() ||
              args == nullptr || !args->is_string()) {
            return bad(
                where +
                ": each tool call needs a string 'id', 'function.name' and 'function.arguments'");
          }
          if (!ids.insert(id->text).second)
            return bad(where + ": duplicate tool call id '" + id->text + "'");
          pending_calls.push_back(id->text);
          Value oc = Value::object(), of = Value::object();
          of.set("name", *name);
          of.set("arguments", *args);
          oc.set("id", *id);
          oc.set("type", Value::from_string("function"));
          oc.set("function", of);
          out_calls.items.push_back(std::move(oc));
        }
        out.set("tool_calls", std::move(out_calls));
      } else if (text.empty()) {
        return bad(where + ": an assistant message needs 'content' or 'tool_calls'");
      }
    } else if (role->text == "tool") {
      const Value* id = field(m, "tool_call_id");
      if (id == nullptr || !id->is_string())
        return bad(where + ": a tool message needs 'tool_call_id'");
      auto it = std::find(pending_calls.begin(), pending_calls.end(), id->text);
      if (it == pending_calls.end()) {
        return bad(where +
                   (answered.count(id->text) ? ": duplicate tool message for '"
                                             : ": no assistant tool call has id '") +
                   id->text + "'");
      }
      pending_calls.erase(it);
      answered.insert(id->text);
      FATHOM_ASSIGN_OR_RETURN(std::string text, text_content(field(m, "content"), where));
      out.set("role", Value::from_string("tool"));
      out.set("tool_call_id", *id);
      out.set("content", Value::from_string(text));
    } else {
      return bad(where + ": unsupported role '" + role->text + "'");
    }
    req.messages.items.push_back(std::move(out));
  }
  if (!pending_calls.empty())
    return bad("tool call '" + pending_calls.front() + "' has no tool message");
  if (req.json_object && !mentions_json(*msgs)) {
    return bad("response_format json_object requires the word \"json\" in the messages");
  }
  return req;
}

const char* chat_finish_reason(prompt::FinishReason r) {
  switch (r) {
    case prompt::FinishReason::kLength:
      return "length";
    case prompt::FinishReason::kToolCalls:
      return "tool_calls";
    default:
      return "stop";
  }
}

namespace {

Value usage_json(const Usage& u) {
  Value v = Value::object(), details = Value::object(), out_details = Value::object();
  v.set("prompt_tokens", Value::from_int(u.prompt_tokens));
  v.set("completion_tokens", Value::from_int(u.completion_tokens));
  v.set("total_tokens", Value::from_int(u.prompt_tokens + u.completion_tokens));
  details.set("cached_tokens", Value::from_int(u.cached_tokens));
  v.set("prompt_tokens_details", details);
  out_details.set("reasoning_tokens", Value::from_int(u.reasoning_tokens));
  v.set("completion_tokens_details", out_details);
  v.set("prompt_cache_hit_tokens", Value::from_int(u.cached_tokens));
  v.set("prompt_cache_miss_tokens", Value::from_int(u.prompt_tokens - u.cached_tokens));
  return v;
}

Value logprob_value(float lp) { return Value::from_float(std::isfinite(lp) ? lp : -9999.0); }

Value token_entry(const std::string& token, float lp) {
  Value e = Value::object(), bytes = Value::array();
  e.set("token", Value::from_string(utf8::to_lossy(token)));
  e.set("logprob", logprob_value(lp));
  for (unsigned char c : token) bytes.items.push_back(Value::from_int(c));
  e.set("bytes", std::move(bytes));
  return e;
}

}  // namespace

Value chat_logprobs_json(const std::vector<TokenLogprob>& tokens) {
  Value content = Value::array();
  for (const TokenLogprob& t : tokens) {
    Value e = token_entry(t.token, t.logprob), top = Value::array();
    for (const auto& [tok, lp] : t.top) top.items.push_back(token_entry(tok, lp));
    e.set("top_logprobs", std::move(top));
    content.items.push_back(std::move(e));
  }
  Value v = Value::object();
  v.set("content", std::move(content));
  return v;
}

std::string ChatResponder::tool_id(int index) const {
  // Choice 0 keeps the recipe's call_{id}_{i}; other choices name their index too.
  return "call_" + id_ + "_" + (choice_.index ? std::to_string(choice_.index) + "_" : "") +
         std::to_string(index);
}

std::string ChatResponder::chunk(const std::string& delta_json, const char* finish_reason,
                                 const Value* logprobs, bool opening) const {
  Value c = response_head(id_, "chat.completion.chunk", created_, model_);
  Value choices = Value::array(), choice = Value::object();
  choice.set("index", Value::from_int(choice_.index));
  choice.set("delta", std::move(pyjson::parse(delta_json)).value());
  choice.set("logprobs", logprobs ? *logprobs : Value());
  choice.set("finish_reason", finish_reason ? Value::from_string(finish_reason) : Value());
  choices.items.push_back(std::move(choice));
  c.set("choices", std::move(choices));
  if (include_usage_) {
    // Continuous usage: the choice's tokens so far (none on the opening chunk, as vLLM).
    Usage u = live_usage_;
    if (opening) u.completion_tokens = u.reasoning_tokens = 0;
    c.set("usage", choice_.continuous_usage ? usage_json(u) : Value());
  }
  return "data: " + pyjson::dumps(c, false, true) + "\n\n";
}

std::string ChatResponder::stream_tail(const Usage& total) const {
  std::string out;
  if (include_usage_) {
    Value c = response_head(id_, "chat.completion.chunk", created_, model_);
    c.set("choices", Value::array());
    c.set("usage", usage_json(total));
    out += "data: " + pyjson::dumps(c, false, true) + "\n\n";
  }
  return out + "data: [DONE]\n\n";
}

std::string ChatResponder::stream_error(const Status& s) const { return openai_stream_error(s); }

std::vector<TokenLogprob> ChatResponder::take_content_logprobs(
    const std::vector<prompt::ParserEvent>& events, const std::vector<TokenLogprob>& logprobs) {
  if (!choice_.logprobs) return {};
  pending_.insert(pending_.end(), logprobs.begin(), logprobs.end());
  if (events.empty()) return {};
  bool content = false;
  for (const auto& e : events) content |= e.kind == prompt::ParserEvent::Kind::kContent;
  std::vector<TokenLogprob> out;
  if (content) out = std::move(pending_);
  pending_.clear();
  return out;
}

std::string ChatResponder::stream(const std::vector<prompt::ParserEvent>& events,
                                  const Usage& usage, const std::vector<TokenLogprob>& logprobs) {
  std::string out;
  if (!opened_) {
    opened_ = true;
    out += chunk(thinking_ ? R"({"role":"assistant","content":null,"reasoning_content":""})"
                           : R"({"role":"assistant","content":""})",
                 nullptr, nullptr, true);
  }
  std::vector<TokenLogprob> lp = take_content_logprobs(events, logprobs);
  content_logprobs_.insert(content_logprobs_.end(), lp.begin(), lp.end());
  // The step's log probabilities ride on its last content chunk.
  size_t last_content = events.size();
  for (size_t i = 0; i < events.size(); ++i)
    if (events[i].kind == prompt::ParserEvent::Kind::kContent) last_content = i;
  for (size_t i = 0; i < events.size(); ++i) {
    const auto& e = events[i];
    Value d = Value::object();
    switch (e.kind) {
      case prompt::ParserEvent::Kind::kReasoning:
        d.set("reasoning_content", Value::from_string(e.text));
        break;
      case prompt::ParserEvent::Kind::kContent:
        d.set("content", Value::from_string(e.text));
        break;
      case prompt::ParserEvent::Kind::kToolCallBegin: {
        Value calls = Value::array(), call = Value::object(), fn = Value::object();
        call.set("index", Value::from_int(e.tool_index));
        call.set("id", Value::from_string(tool_id(e.tool_index)));
        call.set("type", Value::from_string("function"));
        fn.set("name", Value::from_string(e.text));
        fn.set("arguments", Value::from_string(""));
        call.set("function", fn);
        calls.items.push_back(call);
        d.set("tool_calls", calls);
        break;
      }
      case prompt::ParserEvent::Kind::kToolArguments: {
        Value calls = Value::array(), call = Value::object(), fn = Value::object();
        call.set("index", Value::from_int(e.tool_index));
        fn.set("arguments", Value::from_string(e.text));
        call.set("function", fn);
        calls.items.push_back(call);
        d.set("tool_calls", calls);
        break;
      }
      case prompt::ParserEvent::Kind::kToolCallEnd:
        continue;
      case prompt::ParserEvent::Kind::kFinish:
        out += chunk("{}", chat_finish_reason(e.finish), nullptr);
        finish_ = e.finish;
        finished_ = true;
        if (choice_.n == 1) out += stream_tail(usage);
        continue;
    }
    if (i == last_content && choice_.logprobs) {
      Value l = chat_logprobs_json(lp);
      out += chunk(pyjson::dumps(d, false, true), nullptr, &l);
    } else {
      out += chunk(pyjson::dumps(d, false, true), nullptr, nullptr);
    }
  }
  fold(events);
  return out;
}

void ChatResponder::add(const std::vector<prompt::ParserEvent>& events,
                        const std::vector<TokenLogprob>& logprobs) {
  std::vector<TokenLogprob> lp = take_content_logprobs(events, logprobs);
  content_logprobs_.insert(content_logprobs_.end(), lp.begin(), lp.end());
  fold(events);
}

void ChatResponder::fold(const std::vector<prompt::ParserEvent>& events) {
  for (const auto& e : events) {
    switch (e.kind) {
      case prompt::ParserEvent::Kind::kReasoning:
        reasoning_ += e.text;
        break;
      case prompt::ParserEvent::Kind::kContent:
        content_ += e.text;
        break;
      case prompt::ParserEvent::Kind::kToolCallBegin:
        calls_.push_back({e.text, ""});
        break;
      case prompt::ParserEvent::Kind::kToolArguments:
        if (!calls_.empty()) calls_.back().arguments += e.text;
        break;
      case prompt::ParserEvent::Kind::kToolCallEnd:
        break;
      case prompt::ParserEvent::Kind::kFinish:
        finish_ = e.finish;
        finished_ = true;
        break;
    }
  }
}

Value ChatResponder::choice_json() const {
  Value choice = Value::object(), msg = Value::object();
  msg.set("role", Value::from_string("assistant"));
  msg.set("content", content_.empty() && !calls_.empty() ? Value() : Value::from_string(content_));
  if (thinking_) msg.set("reasoning_content", Value::from_string(reasoning_));
  if (!calls_.empty()) {
    Value calls = Value::array();
    for (size_t i = 0; i < calls_.size(); ++i) {
      Value c = Value::object(), fn = Value::object();
      c.set("id", Value::from_string(tool_id(int(i))));
      c.set("type", Value::from_string("function"));
      fn.set("name", Value::from_string(calls_[i].name));
      fn.set("arguments", Value::from_string(calls_[i].arguments));
      c.set("function", fn);
      calls.items.push_back(std::move(c));
    }
    msg.set("tool_calls", std::move(calls));
  }
  choice.set("index", Value::from_int(choice_.index));
  choice.set("message", std::move(msg));
  choice.set("logprobs", choice_.logprobs ? chat_logprobs_json(content_logprobs_) : Value());
  choice.set("finish_reason", Value::from_string(chat_finish_reason(
                                  finished_ ? finish_ : prompt::FinishReason::kEndOfStream)));
  return choice;
}

std::string chat_completion_json(const std::vector<ChatResponder>& choices, const Usage& usage) {
  const std::vector<const ChatResponder*> sorted = by_index(choices);
  const ChatResponder& first = *sorted.front();
  Value r = response_head(first.id_, "chat.completion", first.created_, first.model_);
  Value out = Value::array();
  for (const ChatResponder* c : sorted) out.items.push_back(c->choice_json());
  r.set("choices", std::move(out));
  r.set("usage", usage_json(usage));
  return pyjson::dumps(r, false, true);
}

std::string ChatResponder::complete(const Usage& usage) const {
  return chat_completion_json({*this}, usage);
}

}  // namespace fathom::api
