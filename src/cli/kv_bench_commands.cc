// `fathom bench kvhash` and `fathom bench kvstore`: the KV store's costs in-process, printed as
// one JSON line each (bench/kv_store_throughput.sh sets them beside dd and redis-benchmark).
//   kvhash  — the chained block hash (kv::prefix_block_hashes) and the store key of every
//             block (kv::store_key) over a long random token sequence, in ns per token;
//   kvstore — objects written through a store tier (DiskStore or RedisClusterStore) and read
//             back with get_many() in batches, every object checked, in GB/s.
// Single-threaded drivers (the stores' own writer threads aside).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "kv/disk_store.h"
#include "kv/prefix_cache.h"
#include "kv/redis_store.h"
#include "kv/store.h"

namespace fathom::cli {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct BenchKvHashArgs {
  int64_t tokens = int64_t(1) << 20;
  int64_t block = 128;
  int repeat = 5;
};

int run_bench_kvhash(const BenchKvHashArgs& a) {
  std::mt19937 rng(11);
  std::vector<int32_t> ids(size_t(a.tokens));
  for (auto& t : ids) t = int32_t(rng() % 129280);
  const kv::Fingerprint model{0x1234, 0x5678};
  double best_hash = 1e300, best_key = 1e300;
  uint64_t sink = 0;
  for (int r = 0; r < a.repeat; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    const std::vector<uint64_t> h = kv::prefix_block_hashes(ids, a.block, uint64_t(r));
    best_hash = std::min(best_hash, seconds_since(t0));
    auto t1 = std::chrono::steady_clock::now();
    for (uint64_t x : h) sink ^= kv::store_key(model, x, kv::ObjectKind::kBlock).lo;
    best_key = std::min(best_key, seconds_since(t1));
  }
  const double n = double(a.tokens);
  std::printf(
      "{\"bench\":\"kvhash\",\"tokens\":%lld,\"block_tokens\":%lld,\"repeat\":%d,"
      "\"hash_ns_per_token\":%.3f,\"key_ns_per_token\":%.3f,\"ns_per_token\":%.3f,"
      "\"goal_ns_per_token\":20,\"sink\":%llu}\n",
      (long long)a.tokens, (long long)a.block, a.repeat, best_hash * 1e9 / n, best_key * 1e9 / n,
      (best_hash + best_key) * 1e9 / n, (unsigned long long)(sink & 0xff));
  return 0;
}

struct BenchKvStoreArgs {
  std::string dir, redis;
  int64_t objects = 256;
  int64_t bytes = 819884;  // a V4.1-Flash block object as Fathom stores it (fathom inspect)
  int64_t batch = 16;
  std::string phase = "both";
  int64_t queue_mb = 256;
};

kv::StoreKey bench_key(int64_t i) {
  return kv::store_key(kv::Fingerprint{0xbe4c, 0x57}, uint64_t(i), kv::ObjectKind::kBlock);
}

Result<std::unique_ptr<kv::Store>> open_store(const BenchKvStoreArgs& a) {
  if (!a.dir.empty()) {
    kv::DiskStoreOptions o;
    o.dir = a.dir;
    o.budget_bytes = std::max<int64_t>(a.objects * a.bytes * 2, int64_t(1) << 30);
    o.queue_bytes = a.queue_mb << 20;
    FATHOM_ASSIGN_OR_RETURN(auto s, kv::DiskStore::open(o));
    return std::unique_ptr<kv::Store>(std::move(s));
  }
  kv::RedisStoreOptions o;
  FATHOM_ASSIGN_OR_RETURN(o.nodes, kv::parse_redis_nodes(a.redis));
  o.queue_bytes = a.queue_mb << 20;
  o.timeout_ms = 5000;
  FATHOM_ASSIGN_OR_RETURN(auto s, kv::RedisClusterStore::open(o));
  return std::unique_ptr<kv::Store>(std::move(s));
}

// Object i: random bytes (incompressible) with i in its first 8 bytes, to check reads.
void fill_object(std::string* o, const std::string& random, int64_t i) {
  *o = random;
  std::memcpy(o->data(), &i, std::min<size_t>(8, o->size()));
}

int run_bench_kvstore(const BenchKvStoreArgs& a) {
  if (a.dir.empty() == a.redis.empty()) {
    std::fprintf(stderr, "fathom: give exactly one of --dir DIR or --redis HOST:PORT[,...]\n");
    return 2;
  }
  const char* tier = a.dir.empty() ? "redis" : "disk";
  const double total = double(a.objects) * double(a.bytes);
  auto print = [&](const char* phase, double s, const std::string& extra) {
    std::printf(
        "{\"bench\":\"kvstore\",\"tier\":\"%s\",\"phase\":\"%s\",\"objects\":%lld,"
        "\"object_bytes\":%lld,\"seconds\":%.6f,\"gb_per_s\":%.4f%s}\n",
        tier, phase, (long long)a.objects, (long long)a.bytes, s, total / s / 1e9, extra.c_str());
    std::fflush(stdout);
  };
  if (a.phase == "write" || a.phase == "both") {
    auto store = open_store(a);
    if (!store.is_ok()) {
      std::fprintf(stderr, "fathom: %s\n", store.status().to_string().c_str());
      return 2;
    }
    std::string random(size_t(a.bytes), '\0');
    std::mt19937_64 rng(3);
    for (size_t i = 0; i + 8 <= random.size(); i += 8) {
      const uint64_t v = rng();
      std::memcpy(&random[i], &v, 8);
    }
    int64_t waits = 0;
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < a.objects; ++i) {
      std::string o;
      fill_object(&o, random, i);
      // A full queue drops the put (the store never blocks a caller): wait for it, then again.
      for (int tries = 0; !(*store)->put(bench_key(i), o, kv::kDefaultRetention); ++tries) {
        if (tries == 1) {
          std::fprintf(stderr, "fathom: object %lld of %lld bytes does not fit the queue\n",
                       (long long)i, (long long)a.bytes);
          return 1;
        }
        (*store)->flush();
        ++waits;
      }
    }
    (*store)->flush();
    const double s = seconds_since(t0);
    const kv::StoreStats st = (*store)->stats();
    if (st.write_errors > 0) {
      std::fprintf(stderr, "fathom: %lld writes failed\n", (long long)st.write_errors);
      return 1;
    }
    print("write", s, ",\"queue_waits\":" + std::to_string(waits));
  }
  if (a.phase == "read" || a.phase == "both") {
    auto store = open_store(a);  // reopened: the disk tier rebuilds its index from the files
    if (!store.is_ok()) {
      std::fprintf(stderr, "fathom: %s\n", store.status().to_string().c_str());
      return 2;
    }
    int64_t bad = 0;
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t first = 0; first < a.objects; first += a.batch) {
      std::vector<kv::StoreKey> keys;
      for (int64_t i = first; i < std::min(a.objects, first + a.batch); ++i)
        keys.push_back(bench_key(i));
      std::vector<Result<std::string>> got = (*store)->get_many(keys, kv::kDefaultRetention);
      for (size_t j = 0; j < got.size(); ++j) {
        int64_t id = -1;
        if (got[j].is_ok() && int64_t(got[j]->size()) == a.bytes)
          std::memcpy(&id, got[j]->data(), std::min<size_t>(8, got[j]->size()));
        if (a.bytes >= 8 ? id != first + int64_t(j) : !got[j].is_ok()) ++bad;
      }
    }
    const double s = seconds_since(t0);
    const kv::StoreStats st = (*store)->stats();
    print("read", s,
          ",\"batch\":" + std::to_string(a.batch) + ",\"round_trips\":" +
              std::to_string(st.round_trips) + ",\"bad_objects\":" + std::to_string(bad));
    if (bad > 0) {
      std::fprintf(stderr, "fathom: %lld objects missing or wrong\n", (long long)bad);
      return 1;
    }
  }
  return 0;
}

}  // namespace

