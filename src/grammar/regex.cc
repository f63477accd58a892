#include "grammar/regex.h"

#include <string>

namespace fathom::grammar {
namespace {

const std::vector<CodeRange> kDigit{{'0', '9'}};
const std::vector<CodeRange> kWord{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const std::vector<CodeRange> kSpace{
    {'\t', '\r'},     {' ', ' '},       {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
    {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
const std::vector<CodeRange> kDot{{0, 9}, {11, 12}, {14, 0x2027}, {0x202A, 0x10FFFF}};

class RegexParser {
 public:
  RegexParser(Grammar& g, std::string_view p, const RegexOptions& o) : g_(g), p_(p), o_(o) {}

  Result<ExprId> parse() {
    std::vector<ExprId> branches;
    while (true) {
      bool anchored_start = false, anchored_end = false;
      if (peek('^')) {
        ++pos_;
        anchored_start = true;
      }
      FATHOM_ASSIGN_OR_RETURN(ExprId body, parse_branch(/*top=*/true));
      if (peek('$')) {
        ++pos_;
        anchored_end = true;
      }
      if (o_.search) {
        std::vector<ExprId> parts;
        if (!anchored_start) parts.push_back(g_.star(chars(all())));
        parts.push_back(body);
        if (!anchored_end) parts.push_back(g_.star(chars(all())));
        body = g_.seq(std::move(parts));
      }
      branches.push_back(body);
      if (pos_ >= p_.size()) break;
      if (p_[pos_] == '|') {
        ++pos_;
        continue;
      }
      if (p_[pos_] == ')') return error("unbalanced ')'");
      return error("'$' in the middle of a pattern is not supported");
    }
    return g_.alt(std::move(branches));
  }

 private:
  static std::vector<CodeRange> all() { return {{0, 0x10FFFF}}; }
  ExprId chars(const std::vector<CodeRange>& r) {
    return o_.chars ? o_.chars(g_, normalize_ranges(r)) : g_.code_points(r);
  }
  bool peek(char c) const { return pos_ < p_.size() && p_[pos_] == c; }
  Status error(const std::string& what) const {
    return invalid_argument("regex /" + std::string(p_) + "/ at " + std::to_string(pos_) + ": " +
                            what);
  }
  Status unsup(const std::string& what) const {
    return unsupported("regex /" + std::string(p_) + "/: " + what + " is not supported");
  }

  Result<ExprId> parse_alternation() {
    if (++depth_ > kMaxDepth) return unsup("nesting deeper than 200 groups");
    struct Guard {
      int& d;
      ~Guard() { --d; }
    } guard{depth_};
    std::vector<ExprId> branches;
    while (true) {
      FATHOM_ASSIGN_OR_RETURN(ExprId b, parse_branch(false));
      branches.push_back(b);
      if (peek('|')) {
        ++pos_;
        continue;
      }
      return g_.alt(std::move(branches));
    }
  }

  Result<ExprId> parse_branch(bool top) {
    std::vector<ExprId> parts;
    while (pos_ < p_.size()) {
      char c = p_[pos_];
      if (c == '|' || c == ')') break;
      if (c == '$') {
        if (top && (pos_ + 1 == p_.size() || p_[pos_ + 1] == '|')) break;
        return unsup("'$' other than at the end");
      }
      if (c == '^') return unsup("'^' other than at the start");
      FATHOM_ASSIGN_OR_RETURN(ExprId atom, parse_atom());
      FATHOM_ASSIGN_OR_RETURN(ExprId piece, parse_quantifier(atom));
      parts.push_back(piece);
    }
    return g_.seq(std::move(parts));
  }

  Result<int32_t> parse_int() {
    size_t start = pos_;
    int64_t v = 0;
    while (pos_ < p_.size() && p_[pos_] >= '0' && p_[pos_] <= '9') {
      v = v * 10 + (p_[pos_] - '0');
      if (v > 1'000'000'000) return error("repetition count too large");
      ++pos_;
    }
    if (pos_ == start) return error("expected a number");
    return int32_t(v);
  }

  Result<ExprId> parse_quantifier(ExprId atom) {
    while (pos_ < p_.size()) {
      char c = p_[pos_];
      int32_t mn, mx;
      if (c == '*') {
        mn = 0, mx = kUnbounded;
        ++pos_;
      } else if (c == '+') {
        mn = 1, mx = kUnbounded;
        ++pos_;
      } else if (c == '?') {
        mn = 0, mx = 1;
        ++pos_;
      } else if (c == '{') {
        // "{" not followed by a valid bound is a literal in ECMAScript's Annex B; be strict.
        size_t save = pos_;
        ++pos_;
        if (pos_ >= p_.size() || p_[pos_] < '0' || p_[pos_] > '9') {
          pos_ = save;
          return atom;
        }
        FATHOM_ASSIGN_OR_RETURN(mn, parse_int());
        mx = mn;
        if (peek(',')) {
          ++pos_;
          if (peek('}')) {
            mx = kUnbounded;
          } else {
            FATHOM_ASSIGN_OR_RETURN(mx, parse_int());
          }
        }
        if (!peek('}')) return error("unterminated {n,m}");
        ++pos_;
        if (mx != kUnbounded && mx < mn) return error("{n,m} with m < n");
        if (mn > o_.max_repeat || mx > o_.max_repeat) {
          return unsup("a repetition bound over " + std::to_string(o_.max_repeat));
        }
      } else {
        return atom;
      }
      if (peek('?')) ++pos_;  // lazy: same language
      if (peek('+')) return unsup("a possessive quantifier");
      return g_.repeat(atom, mn, mx);  // a second quantifier is "nothing to repeat"
    }
    return atom;
  }

  Result<uint32_t> next_code_point() {
    unsigned char c = uint8_t(p_[pos_]);
    int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (c >= 0x80 && c < 0xC0) return error("invalid UTF-8");
    if (pos_ + n > p_.size()) return error("invalid UTF-8");
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (int i = 1; i < n; ++i) cp = (cp << 6) | (uint8_t(p_[pos_ + i]) & 0x3F);
    pos_ += n;
    return cp;
  }

  Result<uint32_t> parse_hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      if (pos_ >= p_.size() || !isxdigit(uint8_t(p_[pos_]))) return error("bad hex escape");
      char h = p_[pos_++];
      v = v * 16 + uint32_t(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    return v;
  }

  // Parses an escape after '\'. Returns the class it denotes.
  Result<std::vector<CodeRange>> parse_escape(bool in_class) {
    if (pos_ >= p_.size()) return error("trailing backslash");
    char c = p_[pos_++];
    auto one = [](uint32_t cp) { return std::vector<CodeRange>{{cp, cp}}; };
    switch (c) {
      case 'd':
        return kDigit;
      case 'D':
        return complement_ranges(normalize_ranges(kDigit));
      case 'w':
        return kWord;
      case 'W':
        return complement_ranges(normalize_ranges(kWord));
      case 's':
        return kSpace;
      case 'S':
        return complement_ranges(normalize_ranges(kSpace));
      case 'n':
        return one('\n');
      case 'r':
        return one('\r');
      case 't':
        return one('\t');
      case 'f':
        return one('\f');
      case 'v':
        return one('\v');
      case '0':
        if (pos_ < p_.size() && isdigit(uint8_t(p_[pos_]))) return unsup("an octal escape");
        return one(0);
      case 'b':
        if (in_class) return one('\b');
        return unsup("a word boundary (\\b)");
      case 'B':
        return unsup("a word boundary (\\B)");
      case 'x': {
        FATHOM_ASSIGN_OR_RETURN(uint32_t v, parse_hex(2));
        return one(v);
      }
      case 'u': {
        if (peek('{')) {
          ++pos_;
          uint32_t v = 0;
          int n = 0;
          while (pos_ < p_.size() && isxdigit(uint8_t(p_[pos_])) && n < 6) {
            FATHOM_ASSIGN_OR_RETURN(uint32_t h, parse_hex(1));
            v = v * 16 + h;
            ++n;
          }
          if (!peek('}') || n == 0 || v > 0x10FFFF) return error("bad \\u{...} escape");
          ++pos_;
          return one(v);
        }
        FATHOM_ASSIGN_OR_RETURN(uint32_t v, parse_hex(4));
        if (v >= 0xD800 && v <= 0xDBFF && pos_ + 6 <= p_.size() && p_[pos_] == '\\' &&
            p_[pos_ + 1] == 'u') {
          size_t save = pos_;
          pos_ += 2;
          FATHOM_ASSIGN_OR_RETURN(uint32_t lo, parse_hex(4));
          if (lo >= 0xDC00 && lo <= 0xDFFF)
            return one(0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00));
          pos_ = save;
        }
        if (v >= 0xD800 && v <= 0xDFFF) return unsup("a lone surrogate escape");
        return one(v);
      }
      case 'c':
        return unsup("a control escape (\\c)");
      case 'p':
      case 'P':
        return unsup("a Unicode property escape (\\p)");
      case 'k':
        return unsup("a named backreference (\\k)");
      default:
        if (c >= '1' && c <= '9') return unsup("a backreference");
        if (isalnum(uint8_t(c))) return error(std::string("unknown escape \\") + c);
        --pos_;
        FATHOM_ASSIGN_OR_RETURN(uint32_t cp, next_code_point());
        return one(cp);
    }
  }

  Result<std::vector<CodeRange>> parse_class() {
    // After '['.
    bool negate = false;
    if (peek('^')) {
      negate = true;
      ++pos_;
    }
    std::vector<CodeRange> ranges;
    while (true) {
      if (pos_ >= p_.size()) return error("unterminated character class");
      if (p_[pos_] == ']') {
        ++pos_;
        break;
      }
      // One class atom.
      auto atom = [&]() -> Result<std::vector<CodeRange>> {
        if (p_[pos_] == '\\') {
          ++pos_;
          return parse_escape(true);
        }
        if (p_[pos_] == '[' && pos_ + 1 < p_.size() && p_[pos_ + 1] == ':') {
          return unsup("a POSIX class ([:name:])");
        }
        FATHOM_ASSIGN_OR_RETURN(uint32_t cp, next_code_point());
        return std::vector<CodeRange>{{cp, cp}};
      };
      FATHOM_ASSIGN_OR_RETURN(std::vector<CodeRange> lo, atom());
      if (peek('-') && pos_ + 1 < p_.size() && p_[pos_ + 1] != ']') {
        ++pos_;
        FATHOM_ASSIGN_OR_RETURN(std::vector<CodeRange> hi, atom());
        if (lo.size() != 1 || hi.size() != 1 || lo[0].first != lo[0].second ||
            hi[0].first != hi[0].second) {
          return error("a class escape cannot bound a range");
        }
        if (hi[0].first < lo[0].first) return error("range out of order");
        ranges.push_back({lo[0].first, hi[0].first});
      } else {
        ranges.insert(ranges.end(), lo.begin(), lo.end());
      }
    }
    ranges = normalize_ranges(std::move(ranges));
    if (negate) ranges = complement_ranges(ranges);
    return ranges;
  }

  Result<ExprId> parse_atom() {
    char c = p_[pos_];
    switch (c) {
      case '(': {
        ++pos_;
        if (peek('?')) {
          ++pos_;
          if (peek(':')) {
            ++pos_;
          } else if (peek('<') && pos_ + 1 < p_.size() && p_[pos_ + 1] != '=' &&
                     p_[pos_ + 1] != '!') {
            while (pos_ < p_.size() && p_[pos_] != '>') ++pos_;
            if (pos_ >= p_.size()) return error("unterminated group name");
            ++pos_;
          } else {
            return unsup("lookaround or an inline flag group (?...)");
          }
        }
        FATHOM_ASSIGN_OR_RETURN(ExprId e, parse_alternation());
        if (!peek(')')) return error("missing ')'");
        ++pos_;
        return e;
      }
      case '[': {
        ++pos_;
        FATHOM_ASSIGN_OR_RETURN(std::vector<CodeRange> r, parse_class());
        if (r.empty()) return g_.nothing();
        return chars(r);
      }
      case '.':
        ++pos_;
        return chars(kDot);
      case '\\': {
        ++pos_;
        FATHOM_ASSIGN_OR_RETURN(std::vector<CodeRange> r, parse_escape(false));
        return chars(r);
      }
      case '*':
      case '+':
      case '?':
        return error("nothing to repeat");
      case '{':
        if (pos_ + 1 < p_.size() && isdigit(uint8_t(p_[pos_ + 1])))
          return error("nothing to repeat");
        break;
      default:
        break;
    }
    FATHOM_ASSIGN_OR_RETURN(uint32_t cp, next_code_point());
    return chars({{cp, cp}});
  }

  Grammar& g_;
  std::string_view p_;
  const RegexOptions& o_;
  size_t pos_ = 0;
  int depth_ = 0;
  static constexpr int kMaxDepth = 200;
};

}  // namespace

Result<ExprId> parse_regex(Grammar& g, std::string_view pattern, const RegexOptions& options) {
  RegexParser parser(g, pattern, options);
  return parser.parse();
}

Result<Grammar> regex_grammar(std::string_view pattern) {
  Grammar g;
  int32_t root = g.add_rule("root");
  FATHOM_ASSIGN_OR_RETURN(ExprId e, parse_regex(g, pattern));
  g.define_rule(root, e);
  g.set_root(root);
  return g;
}

}  // namespace fathom::grammar
