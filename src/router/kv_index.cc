#include "router/kv_index.h"

#include <algorithm>
#include <bit>

namespace fathom::router {

namespace {
constexpr size_t kInitialSlots = 1024;
}

KvIndex::KvIndex(size_t replicas, int64_t max_blocks_per_replica)
    : words_((std::max<size_t>(replicas, 1) + 63) / 64),
      stride_(words_ + 1),
      shift_(64 - std::countr_zero(kInitialSlots)),
      table_(kInitialSlots * stride_, 0),
      zero_bits_(words_, 0),
      counts_(replicas, 0),
      max_blocks_(max_blocks_per_replica) {}

bool KvIndex::empty_bits(const uint64_t* b) const {
  for (size_t w = 0; w < words_; ++w)
    if (b[w] != 0) return false;
  return true;
}

size_t KvIndex::probe(uint64_t k) const {
  const size_t m = slots() - 1;
  size_t i = home(k);
  while (key(i) != 0 && key(i) != k) i = (i + 1) & m;
  return i;
}

const uint64_t* KvIndex::find(uint64_t hash) const {
  if (hash == 0) return zero_used_ ? zero_bits_.data() : nullptr;
  const size_t i = probe(hash);
  return key(i) == 0 ? nullptr : bits(i);
}

void KvIndex::grow() {
  std::vector<uint64_t> old(table_.size() * 2, 0);
  old.swap(table_);
  --shift_;
  for (size_t s = 0; s < old.size(); s += stride_) {
    if (old[s] == 0) continue;
    const size_t i = probe(old[s]);
    std::copy_n(&old[s], stride_, &table_[i * stride_]);
  }
}

void KvIndex::store(size_t r, uint64_t hash) {
  const uint64_t bit = uint64_t(1) << (r % 64);
  if (counts_[r] >= max_blocks_ && !contains(r, hash)) {
    ++dropped_;
    return;
  }
  uint64_t* b;
  if (hash == 0) {
    zero_used_ = true;
    b = zero_bits_.data();
  } else {
    size_t i = probe(hash);
    if (key(i) == 0) {
      if ((used_ + 1) * 2 > slots()) {
        grow();
        i = probe(hash);
      }
      key(i) = hash;
      ++used_;
    }
    b = bits(i);
  }
  if ((b[r / 64] & bit) == 0) {
    b[r / 64] |= bit;
    ++counts_[r];
  }
}

void KvIndex::erase_slot(size_t slot) {
  // Backward shift: entries after the hole move into it unless their home lies after it.
  const size_t m = slots() - 1;
  size_t i = slot, j = slot;
  for (;;) {
    j = (j + 1) & m;
    if (key(j) == 0) break;
    const size_t k = home(key(j));
    const bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
    if (stays) continue;
    std::copy_n(&table_[j * stride_], stride_, &table_[i * stride_]);
    i = j;
  }
  std::fill_n(&table_[i * stride_], stride_, 0);
  --used_;
}

void KvIndex::remove(size_t r, uint64_t hash) {
  const uint64_t bit = uint64_t(1) << (r % 64);
  if (hash == 0) {
    if (!zero_used_ || (zero_bits_[r / 64] & bit) == 0) return;
    zero_bits_[r / 64] &= ~bit;
    --counts_[r];
    zero_used_ = !empty_bits(zero_bits_.data());
    return;
  }
  const size_t i = probe(hash);
  if (key(i) == 0) return;
  uint64_t* b = bits(i);
  if ((b[r / 64] & bit) == 0) return;
  b[r / 64] &= ~bit;
  --counts_[r];
  if (empty_bits(b)) erase_slot(i);
}

void KvIndex::apply(size_t r, const kv::KvEvent& e) {
  if (e.kind == kv::KvEventKind::kStored)
    for (uint64_t h : e.hashes) store(r, h);
  else
    for (uint64_t h : e.hashes) remove(r, h);
}

void KvIndex::clear(size_t r) {
  if (counts_[r] == 0) return;
  const uint64_t bit = uint64_t(1) << (r % 64);
  zero_bits_[r / 64] &= ~bit;
  zero_used_ = !empty_bits(zero_bits_.data());
  // Rebuilt without r's bit: entries left with no replica go (rare: a replica left or resyncs).
  std::vector<uint64_t> old(table_.size(), 0);
  old.swap(table_);
  used_ = 0;
  for (size_t s = 0; s < old.size(); s += stride_) {
    if (old[s] == 0) continue;
    old[s + 1 + r / 64] &= ~bit;
    if (empty_bits(&old[s + 1])) continue;
    const size_t i = probe(old[s]);
    std::copy_n(&old[s], stride_, &table_[i * stride_]);
    ++used_;
  }
  counts_[r] = 0;
}

void KvIndex::load(size_t r, std::span<const std::pair<uint64_t, uint64_t>> blocks) {
  clear(r);
  for (const auto& [h, parent] : blocks) store(r, h);
}

bool KvIndex::contains(size_t r, uint64_t hash) const {
  const uint64_t* b = find(hash);
  return b != nullptr && (b[r / 64] >> (r % 64) & 1) != 0;
}

int64_t KvIndex::matched(size_t r, std::span<const uint64_t> hashes) const {
  int64_t m = 0;
  for (uint64_t h : hashes) {
    if (!contains(r, h)) break;
    ++m;
  }
  return m;
}

void KvIndex::matched_all(std::span<const uint64_t> hashes, std::vector<int64_t>& out) const {
  const size_t n = counts_.size();
  out.assign(n, 0);
  // alive: the replicas whose chain has not missed yet, one word at a time.
  for (size_t w = 0; w < words_; ++w) {
    const size_t lo = w * 64, hi = std::min(n, lo + 64);
    if (lo >= hi) break;
    uint64_t alive = hi - lo == 64 ? ~uint64_t(0) : (uint64_t(1) << (hi - lo)) - 1;
    int64_t depth = 0;
    for (uint64_t h : hashes) {
      const uint64_t* b = find(h);
      const uint64_t now = b != nullptr ? alive & b[w] : 0;
      for (uint64_t gone = alive & ~now; gone != 0; gone &= gone - 1)
        out[lo + size_t(std::countr_zero(gone))] = depth;
      alive = now;
      if (alive == 0) break;
      ++depth;
    }
    for (; alive != 0; alive &= alive - 1) out[lo + size_t(std::countr_zero(alive))] = depth;
  }
}

std::vector<uint64_t> KvIndex::hashes_of(size_t r) const {
  std::vector<uint64_t> out;
  out.reserve(size_t(counts_[r]));
  const uint64_t bit = uint64_t(1) << (r % 64);
  if (zero_used_ && (zero_bits_[r / 64] & bit) != 0) out.push_back(0);
  for (size_t s = 0; s < slots(); ++s)
    if (key(s) != 0 && (bits(s)[r / 64] & bit) != 0) out.push_back(key(s));
  return out;
}

}  // namespace fathom::router
