#include "api/stop_matcher.h"

#include <algorithm>

#include "core/py_json.h"

namespace fathom::api {

Status read_stop_field(const pyjson::Value& request, std::vector<std::string>* out) {
  const pyjson::Value* v = request.find("stop");
  if (v == nullptr || v->is_null()) return Status::ok();
  std::vector<std::string> stops;
  if (v->is_string()) {
    stops.push_back(v->text);
  } else if (v->is_array()) {
    for (const pyjson::Value& s : v->items) {
      if (!s.is_string()) return invalid_argument("'stop' must be a string or a list of strings");
      stops.push_back(s.text);
    }
  } else {
    return invalid_argument("'stop' must be a string or a list of strings");
  }
  if (stops.size() > 16) return invalid_argument("'stop' allows at most 16 sequences");
  for (auto& s : stops)
    if (!s.empty()) out->push_back(std::move(s));
  return Status::ok();
}

StopMatcher::StopMatcher(std::vector<std::string> stops, bool include_stop)
    : include_stop_(include_stop) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

bool StopMatcher::push(const std::string& text, std::string* out, bool checked) {
  if (stopped_) return true;
  hold_ += text;
  if (!checked) unchecked_ = hold_.size();
  // The earliest complete stop string wins (ties: the longer one, as it starts there too).
  size_t best = std::string::npos;
  for (const auto& s : stops_) {
    if (!checked) break;
    const size_t at = hold_.find(s, unchecked_ >= s.size() ? unchecked_ - s.size() + 1 : 0);
    if (at != std::string::npos && (at < best || (at == best && s.size() > matched_.size()))) {
      best = at;
      matched_ = s;
    }
  }
  if (best != std::string::npos) {
    out->append(hold_, 0, best + (include_stop_ ? matched_.size() : 0));
    hold_.clear();
    stopped_ = true;
    return true;
  }
  // Hold back the longest tail that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const auto& s : stops_) {
    for (size_t n = std::min(s.size() - 1, hold_.size()); n > keep; --n) {
      if (hold_.compare(hold_.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
    }
  }
  const size_t sent = hold_.size() - keep;
  out->append(hold_, 0, sent);
  hold_.erase(0, sent);
  unchecked_ -= std::min(unchecked_, sent);
  return false;
}

void StopMatcher::finish(std::string* out) {
  if (!stopped_) out->append(hold_);
  hold_.clear();
}

}  // namespace fathom::api
