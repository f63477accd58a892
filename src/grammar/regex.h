// Regular expressions (the ECMAScript syntax JSON Schema's "pattern" uses) to grammar
// expressions: literals, classes with ranges and negation, \d \w \s and their negations, ".",
// groups (capturing, non-capturing, named), alternation, * + ? and {n}, {n,}, {n,m} (lazy
// forms match the same strings). Lookaround, backreferences, word boundaries, Unicode
// property escapes and anchors other than a leading ^ / trailing $ are kUnsupported, naming
// the construct. Code points, not bytes: the result matches the UTF-8 encoding.
#pragma once

#include <functional>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "grammar/grammar.h"

namespace fathom::grammar {

struct RegexOptions {
  // false: the whole input must match (anchors implied). true: JSON Schema semantics, where
  // the pattern may match anywhere unless a branch is anchored with ^ / $.
  bool search = false;
  // Turns a set of code points into an expression (default: Grammar::code_points). JSON
  // Schema uses this to emit each character the way a JSON string spells it.
  std::function<ExprId(Grammar&, const std::vector<CodeRange>&)> chars;
  int32_t max_repeat = 10000;  // larger bounds are kUnsupported
};

// Parses pattern into an expression of g.
Result<ExprId> parse_regex(Grammar& g, std::string_view pattern, const RegexOptions& options = {});

// A grammar whose root rule is the whole pattern (full match).
Result<Grammar> regex_grammar(std::string_view pattern);

}  // namespace fathom::grammar
