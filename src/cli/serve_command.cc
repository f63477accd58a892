// `fathom serve [MODEL_DIR]`: the OpenAI/Anthropic-compatible server. Without a model it
// serves the embedded default: the `demo` preset (tiny V4.1 shapes, the full vocabulary),
// generated deterministically on first use into ~/.cache/fathom/models/demo-seed0, with the
// fetched V4.1 tokenizer fixture.
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/stop_signals.h"
#include "engine/engine.h"
#include "kernels/cpu_features.h"
#include "kv/disk_store.h"
#include "kv/memory_store.h"
#include "kv/redis_store.h"
#include "kv/retention.h"
#include "kv/tiered_store.h"
#include "model/draft_vocab.h"
#include "model/kv_object_sizes.h"
#include "model/mkmodel.h"
#include "model/v41.h"
#include "prompt/encoder.h"
#include "runner/v41_runner.h"
#include "serve/pd_routes.h"
#include "serve/server.h"
#include "tokenizer/tokenizer.h"

namespace fathom::cli {
namespace {

struct ServeArgs {
  std::string model, tokenizer, host = "127.0.0.1", numerics = "fast";
  std::vector<std::string> api_keys;             // --api-key, repeatable
  std::vector<std::string> forwarded_allow_ips;  // --forwarded-allow-ips
  std::vector<std::string> api_key_retention;    // --api-key-retention KEY=CLASS, repeatable
  std::string retention = "agent=3d,chat=7d";
  std::vector<std::string> names;  // --served-model-name, repeatable
  int port = 8000, threads = 0, http_threads = 2, max_connections = 4096;
  int64_t kv_budget_mb = 4096, max_tokens = 0, prefix_cache_mb = 1024, decoder_keep = 0;
  double header_timeout = 10, body_timeout = 60, shutdown_timeout = 30, heartbeat = 15;
  int64_t max_step_tokens = 256;
  int64_t max_model_len = 0;  // 0: the model's context length
  int64_t kv_event_ring = 65536;
  bool forced = false, no_prefix_cache = false, swa_bounded_replay = false, no_async = false;
  bool no_grammar_masks_ahead = false, grammar_jump_forward = false;
  std::string speculative = "off", speculative_scheduler = "fixed";
  int64_t speculative_tokens = 0;       // 0: the model's draft block
  int64_t speculative_draft_vocab = 0;  // 0: the whole vocabulary
  bool error_injection = false;
  std::string kv_store_dir, kv_store_redis;
  double kv_store_disk_gb = 10;
  int64_t kv_store_queue_mb = 256;
  // Prefill/decode disaggregation (serve/pd_routes.h).
  std::string role = "both", kv_load_failure = "recompute";
  int64_t pd_stage_mb = 1024;
  double pd_lease_s = 30;
  std::string pd_push_api_key;
  std::vector<std::string> pd_api_keys;  // --pd-api-key, repeatable
  bool pd_test_corrupt_push = false;
  int pd_test_push_delay_ms = 0;
  int64_t pd_push_chunk_bytes = int64_t(kv::kDefaultChunkBytes);
  int pd_test_chunk_delay_ms = 0;
};

std::string cache_dir() {
  if (const char* c = std::getenv("FATHOM_CACHE")) return c;
  const char* h = std::getenv("HOME");
  return std::string(h ? h : ".") + "/.cache/fathom";
}

bool exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

// "; verify ms by rows: a b c" for the prefix draft scheduler's profiled costs.
std::string verify_costs(const std::vector<engine::DraftScheduler::CostPoint>& pass,
                         const std::vector<engine::DraftScheduler::CostPoint>& draft) {
  std::string out;
  char buf[48];
  for (const auto& [points, what] :
       {std::pair{&pass, "; pass ms by rows:"}, std::pair{&draft, "; draft ms by sequences:"}}) {
    if (points->empty()) continue;
    out += what;
    for (const auto& p : *points) {
      std::snprintf(buf, sizeof buf, " %lld:%.2f", static_cast<long long>(p.rows), p.seconds * 1e3);
      out += buf;
    }
  }
  return out;
}

int fail(const Status& s) {
  std::fprintf(stderr, "fathom: %s\n", s.to_string().c_str());
  return 1;
}

// Bad flag values that only run_serve can check: the message, exit 2.
int bad_flag(const std::string& m) {
  std::fprintf(stderr, "fathom serve: %s\n", m.c_str());
  return 2;
}

int run_serve(const ServeArgs& a) {
  auto role = serve::parse_pd_role(a.role);
  if (!role.is_ok()) return bad_flag(role.status().message());
  if (a.kv_load_failure != "recompute" && a.kv_load_failure != "fail")
    return bad_flag("--kv-load-failure must be recompute or fail");
  if (*role != serve::PdRole::kBoth && a.no_prefix_cache)
    return bad_flag("--role " + a.role + " needs the prefix cache (it moves prefix blocks)");
  auto proxies = serve::TrustedProxies::parse(a.forwarded_allow_ips);
  if (!proxies.is_ok()) return bad_flag("--forwarded-allow-ips: " + proxies.status().message());
  // The retention classes and the API keys' defaults, before anything slow.
  auto retention = kv::RetentionPolicy::parse(a.retention);
  if (!retention.is_ok()) return bad_flag("--retention: " + retention.status().message());
  std::vector<std::pair<std::string, std::string>> key_retention;
  for (const std::string& kr : a.api_key_retention) {
    const size_t eq = kr.rfind('=');  // a class name has no '=': the last one splits
    if (eq == std::string::npos || eq == 0)
      return bad_flag("--api-key-retention: '" + kr + "' is not KEY=CLASS");
    const std::string key = kr.substr(0, eq), cls = kr.substr(eq + 1);
    if (std::find(a.api_keys.begin(), a.api_keys.end(), key) == a.api_keys.end())
      return bad_flag("--api-key-retention: the key is not one given with --api-key");
    if (!retention->find(cls))
      return bad_flag("--api-key-retention: '" + cls + "' is not a retention class (" +
                      retention->names() + ")");
    key_retention.emplace_back(key, cls);
  }
  std::string model_dir = a.model, name = a.names.empty() ? std::string() : a.names.front();
  if (model_dir.empty()) {
    model_dir = cache_dir() + "/models/demo-seed0";
    if (name.empty()) name = "fathom-demo";
    if (!exists(model_dir + "/model.safetensors")) {
      std::fprintf(stderr, "fathom: generating the embedded demo model into %s\n",
                   model_dir.c_str());
      ::mkdir((cache_dir() + "/models").c_str(), 0755);
      auto c = model::preset_config("demo");
      // A directory of this process's own, renamed into place: servers started together each
      // generate one, the first rename wins and the others use its model.
      const std::string tmp = model_dir + ".tmp." + std::to_string(::getpid());
      Status s = model::write_random_checkpoint(*c, 0, tmp, [](int64_t done, int64_t total) {
        if (isatty(2))
          std::fprintf(stderr, "\r  %3d%%", int(100 * done / std::max<int64_t>(total, 1)));
      });
      if (isatty(2)) std::fprintf(stderr, "\n");
      if (!s.is_ok()) return fail(s);
      if (!exists(model_dir + "/model.safetensors")) {
        // A directory left without a model by an interrupted run goes first.
        (void)std::system(("rm -rf '" + model_dir + "'").c_str());
      }
      if (::rename(tmp.c_str(), model_dir.c_str()) != 0 &&
          !exists(model_dir + "/model.safetensors"))
        return fail(io_error("cannot move " + tmp + " to " + model_dir));
      (void)std::system(("rm -rf '" + tmp + "'").c_str());  // when another server won
    }
  }
  if (name.empty()) name = "deepseek-v4.1-flash";
  std::string tok_path = a.tokenizer;
  if (tok_path.empty()) tok_path = cache_dir() + "/tokenizers/deepseek_v41_fixture/tokenizer.json";
  auto t0 = std::chrono::steady_clock::now();
  auto tok = Tokenizer::load_file(tok_path);
  if (!tok.is_ok()) return fail(tok.status());
  auto enc = prompt::PromptEncoder::create(**tok);
  if (!enc.is_ok()) return fail(enc.status());
  model::ModelOptions mo;
  mo.numerics = a.numerics == "strict" ? model::Numerics::kStrict : model::Numerics::kFast;
  mo.threads = a.threads;
  mo.tokenizer_path = tok_path;
  if (a.speculative_draft_vocab > 0) {
    if (a.speculative != "dspark")
      return fail(invalid_argument("--speculative-draft-vocab needs --speculative dspark"));
    auto ids = model::load_draft_vocabulary(model_dir, a.speculative_draft_vocab);
    if (!ids.is_ok()) return fail(ids.status());
    mo.draft_vocabulary = std::move(*ids);
  }
  // Loading maps the checkpoint and reads every weight page once, with a progress bar on a
  // terminal (a line at the end otherwise).
  const bool tty = isatty(2);
  const auto load_start = std::chrono::steady_clock::now();
  mo.prefault = true;
  mo.progress = [tty, &model_dir](int64_t done, int64_t total) {
    if (!tty) return;
    const int width = 30, filled = total > 0 ? int(width * double(done) / double(total)) : width;
    std::fprintf(stderr, "\rfathom: loading %s [%s%s] %5.1f%% of %.2f GB", model_dir.c_str(),
                 std::string(size_t(filled), '#').c_str(),
                 std::string(size_t(width - filled), ' ').c_str(),
                 total > 0 ? 100.0 * double(done) / double(total) : 100.0, double(total) / 1e9);
  };
  auto m = model::V41Model::load(model_dir, mo);
  if (tty) std::fprintf(stderr, "\n");
  if (m.is_ok())
    std::fprintf(
        stderr, "fathom: loaded %s (%.2f GB) in %.1f s\n", model_dir.c_str(),
        double((*m)->checkpoint_bytes()) / 1e9,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count());
  if (!m.is_ok()) return fail(m.status());
  if (int64_t((*tok)->vocab_size()) > (*m)->config().vocab_size)
    return fail(invalid_argument("the tokenizer has more ids than the model's vocabulary"));
  // The KV store's disk tier (L2): blocks survive a restart. Declared before the engine, so
  // it outlives it and finishes its queued writes after the engine has stopped.
  std::vector<std::unique_ptr<kv::Store>> tiers;
  if (!a.kv_store_dir.empty()) {
    kv::DiskStoreOptions dso;
    dso.dir = a.kv_store_dir;
    dso.budget_bytes = int64_t(a.kv_store_disk_gb * double(int64_t(1) << 30));
    dso.queue_bytes = a.kv_store_queue_mb << 20;
    dso.retention = *retention;
    // Twice the largest object this model writes: a longer file is not one of its objects.
    const model::KvStoreSizes z = model::kv_store_sizes((*m)->config());
    dso.max_object_bytes = 2 * std::max(z.block_bytes, z.window_bytes) + 4096;
    auto ds = kv::DiskStore::open(dso);
    if (!ds.is_ok()) return fail(ds.status());
    const kv::StoreStats st = (*ds)->stats();
    std::fprintf(stderr, "fathom: KV store %s: %lld objects, %.1f MiB (budget %.1f GiB)\n",
                 a.kv_store_dir.c_str(), (long long)st.objects, double(st.bytes) / double(1 << 20),
                 a.kv_store_disk_gb);
    tiers.push_back(std::move(*ds));
  }
  if (!a.kv_store_redis.empty()) {
    kv::RedisStoreOptions rso;
    auto nodes = kv::parse_redis_nodes(a.kv_store_redis);
    if (!nodes.is_ok()) return fail(nodes.status());
    rso.nodes = *nodes;
    rso.queue_bytes = a.kv_store_queue_mb << 20;
    rso.retention = *retention;
    auto rs = kv::RedisClusterStore::open(rso);
    if (!rs.is_ok()) return fail(rs.status());
    std::fprintf(stderr, "fathom: KV store on the Redis Cluster at %s\n", a.kv_store_redis.c_str());
    tiers.push_back(std::move(*rs));
  }
  if (!tiers.empty())
    std::fprintf(stderr, "fathom: KV store retention %s (default %s)\n",
                 retention->to_string().c_str(),
                 retention->name(retention->default_class()).c_str());
  // P/D: the staging tier, first (fastest) in the store: a prefill replica's engine writes its
  // blocks there for the push; a decode replica's pushed blocks wait there for admission.
  kv::MemoryStore* stage = nullptr;
  if (*role != serve::PdRole::kBoth) {
    kv::MemoryStoreOptions mso;
    mso.budget_bytes = a.pd_stage_mb << 20;
    mso.accept_puts = *role == serve::PdRole::kPrefill;
    auto ms = std::make_unique<kv::MemoryStore>(mso);
    stage = ms.get();
    tiers.insert(tiers.begin(), std::move(ms));
  }
  std::unique_ptr<kv::Store> kv_store;
  if (tiers.size() == 1) kv_store = std::move(tiers.front());
  if (tiers.size() > 1) kv_store = std::make_unique<kv::TieredStore>(std::move(tiers));
  engine::EngineOptions eo;
  eo.store = kv_store.get();
  eo.kv_budget_bytes = a.kv_budget_mb << 20;
  eo.prefix_cache_bytes = a.prefix_cache_mb << 20;
  eo.prefix_cache = !a.no_prefix_cache;
  eo.swa_bounded_replay = a.swa_bounded_replay;
  eo.decoder_replay_keep = a.decoder_keep;
  eo.async_scheduling = !a.no_async;
  eo.grammar_masks_ahead = !a.no_grammar_masks_ahead;
  eo.grammar_jump_forward = a.grammar_jump_forward;
  eo.max_step_tokens = a.max_step_tokens;
  eo.kv_event_ring = a.kv_event_ring;
  eo.max_model_len = a.max_model_len;
  runner::V41Runner model_runner(**m);
  if (a.speculative == "dspark") {
    const int64_t block = model_runner.draft_block_size();
    if (block <= 0)
      return fail(unsupported("--speculative dspark: the checkpoint has no DSpark draft stages"));
    if (a.speculative_tokens > block)
      return fail(invalid_argument("--speculative-tokens " + std::to_string(a.speculative_tokens) +
                                   ": the model drafts at most " + std::to_string(block)));
    eo.speculative_tokens = a.speculative_tokens > 0 ? a.speculative_tokens : block;
    eo.speculative_schedule = a.speculative_scheduler == "prefix" ? engine::DraftSchedule::kPrefix
                              : a.speculative_scheduler == "stale-global"
                                  ? engine::DraftSchedule::kStaleGlobal
                                  : engine::DraftSchedule::kFixed;
  }
  if (a.max_model_len > model_runner.context_length())
    return bad_flag("--max-model-len " + std::to_string(a.max_model_len) +
                    ": the model's context length is " +
                    std::to_string(model_runner.context_length()));
  engine::Engine eng(model_runner, eo, (*tok)->id_of("<｜end▁of▁sentence｜>"));
  serve::ServerOptions so;
  so.host = a.host;
  so.port = a.port;
  so.api_keys = a.api_keys;
  so.trusted_proxies = *proxies;
  so.retention = *retention;
  so.api_key_retention = key_retention;
  so.model_names = a.names.empty() ? std::vector<std::string>{name} : a.names;
  so.default_max_tokens = a.max_tokens;
  so.allow_forced_output = a.forced;
  so.allow_error_injection = a.error_injection;
  so.header_timeout_s = a.header_timeout;
  so.body_timeout_s = a.body_timeout;
  so.shutdown_timeout_s = a.shutdown_timeout;
  so.stream_heartbeat_s = a.heartbeat;
  so.max_connections = a.max_connections;
  so.io_threads = a.http_threads;
  so.worker_threads = a.http_threads;
  so.kv_events = eng.kv_events();
  serve::PdOptions pdo;
  pdo.role = *role;
  pdo.model = model_runner.fingerprint();
  pdo.block_tokens = eo.prefix_block;
  pdo.stage = stage;
  pdo.store = kv_store.get();
  if (*role == serve::PdRole::kDecode) pdo.reserver = &eng;
  pdo.retention = *retention;
  pdo.recompute_on_failure = a.kv_load_failure == "recompute";
  pdo.lease_s = a.pd_lease_s;
  pdo.push_timeout_ms = int(a.pd_lease_s * 1000);
  if (!a.pd_push_api_key.empty())
    pdo.push_auth_header = "Authorization: Bearer " + a.pd_push_api_key + "\r\n";
  pdo.test_corrupt_push = a.pd_test_corrupt_push;
  pdo.test_push_delay_ms = a.pd_test_push_delay_ms;
  pdo.push_chunk_bytes = size_t(a.pd_push_chunk_bytes);
  pdo.test_chunk_delay_ms = a.pd_test_chunk_delay_ms;
  serve::PdRoutes pd(eng, pdo);
  so.pd = &pd;
  so.pd_api_keys = a.pd_api_keys;
  if (*role != serve::PdRole::kBoth && a.pd_api_keys.empty())
    std::fprintf(stderr,
                 "fathom serve: warning: without --pd-api-key the hand-off endpoints take the "
                 "clients' keys (or none): a client that reaches this replica can have it push KV "
                 "to any address (prefill) or plant KV blocks in its cache (decode)\n");
  serve::Server server(eng, **tok, *enc, so);
  if (Status ls = server.listen(); !ls.is_ok()) {
    std::fprintf(stderr, "fathom serve: %s\n", ls.message().c_str());
    eng.shutdown();
    return 2;
  }

  // Every connection is a descriptor: lift the soft limit to the hard one.
  if (struct rlimit rl; ::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &rl);
  }
  std::optional<StopSignals> signals(
      std::in_place, [&] { server.stop(); }, "fathom serve");
  std::thread announce([&] {
    while (server.port() == 0 && !signals->signalled())
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (signals->signalled()) return;
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto& c = (*m)->config();
    const engine::EngineStats es = eng.stats();
    std::printf(
        "fathom serve: model %s (%s; %lld layers, dim %lld, vocab %lld, context %lld), "
        "tokenizer %s\n"
        "  KV pool %lld pages of %lld KiB (%.0f MiB), prefix cache %s%s, %s scheduling%s%s\n"
        "  numerics %s, kernels %s, ready in %.1f s, listening on http://%s:%d\n"
        "  try: curl http://%s:%d/v1/chat/completions -H 'Content-Type: application/json'%s"
        " -d '{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello!\"}],"
        "\"max_tokens\":32}'\n",
        name.c_str(), model_dir.c_str(), (long long)c.n_layers, (long long)c.dim,
        (long long)c.vocab_size, (long long)eng.context_length(), tok_path.c_str(),
        (long long)es.kv_pages_total, (long long)(es.kv_page_bytes >> 10),
        double(es.kv_budget_bytes) / double(1 << 20), a.no_prefix_cache ? "off" : "on",
        a.no_prefix_cache
            ? ""
            : (a.swa_bounded_replay ? " (SWA bounded replay)" : " (window side objects)"),
        a.no_async ? "synchronous" : "asynchronous",
        a.decoder_keep > 0 ? (", decoder replay keep " + std::to_string(a.decoder_keep)).c_str()
                           : "",
        eo.speculative_tokens > 0
            ? (", speculative dspark (" + std::to_string(eo.speculative_tokens) + " drafts, " +
               a.speculative_scheduler + verify_costs(es.spec_cost, es.spec_draft_cost) + ")")
                  .c_str()
            : "",
        a.numerics.c_str(), kernels::cpu_path_name(kernels::cpu_path()), secs, a.host.c_str(),
        server.port(), a.host.c_str(), server.port(),
        a.api_keys.empty() ? ""
                           : (" -H 'Authorization: Bearer " + a.api_keys.front() + "'").c_str(),
        name.c_str());
    std::fflush(stdout);
  });
  server.run();
  announce.join();
  signals.reset();
  eng.shutdown();
  std::fprintf(stderr, "fathom serve: stopped\n");
  return 0;
}

}  // namespace

