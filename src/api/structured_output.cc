#include "api/structured_output.h"

#include "api/request_util.h"

namespace fathom::api {

using detail::bad;
using detail::field;
using pyjson::Value;

namespace {

// A second constraint in the same request.
Status check_unset(const StructuredOutput& out, const std::string& field_name) {
  if (!out.active()) return Status::ok();
  return bad("'" + field_name + "' cannot be combined with '" + out.field +
             "': a request takes one structured output constraint");
}

Status set_string(const Value& v, StructuredOutput::Kind kind, const std::string& name,
                  StructuredOutput& out) {
  FATHOM_RETURN_IF_ERROR(check_unset(out, name));
  if (!v.is_string()) return bad("'" + name + "' must be a string");
  out.kind = kind;
  out.text = v.text;
  out.field = name;
  return Status::ok();
}

Status set_choice(const Value& v, const std::string& name, StructuredOutput& out) {
  FATHOM_RETURN_IF_ERROR(check_unset(out, name));
  if (!v.is_array() || v.items.empty()) return bad("'" + name + "' must be a non-empty list");
  out.choices.clear();
  for (const Value& c : v.items) {
    if (!c.is_string()) return bad("'" + name + "' must be a list of strings");
    out.choices.push_back(c.text);
  }
  out.kind = StructuredOutput::Kind::kChoice;
  out.field = name;
  return Status::ok();
}

Status set_json_object(const Value& v, const std::string& name, StructuredOutput& out) {
  if (v.kind != Value::Kind::kBool) return bad("'" + name + "' must be a boolean");
  if (!v.boolean) return Status::ok();
  FATHOM_RETURN_IF_ERROR(check_unset(out, name));
  out.kind = StructuredOutput::Kind::kJsonObject;
  out.field = name;
  return Status::ok();
}

}  // namespace

Status set_json_schema(const Value& schema, const std::string& name, StructuredOutput& out) {
  FATHOM_RETURN_IF_ERROR(check_unset(out, name));
  if (schema.is_string()) {
    auto parsed = pyjson::parse(schema.text, {.max_depth = 128, .allow_nan = false});
    if (!parsed.is_ok())
      return bad("'" + name + "' is not valid JSON: " + parsed.status().message());
    return set_json_schema(*parsed, name, out);
  }
  if (!schema.is_object() && schema.kind != Value::Kind::kBool)
    return bad("'" + name + "' must be a JSON Schema object");
  out.kind = StructuredOutput::Kind::kJsonSchema;
  out.text = pyjson::dumps(schema, false, true);
  out.field = name;
  return Status::ok();
}

Status read_vllm_structured_outputs(const Value& r, StructuredOutput& out) {
  using Kind = StructuredOutput::Kind;
  if (const Value* so = field(r, "structured_outputs")) {
    if (!so->is_object()) return bad("'structured_outputs' must be an object");
    for (size_t i = 0; i < so->keys.size(); ++i) {
      const std::string& key = so->keys[i];
      const Value& v = so->items[i];
      if (v.is_null()) continue;
      const std::string name = "structured_outputs." + key;
      if (key == "json") {
        FATHOM_RETURN_IF_ERROR(set_json_schema(v, name, out));
      } else if (key == "regex") {
        FATHOM_RETURN_IF_ERROR(set_string(v, Kind::kRegex, name, out));
      } else if (key == "choice") {
        FATHOM_RETURN_IF_ERROR(set_choice(v, name, out));
      } else if (key == "grammar") {
        FATHOM_RETURN_IF_ERROR(set_string(v, Kind::kGbnf, name, out));
      } else if (key == "json_object") {
        FATHOM_RETURN_IF_ERROR(set_json_object(v, name, out));
      } else if (key == "disable_any_whitespace" || key == "disable_additional_properties" ||
                 key == "whitespace_pattern") {
        // Options of vLLM's backends; this one's policy is fixed (README).
        continue;
      } else {
        return bad("'" + name + "' is not supported by this server");
      }
    }
  }
  if (const Value* v = field(r, "guided_json"))
    FATHOM_RETURN_IF_ERROR(set_json_schema(*v, "guided_json", out));
  if (const Value* v = field(r, "guided_regex"))
    FATHOM_RETURN_IF_ERROR(set_string(*v, Kind::kRegex, "guided_regex", out));
  if (const Value* v = field(r, "guided_choice"))
    FATHOM_RETURN_IF_ERROR(set_choice(*v, "guided_choice", out));
  if (const Value* v = field(r, "guided_grammar"))
    FATHOM_RETURN_IF_ERROR(set_string(*v, Kind::kGbnf, "guided_grammar", out));
  if (const Value* v = field(r, "guided_json_object"))
    FATHOM_RETURN_IF_ERROR(set_json_object(*v, "guided_json_object", out));
  return Status::ok();
}

Status read_llama_structured_outputs(const Value& r, StructuredOutput& out) {
  if (const Value* v = field(r, "grammar"))
    FATHOM_RETURN_IF_ERROR(set_string(*v, StructuredOutput::Kind::kGbnf, "grammar", out));
  if (const Value* v = field(r, "json_schema"))
    FATHOM_RETURN_IF_ERROR(set_json_schema(*v, "json_schema", out));
  return Status::ok();
}

}  // namespace fathom::api
