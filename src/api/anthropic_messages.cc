#include "api/anthropic_messages.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <set>

#include "api/errors.h"
#include "api/request_util.h"

namespace fathom::api {

using pyjson::Value;
using namespace detail;

namespace {

// Text of a string or of a list of blocks of which only `text` (and tool_reference) count.
Result<std::string> block_text(const Value* c, const std::string& where) {
  if (c == nullptr) return std::string();
  if (c->is_string()) return c->text;
  if (!c->is_array()) return bad(where + ": content must be a string or a list of blocks");
  std::string out;
  bool first = true;
  for (const Value& b : c->items) {
    const Value* type = b.is_object() ? field(b, "type") : nullptr;
    if (type == nullptr || !type->is_string()) return bad(where + ": each block needs a 'type'");
    std::string piece;
    if (type->text == "text") {
      const Value* t = field(b, "text");
      if (t == nullptr || !t->is_string()) return bad(where + ": a text block needs 'text'");
      piece = t->text;
    } else {
      return bad(where + ": unsupported block type '" + type->text + "' here");
    }
    if (!first) out += "\n\n";
    first = false;
    out += piece;
  }
  return out;
}

// Anthropic's cache_control on `holder` ({"type": "ephemeral", "ttl": "5m" | "1h"}, ttl
// 5 minutes when absent), at path `where`: checked, and the longest ttl kept in `ttl_ms`.
Status read_cache_control(const Value& holder, const std::string& where, int64_t& ttl_ms) {
  const Value* cc = holder.is_object() ? field(holder, "cache_control") : nullptr;
  if (cc == nullptr) return Status::ok();
  const std::string at = where.empty() ? "cache_control" : where + ".cache_control";
  if (!cc->is_object()) return bad(at + ": must be an object");
  const Value* type = field(*cc, "type");
  if (type == nullptr || !type->is_string() || type->text != "ephemeral")
    return bad(at + ".type: must be \"ephemeral\"");
  int64_t ms = int64_t(5) * 60 * 1000;
  if (const Value* t = field(*cc, "ttl")) {
    if (!t->is_string() || (t->text != "5m" && t->text != "1h"))
      return bad(at + ".ttl: must be \"5m\" or \"1h\"");
    if (t->text == "1h") ms = int64_t(3600) * 1000;
  }
  ttl_ms = std::max(ttl_ms, ms);
  return Status::ok();
}

// Every cache_control a request may carry: on the request, on system blocks, tools, messages,
// their content blocks and the blocks inside a tool_result. It does not change the output;
// the server maps the longest ttl onto a KV-store retention class.
Status read_cache_controls(const Value& r, int64_t& ttl_ms) {
  FATHOM_RETURN_IF_ERROR(read_cache_control(r, "", ttl_ms));
  auto each = [&](const Value* list, const std::string& where,
                  const std::function<Status(const Value&, const std::string&)>& inner) {
    if (list == nullptr || !list->is_array()) return Status::ok();
    for (size_t i = 0; i < list->items.size(); ++i) {
      const std::string at = where + "." + std::to_string(i);
      FATHOM_RETURN_IF_ERROR(read_cache_control(list->items[i], at, ttl_ms));
      if (inner) FATHOM_RETURN_IF_ERROR(inner(list->items[i], at));
    }
    return Status::ok();
  };
  FATHOM_RETURN_IF_ERROR(each(field(r, "system"), "system", nullptr));
  FATHOM_RETURN_IF_ERROR(each(field(r, "tools"), "tools", nullptr));
  return each(field(r, "messages"), "messages", [&](const Value& m, const std::string& at) {
    if (!m.is_object()) return Status::ok();
    return each(field(m, "content"), at + ".content", [&](const Value& b, const std::string& bat) {
      return b.is_object() ? each(field(b, "content"), bat + ".content", nullptr) : Status::ok();
    });
  });
}

Value msg(const char* role, Value content) {
  Value m = Value::object();
  m.set("role", Value::from_string(role));
  m.set("content", std::move(content));
  return m;
}

// Every top-level field of a Messages request this adapter reads, including those it rejects
// with their own message. Any other is a 400, as Anthropic's API answers.
// clang-format off
constexpr std::string_view kMessagesFields[] = {
    // Anthropic
    "model", "messages", "system", "max_tokens", "stream", "temperature", "top_p", "top_k",
    "stop_sequences", "thinking", "tools", "tool_choice", "metadata", "service_tier",
    "output_config", "cache_control", "container", "mcp_servers", "context_management",
    "diagnostics", "inference_geo", "speed",
    // Fathom
    "retention"
};
// The parameters of POST /v1/messages/count_tokens.
constexpr std::string_view kCountTokensFields[] = {
    "model", "messages", "system", "thinking", "tools", "tool_choice", "output_config",
    "cache_control", "speed"
};
// clang-format on

// A custom tool's options beyond its definition: eager_input_streaming is what this server
// does (the input streams as it is generated); deferred loading (tool search), callers other
// than the model itself (code execution) and input examples (not rendered) are a 400 when
// asked for.
Status read_custom_tool_options(const Value& t, const std::string& where) {
  if (const Value* e = field(t, "eager_input_streaming");
      e && !e->is_null() && e->kind != Value::Kind::kBool)
    return bad(where + ".eager_input_streaming: must be a boolean");
  if (const Value* d = field(t, "defer_loading"); d && !d->is_null()) {
    if (d->kind != Value::Kind::kBool) return bad(where + ".defer_loading: must be a boolean");
    if (d->boolean) return bad(where + ".defer_loading: true is not supported by this server");
  }
  if (const Value* c = field(t, "allowed_callers"); c && !c->is_null()) {
    if (!c->is_array()) return bad(where + ".allowed_callers: must be a list");
    for (const Value& x : c->items)
      if (!x.is_string() || x.text != "direct")
        return bad(where + ".allowed_callers: only \"direct\" is supported by this server");
  }
  if (const Value* x = field(t, "input_examples"); x && !x->is_null()) {
    if (!x->is_array()) return bad(where + ".input_examples: must be a list");
    if (!x->items.empty())
      return bad(where + ".input_examples: tool input examples are not supported by this server");
  }
  return Status::ok();
}

}  // namespace

Result<ConversationRequest> parse_messages_request(std::string_view body,
                                                   const MessagesOptions& opt) {
  FATHOM_ASSIGN_OR_RETURN(const Value r, parse_body_object(body, opt.max_body_bytes));
  FATHOM_RETURN_IF_ERROR(
      opt.count_tokens
          ? reject_unknown_fields(r, kCountTokensFields, {}, /*anthropic=*/true)
          : reject_unknown_fields(r, kMessagesFields, opt.caller_fields, /*anthropic=*/true));
  ConversationRequest req;
  req.include_usage = true;
  if (const Value* m = field(r, "model")) {
    if (!m->is_string()) return bad("model: must be a string");
    req.model = m->text;
  }
  FATHOM_ASSIGN_OR_RETURN(const bool default_thinking,
                          apply_served_model(opt.models, opt.default_thinking, req.model));
  // Fields this build does not implement; metadata and service_tier do not change the output
  // and are accepted, and so does speed "standard" (the only speed there is). cache_control (a
  // caching hint: the prefix cache is automatic) is checked and chooses the KV store's retention
  // class unless `retention` names one.
  FATHOM_RETURN_IF_ERROR(reject_fields(
      r, {"container", "mcp_servers", "context_management", "diagnostics", "inference_geo"}, true));
  if (const Value* v = field(r, "speed"); v && (!v->is_string() || v->text != "standard"))
    return bad("speed: only \"standard\" is supported by this server");
  if (const Value* m = field(r, "metadata"); m && !m->is_object())
    return bad("metadata: must be an object");
  if (const Value* t = field(r, "service_tier")) {
    if (!t->is_string() || (t->text != "auto" && t->text != "standard_only"))
      return bad("service_tier: must be \"auto\" or \"standard_only\"");
  }
  if (const Value* s = field(r, "stream")) {
    if (s->kind != Value::Kind::kBool) return bad("stream: must be a boolean");
    req.stream = s->boolean;
  }
  // A count has no max_tokens (nor a thinking budget's bound from it).
  int64_t max_tokens = std::numeric_limits<int64_t>::max();
  if (!opt.count_tokens) {
    const Value* mt = field(r, "max_tokens");
    if (mt == nullptr) return bad("max_tokens: Field required");
    FATHOM_ASSIGN_OR_RETURN(max_tokens, integer(*mt, "max_tokens"));
    if (max_tokens <= 0) return bad("max_tokens: must be positive");
    req.sampling.max_tokens = max_tokens;
  }
  // The tenant: metadata.user_id (Anthropic's end-user id), a string or null.
  if (const Value* m = field(r, "metadata"); m && m->is_object()) {
    FATHOM_RETURN_IF_ERROR(reject_unknown_members(*m, "metadata", {"user_id"}, true));
    if (const Value* u = field(*m, "user_id"); u && !u->is_null()) {
      if (!u->is_string()) return bad("metadata.user_id: Input should be a valid string");
      if (!u->text.empty()) req.sampling.cache_salt = u->text;
    }
  }
  FATHOM_RETURN_IF_ERROR(read_cache_controls(r, req.sampling.cache_control_ttl_ms));
  FATHOM_RETURN_IF_ERROR(read_retention(r, req.sampling, true));
  FATHOM_RETURN_IF_ERROR(read_temperature_top_p(r, req.sampling));
  // Anthropic's range is [0, 1] (OpenAI's [0, 2]).
  if (req.sampling.temperature && *req.sampling.temperature > 1)
    return bad("temperature: Input should be less than or equal to 1");
  if (const Value* v = field(r, "top_k")) {
    FATHOM_ASSIGN_OR_RETURN(int64_t k, integer(*v, "top_k"));
    if (k < 0) return bad("top_k: must not be negative");
    req.sampling.top_k = k;
  }
  if (const Value* v = field(r, "stop_sequences")) {
    if (!v->is_array()) return bad("stop_sequences: must be a list of strings");
    if (v->items.size() > 16) return bad("stop_sequences: at most 16 sequences");
    for (const Value& s : v->items) {
      if (!s.is_string() || s.text.empty())
        return bad("stop_sequences: each sequence must be a non-empty string");
      req.sampling.stop.push_back(s.text);
    }
  }
  // Thinking: thinking.type, else output_config.effort turns it on, else the default.
  // output_config.format: Anthropic's structured outputs ({"type": "json_schema", "schema"}).
  req.thinking = default_thinking;
  if (const Value* oc = field(r, "output_config"); oc && !oc->is_null()) {
    if (!oc->is_object()) return bad("output_config: Input should be a valid dictionary");
    FATHOM_RETURN_IF_ERROR(
        reject_unknown_members(*oc, "output_config", {"effort", "format"}, true));
    if (const Value* f = field(*oc, "format"); f && !f->is_null()) {
      if (!f->is_object()) return bad("output_config.format: Input should be a valid dictionary");
      FATHOM_RETURN_IF_ERROR(
          reject_unknown_members(*f, "output_config.format", {"type", "schema"}, true));
      const Value* type = field(*f, "type");
      if (type == nullptr || !type->is_string() || type->text != "json_schema")
        return bad("output_config.format.type: must be \"json_schema\"");
      const Value* schema = field(*f, "schema");
      if (schema == nullptr) return bad("output_config.format.schema: Field required");
      if (!schema->is_object())
        return bad("output_config.format.schema: Input should be a valid dictionary");
      req.structured.kind = StructuredOutput::Kind::kJsonSchema;
      req.structured.text = pyjson::dumps(*schema, false, true);
      req.structured.field = "output_config.format";
      req.response_format = *f;  // shown to the model as Chat's response_format is
    }
    if (const Value* e = field(*oc, "effort"); e && !e->is_null()) {
      if (!e->is_string()) return bad("output_config.effort: must be a string");
      const std::string& n = e->text;
      if (n == "low") {
        req.effort = Effort::kLow;
      } else if (n == "medium" || n == "high") {
        req.effort = Effort::kHigh;
      } else if (n == "xhigh") {
        req.effort = Effort::kXhigh;
      } else if (n == "ultra" || n == "max") {
        req.effort = Effort::kMax;
      } else {
        return bad("output_config.effort: must be low, medium, high, xhigh, ultra or max");
      }
      req.thinking = true;
    }
  }
  if (const Value* t = field(r, "thinking")) {
    if (!t->is_object()) return bad("thinking: Input should be a valid dictionary");
    const Value* type = field(*t, "type");
    if (type == nullptr || !type->is_string() ||
        (type->text != "enabled" && type->text != "disabled" && type->text != "adaptive")) {
      return bad("thinking.type: must be \"enabled\", \"adaptive\" or \"disabled\"");
    }
    FATHOM_RETURN_IF_ERROR(
        reject_unknown_members(*t, "thinking", {"type", "budget_tokens", "display"}, true));
    // The thinking is shown as the model wrote it ("summarized" asks for it to be shown).
    if (const Value* d = field(*t, "display");
        d && !d->is_null() && (!d->is_string() || d->text != "summarized"))
      return bad("thinking.display: only \"summarized\" is supported by this server");
    req.thinking = type->text != "disabled";
    if (const Value* b = field(*t, "budget_tokens")) {
      if (type->text != "enabled")
        return bad("thinking.budget_tokens: only allowed with thinking.type \"enabled\"");
      FATHOM_ASSIGN_OR_RETURN(int64_t budget, integer(*b, "thinking.budget_tokens"));
      if (budget < 1024) return bad("thinking.budget_tokens: must be at least 1024");
      if (budget >= max_tokens) return bad("thinking.budget_tokens: must be less than max_tokens");
      req.reasoning_budget = budget;
    }
  }
  // Tools.
  std::set<std::string> names;
  if (const Value* tools = field(r, "tools")) {
    if (!tools->is_array()) return bad("tools: must be a list");
    for (size_t i = 0; i < tools->items.size(); ++i) {
      const Value& t = tools->items[i];
      std::string where = "tools." + std::to_string(i);
      if (!t.is_object()) return bad(where + ": must be an object");
      const Value* type = field(t, "type");
      if (type && type->is_string() && type->text.rfind("web_search", 0) == 0)
        return bad(where + ": server tools (web_search) are not supported");
      if (type && type->is_string() && type->text != "custom")
        return bad(where + ": unsupported tool type '" + type->text + "'");
      FATHOM_RETURN_IF_ERROR(reject_unknown_members(
          t, where,
          {"name", "description", "input_schema", "cache_control", "strict", "type",
           "eager_input_streaming", "defer_loading", "allowed_callers", "input_examples"},
          true));
      FATHOM_RETURN_IF_ERROR(read_custom_tool_options(t, where));
      const Value* name = field(t, "name");
      if (name == nullptr || !name->is_string() || !valid_tool_name(name->text))
        return bad(where + ".name: must be 1-128 characters of [A-Za-z0-9_-]");
      if (!names.insert(name->text).second)
        return bad(where + ".name: duplicate tool name '" + name->text + "'");
      FATHOM_RETURN_IF_ERROR(read_strict_tool(t, where + ".strict", name->text, req));
      const Value* schema = field(t, "input_schema");
      const Value* st = schema && schema->is_object() ? field(*schema, "type") : nullptr;
      if (st == nullptr || !st->is_string() || st->text != "object")
        return bad(where + ".input_schema: must be a JSON Schema with \"type\": \"object\"");
      Value fn = Value::object();
      fn.set("name", *name);
      const Value* d = field(t, "description");
      if (d && !d->is_string()) return bad(where + ".description: must be a string");
      fn.set("description", d ? *d : Value::from_string(""));
      fn.set("parameters", *schema);
      Value tool = Value::object();
      tool.set("type", Value::from_string("function"));
      tool.set("function", std::move(fn));
      req.tools.items.push_back(std::move(tool));
    }
  }
  if (const Value* tc = field(r, "tool_choice")) {
    if (!tc->is_object()) return bad("tool_choice: Input should be a valid dictionary");
    const Value* type = field(*tc, "type");
    if (type == nullptr || !type->is_string()) return bad("tool_choice.type: required");
    FATHOM_RETURN_IF_ERROR(reject_unknown_members(
        *tc, "tool_choice", {"type", "name", "disable_parallel_tool_use"}, true));
    if (const Value* d = field(*tc, "disable_parallel_tool_use")) {
      if (d->kind != Value::Kind::kBool)
        return bad("tool_choice.disable_parallel_tool_use: must be a boolean");
      if (d->boolean)
        return bad("tool_choice.disable_parallel_tool_use: true is not supported by this server");
    }
    if (type->text == "auto") {
      req.tool_choice = ToolChoice::kAuto;
    } else if (type->text == "any") {
      req.tool_choice = ToolChoice::kRequired;
    } else if (type->text == "none") {
      req.tool_choice = ToolChoice::kNone;
    } else if (type->text == "tool") {
      const Value* name = field(*tc, "name");
      if (name == nullptr || !name->is_string() || !names.count(name->text))
        return bad("tool_choice.name: names no defined tool");
      keep_only_tool(req, name->text);
    } else {
      return bad("tool_choice.type: must be auto, any, tool or none");
    }
    if (req.tool_choice == ToolChoice::kRequired && req.tools.items.empty())
      return bad("tool_choice: requires tools");
  }
  if (req.thinking && req.tool_choice == ToolChoice::kRequired)
    return bad("Thinking mode does not support this tool_choice");
  // System and messages.
  if (const Value* sys = field(r, "system")) {
    FATHOM_RETURN_IF_ERROR(check_no_placeholder(*sys));
    FATHOM_ASSIGN_OR_RETURN(std::string text, block_text(sys, "system"));
    if (!text.empty()) req.messages.items.push_back(msg("system", Value::from_string(text)));
  }
  const Value* msgs = field(r, "messages");
  if (msgs == nullptr || !msgs->is_array() || msgs->items.empty())
    return bad("messages: must be a non-empty list");
  FATHOM_RETURN_IF_ERROR(check_no_placeholder(*msgs));
  std::vector<std::string> pending;  // tool_use ids of the last assistant turn, unanswered
  for (size_t i = 0; i < msgs->items.size(); ++i) {
    const Value& m = msgs->items[i];
    std::string where = "messages." + std::to_string(i);
    const Value* role = m.is_object() ? field(m, "role") : nullptr;
    if (role == nullptr || !role->is_string()) return bad(where + ".role: required");
    const Value* content = field(m, "content");
    if (content == nullptr) return bad(where + ".content: required");
    if (role->text == "system") {
      FATHOM_ASSIGN_OR_RETURN(std::string text, block_text(content, where));
      req.messages.items.push_back(
          msg("user", Value::from_string("<system-reminder>\n" + text + "\n</system-reminder>")));
      continue;
    }
    if (role->text == "assistant") {
      if (!pending.empty())
        return bad(where + ": tool_use '" + pending.front() + "' has no tool_result");
      std::string text, reasoning;
      Value calls = Value::array();
      auto add_text = [](std::string& dst, const std::string& t) {
        if (!dst.empty()) dst += "\n\n";
        dst += t;
      };
      if (content->is_string()) {
        text = content->text;
      } else if (content->is_array()) {
        for (const Value& b : content->items) {
          const Value* type = b.is_object() ? field(b, "type") : nullptr;
          if (type == nullptr || !type->is_string())
            return bad(where + ": each block needs a 'type'");
          if (type->text == "text") {
            const Value* t = field(b, "text");
            if (t == nullptr || !t->is_string()) return bad(where + ": a text block needs 'text'");
            add_text(text, t->text);
          } else if (type->text == "thinking") {
            const Value* t = field(b, "thinking");
            if (t == nullptr || !t->is_string())
              return bad(where + ": a thinking block needs 'thinking'");
            add_text(reasoning, t->text);
          } else if (type->text == "redacted_thinking") {
            continue;
          } else if (type->text == "tool_use") {
            const Value* id = field(b, "id");
            const Value* name = field(b, "name");
            const Value* input = field(b, "input");
            if (id == nullptr || !id->is_string() || name == nullptr || !name->is_string() ||
                input == nullptr || !input->is_object()) {
              return bad(where + ": a tool_use block needs 'id', 'name' and an object 'input'");
            }
            pending.push_back(id->text);
            Value call = Value::object(), fn = Value::object();
            fn.set("name", *name);
            fn.set("arguments", Value::from_string(pyjson::dumps(*input, false)));
            call.set("id", *id);
            call.set("type", Value::from_string("function"));
            call.set("function", std::move(fn));
            calls.items.push_back(std::move(call));
          } else {
            return bad(where + ": unsupported assistant block type '" + type->text + "'");
          }
        }
      } else {
        return bad(where + ".content: must be a string or a list of blocks");
      }
      Value a = msg("assistant", Value::from_string(text));
      if (!reasoning.empty()) a.set("reasoning_content", Value::from_string(reasoning));
      if (!calls.items.empty()) a.set("tool_calls", std::move(calls));
      req.messages.items.push_back(std::move(a));
      continue;
    }
    if (role->text != "user") return bad(where + ".role: must be user or assistant");
    if (content->is_string()) {
      if (!pending.empty())
        return bad(where + ": tool_use '" + pending.front() + "' has no tool_result");
      req.messages.items.push_back(msg("user", *content));
      continue;
    }
    if (!content->is_array()) return bad(where + ".content: must be a string or a list of blocks");
    // An empty list would drop the turn from the prompt (Anthropic's API refuses it too).
    if (content->items.empty())
      return bad(where +
                 ": all messages must have non-empty content except for the optional final "
                 "assistant message");
    Value user_blocks = Value::array();
    auto flush_user = [&]() {
      if (user_blocks.items.empty()) return;
      bool has_image = false;
      for (const Value& b : user_blocks.items) has_image |= b.find("type")->text != "text";
      if (!has_image) {
        std::string joined;
        for (size_t k = 0; k < user_blocks.items.size(); ++k)
          joined += (k ? "\n\n" : "") + user_blocks.items[k].find("text")->text;
        req.messages.items.push_back(msg("user", Value::from_string(joined)));
      } else {
        req.messages.items.push_back(msg("user", user_blocks));
      }
      user_blocks = Value::array();
    };
    for (const Value& b : content->items) {
      const Value* type = b.is_object() ? field(b, "type") : nullptr;
      if (type == nullptr || !type->is_string()) return bad(where + ": each block needs a 'type'");
      if (type->text == "tool_result") {
        const Value* id = field(b, "tool_use_id");
        if (id == nullptr || !id->is_string())
          return bad(where + ": a tool_result needs 'tool_use_id'");
        auto it = std::find(pending.begin(), pending.end(), id->text);
        if (it == pending.end())
          return bad(where + ": tool_result '" + id->text +
                     "' answers no tool_use of the previous assistant turn");
        pending.erase(it);
        flush_user();
        FATHOM_ASSIGN_OR_RETURN(std::string text, block_text(field(b, "content"), where));
        Value t = msg("tool", Value::from_string(text));
        t.set("tool_call_id", *id);
        req.messages.items.push_back(std::move(t));
        continue;
      }
      if (!pending.empty())
        return bad(where + ": tool_use '" + pending.front() + "' has no tool_result");
      if (type->text == "text" || type->text == "tool_reference") {
        const Value* t = field(b, type->text == "text" ? "text" : "tool_name");
        if (t == nullptr || !t->is_string())
          return bad(where + ": a " + type->text + " block needs its text");
        Value tb = Value::object();
        tb.set("type", Value::from_string("text"));
        tb.set("text", *t);
        user_blocks.items.push_back(std::move(tb));
      } else if (type->text == "image") {
        if (!opt.images) {
          return bad(where + ".content." + std::to_string(&b - content->items.data()) +
                     ": image blocks are not supported: this model has no vision input");
        }
        if (opt.format == PromptFormat::kV4)
          return bad(where + ": this model does not take images");
        const Value* src = field(b, "source");
        if (src == nullptr || !src->is_object())
          return bad(where + ": an image block needs a 'source'");
        Value ib = Value::object();
        ib.set("type", Value::from_string("image"));
        ib.set("source", *src);
        user_blocks.items.push_back(std::move(ib));
      } else if (type->text == "document") {
        // The recipe replaces a document with "[Unsupported Document]"; dropping what the
        // client sent without a word is worse than saying so.
        return bad(where + ".content." + std::to_string(&b - content->items.data()) +
                   ": document blocks are not supported by this server");
      } else {
        return bad(where + ": unsupported block type '" + type->text + "'");
      }
    }
    flush_user();
  }
  if (!pending.empty()) return bad("tool_use '" + pending.front() + "' has no tool_result");
  return req;
}

const char* messages_stop_reason(prompt::FinishReason r) {
  switch (r) {
    case prompt::FinishReason::kLength:
      return "max_tokens";
    case prompt::FinishReason::kToolCalls:
      return "tool_use";
    case prompt::FinishReason::kStopSequence:
      return "stop_sequence";
    default:
      return "end_turn";
  }
}

namespace {

Value usage_json(const Usage& u, bool final_only_output = false) {
  Value v = Value::object();
  if (!final_only_output) {
    v.set("input_tokens", Value::from_int(u.prompt_tokens - u.cached_tokens));
    v.set("cache_creation_input_tokens", Value::from_int(0));
    v.set("cache_read_input_tokens", Value::from_int(u.cached_tokens));
  }
  v.set("output_tokens", Value::from_int(u.completion_tokens));
  if (!final_only_output) v.set("service_tier", Value::from_string("standard"));
  return v;
}

}  // namespace

std::string MessagesResponder::stream_error(const Status& s) const {
  return anthropic_stream_error(s);
}

std::string MessagesResponder::event(const char* name, const Value& data) const {
  return std::string("event: ") + name + "\ndata: " + pyjson::dumps(data, false, true) + "\n\n";
}

std::string MessagesResponder::open_block(Block b, const std::string& tool_name) {
  std::string out = close_block();
  ++index_;
  open_ = b;
  Value cb = Value::object();
  if (b == Block::kThinking) {
    cb.set("type", Value::from_string("thinking"));
    cb.set("thinking", Value::from_string(""));
    cb.set("signature", Value::from_string(""));
  } else if (b == Block::kText) {
    cb.set("type", Value::from_string("text"));
    cb.set("text", Value::from_string(""));
  } else {
    cb.set("type", Value::from_string("tool_use"));
    cb.set("id", Value::from_string(tool_id(tools_ - 1)));
    cb.set("name", Value::from_string(tool_name));
    cb.set("input", Value::object());
  }
  Value e = Value::object();
  e.set("type", Value::from_string("content_block_start"));
  e.set("index", Value::from_int(index_));
  e.set("content_block", std::move(cb));
  out += event("content_block_start", e);
  if (!pinged_) {
    pinged_ = true;
    Value p = Value::object();
    p.set("type", Value::from_string("ping"));
    out += event("ping", p);
  }
  return out;
}

std::string MessagesResponder::close_block() {
  if (open_ == Block::kNone) return "";
  std::string out;
  if (open_ == Block::kThinking) {
    Value d = Value::object(), e = Value::object();
    d.set("type", Value::from_string("signature_delta"));
    d.set("signature", Value::from_string(id_));
    e.set("type", Value::from_string("content_block_delta"));
    e.set("index", Value::from_int(index_));
    e.set("delta", std::move(d));
    out += event("content_block_delta", e);
  }
  Value e = Value::object();
  e.set("type", Value::from_string("content_block_stop"));
  e.set("index", Value::from_int(index_));
  out += event("content_block_stop", e);
  open_ = Block::kNone;
  return out;
}

std::string MessagesResponder::stream(const std::vector<prompt::ParserEvent>& events,
                                      const Usage& usage) {
  std::string out;
  if (!started_) {
    started_ = true;
    Value m = Value::object(), e = Value::object();
    m.set("id", Value::from_string("msg_" + id_));
    m.set("type", Value::from_string("message"));
    m.set("role", Value::from_string("assistant"));
    m.set("model", Value::from_string(model_));
    m.set("content", Value::array());
    m.set("stop_reason", Value());
    m.set("stop_sequence", Value());
    Usage start = usage;
    start.completion_tokens = 0;
    m.set("usage", usage_json(start));
    e.set("type", Value::from_string("message_start"));
    e.set("message", std::move(m));
    out += event("message_start", e);
    if (thinking_) out += open_block(Block::kThinking, "");
  }
  auto delta = [&](const char* type, const char* key, const std::string& text) {
    Value d = Value::object(), e = Value::object();
    d.set("type", Value::from_string(type));
    d.set(key, Value::from_string(text));
    e.set("type", Value::from_string("content_block_delta"));
    e.set("index", Value::from_int(index_));
    e.set("delta", std::move(d));
    out += event("content_block_delta", e);
  };
  using K = prompt::ParserEvent::Kind;
  for (const auto& ev : events) {
    switch (ev.kind) {
      case K::kReasoning:
        if (open_ != Block::kThinking) out += open_block(Block::kThinking, "");
        delta("thinking_delta", "thinking", ev.text);
        break;
      case K::kContent:
        if (open_ != Block::kText) out += open_block(Block::kText, "");
        delta("text_delta", "text", ev.text);
        break;
      case K::kToolCallBegin:
        ++tools_;
        out += open_block(Block::kToolUse, ev.text);
        break;
      case K::kToolArguments:
        if (open_ == Block::kToolUse) delta("input_json_delta", "partial_json", ev.text);
        break;
      case K::kToolCallEnd:
        out += close_block();
        break;
      case K::kFinish: {
        out += close_block();
        Value d = Value::object(), e = Value::object();
        d.set("stop_reason", Value::from_string(messages_stop_reason(ev.finish)));
        d.set("stop_sequence",
              ev.stop_sequence.empty() ? Value() : Value::from_string(ev.stop_sequence));
        e.set("type", Value::from_string("message_delta"));
        e.set("delta", std::move(d));
        e.set("usage", usage_json(usage, true));
        out += event("message_delta", e);
        Value s = Value::object();
        s.set("type", Value::from_string("message_stop"));
        out += event("message_stop", s);
        break;
      }
    }
  }
  add(events);
  return out;
}

void MessagesResponder::add(const std::vector<prompt::ParserEvent>& events) {
  using K = prompt::ParserEvent::Kind;
  for (const auto& ev : events) {
    switch (ev.kind) {
      case K::kReasoning:
        if (parts_.empty() || parts_.back().kind != Block::kThinking)
          parts_.push_back({Block::kThinking, "", ""});
        parts_.back().text += ev.text;
        break;
      case K::kContent:
        if (parts_.empty() || parts_.back().kind != Block::kText)
          parts_.push_back({Block::kText, "", ""});
        parts_.back().text += ev.text;
        break;
      case K::kToolCallBegin:
        parts_.push_back({Block::kToolUse, "", ev.text});
        break;
      case K::kToolArguments:
        if (!parts_.empty() && parts_.back().kind == Block::kToolUse) parts_.back().text += ev.text;
        break;
      case K::kToolCallEnd:
        break;
      case K::kFinish:
        finish_ = ev.finish;
        stop_sequence_ = ev.stop_sequence;
        break;
    }
  }
}

std::string MessagesResponder::complete(const Usage& usage) const {
  Value m = Value::object(), content = Value::array();
  m.set("id", Value::from_string("msg_" + id_));
  m.set("type", Value::from_string("message"));
  m.set("role", Value::from_string("assistant"));
  m.set("model", Value::from_string(model_));
  int tool = 0;
  for (const Part& p : parts_) {
    Value b = Value::object();
    if (p.kind == Block::kThinking) {
      b.set("type", Value::from_string("thinking"));
      b.set("thinking", Value::from_string(p.text));
      b.set("signature", Value::from_string(id_));
    } else if (p.kind == Block::kText) {
      b.set("type", Value::from_string("text"));
      b.set("text", Value::from_string(p.text));
    } else {
      b.set("type", Value::from_string("tool_use"));
      b.set("id", Value::from_string(tool_id(tool++)));
      b.set("name", Value::from_string(p.name));
      auto input = pyjson::parse(p.text);
      b.set("input",
            input.is_ok() && input->is_object() ? std::move(input).value() : Value::object());
    }
    content.items.push_back(std::move(b));
  }
  m.set("content", std::move(content));
  m.set("stop_reason", Value::from_string(messages_stop_reason(finish_)));
  m.set("stop_sequence", stop_sequence_.empty() ? Value() : Value::from_string(stop_sequence_));
  m.set("usage", usage_json(usage));
  return pyjson::dumps(m, false, true);
}

}  // namespace fathom::api
