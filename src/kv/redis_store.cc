#include "kv/redis_store.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <map>
#include <new>

#include "core/log.h"

namespace fathom::kv {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kSlots = 16384;
// A node that fails is left alone this long, doubled for each failure in a row up to
// kMaxNodeBackoff: a node that hangs (SIGSTOPped, a dead host) costs a command timeout per
// try, which a second's backoff made about a quarter of every second on the threads that
// ask (the engine's executor among them).
constexpr auto kNodeBackoff = std::chrono::seconds(1);
constexpr auto kMaxNodeBackoff = std::chrono::seconds(30);

// A reply as hiredis parses it, built by the functions below instead of hiredis's own: a
// string lands in a std::string (one copy out of the reader's buffer) that a read moves into
// its result, where hiredis's reply would be copied a second time (and, for a block-sized
// value, into freshly faulted pages twice).
struct ReplyNode {
  int type = 0;  // REDIS_REPLY_*
  long long integer = 0;
  std::string str;                                  // STRING, STATUS, ERROR
  std::vector<std::unique_ptr<ReplyNode>> element;  // ARRAY
};
using Reply = std::unique_ptr<ReplyNode>;

// hiredis calls these on the thread reading the connection; a null return is its out of
// memory error.
void* attach(const redisReadTask* task, std::unique_ptr<ReplyNode> n) {
  if (task->parent != nullptr) {
    auto* parent = static_cast<ReplyNode*>(task->parent->obj);
    return (parent->element[size_t(task->idx)] = std::move(n)).get();
  }
  return n.release();
}
void* reply_string(const redisReadTask* task, char* str, size_t len) {
  try {
    auto n = std::make_unique<ReplyNode>();
    n->type = task->type;
    n->str.assign(str, len);
    return attach(task, std::move(n));
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* reply_array(const redisReadTask* task, int elements) {
  try {
    auto n = std::make_unique<ReplyNode>();
    n->type = REDIS_REPLY_ARRAY;
    n->element.resize(size_t(std::max(elements, 0)));
    return attach(task, std::move(n));
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* reply_integer(const redisReadTask* task, long long value) {
  try {
    auto n = std::make_unique<ReplyNode>();
    n->type = REDIS_REPLY_INTEGER;
    n->integer = value;
    return attach(task, std::move(n));
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* reply_nil(const redisReadTask* task) {
  try {
    auto n = std::make_unique<ReplyNode>();
    n->type = REDIS_REPLY_NIL;
    return attach(task, std::move(n));
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
// A root reply (its elements go with it).
void reply_free(void* reply) { delete static_cast<ReplyNode*>(reply); }
redisReplyObjectFunctions kReplyFunctions = {reply_string, reply_array, reply_integer, reply_nil,
                                             reply_free};
Reply take_reply(void* raw) { return Reply(static_cast<ReplyNode*>(raw)); }

std::string object_key(const StoreKey& k) { return "fkv:" + k.hex(); }

// SET KEYS[1] ARGV[1] PX ARGV[2], keeping a longer time to live the key has left (a re-put by
// a shorter class never shortens it). Replies 1.
constexpr const char* kPutScript =
    "local ms = tonumber(ARGV[2]) "
    "local left = redis.call('PTTL', KEYS[1]) "
    "if left > ms then ms = left end "
    "redis.call('SET', KEYS[1], ARGV[1], 'PX', ms) "
    "return 1";

bool split_host_port(std::string_view node, std::string* host, int* port) {
  const size_t colon = node.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == node.size()) return false;
  int p = 0;
  for (char ch : node.substr(colon + 1)) {
    if (ch < '0' || ch > '9') return false;
    p = p * 10 + (ch - '0');
    if (p > 65535) return false;
  }
  if (p == 0) return false;
  *host = std::string(node.substr(0, colon));
  *port = p;
  return true;
}

uint16_t crc16(std::string_view s) {
  uint16_t crc = 0;
  for (unsigned char ch : s) {
    crc ^= uint16_t(ch) << 8;
    for (int i = 0; i < 8; ++i)
      crc = (crc & 0x8000) ? uint16_t((crc << 1) ^ 0x1021) : uint16_t(crc << 1);
  }
  return crc;
}

}  // namespace

Result<std::vector<std::string>> parse_redis_nodes(std::string_view list) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= list.size()) {
    size_t comma = list.find(',', at);
    if (comma == std::string_view::npos) comma = list.size();
    const std::string_view node = list.substr(at, comma - at);
    std::string host;
    int port = 0;
    if (!split_host_port(node, &host, &port))
      return invalid_argument("'" + std::string(node) + "' is not HOST:PORT");
    out.emplace_back(node);
    at = comma + 1;
  }
  if (out.empty()) return invalid_argument("no Redis nodes given");
  return out;
}

int redis_cluster_slot(std::string_view key) {
  const size_t open = key.find('{');
  if (open != std::string_view::npos) {
    const size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1)
      key = key.substr(open + 1, close - open - 1);
  }
  return crc16(key) % kSlots;
}

// One thread's view of the cluster: connections by node, the slot map, nodes in backoff.
struct RedisClusterStore::Client {
  explicit Client(const RedisStoreOptions& o) : opt(o), known(o.nodes) { owner.fill(-1); }
  ~Client() {
    for (auto& [n, c] : conns) redisFree(c);
  }

  int node_index(const std::string& node) {
    for (size_t i = 0; i < known.size(); ++i)
      if (known[i] == node) return int(i);
    known.push_back(node);
    return int(known.size() - 1);
  }

  redisContext* conn(const std::string& node) {
    auto it = conns.find(node);
    if (it != conns.end()) return it->second;
    auto d = down_until.find(node);
    if (d != down_until.end() && Clock::now() < d->second) return nullptr;
    std::string host;
    int port = 0;
    if (!split_host_port(node, &host, &port)) return nullptr;
    timeval tv{opt.timeout_ms / 1000, (opt.timeout_ms % 1000) * 1000};
    redisContext* c = redisConnectWithTimeout(host.c_str(), port, tv);
    if (c == nullptr || c->err) {
      if (c) redisFree(c);
      back_off(node);
      return nullptr;
    }
    redisSetTimeout(c, tv);
    c->reader->fn = &kReplyFunctions;  // before any reply: every one on it is a ReplyNode
    conns[node] = c;
    return c;
  }

  void drop(const std::string& node) {
    auto it = conns.find(node);
    if (it != conns.end()) {
      redisFree(it->second);
      conns.erase(it);
    }
    back_off(node);
  }

  // The node failed again: left alone kNodeBackoff, doubled for each failure since it last
  // answered, at most kMaxNodeBackoff.
  void back_off(const std::string& node) {
    const int n = std::min(failures[node]++, 5);
    down_until[node] =
        Clock::now() + std::min<Clock::duration>(kNodeBackoff * (1 << n), kMaxNodeBackoff);
  }
  // The node answered: its next failure backs off kNodeBackoff again.
  void answered(const std::string& node) {
    if (!failures.empty()) failures.erase(node);
  }

  // Reads CLUSTER SLOTS from the first node that answers; false when none does.
  bool refresh() {
    const std::vector<std::string> candidates = known;
    for (const std::string& node : candidates) {
      redisContext* c = conn(node);
      if (c == nullptr) continue;
      round_trips.fetch_add(1, std::memory_order_relaxed);
      Reply r = take_reply(redisCommand(c, "CLUSTER SLOTS"));
      if (!r) {
        drop(node);
        continue;
      }
      answered(node);
      if (r->type != REDIS_REPLY_ARRAY) {
        // Not a cluster node at all (a loading or busy one is an outage: it will answer).
        const bool no_cluster = r->type == REDIS_REPLY_ERROR &&
                                (r->str.find("cluster support disabled") != std::string::npos ||
                                 r->str.rfind("ERR unknown command", 0) == 0);
        if (no_cluster) refused = node + " answered CLUSTER SLOTS with: " + r->str;
        continue;
      }
      refused.clear();
      owner.fill(-1);
      for (const auto& e : r->element) {
        if (e->type != REDIS_REPLY_ARRAY || e->element.size() < 3) continue;
        const ReplyNode* m = e->element[2].get();
        if (m->type != REDIS_REPLY_ARRAY || m->element.size() < 2 ||
            m->element[0]->type != REDIS_REPLY_STRING)
          continue;
        const std::string addr = m->element[0]->str + ":" + std::to_string(m->element[1]->integer);
        const int idx = node_index(addr);
        for (long long s = e->element[0]->integer; s <= e->element[1]->integer && s < kSlots; ++s)
          if (s >= 0) owner[size_t(s)] = idx;
      }
      return true;
    }
    return false;
  }

  std::string owner_of(int slot) {
    if (owner[size_t(slot)] < 0) refresh();
    const int i = owner[size_t(slot)];
    return i >= 0 ? known[size_t(i)] : (known.empty() ? std::string() : known.front());
  }

  // Runs a command on `key`'s node, following MOVED and ASK.
  Result<Reply> run(std::string_view key, const std::vector<std::string_view>& args) {
    const int slot = redis_cluster_slot(key);
    std::string node = owner_of(slot);
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (std::string_view a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    bool asking = false, refreshed = false;
    for (int attempt = 0; attempt < 5; ++attempt) {
      redisContext* c = conn(node);
      if (c == nullptr) {
        // Down (or backing off): one refresh, in case the slot moved elsewhere.
        if (refreshed || !refresh()) return io_error("redis node " + node + " is unreachable");
        refreshed = true;
        const std::string next = owner_of(slot);
        if (next == node) return io_error("redis node " + node + " is unreachable");
        node = next;
        continue;
      }
      round_trips.fetch_add(asking ? 2 : 1, std::memory_order_relaxed);
      if (asking) {
        Reply a = take_reply(redisCommand(c, "ASKING"));
        if (!a) {
          drop(node);
          continue;
        }
      }
      Reply r = take_reply(redisCommandArgv(c, int(argv.size()), argv.data(), lens.data()));
      if (!r) {
        drop(node);
        asking = false;
        continue;
      }
      answered(node);
      if (r->type != REDIS_REPLY_ERROR) return r;
      const std::string& err = r->str;
      const bool moved = err.rfind("MOVED ", 0) == 0, ask = err.rfind("ASK ", 0) == 0;
      if (!moved && !ask) return io_error("redis: " + err);
      const size_t sp = err.rfind(' ');
      node = err.substr(sp + 1);
      if (moved) owner[size_t(slot)] = node_index(node);
      asking = ask;
      redirects.fetch_add(1, std::memory_order_relaxed);
    }
    return io_error("redis: too many redirections for slot " + std::to_string(slot));
  }

  // `commands` on every key, pipelined: one round trip to each node that owns some of the keys,
  // then one more to each node a MOVED or ASK reply named (ASKING sent before each of the key's
  // commands there). Every node's commands are sent before any reply is read, so the nodes
  // answer side by side: a round costs the slowest node's time, not the sum of theirs. Each
  // command is an argv whose second word is the key (left empty here). Per key: its first
  // command's reply, or the Status of a failure.
  std::vector<Result<Reply>> pipelined(const std::vector<std::string>& keys,
                                       const std::vector<std::vector<std::string_view>>& commands) {
    const int per_key = int(commands.size());
    std::vector<Result<Reply>> out;
    out.reserve(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) out.emplace_back(io_error("unset"));
    std::vector<std::string> target(keys.size());  // the node an ASK sent the key to
    std::vector<bool> asking(keys.size(), false);
    std::vector<size_t> left(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) left[i] = i;
    bool refreshed = false;
    for (int attempt = 0; attempt < 5 && !left.empty(); ++attempt) {
      std::map<std::string, std::vector<size_t>> by_node;
      for (size_t i : left)
        by_node[asking[i] ? target[i] : owner_of(redis_cluster_slot(keys[i]))].push_back(i);
      std::vector<size_t> again;
      bool unreachable = false;
      struct Sent {
        const std::string* node;
        redisContext* c;
        const std::vector<size_t>* idx;
        bool broken;  // the send failed
      };
      std::vector<Sent> sent;
      for (const auto& [node, idx] : by_node) {
        redisContext* c = conn(node);
        if (c == nullptr) {
          // Down (or backing off): after one refresh of the map, in case the slots moved.
          for (size_t i : idx) {
            out[i] = io_error("redis node " + node + " is unreachable");
            asking[i] = false;
            if (!refreshed) again.push_back(i);
          }
          unreachable = true;
          continue;
        }
        for (size_t i : idx) {
          for (const auto& command : commands) {
            std::array<const char*, 8> argv{};
            std::array<size_t, 8> lens{};
            for (size_t w = 0; w < command.size() && w < argv.size(); ++w) {
              const std::string_view word = w == 1 ? std::string_view(keys[i]) : command[w];
              argv[w] = word.data();
              lens[w] = word.size();
            }
            if (asking[i]) redisAppendCommand(c, "ASKING");
            redisAppendCommandArgv(c, int(std::min(command.size(), argv.size())), argv.data(),
                                   lens.data());
          }
        }
        round_trips.fetch_add(1, std::memory_order_relaxed);
        int done = 0;
        bool broken = false;
        while (!done && !broken) broken = redisBufferWrite(c, &done) != REDIS_OK;
        sent.push_back({&node, c, &idx, broken});
      }
      for (const Sent& to : sent) {
        const std::string& node = *to.node;
        redisContext* c = to.c;
        bool broken = to.broken;
        for (size_t i : *to.idx) {
          // The first command's reply; the others' (a GET's PEXPIREs: 0 or 1, or the GET's
          // redirect again) are dropped.
          Reply r;
          for (int cmd = 0; cmd < per_key * (asking[i] ? 2 : 1) && !broken; ++cmd) {
            void* raw = nullptr;
            broken = redisGetReply(c, &raw) != REDIS_OK;
            Reply one = take_reply(raw);
            if (!broken && cmd == (asking[i] ? 1 : 0)) r = std::move(one);
          }
          asking[i] = false;
          if (broken) {
            out[i] = io_error("redis node " + node + " stopped answering");
            again.push_back(i);
            continue;
          }
          if (r->type != REDIS_REPLY_ERROR) {
            out[i] = std::move(r);
            continue;
          }
          const std::string& err = r->str;
          const bool moved = err.rfind("MOVED ", 0) == 0, ask = err.rfind("ASK ", 0) == 0;
          if (!moved && !ask) {
            // Another type under an object's key (anyone may write there): damaged.
            out[i] = err.rfind("WRONGTYPE", 0) == 0 ? corrupt("redis: " + keys[i] + ": " + err)
                                                    : io_error("redis: " + err);
            continue;
          }
          const std::string next = err.substr(err.rfind(' ') + 1);
          if (moved) owner[size_t(redis_cluster_slot(keys[i]))] = node_index(next);
          asking[i] = ask;
          target[i] = next;
          out[i] = io_error("redis: too many redirections for " + keys[i]);
          redirects.fetch_add(1, std::memory_order_relaxed);
          again.push_back(i);
        }
        if (broken)
          drop(node);  // the connection's replies are out of step: start afresh
        else
          answered(node);
      }
      if (unreachable && !refreshed) {
        refresh();
        refreshed = true;
      }
      left = std::move(again);
    }
    return out;
  }

  const RedisStoreOptions opt;
  std::vector<std::string> known;
  std::array<int, kSlots> owner;
  std::map<std::string, redisContext*> conns;
  std::map<std::string, Clock::time_point> down_until;
  std::map<std::string, int> failures;  // by node: failures since it last answered
  std::string refused;  // why the last node to answer CLUSTER SLOTS is no cluster node ("")
  std::atomic<int64_t> redirects{0};    // read by stats() from any thread
  std::atomic<int64_t> round_trips{0};  // requests sent and waited for; read by stats()
};

RedisClusterStore::RedisClusterStore(RedisStoreOptions options) : opt_(std::move(options)) {
  for (const auto& c : opt_.retention.classes()) stats_.classes.push_back({c.name});
}

Result<std::unique_ptr<RedisClusterStore>> RedisClusterStore::open(
    const RedisStoreOptions& options) {
  if (options.nodes.empty()) return invalid_argument("no Redis nodes given");
  auto s = std::unique_ptr<RedisClusterStore>(new RedisClusterStore(options));
  s->reader_ = std::make_unique<Client>(options);
  s->writer_client_ = std::make_unique<Client>(options);
  // A node that answers but is no cluster member (cluster support disabled) is a mistake in
  // the flag; no node answering yet is an outage: the store starts without them (misses and
  // failed writes) and finds the cluster when a node answers.
  if (!s->reader_->refresh()) {
    if (!s->reader_->refused.empty())
      return invalid_argument("not a Redis Cluster: " + s->reader_->refused);
    log_warn("kv store: no Redis Cluster node answers yet (" + options.nodes.front() +
             (options.nodes.size() > 1 ? ", ..." : "") +
             "); redis reads miss and writes fail until one does");
  }
  s->writer_client_->refresh();
  s->writes_ = std::make_unique<WriteQueue>(
      options.queue_bytes, [p = s.get()](const StoreKey& k, const std::string& v,
                                         RetentionClass c) { return p->write_object(k, v, c); });
  return s;
}

RedisClusterStore::~RedisClusterStore() = default;

bool RedisClusterStore::contains(const StoreKey& key) {
  return contains_many(std::span<const StoreKey>(&key, 1)).front();
}

std::vector<bool> RedisClusterStore::contains_many(std::span<const StoreKey> keys) {
  std::vector<bool> out(keys.size(), false);
  std::vector<std::string> ks;
  std::vector<size_t> asked;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (writes_->pending(keys[i])) {
      out[i] = true;
      continue;
    }
    ks.push_back(object_key(keys[i]));
    asked.push_back(i);
  }
  if (ks.empty()) return out;
  std::lock_guard<std::mutex> lock(read_mu_);
  const std::vector<Result<Reply>> replies = reader_->pipelined(ks, {{"EXISTS", {}}});
  for (size_t j = 0; j < asked.size(); ++j) {
    const Result<Reply>& r = replies[j];
    out[asked[j]] = r.is_ok() && (*r)->type == REDIS_REPLY_INTEGER && (*r)->integer == 1;
  }
  return out;
}

Result<std::string> RedisClusterStore::get(const StoreKey& key, RetentionClass cls) {
  return std::move(get_many(std::span<const StoreKey>(&key, 1), cls).front());
}

std::vector<Result<std::string>> RedisClusterStore::get_many(std::span<const StoreKey> keys,
                                                             RetentionClass cls) {
  const auto start = std::chrono::steady_clock::now();
  cls = opt_.retention.resolve(cls);
  const std::string ttl = std::to_string(opt_.retention.ttl_ms(cls));
  std::vector<std::string> ks;
  ks.reserve(keys.size());
  for (const StoreKey& k : keys) ks.push_back(object_key(k));
  std::vector<Result<Reply>> replies;
  {
    std::lock_guard<std::mutex> lock(read_mu_);
    // Three plain commands a key: GET, then PEXPIRE NX (a key without a time to live, from
    // before retention, gets the reader's class's) and PEXPIRE GT (a shorter one is raised to
    // it; GT never shortens). Not a script: EVAL copies the value into Lua and back, which
    // cost the read path six times the server time of a GET on a block-sized object.
    replies = reader_->pipelined(
        ks, {{"GET", {}}, {"PEXPIRE", {}, ttl, "NX"}, {"PEXPIRE", {}, ttl, "GT"}});
    const Result<Reply>* failed = nullptr;
    for (const auto& r : replies)
      if (!r.is_ok() && r.status().code() != StatusCode::kCorrupt && failed == nullptr) failed = &r;
    if (failed && !reads_failing_)
      log_warn("kv store: redis reads fail (misses until they work): " +
               failed->status().message());
    if (!failed && reads_failing_ && !replies.empty()) log_warn("kv store: redis reads work again");
    if (!replies.empty()) reads_failing_ = failed != nullptr;
  }
  for (size_t i = 0; i < keys.size(); ++i)
    if (!replies[i].is_ok() && replies[i].status().code() == StatusCode::kCorrupt)
      erase_damaged(keys[i], replies[i].status());
  std::vector<Result<std::string>> out;
  out.reserve(keys.size());
  std::lock_guard<std::mutex> lock(mu_);
  stats_.classes[cls].read_seconds.observe(seconds_since(start));
  for (size_t i = 0; i < keys.size(); ++i) {
    Result<Reply>& r = replies[i];
    if (!r.is_ok() || (*r)->type != REDIS_REPLY_STRING) {
      ++stats_.misses;
      ++stats_.classes[cls].misses;
      out.push_back(r.is_ok() ? Status(not_found("no KV object " + keys[i].hex())) : r.status());
      continue;
    }
    ++stats_.hits;
    ++stats_.classes[cls].hits;
    stats_.bytes_read += int64_t((*r)->str.size());
    out.push_back(std::move((*r)->str));
  }
  return out;
}

bool RedisClusterStore::put(const StoreKey& key, std::string value, RetentionClass cls) {
  return writes_->push(key, std::move(value), opt_.retention.resolve(cls));
}

void RedisClusterStore::erase(const StoreKey& key) {
  const std::string k = object_key(key);
  std::lock_guard<std::mutex> lock(read_mu_);
  auto r = reader_->run(k, {"DEL", k});
  if (r.is_ok() && (*r)->type == REDIS_REPLY_INTEGER && (*r)->integer > 0) {
    std::lock_guard<std::mutex> l2(mu_);
    ++stats_.erased;
  }
}

void RedisClusterStore::erase_damaged(const StoreKey& key, const Status& why) {
  log_warn("kv store: redis object " + key.hex() + " is damaged; removed: " + why.message());
  erase(key);
}

void RedisClusterStore::flush() { writes_->flush(); }

StoreStats RedisClusterStore::stats() const {
  const WriteQueue::Stats w = writes_->stats();
  std::lock_guard<std::mutex> lock(mu_);
  StoreStats s = stats_;
  w.add_to(&s);
  s.redirects = reader_->redirects.load(std::memory_order_relaxed) +
                writer_client_->redirects.load(std::memory_order_relaxed);
  s.round_trips = reader_->round_trips.load(std::memory_order_relaxed);
  return s;
}

Status RedisClusterStore::write_object(const StoreKey& key, const std::string& value,
                                       RetentionClass cls) {
  cls = opt_.retention.resolve(cls);
  const std::string k = object_key(key), ttl = std::to_string(opt_.retention.ttl_ms(cls));
  auto r = writer_client_->run(k, {"EVAL", kPutScript, "1", k, value, ttl});
  Status st = Status::ok();
  if (!r.is_ok())
    st = r.status();
  else if ((*r)->type != REDIS_REPLY_INTEGER)
    st = io_error("redis: unexpected reply to SET");
  if (st.is_ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.classes[cls].bytes_written += int64_t(value.size());
  }
  // One line when writes start failing and one when they work again, not one a block.
  if (!st.is_ok() && !writes_failing_)
    log_warn("kv store: redis writes fail (blocks stay uncached there until they work): " +
             st.message());
  if (st.is_ok() && writes_failing_) log_warn("kv store: redis writes work again");
  writes_failing_ = !st.is_ok();
  return st;
}

}  // namespace fathom::kv
