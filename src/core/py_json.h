// PyJson: JSON values with the semantics of Python's `json` module. DeepSeek's official prompt
// encoders define their output bytes through json.loads/json.dumps (key order kept, the last
// duplicate key winning in the first one's place, arbitrary-size ints, NaN/Infinity, Python's
// float repr, ", "/": " separators), so a byte-exact port needs the same value model.
// Values are plain data; the functions are pure and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace fathom::pyjson {

struct Value {
  enum class Kind { kNull, kBool, kInt, kFloat, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  double number = 0;              // kFloat
  std::string text;               // kString: UTF-8; kInt: canonical decimal digits ("-12")
  std::vector<Value> items;       // kArray elements, or kObject values
  std::vector<std::string> keys;  // kObject keys, parallel to items, in insertion order

  static Value null() { return Value(); }
  static Value from_bool(bool b);
  static Value from_int(int64_t v);
  static Value from_float(double v);
  static Value from_string(std::string s);
  static Value array();
  static Value object();

  bool is_null() const { return kind == Kind::kNull; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_object() const { return kind == Kind::kObject; }
  bool is_array() const { return kind == Kind::kArray; }
  // Object access: the member named key, or nullptr.
  const Value* find(std::string_view key) const;
  // Sets a member like a Python dict: replaces the value in place, or appends.
  void set(std::string key, Value v);
  // Fits in int64 (ints only).
  bool int_fits_int64(int64_t* out) const;
};

struct ParseOptions {
  int max_depth = 128;    // deeper nesting is rejected (as deepseek-recipe's bindings do)
  bool allow_nan = true;  // NaN/Infinity literals (Python accepts them; strict JSON does not)
};

// json.loads. Errors are kInvalidArgument with the byte offset.
Result<Value> parse(std::string_view text, ParseOptions options = {});

// json.dumps(value, ensure_ascii=...) with the default separators, or (compact) with
// separators=(",", ":").
std::string dumps(const Value& v, bool ensure_ascii = true, bool compact = false);
void dump_to(std::string& out, const Value& v, bool ensure_ascii = true, bool compact = false);

// repr(float) for a Python float: shortest round-trip digits, scientific notation outside
// 1e-4 <= |x| < 1e16, "inf"/"nan" spelled as json.dumps does ("Infinity", "NaN").
std::string float_repr(double v);

}  // namespace fathom::pyjson
