#include "api/openai_responses.h"

#include <algorithm>
#include <map>
#include <set>

#include "api/errors.h"
#include "api/request_util.h"

namespace fathom::api {

using pyjson::Value;
using namespace detail;

namespace {

Value make_msg(const char* role, Value content) {
  Value m = Value::object();
  m.set("role", Value::from_string(role));
  m.set("content", std::move(content));
  return m;
}

// The text of a Responses message content: a string, or input_text/output_text parts.
Result<Value> message_content(const Value* c, const std::string& where, bool allow_images,
                              const ResponsesOptions& opt) {
  if (c == nullptr) return bad(where + ": 'content' is required");
  if (c->is_string()) return *c;
  if (!c->is_array()) return bad(where + ": 'content' must be a string or a list of parts");
  Value blocks = Value::array();
  bool images = false;
  for (size_t k = 0; k < c->items.size(); ++k) {
    const Value& p = c->items[k];
    const Value* type = p.is_object() ? field(p, "type") : nullptr;
    if (type == nullptr || !type->is_string())
      return bad(where + ": each content part needs a 'type'");
    if (type->text == "input_text" || type->text == "output_text" || type->text == "text") {
      const Value* t = field(p, "text");
      if (t == nullptr || !t->is_string()) return bad(where + ": a text part needs 'text'");
      Value b = Value::object();
      b.set("type", Value::from_string("text"));
      b.set("text", *t);
      blocks.items.push_back(std::move(b));
    } else if (type->text == "input_image" && allow_images) {
      if (!opt.images) {
        return bad(where + ".content[" + std::to_string(k) +
                   "]: input_image parts are not supported: this model has no vision input");
      }
      if (opt.format == PromptFormat::kV4) return bad(where + ": this model does not take images");
      const Value* u = field(p, "image_url");
      if (u == nullptr || !u->is_string())
        return bad(where + ": an input_image needs 'image_url' (file_id is not supported)");
      Value b = Value::object(), iu = Value::object();
      b.set("type", Value::from_string("image_url"));
      iu.set("url", *u);
      b.set("image_url", iu);
      blocks.items.push_back(std::move(b));
      images = true;
    } else {
      return bad(where + ": unsupported content part type '" + type->text + "'");
    }
  }
  return joined_or_blocks(std::move(blocks), images);
}

constexpr std::string_view kApplyPatchDescription =
    "Apply a patch to files. The input is the patch text in the apply_patch format: "
    "'*** Begin Patch', then for each file '*** Add File: PATH', '*** Delete File: PATH' or "
    "'*** Update File: PATH' (optionally '*** Move to: PATH') with hunks whose lines start with "
    "' ', '-' or '+', then '*** End Patch'.";

// Responses fields this build does not implement (a 400 naming the field), and those accepted
// only at the value that means "nothing to do". metadata, user, safety_identifier and
// prompt_cache_key do not change the output and are accepted; so is reasoning.summary (OpenAI
// documents summaries as best effort; none is produced) and include
// "reasoning.encrypted_content" (reasoning items carry their text in `content`, which this
// adapter reads back, so the round trip the field exists for works without encryption).
Status reject_unimplemented(const Value& r) {
  FATHOM_RETURN_IF_ERROR(reject_fields(
      r, {"max_tool_calls", "top_logprobs", "prompt", "conversation", "logit_bias",
          "context_management", "moderation", "prompt_cache_options", "prompt_cache_retention"}));
  // stream_options holds only include_obfuscation (random padding on stream events), which
  // this server does not add: accepted at false.
  if (const Value* so = field(r, "stream_options")) {
    if (!so->is_object()) return bad("'stream_options' must be an object");
    for (const std::string& k : so->keys) {
      if (k != "include_obfuscation")
        return bad("'stream_options." + k + "' is not supported by this server");
    }
    const Value* ob = field(*so, "include_obfuscation");
    if (ob != nullptr && ob->kind != Value::Kind::kBool)
      return bad("'stream_options.include_obfuscation' must be a boolean");
    if (ob != nullptr && ob->boolean)
      return bad("'stream_options.include_obfuscation' true is not supported by this server");
  }
  FATHOM_RETURN_IF_ERROR(require_bool(r, "background", false));
  FATHOM_RETURN_IF_ERROR(require_bool(r, "store", false));
  FATHOM_RETURN_IF_ERROR(require_bool(r, "parallel_tool_calls", true));
  for (const char* k : {"user", "safety_identifier", "prompt_cache_key"})
    FATHOM_RETURN_IF_ERROR(optional_string(r, k));
  if (const Value* m = field(r, "metadata"); m && !m->is_object())
    return bad("'metadata' must be an object");
  if (const Value* t = field(r, "service_tier")) {
    if (!t->is_string() || (t->text != "auto" && t->text != "default"))
      return bad("'service_tier' must be \"auto\" or \"default\" on this server");
  }
  if (const Value* t = field(r, "truncation")) {
    if (!t->is_string() || t->text != "disabled")
      return bad("'truncation' other than \"disabled\" is not supported by this server");
  }
  if (const Value* inc = field(r, "include")) {
    if (!inc->is_array()) return bad("'include' must be a list");
    for (const Value& x : inc->items) {
      if (!x.is_string() || x.text != "reasoning.encrypted_content") {
        return bad("'include' value " + (x.is_string() ? "'" + x.text + "'" : "") +
                   " is not supported by this server");
      }
    }
  }
  // `text` and `reasoning` are objects of known keys (a wrong type or a misspelt key was
  // silently ignored before).
  auto object_of = [](const Value& v, const std::string& where,
                      std::initializer_list<std::string_view> keys) -> Status {
    if (!v.is_object()) return bad("'" + where + "' must be an object");
    return reject_unknown_members(v, where, keys);
  };
  if (const Value* text = field(r, "text"); text && !text->is_null()) {
    FATHOM_RETURN_IF_ERROR(object_of(*text, "text", {"format", "verbosity"}));
    const Value* v = field(*text, "verbosity");
    if (v != nullptr && !v->is_null() && (!v->is_string() || v->text != "medium"))
      return bad("'text.verbosity' other than \"medium\" is not supported by this server");
    if (const Value* f = field(*text, "format"); f && !f->is_null())
      FATHOM_RETURN_IF_ERROR(
          object_of(*f, "text.format", {"type", "name", "schema", "description", "strict"}));
  }
  if (const Value* rs = field(r, "reasoning"); rs && !rs->is_null()) {
    FATHOM_RETURN_IF_ERROR(
        object_of(*rs, "reasoning", {"effort", "summary", "generate_summary", "context", "mode"}));
    // The reasoning of earlier turns is the prompt format's to keep or drop; one mode.
    if (const Value* c = field(*rs, "context"); c && !c->is_null())
      return bad("'reasoning.context' is not supported by this server");
    if (const Value* m = field(*rs, "mode");
        m && !m->is_null() && (!m->is_string() || m->text != "standard"))
      return bad("'reasoning.mode' other than \"standard\" is not supported by this server");
    for (const char* k : {"summary", "generate_summary"}) {
      const Value* v = field(*rs, k);
      if (v != nullptr && !v->is_null() &&
          (!v->is_string() || (v->text != "auto" && v->text != "concise" && v->text != "detailed")))
        return bad("'reasoning." + std::string(k) + "' must be auto, concise or detailed");
    }
  }
  return Status::ok();
}

// Every top-level field of a Responses request this adapter reads, including those it rejects
// with their own message. Any other is a 400.
// clang-format off
constexpr std::string_view kResponsesFields[] = {
    // OpenAI
    "model", "stream", "input", "instructions", "max_output_tokens", "temperature", "top_p",
    "reasoning", "text", "tools", "tool_choice", "parallel_tool_calls", "include", "truncation",
    "service_tier", "metadata", "user", "safety_identifier", "prompt_cache_key", "background",
    "store", "stream_options", "previous_response_id", "max_tool_calls", "top_logprobs", "prompt",
    "conversation", "logit_bias", "context_management", "moderation", "prompt_cache_options",
    "prompt_cache_retention",
    // vLLM (cache_salt), Fathom (retention)
    "cache_salt", "retention"
};
// The parameters of POST /v1/responses/input_tokens.
constexpr std::string_view kInputTokensFields[] = {
    "model", "input", "instructions", "reasoning", "text", "tools", "tool_choice",
    "parallel_tool_calls", "truncation", "previous_response_id", "conversation", "personality"
};
// clang-format on

}  // namespace

Result<ConversationRequest> parse_responses_request(std::string_view body,
                                                    const ResponsesOptions& opt) {
  FATHOM_ASSIGN_OR_RETURN(const Value r, parse_body_object(body, opt.max_body_bytes));
  FATHOM_RETURN_IF_ERROR(opt.input_tokens
                             ? reject_unknown_fields(r, kInputTokensFields, {})
                             : reject_unknown_fields(r, kResponsesFields, opt.caller_fields));
  if (opt.input_tokens) FATHOM_RETURN_IF_ERROR(reject_fields(r, {"personality"}));
  if (field(r, "previous_response_id"))
    return bad("'previous_response_id' is not supported; send the whole conversation");
  ConversationRequest req;
  req.include_usage = true;
  FATHOM_RETURN_IF_ERROR(read_model_and_stream(r, req));
  FATHOM_ASSIGN_OR_RETURN(const bool default_thinking,
                          apply_served_model(opt.models, opt.default_thinking, req.model));
  FATHOM_RETURN_IF_ERROR(reject_unimplemented(r));
  if (const Value* v = field(r, "max_output_tokens")) {
    FATHOM_ASSIGN_OR_RETURN(int64_t t, integer(*v, "max_output_tokens"));
    if (t <= 0) return bad("'max_output_tokens' must be positive");
    req.sampling.max_tokens = t;
  }
  FATHOM_RETURN_IF_ERROR(read_cache_salt(r, req.sampling, {"safety_identifier", "user"}));
  FATHOM_RETURN_IF_ERROR(read_retention(r, req.sampling));
  FATHOM_RETURN_IF_ERROR(read_temperature_top_p(r, req.sampling));
  req.thinking = default_thinking;
  if (const Value* rs = field(r, "reasoning")) {
    if (const Value* e = rs->is_object() ? field(*rs, "effort") : nullptr; e && !e->is_null()) {
      if (!e->is_string()) return bad("'reasoning.effort' must be a string");
      const std::string& n = e->text;
      if (n == "none") {
        req.thinking = false;
      } else if (n == "minimal" || n == "low") {
        req.thinking = true, req.effort = Effort::kLow;
      } else if (n == "medium" || n == "high") {
        req.thinking = true, req.effort = Effort::kHigh;
      } else if (n == "xhigh") {
        req.thinking = true, req.effort = Effort::kXhigh;
      } else if (n == "max") {
        req.thinking = true, req.effort = Effort::kMax;
      } else {
        return bad(
            "'reasoning.effort' must be one of none, minimal, low, medium, high, xhigh, max");
      }
    }
  }
  if (const Value* text = field(r, "text")) {
    if (const Value* f = text->is_object() ? field(*text, "format") : nullptr; f && !f->is_null()) {
      const Value* type = f->is_object() ? field(*f, "type") : nullptr;
      if (type == nullptr || !type->is_string()) return bad("'text.format.type' is required");
      if (type->text == "json_object") {
        req.json_object = true;
        req.structured.kind = StructuredOutput::Kind::kJsonObject;
        req.structured.field = "text.format";
      } else if (type->text == "json_schema") {
        if (const Value* st = field(*f, "strict"); st && st->kind != Value::Kind::kBool)
          return bad("'text.format.strict' must be a boolean");
        const Value* schema = field(*f, "schema");
        if (schema == nullptr) return bad("'text.format.schema' is required");
        FATHOM_RETURN_IF_ERROR(set_json_schema(*schema, "text.format.schema", req.structured));
        req.response_format = *f;
      } else if (type->text != "text") {
        return bad("'text.format.type' must be text, json_object or json_schema");
      }
    }
  }
  // Tools: function tools, namespaces flattened to ns::name, the apply_patch custom tool.
  std::set<std::string> names;
  auto add_function = [&](const std::string& name, const std::string& description,
                          const Value* params, const std::string& where) -> Status {
    std::string unique = name;
    for (int k = 2; names.count(unique); ++k) unique = name + "_" + std::to_string(k);
    names.insert(unique);
    Value fn = Value::object();
    fn.set("name", Value::from_string(unique));
    fn.set("description", Value::from_string(description));
    if (params != nullptr) {
      const Value* pt = params->is_object() ? field(*params, "type") : nullptr;
      if (pt == nullptr || !pt->is_string() || pt->text != "object")
        return bad(where + ": 'parameters' must be a JSON Schema with \"type\": \"object\"");
      fn.set("parameters", *params);
    } else {
      Value p = Value::object();
      p.set("type", Value::from_string("object"));
      p.set("properties", Value::object());
      fn.set("parameters", p);
    }
    Value tool = Value::object();
    tool.set("type", Value::from_string("function"));
    tool.set("function", std::move(fn));
    req.tools.items.push_back(std::move(tool));
    return Status::ok();
  };
  if (const Value* tools = field(r, "tools")) {
    if (!tools->is_array()) return bad("'tools' must be a list");
    for (size_t i = 0; i < tools->items.size(); ++i) {
      const Value& t = tools->items[i];
      std::string where = "tools[" + std::to_string(i) + "]";
      const Value* type = t.is_object() ? field(t, "type") : nullptr;
      if (type == nullptr || !type->is_string()) return bad(where + ": 'type' is required");
      const Value* name = field(t, "name");
      const Value* desc = field(t, "description");
      std::string d = desc && desc->is_string() ? desc->text : "";
      if (type->text == "function") {
        if (name == nullptr || !name->is_string() || !valid_tool_name(name->text))
          return bad(where + ": the name must be 1-128 characters of [A-Za-z0-9_-]");
        if (names.count(name->text))
          return bad(where + ": duplicate tool name '" + name->text + "'");
        FATHOM_RETURN_IF_ERROR(read_strict_tool(t, where + ".strict", name->text, req));
        FATHOM_RETURN_IF_ERROR(add_function(name->text, d, field(t, "parameters"), where));
      } else if (type->text == "namespace") {
        const Value* inner = field(t, "tools");
        if (name == nullptr || !name->is_string() || inner == nullptr || !inner->is_array())
          return bad(where + ": a namespace needs 'name' and 'tools'");
        for (const Value& f : inner->items) {
          const Value* fname = f.is_object() ? field(f, "name") : nullptr;
          if (fname == nullptr || !fname->is_string() || !valid_tool_name(fname->text))
            return bad(where + ": namespace tools need valid names");
          const Value* fdesc = field(f, "description");
          std::string full = d.empty()
                                 ? (fdesc && fdesc->is_string() ? fdesc->text : "")
                                 : d + "\n\n" + (fdesc && fdesc->is_string() ? fdesc->text : "");
          FATHOM_RETURN_IF_ERROR(
              add_function(name->text + "::" + fname->text, full, field(f, "parameters"), where));
        }
      } else if (type->text == "custom") {
        if (name == nullptr || !name->is_string() || name->text != "apply_patch")
          return bad(where + ": the only supported custom tool is apply_patch");
        Value params = Value::object(), props = Value::object(), input = Value::object(),
              required = Value::array();
        input.set("type", Value::from_string("string"));
        props.set("input", input);
        params.set("type", Value::from_string("object"));
        params.set("properties", props);
        required.items.push_back(Value::from_string("input"));
        params.set("required", required);
        FATHOM_RETURN_IF_ERROR(
            add_function("apply_patch", std::string(kApplyPatchDescription), &params, where));
      } else if (type->text.rfind("web_search", 0) == 0) {
        if (opt.ignore_web_search_tools) continue;
        return bad(where + ": server tools (" + type->text + ") are not supported by this server");
      } else {
        return bad(where + ": unsupported tool type '" + type->text + "'");
      }
    }
  }
  if (const Value* tc = field(r, "tool_choice")) {
    if (tc->is_string() && (tc->text == "none" || tc->text == "auto" || tc->text == "required")) {
      req.tool_choice = tc->text == "none"   ? ToolChoice::kNone
                        : tc->text == "auto" ? ToolChoice::kAuto
                                             : ToolChoice::kRequired;
    } else if (tc->is_object() && field(*tc, "name") && field(*tc, "name")->is_string()) {
      std::string n = field(*tc, "name")->text;
      if (!names.count(n)) return bad("'tool_choice' names an unknown tool '" + n + "'");
      keep_only_tool(req, n);
    } else {
      return bad(
          "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"name\": ...}");
    }
    if (req.tool_choice == ToolChoice::kRequired && req.tools.items.empty())
      return bad("'tool_choice' requires 'tools'");
  }
  if (req.thinking && req.tool_choice == ToolChoice::kRequired)
    return bad("Thinking mode does not support this tool_choice");
  // Conversation.
  if (const Value* ins = field(r, "instructions")) {
    if (!ins->is_string()) return bad("'instructions' must be a string");
    FATHOM_RETURN_IF_ERROR(check_no_placeholder(*ins));
    if (!ins->text.empty()) req.messages.items.push_back(make_msg("system", *ins));
  }
  const Value* input = field(r, "input");
  if (input == nullptr) return bad("'input' is required");
  FATHOM_RETURN_IF_ERROR(check_no_placeholder(*input));
  if (input->is_string()) {
    req.messages.items.push_back(make_msg("user", *input));
  } else if (input->is_array()) {
    std::string reasoning;                 // from reasoning items, for the next assistant turn
    Value assistant;                       // the assistant turn being assembled (null when none)
    std::map<std::string, Value> calls;    // call_id -> tool call, pending its output
    std::map<std::string, Value> outputs;  // call_id -> tool message
    std::set<std::string> seen_ids;
    auto flush = [&]() -> Status {
      if (!calls.empty()) {
        for (const auto& [id, c] : calls)
          if (!outputs.count(id))
            return bad("function call '" + id + "' has no function_call_output");
      }
      if (!assistant.is_null()) {
        if (!calls.empty()) {
          Value tc = Value::array();
          for (auto& [id, c] : calls) tc.items.push_back(c);  // sorted by call_id
          assistant.set("tool_calls", tc);
        }
        if (!reasoning.empty()) assistant.set("reasoning_content", Value::from_string(reasoning));
        req.messages.items.push_back(std::move(assistant));
        assistant = Value();
        reasoning.clear();
      }
      for (auto& [id, o] : outputs) req.messages.items.push_back(std::move(o));
      calls.clear();
      outputs.clear();
      return Status::ok();
    };
    auto ensure_assistant = [&]() {
      if (assistant.is_null()) assistant = make_msg("assistant", Value::from_string(""));
    };
    for (size_t i = 0; i < input->items.size(); ++i) {
      const Value& it = input->items[i];
      std::string where = "input[" + std::to_string(i) + "]";
      if (!it.is_object()) return bad(where + ": must be an object");
      const Value* type = field(it, "type");
      std::string t = type && type->is_string() ? type->text : (field(it, "role") ? "message" : "");
      if (t == "message") {
        const Value* role = field(it, "role");
        if (role == nullptr || !role->is_string()) return bad(where + ": a message needs 'role'");
        if (role->text == "assistant") {
          if (!calls.empty()) FATHOM_RETURN_IF_ERROR(flush());
          FATHOM_ASSIGN_OR_RETURN(Value c,
                                  message_content(field(it, "content"), where, false, opt));
          ensure_assistant();
          std::string prev = assistant.find("content")->text;
          assistant.set("content",
                        Value::from_string(prev.empty() ? c.text : prev + "\n\n" + c.text));
          continue;
        }
        FATHOM_RETURN_IF_ERROR(flush());
        if (role->text == "user" || role->text == "developer") {
          FATHOM_ASSIGN_OR_RETURN(Value c, message_content(field(it, "content"), where, true, opt));
          req.messages.items.push_back(make_msg("user", std::move(c)));
        } else if (role->text == "system") {
          FATHOM_ASSIGN_OR_RETURN(Value c,
                                  message_content(field(it, "content"), where, false, opt));
          if (!c.text.empty()) req.messages.items.push_back(make_msg("system", std::move(c)));
        } else {
          return bad(where + ": unsupported role '" + role->text + "'");
        }
      } else if (t == "reasoning") {
        if (!calls.empty()) FATHOM_RETURN_IF_ERROR(flush());
        const Value* content = field(it, "content");
        if (field(it, "encrypted_content"))
          return bad(where + ": 'encrypted_content' is not supported");
        if (content != nullptr && content->is_array()) {
          for (const Value& p : content->items) {
            const Value* text = p.is_object() ? field(p, "text") : nullptr;
            if (text == nullptr || !text->is_string()) continue;
            if (!reasoning.empty()) reasoning += "\n";
            reasoning += text->text;
          }
        }
      } else if (t == "function_call" || t == "custom_tool_call") {
        const Value* id = field(it, "call_id");
        const Value* name = field(it, "name");
        if (id == nullptr || !id->is_string() || name == nullptr || !name->is_string())
          return bad(where + ": a call needs 'call_id' and 'name'");
        if (!seen_ids.insert(id->text).second)
          return bad(where + ": duplicate call_id '" + id->text + "'");
        std::string args;
        if (t == "function_call") {
          const Value* a = field(it, "arguments");
          if (a == nullptr || !a->is_string()) return bad(where + ": 'arguments' must be a string");
          args = a->text;
        } else {
          const Value* in = field(it, "input");
          if (in == nullptr || !in->is_string()) return bad(where + ": 'input' must be a string");
          Value o = Value::object();
          o.set("input", *in);
          args = pyjson::dumps(o, false);
        }
        ensure_assistant();
        Value call = Value::object(), fn = Value::object();
        fn.set("name", *name);
        fn.set("arguments", Value::from_string(args));
        call.set("id", *id);
        call.set("type", Value::from_string("function"));
        call.set("function", fn);
        calls[id->text] = std::move(call);
      } else if (t == "function_call_output" || t == "custom_tool_call_output") {
        const Value* id = field(it, "call_id");
        if (id == nullptr || !id->is_string()) return bad(where + ": an output needs 'call_id'");
        if (!calls.count(id->text))
          return bad(where + ": output for unknown call_id '" + id->text + "'");
        if (outputs.count(id->text))
          return bad(where + ": duplicate output for '" + id->text + "'");
        const Value* out = field(it, "output");
        std::string text;
        if (out != nullptr && out->is_string()) {
          text = out->text;
        } else if (out != nullptr) {
          FATHOM_ASSIGN_OR_RETURN(Value c, message_content(out, where, false, opt));
          text = c.text;
        }
        Value tm = make_msg("tool", Value::from_string(text));
        tm.set("tool_call_id", *id);
        outputs[id->text] = std::move(tm);
        if (outputs.size() == calls.size()) FATHOM_RETURN_IF_ERROR(flush());
      } else {
        return bad(where + ": unsupported input item type '" + t + "'");
      }
    }
    FATHOM_RETURN_IF_ERROR(flush());
  } else {
    return bad("'input' must be a string or a list of items");
  }
  if (req.messages.items.empty()) return bad("'input' holds no message");
  if (req.json_object && !mentions_json(*input) &&
      !(field(r, "instructions") && mentions_json(*field(r, "instructions")))) {
    return bad("text.format json_object requires the word \"json\" in the input");
  }
  return req;
}

// ---- output ---------------------------------------------------------------------------

std::string ResponsesResponder::event(const char* type, Value data) {
  Value e = Value::object();
  e.set("type", Value::from_string(type));
  e.set("sequence_number", Value::from_int(seq_++));
  for (size_t i = 0; i < data.keys.size(); ++i) e.set(data.keys[i], data.items[i]);
  return std::string("event: ") + type + "\ndata: " + pyjson::dumps(e, false, true) + "\n\n";
}

Value ResponsesResponder::item_json(const Item& it, bool done) const {
  Value v = Value::object();
  v.set("id", Value::from_string(it.id));
  switch (it.kind) {
    case Item::Kind::kReasoning: {
      v.set("type", Value::from_string("reasoning"));
      v.set("summary", Value::array());
      Value content = Value::array(), part = Value::object();
      part.set("type", Value::from_string("reasoning_text"));
      part.set("text", Value::from_string(done ? it.text : ""));
      content.items.push_back(part);
      v.set("content", content);
      break;
    }
    case Item::Kind::kMessage: {
      v.set("type", Value::from_string("message"));
      v.set("status", Value::from_string(done ? "completed" : "in_progress"));
      v.set("role", Value::from_string("assistant"));
      Value content = Value::array();
      if (done) {
        Value part = Value::object();
        part.set("type", Value::from_string("output_text"));
        part.set("text", Value::from_string(it.text));
        part.set("annotations", Value::array());
        content.items.push_back(part);
      }
      v.set("content", content);
      break;
    }
    case Item::Kind::kFunctionCall: {
      v.set("type", Value::from_string("function_call"));
      v.set("status", Value::from_string(done ? "completed" : "in_progress"));
      size_t sep = it.name.find("::");
      v.set("name",
            Value::from_string(sep == std::string::npos ? it.name : it.name.substr(sep + 2)));
      if (sep != std::string::npos) v.set("namespace", Value::from_string(it.name.substr(0, sep)));
      v.set("call_id", Value::from_string(it.call_id));
      v.set("arguments", Value::from_string(done ? it.text : ""));
      break;
    }
  }
  return v;
}

Value ResponsesResponder::response_json(const Usage& u, bool final, const Status* error) const {
  Value r = Value::object();
  r.set("id", Value::from_string("resp_" + id_));
  r.set("object", Value::from_string("response"));
  r.set("created_at", Value::from_int(created_));
  bool incomplete = final && !error && finish_ == prompt::FinishReason::kLength;
  r.set("status", Value::from_string(error        ? "failed"
                                     : !final     ? "in_progress"
                                     : incomplete ? "incomplete"
                                                  : "completed"));
  if (error) {
    Value e = Value::object();
    e.set("code",
          Value::from_string(http_status_of(*error) < 500 ? "invalid_prompt" : "server_error"));
    e.set("message", Value::from_string(error->message()));
    r.set("error", std::move(e));
  } else {
    r.set("error", Value());
  }
  if (incomplete) {
    Value d = Value::object();
    d.set("reason", Value::from_string("max_output_tokens"));
    r.set("incomplete_details", d);
  } else {
    r.set("incomplete_details", Value());
  }
  r.set("model", Value::from_string(model_));
  Value output = Value::array();
  if (final) {
    for (size_t i = 0; i < items_.size(); ++i) {
      Value it = item_json(items_[i], true);
      if (items_[i].kind == Item::Kind::kMessage) {
        bool call_follows = false;
        for (size_t k = i + 1; k < items_.size(); ++k)
          call_follows |= items_[k].kind == Item::Kind::kFunctionCall;
        it.set("phase", Value::from_string(call_follows ? "commentary" : "final_answer"));
      }
      output.items.push_back(std::move(it));
    }
  }
  r.set("output", output);
  if (final) {
    Value usage = Value::object(), in_details = Value::object(), out_details = Value::object();
    usage.set("input_tokens", Value::from_int(u.prompt_tokens));
    in_details.set("cached_tokens", Value::from_int(u.cached_tokens));
    usage.set("input_tokens_details", in_details);
    usage.set("output_tokens", Value::from_int(u.completion_tokens));
    out_details.set("reasoning_tokens", Value::from_int(u.reasoning_tokens));
    usage.set("output_tokens_details", out_details);
    usage.set("total_tokens", Value::from_int(u.prompt_tokens + u.completion_tokens));
    r.set("usage", usage);
  } else {
    r.set("usage", Value());
  }
  return r;
}

std::string ResponsesResponder::open_item(Item::Kind k, const std::string& name) {
  std::string out = close_item();
  Item it{k, "", "", name, ""};
  int n = int(items_.size());
  it.id = (k == Item::Kind::kReasoning ? "rs_"
           : k == Item::Kind::kMessage ? "msg_"
                                       : "fc_") +
          id_ + "_" + std::to_string(n);
  if (k == Item::Kind::kFunctionCall) it.call_id = "call_" + id_ + "_" + std::to_string(calls_++);
  items_.push_back(it);
  item_open_ = true;
  Value d = Value::object();
  d.set("output_index", Value::from_int(n));
  d.set("item", item_json(it, false));
  out += event("response.output_item.added", d);
  if (k != Item::Kind::kFunctionCall) {
    Value p = Value::object(), part = Value::object();
    p.set("item_id", Value::from_string(it.id));
    p.set("output_index", Value::from_int(n));
    p.set("content_index", Value::from_int(0));
    part.set("type",
             Value::from_string(k == Item::Kind::kReasoning ? "reasoning_text" : "output_text"));
    part.set("text", Value::from_string(""));
    if (k == Item::Kind::kMessage) part.set("annotations", Value::array());
    p.set("part", part);
    out += event("response.content_part.added", p);
  }
  return out;
}

std::string ResponsesResponder::close_item() {
  if (!item_open_) return "";
  item_open_ = false;
  const Item& it = items_.back();
  int n = int(items_.size()) - 1;
  std::string out;
  Value d = Value::object();
  d.set("item_id", Value::from_string(it.id));
  d.set("output_index", Value::from_int(n));
  if (it.kind == Item::Kind::kFunctionCall) {
    d.set("arguments", Value::from_string(it.text));
    out += event("response.function_call_arguments.done", d);
  } else {
    d.set("content_index", Value::from_int(0));
    d.set("text", Value::from_string(it.text));
    out += event(it.kind == Item::Kind::kReasoning ? "response.reasoning_text.done"
                                                   : "response.output_text.done",
                 d);
    Value p = Value::object(), part = Value::object();
    p.set("item_id", Value::from_string(it.id));
    p.set("output_index", Value::from_int(n));
    p.set("content_index", Value::from_int(0));
    part.set("type", Value::from_string(it.kind == Item::Kind::kReasoning ? "reasoning_text"
                                                                          : "output_text"));
    part.set("text", Value::from_string(it.text));
    if (it.kind == Item::Kind::kMessage) part.set("annotations", Value::array());
    p.set("part", part);
    out += event("response.content_part.done", p);
  }
  Value done = Value::object();
  done.set("output_index", Value::from_int(n));
  done.set("item", item_json(it, true));
  out += event("response.output_item.done", done);
  return out;
}

std::string ResponsesResponder::stream(const std::vector<prompt::ParserEvent>& events,
                                       const Usage& usage) {
  std::string out;
  if (!started_) {
    started_ = true;
    Value d = Value::object();
    d.set("response", response_json(usage, false));
    out += event("response.created", d);
    out += event("response.in_progress", d);
  }
  using K = prompt::ParserEvent::Kind;
  auto delta = [&](const char* type, const std::string& text) {
    Item& it = items_.back();
    it.text += text;
    Value d = Value::object();
    d.set("item_id", Value::from_string(it.id));
    d.set("output_index", Value::from_int(int64_t(items_.size()) - 1));
    if (it.kind != Item::Kind::kFunctionCall) d.set("content_index", Value::from_int(0));
    d.set("delta", Value::from_string(text));
    out += event(type, d);
  };
  for (const auto& ev : events) {
    switch (ev.kind) {
      case K::kReasoning:
        if (!item_open_ || items_.back().kind != Item::Kind::kReasoning)
          out += open_item(Item::Kind::kReasoning, "");
        delta("response.reasoning_text.delta", ev.text);
        break;
      case K::kContent:
        if (!item_open_ || items_.back().kind != Item::Kind::kMessage)
          out += open_item(Item::Kind::kMessage, "");
        delta("response.output_text.delta", ev.text);
        break;
      case K::kToolCallBegin:
        out += open_item(Item::Kind::kFunctionCall, ev.text);
        break;
      case K::kToolArguments:
        if (item_open_ && items_.back().kind == Item::Kind::kFunctionCall)
          delta("response.function_call_arguments.delta", ev.text);
        break;
      case K::kToolCallEnd:
        out += close_item();
        break;
      case K::kFinish: {
        out += close_item();
        finish_ = ev.finish;
        finished_ = true;
        Value d = Value::object();
        d.set("response", response_json(usage, true));
        out += event(
            finish_ == prompt::FinishReason::kLength ? "response.incomplete" : "response.completed",
            d);
        break;
      }
    }
  }
  return out;
}

std::string ResponsesResponder::stream_error(const Status& s, const Usage& usage) {
  // A stream that fails before its first event (after a heartbeat committed it) still opens
  // with response.created: the SDKs' stream helpers reject an error event before it.
  std::string out = started_ ? std::string() : stream({}, usage);
  Value e = Value::object();
  e.set("code", Value::from_string(http_status_of(s) < 500 ? "invalid_prompt" : "server_error"));
  e.set("message", Value::from_string(s.message()));
  std::string param = error_param(s);
  e.set("param", param.empty() ? Value() : Value::from_string(param));
  out += event("error", std::move(e));
  item_open_ = false;
  finished_ = true;
  Value d = Value::object();
  d.set("response", response_json(usage, true, &s));
  out += event("response.failed", std::move(d));
  return out;
}

void ResponsesResponder::add(const std::vector<prompt::ParserEvent>& events) {
  using K = prompt::ParserEvent::Kind;
  for (const auto& ev : events) {
    switch (ev.kind) {
      case K::kReasoning:
        if (items_.empty() || items_.back().kind != Item::Kind::kReasoning)
          open_item(Item::Kind::kReasoning, "");
        items_.back().text += ev.text;
        break;
      case K::kContent:
        if (items_.empty() || items_.back().kind != Item::Kind::kMessage)
          open_item(Item::Kind::kMessage, "");
        items_.back().text += ev.text;
        break;
      case K::kToolCallBegin:
        open_item(Item::Kind::kFunctionCall, ev.text);
        break;
      case K::kToolArguments:
        if (!items_.empty() && items_.back().kind == Item::Kind::kFunctionCall)
          items_.back().text += ev.text;
        break;
      case K::kToolCallEnd:
        item_open_ = false;
        break;
      case K::kFinish:
        finish_ = ev.finish;
        finished_ = true;
        break;
    }
  }
  item_open_ = false;
}

std::string ResponsesResponder::complete(const Usage& usage) const {
  return pyjson::dumps(response_json(usage, true), false, true);
}

}  // namespace fathom::api
