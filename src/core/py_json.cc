#include "core/py_json.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include "core/utf8.h"

namespace fathom::pyjson {

Value Value::from_bool(bool b) {
  Value v;
  v.kind = Kind::kBool;
  v.boolean = b;
  return v;
}
Value Value::from_int(int64_t i) {
  Value v;
  v.kind = Kind::kInt;
  v.text = std::to_string(i);
  return v;
}
Value Value::from_float(double d) {
  Value v;
  v.kind = Kind::kFloat;
  v.number = d;
  return v;
}
Value Value::from_string(std::string s) {
  Value v;
  v.kind = Kind::kString;
  v.text = std::move(s);
  return v;
}
Value Value::array() {
  Value v;
  v.kind = Kind::kArray;
  return v;
}
Value Value::object() {
  Value v;
  v.kind = Kind::kObject;
  return v;
}

const Value* Value::find(std::string_view key) const {
  if (kind != Kind::kObject) return nullptr;
  for (size_t i = 0; i < keys.size(); ++i)
    if (keys[i] == key) return &items[i];
  return nullptr;
}

void Value::set(std::string key, Value v) {
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i] == key) {
      items[i] = std::move(v);
      return;
    }
  }
  keys.push_back(std::move(key));
  items.push_back(std::move(v));
}

bool Value::int_fits_int64(int64_t* out) const {
  if (kind != Kind::kInt) return false;
  int64_t v = 0;
  auto r = std::from_chars(text.data(), text.data() + text.size(), v);
  if (r.ec != std::errc() || r.ptr != text.data() + text.size()) return false;
  *out = v;
  return true;
}

namespace {

class Parser {
 public:
  Parser(std::string_view s, ParseOptions o) : s_(s), opt_(o) {}

  Result<Value> run() {
    skip_ws();
    Value v;
    FATHOM_RETURN_IF_ERROR(value(v, 0));
    skip_ws();
    if (i_ != s_.size()) return error("extra data");
    return v;
  }

 private:
  Status error(const std::string& what) const {
    return invalid_argument("invalid JSON at byte " + std::to_string(i_) + ": " + what);
  }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r'))
      ++i_;
  }
  bool consume(std::string_view lit) {
    if (s_.substr(i_, lit.size()) != lit) return false;
    i_ += lit.size();
    return true;
  }

  Status value(Value& out, int depth) {
    if (depth > opt_.max_depth)
      return error("nesting deeper than " + std::to_string(opt_.max_depth));
    if (i_ >= s_.size()) return error("expecting value");
    char c = s_[i_];
    if (c == '{') return object(out, depth);
    if (c == '[') return array(out, depth);
    if (c == '"') {
      out.kind = Value::Kind::kString;
      return string(out.text);
    }
    if (consume("null")) {
      out.kind = Value::Kind::kNull;
      return Status::ok();
    }
    if (consume("true")) {
      out = Value::from_bool(true);
      return Status::ok();
    }
    if (consume("false")) {
      out = Value::from_bool(false);
      return Status::ok();
    }
    if (!opt_.allow_nan && (c == 'N' || c == 'I' || s_.substr(i_, 2) == "-I"))
      return error("NaN and Infinity are not JSON");
    if (consume("NaN")) {
      out = Value::from_float(std::nan(""));
      return Status::ok();
    }
    if (consume("Infinity")) {
      out = Value::from_float(INFINITY);
      return Status::ok();
    }
    if (consume("-Infinity")) {
      out = Value::from_float(-INFINITY);
      return Status::ok();
    }
    if (c == '-' || (c >= '0' && c <= '9')) return number(out);
    return error("expecting value");
  }