void add_serve_command(CLI::App& app, Runner* run) {
  auto a = std::make_shared<ServeArgs>();
  auto* c = app.add_subcommand("serve", "OpenAI / Anthropic compatible HTTP server");
  c->add_option("model", a->model, "Checkpoint directory (default: the embedded demo model)");
  c->add_option("--tokenizer", a->tokenizer, "tokenizer.json (default: the fetched V4.1 fixture)");
  c->add_option("--host", a->host, "Address to bind");
  c->add_option("--port", a->port, "Port (0 = any free port)")->check(CLI::Range(0, 65535));
  c->add_option("--api-key", a->api_keys,
                "Require an API key (Authorization: Bearer or x-api-key); repeatable: any of the "
                "keys given is accepted")
      ->allow_extra_args(false);
  c->add_option("--forwarded-allow-ips", a->forwarded_allow_ips,
                "Addresses (comma-separated or repeated; '*' for any) of proxies whose "
                "X-Forwarded-For names the client: who shares the grammar compiles fairly")
      ->allow_extra_args(false);
  c->add_option("--api-key-retention", a->api_key_retention,
                "KEY=CLASS: requests made with KEY (one given with --api-key) default to the KV "
                "store's retention class CLASS (repeatable)")
      ->allow_extra_args(false);
  c->add_option("--retention", a->retention,
                "The KV store's retention classes, CLASS=DURATION[,CLASS=DURATION...] with "
                "DURATION = N followed by s, m, h or d; an object expires at its last use plus "
                "its class's time (default agent=3d,chat=7d; a request's default class: chat if "
                "configured, else the first)");
  c->add_option("--served-model-name", a->names,
                "A name clients may give as `model` (repeatable; the first is the default and is "
                "reported back). deepseek-chat (thinking off) and deepseek-reasoner (thinking on) "
                "are always served too");
  c->add_option("--numerics", a->numerics, "fast (default) or strict")
      ->check(CLI::IsMember({"fast", "strict"}));
  c->add_option("--threads", a->threads, "Compute threads (0 = all)");
  c->add_option("--kv-budget-mb", a->kv_budget_mb,
                "KV page pool in MiB (running sequences and cached prefix blocks)");
  c->add_option("--prefix-cache-mb", a->prefix_cache_mb, "Most the prefix cache may hold, MiB");
  c->add_flag("--no-prefix-cache", a->no_prefix_cache, "Disable prefix caching");
  c->add_option("--kv-events-ring", a->kv_event_ring,
                "Block changes of the prefix cache's event feed (/v1/kv_events) kept for "
                "followers; a follower further behind resyncs from /v1/kv_snapshot. 0 = no feed")
      ->check(CLI::NonNegativeNumber);
  c->add_flag("--no-async-scheduling", a->no_async,
              "Plan each step after the previous one finishes instead of while it computes");
  c->add_flag("--no-grammar-masks-ahead", a->no_grammar_masks_ahead,
              "Compute structured-output masks after the forward instead of beside it");
  c->add_flag("--grammar-jump-forward", a->grammar_jump_forward,
              "Emit text a structured-output grammar forces without sampling, as the longest "
              "tokens that spell it, in one forward with the next token (approximation: the "
              "tokens may differ from those the model would sample)");
  c->add_option("--speculative", a->speculative,
                "Speculative decoding: dspark (the checkpoint's draft stages; the output is the "
                "output without it, token for token) or off")
      ->check(CLI::IsMember({"off", "dspark"}));
  c->add_option("--speculative-tokens", a->speculative_tokens,
                "Draft tokens verified per step with --speculative dspark (default: the model's "
                "draft block, 5 on V4.1)")
      ->check(CLI::PositiveNumber);
  c->add_option("--speculative-draft-vocab", a->speculative_draft_vocab,
                "With --speculative dspark: the draft stages propose only the N most frequent "
                "ids of the checkpoint's dspark_draft_vocab.json (their head reads N rows "
                "instead of the vocabulary; the output is unchanged, the acceptance may drop)")
      ->check(CLI::PositiveNumber);
  c->add_option("--speculative-scheduler", a->speculative_scheduler,
                "How many drafts each step verifies: fixed (all of them), prefix (the paper's "
                "Algorithm 1 over the step's drafts, from their confidence calibrated on live "
                "traffic and pass costs profiled at start; none when speculation would lose) or "
                "stale-global (the paper's variant B: the step's capacity from confidences two "
                "steps old by a global search, filled with the drafts of largest live confidence)")
      ->check(CLI::IsMember({"fixed", "prefix", "stale-global"}));
  c->add_flag("--swa-bounded-replay", a->swa_bounded_replay,
              "Prefix-cache hits replay the last window instead of restoring each block's window "
              "state (less memory; an approximation: a hit may change the output)");
  c->add_option("--decoder-replay-keep", a->decoder_keep,
                "Decoder-side SWA bounded replay: the layers after the last KV source prefill "
                "only the prompt's last N tokens (an approximation; 140 for V4.1; 0 = off)")
      ->check(CLI::NonNegativeNumber);
  c->add_option("--max-model-len", a->max_model_len,
                "The most prompt + generated tokens of one request (default: the model's "
                "context length; more than it exits 2)")
      ->check(CLI::Range(int64_t(2), int64_t(1) << 40));
  c->add_option("--default-max-tokens", a->max_tokens,
                "max_tokens when a request sets none (0 = what the context leaves)");
  c->add_option("--header-timeout", a->header_timeout,
                "Seconds a client has to send a request's headers (and to idle between requests)")
      ->check(seconds_check(true));
  c->add_option("--body-timeout", a->body_timeout, "Seconds a client has to send a request body")
      ->check(seconds_check(true));
  c->add_option("--shutdown-timeout", a->shutdown_timeout,
                "On SIGTERM/SIGINT, seconds in-flight requests get to finish before they are "
                "cancelled (a second signal cancels them at once)")
      ->check(seconds_check(false));
  c->add_option("--sse-keepalive", a->heartbeat,
                "Seconds a stream may stay silent (queued, or in a long prefill) before it gets "
                "an SSE comment, so clients and proxies with idle timeouts keep it (0 = never)")
      ->check(seconds_check(false));
  c->add_option("--max-connections", a->max_connections,
                "Open connections at most; more are answered 503")
      ->check(CLI::Range(1, 1 << 20));
  c->add_option("--http-threads", a->http_threads,
                "HTTP io threads (and as many request-parsing workers)")
      ->check(CLI::Range(1, 64));
  c->add_option("--max-step-tokens", a->max_step_tokens,
                "Token budget of one engine step: decode tokens plus prefill chunks")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  c->add_option("--kv-store-dir", a->kv_store_dir,
                "KV-cache store on local disk (L2): prompt blocks are written here and read back "
                "on a prefix-cache miss, also after a restart (created when missing)")
      ->check(CLI::Validator(
          [](std::string& t) { return t.empty() ? std::string("an empty directory name") : ""; },
          "DIR"));
  c->add_option("--kv-store-redis", a->kv_store_redis,
                "KV-cache store on a Redis Cluster (L3, below the disk tier when both are given): "
                "HOST:PORT[,HOST:PORT...] of any of its nodes")
      ->check(CLI::Validator(
          [](std::string& t) {
            auto nodes = kv::parse_redis_nodes(t);
            return nodes.is_ok() ? std::string() : nodes.status().message();
          },
          "HOST:PORT[,...]"));
  c->add_option("--kv-store-disk-gb", a->kv_store_disk_gb,
                "Most the KV store may hold on disk, GiB (least recently used blocks go first)")
      ->check(CLI::Validator(
          [](std::string& t) {
            const double v = parse_number(t);  // 1 MiB to 1 PiB (NaN fails both)
            if (!(v >= 1.0 / 1024 && v <= 1 << 20))
              return "a size in GiB from 0.001 (1 MiB) to 1048576 (1 PiB): " + t;
            return std::string();
          },
          "GIB"));
  c->add_option("--kv-store-queue-mb", a->kv_store_queue_mb,
                "Most the KV store's writes may queue, MiB (more are dropped, never waited for)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  c->add_option("--role", a->role,
                "P/D disaggregation role: prefill (prefills hand-offs and pushes their KV "
                "blocks), decode (receives them and decodes) or both (default: neither)")
      ->check(CLI::IsMember({"both", "prefill", "decode"}));
  c->add_option("--kv-load-failure", a->kv_load_failure,
                "decode role: a hand-off whose KV transfer failed is prefilled here "
                "(recompute, default) or fails with a 503 (fail)")
      ->check(CLI::IsMember({"recompute", "fail"}));
  c->add_option("--pd-stage-mb", a->pd_stage_mb,
                "prefill/decode roles: the in-memory staging tier of the hand-off, MiB")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 24));
  c->add_option("--pd-lease-seconds", a->pd_lease_s,
                "prefill: how long pushed blocks stay pinned at most (and the push's timeout); "
                "decode: how long a reserved room and its received blocks are kept")
      ->check(seconds_check(true));
  c->add_option("--pd-api-key", a->pd_api_keys,
                "The only keys the hand-off endpoints (/v1/pd/prefill, /v1/pd/reserve, "
                "/v1/kv_push) accept (repeatable): the router's --replica-api-key and the prefill "
                "replicas' --pd-push-api-key, never a client's")
      ->allow_extra_args(false);
  c->add_option("--pd-push-api-key", a->pd_push_api_key,
                "prefill: the API key sent with pushes to decode replicas");
  c->add_flag("--pd-test-corrupt-push", a->pd_test_corrupt_push,
              "Testing aid (prefill): alter a byte of the first pushed block object");
  c->add_option("--pd-test-push-delay-ms", a->pd_test_push_delay_ms,
                "Testing aid (prefill): wait this long between the prefill and the push")
      ->check(CLI::Range(0, 600000));
  c->add_option("--pd-push-chunk-bytes", a->pd_push_chunk_bytes,
                "prefill: a push moves in chunks of this many bytes, one request each (keep "
                "it well under the decode replica's 32 MiB body limit; default 8 MiB)")
      ->check(CLI::Range(int64_t(4096), int64_t(30) << 20));
  c->add_option("--pd-test-chunk-delay-ms", a->pd_test_chunk_delay_ms,
                "Testing aid (prefill): wait this long between a push's chunks")
      ->check(CLI::Range(0, 600000));
  c->add_flag("--allow-forced-output", a->forced,
              "Testing aid: accept forced_output_ids (teacher-forced output tokens)");
  c->add_flag("--allow-error-injection", a->error_injection,
              "Testing aid: accept fathom_inject_error_after (the engine fails the request after "
              "that many tokens)");
  c->callback([a, run] { *run = [a] { return run_serve(*a); }; });
}

}  // namespace fathom::cli
