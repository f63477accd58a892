// `fathom router --replica URL [--replica URL ...] [--upstream-kind fathom|vllm|sglang]`: one
// process in front of several `fathom serve` replicas (or, as a gateway, vLLM or SGLang
// servers: router/upstream.h). It serves the same protocols and endpoints as `fathom serve`
// (serve::Server over a router::RemoteGenerator): renders and tokenizes each request once,
// sends token ids to the replica the routing policy picks, streams the replica's token ids
// back through the same output parser, and moves a request to another replica when its
// replica fails (before or during the stream).
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/stop_signals.h"
#include "kv/retention.h"
#include "prompt/encoder.h"
#include "router/remote_generator.h"
#include "serve/server.h"
#include "tokenizer/tokenizer.h"

namespace fathom::cli {
namespace {

struct RouterArgs {
  std::vector<std::string> replicas, api_keys, names, forwarded_allow_ips;
  std::string tokenizer, host = "127.0.0.1", policy = "cache_aware", replica_api_key;
  std::string upstream = "fathom";
  std::string retention = "agent=3d,chat=7d";
  int port = 8000, http_threads = 2, max_attempts = 3, max_connections = 4096;
  int64_t context_length = int64_t(1) << 20, max_tokens = 0;
  double probe_interval = 0.5, shutdown_timeout = 30, heartbeat = 15, idle_timeout = 120;
  double down_abandon = 5;
  bool no_kv_events = false;
  int64_t pd_min_prompt_tokens = 256;
  double pd_timeout = 60;
};

int router_fail(const std::string& m, int code = 2) {
  std::fprintf(stderr, "fathom router: %s\n", m.c_str());
  return code;
}

std::string default_tokenizer() {
  if (const char* c = std::getenv("FATHOM_CACHE"))
    return std::string(c) + "/tokenizers/deepseek_v41_fixture/tokenizer.json";
  const char* h = std::getenv("HOME");
  return std::string(h ? h : ".") + "/.cache/fathom/tokenizers/deepseek_v41_fixture/tokenizer.json";
}

int run_router(const RouterArgs& a) {
  auto policy = router::parse_policy(a.policy);
  if (!policy.is_ok()) return router_fail(policy.status().message());
  auto upstream = router::parse_upstream_kind(a.upstream);
  if (!upstream.is_ok()) return router_fail(upstream.status().message());
  auto retention = kv::RetentionPolicy::parse(a.retention);
  if (!retention.is_ok()) return router_fail("--retention: " + retention.status().message());
  auto proxies = serve::TrustedProxies::parse(a.forwarded_allow_ips);
  if (!proxies.is_ok()) return router_fail("--forwarded-allow-ips: " + proxies.status().message());
  const std::string tok_path = a.tokenizer.empty() ? default_tokenizer() : a.tokenizer;
  auto tok = Tokenizer::load_file(tok_path);
  if (!tok.is_ok()) return router_fail(tok.status().to_string(), 1);
  auto enc = prompt::PromptEncoder::create(**tok);
  if (!enc.is_ok()) return router_fail(enc.status().to_string(), 1);

  router::RemoteGeneratorOptions ro;
  ro.upstream = *upstream;
  ro.routing.policy = *policy;
  ro.probes.probe_interval_s = a.probe_interval;
  ro.api_key = a.replica_api_key;
  ro.max_attempts = a.max_attempts;
  ro.pd_min_prompt_tokens = a.pd_min_prompt_tokens;
  ro.pd_timeout_ms = int(a.pd_timeout * 1000);
  ro.idle_timeout_ms = int(a.idle_timeout * 1000);
  ro.abandon_down_after_s = a.down_abandon;
  ro.context_length = a.context_length;
  ro.vocab_size = int64_t((*tok)->vocab_size());
  ro.eos_id = (*tok)->id_of("<｜end▁of▁sentence｜>");
  ro.retention = *retention;
  ro.follow_kv_events = !a.no_kv_events;
  auto gen = router::RemoteGenerator::create(a.replicas, ro);
  if (!gen.is_ok()) return router_fail(gen.status().message());

  serve::ServerOptions so;
  so.host = a.host;
  so.port = a.port;
  so.api_keys = a.api_keys;
  so.trusted_proxies = *proxies;
  so.retention = *retention;
  // vLLM and SGLang keep no retention classes: a request that names one is a 400 there.
  so.retention_classes = *upstream == router::UpstreamKind::kFathom;
  so.model_names = a.names.empty() ? std::vector<std::string>{"deepseek-v4.1-flash"} : a.names;
  so.default_max_tokens = a.max_tokens;
  so.shutdown_timeout_s = a.shutdown_timeout;
  so.stream_heartbeat_s = a.heartbeat;
  so.max_connections = a.max_connections;
  so.io_threads = a.http_threads;
  so.worker_threads = a.http_threads;
  // A stalled replica is the replica set's business (probes, circuit); the router stays healthy
  // while any replica is up.
  so.health_stall_s = 1e18;
  serve::Server server(**gen, **tok, *enc, so);
  router::RemoteGenerator* rg = gen->get();
  server.add_get_json("/v1/router/kv_index",
                      [rg](std::string_view query) { return rg->kv_index_json(query); });
  if (Status ls = server.listen(); !ls.is_ok()) return router_fail(ls.message());
  if (struct rlimit rl; ::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &rl);
  }
  std::optional<StopSignals> signals(
      std::in_place, [&] { server.stop(); }, "fathom router");
  std::string urls;
  for (const std::string& u : a.replicas) urls += (urls.empty() ? "" : ", ") + u;
  std::printf(
      "fathom router: %zu %s replicas (%s), policy %s, tokenizer %s\n"
      "  listening on http://%s:%d\n",
      a.replicas.size(), a.upstream.c_str(), urls.c_str(), a.policy.c_str(), tok_path.c_str(),
      a.host.c_str(), server.port());
  std::fflush(stdout);
  server.run();
  signals.reset();
  gen->reset();  // stops the requests still in flight and waits for their threads
  std::fprintf(stderr, "fathom router: stopped\n");
  return 0;
}

}  // namespace

