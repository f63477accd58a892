#include "kv/retention.h"

#include <algorithm>
#include <ctime>

#include "kv/clock.h"

namespace fathom::kv {
namespace {

constexpr size_t kMaxClasses = 32;

bool valid_name(std::string_view n) {
  if (n.empty() || n.size() > 64) return false;
  for (size_t i = 0; i < n.size(); ++i) {
    const char c = n[i];
    const bool ok = (c >= 'a' && c <= 'z') || c == '_' || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

}  // namespace

const Clock& system_clock() {
  struct SystemClock final : Clock {
    int64_t now_ms() const override {
      timespec ts;
      ::clock_gettime(CLOCK_REALTIME, &ts);
      return int64_t(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
    }
  };
  static const SystemClock clock;
  return clock;
}

RetentionPolicy::RetentionPolicy()
    : classes_{{"agent", int64_t(3) * 86400 * 1000}, {"chat", int64_t(7) * 86400 * 1000}},
      default_class_(1) {}

namespace {
constexpr int64_t kMaxRetentionMs = int64_t(100) * 365 * 86400 * 1000;
}  // namespace

Result<int64_t> RetentionPolicy::parse_duration(std::string_view d) {
  const std::string shown = "'" + std::string(d) + "'";
  if (d.size() < 2)
    return invalid_argument(shown + " is not a duration (N followed by s, m, h or d)");
  int64_t unit = 0;
  switch (d.back()) {
    case 's':
      unit = 1000;
      break;
    case 'm':
      unit = 60 * 1000;
      break;
    case 'h':
      unit = 3600 * 1000;
      break;
    case 'd':
      unit = 86400 * 1000;
      break;
    default:
      return invalid_argument(shown + " is not a duration (N followed by s, m, h or d)");
  }
  int64_t n = 0;
  for (char c : d.substr(0, d.size() - 1)) {
    if (c < '0' || c > '9')
      return invalid_argument(shown + " is not a duration (N followed by s, m, h or d)");
    n = n * 10 + (c - '0');
    // At most 100 years, whatever the unit (Redis's put script reads the time as a Lua
    // number: far beyond that it is written 1e+17 and SET refuses it).
    if (n > kMaxRetentionMs / unit)
      return invalid_argument(shown + " is too long (100 years at most)");
  }
  if (n == 0) return invalid_argument(shown + ": a retention time must be positive");
  return n * unit;
}

Result<RetentionPolicy> RetentionPolicy::parse(std::string_view spec) {
  RetentionPolicy p;
  p.classes_.clear();
  size_t at = 0;
  while (at <= spec.size()) {
    size_t comma = spec.find(',', at);
    if (comma == std::string_view::npos) comma = spec.size();
    const std::string_view item = spec.substr(at, comma - at);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos)
      return invalid_argument("retention: '" + std::string(item) + "' is not CLASS=DURATION");
    const std::string_view name = item.substr(0, eq);
    if (!valid_name(name))
      return invalid_argument("retention: '" + std::string(name) +
                              "' is not a class name (a lowercase identifier: [a-z_][a-z0-9_]*)");
    for (const Class& c : p.classes_)
      if (c.name == name) return invalid_argument("retention: class '" + c.name + "' given twice");
    auto ttl = parse_duration(item.substr(eq + 1));
    if (!ttl.is_ok()) return invalid_argument("retention: " + ttl.status().message());
    p.classes_.push_back({std::string(name), *ttl});
    if (p.classes_.size() > kMaxClasses)
      return invalid_argument("retention: at most " + std::to_string(kMaxClasses) + " classes");
    at = comma + 1;
  }
  // The default, by name, before the classes are put in time-to-live order.
  std::string def = p.classes_.front().name;
  for (const Class& c : p.classes_)
    if (c.name == "chat") def = c.name;
  std::stable_sort(p.classes_.begin(), p.classes_.end(),
                   [](const Class& a, const Class& b) { return a.ttl_ms < b.ttl_ms; });
  p.default_class_ = *p.find(def);
  return p;
}

std::optional<RetentionClass> RetentionPolicy::find(std::string_view name) const {
  for (size_t i = 0; i < classes_.size(); ++i)
    if (classes_[i].name == name) return RetentionClass(i);
  return std::nullopt;
}

RetentionClass RetentionPolicy::for_ttl(int64_t ttl_ms) const {
  for (size_t i = 0; i < classes_.size(); ++i)
    if (classes_[i].ttl_ms >= ttl_ms) return RetentionClass(i);
  return RetentionClass(classes_.size() - 1);
}

std::string RetentionPolicy::names() const {
  std::string out;
  for (const Class& c : classes_) out += (out.empty() ? "" : ", ") + c.name;
  return out;
}

std::string RetentionPolicy::to_string() const {
  std::string out;
  for (const Class& c : classes_) {
    int64_t v = c.ttl_ms / 1000;
    char unit = 's';
    for (auto [div, u] : {std::pair<int64_t, char>{86400, 'd'}, {3600, 'h'}, {60, 'm'}})
      if (v % div == 0) {
        v /= div;
        unit = u;
        break;
      }
    out += (out.empty() ? "" : ",") + c.name + "=" + std::to_string(v) + unit;
  }
  return out;
}

}  // namespace fathom::kv
