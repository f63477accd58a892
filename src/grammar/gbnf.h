// GBNF (llama.cpp's grammar syntax) to Grammar: `name ::= alternatives` rules ending at a
// newline (newlines are allowed inside parentheses and after `|`), "literals" and [classes]
// with \n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH escapes, `.` (any character), groups, * + ? and
// {m} {m,} {m,n}, # comments. The start rule is `root`. Token references (<[id]>) are
// kUnsupported; undefined rules and syntax errors are kInvalidArgument with the line number.
#pragma once

#include <string_view>

#include "core/status.h"
#include "grammar/grammar.h"

namespace fathom::grammar {

Result<Grammar> gbnf_grammar(std::string_view text);

}  // namespace fathom::grammar
