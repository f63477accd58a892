// Internal: the few Python object behaviours the official encoders rely on (truthiness,
// str(), dict.get), over pyjson values.
#pragma once

#include <string>

#include "core/py_json.h"
#include "core/status.h"

namespace fathom::prompt::py {

using pyjson::Value;

inline bool truthy(const Value* v) {
  if (v == nullptr) return false;
  switch (v->kind) {
    case Value::Kind::kNull:
      return false;
    case Value::Kind::kBool:
      return v->boolean;
    case Value::Kind::kInt:
      return v->text != "0";
    case Value::Kind::kFloat:
      return v->number != 0;
    case Value::Kind::kString:
      return !v->text.empty();
    case Value::Kind::kArray:
    case Value::Kind::kObject:
      return !v->items.empty();
  }
  return false;
}

// dict.get(key): nullptr for a missing key or a non-dict.
inline const Value* get(const Value& obj, std::string_view key) { return obj.find(key); }
inline bool is_none(const Value* v) { return v == nullptr || v->is_null(); }
inline bool is_str(const Value* v) { return v != nullptr && v->is_string(); }
inline std::string str_or_empty(const Value* v) { return is_str(v) ? v->text : std::string(); }

// str(value) for the scalar cases the templates format; containers are not supported.
Result<std::string> str(const Value* v);

// "{a} or {b}" style helpers used by the ports.
inline bool role_is(const Value& msg, std::string_view role) {
  const Value* r = get(msg, "role");
  return is_str(r) && r->text == role;
}

}  // namespace fathom::prompt::py
