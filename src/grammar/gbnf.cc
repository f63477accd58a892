#include "grammar/gbnf.h"

#include <string>

namespace fathom::grammar {
namespace {

bool is_name_char(char c) { return isalnum(uint8_t(c)) || c == '-' || c == '_'; }

class GbnfParser {
 public:
  explicit GbnfParser(std::string_view t) : t_(t) {}

  Result<Grammar> parse() {
    skip_space(true);
    while (pos_ < t_.size()) {
      std::string name = parse_name();
      if (name.empty()) return error("expected a rule name");
      skip_space(false);
      if (t_.substr(pos_, 3) != "::=") return error("expected '::='");
      pos_ += 3;
      skip_space(true);
      FATHOM_ASSIGN_OR_RETURN(ExprId body, parse_alternates(false));
      int32_t r = rule_id(name);
      if (defined_.size() <= size_t(r)) defined_.resize(r + 1, false);
      if (defined_[r]) return error("rule '" + name + "' is defined twice");
      defined_[r] = true;
      g_.define_rule(r, body);
      if (pos_ < t_.size() && t_[pos_] != '\n' && t_[pos_] != '\r') {
        return error("expected the end of the rule");
      }
      skip_space(true);
    }
    int32_t root = g_.find_rule("root");
    if (root < 0) return invalid_argument("GBNF grammar has no 'root' rule");
    for (size_t r = 0; r < g_.rule_count(); ++r) {
      if (r >= defined_.size() || !defined_[r]) {
        return invalid_argument("GBNF rule '" + g_.rule_name(int32_t(r)) +
                                "' is used but never defined");
      }
    }
    g_.set_root(root);
    return std::move(g_);
  }

