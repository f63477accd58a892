// RedisClusterStore: the KV store's distributed tier (L3) on a Redis Cluster, through hiredis
// 0.14 (which has no cluster client of its own). Objects are Redis strings under
// "fkv:<32 hex key>". The client keeps the cluster's slot map (CLUSTER SLOTS from any node it
// can reach), sends each command to the master of CRC16(key) mod 16384, follows MOVED (and
// updates the map) and ASK (ASKING, once), and refreshes the map when a node stops answering.
// A node that fails is not tried again for a second (then retried); while it is down, its
// slots are misses and dropped writes — requests recompute, they never fail for the store.
//
// Retention: Redis expires the objects. A write sets the object's time to live to its class's
// (SET PX in a small Lua script that keeps a longer one), a hit raises it to the reader's
// class's (GET, then PEXPIRE NX and PEXPIRE GT, pipelined: Redis 7's GT never shortens);
// neither ever shortens what the object has left. Redis does not know an object's class: a
// hit by a request of a shorter class than the writer's keeps at least what the writer's time
// to live left.
//
// Thread-safe. Reads (contains, get, erase) run on the caller's thread over one set of
// connections (serialised by a lock); put() queues the write (bounded by queue_bytes; a put
// that does not fit is dropped and counted) for the store's writer thread, which has its own
// connections. The destructor finishes the queued writes it can.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kv/retention.h"
#include "kv/store.h"
#include "kv/write_queue.h"

namespace fathom::kv {

struct RedisStoreOptions {
  std::vector<std::string> nodes;            // "host:port" of any cluster nodes (seeds)
  int64_t queue_bytes = int64_t(256) << 20;  // writes waiting at most
  int timeout_ms = 250;                      // connect and command timeout
  RetentionPolicy retention;                 // the classes and their times to live
};

// "h1:p1,h2:p2" -> {"h1:p1", "h2:p2"}; kInvalidArgument for anything else.
Result<std::vector<std::string>> parse_redis_nodes(std::string_view list);

// The Redis Cluster hash slot of a key (CRC16/XMODEM mod 16384, honouring {hash tags}).
int redis_cluster_slot(std::string_view key);

class RedisClusterStore final : public Store {
 public:
  // Connects to a seed and reads the slot map. When no seed answers it opens without them
  // (reads miss with kIoError, writes fail, until one answers); kInvalidArgument when one
  // answers but is not a cluster node.
  static Result<std::unique_ptr<RedisClusterStore>> open(const RedisStoreOptions& options);
  ~RedisClusterStore() override;
  RedisClusterStore(const RedisClusterStore&) = delete;
  RedisClusterStore& operator=(const RedisClusterStore&) = delete;

  bool contains(const StoreKey& key) override;
  // EXISTS pipelined as get_many() pipelines its reads; a key queued to be written is held.
  std::vector<bool> contains_many(std::span<const StoreKey> keys) override;
  Result<std::string> get(const StoreKey& key, RetentionClass cls) override;
  // The reads pipelined: one round trip to each master that owns some of the keys (then one
  // to each node a MOVED or ASK named), not one per key; each hit refreshes its expiry as
  // get() does.
  std::vector<Result<std::string>> get_many(std::span<const StoreKey> keys,
                                            RetentionClass cls) override;
  bool put(const StoreKey& key, std::string value, RetentionClass cls) override;
  void erase(const StoreKey& key) override;
  void flush() override;
  StoreStats stats() const override;
  const char* tier_name() const override { return "redis"; }

  struct Client;  // one thread's connections and slot map

 private:
  explicit RedisClusterStore(RedisStoreOptions options);
  // The writer thread's write: SET PX on the key's master.
  Status write_object(const StoreKey& key, const std::string& value, RetentionClass cls);
  // A read found something other than an object string under key's name: logged and deleted.
  // REQUIRES: read_mu_ not held.
  void erase_damaged(const StoreKey& key, const Status& why);

  const RedisStoreOptions opt_;
  std::mutex read_mu_;
  std::unique_ptr<Client> reader_;         // guarded by read_mu_
  bool reads_failing_ = false;             // guarded by read_mu_
  std::unique_ptr<Client> writer_client_;  // writer thread only
  bool writes_failing_ = false;            // writer thread only
  mutable std::mutex mu_;
  StoreStats stats_;                    // guarded by mu_: reads (the write queue counts writes)
  std::unique_ptr<WriteQueue> writes_;  // last: its thread stops first
};

}  // namespace fathom::kv
