// Open-addressing hash maps specialised for the tokenizer's hot lookups: byte strings to a
// pair of 32-bit values (vocabulary, word cache) and 64-bit keys to a pair of 32-bit values
// (BPE merges). Keys of the string map live in an internal arena. Not thread-safe for
// writers; concurrent readers are fine once building is done.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace fathom::tok {

inline uint64_t hash_bytes(std::string_view s) {
  // 64-bit FNV-1a over 8-byte words with a final avalanche; fast for the short keys here.
  uint64_t h = 0xcbf29ce484222325ull ^ (s.size() * 0x9E3779B97F4A7C15ull);
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0x100000001b3ull;
    h ^= h >> 29;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, s.data() + i, s.size() - i);
  h = (h ^ tail) * 0x9E3779B97F4A7C15ull;
  h ^= h >> 32;
  h *= 0xD6E8FEB86659FD93ull;
  h ^= h >> 32;
  return h;
}

class FlatStringMap {
 public:
  struct Value {
    uint32_t a = 0, b = 0;
  };

  explicit FlatStringMap(size_t expected = 16) { rehash(capacity_for(expected)); }

  size_t size() const { return size_; }
  size_t arena_bytes() const { return arena_.size(); }

  // Returns the value for key, or nullptr.
  const Value* find(std::string_view key) const { return find(key, hash_bytes(key)); }
  const Value* find(std::string_view key, uint64_t h) const {
    size_t mask = slots_.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      const Slot& s = slots_[i];
      if (s.hash == 0) return nullptr;
      if (s.hash == (h | 1) && s.len == key.size() &&
          std::memcmp(arena_.data() + s.offset, key.data(), key.size()) == 0) {
        return &s.value;
      }
    }
  }

  // Inserts or overwrites.
  void insert(std::string_view key, Value v) { insert(key, hash_bytes(key), v); }
  void insert(std::string_view key, uint64_t h, Value v) {
    if ((size_ + 1) * 4 > slots_.size() * 3) rehash(slots_.size() * 2);
    size_t mask = slots_.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      Slot& s = slots_[i];
      if (s.hash == 0) {
        s.hash = h | 1;
        s.offset = static_cast<uint32_t>(arena_.size());
        s.len = static_cast<uint32_t>(key.size());
        s.value = v;
        arena_.append(key.data(), key.size());
        ++size_;
        return;
      }
      if (s.hash == (h | 1) && s.len == key.size() &&
          std::memcmp(arena_.data() + s.offset, key.data(), key.size()) == 0) {
        s.value = v;
        return;
      }
    }
  }

 private:
  struct Slot {
    uint64_t hash = 0;  // 0 = empty; stored hashes have the low bit set
    uint32_t offset = 0, len = 0;
    Value value;
  };
  static size_t capacity_for(size_t n) {
    size_t c = 16;
    while (c * 3 < n * 4 + 4) c *= 2;
    return c;
  }
  void rehash(size_t capacity) {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(capacity, Slot{});
    size_t mask = capacity - 1;
    for (const Slot& s : old) {
      if (s.hash == 0) continue;
      size_t i = s.hash & mask;
      while (slots_[i].hash != 0) i = (i + 1) & mask;
      slots_[i] = s;
    }
  }

  std::vector<Slot> slots_;
  std::string arena_;
  size_t size_ = 0;
};

class FlatPairMap {
 public:
  struct Value {
    uint32_t rank = 0;
    int32_t id = 0;
  };

  explicit FlatPairMap(size_t expected = 16) {
    size_t c = 16;
    while (c * 3 < expected * 4 + 4) c *= 2;
    slots_.assign(c, Slot{});
  }

  static uint64_t key_of(int32_t left, int32_t right) {
    return (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
  }

  const Value* find(uint64_t key) const {
    size_t mask = slots_.size() - 1;
    for (size_t i = mix(key) & mask;; i = (i + 1) & mask) {
      const Slot& s = slots_[i];
      if (!s.used) return nullptr;
      if (s.key == key) return &s.value;
    }
  }

  void insert(uint64_t key, Value v) {
    if ((size_ + 1) * 4 > slots_.size() * 3) grow();
    size_t mask = slots_.size() - 1;
    for (size_t i = mix(key) & mask;; i = (i + 1) & mask) {
      Slot& s = slots_[i];
      if (!s.used) {
        s = Slot{key, v, true};
        ++size_;
        return;
      }
      if (s.key == key) {
        s.value = v;
        return;
      }
    }
  }
  size_t size() const { return size_; }

 private:
  struct Slot {
    uint64_t key = 0;
    Value value;
    bool used = false;
  };
  static uint64_t mix(uint64_t k) {
    k ^= k >> 31;
    k *= 0x9E3779B97F4A7C15ull;
    k ^= k >> 29;
    return k;
  }
  void grow() {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(old.size() * 2, Slot{});
    size_ = 0;
    for (const Slot& s : old)
      if (s.used) insert(s.key, s.value);
  }
  std::vector<Slot> slots_;
  size_t size_ = 0;
};

}  // namespace fathom::tok