 private:
  Status error(const std::string& what) const {
    int line = 1;
    for (size_t i = 0; i < pos_ && i < t_.size(); ++i) line += t_[i] == '\n';
    return invalid_argument("GBNF line " + std::to_string(line) + ": " + what);
  }
  int32_t rule_id(const std::string& name) {
    int32_t r = g_.find_rule(name);
    return r >= 0 ? r : g_.add_rule(name);
  }
  void skip_space(bool newline_ok) {
    while (pos_ < t_.size()) {
      char c = t_[pos_];
      if (c == ' ' || c == '\t' || (newline_ok && (c == '\n' || c == '\r'))) {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < t_.size() && t_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }
  std::string parse_name() {
    size_t s = pos_;
    while (pos_ < t_.size() && is_name_char(t_[pos_])) ++pos_;
    return std::string(t_.substr(s, pos_ - s));
  }

  Result<ExprId> parse_alternates(bool nested) {
    std::vector<ExprId> alts;
    while (true) {
      FATHOM_ASSIGN_OR_RETURN(ExprId s, parse_sequence(nested));
      alts.push_back(s);
      if (pos_ < t_.size() && t_[pos_] == '|') {
        ++pos_;
        skip_space(true);
        continue;
      }
      return g_.alt(std::move(alts));
    }
  }

  Result<uint32_t> parse_hex(int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; ++i) {
      if (pos_ >= t_.size() || !isxdigit(uint8_t(t_[pos_]))) return error("bad hex escape");
      char h = t_[pos_++];
      v = v * 16 + uint32_t(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    return v;
  }

  // One character of a literal or class, after resolving escapes.
  Result<uint32_t> parse_char() {
    if (pos_ >= t_.size()) return error("unexpected end of input");
    unsigned char c = uint8_t(t_[pos_]);
    if (c == '\\') {
      ++pos_;
      if (pos_ >= t_.size()) return error("trailing backslash");
      char e = t_[pos_++];
      switch (e) {
        case 'n':
          return uint32_t('\n');
        case 'r':
          return uint32_t('\r');
        case 't':
          return uint32_t('\t');
        case 'x':
          return parse_hex(2);
        case 'u':
          return parse_hex(4);
        case 'U':
          return parse_hex(8);
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '^':
        case '/':
          return uint32_t(uint8_t(e));
        default:
          return error(std::string("unknown escape \\") + e);
      }
    }
    int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if ((c >= 0x80 && c < 0xC0) || pos_ + n > t_.size()) return error("invalid UTF-8");
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (int i = 1; i < n; ++i) cp = (cp << 6) | (uint8_t(t_[pos_ + i]) & 0x3F);
    pos_ += n;
    return cp;
  }

  Result<ExprId> parse_sequence(bool nested) {
    std::vector<ExprId> items;
    while (pos_ < t_.size()) {
      char c = t_[pos_];
      ExprId atom;
      if (c == '"') {
        ++pos_;
        std::string bytes;
        while (pos_ < t_.size() && t_[pos_] != '"') {
          FATHOM_ASSIGN_OR_RETURN(uint32_t cp, parse_char());
          append_utf8(bytes, cp);
        }
        if (pos_ >= t_.size()) return error("unterminated literal");
        ++pos_;
        atom = bytes.empty() ? g_.empty() : g_.literal(bytes);
      } else if (c == '[') {
        ++pos_;
        bool negate = false;
        if (pos_ < t_.size() && t_[pos_] == '^') {
          negate = true;
          ++pos_;
        }
        std::vector<CodeRange> ranges;
        while (pos_ < t_.size() && t_[pos_] != ']') {
          FATHOM_ASSIGN_OR_RETURN(uint32_t lo, parse_char());
          uint32_t hi = lo;
          if (pos_ + 1 < t_.size() && t_[pos_] == '-' && t_[pos_ + 1] != ']') {
            ++pos_;
            FATHOM_ASSIGN_OR_RETURN(hi, parse_char());
          }
          if (hi < lo) return error("character range out of order");
          ranges.push_back({lo, hi});
        }
        if (pos_ >= t_.size()) return error("unterminated character class");
        ++pos_;
        ranges = normalize_ranges(std::move(ranges));
        if (negate) ranges = complement_ranges(ranges);
        atom = ranges.empty() ? g_.nothing() : g_.code_points(std::move(ranges));
      } else if (c == '.') {
        ++pos_;
        atom = g_.code_points({{0, 0x10FFFF}});
      } else if (c == '(') {
        if (++depth_ > 200) return unsupported("GBNF nesting deeper than 200 groups");
        ++pos_;
        skip_space(true);
        FATHOM_ASSIGN_OR_RETURN(atom, parse_alternates(true));
        skip_space(true);
        if (pos_ >= t_.size() || t_[pos_] != ')') return error("expected ')'");
        ++pos_;
        --depth_;
      } else if (c == '<') {
        return unsupported("GBNF token references (<[id]>) are not supported");
      } else if (is_name_char(c)) {
        size_t save = pos_;
        std::string name = parse_name();
        // A name followed by ::= starts the next rule (only possible after a newline, which
        // ends the sequence unless nested).
        size_t after = pos_;
        skip_space(false);
        if (t_.substr(pos_, 3) == "::=") {
          pos_ = save;
          return error("missing newline before rule '" + name + "'");
        }
        pos_ = after;
        atom = g_.ref(rule_id(name));
      } else {
        break;
      }
      skip_space(nested);
      // Repetition operators.
      while (pos_ < t_.size()) {
        char q = t_[pos_];
        if (q == '*' || q == '+' || q == '?') {
          ++pos_;
          atom = q == '*' ? g_.star(atom) : q == '+' ? g_.plus(atom) : g_.opt(atom);
        } else if (q == '{') {
          ++pos_;
          skip_space(nested);
          auto num = [&]() -> int64_t {
            int64_t v = -1;
            while (pos_ < t_.size() && isdigit(uint8_t(t_[pos_]))) {
              v = (v < 0 ? 0 : v) * 10 + (t_[pos_++] - '0');
              if (v > 100000) return -2;
            }
            return v;
          };
          int64_t mn = num();
          if (mn < 0) return error("expected a repetition count");
          int64_t mx = mn;
          skip_space(nested);
          if (pos_ < t_.size() && t_[pos_] == ',') {
            ++pos_;
            skip_space(nested);
            mx = num();
            if (mx == -2) return error("repetition count too large");
            if (mx == -1) mx = kUnbounded;
          }
          skip_space(nested);
          if (pos_ >= t_.size() || t_[pos_] != '}') return error("expected '}'");
          ++pos_;
          if (mx != kUnbounded && mx < mn) return error("{m,n} with n < m");
          atom = g_.repeat(atom, int32_t(mn), int32_t(mx));
        } else {
          break;
        }
        skip_space(nested);
      }
      items.push_back(atom);
    }
    return g_.seq(std::move(items));
  }

  std::string_view t_;
  size_t pos_ = 0;
  Grammar g_;
  std::vector<bool> defined_;
  int depth_ = 0;
};

}  // namespace

Result<Grammar> gbnf_grammar(std::string_view text) {
  GbnfParser p(text);
  return p.parse();
}

}  // namespace fathom::grammar