  Status number(Value& out) {
    size_t start = i_;
    if (s_[i_] == '-') ++i_;
    if (i_ >= s_.size() || !(s_[i_] >= '0' && s_[i_] <= '9')) return error("expecting value");
    if (s_[i_] == '0') {
      ++i_;
    } else {
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
    }
    bool is_float = false;
    // Python's scanner takes the fraction/exponent only when digits follow.
    if (i_ + 1 < s_.size() && s_[i_] == '.' && s_[i_ + 1] >= '0' && s_[i_ + 1] <= '9') {
      is_float = true;
      i_ += 2;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      size_t j = i_ + 1;
      if (j < s_.size() && (s_[j] == '+' || s_[j] == '-')) ++j;
      if (j < s_.size() && s_[j] >= '0' && s_[j] <= '9') {
        is_float = true;
        while (j < s_.size() && s_[j] >= '0' && s_[j] <= '9') ++j;
        i_ = j;
      }
    }
    std::string_view lit = s_.substr(start, i_ - start);
    if (is_float) {
      std::string tmp(lit);
      out =
          Value::from_float(std::strtod(tmp.c_str(), nullptr));  // overflow gives +-inf, as Python
      return Status::ok();
    }
    out.kind = Value::Kind::kInt;
    bool neg = lit[0] == '-';
    std::string_view digits = neg ? lit.substr(1) : lit;
    if (digits.size() > 4300) return error("integer has more than 4300 digits");
    out.text.clear();
    if (neg && digits != "0") out.text.push_back('-');
    out.text.append(digits);
    return Status::ok();
  }

  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  bool read_hex4(uint32_t* v) {
    if (i_ + 4 > s_.size()) return false;
    uint32_t r = 0;
    for (int k = 0; k < 4; ++k) {
      int h = hex(s_[i_ + size_t(k)]);
      if (h < 0) return false;
      r = r * 16 + uint32_t(h);
    }
    i_ += 4;
    *v = r;
    return true;
  }

  Status string(std::string& out) {
    ++i_;  // opening quote
    out.clear();
    size_t run = i_;
    for (;;) {
      if (i_ >= s_.size()) return error("unterminated string");
      unsigned char c = static_cast<unsigned char>(s_[i_]);
      if (c == '"') {
        out.append(s_.data() + run, i_ - run);
        ++i_;
        break;
      }
      if (c < 0x20) return error("invalid control character in string");
      if (c != '\\') {
        ++i_;
        continue;
      }
      out.append(s_.data() + run, i_ - run);
      ++i_;
      if (i_ >= s_.size()) return error("unterminated string");
      char e = s_[i_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          uint32_t cp = 0;
          if (!read_hex4(&cp)) return error("invalid \\u escape");
          if (cp >= 0xD800 && cp <= 0xDBFF && i_ + 1 < s_.size() && s_[i_] == '\\' &&
              s_[i_ + 1] == 'u') {
            size_t save = i_;
            i_ += 2;
            uint32_t lo = 0;
            if (read_hex4(&lo) && lo >= 0xDC00 && lo <= 0xDFFF) {
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else {
              i_ = save;
            }
          }
          if (cp >= 0xD800 && cp <= 0xDFFF) return error("lone surrogate in \\u escape");
          utf8::append(out, cp);
          break;
        }
        default:
          return error("invalid escape");
      }
      run = i_;
    }
    return Status::ok();
  }

  Status array(Value& out, int depth) {
    out = Value::array();
    ++i_;
    skip_ws();
    if (i_ < s_.size() && s_[i_] == ']') {
      ++i_;
      return Status::ok();
    }
    for (;;) {
      skip_ws();
      Value v;
      FATHOM_RETURN_IF_ERROR(value(v, depth + 1));
      out.items.push_back(std::move(v));
      skip_ws();
      if (i_ < s_.size() && s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (i_ < s_.size() && s_[i_] == ']') {
        ++i_;
        return Status::ok();
      }
      return error("expecting ',' or ']'");
    }
  }

  Status object(Value& out, int depth) {
    out = Value::object();
    ++i_;
    skip_ws();
    if (i_ < s_.size() && s_[i_] == '}') {
      ++i_;
      return Status::ok();
    }
    // Where each key sits, once the object has kLinearKeys members: past that, set()'s
    // linear search for a duplicate would make parsing quadratic in the object's size.
    constexpr size_t kLinearKeys = 32;
    std::unordered_map<std::string, size_t> index;
    for (;;) {
      skip_ws();
      if (i_ >= s_.size() || s_[i_] != '"')
        return error("expecting property name in double quotes");
      std::string key;
      FATHOM_RETURN_IF_ERROR(string(key));
      skip_ws();
      if (i_ >= s_.size() || s_[i_] != ':') return error("expecting ':' delimiter");
      ++i_;
      skip_ws();
      Value v;
      FATHOM_RETURN_IF_ERROR(value(v, depth + 1));
      if (out.keys.size() < kLinearKeys) {
        out.set(std::move(key), std::move(v));
      } else {
        if (index.empty())
          for (size_t k = 0; k < out.keys.size(); ++k) index.emplace(out.keys[k], k);
        auto [at, fresh] = index.try_emplace(key, out.keys.size());
        if (fresh) {
          out.keys.push_back(std::move(key));
          out.items.push_back(std::move(v));
        } else {
          out.items[at->second] = std::move(v);  // the last duplicate wins, in the first's place
        }
      }
      skip_ws();
      if (i_ < s_.size() && s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (i_ < s_.size() && s_[i_] == '}') {
        ++i_;
        return Status::ok();
      }
      return error("expecting ',' or '}'");
    }
  }

  std::string_view s_;
  ParseOptions opt_;
  size_t i_ = 0;
};

void dump_string(std::string& out, std::string_view s, bool ensure_ascii) {
  static constexpr char kHex[] = "0123456789abcdef";
  auto u_escape = [&](uint32_t u) {
    char b[7] = {'\\',         'u', kHex[(u >> 12) & 15], kHex[(u >> 8) & 15], kHex[(u >> 4) & 15],
                 kHex[u & 15], 0};
    out.append(b, 6);
  };
  out += '"';
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
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
        case '\b':
          out += "\\b";
          break;
        case '\f':
          out += "\\f";
          break;
        default:
          if (c < 0x20 || (c == 0x7F && ensure_ascii)) {
            u_escape(c);
          } else {
            out += static_cast<char>(c);
          }
      }
      ++i;
      continue;
    }
    size_t len = utf8::valid_sequence_length(s, i);
    if (len == 0) len = 1;  // not reachable for values built by parse(); copied raw
    if (!ensure_ascii || len == 1) {
      out.append(s.data() + i, len);
    } else {
      size_t l = 0;
      uint32_t cp = utf8::decode_at(s, i, &l);
      if (cp >= 0x10000) {
        cp -= 0x10000;
        u_escape(0xD800 + (cp >> 10));
        u_escape(0xDC00 + (cp & 0x3FF));
      } else {
        u_escape(cp);
      }
    }
    i += len;
  }
  out += '"';
}

}  // namespace

