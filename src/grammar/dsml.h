// The grammar of a DeepSeek tool-call block (DSML, prompt-format.md §3) whose parameters
// follow each tool's JSON Schema: what strict function calling constrains the output to.
//
//   block  = "\n\n" OPEN(calls) "\n" invoke ("\n" invoke)* "\n" CLOSE(calls)
//   invoke = OPEN(invoke name="N") "\n" ((param "\n")+ | "\n"?) CLOSE(invoke)
//   param  = OPEN(parameter name="K" string="true") raw-text CLOSE(parameter)
//          | OPEN(parameter name="K" string="false") JSON CLOSE(parameter)
//
// where OPEN(t) = "<" M t ">" and CLOSE(t) = "</" M t ">" and M is the DSML marker, a special
// token: the grammar holds it as TokenTable::symbol_byte(0), so only the marker's id can
// produce it (never text that looks like it). The tag names are V4.1's (" calls", " invoke",
// " parameter") or V4's ("tool_calls", "invoke", "parameter").
//
// A strict tool's parameters come in the schema's `properties` order; required ones must
// appear, others may; no other names. A parameter whose schema is a plain string schema (type
// "string" with at most enum/const/pattern/minLength/maxLength) is raw text with
// string="true", as the reference renders strings; any other schema is JSON (json.dumps
// spacing allowed) with string="false". A tool that is not strict takes any parameters.
//
// Plain data in, a Grammar out; no state. Any thread.
#pragma once

#include <string>
#include <vector>

#include "core/py_json.h"
#include "core/status.h"
#include "grammar/grammar.h"

namespace fathom::grammar {

struct DsmlTool {
  std::string name;
  pyjson::Value parameters;  // a JSON Schema (an object schema), or null: no parameters
  bool strict = false;
};

struct DsmlOptions {
  bool v41 = true;  // V4.1 tag names, else V4's
  // The prompt already ends with the block's opening ("\n\n" OPEN(calls) "\n": tool_choice
  // required or a named function); the output starts at the first invoke.
  bool in_block = false;
  // Free text (no DSML marker) may come before the block, and the block is optional
  // (tool_choice auto). Ignored with in_block.
  bool text_first = true;
  bool parallel = true;  // more than one invoke per block
};

Result<Grammar> dsml_tool_calls_grammar(const std::vector<DsmlTool>& tools,
                                        const DsmlOptions& options);

// The request's tools and options as one canonical JSON text, and back: how a GrammarSpec
// carries a DSML grammar (and how the grammar cache keys it).
std::string dsml_spec_json(const std::vector<DsmlTool>& tools, const DsmlOptions& options);
Result<Grammar> dsml_grammar_from_spec(std::string_view spec_json);

}  // namespace fathom::grammar
