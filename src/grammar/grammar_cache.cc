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

Result<std::shared_ptr<const PreparedGrammar>> prepare_grammar(const GrammarSpec& spec) {
  FATHOM_ASSIGN_OR_RETURN(Grammar g, build_grammar(spec));
  std::string key = g.to_string();
  return std::make_shared<const PreparedGrammar>(PreparedGrammar{std::move(g), std::move(key)});
}

Result<std::shared_ptr<const CompiledGrammar>> GrammarCache::get(const GrammarSpec& spec,
                                                                 const CancelToken* cancel) {
  FATHOM_ASSIGN_OR_RETURN(std::shared_ptr<const PreparedGrammar> g, prepare_grammar(spec));
  return get(*g, cancel);
}

Result<std::shared_ptr<const CompiledGrammar>> GrammarCache::get(const PreparedGrammar& g,
                                                                 const CancelToken* cancel) {
  const std::string& key = g.key;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto known = known_locked(key);
    if (!known.is_ok() || *known) return known;
    ++misses_;
  }
  auto compiled = CompiledGrammar::compile(g.grammar, tokens_, options_, cancel);
  std::lock_guard<std::mutex> lock(mu_);
  if (!compiled.is_ok()) {
    if (compiled.status().code() == StatusCode::kCancelled)
      ++cancelled_;
    else
      remember_failure_locked(key, compiled.status());
    return compiled.status();
  }
  std::shared_ptr<const CompiledGrammar> cg = std::move(*compiled);
  auto it = index_.find(key);
  if (it != index_.end()) return it->second->second;
  lru_.emplace_front(key, cg);
  index_[key] = lru_.begin();
  bytes_ += key.size() + cg->automaton_bytes();
  trim_locked();
  return cg;
}

Result<std::shared_ptr<const CompiledGrammar>> GrammarCache::find(const GrammarSpec& spec) {
  FATHOM_ASSIGN_OR_RETURN(std::shared_ptr<const PreparedGrammar> g, prepare_grammar(spec));
  return find(*g);
}

Result<std::shared_ptr<const CompiledGrammar>> GrammarCache::find(const PreparedGrammar& g) {
  std::lock_guard<std::mutex> lock(mu_);
  return known_locked(g.key);
}

Result<std::shared_ptr<const CompiledGrammar>> GrammarCache::known_locked(const std::string& key) {
  if (const Status* failed = failure_locked(key)) return *failed;
  return lookup_locked(key);
}

const Status* GrammarCache::failure_locked(const std::string& key) const {
  for (const auto& [k, s] : failures_)
    if (k == key) return &s;
  return nullptr;
}

void GrammarCache::remember_failure_locked(const std::string& key, const Status& s) {
  if (key.size() > kMaxFailureKey || failure_locked(key) != nullptr) return;
  failures_.emplace_back(key, s);
  if (failures_.size() > kMaxFailures) failures_.pop_front();
}

std::shared_ptr<const CompiledGrammar> GrammarCache::lookup_locked(const std::string& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  ++hits_;
  std::shared_ptr<const CompiledGrammar> cg = it->second->second;
  trim_locked();  // its masks (or others') may have grown since the last check
  return cg;
}

size_t GrammarCache::bytes_locked() const {
  size_t n = bytes_;
  for (const Entry& e : lru_) n += e.second->cached_bytes();
  return n;
}

void GrammarCache::trim_locked() {
  size_t total = bytes_locked();
  while (lru_.size() > capacity_ || (lru_.size() > 1 && total > max_bytes_)) {
    const Entry& last = lru_.back();
    const size_t own = last.first.size() + last.second->automaton_bytes();
    const size_t gone = own + last.second->cached_bytes();  // its masks may have grown meanwhile
    bytes_ -= own;
    total = total > gone ? total - gone : 0;
    index_.erase(last.first);
    lru_.pop_back();
  }
}

size_t GrammarCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}
size_t GrammarCache::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_locked();
}
size_t GrammarCache::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}
size_t GrammarCache::misses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return misses_;
}
size_t GrammarCache::cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

}  // namespace fathom::grammar
