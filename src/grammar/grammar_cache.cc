#include "grammar/grammar_cache.h"

#include "grammar/dsml.h"
#include "grammar/gbnf.h"
#include "grammar/regex.h"

namespace fathom::grammar {

Result<Grammar> choice_grammar(const std::vector<std::string>& choices) {
  if (choices.empty()) return invalid_argument("choice needs at least one string");
  Grammar g;
  int32_t root = g.add_rule("root");
  std::vector<ExprId> alts;
  for (const std::string& c : choices) alts.push_back(c.empty() ? g.empty() : g.literal(c));
  g.define_rule(root, g.alt(std::move(alts)));
  g.set_root(root);
  return g;
}

Result<Grammar> build_grammar(const GrammarSpec& spec) {
  switch (spec.kind) {
    case GrammarSpec::Kind::kRegex:
      return regex_grammar(spec.text);
    case GrammarSpec::Kind::kJsonSchema:
      return json_schema_grammar(std::string_view(spec.text), spec.json);
    case GrammarSpec::Kind::kGbnf:
      return gbnf_grammar(spec.text);
    case GrammarSpec::Kind::kChoice:
      return choice_grammar(spec.choices);
    case GrammarSpec::Kind::kDsml:
      return dsml_grammar_from_spec(spec.text);
  }
  return invalid_argument("unknown grammar kind");
}

GrammarCache::GrammarCache(std::shared_ptr<const TokenTable> tokens, size_t capacity,
                           CompileOptions options, size_t max_bytes)
    : tokens_(std::move(tokens)),
      capacity_(capacity == 0 ? 1 : capacity),
      options_(options),
      max_bytes_(max_bytes) {}

Result<std::shared_ptr<const CompiledGrammar>> GrammarCache::get(const GrammarSpec& spec) {
  FATHOM_ASSIGN_OR_RETURN(Grammar g, build_grammar(spec));
  std::string key = g.to_string();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++hits_;
      return it->second->second;
    }
    ++misses_;
  }
  FATHOM_ASSIGN_OR_RETURN(std::shared_ptr<const CompiledGrammar> cg,
                          CompiledGrammar::compile(g, tokens_, options_));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it != index_.end()) return it->second->second;
  lru_.emplace_front(key, cg);
  index_[key] = lru_.begin();
  bytes_ += key.size() + cg->automaton_bytes();
  while (lru_.size() > capacity_ || (lru_.size() > 1 && bytes_ > max_bytes_)) {
    bytes_ -= lru_.back().first.size() + lru_.back().second->automaton_bytes();
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return cg;
}

size_t GrammarCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}
size_t GrammarCache::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}
size_t GrammarCache::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}
size_t GrammarCache::misses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return misses_;
}

}  // namespace fathom::grammar