Result<Value> parse(std::string_view text, ParseOptions options) {
  FATHOM_RETURN_IF_ERROR(utf8::validate(text, "JSON text"));
  return Parser(text, options).run();
}

std::string float_repr(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // "-d.ddde+XX", shortest round-trip digits
  bool neg = sci[0] == '-';
  size_t p = neg ? 1 : 0;
  size_t e = sci.find('e');
  std::string digits;
  for (size_t k = p; k < e; ++k)
    if (sci[k] != '.') digits += sci[k];
  int exp10 = std::atoi(sci.c_str() + e + 1);
  int decpt = exp10 + 1;  // digits are d1 d2 ... with the point after position decpt
  std::string out = neg ? "-" : "";
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0.";
      out.append(size_t(-decpt), '0');
      out += digits;
    } else if (size_t(decpt) >= digits.size()) {
      out += digits;
      out.append(size_t(decpt) - digits.size(), '0');
      out += ".0";
    } else {
      out += digits.substr(0, size_t(decpt));
      out += '.';
      out += digits.substr(size_t(decpt));
    }
    return out;
  }
  out += digits[0];
  if (digits.size() > 1) {
    out += '.';
    out += digits.substr(1);
  }
  int x = decpt - 1;
  out += x < 0 ? "e-" : "e+";
  int ax = x < 0 ? -x : x;
  if (ax < 10) out += '0';
  out += std::to_string(ax);
  return out;
}

void dump_to(std::string& out, const Value& v, bool ensure_ascii, bool compact) {
  const char* item_sep = compact ? "," : ", ";
  const char* key_sep = compact ? ":" : ": ";
  switch (v.kind) {
    case Value::Kind::kNull:
      out += "null";
      return;
    case Value::Kind::kBool:
      out += v.boolean ? "true" : "false";
      return;
    case Value::Kind::kInt:
      out += v.text;
      return;
    case Value::Kind::kFloat:
      out += float_repr(v.number);
      return;
    case Value::Kind::kString:
      dump_string(out, v.text, ensure_ascii);
      return;
    case Value::Kind::kArray:
      out += '[';
      for (size_t i = 0; i < v.items.size(); ++i) {
        if (i) out += item_sep;
        dump_to(out, v.items[i], ensure_ascii, compact);
      }
      out += ']';
      return;
    case Value::Kind::kObject:
      out += '{';
      for (size_t i = 0; i < v.items.size(); ++i) {
        if (i) out += item_sep;
        dump_string(out, v.keys[i], ensure_ascii);
        out += key_sep;
        dump_to(out, v.items[i], ensure_ascii, compact);
      }
      out += '}';
      return;
  }
}

std::string dumps(const Value& v, bool ensure_ascii, bool compact) {
  std::string out;
  dump_to(out, v, ensure_ascii, compact);
  return out;
}

}  // namespace fathom::pyjson
