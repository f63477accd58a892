#include "grammar/dsml.h"

#include <set>

#include "grammar/json_schema.h"
#include "grammar/token_table.h"

namespace fathom::grammar {

namespace {

using pyjson::Value;

// Keywords that only annotate a schema.
bool annotation(std::string_view k) {
  return k == "title" || k == "description" || k == "default" || k == "examples" ||
         k == "$comment" || k == "deprecated" || k == "readOnly" || k == "writeOnly";
}

// Builds the grammar; one per call.
class DsmlBuilder {
 public:
  DsmlBuilder(const std::vector<DsmlTool>& tools, const DsmlOptions& o) : tools_(tools), o_(o) {
    marker_ = std::string(1, char(TokenTable::symbol_byte(0)));
  }

  Result<Grammar> build() {
    if (tools_.empty()) return invalid_argument("tool calls need at least one tool");
    // Any code point: raw text (valid UTF-8 never holds the marker's byte).
    text_rule_ = g_.add_rule("text");
    g_.define_rule(text_rule_, g_.code_points({{0, 0x10FFFF}}));
    std::vector<ExprId> invokes;
    std::set<std::string> names;
    for (size_t i = 0; i < tools_.size(); ++i) {
      const DsmlTool& t = tools_[i];
      if (t.name.empty()) return invalid_argument("a tool has no name");
      if (!names.insert(t.name).second)
        return invalid_argument("two tools are named '" + t.name + "'");
      FATHOM_ASSIGN_OR_RETURN(ExprId params, parameters(t, i));
      const int32_t r = g_.add_rule("invoke_" + std::to_string(i));
      g_.define_rule(r, g_.seq({open(tag_invoke() + " name=\"" + t.name + "\""), g_.literal("\n"),
                                params, close(tag_invoke())}));
      invokes.push_back(g_.ref(r));
    }
    const int32_t invoke = g_.add_rule("invoke");
    g_.define_rule(invoke, g_.alt(std::move(invokes)));
    ExprId calls = g_.ref(invoke);
    if (o_.parallel) calls = g_.seq({calls, g_.star(g_.seq({g_.literal("\n"), g_.ref(invoke)}))});
    const ExprId rest = g_.seq({calls, g_.literal("\n"), close(tag_calls())});
    ExprId body = rest;
    if (!o_.in_block) {
      const ExprId block = g_.seq({g_.literal("\n\n"), open(tag_calls()), g_.literal("\n"), rest});
      body = o_.text_first ? g_.seq({g_.star(g_.ref(text_rule_)), g_.opt(block)}) : block;
    }
    const int32_t root = g_.add_rule("root");
    g_.define_rule(root, body);
    g_.set_root(root);
    FATHOM_RETURN_IF_ERROR(g_.validate());
    return std::move(g_);
  }

 private:
  std::string tag_calls() const { return o_.v41 ? " calls" : "tool_calls"; }
  std::string tag_invoke() const { return o_.v41 ? " invoke" : "invoke"; }
  std::string tag_param() const { return o_.v41 ? " parameter" : "parameter"; }
  ExprId open(const std::string& t) { return g_.literal("<" + marker_ + t + ">"); }
  ExprId close(const std::string& t) { return g_.literal("</" + marker_ + t + ">"); }

  // One parameter with any name and value (a tool that is not strict).
  ExprId any_param() {
    const ExprId name_char = g_.code_points({{0x20, 0x21}, {0x23, 0x10FFFF}});  // not '"'
    return g_.seq({g_.literal("<" + marker_ + tag_param() + " name=\""), g_.star(name_char),
                   g_.literal("\" string=\""), g_.alt({g_.literal("true"), g_.literal("false")}),
                   g_.literal("\">"), g_.star(g_.ref(text_rule_)), close(tag_param())});
  }

