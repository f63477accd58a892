#include "grammar/json_schema.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>

#include "grammar/regex.h"

namespace fathom::grammar {

using pyjson::Value;
using Kind = pyjson::Value::Kind;

namespace {

// Keywords that only annotate; ignored.
const std::set<std::string, std::less<>> kAnnotations = {
    "title",           "description",   "default",     "examples",  "$comment",
    "$schema",         "deprecated",    "readOnly",    "writeOnly", "contentMediaType",
    "contentEncoding", "contentSchema", "definitions", "$defs",
};
// Keywords this compiler enforces.
const std::set<std::string, std::less<>> kSupported = {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "prefixItems",
    "additionalItems",
    "minItems",
    "maxItems",
    "enum",
    "const",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "anyOf",
    "oneOf",
    "allOf",
    "$ref",
    "uniqueItems",
};
// Assertion keywords it cannot enforce (an error when present).
const std::set<std::string, std::less<>> kUnsupported = {
    "not",
    "if",
    "then",
    "else",
    "dependencies",
    "dependentRequired",
    "dependentSchemas",
    "propertyNames",
    "patternProperties",
    "minProperties",
    "maxProperties",
    "contains",
    "minContains",
    "maxContains",
    "multipleOf",
    "unevaluatedProperties",
    "unevaluatedItems",
    "$anchor",
    "$dynamicRef",
    "$dynamicAnchor",
    "$recursiveRef",
    "$recursiveAnchor",
    "$id",
};

const char* kTypes[] = {"null", "boolean", "object", "array", "string", "number", "integer"};

std::string json_string_literal(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += char(c);
        }
    }
  }
  out += '"';
  return out;
}

void canonical_to(std::string& out, const Value& v) {
  switch (v.kind) {
    case Kind::kNull:
      out += "null";
      return;
    case Kind::kBool:
      out += v.boolean ? "true" : "false";
      return;
    case Kind::kInt:
      out += v.text;
      return;
    case Kind::kFloat:
      if (std::isfinite(v.number) && v.number == std::floor(v.number) &&
          std::fabs(v.number) < 9.007199254740992e15) {
        out += std::to_string(int64_t(v.number));
      } else {
        out += pyjson::float_repr(v.number);
      }
      return;
    case Kind::kString:
      out += json_string_literal(v.text);
      return;
    case Kind::kArray:
      out += '[';
      for (size_t i = 0; i < v.items.size(); ++i) {
        if (i) out += ',';
        canonical_to(out, v.items[i]);
      }
      out += ']';
      return;
    case Kind::kObject:
      out += '{';
      for (size_t i = 0; i < v.items.size(); ++i) {
        if (i) out += ',';
        out += json_string_literal(v.keys[i]);
        out += ':';
        canonical_to(out, v.items[i]);
      }
      out += '}';
      return;
  }
}

bool number_value(const Value& v, double* out) {
  if (v.kind == Kind::kFloat) {
    *out = v.number;
    return true;
  }
  if (v.kind == Kind::kInt) {
    *out = std::strtod(v.text.c_str(), nullptr);
    return true;
  }
  return false;
}

bool json_equal(const Value& a, const Value& b) { return canonical_json(a) == canonical_json(b); }

// The JSON type name of a value ("integer" for integral numbers).
std::string type_of(const Value& v) {
  switch (v.kind) {
    case Kind::kNull:
      return "null";
    case Kind::kBool:
      return "boolean";
    case Kind::kInt:
      return "integer";
    case Kind::kFloat:
      return v.number == std::floor(v.number) ? "integer" : "number";
    case Kind::kString:
      return "string";
    case Kind::kArray:
      return "array";
    case Kind::kObject:
      return "object";
  }
  return "null";
}

class SchemaCompiler {
 public:
  SchemaCompiler(const Value& root, const JsonSchemaOptions& o) : root_(root), o_(o) {}

  Result<Grammar> run() {
    int32_t r = g_.add_rule("root");
    g_.set_root(r);
    FATHOM_ASSIGN_OR_RETURN(ExprId e, compile(root_, "#", true));
    g_.define_rule(r, e);
    return std::move(g_);
  }

 private:
  // --- Building blocks --------------------------------------------------------------------
  ExprId ws() {
    if (o_.whitespace == JsonSchemaOptions::Whitespace::kCompact) return g_.empty();
    ByteSet s;
    s.set(' ');
    s.set('\t');
    s.set('\n');
    s.set('\r');
    return g_.repeat(g_.byte_set(s), 0, o_.max_whitespace);
  }
  ExprId lit(std::string_view s) { return g_.literal(s); }

