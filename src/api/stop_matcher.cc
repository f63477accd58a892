#include "api/stop_matcher.h"

#include <algorithm>

namespace fathom::api {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

bool StopMatcher::push(const std::string& text, std::string* out) {
  if (stopped_) return true;
  hold_ += text;
  // The earliest complete stop string wins (ties: the longer one, as it starts there too).
  size_t best = std::string::npos;
  for (const auto& s : stops_) {
    const size_t at = hold_.find(s);
    if (at != std::string::npos && (at < best || (at == best && s.size() > matched_.size()))) {
      best = at;
      matched_ = s;
    }
  }
  if (best != std::string::npos) {
    out->append(hold_, 0, best);
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
  out->append(hold_, 0, hold_.size() - keep);
  hold_.erase(0, hold_.size() - keep);
  return false;
}

void StopMatcher::finish(std::string* out) {
  if (!stopped_) out->append(hold_);
  hold_.clear();
}

}  // namespace fathom::api
