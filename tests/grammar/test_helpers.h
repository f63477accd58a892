// Shared helpers for the grammar tests: a byte-level token table (every single byte a token)
// for tests that do not need a real vocabulary, the DeepSeek table, and string matching.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "grammar/compiled_grammar.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/token_table.h"

namespace fathom::grammar::test {

// 256 single-byte tokens (id = byte) plus a stop token with id 256.
std::shared_ptr<const TokenTable> byte_tokens();
// The DeepSeek tokenizer's table (vocab 129280, EOS as the stop id); loaded once.
std::shared_ptr<const TokenTable> deepseek_tokens();

std::shared_ptr<const CompiledGrammar> compile_or_die(const Grammar& g,
                                                      std::shared_ptr<const TokenTable> t);
// Whether the grammar accepts exactly `s` (fed as one byte string, then the end).
bool accepts(const CompiledGrammar& g, std::string_view s);
// Whether `s` is a prefix of something the grammar accepts.
bool accepts_prefix(const CompiledGrammar& g, std::string_view s);

}  // namespace fathom::grammar::test
