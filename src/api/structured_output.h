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

#include "core/py_json.h"
#include "core/status.h"

namespace fathom::api {

struct StructuredOutput {
  enum class Kind { kNone, kJsonSchema, kJsonObject, kRegex, kChoice, kGbnf };
  Kind kind = Kind::kNone;
  std::string text;                  // the schema's JSON text, the regex or the GBNF text
  std::vector<std::string> choices;  // kChoice
  std::string field;                 // the request field, e.g. "response_format.json_schema"
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

}  // namespace fathom::api
