// JSON Schema to Grammar. The output is canonical JSON text: object members in the order the
// schema declares them (`properties` order, then required names `properties` lacks, then any
// additional members), strings spelled as json.dumps(ensure_ascii=False) spells them (raw
// UTF-8, \" \\ \b \f \n \r \t, \u00XX for other control characters), integers without
// exponent or leading zeros. Whitespace: none (kCompact), or up to max_whitespace characters
// of [ \t\n\r] after `{ [ , :` and before `} ]` (kBounded, XGrammar strict-mode style), which
// covers compact and indent-style pretty JSON.
//
// Supported: type (incl. lists), properties, required, additionalProperties (bool or schema),
// items (schema or draft-7 list), prefixItems, additionalItems, minItems, maxItems, enum,
// const, minLength, maxLength, pattern, format (date, time, date-time, email, uuid, ipv4,
// hostname, uri: scheme ":" and no excluded characters),
// minimum/maximum/exclusiveMinimum/exclusiveMaximum on integers, anyOf, oneOf whose branches cannot
// overlap, allOf whose parts merge without conflict, $ref to "#" and JSON pointers into the
// document (definitions/$defs; recursion allowed), boolean schemas, uniqueItems false. Annotations
// (title, description, default, examples, $comment, $schema, root $id, ...) are ignored. Every
// other assertion keyword is kUnsupported, naming it.
#pragma once

#include <string_view>

#include "core/py_json.h"
#include "core/status.h"
#include "grammar/grammar.h"

namespace fathom::grammar {

struct JsonSchemaOptions {
  enum class Whitespace { kCompact, kBounded };
  Whitespace whitespace = Whitespace::kBounded;
  int max_whitespace = 20;
  // Treat an absent additionalProperties as false (OpenAI strict mode) instead of true.
  bool strict_additional_properties = false;
};

Result<Grammar> json_schema_grammar(const pyjson::Value& schema,
                                    const JsonSchemaOptions& options = {});
// Parses the schema text first (kInvalidArgument if it is not JSON).
Result<Grammar> json_schema_grammar(std::string_view schema_json,
                                    const JsonSchemaOptions& options = {});

// The canonical text of a JSON value as the schema grammar spells it (compact; member order
// kept; integral floats written as integers).
std::string canonical_json(const pyjson::Value& v);

}  // namespace fathom::grammar
