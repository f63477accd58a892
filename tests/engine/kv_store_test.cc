// The KV store under the engine, on the tiny golden checkpoint: blocks written by one engine
// give a second engine on the same directory (a restart) an exact hit; damaged, truncated and
// foreign objects are detected, counted, removed and recomputed, and the answer stays the one
// an engine without a store gives; the model-level checks of a decoded block (token ids, the
// fingerprint, section shapes) each reject what they should; the sizes `fathom inspect` reports
// are the lengths of objects the model actually encodes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "engine/test_util.h"
#include "kv/disk_store.h"
#include "model/kv_object_sizes.h"
#include "model/v41.h"
#include "runner/v41_runner.h"

namespace fathom::engine {
namespace {

using test::load_tiny_model;
using test::tiny_runner;

namespace fs = std::filesystem;

std::vector<int32_t> prompt(int n) {
  std::vector<int32_t> p = {0};
  for (int i = 1; i < n; ++i) p.push_back(int32_t((i * 53 + 7) % 990 + 3));
  return p;
}

struct Answer {
  std::vector<int32_t> tokens;
  int64_t cached = 0;
};

// Submits 8 tokens of `p`, greedy or seeded.
std::shared_ptr<RequestStream> submit(Engine& e, const std::vector<int32_t>& p, bool seeded) {
  GenerationRequest r;
  r.prompt = p;
  r.max_tokens = 8;
  r.ignore_eos = true;
  r.sampling.temperature = seeded ? 1.0f : 0.0f;
  if (seeded) {
    r.seeded = true;
    r.sampling.seed = 42;
  }
  auto s = e.submit(r);
  EXPECT_TRUE(s.is_ok());
  return s.is_ok() ? *s : nullptr;
}

Answer drain(RequestStream& s) {
  Answer a;
  StreamEvent ev;
  while (s.next(&ev, 60000)) {
    a.tokens.insert(a.tokens.end(), ev.tokens.begin(), ev.tokens.end());
    if (ev.finished) {
      a.cached = ev.cached_tokens;
      break;
    }
  }
  return a;
}

Answer ask(Engine& e, const std::vector<int32_t>& p, bool seeded) {
  auto s = submit(e, p, seeded);
  return s ? drain(*s) : Answer{};
}

// A request of a prompt of its own (2 blocks of 16) that generates until cancelled, once it
// runs: with max_running 1, what is submitted after it queues.
std::shared_ptr<RequestStream> keep_busy(Engine& e) {
  GenerationRequest busy;
  busy.prompt = std::vector<int32_t>(40, 7);
  busy.max_tokens = e.context_length() - 64;
  busy.ignore_eos = true;
  auto running = e.submit(busy);
  EXPECT_TRUE(running.is_ok());
  if (!running.is_ok()) return nullptr;
  StreamEvent ev;
  EXPECT_TRUE((*running)->next(&ev, 60000));
  EXPECT_FALSE(ev.finished);
  return *running;
}

EngineOptions options(kv::Store* store) {
  EngineOptions o;
  o.prefix_block = 16;  // the tiny model's window; several blocks in a short prompt
  o.store = store;
  return o;
}

class EngineKvStore : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("fathom_engine_kv_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    // The truth: an engine with no prefix cache and no store.
    EngineOptions o;
    o.prefix_cache = false;
    Engine cold(tiny_runner(), o, -1);
    greedy_ = ask(cold, p_, false).tokens;
    seeded_ = ask(cold, p_, true).tokens;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::unique_ptr<kv::DiskStore> open() {
    kv::DiskStoreOptions o;
    o.dir = dir_.string();
    auto s = kv::DiskStore::open(o);
    EXPECT_TRUE(s.is_ok()) << s.status().to_string();
    return std::move(*s);
  }
  // One engine's life over the directory: it answers both requests and is shut down.
  void first_life() {
    auto store = open();
    Engine e(tiny_runner(), options(store.get()), -1);
    EXPECT_EQ(ask(e, p_, false).tokens, greedy_);
    e.shutdown();
    store->flush();
    EXPECT_GT(store->stats().writes, 0);
  }
  std::vector<fs::path> files() const {
    std::vector<fs::path> out;
    for (const auto& f : fs::recursive_directory_iterator(dir_))
      if (f.path().extension() == ".fkv") out.push_back(f.path());
    return out;
  }
  // Leaves the store holding p_'s chain extended to 8 blocks, with a window side object only at
  // block 4 (the one at 8 removed); sets longer_ to that chain extended to 10 full blocks (170
  // tokens) and returns its answer from an engine without cache or store.
  std::vector<int32_t> chain_without_its_last_window() {
    first_life();  // p_: blocks 1-4 and a window object at block 4
    std::vector<int32_t> b8 = p_;
    for (int i = 0; i < 60; ++i) b8.push_back(int32_t(200 + i));  // 130 tokens: blocks 5-8 too
    longer_ = b8;
    for (int i = 0; i < 40; ++i) longer_.push_back(int32_t(300 + i));
    const kv::StoreKey window8 =
        kv::store_key(tiny_runner().fingerprint(), kv::prefix_block_hashes(b8, 16, 0)[7],
                      kv::ObjectKind::kWindow);
    {
      auto store = open();
      Engine e(tiny_runner(), options(store.get()), -1);
      ask(e, b8, false);
      e.shutdown();
      store->flush();
      EXPECT_TRUE(store->contains(window8));
      store->erase(window8);
    }
    EngineOptions o;
    o.prefix_cache = false;
    Engine cold(tiny_runner(), o, -1);
    return ask(cold, longer_, false).tokens;
  }
  fs::path dir_;
  std::vector<int32_t> p_ = prompt(70), greedy_, seeded_, longer_;
};

TEST_F(EngineKvStore, ARestartHitsTheStoreAndIsExact) {
  first_life();
  auto store = open();
  Engine e(tiny_runner(), options(store.get()), -1);
  const Answer g = ask(e, p_, false);
  EXPECT_EQ(g.tokens, greedy_);
  EXPECT_EQ(g.cached, 64);  // 4 blocks of 16; the last token always runs
  EXPECT_EQ(e.stats().store_hit_blocks, 4);
  EXPECT_EQ(e.stats().store_corrupt, 0);
  // Seeded sampling: the same draws as the cold engine's.
  const Answer s = ask(e, p_, true);
  EXPECT_EQ(s.tokens, seeded_);
  EXPECT_EQ(s.cached, 64);
}

// A Store double over a real one that records which thread read each key, and how often,
// and counts the questions asked (a contains() or a contains_many(): one round trip to each
// node on Redis).
class RecordingStore final : public kv::Store {
 public:
  explicit RecordingStore(kv::Store* inner) : inner_(inner) {}
  bool contains(const kv::StoreKey& key) override {
    ask();
    return inner_->contains(key);
  }
  std::vector<bool> contains_many(std::span<const kv::StoreKey> keys) override {
    ask();
    return inner_->contains_many(keys);
  }
  // The questions asked, and the thread that asked each.
  std::vector<std::thread::id> questions() {
    std::lock_guard<std::mutex> lock(mu_);
    return questions_;
  }
  Result<std::string> get(const kv::StoreKey& key, kv::RetentionClass cls) override {
    note(key);
    return inner_->get(key, cls);
  }
  std::vector<Result<std::string>> get_many(std::span<const kv::StoreKey> keys,
                                            kv::RetentionClass cls) override {
    for (const auto& k : keys) note(k);
    return inner_->get_many(keys, cls);
  }
  bool put(const kv::StoreKey& key, std::string value, kv::RetentionClass cls) override {
    return inner_->put(key, std::move(value), cls);
  }
  void erase(const kv::StoreKey& key) override { inner_->erase(key); }
  void flush() override { inner_->flush(); }
  kv::StoreStats stats() const override { return inner_->stats(); }
  const char* tier_name() const override { return "recording"; }

