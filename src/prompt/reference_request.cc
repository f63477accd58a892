#include "prompt/reference.h"

namespace fathom::prompt {

Result<ReferenceRequest> ReferenceRequest::from_case(const pyjson::Value& c) {
  if (!c.is_object()) return invalid_argument("the case must be a JSON object");
  ReferenceRequest r;
  const pyjson::Value* m = c.find("messages");
  if (m == nullptr || !m->is_array()) return invalid_argument("\"messages\" must be a list");
  r.messages = *m;
  if (const auto* v = c.find("context")) r.context = *v;
  if (const auto* v = c.find("thinking_mode")) r.thinking_mode = *v;
  if (const auto* v = c.find("reasoning_effort")) r.reasoning_effort = *v;
  if (const auto* v = c.find("drop_thinking"); v && v->kind == pyjson::Value::Kind::kBool)
    r.drop_thinking = v->boolean;
  if (const auto* v = c.find("add_default_bos_token"); v && v->kind == pyjson::Value::Kind::kBool) {
    r.add_default_bos_token = v->boolean;
  }
  return r;
}

}  // namespace fathom::prompt