  // One character of the set, spelled as it appears inside a canonical JSON string.
  ExprId json_chars(const std::vector<CodeRange>& ranges) {
    std::vector<ExprId> alts;
    std::vector<CodeRange> raw;
    for (auto [lo, hi] : normalize_ranges(ranges)) {
      for (uint32_t c = lo; c <= std::min<uint32_t>(hi, 0x5C); ++c) {
        if (c < 0x20 || c == '"' || c == '\\') {
          const std::string quoted = json_string_literal(std::string(1, static_cast<char>(c)));
          alts.push_back(lit(quoted.substr(1, quoted.size() - 2)));
        } else {
          raw.push_back({c, c});
        }
      }
      if (hi > 0x5C) raw.push_back({std::max<uint32_t>(lo, 0x5D), hi});
    }
    raw = normalize_ranges(std::move(raw));
    if (!raw.empty()) alts.insert(alts.begin(), g_.code_points(raw));
    return g_.alt(std::move(alts));
  }
  ExprId any_char() {
    if (any_char_ < 0) any_char_ = json_chars({{0, 0x10FFFF}});
    return any_char_;
  }
  ExprId any_string() {
    if (any_string_ < 0) any_string_ = g_.seq({lit("\""), g_.star(any_char()), lit("\"")});
    return any_string_;
  }
  ExprId any_number() {
    if (any_number_ < 0) {
      ExprId digits = g_.plus(g_.byte_range('0', '9'));
      ExprId intpart =
          g_.alt({lit("0"), g_.seq({g_.byte_range('1', '9'), g_.star(g_.byte_range('0', '9'))})});
      ByteSet e, sign;
      e.set('e');
      e.set('E');
      sign.set('+');
      sign.set('-');
      any_number_ = g_.seq({g_.opt(lit("-")), intpart, g_.opt(g_.seq({lit("."), digits})),
                            g_.opt(g_.seq({g_.byte_set(e), g_.opt(g_.byte_set(sign)), digits}))});
    }
    return any_number_;
  }
  // The recursive "any JSON value" rules.
  ExprId any_value() {
    if (any_value_rule_ < 0) {
      any_value_rule_ = g_.add_rule("json_value");
      int32_t obj = g_.add_rule("json_object");
      int32_t arr = g_.add_rule("json_array");
      ExprId v = g_.ref(any_value_rule_);
      ExprId member = g_.seq({any_string(), lit(":"), ws(), v});
      ExprId members = g_.seq({member, g_.star(g_.seq({lit(","), ws(), member}))});
      g_.define_rule(obj, g_.seq({lit("{"), ws(), g_.opt(g_.seq({members, ws()})), lit("}")}));
      ExprId items = g_.seq({v, g_.star(g_.seq({lit(","), ws(), v}))});
      g_.define_rule(arr, g_.seq({lit("["), ws(), g_.opt(g_.seq({items, ws()})), lit("]")}));
      g_.define_rule(any_value_rule_, g_.alt({g_.ref(obj), g_.ref(arr), any_string(), any_number(),
                                              lit("true"), lit("false"), lit("null")}));
    }
    return g_.ref(any_value_rule_);
  }

  // A value literal with the whitespace policy inside arrays and objects.
  ExprId value_literal(const Value& v) {
    if (v.kind == Kind::kArray) {
      if (v.items.empty()) return g_.seq({lit("["), ws(), lit("]")});
      std::vector<ExprId> parts{lit("["), ws()};
      for (size_t i = 0; i < v.items.size(); ++i) {
        if (i) parts.insert(parts.end(), {lit(","), ws()});
        parts.push_back(value_literal(v.items[i]));
      }
      parts.insert(parts.end(), {ws(), lit("]")});
      return g_.seq(std::move(parts));
    }
    if (v.kind == Kind::kObject) {
      if (v.items.empty()) return g_.seq({lit("{"), ws(), lit("}")});
      std::vector<ExprId> parts{lit("{"), ws()};
      for (size_t i = 0; i < v.items.size(); ++i) {
        if (i) parts.insert(parts.end(), {lit(","), ws()});
        parts.insert(parts.end(), {lit(json_string_literal(v.keys[i])), lit(":"), ws(),
                                   value_literal(v.items[i])});
      }
      parts.insert(parts.end(), {ws(), lit("}")});
      return g_.seq(std::move(parts));
    }
    return lit(canonical_json(v));
  }