  // Waits until every key in `keys` has been read (false after a minute: the test fails).
  bool wait_read(const std::vector<kv::StoreKey>& keys) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::minutes(1), [&] {
      for (const auto& k : keys)
        if (!reads_.count(k.hex())) return false;
      return true;
    });
  }
  std::vector<std::thread::id> readers(const kv::StoreKey& key) {
    std::lock_guard<std::mutex> lock(mu_);
    return reads_[key.hex()];
  }

 private:
  void note(const kv::StoreKey& key) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      reads_[key.hex()].push_back(std::this_thread::get_id());
    }
    cv_.notify_all();
  }
  void ask() {
    std::lock_guard<std::mutex> lock(mu_);
    questions_.push_back(std::this_thread::get_id());
  }
  kv::Store* const inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::vector<std::thread::id>> reads_;  // guarded by mu_
  std::vector<std::thread::id> questions_;                     // guarded by mu_
};

// Prefetch: a request queued behind a running one (max_running 1) has its prompt blocks and the
// window side object where it resumes read from the store while it waits, and its admission
// uses those bytes (no second read of them) with the answer of an engine without cache or
// store.
TEST_F(EngineKvStore, AQueuedRequestsBlocksAreReadWhileItWaits) {
  first_life();
  auto disk = open();
  RecordingStore store(disk.get());
  EngineOptions o = options(&store);
  o.max_running = 1;
  Engine e(tiny_runner(), o, -1);
  auto running = keep_busy(e);
  ASSERT_TRUE(running);

  // p_'s resumable blocks: 4 of 16 (the last token always runs).
  const std::vector<uint64_t> hashes = kv::prefix_block_hashes(p_, 16, 0);
  std::vector<kv::StoreKey> keys;
  for (int b = 0; b < 4; ++b)
    keys.push_back(
        kv::store_key(tiny_runner().fingerprint(), hashes[size_t(b)], kv::ObjectKind::kBlock));
  auto queued = submit(e, p_, false);
  ASSERT_TRUE(queued);
  const kv::StoreKey window =
      kv::store_key(tiny_runner().fingerprint(), hashes[3], kv::ObjectKind::kWindow);
  ASSERT_TRUE(store.contains(window));
  ASSERT_TRUE(store.wait_read(keys));
  ASSERT_TRUE(store.wait_read({window}));
  // Read while it waits: the other request still runs, and this one is not admitted.
  EXPECT_EQ(e.stats().running, 1);
  EXPECT_EQ(e.stats().waiting, 1);
  EXPECT_EQ(e.stats().store_hit_blocks, 0);
  running->cancel();

  const Answer a = drain(*queued);
  EXPECT_EQ(a.tokens, greedy_);
  EXPECT_EQ(a.cached, 64);
  EXPECT_EQ(e.stats().store_hit_blocks, 4);
  EXPECT_EQ(e.stats().store_prefetched_blocks, 4);
  EXPECT_EQ(e.stats().store_prefetched_windows, 1);
  // Each object was read once, all by the one thread that read them before the admission.
  const std::thread::id prefetcher = store.readers(keys[0]).at(0);
  EXPECT_NE(prefetcher, std::this_thread::get_id());
  keys.push_back(window);
  for (const auto& k : keys)
    EXPECT_EQ(store.readers(k), std::vector<std::thread::id>{prefetcher}) << k.hex();
}

