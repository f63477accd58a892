// Grammar: the intermediate form every front end (regex, JSON Schema, GBNF, choice) produces
// and the automaton compiler consumes. A grammar is a set of named rules over bytes; each rule
// is an expression tree of byte sets, sequences, alternations, bounded or unbounded
// repetitions and references to rules. Code-point classes are expanded to UTF-8 byte
// sequences when they are built, so the automaton only ever sees bytes.
//
// A Grammar is plain data built by one thread; once handed to compile() it is only read.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace fathom::grammar {

using ExprId = int32_t;
inline constexpr int32_t kUnbounded = -1;

// 256-bit set of byte values.
struct ByteSet {
  std::array<uint64_t, 4> w{};
  void set(int b) { w[b >> 6] |= uint64_t{1} << (b & 63); }
  void set_range(int lo, int hi) {
    for (int b = lo; b <= hi; ++b) set(b);
  }
  bool has(int b) const { return (w[b >> 6] >> (b & 63)) & 1; }
  bool empty() const { return (w[0] | w[1] | w[2] | w[3]) == 0; }
  int count() const;
  ByteSet& operator|=(const ByteSet& o) {
    for (int i = 0; i < 4; ++i) w[i] |= o.w[i];
    return *this;
  }
  bool operator==(const ByteSet& o) const { return w == o.w; }
};

enum class ExprKind : uint8_t { kEmpty, kBytes, kSeq, kAlt, kRepeat, kRef };

struct ExprNode {
  ExprKind kind = ExprKind::kEmpty;
  ByteSet bytes;             // kBytes
  std::vector<ExprId> kids;  // kSeq, kAlt; kRepeat: one child
  int32_t min = 0, max = 0;  // kRepeat (max kUnbounded = no bound)
  int32_t rule = -1;         // kRef
};

// An inclusive range of Unicode scalar values.
using CodeRange = std::pair<uint32_t, uint32_t>;

class Grammar {
 public:
  // Expression builders. Children must come from this grammar.
  ExprId empty();
  ExprId byte_set(const ByteSet& set);
  ExprId byte_range(int lo, int hi);
  ExprId literal(std::string_view bytes);
  ExprId seq(std::vector<ExprId> kids);
  ExprId alt(std::vector<ExprId> kids);
  ExprId repeat(ExprId e, int32_t min, int32_t max);
  ExprId star(ExprId e) { return repeat(e, 0, kUnbounded); }
  ExprId plus(ExprId e) { return repeat(e, 1, kUnbounded); }
  ExprId opt(ExprId e) { return repeat(e, 0, 1); }
  ExprId ref(int32_t rule);
  // Any one code point in the given ranges (normalized: sorted, merged, surrogates
  // removed), as UTF-8.
  ExprId code_points(std::vector<CodeRange> ranges);
  // A sequence that matches nothing (an empty alternation).
  ExprId nothing() { return alt({}); }

  // Rules. add_rule reserves a rule id (defined later with define_rule).
  int32_t add_rule(std::string name);
  void define_rule(int32_t rule, ExprId body);
  // -1 if there is no rule of that name.
  int32_t find_rule(std::string_view name) const;
  // Copies every rule and expression of `other` into this grammar (rule names prefixed with
  // `prefix`) and returns the new id of other's root rule: how a larger grammar embeds a
  // grammar another front end built (e.g. a JSON Schema inside a tool-call block).
  int32_t import(const Grammar& other, std::string_view prefix);

  const ExprNode& node(ExprId id) const { return nodes_[id]; }
  size_t node_count() const { return nodes_.size(); }
  size_t rule_count() const { return rules_.size(); }
  const std::string& rule_name(int32_t r) const { return rules_[r].name; }
  ExprId rule_body(int32_t r) const { return rules_[r].body; }
  int32_t root() const { return root_; }
  void set_root(int32_t r) { root_ = r; }

  // Checks that every rule is defined and the root exists.
  Status validate() const;
  // A canonical, human-readable text (GBNF-like) of the grammar, in time and size linear in
  // the grammar's: a large subexpression that several expressions share is printed once, as
  // a rule named "<shared N>" (a name no GBNF rule can have), numbered as first printed.
  std::string to_string() const;

 private:
  struct Rule {
    std::string name;
    ExprId body = -1;
  };
  // How to_string() prints subexpressions that several expressions share (see grammar.cc).
  struct Shared;
  ExprId push(ExprNode n);
  void print(ExprId e, std::string& out, int prec, Shared* shared) const;

  std::vector<ExprNode> nodes_;
  std::vector<Rule> rules_;
  int32_t root_ = 0;
};

// Normalizes code-point ranges: sorted, overlapping and adjacent ranges merged, surrogates
// (U+D800..U+DFFF) removed, clipped to U+10FFFF.
std::vector<CodeRange> normalize_ranges(std::vector<CodeRange> ranges);
// The complement of normalized ranges within all Unicode scalar values.
std::vector<CodeRange> complement_ranges(const std::vector<CodeRange>& ranges);
// Appends the UTF-8 encoding of a scalar value.
void append_utf8(std::string& out, uint32_t cp);

}  // namespace fathom::grammar
