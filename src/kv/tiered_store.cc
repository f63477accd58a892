#include "kv/tiered_store.h"

#include "core/log.h"
#include "kv/block_format.h"

namespace fathom::kv {

TieredStore::TieredStore(std::vector<std::unique_ptr<Store>> tiers) : tiers_(std::move(tiers)) {}

Status TieredStore::check(size_t tier, const StoreKey& key, const std::string& bytes) {
  if (tiers_.size() < 2) return Status::ok();  // the caller's own checks find it, and erase it
  Status st = check_envelope(bytes);
  if (st.is_ok()) return st;
  log_warn("kv store: " + std::string(tiers_[tier]->tier_name()) + " object " + key.hex() +
           " failed its checks; removed there, reading the next tier: " + st.message());
  tiers_[tier]->erase(key);
  return st;
}

bool TieredStore::contains(const StoreKey& key) {
  for (auto& t : tiers_)
    if (t->contains(key)) return true;
  return false;
}

namespace {

// The tiers asked in turn, fastest first, each for the keys no faster tier settled: ask(t, keys)
// is tier t's answers for `keys` (in order); take(t, i, answer) takes key i's answer and says
// whether it is settled (no slower tier is asked for it).
template <typename Ask, typename Take>
void ask_tiers_in_turn(size_t tiers, std::span<const StoreKey> keys, Ask ask, Take take) {
  std::vector<size_t> left(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) left[i] = i;
  for (size_t t = 0; t < tiers && !left.empty(); ++t) {
    std::vector<StoreKey> asked;
    for (size_t i : left) asked.push_back(keys[i]);
    auto got = ask(t, std::span<const StoreKey>(asked));
    std::vector<size_t> still;
    for (size_t j = 0; j < left.size(); ++j)
      if (!take(t, left[j], got[j])) still.push_back(left[j]);
    left = std::move(still);
  }
}

}  // namespace

std::vector<bool> TieredStore::contains_many(std::span<const StoreKey> keys) {
  std::vector<bool> out(keys.size(), false);
  ask_tiers_in_turn(
      tiers_.size(), keys,
      [&](size_t t, std::span<const StoreKey> ask) { return tiers_[t]->contains_many(ask); },
      [&](size_t, size_t i, bool held) { return out[i] = held; });
  return out;
}

// Without asking each tier whether it holds the object first: on Redis that is a round trip
// of its own before the read's.
Result<std::string> TieredStore::get(const StoreKey& key, RetentionClass cls) {
  return std::move(get_many(std::span<const StoreKey>(&key, 1), cls).front());
}

std::vector<Result<std::string>> TieredStore::get_many(std::span<const StoreKey> keys,
                                                       RetentionClass cls) {
  std::vector<Result<std::string>> out;
  for (const StoreKey& k : keys) out.push_back(not_found("no KV object " + k.hex()));
  ask_tiers_in_turn(
      tiers_.size(), keys,
      [&](size_t t, std::span<const StoreKey> ask) { return tiers_[t]->get_many(ask, cls); },
      [&](size_t t, size_t i, Result<std::string>& got) {
        if (got.is_ok())
          if (Status bad = check(t, keys[i], *got); !bad.is_ok()) got = std::move(bad);
        if (!got.is_ok()) {
          // A tier's failure outranks another's plain miss in what the caller hears.
          if (got.status().code() != StatusCode::kNotFound ||
              out[i].status().code() == StatusCode::kNotFound)
            out[i] = got.status();
          return false;
        }
        for (size_t f = 0; f < t; ++f) tiers_[f]->put(keys[i], *got, cls);
        out[i] = std::move(got);
        return true;
      });
  return out;
}

bool TieredStore::put(const StoreKey& key, std::string value, RetentionClass cls) {
  bool all = true;
  for (size_t i = 0; i + 1 < tiers_.size(); ++i) all = tiers_[i]->put(key, value, cls) && all;
  if (!tiers_.empty()) all = tiers_.back()->put(key, std::move(value), cls) && all;
  return all;
}

void TieredStore::erase(const StoreKey& key) {
  for (auto& t : tiers_) t->erase(key);
}

void TieredStore::flush() {
  for (auto& t : tiers_) t->flush();
}

StoreStats TieredStore::stats() const {
  StoreStats s;
  for (const auto& t : tiers_) {
    const StoreStats x = t->stats();
    s.hits += x.hits;
    s.misses += x.misses;
    s.bytes_read += x.bytes_read;
    s.bytes_written += x.bytes_written;
    s.writes += x.writes;
    s.dropped_writes += x.dropped_writes;
    s.write_errors += x.write_errors;
    s.evictions += x.evictions;
    s.expirations += x.expirations;
    s.erased += x.erased;
    s.objects += x.objects;
    s.bytes += x.bytes;
    s.queued_bytes += x.queued_bytes;
    s.redirects += x.redirects;
    s.round_trips += x.round_trips;
    // The tiers share one policy: the same classes in the same order.
    if (s.classes.size() < x.classes.size()) s.classes.resize(x.classes.size());
    for (size_t c = 0; c < x.classes.size(); ++c) {
      RetentionStats& d = s.classes[c];
      d.name = x.classes[c].name;
      d.hits += x.classes[c].hits;
      d.misses += x.classes[c].misses;
      d.expirations += x.classes[c].expirations;
      d.evictions += x.classes[c].evictions;
      d.bytes_written += x.classes[c].bytes_written;
      d.read_seconds.merge(x.classes[c].read_seconds);
      d.write_seconds.merge(x.classes[c].write_seconds);
    }
  }
  return s;
}

std::vector<std::pair<std::string, StoreStats>> TieredStore::tier_stats() const {
  std::vector<std::pair<std::string, StoreStats>> out;
  for (const auto& t : tiers_)
    for (auto& x : t->tier_stats()) out.push_back(std::move(x));
  return out;
}

}  // namespace fathom::kv
