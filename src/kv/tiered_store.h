// TieredStore: several store tiers behind the one Store interface, fastest first (the local
// disk, then the Redis Cluster). contains() asks each in turn; get() reads from the first tier that
// holds the object and copies it into the faster tiers that do not (queued, like any put);
// put() and erase() go to every tier. A tier's copy that fails the object envelope's checks
// (check_envelope: a torn or altered copy) is erased in that tier alone and the next tier is
// read, so one damaged copy costs no other tier its good one. Owns its tiers. Thread-safe as
// its tiers are.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kv/store.h"

namespace fathom::kv {

class TieredStore final : public Store {
 public:
  explicit TieredStore(std::vector<std::unique_ptr<Store>> tiers);

  bool contains(const StoreKey& key) override;
  // Each tier's contains_many() for the keys the faster tiers do not hold.
  std::vector<bool> contains_many(std::span<const StoreKey> keys) override;
  // get_many() of the one key.
  Result<std::string> get(const StoreKey& key, RetentionClass cls) override;
  // Each tier's get_many() for the keys the faster tiers did not have (one pipelined batch to
  // Redis after the disk); what a slower tier has is copied into the faster ones, as get().
  std::vector<Result<std::string>> get_many(std::span<const StoreKey> keys,
                                            RetentionClass cls) override;
  bool put(const StoreKey& key, std::string value, RetentionClass cls) override;
  void erase(const StoreKey& key) override;
  void flush() override;
  // The tiers' counters summed.
  StoreStats stats() const override;
  std::vector<std::pair<std::string, StoreStats>> tier_stats() const override;
  const char* tier_name() const override { return "tiered"; }

 private:
  // Ok, or (with two tiers or more) the envelope check `bytes` from `tier` failed, after
  // erasing them there.
  Status check(size_t tier, const StoreKey& key, const std::string& bytes);

  std::vector<std::unique_ptr<Store>> tiers_;
};

}  // namespace fathom::kv
