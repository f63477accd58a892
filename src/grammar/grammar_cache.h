// GrammarSpec: what a request asks for (a regex, a JSON Schema, a GBNF grammar or a list of
// choices), turned into a Grammar by build_grammar(); PreparedGrammar: that grammar with its
// cache key, built once per request. GrammarCache: compiled grammars for one
// vocabulary, least recently used first out, keyed by the canonical text of the built grammar
// (so two spellings of the same schema share one entry). Thread-safe; compilation happens
// outside the lock, on the caller's thread (two threads may compile the same grammar once
// each, and one result is kept: CompileQueue runs one compile per key at a time), and stops
// early when the caller's CancelToken is raised.
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/cancel.h"
#include "core/status.h"
#include "grammar/compiled_grammar.h"
#include "grammar/json_schema.h"

namespace fathom::grammar {

struct GrammarSpec {
  enum class Kind { kRegex, kJsonSchema, kGbnf, kChoice, kDsml };
  Kind kind = Kind::kJsonSchema;
  std::string text;                  // the regex, schema JSON, GBNF text or dsml_spec_json()
  std::vector<std::string> choices;  // kChoice
  JsonSchemaOptions json;
};

// A grammar matching exactly one of the given strings (at least one).
Result<Grammar> choice_grammar(const std::vector<std::string>& choices);
Result<Grammar> build_grammar(const GrammarSpec& spec);

// A spec built into its grammar, with the grammar's cache key (its canonical text): what a
// request looks up in the cache and, on a miss, compiles, so the spec is built once.
struct PreparedGrammar {
  Grammar grammar;
  std::string key;
};
Result<std::shared_ptr<const PreparedGrammar>> prepare_grammar(const GrammarSpec& spec);

class GrammarCache {
 public:
  // At most `capacity` grammars whose automata, the token masks computed for them since, and
  // their keys take at most max_bytes together (the least recently used go first, checked at
  // every get() and find(); one grammar larger than max_bytes is still kept, alone).
  GrammarCache(std::shared_ptr<const TokenTable> tokens, size_t capacity,
               CompileOptions options = {}, size_t max_bytes = size_t(1) << 30);

  // The compiled grammar for spec, from the cache or compiled now; kCancelled when `cancel`
  // is raised before a compile ends (nothing is cached then).
  Result<std::shared_ptr<const CompiledGrammar>> get(const GrammarSpec& spec,
                                                     const CancelToken* cancel = nullptr);
  Result<std::shared_ptr<const CompiledGrammar>> get(const PreparedGrammar& g,
                                                     const CancelToken* cancel = nullptr);
  // The cached grammar for spec without compiling: null when it is not cached; a spec that
  // does not build (a malformed schema, regex or grammar), or whose compile failed before
  // (too large), is its error. A find counts a hit.
  Result<std::shared_ptr<const CompiledGrammar>> find(const GrammarSpec& spec);
  Result<std::shared_ptr<const CompiledGrammar>> find(const PreparedGrammar& g);
  size_t size() const;
  // The cached grammars' automaton_bytes(), cached_bytes() (their masks) and keys.
  size_t bytes() const;
  size_t hits() const;
  size_t misses() const;     // compiles started
  size_t cancelled() const;  // compiles given up on a raised CancelToken

 private:
  // The entry under key, made most recent (null when absent). REQUIRES: mu_ held.
  std::shared_ptr<const CompiledGrammar> lookup_locked(const std::string& key);
  // Drops the least recently used entries over the bounds. REQUIRES: mu_ held.
  void trim_locked();
  // What is known of key: the remembered error of its compile, else its cached grammar, else
  // null. REQUIRES: mu_ held.
  Result<std::shared_ptr<const CompiledGrammar>> known_locked(const std::string& key);
  // The error a compile of key gave before, if it is remembered. REQUIRES: mu_ held.
  const Status* failure_locked(const std::string& key) const;
  void remember_failure_locked(const std::string& key, const Status& s);
  size_t bytes_locked() const;

  std::shared_ptr<const TokenTable> tokens_;
  size_t capacity_;
  CompileOptions options_;
  size_t max_bytes_;
  mutable std::mutex mu_;
  using Entry = std::pair<std::string, std::shared_ptr<const CompiledGrammar>>;
  size_t bytes_ = 0;      // keys and automata; guarded by mu_
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  size_t hits_ = 0, misses_ = 0, cancelled_ = 0;
  // Keys whose compile failed for good (too large: the same key fails the same way), with the
  // error, so a client repeating one does not take a compile thread for seconds each time:
  // the last kMaxFailures keys of at most kMaxFailureKey bytes, oldest first out.
  static constexpr size_t kMaxFailures = 64, kMaxFailureKey = 64 << 10;
  std::list<std::pair<std::string, Status>> failures_;  // guarded by mu_
};

}  // namespace fathom::grammar