TEST_F(EngineKvStore, ALongerPromptResumesFromTheLastBlockOfAnEarlierOne) {
  first_life();
  std::vector<int32_t> longer = p_;
  for (int i = 0; i < 40; ++i) longer.push_back(int32_t(100 + i));
  EngineOptions o;
  o.prefix_cache = false;
  Engine cold(tiny_runner(), o, -1);
  const std::vector<int32_t> want = ask(cold, longer, false).tokens;
  auto store = open();
  Engine e(tiny_runner(), options(store.get()), -1);
  const Answer a = ask(e, longer, false);
  EXPECT_EQ(a.tokens, want);
  EXPECT_EQ(a.cached, 64);  // the earlier prompt's 4 full blocks
}

// A prompt extending a chain of 8 stored blocks whose only window side object is at block 4
// resumes there with the answer of an engine without cache or store, and its admission and
// prefill ask the store two questions (the deepest window alone, then the rest in one batch)
// where they asked one per block: each is a round trip on Redis, on the engine's executor.
// Blocks 5-8, recomputed, were just read (held); blocks 9-10 and the window at 10 come after
// the first miss: written unasked.
TEST_F(EngineKvStore, AResumeAsksTheStoreAFixedNumberOfQuestions) {
  const std::vector<int32_t> want = chain_without_its_last_window();
  auto disk = open();
  RecordingStore store(disk.get());
  Engine e(tiny_runner(), options(&store), -1);
  const Answer a = ask(e, longer_, false);
  EXPECT_EQ(a.tokens, want);
  EXPECT_EQ(a.cached, 64);  // blocks 5-8 were read but have no window object to resume from
  EXPECT_EQ(e.stats().store_hit_blocks, 4);
  EXPECT_EQ(store.questions().size(), 2u);
  e.shutdown();
  disk->flush();
  const std::vector<uint64_t> h = kv::prefix_block_hashes(longer_, 16, 0);
  for (int b = 9; b <= 10; ++b)
    EXPECT_TRUE(disk->contains(
        kv::store_key(tiny_runner().fingerprint(), h[size_t(b - 1)], kv::ObjectKind::kBlock)))
        << b;
}

