// StructuredOutput: the output constraint a request asks for, as plain data (the server turns
// it into a grammar): a JSON Schema, any JSON object, a regular expression, a list of choices
// or a GBNF grammar, with the request field it came from (for the 400 a compile error gets).
// The readers here parse the fields the OpenAI-compatible servers use: vLLM's
// `structured_outputs` object and its older `guided_json` / `guided_regex` / `guided_choice` /
// `guided_grammar`, and llama-server's `grammar` / `json_schema`. A request may carry one
// constraint at most.
#pragma once

#include <string>
#include <vector>

#include <memory>

#include "core/py_json.h"
#include "core/status.h"
#include "grammar/grammar_cache.h"

namespace fathom::api {

struct StructuredOutput {
  // kSpec: Fathom's `grammar_spec`, the exact source (GrammarSpec) to compile as is.
  enum class Kind { kNone, kJsonSchema, kJsonObject, kRegex, kChoice, kGbnf, kSpec };
  Kind kind = Kind::kNone;
  std::string text;                  // the schema's JSON text, the regex or the GBNF text
  std::vector<std::string> choices;  // kChoice
  std::shared_ptr<const grammar::GrammarSpec> spec;  // kSpec
  std::string field;  // the request field, e.g. "response_format.json_schema"
  bool active() const { return kind != Kind::kNone; }
};

// A JSON Schema given as an object or boolean, or as a string holding one (vLLM accepts both).
Status set_json_schema(const pyjson::Value& schema, const std::string& field,
                       StructuredOutput& out);

// vLLM's `structured_outputs` {json | regex | choice | grammar | json_object} and the older
// guided_json / guided_regex / guided_choice / guided_grammar / guided_json_object fields.
Status read_vllm_structured_outputs(const pyjson::Value& request, StructuredOutput& out);

// llama-server's /completion fields: `grammar` (GBNF) and `json_schema` (a schema object).
Status read_llama_structured_outputs(const pyjson::Value& request, StructuredOutput& out);

// Fathom's `grammar_spec` on /v1/completions: the source a grammar was compiled from, as
// `fathom router` sends it to its replicas (a router never ships a compiled grammar; the
// replica compiles this against its own vocabulary, as it would the client's own fields):
//   {"kind": "json_schema" | "regex" | "gbnf" | "choice" | "dsml",
//    "text": STRING,                      every kind but choice (dsml: dsml_spec_json())
//    "choices": [STRING, ...],            choice only (at least one)
//    "json": {"whitespace": "compact" | "bounded", "max_whitespace": 0..1024,
//             "strict_additional_properties": BOOL}}   json_schema only; each key optional
// Unknown keys and kinds, wrong types and a missing text are a 400 naming
// 'grammar_spec.<key>'; compiling it is the server's (a 400 naming 'grammar_spec').
Status read_grammar_spec(const pyjson::Value& request, StructuredOutput& out);
Result<grammar::GrammarSpec> parse_grammar_spec(const pyjson::Value& spec);
// The wire form parse_grammar_spec reads back to an equal spec.
pyjson::Value grammar_spec_json(const grammar::GrammarSpec& spec);

}  // namespace fathom::api