  // OPEN "\n" (this) CLOSE: the parameters "p\n" each, or "\n" when there are none.
  Result<ExprId> parameters(const DsmlTool& t, size_t tool) {
    // No parameters: "\n" (as the reference renders an empty join) or nothing (as some
    // reference outputs have it).
    const ExprId none = g_.opt(g_.literal("\n"));
    if (!t.strict) return g_.alt({g_.plus(g_.seq({any_param(), g_.literal("\n")})), none});
    const std::string where = "tool '" + t.name + "' parameters";
    if (t.parameters.is_null()) return none;
    if (!t.parameters.is_object())
      return invalid_argument(where + ": must be a JSON Schema object");
    const Value& s = t.parameters;
    for (size_t i = 0; i < s.keys.size(); ++i) {
      const std::string& k = s.keys[i];
      if (k == "type") {
        if (!s.items[i].is_string() || s.items[i].text != "object")
          return invalid_argument(where + ": 'type' must be \"object\"");
      } else if (k != "properties" && k != "required" && k != "additionalProperties" &&
                 k != "$defs" && k != "definitions" && k != "$schema" && !annotation(k)) {
        return unsupported(where + ": '" + k + "' is not supported in strict mode");
      }
    }
    const Value* props = s.find("properties");
    if (props != nullptr && !props->is_object())
      return invalid_argument(where + ": 'properties' must be an object");
    std::set<std::string> required;
    if (const Value* req = s.find("required")) {
      if (!req->is_array()) return invalid_argument(where + ": 'required' must be an array");
      for (const Value& r : req->items) {
        if (!r.is_string()) return invalid_argument(where + ": 'required' holds a non-string");
        if (props == nullptr || props->find(r.text) == nullptr)
          return unsupported(where + ": required '" + r.text + "' is not in 'properties'");
        required.insert(r.text);
      }
    }
    if (const Value* ap = s.find("additionalProperties");
        ap != nullptr && !(ap->kind == Value::Kind::kBool && !ap->boolean))
      return unsupported(where +
                         ": additionalProperties other than false is not supported in strict mode");
    std::vector<ExprId> items;
    std::vector<bool> is_required;
    const size_t n = props ? props->keys.size() : 0;
    for (size_t i = 0; i < n; ++i) {
      FATHOM_ASSIGN_OR_RETURN(ExprId p, param(props->keys[i], props->items[i], s, tool, i));
      const int32_t r = g_.add_rule("t" + std::to_string(tool) + "_p" + std::to_string(i));
      g_.define_rule(r, g_.seq({p, g_.literal("\n")}));
      items.push_back(g_.ref(r));
      is_required.push_back(required.count(props->keys[i]) > 0);
    }
    if (n == 0) return none;
    if (!required.empty()) {
      std::vector<ExprId> seq;
      for (size_t i = 0; i < n; ++i) seq.push_back(is_required[i] ? items[i] : g_.opt(items[i]));
      return g_.seq(std::move(seq));
    }
    // All optional: at least one (the first present is k), or none ("\n").
    std::vector<ExprId> alts;
    for (size_t k = 0; k < n; ++k) {
      std::vector<ExprId> seq{items[k]};
      for (size_t j = k + 1; j < n; ++j) seq.push_back(g_.opt(items[j]));
      alts.push_back(g_.seq(std::move(seq)));
    }
    alts.push_back(none);
    return g_.alt(std::move(alts));
  }

  // A schema whose value is written raw (string="true"): a string schema with no keyword
  // beyond enum/const (strings) and minLength/maxLength.
  static bool raw_string(const Value& s) {
    if (!s.is_object()) return false;
    const Value* type = s.find("type");
    if (type == nullptr || !type->is_string() || type->text != "string") return false;
    for (size_t i = 0; i < s.keys.size(); ++i) {
      const std::string& k = s.keys[i];
      if (k == "type" || annotation(k)) continue;
      if (k == "minLength" || k == "maxLength") {
        if (s.items[i].kind != Value::Kind::kInt) return false;
        continue;
      }
      if (k == "const") {
        if (!s.items[i].is_string()) return false;
        continue;
      }
      if (k == "enum") {
        if (!s.items[i].is_array() || s.items[i].items.empty()) return false;
        for (const Value& e : s.items[i].items)
          if (!e.is_string()) return false;
        continue;
      }
      return false;
    }
    return true;
  }