  // --- Integers ----------------------------------------------------------------------------
  ExprId digit_range(char lo, char hi) { return g_.byte_range(lo, hi); }
  // Decimal strings of equal length, x <= y.
  ExprId same_len(const std::string& x, const std::string& y) {
    if (x.empty()) return g_.empty();
    if (x == y) return lit(x);
    if (x[0] == y[0]) return g_.seq({lit(x.substr(0, 1)), same_len(x.substr(1), y.substr(1))});
    const size_t rest = x.size() - 1;
    std::string zeros(rest, '0'), nines(rest, '9');
    if (x.substr(1) == zeros && y.substr(1) == nines) {
      return g_.seq({digit_range(x[0], y[0]),
                     g_.repeat(digit_range('0', '9'), int32_t(rest), int32_t(rest))});
    }
    std::vector<ExprId> alts;
    alts.push_back(g_.seq({lit(x.substr(0, 1)), same_len(x.substr(1), nines)}));
    if (y[0] - x[0] > 1) {
      alts.push_back(g_.seq({digit_range(char(x[0] + 1), char(y[0] - 1)),
                             g_.repeat(digit_range('0', '9'), int32_t(rest), int32_t(rest))}));
    }
    alts.push_back(g_.seq({lit(y.substr(0, 1)), same_len(zeros, y.substr(1))}));
    return g_.alt(std::move(alts));
  }
  // Non-negative integers in [a, b] (b < 0: unbounded), canonical spelling.
  ExprId nonneg(int64_t a, int64_t b) {
    std::vector<ExprId> alts;
    std::string as = std::to_string(a);
    const size_t max_len = b < 0 ? as.size() : std::to_string(b).size();
    for (size_t len = as.size(); len <= max_len; ++len) {
      std::string lo = len == as.size() ? as : "1" + std::string(len - 1, '0');
      if (len == 1 && a == 0) lo = "0";
      std::string hi = std::string(len, '9');
      if (b >= 0 && len == max_len) hi = std::to_string(b);
      if (lo.size() == hi.size() && lo <= hi) alts.push_back(same_len(lo, hi));
    }
    if (b < 0) {
      alts.push_back(g_.seq(
          {digit_range('1', '9'), g_.repeat(digit_range('0', '9'), int32_t(max_len), kUnbounded)}));
    }
    return g_.alt(std::move(alts));
  }
  Result<ExprId> integer(const Value& s) {
    bool has_lo = false, has_hi = false;
    double lo = 0, hi = 0;
    auto bound = [&](const char* key, bool lower, bool exclusive) -> Status {
      const Value* v = s.find(key);
      if (!v) return Status::ok();
      double x;
      if (!number_value(*v, &x)) {
        if (v->kind == Kind::kBool) return unsupported(std::string("boolean ") + key);
        return invalid_argument(std::string(key) + " is not a number");
      }
      double b = lower ? (exclusive ? std::floor(x) + 1 : std::ceil(x))
                       : (exclusive ? std::ceil(x) - 1 : std::floor(x));
      if (lower) {
        lo = has_lo ? std::max(lo, b) : b;
        has_lo = true;
      } else {
        hi = has_hi ? std::min(hi, b) : b;
        has_hi = true;
      }
      return Status::ok();
    };
    FATHOM_RETURN_IF_ERROR(bound("minimum", true, false));
    FATHOM_RETURN_IF_ERROR(bound("exclusiveMinimum", true, true));
    FATHOM_RETURN_IF_ERROR(bound("maximum", false, false));
    FATHOM_RETURN_IF_ERROR(bound("exclusiveMaximum", false, true));
    if ((has_lo && std::fabs(lo) > 1e18) || (has_hi && std::fabs(hi) > 1e18)) {
      return unsupported("integer bounds beyond 1e18");
    }
    if (has_lo && has_hi && lo > hi) return g_.nothing();
    const int64_t l = int64_t(lo), h = int64_t(hi);
    std::vector<ExprId> alts;
    // Negative part: -x with x in [max(1, -h), -l].
    if (!has_lo || l < 0) {
      int64_t xa = has_hi ? std::max<int64_t>(1, -h) : 1;
      int64_t xb = has_lo ? -l : -1;
      if (xb < 0 || xa <= xb) alts.push_back(g_.seq({lit("-"), nonneg(xa, xb)}));
    }
    // Non-negative part.
    if (!has_hi || h >= 0) {
      int64_t a = has_lo ? std::max<int64_t>(0, l) : 0;
      int64_t b = has_hi ? h : -1;
      if (b < 0 || a <= b) alts.push_back(nonneg(a, b));
    }
    return g_.alt(std::move(alts));
  }

  // Numbers within integral bounds: a plain decimal (no exponent), by magnitude ranges.
  // m in [a, b] (b < 0: unbounded), each end inclusive or exclusive.
  ExprId magnitude(int64_t a, bool a_excl, int64_t b, bool b_excl) {
    ExprId digits = g_.plus(g_.byte_range('0', '9'));
    ExprId frac_any = g_.opt(g_.seq({lit("."), digits}));
    ExprId frac_zero = g_.opt(g_.seq({lit("."), g_.plus(lit("0"))}));
    ExprId frac_nonzero = g_.seq(
        {lit("."), g_.star(lit("0")), g_.byte_range('1', '9'), g_.star(g_.byte_range('0', '9'))});
    std::vector<ExprId> alts;
    if (b >= 0 && a > b) return g_.nothing();
    if (b >= 0 && a == b) {
      if (a_excl || b_excl) return g_.nothing();
      return g_.seq({lit(std::to_string(a)), frac_zero});
    }
    alts.push_back(g_.seq({lit(std::to_string(a)), a_excl ? frac_nonzero : frac_any}));
    if (b < 0) {
      alts.push_back(g_.seq({nonneg(a + 1, -1), frac_any}));
    } else {
      if (b - 1 >= a + 1) alts.push_back(g_.seq({nonneg(a + 1, b - 1), frac_any}));
      if (!b_excl) alts.push_back(g_.seq({lit(std::to_string(b)), frac_zero}));
    }
    return g_.alt(std::move(alts));
  }

  Result<ExprId> bounded_number(const Value& s, const std::string& path) {
    bool has_lo = false, has_hi = false, lo_excl = false, hi_excl = false;
    int64_t lo = 0, hi = 0;
    for (const char* k : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
      const Value* v = s.find(k);
      if (!v) continue;
      double x;
      if (!number_value(*v, &x)) return invalid_argument(std::string(k) + " is not a number");
      if (x != std::floor(x) || std::fabs(x) > 1e15) {
        return unsupported(std::string("'") + k + "' with a non-integer value on numbers at " +
                           path);
      }
      const int64_t n = int64_t(x);
      const bool excl = k[0] == 'e';
      if (std::string_view(k).find("inimum") != std::string_view::npos) {
        if (!has_lo || n > lo || (n == lo && excl)) {
          lo = n;
          lo_excl = excl;
        }
        has_lo = true;
      } else {
        if (!has_hi || n < hi || (n == hi && excl)) {
          hi = n;
          hi_excl = excl;
        }
        has_hi = true;
      }
    }
    std::vector<ExprId> alts;
    // Non-negative values.
    if (!has_hi || hi > 0 || (hi == 0 && !hi_excl)) {
      int64_t a = 0;
      bool a_excl = false;
      if (has_lo && lo >= 0) {
        a = lo;
        a_excl = lo_excl;
      }
      alts.push_back(magnitude(a, a_excl, has_hi ? hi : -1, hi_excl));
    }
    // Negative values -m, m > 0.
    if (!has_lo || lo < 0) {
      int64_t a = 0;
      bool a_excl = true;
      if (has_hi && hi < 0) {
        a = -hi;
        a_excl = hi_excl;
      }
      alts.push_back(g_.seq({lit("-"), magnitude(a, a_excl, has_lo ? -lo : -1, lo_excl)}));
    }
    return g_.alt(std::move(alts));
  }