// Registers `bench kvhash` and `bench kvstore` under `bench` (bench_commands.cc).
void add_kv_bench_commands(CLI::App* bench, Runner* run) {
  auto h = std::make_shared<BenchKvHashArgs>();
  auto* c = bench->add_subcommand(
      "kvhash", "The KV store's chained block hash and store keys over a long sequence: ns/token");
  c->add_option("--tokens", h->tokens, "Tokens hashed")
      ->check(CLI::Range(int64_t(128), int64_t(1) << 30));
  c->add_option("--block", h->block, "Tokens per block")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  c->add_option("--repeat", h->repeat, "Runs (best is reported)")->check(CLI::Range(1, 1000));
  c->callback([h, run] { *run = [h] { return run_bench_kvhash(*h); }; });

  auto s = std::make_shared<BenchKvStoreArgs>();
  auto* k = bench->add_subcommand(
      "kvstore", "Write objects through a KV store tier, read them back with get_many: GB/s");
  auto* d = k->add_option("--dir", s->dir, "Disk tier directory");
  auto* r = k->add_option("--redis", s->redis, "Redis Cluster nodes HOST:PORT[,HOST:PORT...]");
  d->excludes(r);
  k->add_option("--objects", s->objects, "Objects")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 24));
  k->add_option("--bytes", s->bytes, "Bytes an object")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 30));
  k->add_option("--batch", s->batch, "Keys a get_many (the Redis pipeline depth)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 16));
  k->add_option("--phase", s->phase, "write, read or both")
      ->check(CLI::IsMember({"write", "read", "both"}));
  k->add_option("--queue-mb", s->queue_mb, "The tier's write queue, MiB")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  k->callback([s, run] { *run = [s] { return run_bench_kvstore(*s); }; });
}

}  // namespace fathom::cli
