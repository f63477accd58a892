#include "grammar/grammar.h"

#include <algorithm>
#include <bit>
#include <cstdio>

namespace fathom::grammar {

int ByteSet::count() const {
  int n = 0;
  for (uint64_t x : w) n += std::popcount(x);
  return n;
}

ExprId Grammar::push(ExprNode n) {
  nodes_.push_back(std::move(n));
  return static_cast<ExprId>(nodes_.size() - 1);
}

ExprId Grammar::empty() { return push(ExprNode{}); }

ExprId Grammar::byte_set(const ByteSet& set) {
  ExprNode n;
  n.kind = ExprKind::kBytes;
  n.bytes = set;
  return push(std::move(n));
}

ExprId Grammar::byte_range(int lo, int hi) {
  ByteSet s;
  s.set_range(lo, hi);
  return byte_set(s);
}

ExprId Grammar::literal(std::string_view bytes) {
  if (bytes.size() == 1) return byte_range(uint8_t(bytes[0]), uint8_t(bytes[0]));
  std::vector<ExprId> kids;
  kids.reserve(bytes.size());
  for (char c : bytes) kids.push_back(byte_range(uint8_t(c), uint8_t(c)));
  return seq(std::move(kids));
}

ExprId Grammar::seq(std::vector<ExprId> kids) {
  if (kids.size() == 1) return kids[0];
  if (kids.empty()) return empty();
  ExprNode n;
  n.kind = ExprKind::kSeq;
  n.kids = std::move(kids);
  return push(std::move(n));
}

ExprId Grammar::alt(std::vector<ExprId> kids) {
  if (kids.size() == 1) return kids[0];
  ExprNode n;
  n.kind = ExprKind::kAlt;
  n.kids = std::move(kids);
  return push(std::move(n));
}

ExprId Grammar::repeat(ExprId e, int32_t min, int32_t max) {
  if (min == 1 && max == 1) return e;
  if (max == 0) return empty();
  ExprNode n;
  n.kind = ExprKind::kRepeat;
  n.kids = {e};
  n.min = min;
  n.max = max;
  return push(std::move(n));
}

ExprId Grammar::ref(int32_t rule) {
  ExprNode n;
  n.kind = ExprKind::kRef;
  n.rule = rule;
  return push(std::move(n));
}

int32_t Grammar::add_rule(std::string name) {
  rules_.push_back(Rule{std::move(name), -1});
  return static_cast<int32_t>(rules_.size() - 1);
}

void Grammar::define_rule(int32_t rule, ExprId body) { rules_[rule].body = body; }

int32_t Grammar::find_rule(std::string_view name) const {
  for (size_t i = 0; i < rules_.size(); ++i) {
    if (rules_[i].name == name) return static_cast<int32_t>(i);
  }
  return -1;
}

int32_t Grammar::import(const Grammar& other, std::string_view prefix) {
  const auto node_base = static_cast<ExprId>(nodes_.size());
  const auto rule_base = static_cast<int32_t>(rules_.size());
  for (const Rule& r : other.rules_)
    rules_.push_back(Rule{std::string(prefix) + r.name, r.body < 0 ? -1 : r.body + node_base});
  nodes_.reserve(nodes_.size() + other.nodes_.size());
  for (ExprNode n : other.nodes_) {
    for (ExprId& k : n.kids) k += node_base;
    if (n.kind == ExprKind::kRef) n.rule += rule_base;
    nodes_.push_back(std::move(n));
  }
  return other.root_ + rule_base;
}

Status Grammar::validate() const {
  if (root_ < 0 || static_cast<size_t>(root_) >= rules_.size()) {
    return invalid_argument("grammar has no root rule");
  }
  for (const Rule& r : rules_) {
    if (r.body < 0) return invalid_argument("grammar rule '" + r.name + "' is never defined");
  }
  return Status::ok();
}

namespace {

void print_byte(std::string& out, int b) {
  if (b == '\\' || b == ']' || b == '[' || b == '-' || b == '^' || b == '"') {
    out += '\\';
    out += static_cast<char>(b);
  } else if (b >= 0x20 && b < 0x7f) {
    out += static_cast<char>(b);
  } else {
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\x%02X", b);
    out += buf;
  }
}

}  // namespace

// The subexpressions to_string() names instead of printing inline: those reached from more
// than one parent whose text, expanded as a tree, would hold at least kMinNodes nodes (an
// object schema's optional-member tails, which every "first member" alternative repeats,
// would otherwise make the text quadratic in the number of members).
struct Grammar::Shared {
  static constexpr int64_t kMinNodes = 32;
  std::vector<bool> hoist;      // by ExprId
  std::vector<int32_t> number;  // by ExprId: its N once printed, else -1
  std::vector<ExprId> order;    // hoisted expressions in the order first printed
};

void Grammar::print(ExprId e, std::string& out, int prec, Shared* shared) const {
  if (shared != nullptr && shared->hoist[size_t(e)]) {
    int32_t& number = shared->number[size_t(e)];
    if (number < 0) {
      number = int32_t(shared->order.size());
      shared->order.push_back(e);
    }
    out += "<shared " + std::to_string(number) + ">";
    return;
  }
  thread_local int depth = 0;
  if (depth > 2000) {
    out += "...";
    return;
  }
  struct Guard {
    Guard() { ++depth; }
    ~Guard() { --depth; }
  } guard;
  const ExprNode& n = nodes_[e];
  switch (n.kind) {
    case ExprKind::kEmpty:
      out += "\"\"";
      return;
    case ExprKind::kBytes: {
      out += '[';
      for (int b = 0; b < 256;) {
        if (!n.bytes.has(b)) {
          ++b;
          continue;
        }
        int hi = b;
        while (hi + 1 < 256 && n.bytes.has(hi + 1)) ++hi;
        print_byte(out, b);
        if (hi > b) {
          out += '-';
          print_byte(out, hi);
        }
        b = hi + 1;
      }
      out += ']';
      return;
    }
    case ExprKind::kSeq:
      if (prec > 1) out += '(';
      for (size_t i = 0; i < n.kids.size(); ++i) {
        if (i) out += ' ';
        print(n.kids[i], out, 2, shared);
      }
      if (prec > 1) out += ')';
      return;
    case ExprKind::kAlt:
      if (n.kids.empty()) {
        out += "[]";
        return;
      }
      if (prec > 0) out += '(';
      for (size_t i = 0; i < n.kids.size(); ++i) {
        if (i) out += " | ";
        print(n.kids[i], out, 1, shared);
      }
      if (prec > 0) out += ')';
      return;
    case ExprKind::kRepeat:
      print(n.kids[0], out, 3, shared);
      out += '{' + std::to_string(n.min) + ',' + (n.max < 0 ? "" : std::to_string(n.max)) + '}';
      return;
    case ExprKind::kRef:
      out += rules_[n.rule].name;
      return;
  }
}

std::string Grammar::to_string() const {
  // Parents and expanded tree size of every expression reachable from a rule.
  const size_t n = nodes_.size();
  std::vector<int32_t> parents(n, 0);
  std::vector<int64_t> tree(n, 0);
  std::vector<bool> seen(n, false);
  std::vector<std::pair<ExprId, bool>> stack;  // (expression, its kids done)
  for (const Rule& r : rules_)
    if (r.body >= 0) stack.push_back({r.body, false});
  while (!stack.empty()) {
    auto [e, kids_done] = stack.back();
    stack.pop_back();
    if (kids_done) {
      int64_t t = 1;
      for (ExprId k : nodes_[size_t(e)].kids) t = std::min<int64_t>(t + tree[size_t(k)], 1 << 30);
      tree[size_t(e)] = t;
      continue;
    }
    if (seen[size_t(e)]) continue;
    seen[size_t(e)] = true;
    stack.push_back({e, true});
    for (ExprId k : nodes_[size_t(e)].kids) {
      ++parents[size_t(k)];
      if (!seen[size_t(k)]) stack.push_back({k, false});
    }
  }
  Shared shared;
  shared.hoist.resize(n);
  shared.number.assign(n, -1);
  for (size_t e = 0; e < n; ++e) shared.hoist[e] = parents[e] > 1 && tree[e] >= Shared::kMinNodes;
  std::string out;
  // Root first, then the rest in id order.
  std::vector<int32_t> order{root_};
  for (int32_t r = 0; r < static_cast<int32_t>(rules_.size()); ++r) {
    if (r != root_) order.push_back(r);
  }
  for (int32_t r : order) {
    out += rules_[r].name;
    out += " ::= ";
    if (rules_[r].body >= 0) print(rules_[r].body, out, 0, &shared);
    out += '\n';
  }
  for (size_t i = 0; i < shared.order.size(); ++i) {
    const ExprId e = shared.order[i];
    out += "<shared " + std::to_string(i) + "> ::= ";
    shared.hoist[size_t(e)] = false;  // its own body is printed, its shared parts named
    print(e, out, 0, &shared);
    shared.hoist[size_t(e)] = true;
    out += '\n';
  }
  return out;
}

std::vector<CodeRange> normalize_ranges(std::vector<CodeRange> ranges) {
  std::vector<CodeRange> split;
  for (auto [lo, hi] : ranges) {
    if (lo > hi) continue;
    hi = std::min<uint32_t>(hi, 0x10FFFF);
    if (lo > hi) continue;
    // Remove surrogates.
    if (lo < 0xD800 && hi >= 0xD800) {
      split.push_back({lo, 0xD7FF});
      if (hi > 0xDFFF) split.push_back({0xE000, hi});
    } else if (lo >= 0xD800 && lo <= 0xDFFF) {
      if (hi > 0xDFFF) split.push_back({0xE000, hi});
    } else {
      split.push_back({lo, hi});
    }
  }
  std::sort(split.begin(), split.end());
  std::vector<CodeRange> out;
  for (auto r : split) {
    if (!out.empty() && r.first <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, r.second);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

std::vector<CodeRange> complement_ranges(const std::vector<CodeRange>& ranges) {
  std::vector<CodeRange> out;
  uint32_t next = 0;
  for (auto [lo, hi] : ranges) {
    if (lo > next) out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= 0x10FFFF) out.push_back({next, 0x10FFFF});
  return normalize_ranges(std::move(out));
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace {

int utf8_len(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

// Splits [lo, hi] (same encoded length) into ranges whose UTF-8 encodings are products of
// byte ranges, appending each as a byte-range sequence.
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<std::vector<std::pair<int, int>>>& out) {
  int n = utf8_len(lo);
  if (utf8_len(hi) != n) {
    static const uint32_t kMax[] = {0, 0x7F, 0x7FF, 0xFFFF};
    utf8_sequences(lo, kMax[n], out);
    utf8_sequences(kMax[n] + 1, hi, out);
    return;
  }
  for (int i = 1; i < n; ++i) {
    uint32_t m = (uint32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_sequences(lo, lo | m, out);
        utf8_sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_sequences(lo, (hi & ~m) - 1, out);
        utf8_sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a, b;
  append_utf8(a, lo);
  append_utf8(b, hi);
  std::vector<std::pair<int, int>> seq;
  for (int i = 0; i < n; ++i) seq.push_back({uint8_t(a[i]), uint8_t(b[i])});
  out.push_back(std::move(seq));
}

}  // namespace

ExprId Grammar::code_points(std::vector<CodeRange> ranges) {
  ranges = normalize_ranges(std::move(ranges));
  std::vector<std::vector<std::pair<int, int>>> seqs;
  for (auto [lo, hi] : ranges) utf8_sequences(lo, hi, seqs);
  // Merge single-byte sequences into one byte set; group multi-byte sequences by their
  // first byte range to keep the expression small.
  ByteSet ascii;
  std::vector<ExprId> alts;
  for (const auto& s : seqs) {
    if (s.size() == 1) {
      ascii.set_range(s[0].first, s[0].second);
      continue;
    }
    std::vector<ExprId> parts;
    for (auto [lo, hi] : s) parts.push_back(byte_range(lo, hi));
    alts.push_back(seq(std::move(parts)));
  }
  if (!ascii.empty()) alts.insert(alts.begin(), byte_set(ascii));
  return alt(std::move(alts));
}

}  // namespace fathom::grammar