void add_router_command(CLI::App& app, Runner* run) {
  auto a = std::make_shared<RouterArgs>();
  auto* c = app.add_subcommand(
      "router",
      "Route OpenAI / Anthropic requests across `fathom serve` replicas (token ids on "
      "the link, cache- and load-aware, failover)");
  c->add_option("--replica", a->replicas, "A replica's http://HOST:PORT (repeatable)")
      ->required()
      ->allow_extra_args(false);
  c->add_option("--policy", a->policy,
                "cache_aware (default: the replica whose cached prefix the prompt extends "
                "furthest, weighed against its load), round_robin, least_load or power_of_two");
  c->add_option("--upstream-kind", a->upstream,
                "The replicas' protocol: fathom (`fathom serve`, default), vllm (vLLM >= 0.10.2's "
                "/v1/completions with return_token_ids) or sglang (SGLang's /generate)");
  c->add_flag("--no-kv-events", a->no_kv_events,
              "cache_aware: predict each replica's cache from the requests sent there instead of "
              "following its KV events (/v1/kv_events; always so for vllm and sglang)");
  c->add_option("--tokenizer", a->tokenizer, "tokenizer.json (default: the fetched V4.1 fixture)");
  c->add_option("--host", a->host, "Address to bind");
  c->add_option("--port", a->port, "Port (0 = any free port)")->check(CLI::Range(0, 65535));
  c->add_option("--api-key", a->api_keys, "Require an API key from clients (repeatable)")
      ->allow_extra_args(false);
  c->add_option("--forwarded-allow-ips", a->forwarded_allow_ips,
                "Addresses (comma-separated or repeated; '*' for any) of proxies whose "
                "X-Forwarded-For names the client (fair grammar compiles; sent on to the "
                "replicas with the client's address)")
      ->allow_extra_args(false);
  c->add_option("--replica-api-key", a->replica_api_key,
                "The API key sent to the replicas (Authorization: Bearer)");
  c->add_option("--served-model-name", a->names,
                "A name clients may give as `model` (repeatable; the first is the default)");
  c->add_option("--retention", a->retention,
                "The retention classes requests may name (as `fathom serve --retention`); the "
                "class travels to the replica by name (fathom upstreams only)");
  c->add_option("--context-length", a->context_length,
                "The most prompt + generated tokens of one request (a cap: the replicas' own "
                "max_model_len, read from their /v1/models, is used when smaller)")
      ->check(CLI::Range(int64_t(2), int64_t(1) << 40));
  c->add_option("--default-max-tokens", a->max_tokens,
                "max_tokens when a request sets none (0 = what the context leaves)");
  c->add_option("--pd-min-prompt-tokens", a->pd_min_prompt_tokens,
                "P/D: prompts shorter than this, or of which the decode replica would prefill "
                "fewer tokens (its cache hit subtracted), are prefilled on the decode replica")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 30));
  c->add_option("--pd-timeout", a->pd_timeout,
                "P/D: seconds a hand-off (reservation, prefill and push) may take")
      ->check(seconds_check(true));
  c->add_option("--max-attempts", a->max_attempts,
                "Replicas one request may try (the first and its retries)")
      ->check(CLI::Range(1, 64));
  c->add_option("--probe-interval", a->probe_interval, "Seconds between /health probes")
      ->check(CLI::Range(0.01, 3600.0));
  c->add_option("--replica-down-abandon", a->down_abandon,
                "Seconds a replica's health probes may keep failing (two at least) before the "
                "requests on it move to another replica (0: they wait for --replica-idle-timeout)")
      ->check(CLI::Range(0.0, 86400.0));
  c->add_option("--replica-idle-timeout", a->idle_timeout,
                "Seconds a replica may take for a whole line of its stream before the request "
                "moves on")
      ->check(CLI::Range(0.001, 86400.0));
  c->add_option("--shutdown-timeout", a->shutdown_timeout,
                "On SIGTERM/SIGINT, seconds in-flight requests get to finish (a second signal "
                "cancels them at once)")
      ->check(seconds_check(false));
  c->add_option("--sse-keepalive", a->heartbeat, "Seconds of silence before an SSE comment")
      ->check(seconds_check(false));
  c->add_option("--max-connections", a->max_connections, "Open client connections at most")
      ->check(CLI::Range(1, 1 << 20));
  c->add_option("--http-threads", a->http_threads, "HTTP io threads (and as many workers)")
      ->check(CLI::Range(1, 64));
  c->callback([a, run] { *run = [a] { return run_router(*a); }; });
}

}  // namespace fathom::cli