  Result<ExprId> param(const std::string& key, const Value& schema, const Value& root, size_t tool,
                       size_t index) {
    const std::string where = "tool '" + tools_[tool].name + "' parameter '" + key + "'";
    auto head = [&](bool str) {
      return g_.literal("<" + marker_ + tag_param() + " name=\"" + key + "\" string=\"" +
                        (str ? "true" : "false") + "\">");
    };
    if (raw_string(schema)) {
      ExprId value;
      if (const Value* c = schema.find("const")) {
        value = g_.literal(c->text);
      } else if (const Value* e = schema.find("enum")) {
        std::vector<ExprId> alts;
        for (const Value& v : e->items) alts.push_back(g_.literal(v.text));
        value = g_.alt(std::move(alts));
      } else {
        int64_t lo = 0, hi = kUnbounded;
        if (const Value* m = schema.find("minLength")) lo = std::stoll(m->text);
        if (const Value* m = schema.find("maxLength")) hi = std::stoll(m->text);
        if (lo < 0 || (hi != kUnbounded && (hi < lo || hi > 100000)) || lo > 100000)
          return invalid_argument(where + ": minLength/maxLength out of range");
        value = g_.repeat(g_.ref(text_rule_), int32_t(lo), int32_t(hi));
      }
      return g_.seq({head(true), value, close(tag_param())});
    }
    // JSON: the parameter's schema, with the root's definitions for its $refs.
    Value doc = schema;
    if (doc.is_object()) {
      for (const char* defs : {"$defs", "definitions"})
        if (const Value* d = root.find(defs); d != nullptr && doc.find(defs) == nullptr)
          doc.set(defs, *d);
    }
    JsonSchemaOptions jo;
    jo.whitespace = JsonSchemaOptions::Whitespace::kBounded;  // json.dumps's ", " and ": "
    jo.strict_additional_properties = true;
    auto sub = json_schema_grammar(doc, jo);
    if (!sub.is_ok()) return Status(sub.status().code(), where + ": " + sub.status().message());
    const int32_t r =
        g_.import(*sub, "t" + std::to_string(tool) + "_p" + std::to_string(index) + "_");
    return g_.seq({head(false), g_.ref(r), close(tag_param())});
  }

  const std::vector<DsmlTool>& tools_;
  const DsmlOptions& o_;
  Grammar g_;
  std::string marker_;
  int32_t text_rule_ = -1;
};

}  // namespace

Result<Grammar> dsml_tool_calls_grammar(const std::vector<DsmlTool>& tools,
                                        const DsmlOptions& options) {
  return DsmlBuilder(tools, options).build();
}

std::string dsml_spec_json(const std::vector<DsmlTool>& tools, const DsmlOptions& options) {
  Value spec = Value::object();
  spec.set("v41", Value::from_bool(options.v41));
  spec.set("in_block", Value::from_bool(options.in_block));
  spec.set("text_first", Value::from_bool(options.text_first));
  spec.set("parallel", Value::from_bool(options.parallel));
  Value list = Value::array();
  for (const DsmlTool& t : tools) {
    Value v = Value::object();
    v.set("name", Value::from_string(t.name));
    v.set("strict", Value::from_bool(t.strict));
    v.set("parameters", t.parameters);
    list.items.push_back(std::move(v));
  }
  spec.set("tools", std::move(list));
  return pyjson::dumps(spec, false, true);
}

Result<Grammar> dsml_grammar_from_spec(std::string_view spec_json) {
  FATHOM_ASSIGN_OR_RETURN(Value spec, pyjson::parse(spec_json));
  auto flag = [&](const char* k, bool dflt) {
    const Value* v = spec.find(k);
    return v != nullptr && v->kind == Value::Kind::kBool ? v->boolean : dflt;
  };
  DsmlOptions o;
  o.v41 = flag("v41", true);
  o.in_block = flag("in_block", false);
  o.text_first = flag("text_first", true);
  o.parallel = flag("parallel", true);
  std::vector<DsmlTool> tools;
  const Value* list = spec.find("tools");
  if (list == nullptr || !list->is_array()) return invalid_argument("DSML spec: no tools");
  for (const Value& t : list->items) {
    DsmlTool d;
    if (const Value* n = t.find("name"); n && n->is_string()) d.name = n->text;
    if (const Value* s = t.find("strict"); s && s->kind == Value::Kind::kBool)
      d.strict = s->boolean;
    if (const Value* p = t.find("parameters")) d.parameters = *p;
    tools.push_back(std::move(d));
  }
  return dsml_tool_calls_grammar(tools, o);
}

}  // namespace fathom::grammar
