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

namespace {

using GKind = grammar::GrammarSpec::Kind;
using Whitespace = grammar::JsonSchemaOptions::Whitespace;

constexpr std::pair<GKind, const char*> kSpecKinds[] = {{GKind::kJsonSchema, "json_schema"},
                                                        {GKind::kRegex, "regex"},
                                                        {GKind::kGbnf, "gbnf"},
                                                        {GKind::kChoice, "choice"},
                                                        {GKind::kDsml, "dsml"}};

}  // namespace

Result<grammar::GrammarSpec> parse_grammar_spec(const Value& v) {
  if (!v.is_object()) return bad("'grammar_spec' must be an object");
  grammar::GrammarSpec spec;
  const Value* kind = field(v, "kind");
  if (kind == nullptr || !kind->is_string())
    return bad("'grammar_spec.kind' must be one of json_schema, regex, gbnf, choice, dsml");
  bool known = false;
  for (const auto& [k, name] : kSpecKinds)
    if (kind->text == name) {
      spec.kind = k;
      known = true;
    }
  if (!known)
    return bad("'grammar_spec.kind' must be one of json_schema, regex, gbnf, choice, dsml");
  for (size_t i = 0; i < v.keys.size(); ++i) {
    const std::string& key = v.keys[i];
    if (key != "kind" && key != "text" && key != "choices" && key != "json")
      return bad("'grammar_spec." + key + "' is not a field of grammar_spec");
  }
  const Value* text = field(v, "text");
  const Value* choices = field(v, "choices");
  const Value* json = field(v, "json");
  if (spec.kind == GKind::kChoice) {
    if (text != nullptr) return bad("'grammar_spec.text' is not used by kind choice");
    if (choices == nullptr || !choices->is_array() || choices->items.empty())
      return bad("'grammar_spec.choices' must be a non-empty list of strings");
    for (const Value& c : choices->items) {
      if (!c.is_string()) return bad("'grammar_spec.choices' must be a non-empty list of strings");
      spec.choices.push_back(c.text);
    }
  } else {
    if (choices != nullptr) return bad("'grammar_spec.choices' is only used by kind choice");
    if (text == nullptr || !text->is_string()) return bad("'grammar_spec.text' must be a string");
    spec.text = text->text;
  }
  if (json != nullptr) {
    if (spec.kind != GKind::kJsonSchema)
      return bad("'grammar_spec.json' is only used by kind json_schema");
    if (!json->is_object()) return bad("'grammar_spec.json' must be an object");
    for (size_t i = 0; i < json->keys.size(); ++i) {
      const std::string& key = json->keys[i];
      const Value& o = json->items[i];
      const std::string name = "'grammar_spec.json." + key + "'";
      if (key == "whitespace") {
        if (!o.is_string() || (o.text != "compact" && o.text != "bounded"))
          return bad(name + " must be \"compact\" or \"bounded\"");
        spec.json.whitespace = o.text == "compact" ? Whitespace::kCompact : Whitespace::kBounded;
      } else if (key == "max_whitespace") {
        int64_t n = 0;
        if (o.kind != Value::Kind::kInt || !o.int_fits_int64(&n) || n < 0 || n > 1024)
          return bad(name + " must be an integer in [0, 1024]");
        spec.json.max_whitespace = int(n);
      } else if (key == "strict_additional_properties") {
        if (o.kind != Value::Kind::kBool) return bad(name + " must be a boolean");
        spec.json.strict_additional_properties = o.boolean;
      } else {
        return bad(name + " is not a JSON option of grammar_spec");
      }
    }
  }
  return spec;
}

Status read_grammar_spec(const Value& r, StructuredOutput& out) {
  const Value* v = field(r, "grammar_spec");
  if (v == nullptr) return Status::ok();
  FATHOM_RETURN_IF_ERROR(check_unset(out, "grammar_spec"));
  FATHOM_ASSIGN_OR_RETURN(grammar::GrammarSpec spec, parse_grammar_spec(*v));
  out.kind = StructuredOutput::Kind::kSpec;
  out.spec = std::make_shared<const grammar::GrammarSpec>(std::move(spec));
  out.field = "grammar_spec";
  return Status::ok();
}

Value grammar_spec_json(const grammar::GrammarSpec& spec) {
  Value v = Value::object();
  for (const auto& [k, name] : kSpecKinds)
    if (spec.kind == k) v.set("kind", Value::from_string(name));
  if (spec.kind == GKind::kChoice) {
    Value c = Value::array();
    for (const std::string& s : spec.choices) c.items.push_back(Value::from_string(s));
    v.set("choices", std::move(c));
  } else {
    v.set("text", Value::from_string(spec.text));
  }
  if (spec.kind == GKind::kJsonSchema) {
    Value j = Value::object();
    j.set("whitespace",
          Value::from_string(spec.json.whitespace == Whitespace::kCompact ? "compact" : "bounded"));
    j.set("max_whitespace", Value::from_int(spec.json.max_whitespace));
    j.set("strict_additional_properties", Value::from_bool(spec.json.strict_additional_properties));
    v.set("json", std::move(j));
  }
  return v;
}

}  // namespace fathom::api
