// RetentionPolicy: the KV store's retention classes (`fathom serve --retention`), e.g.
// agent=3d,chat=7d (DeepSeek keeps agent traffic's cache 3 days and chat's 7). Every object
// a store writes carries the class of the request that wrote it and expires at its last use
// plus that class's time to live; a request names its class (the `retention` field, an
// Anthropic cache_control ttl, its API key's default) or gets the policy's default: `chat`
// when configured, else the first class given.
//
// Classes are numbered in order of their time to live (shortest first), so "the longer of
// two classes" is the larger number. Plain data: immutable once parsed, safe to share.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace fathom::kv {

// A class as stores see it: an index into the policy's classes. kDefaultRetention (or any
// number past the last class) means the policy's default class.
using RetentionClass = uint8_t;
inline constexpr RetentionClass kDefaultRetention = 255;

class RetentionPolicy {
 public:
  struct Class {
    std::string name;  // a lowercase identifier: [a-z_][a-z0-9_]*
    int64_t ttl_ms = 0;
  };

  // agent=3d,chat=7d.
  RetentionPolicy();
  // "CLASS=DURATION[,CLASS=DURATION...]", DURATION = N followed by s, m, h or d (N > 0).
  // kInvalidArgument naming what is wrong: bad syntax, a bad name, a duplicate, over 32
  // classes.
  static Result<RetentionPolicy> parse(std::string_view spec);
  // "3d", "90s" -> milliseconds; kInvalidArgument otherwise.
  static Result<int64_t> parse_duration(std::string_view d);

  const std::vector<Class>& classes() const { return classes_; }
  size_t size() const { return classes_.size(); }
  // `c`, or the default class when `c` is kDefaultRetention or out of range.
  RetentionClass resolve(RetentionClass c) const {
    return c < classes_.size() ? c : default_class_;
  }
  const std::string& name(RetentionClass c) const { return classes_[resolve(c)].name; }
  int64_t ttl_ms(RetentionClass c) const { return classes_[resolve(c)].ttl_ms; }
  std::optional<RetentionClass> find(std::string_view name) const;
  // `chat` when configured, else the first class given.
  RetentionClass default_class() const { return default_class_; }
  // The class with the smallest time to live >= ttl_ms, else the longest (Anthropic's
  // cache_control ttl mapped onto the configured classes).
  RetentionClass for_ttl(int64_t ttl_ms) const;
  // The configured names, comma separated, for error messages.
  std::string names() const;
  // "agent=3d,chat=7d" (durations in the largest unit that divides them).
  std::string to_string() const;

 private:
  std::vector<Class> classes_;  // by ttl_ms, shortest first
  RetentionClass default_class_ = 0;
};

}  // namespace fathom::kv
