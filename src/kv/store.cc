#include "kv/store.h"

#include <xxhash.h>

#include <cstdio>

namespace fathom::kv {

std::string StoreKey::hex() const {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", (unsigned long long)hi, (unsigned long long)lo);
  return buf;
}

bool StoreKey::from_hex(std::string_view s, StoreKey* out) {
  if (s.size() != 32) return false;
  uint64_t v[2] = {0, 0};
  for (size_t i = 0; i < 32; ++i) {
    const char c = s[i];
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    if (d < 0) return false;
    v[i / 16] = v[i / 16] << 4 | uint64_t(d);
  }
  out->hi = v[0];
  out->lo = v[1];
  return true;
}

std::vector<bool> Store::contains_many(std::span<const StoreKey> keys) {
  std::vector<bool> out;
  out.reserve(keys.size());
  for (const StoreKey& k : keys) out.push_back(contains(k));
  return out;
}

size_t first_held(Store& store, std::span<const StoreKey> keys) {
  if (keys.empty() || store.contains(keys.front())) return 0;
  const std::vector<bool> held = store.contains_many(keys.subspan(1));
  for (size_t i = 0; i < held.size(); ++i)
    if (held[i]) return i + 1;
  return keys.size();
}

std::vector<Result<std::string>> Store::get_many(std::span<const StoreKey> keys,
                                                 RetentionClass cls) {
  std::vector<Result<std::string>> out;
  out.reserve(keys.size());
  for (const StoreKey& k : keys) out.push_back(get(k, cls));
  return out;
}

StoreKey store_key(const Fingerprint& model, uint64_t chain_hash, ObjectKind kind) {
  unsigned char b[25];
  const uint64_t words[3] = {model.lo, model.hi, chain_hash};
  for (int w = 0; w < 3; ++w)
    for (int i = 0; i < 8; ++i) b[w * 8 + i] = (unsigned char)((words[w] >> (8 * i)) & 0xff);
  b[24] = (unsigned char)kind;
  const XXH128_hash_t h = XXH3_128bits(b, sizeof b);
  return StoreKey{h.low64, h.high64};
}

}  // namespace fathom::kv
