// Internal: small helpers the protocol adapters share (typed field access with
// client-facing errors, the shared validation rules). Not a public header.
#pragma once

#include <algorithm>
#include <cctype>
#include <string>

#include "core/py_json.h"
#include "core/status.h"

namespace fathom::api::detail {

using pyjson::Value;

inline Status bad(std::string m) { return invalid_argument(std::move(m)); }

inline const Value* field(const Value& o, std::string_view k) {
  const Value* v = o.find(k);
  return v == nullptr || v->is_null() ? nullptr : v;
}

inline Result<double> number(const Value& v, const char* name) {
  int64_t i = 0;
  if (v.kind == Value::Kind::kFloat) return v.number;
  if (v.int_fits_int64(&i)) return double(i);
  return bad(std::string("'") + name + "' must be a number");
}

inline Result<int64_t> integer(const Value& v, const char* name) {
  int64_t i = 0;
  if (v.kind == Value::Kind::kInt && v.int_fits_int64(&i)) return i;
  if (v.kind == Value::Kind::kInt) return bad(std::string("'") + name + "' is out of range");
  return bad(std::string("'") + name + "' must be an integer");
}

// Text of a string content or of a list of text parts (joined with "\n\n").
inline Result<std::string> text_content(const Value* c, const std::string& where) {
  if (c == nullptr) return std::string();
  if (c->is_string()) return c->text;
  if (!c->is_array()) return bad(where + ": 'content' must be a string or a list of parts");
  std::string out;
  for (size_t i = 0; i < c->items.size(); ++i) {
    const Value& p = c->items[i];
    const Value* type = p.is_object() ? field(p, "type") : nullptr;
    const Value* text = p.is_object() ? field(p, "text") : nullptr;
    if (type == nullptr || !type->is_string() || type->text != "text" || text == nullptr ||
        !text->is_string()) {
      return bad(where + ": only text parts are allowed here");
    }
    if (i) out += "\n\n";
    out += text->text;
  }
  return out;
}

inline bool valid_tool_name(const std::string& n) {
  if (n.empty() || n.size() > 128) return false;
  for (unsigned char c : n)
    if (!(std::isalnum(c) || c == '_' || c == '-')) return false;
  return true;
}

inline bool mentions_json(const Value& v) {
  if (v.is_string()) {
    std::string lower;
    for (unsigned char c : v.text) lower.push_back(char(std::tolower(c)));
    return lower.find("json") != std::string::npos;
  }
  for (const Value& i : v.items)
    if (mentions_json(i)) return true;
  return false;
}

// A literal image placeholder in client text would be taken for an image.
inline Status check_no_placeholder(const Value& v) {
  if (v.is_string()) {
    for (std::string_view ph : {"<｜image｜>", "<｜deepseek_image｜>"}) {
      if (v.text.find(ph) != std::string::npos) {
        return bad("The sub-string \"" + std::string(ph) +
                   "\" in your input is not allowed; images must be sent as image parts.");
      }
    }
    return Status::ok();
  }
  for (const Value& i : v.items) FATHOM_RETURN_IF_ERROR(check_no_placeholder(i));
  return Status::ok();
}

}  // namespace fathom::api::detail