// The same prompt queued behind a running request: the prefetch thread asks where the window
// side object is while it waits, and the executor asks the store nothing at all.
TEST_F(EngineKvStore, AQueuedResumeAsksTheStoreNothingOnTheExecutor) {
  const std::vector<int32_t> want = chain_without_its_last_window();
  auto disk = open();
  RecordingStore store(disk.get());
  EngineOptions o = options(&store);
  o.max_running = 1;
  Engine e(tiny_runner(), o, -1);
  auto running = keep_busy(e);  // its 2 blocks are missed: written unasked
  ASSERT_TRUE(running);
  auto queued = submit(e, longer_, false);
  ASSERT_TRUE(queued);
  const std::vector<uint64_t> h = kv::prefix_block_hashes(longer_, 16, 0);
  const kv::StoreKey window4 =
      kv::store_key(tiny_runner().fingerprint(), h[3], kv::ObjectKind::kWindow);
  ASSERT_TRUE(store.wait_read({window4}));
  EXPECT_EQ(e.stats().waiting, 1);
  running->cancel();
  const Answer a = drain(*queued);
  EXPECT_EQ(a.tokens, want);
  EXPECT_EQ(a.cached, 64);
  EXPECT_EQ(e.stats().store_prefetched_windows, 1);
  const std::thread::id prefetcher = store.readers(window4).at(0);
  const std::vector<std::thread::id> asked = store.questions();
  EXPECT_EQ(asked.size(), 2u);
  for (const std::thread::id& who : asked) EXPECT_EQ(who, prefetcher);
}