  // --- Strings -----------------------------------------------------------------------------
  Result<ExprId> format_regex(const std::string& f) {
    static const std::map<std::string, std::string> kFormats = {
        // Days checked per month (February up to 29: leap years are not checked).
        {"date",
         R"(\d{4}-((0[13578]|1[02])-(0[1-9]|[12]\d|3[01])|(0[469]|11)-(0[1-9]|[12]\d|30)|02-(0[1-9]|1\d|2\d)))"},
        {"time",
         R"(([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?([zZ]|[+-]([01]\d|2[0-3]):[0-5]\d))"},
        {"date-time",
         R"(\d{4}-((0[13578]|1[02])-(0[1-9]|[12]\d|3[01])|(0[469]|11)-(0[1-9]|[12]\d|30)|02-(0[1-9]|1\d|2\d))[tT]([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?([zZ]|[+-]([01]\d|2[0-3]):[0-5]\d))"},
        {"email",
         R"([A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*)"},
        // Scheme, colon, then no whitespace, quotes, backslashes or <>{}|^` (RFC 3986's
        // excluded characters); not a full URI grammar.
        {"uri", R"([A-Za-z][A-Za-z0-9+.\-]*:[^\s"\\<>{}|^`\x00-\x1f\x7f]+)"},
        {"uuid", R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"},
        {"ipv4", R"((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3})"},
        {"hostname",
         R"([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*)"},
    };
    auto it = kFormats.find(f);
    if (it == kFormats.end()) return unsupported("JSON Schema format '" + f + "'");
    RegexOptions ro;
    ro.chars = [this](Grammar&, const std::vector<CodeRange>& r) { return json_chars(r); };
    return parse_regex(g_, it->second, ro);
  }

  Result<ExprId> string_expr(const Value& s) {
    const Value* pat = s.find("pattern");
    const Value* fmt = s.find("format");
    const Value* mn = s.find("minLength");
    const Value* mx = s.find("maxLength");
    int64_t lo = 0, hi = -1;
    if (mn) {
      double x;
      if (!number_value(*mn, &x) || x < 0) return invalid_argument("minLength is not a count");
      lo = int64_t(std::ceil(x));
    }
    if (mx) {
      double x;
      if (!number_value(*mx, &x) || x < 0) return invalid_argument("maxLength is not a count");
      hi = int64_t(std::floor(x));
    }
    if (hi >= 0 && lo > hi) return g_.nothing();
    int n = (pat != nullptr) + (fmt != nullptr) + (mn || mx ? 1 : 0);
    if (n > 1) return unsupported("pattern, format and minLength/maxLength together");
    if (lo > 10000 || hi > 10000) return unsupported("string lengths over 10000");
    ExprId body;
    if (pat) {
      if (!pat->is_string()) return invalid_argument("pattern is not a string");
      RegexOptions ro;
      ro.search = true;
      ro.chars = [this](Grammar&, const std::vector<CodeRange>& r) { return json_chars(r); };
      FATHOM_ASSIGN_OR_RETURN(body, parse_regex(g_, pat->text, ro));
    } else if (fmt) {
      if (!fmt->is_string()) return invalid_argument("format is not a string");
      FATHOM_ASSIGN_OR_RETURN(body, format_regex(fmt->text));
    } else if (mn || mx) {
      body = g_.repeat(any_char(), int32_t(lo), hi < 0 ? kUnbounded : int32_t(hi));
    } else {
      return any_string();
    }
    return g_.seq({lit("\""), body, lit("\"")});
  }

  // --- Arrays ------------------------------------------------------------------------------
  Result<ExprId> array_expr(const Value& s, const std::string& path) {
    std::vector<const Value*> prefix;
    const Value* rest = nullptr;  // schema for the remaining items; nullptr = any
    bool rest_allowed = true;
    const Value* items = s.find("items");
    const Value* prefix_items = s.find("prefixItems");
    const Value* additional = s.find("additionalItems");
    if (const Value* u = s.find("uniqueItems"); u && u->kind == Kind::kBool && u->boolean) {
      return unsupported("JSON Schema keyword 'uniqueItems' (true) at " + path);
    }
    if (prefix_items) {
      if (!prefix_items->is_array()) return invalid_argument("prefixItems is not an array");
      for (const Value& v : prefix_items->items) prefix.push_back(&v);
      rest = items;
    } else if (items && items->is_array()) {
      for (const Value& v : items->items) prefix.push_back(&v);
      rest = additional;
    } else {
      rest = items;
    }
    if (rest && rest->kind == Kind::kBool) {
      rest_allowed = rest->boolean;
      rest = nullptr;
    }
    int64_t mn = 0, mx = -1;
    if (const Value* v = s.find("minItems")) {
      double x;
      if (!number_value(*v, &x)) return invalid_argument("minItems is not a number");
      mn = int64_t(std::ceil(x));
    }
    if (const Value* v = s.find("maxItems")) {
      double x;
      if (!number_value(*v, &x)) return invalid_argument("maxItems is not a number");
      mx = int64_t(std::floor(x));
    }
    if (!rest_allowed) mx = mx < 0 ? int64_t(prefix.size()) : std::min<int64_t>(mx, prefix.size());
    if (mx >= 0 && mn > mx) return g_.nothing();
    if (mn > 1000 || mx > 1000) return unsupported("minItems/maxItems over 1000");
    std::vector<ExprId> elem;
    for (size_t i = 0; i < prefix.size(); ++i) {
      FATHOM_ASSIGN_OR_RETURN(ExprId e, compile(*prefix[i], path + "/items/" + std::to_string(i)));
      elem.push_back(e);
    }
    ExprId rest_e = -1;
    if (rest_allowed) {
      if (rest) {
        FATHOM_ASSIGN_OR_RETURN(rest_e, compile(*rest, path + "/items"));
      } else {
        rest_e = any_value();
      }
    }
    auto elem_at = [&](int64_t i) { return i < int64_t(elem.size()) ? elem[i] : rest_e; };
    // tail(i): elements i.. (0-based) after at least one was written.
    const int64_t fixed = std::max<int64_t>(int64_t(elem.size()), mn);
    auto tail = [&](auto&& self, int64_t i) -> ExprId {
      if (mx >= 0 && i >= mx) return g_.empty();
      if (i >= fixed) {
        if (rest_e < 0) return g_.empty();
        int32_t more = mx < 0 ? kUnbounded : int32_t(mx - i);
        return g_.repeat(g_.seq({lit(","), ws(), rest_e}), 0, more);
      }
      ExprId part = g_.seq({lit(","), ws(), elem_at(i), self(self, i + 1)});
      return i < mn ? part : g_.opt(part);
    };
    if (mx == 0) return g_.seq({lit("["), ws(), lit("]")});
    ExprId first = elem_at(0);
    if (first < 0) return g_.seq({lit("["), ws(), lit("]")});
    ExprId nonempty = g_.seq({first, tail(tail, 1)});
    if (mn >= 1) return g_.seq({lit("["), ws(), nonempty, ws(), lit("]")});
    return g_.seq({lit("["), ws(), g_.opt(g_.seq({nonempty, ws()})), lit("]")});
  }

  // --- Objects -----------------------------------------------------------------------------
  // A JSON string whose decoded text is none of `names`.
  ExprId key_except(const std::vector<std::string>& names) {
    // Decode names to code points.
    std::vector<std::vector<uint32_t>> cps;
    for (const std::string& n : names) {
      std::vector<uint32_t> v;
      for (size_t i = 0; i < n.size();) {
        unsigned char c = uint8_t(n[i]);
        int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
        for (int k = 1; k < len && i + k < n.size(); ++k)
          cp = (cp << 6) | (uint8_t(n[i + k]) & 0x3F);
        v.push_back(cp);
        i += len;
      }
      cps.push_back(std::move(v));
    }
    // S(prefix set at depth d): strings not equal to any name in the set.
    auto build = [&](auto&& self, std::vector<size_t> set, size_t d) -> ExprId {
      bool terminal = false;
      std::map<uint32_t, std::vector<size_t>> children;
      for (size_t i : set) {
        if (cps[i].size() == d) {
          terminal = true;
        } else {
          children[cps[i][d]].push_back(i);
        }
      }
      std::vector<ExprId> alts;
      if (!terminal) alts.push_back(g_.empty());
      std::vector<CodeRange> used;
      for (auto& [c, sub] : children) {
        used.push_back({c, c});
        alts.push_back(g_.seq({json_chars({{c, c}}), self(self, sub, d + 1)}));
      }
      std::vector<CodeRange> other = complement_ranges(normalize_ranges(used));
      if (!other.empty()) alts.push_back(g_.seq({json_chars(other), g_.star(any_char())}));
      return g_.alt(std::move(alts));
    };
    std::vector<size_t> all(names.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    return g_.seq({lit("\""), build(build, all, 0), lit("\"")});
  }

  Result<ExprId> object_expr(const Value& s, const std::string& path) {
    struct Slot {
      ExprId e;
      enum { kRequired, kOptional, kStar } kind;
    };
    std::vector<Slot> slots;
    std::vector<std::string> names;
    const Value* props = s.find("properties");
    const Value* req = s.find("required");
    const Value* addl = s.find("additionalProperties");
    if (props && !props->is_object()) return invalid_argument("properties is not an object");
    std::set<std::string> required;
    if (req) {
      if (!req->is_array()) return invalid_argument("required is not an array");
      for (const Value& r : req->items) {
        if (!r.is_string()) return invalid_argument("required holds a non-string");
        required.insert(r.text);
      }
    }
    bool addl_allowed = !o_.strict_additional_properties;
    const Value* addl_schema = nullptr;
    if (addl) {
      if (addl->kind == Kind::kBool) {
        addl_allowed = addl->boolean;
      } else {
        addl_allowed = true;
        addl_schema = addl;
      }
    }
    auto member = [&](const std::string& name, ExprId value) {
      return g_.seq({lit(json_string_literal(name)), lit(":"), ws(), value});
    };
    if (props) {
      for (size_t i = 0; i < props->keys.size(); ++i) {
        const std::string& name = props->keys[i];
        FATHOM_ASSIGN_OR_RETURN(ExprId v, compile(props->items[i], path + "/properties/" + name));
        names.push_back(name);
        slots.push_back(
            {member(name, v), required.count(name) ? Slot::kRequired : Slot::kOptional});
      }
    }
    for (const Value& r : req ? req->items : std::vector<Value>{}) {
      if (std::find(names.begin(), names.end(), r.text) != names.end()) continue;
      if (!addl_allowed) return g_.nothing();
      ExprId v;
      if (addl_schema) {
        FATHOM_ASSIGN_OR_RETURN(v, compile(*addl_schema, path + "/additionalProperties"));
      } else {
        v = any_value();
      }
      names.push_back(r.text);
      slots.push_back({member(r.text, v), Slot::kRequired});
    }
    if (addl_allowed) {
      ExprId v;
      if (addl_schema) {
        FATHOM_ASSIGN_OR_RETURN(v, compile(*addl_schema, path + "/additionalProperties"));
      } else {
        v = any_value();
      }
      ExprId key = names.empty() ? any_string() : key_except(names);
      slots.push_back({g_.seq({key, lit(":"), ws(), v}), Slot::kStar});
    }
    // tail(i): slots i.. after something was written.
    std::vector<ExprId> tails(slots.size() + 1);
    tails[slots.size()] = g_.empty();
    for (size_t i = slots.size(); i-- > 0;) {
      ExprId part = g_.seq({lit(","), ws(), slots[i].e});
      ExprId p = slots[i].kind == Slot::kRequired   ? part
                 : slots[i].kind == Slot::kOptional ? g_.opt(part)
                                                    : g_.star(part);
      tails[i] = g_.seq({p, tails[i + 1]});
    }
    // Nothing written yet: the first written slot is j, all before it optional.
    std::vector<ExprId> firsts;
    bool can_be_empty = true;
    for (size_t j = 0; j < slots.size(); ++j) {
      ExprId after = slots[j].kind == Slot::kStar
                         ? g_.seq({g_.star(g_.seq({lit(","), ws(), slots[j].e})), tails[j + 1]})
                         : tails[j + 1];
      firsts.push_back(g_.seq({slots[j].e, after}));
      if (slots[j].kind == Slot::kRequired) {
        can_be_empty = false;
        break;
      }
    }
    if (firsts.empty()) return g_.seq({lit("{"), ws(), lit("}")});
    ExprId nonempty = g_.alt(std::move(firsts));
    if (!can_be_empty) return g_.seq({lit("{"), ws(), nonempty, ws(), lit("}")});
    return g_.seq({lit("{"), ws(), g_.opt(g_.seq({nonempty, ws()})), lit("}")});
  }

  // --- Schemas -----------------------------------------------------------------------------
  Result<const Value*> resolve(const std::string& ref) {
    if (ref.empty() || ref[0] != '#')
      return unsupported("$ref to '" + ref + "' (not in this document)");
    std::string ptr;
    // Percent-decoding.
    for (size_t i = 1; i < ref.size(); ++i) {
      if (ref[i] == '%' && i + 2 < ref.size() && isxdigit(uint8_t(ref[i + 1])) &&
          isxdigit(uint8_t(ref[i + 2]))) {
        ptr += char(std::stoi(ref.substr(i + 1, 2), nullptr, 16));
        i += 2;
      } else {
        ptr += ref[i];
      }
    }
    const Value* cur = &root_;
    if (ptr.empty()) return cur;
    if (ptr[0] != '/') return unsupported("$ref to an anchor ('" + ref + "')");
    size_t i = 1;
    while (true) {
      size_t j = ptr.find('/', i);
      std::string tok = ptr.substr(i, j == std::string::npos ? std::string::npos : j - i);
      std::string key;
      for (size_t k = 0; k < tok.size(); ++k) {
        if (tok[k] == '~' && k + 1 < tok.size() && (tok[k + 1] == '0' || tok[k + 1] == '1')) {
          key += tok[k + 1] == '0' ? '~' : '/';
          ++k;
        } else {
          key += tok[k];
        }
      }
      if (cur->is_object()) {
        cur = cur->find(key);
      } else if (cur->is_array()) {
        char* end = nullptr;
        long idx = std::strtol(key.c_str(), &end, 10);
        cur = (end && *end == 0 && idx >= 0 && size_t(idx) < cur->items.size()) ? &cur->items[idx]
                                                                                : nullptr;
      } else {
        cur = nullptr;
      }
      if (!cur) return invalid_argument("$ref '" + ref + "' points nowhere");
      if (j == std::string::npos) break;
      i = j + 1;
    }
    return cur;
  }

  // Merges allOf parts (and anyOf/oneOf branches into their parent) keyword by keyword.
  Result<Value> merge(const Value& a, const Value& b) {
    if (b.kind == Kind::kBool) {
      if (b.boolean) return a;
      Value f = Value::from_bool(false);
      return f;
    }
    if (a.kind == Kind::kBool) {
      if (a.boolean) return b;
      return a;
    }
    Value out = a;
    for (size_t i = 0; i < b.keys.size(); ++i) {
      const std::string& k = b.keys[i];
      const Value& v = b.items[i];
      const Value* cur = out.find(k);
      if (kAnnotations.count(k)) continue;
      if (!cur) {
        out.set(k, v);
        continue;
      }
      if (json_equal(*cur, v)) continue;
      if (k == "type") {
        auto types = [](const Value& t) {
          std::set<std::string> s;
          if (t.is_string()) s.insert(t.text);
          for (const Value& x : t.items) s.insert(x.text);
          if (s.count("number")) s.insert("integer");
          return s;
        };
        std::set<std::string> x = types(*cur), y = types(v), both;
        for (const std::string& t : x) {
          if (y.count(t)) both.insert(t);
        }
        if (both.count("number") == 0 && both.count("integer")) both.erase("number");
        Value arr = Value::array();
        for (const std::string& t : both) arr.items.push_back(Value::from_string(t));
        out.set("type", arr);
        continue;
      }
      if (k == "required") {
        Value r = *cur;
        for (const Value& x : v.items) {
          bool have = false;
          for (const Value& y : r.items) have = have || y.text == x.text;
          if (!have) r.items.push_back(x);
        }
        out.set("required", r);
        continue;
      }
      if (k == "properties" && cur->is_object() && v.is_object()) {
        Value p = *cur;
        for (size_t j = 0; j < v.keys.size(); ++j) {
          const Value* have = p.find(v.keys[j]);
          if (!have) {
            p.set(v.keys[j], v.items[j]);
          } else {
            FATHOM_ASSIGN_OR_RETURN(Value m, merge(*have, v.items[j]));
            p.set(v.keys[j], m);
          }
        }
        out.set("properties", p);
        continue;
      }
      if (k == "minimum" || k == "exclusiveMinimum" || k == "minLength" || k == "minItems" ||
          k == "maximum" || k == "exclusiveMaximum" || k == "maxLength" || k == "maxItems") {
        double x, y;
        if (number_value(*cur, &x) && number_value(v, &y)) {
          bool lower = k.rfind("min", 0) == 0 || k == "exclusiveMinimum";
          out.set(k, (lower ? (y > x) : (y < x)) ? v : *cur);
          continue;
        }
      }
      return unsupported("allOf with conflicting '" + k + "'");
    }
    return out;
  }

  // An allOf part or an anyOf/oneOf branch that is a bare {"$ref": ...} (plus annotations),
  // replaced by its target so it can be merged with its siblings. Recursion through such a
  // merge stops at the nesting limit.
  Result<Value> deref_part(const Value& part, const std::string& where, const std::string& path) {
    const Value* ref = part.is_object() ? part.find("$ref") : nullptr;
    if (!ref) return part;
    for (const std::string& k : part.keys) {
      if (k != "$ref" && !kAnnotations.count(k)) {
        return unsupported("$ref with sibling keywords inside " + where + " at " + path);
      }
    }
    if (!ref->is_string()) return invalid_argument("$ref is not a string");
    FATHOM_ASSIGN_OR_RETURN(const Value* target, resolve(ref->text));
    return *target;
  }

  Result<std::vector<std::string>> types_of(const Value& s) {
    std::vector<std::string> out;
    const Value* t = s.find("type");
    if (!t) return std::vector<std::string>(std::begin(kTypes), std::end(kTypes));
    std::vector<const Value*> list;
    if (t->is_string()) {
      list.push_back(t);
    } else if (t->is_array()) {
      for (const Value& x : t->items) list.push_back(&x);
    } else {
      return invalid_argument("type is neither a string nor an array");
    }
    for (const Value* x : list) {
      if (!x->is_string() ||
          std::find(std::begin(kTypes), std::end(kTypes), x->text) == std::end(kTypes)) {
        return invalid_argument("unknown type");
      }
      out.push_back(x->text);
    }
    return out;
  }

  Result<ExprId> compile(const Value& s, const std::string& path, bool is_root = false) {
    if (++depth_ > 64) return unsupported("schemas nested deeper than 64 levels");
    struct Guard {
      int& d;
      ~Guard() { --d; }
    } guard{depth_};
    if (s.kind == Kind::kBool) return s.boolean ? any_value() : g_.nothing();
    if (!s.is_object()) return invalid_argument("schema at " + path + " is not an object");
    for (const std::string& k : s.keys) {
      if (k == "$id" && is_root) continue;
      if (kUnsupported.count(k)) return unsupported("JSON Schema keyword '" + k + "' at " + path);
    }
    if (const Value* ref = s.find("$ref")) {
      for (const std::string& k : s.keys) {
        if (k != "$ref" && !kAnnotations.count(k) && !(k == "$id" && is_root) &&
            (kSupported.count(k) || kUnsupported.count(k))) {
          return unsupported("JSON Schema keyword '" + k + "' beside $ref at " + path);
        }
      }
      if (!ref->is_string()) return invalid_argument("$ref is not a string");
      auto it = ref_rules_.find(ref->text);
      if (it != ref_rules_.end()) return g_.ref(it->second);
      FATHOM_ASSIGN_OR_RETURN(const Value* target, resolve(ref->text));
      int32_t rule = g_.add_rule("ref" + std::to_string(ref_rules_.size()));
      ref_rules_[ref->text] = rule;
      FATHOM_ASSIGN_OR_RETURN(ExprId body, compile(*target, ref->text, target == &root_));
      g_.define_rule(rule, body);
      return g_.ref(rule);
    }
    if (const Value* all = s.find("allOf")) {
      if (!all->is_array() || all->items.empty())
        return invalid_argument("allOf is not a non-empty array");
      Value merged = s;
      // Drop allOf, then merge its parts in.
      Value base = Value::object();
      for (size_t i = 0; i < s.keys.size(); ++i) {
        if (s.keys[i] != "allOf") base.set(s.keys[i], s.items[i]);
      }
      merged = base;
      for (const Value& part : all->items) {
        FATHOM_ASSIGN_OR_RETURN(Value p, deref_part(part, "allOf", path));
        FATHOM_ASSIGN_OR_RETURN(merged, merge(merged, p));
      }
      return compile(merged, path);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      const Value* any = s.find(key);
      if (!any) continue;
      if (!any->is_array() || any->items.empty()) {
        return invalid_argument(std::string(key) + " is not a non-empty array");
      }
      Value base = Value::object();
      for (size_t i = 0; i < s.keys.size(); ++i) {
        if (s.keys[i] != key) base.set(s.keys[i], s.items[i]);
      }
      std::vector<Value> branches;
      for (const Value& b : any->items) {
        bool only_annotations = true;
        for (const std::string& k : base.keys) only_annotations &= kAnnotations.count(k) > 0;
        if (b.is_object() && b.find("$ref") && only_annotations) {
          branches.push_back(b);  // compiled as a reference (recursion allowed)
          continue;
        }
        FATHOM_ASSIGN_OR_RETURN(Value bd, deref_part(b, key, path));
        FATHOM_ASSIGN_OR_RETURN(Value m, merge(base, bd));
        branches.push_back(std::move(m));
      }
      if (std::string(key) == "oneOf") {
        // Only when no value can match two branches: each branch's possible types disjoint.
        std::vector<std::set<std::string>> tsets;
        for (const Value& b : branches) {
          std::set<std::string> ts;
          if (b.kind == Kind::kBool) {
            if (b.boolean) ts.insert(std::begin(kTypes), std::end(kTypes));
          } else if (b.find("$ref")) {
            ts.insert(std::begin(kTypes), std::end(kTypes));
          } else if (const Value* c = b.find("const")) {
            ts.insert(type_of(*c) == "integer" ? "number" : type_of(*c));
          } else {
            FATHOM_ASSIGN_OR_RETURN(std::vector<std::string> t, types_of(b));
            for (std::string x : t) ts.insert(x == "integer" ? "number" : x);
          }
          tsets.push_back(ts);
        }
        for (size_t i = 0; i < tsets.size(); ++i) {
          for (size_t j = i + 1; j < tsets.size(); ++j) {
            for (const std::string& t : tsets[i]) {
              if (tsets[j].count(t)) {
                return unsupported("oneOf with branches that can match the same " + t + " at " +
                                   path);
              }
            }
          }
        }
      }
      std::vector<ExprId> alts;
      for (size_t i = 0; i < branches.size(); ++i) {
        FATHOM_ASSIGN_OR_RETURN(ExprId e,
                                compile(branches[i], path + "/" + key + "/" + std::to_string(i)));
        alts.push_back(e);
      }
      return g_.alt(std::move(alts));
    }
    FATHOM_ASSIGN_OR_RETURN(std::vector<std::string> types, types_of(s));
    const Value* en = s.find("enum");
    const Value* cn = s.find("const");
    if (en || cn) {
      std::vector<const Value*> vals;
      if (cn) vals.push_back(cn);
      if (en) {
        if (!en->is_array()) return invalid_argument("enum is not an array");
        for (const Value& v : en->items) {
          if (cn && !json_equal(v, *cn)) continue;
          vals.push_back(&v);
        }
        if (cn && vals.size() > 1)
          vals.erase(vals.begin());
        else if (cn)
          vals.clear();
      }
      for (const std::string& k : s.keys) {
        if (k != "enum" && k != "const" && k != "type" && kSupported.count(k)) {
          return unsupported("'" + k + "' beside enum/const at " + path);
        }
      }
      std::vector<ExprId> alts;
      for (const Value* v : vals) {
        std::string t = type_of(*v);
        bool ok =
            std::find(types.begin(), types.end(), t) != types.end() ||
            (t == "integer" && std::find(types.begin(), types.end(), "number") != types.end());
        if (ok) alts.push_back(value_literal(*v));
      }
      return g_.alt(std::move(alts));
    }
    std::vector<ExprId> alts;
    bool has_number = std::find(types.begin(), types.end(), "number") != types.end();
    for (const std::string& t : types) {
      if (t == "null") {
        alts.push_back(lit("null"));
      } else if (t == "boolean") {
        alts.push_back(g_.alt({lit("true"), lit("false")}));
      } else if (t == "integer") {
        if (has_number) continue;
        FATHOM_ASSIGN_OR_RETURN(ExprId e, integer(s));
        alts.push_back(e);
      } else if (t == "number") {
        bool bounded = false;
        for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
          bounded = bounded || s.find(k) != nullptr;
        }
        if (bounded) {
          FATHOM_ASSIGN_OR_RETURN(ExprId e, bounded_number(s, path));
          alts.push_back(e);
        } else {
          alts.push_back(any_number());
        }
      } else if (t == "string") {
        FATHOM_ASSIGN_OR_RETURN(ExprId e, string_expr(s));
        alts.push_back(e);
      } else if (t == "array") {
        FATHOM_ASSIGN_OR_RETURN(ExprId e, array_expr(s, path));
        alts.push_back(e);
      } else if (t == "object") {
        FATHOM_ASSIGN_OR_RETURN(ExprId e, object_expr(s, path));
        alts.push_back(e);
      }
    }
    return g_.alt(std::move(alts));
  }

  const Value& root_;
  const JsonSchemaOptions& o_;
  Grammar g_;
  std::map<std::string, int32_t> ref_rules_;
  int32_t any_value_rule_ = -1;
  ExprId any_char_ = -1, any_string_ = -1, any_number_ = -1;
  int depth_ = 0;
};

}  // namespace

std::string canonical_json(const Value& v) {
  std::string out;
  canonical_to(out, v);
  return out;
}

Result<Grammar> json_schema_grammar(const Value& schema, const JsonSchemaOptions& options) {
  if (options.max_whitespace < 0 || options.max_whitespace > 1000) {
    return invalid_argument("max_whitespace must be in [0, 1000]");
  }
  SchemaCompiler c(schema, options);
  return c.run();
}

Result<Grammar> json_schema_grammar(std::string_view schema_json,
                                    const JsonSchemaOptions& options) {
  pyjson::ParseOptions po;
  po.allow_nan = false;
  FATHOM_ASSIGN_OR_RETURN(Value v, pyjson::parse(schema_json, po));
  return json_schema_grammar(v, options);
}

}  // namespace fathom::grammar
