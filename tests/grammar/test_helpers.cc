#include "grammar/test_helpers.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "tokenizer/test_util.h"
#include "tokenizer/tokenizer.h"

namespace fathom::grammar::test {

std::shared_ptr<const TokenTable> byte_tokens() {
  static std::shared_ptr<const TokenTable> t = [] {
    std::vector<std::string> bytes(256);
    for (int b = 0; b < 256; ++b) bytes[b] = std::string(1, char(b));
    bytes.push_back("");
    auto r = TokenTable::from_bytes(std::move(bytes), 257, {256});
    if (!r.is_ok()) std::abort();
    return r.value();
  }();
  return t;
}

std::shared_ptr<const TokenTable> deepseek_tokens() {
  static std::shared_ptr<const TokenTable> t = [] {
    const Tokenizer& tok = fathom::test::deepseek();
    int32_t eos = tok.id_of("<｜end▁of▁sentence｜>");
    auto r = TokenTable::create(tok, 129280, {eos});
    if (!r.is_ok()) {
      std::fprintf(stderr, "%s\n", r.status().to_string().c_str());
      std::abort();
    }
    return r.value();
  }();
  return t;
}

std::shared_ptr<const CompiledGrammar> compile_or_die(const Grammar& g,
                                                      std::shared_ptr<const TokenTable> t) {
  auto r = CompiledGrammar::compile(g, std::move(t));
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  if (!r.is_ok()) return nullptr;
  return r.value();
}

bool accepts_prefix(const CompiledGrammar& g, std::string_view s) {
  std::shared_ptr<const CompiledGrammar> alias(std::shared_ptr<const CompiledGrammar>{}, &g);
  GrammarMatcher m(alias);
  return m.accept_bytes(s);
}

bool accepts(const CompiledGrammar& g, std::string_view s) {
  std::shared_ptr<const CompiledGrammar> alias(std::shared_ptr<const CompiledGrammar>{}, &g);
  GrammarMatcher m(alias);
  return m.accept_bytes(s) && m.can_terminate();
}

}  // namespace fathom::grammar::test