TEST_F(EngineKvStore, DamagedObjectsAreCountedRemovedAndRecomputed) {
  first_life();
  const std::vector<fs::path> all = files();
  ASSERT_GE(all.size(), 5u);  // 4 blocks and at least one window object
  for (size_t i = 0; i < all.size(); ++i) {
    if (i % 2 == 0) {
      std::fstream f(all[i], std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(std::streamoff(fs::file_size(all[i]) / 2));
      f.put('\x5a');
      f.put('\xa5');
    } else {
      fs::resize_file(all[i], fs::file_size(all[i]) - 3);
    }
  }
  auto store = open();
  Engine e(tiny_runner(), options(store.get()), -1);
  const Answer g = ask(e, p_, false);
  EXPECT_EQ(g.tokens, greedy_);
  EXPECT_GE(e.stats().store_corrupt, 1);
  EXPECT_EQ(ask(e, p_, true).tokens, seeded_);
  // Each damaged object read was removed; the recomputed blocks were written again.
  e.shutdown();
  store->flush();
  EXPECT_GE(store->stats().erased, 1);
}

// Every block object of a chain damaged: the first miss sees only the first (the read stops
// there), yet it heals them all, as the blocks it computes from that one on are written
// without asking whether the store holds them (it said it did, and kept the damaged ones:
// one block healed per miss).
TEST_F(EngineKvStore, OneMissHealsAWholeDamagedChain) {
  first_life();
  int damaged = 0;
  for (const fs::path& f : files()) {
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(10);
    if (io.get() != int(kv::ObjectKind::kBlock)) continue;  // window objects stay good
    io.seekp(std::streamoff(fs::file_size(f) - 1));
    io.put('\x33');
    ++damaged;
  }
  ASSERT_EQ(damaged, 4);
  {
    auto store = open();
    Engine e(tiny_runner(), options(store.get()), -1);
    EXPECT_EQ(ask(e, p_, false).tokens, greedy_);
    EXPECT_EQ(e.stats().store_corrupt, 1);
    e.shutdown();
    store->flush();
  }
  auto store = open();
  Engine e(tiny_runner(), options(store.get()), -1);
  const Answer g = ask(e, p_, false);
  EXPECT_EQ(g.tokens, greedy_);
  EXPECT_EQ(g.cached, 64);
  EXPECT_EQ(e.stats().store_corrupt, 0);
}

TEST_F(EngineKvStore, AnotherModelsBlocksAreNeverUsed) {
  // The same checkpoint under strict numerics computes other KV: another fingerprint.
  std::unique_ptr<model::V41Model> strict = load_tiny_model(model::Numerics::kStrict);
  {
    runner::V41Runner strict_runner(*strict);
    ASSERT_FALSE(strict_runner.fingerprint() == tiny_runner().fingerprint());
    auto store = open();
    Engine e(strict_runner, options(store.get()), -1);
    ask(e, p_, false);
  }
  // Copy every object to the name this model would look it up under: a foreign block in
  // the right place.
  auto store = open();
  ASSERT_FALSE(files().empty());
  const std::vector<uint64_t> hashes = kv::prefix_block_hashes(p_, 16, 0);
  for (size_t b = 0; b < 4; ++b) {
    for (auto kind : {kv::ObjectKind::kBlock, kv::ObjectKind::kWindow}) {
      const kv::StoreKey theirs = kv::store_key(strict->fingerprint(), hashes[b], kind);
      const kv::StoreKey ours = kv::store_key(tiny_runner().fingerprint(), hashes[b], kind);
      auto bytes = store->get(theirs, kv::kDefaultRetention);
      if (bytes.is_ok()) store->put(ours, *bytes, kv::kDefaultRetention);
    }
  }
  store->flush();
  Engine e(tiny_runner(), options(store.get()), -1);
  const Answer g = ask(e, p_, false);
  EXPECT_EQ(g.tokens, greedy_);
  EXPECT_EQ(g.cached, 0);
  EXPECT_GE(e.stats().store_corrupt, 1);
}

TEST_F(EngineKvStore, BoundedReplayHitsFromTheStoreAsFromTheCache) {
  // With swa_bounded_replay no window objects exist: a hit replays the last window, an
  // approximation — the same one from the store as from the in-process cache.
  EngineOptions o = options(nullptr);
  o.swa_bounded_replay = true;
  std::vector<int32_t> warm_l1;
  {
    auto store = open();
    o.store = store.get();
    Engine e(tiny_runner(), o, -1);
    ask(e, p_, false);
    const Answer warm = ask(e, p_, false);
    EXPECT_GT(warm.cached, 0);
    warm_l1 = warm.tokens;
  }
  auto store = open();
  o.store = store.get();
  Engine e(tiny_runner(), o, -1);
  const Answer a = ask(e, p_, false);
  EXPECT_GT(a.cached, 0);
  EXPECT_EQ(a.tokens, warm_l1);
  EXPECT_GT(e.stats().store_hit_blocks, 0);
}

// The model-level checks of a decoded block, object by object.
TEST(KvStoreObjects, TheModelRejectsWrongTokensShapesAndWindows) {
  const ModelRunner& r = tiny_runner();
  kv::PagePool pool(r.page_bytes(16 / r.block_alignment()), 0);
  auto seq = r.new_sequence(&pool);
  const std::vector<int32_t> p = prompt(32);
  ASSERT_TRUE(r.forward(*seq, std::span(p).first(16), nullptr).is_ok());
  auto block = r.export_block(*seq, 16, true);
  ASSERT_TRUE(block.is_ok()) << block.status().to_string();
  kv::ObjectHeader h;
  h.block_tokens = 16;
  h.model = r.fingerprint();
  h.key = 77;
  h.index = 1;
  const std::span<const int32_t> ids = std::span(p).first(16);
  const std::string bytes = r.encode_block(**block, h, ids);
  auto back = r.decode_block(bytes, h, ids, &pool);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_FALSE((*back)->has_side_object());
  EXPECT_GT((*back)->bytes(), 0);
  // Other ids under the same key: a hash collision is caught.
  std::vector<int32_t> other(ids.begin(), ids.end());
  other[5] += 1;
  auto wrong = r.decode_block(bytes, h, other, &pool);
  ASSERT_FALSE(wrong.is_ok());
  EXPECT_EQ(kv::fault_of(wrong.status()), kv::BlockFault::kWrongTokens);
  // A window object where a block is expected, and the reverse.
  kv::ObjectHeader wh = h;
  wh.kind = kv::ObjectKind::kWindow;
  auto window = r.encode_window(**block, wh);
  ASSERT_TRUE(window.is_ok());
  EXPECT_EQ(kv::fault_of(r.decode_block(*window, h, ids, &pool).status()),
            kv::BlockFault::kWrongKind);
  ASSERT_TRUE(r.decode_window(*window, wh, &pool, **back).is_ok());
  EXPECT_TRUE((*back)->has_side_object());
  // A block object with a section missing (well-formed envelope, wrong contents).
  kv::ObjectWriter w;
  w.add(0x01, 16, ids.data(), ids.size_bytes());
  const int32_t published = -1;
  w.add(0x02, 1, &published, 4);
  auto partial = r.decode_block(w.finish(h), h, ids, &pool);
  ASSERT_FALSE(partial.is_ok());
  EXPECT_EQ(kv::fault_of(partial.status()), kv::BlockFault::kBadSection);
  // A window object of another boundary (its state says position 16, the header block 2).
  kv::ObjectHeader wh2 = wh;
  wh2.index = 2;
  auto moved = r.encode_window(**block, wh2);
  ASSERT_TRUE(moved.is_ok());
  auto fresh = r.decode_block(bytes, h, ids, &pool);
  ASSERT_TRUE(fresh.is_ok());
  EXPECT_EQ(kv::fault_of(r.decode_window(*moved, wh2, &pool, **fresh)),
            kv::BlockFault::kBadSection);
  EXPECT_FALSE((*fresh)->has_side_object());
}

// model::kv_store_sizes() (what `fathom inspect` prints) against real objects: a 128-token
// block and its window side object encoded from a prefilled sequence of the tiny checkpoint,
// with the config read from the checkpoint's own file.
TEST(KvStoreObjects, InspectSizesAreTheLengthsOfEncodedObjects) {
  auto cfg = model::load_model_config_dir(std::string(FATHOM_TEST_DATA) + "/model/v41-tiny");
  ASSERT_TRUE(cfg.is_ok()) << cfg.status().to_string();
  const model::KvStoreSizes z = model::kv_store_sizes(*cfg, 128);
  const ModelRunner& r = tiny_runner();
  kv::PagePool pool(r.page_bytes(16 / r.block_alignment()), 0);
  auto seq = r.new_sequence(&pool);
  const std::vector<int32_t> p = prompt(256);
  kv::ObjectHeader h;
  h.block_tokens = 128;
  h.model = r.fingerprint();
  h.key = 5;
  h.index = 1;
  kv::ObjectHeader wh = h;
  wh.kind = kv::ObjectKind::kWindow;
  for (int b = 1; b <= 2; ++b) {  // block 1 and a block with a parent
    ASSERT_TRUE(r.forward(*seq, std::span(p).subspan(size_t(b - 1) * 128, 128), nullptr).is_ok());
    auto block = r.export_block(*seq, 128, true);
    ASSERT_TRUE(block.is_ok()) << block.status().to_string();
    h.index = wh.index = uint32_t(b);
    const std::string bytes =
        r.encode_block(**block, h, std::span(p).subspan(size_t(b - 1) * 128, 128));
    EXPECT_EQ(int64_t(bytes.size()), z.block_bytes);
    auto window = r.encode_window(**block, wh);
    ASSERT_TRUE(window.is_ok());
    EXPECT_EQ(int64_t(window->size()), z.window_bytes);
  }
  int64_t sources = 0;
  for (const auto& [layer, bytes] : z.block_source_bytes) sources += bytes;
  // Every byte of a block object is the header, a section header or a section's rows.
  EXPECT_EQ(z.block_bytes,
            int64_t(kv::kObjectHeaderBytes) +
                int64_t(kv::kSectionHeaderBytes) * (2 + int64_t(z.block_source_bytes.size())) +
                128 * 4 + 4 + sources);
}

}  // namespace
}  // namespace fathom::engine
