// Engine::metrics_text: the engine's counters (EngineStats) in the Prometheus text format.
#include <sstream>
#include <string>
#include <utility>

#include "engine/engine.h"

namespace fathom::engine {

std::string Engine::metrics_text() const {
  const EngineStats e = stats();
  std::ostringstream o;
  auto gauge = [&](const char* name, const char* help, double v, const char* type = "gauge") {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n"
      << name << " " << v << "\n";
  };
  gauge("fathom_prompt_tokens_total", "Prompt tokens of finished requests", double(e.prompt_tokens),
        "counter");
  gauge("fathom_generation_tokens_total", "Generated tokens", double(e.generated_tokens),
        "counter");
  gauge("fathom_prefix_cache_hit_tokens_total", "Prompt tokens served by the prefix cache",
        double(e.cached_tokens), "counter");
  gauge("fathom_preemptions_total", "Sequences preempted for recompute", double(e.preemptions),
        "counter");
  gauge("fathom_spec_steps_total", "Sequence steps that verified DSpark drafts",
        double(e.spec_steps), "counter");
  gauge("fathom_spec_verified_tokens_total", "Draft tokens verified",
        double(e.spec_verified_tokens), "counter");
  gauge("fathom_spec_accepted_tokens_total", "Draft tokens accepted",
        double(e.spec_accepted_tokens), "counter");
  gauge("fathom_spec_draft_tokens_total",
        "Draft tokens the DSpark stages proposed to the draft scheduler",
        double(e.spec_draft_tokens), "counter");
  // Histograms of small counts (0..8), one bucket each.
  auto counts = [&](const char* name, const char* help, const std::array<int64_t, 9>& hist) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " histogram\n";
    int64_t cumulative = 0, sum = 0;
    for (size_t i = 0; i < hist.size(); ++i) {
      cumulative += hist[i];
      sum += int64_t(i) * hist[i];
      o << name << "_bucket{le=\"" << i << "\"} " << cumulative << "\n";
    }
    o << name << "_bucket{le=\"+Inf\"} " << cumulative << "\n"
      << name << "_sum " << sum << "\n"
      << name << "_count " << cumulative << "\n";
  };
  counts("fathom_spec_accepted_per_step", "Sequence steps by draft tokens accepted",
         e.spec_accepted_hist);
  counts("fathom_spec_chosen_per_step",
         "Sequence steps that drafted, by draft tokens the scheduler chose to verify (K)",
         e.spec_chosen_hist);
  gauge("fathom_grammar_masks_total", "Tokens sampled under a structured-output grammar",
        double(e.grammar_masks), "counter");
  gauge("fathom_grammar_masks_ahead_total",
        "Of them, tokens whose mask was computed beside the forward", double(e.grammar_masks_ahead),
        "counter");
  gauge("fathom_grammar_jump_forward_steps_total",
        "Sequence steps that emitted grammar-forced tokens without sampling",
        double(e.grammar_jump_steps), "counter");
  gauge("fathom_grammar_jump_forward_tokens_total",
        "Grammar-forced tokens emitted without sampling", double(e.grammar_jump_tokens), "counter");
  gauge("fathom_queue_depth", "Requests waiting for admission", double(e.waiting));
  gauge("fathom_running_sequences", "Sequences admitted", double(e.running));
  gauge("fathom_batch_size", "Sequences in the last step", double(e.batch_size_last));
  gauge("fathom_step_tokens", "Tokens in the last step", double(e.step_tokens_last));
  gauge("fathom_kv_bytes", "KV pages in use, bytes", double(e.kv_bytes));
  gauge("fathom_kv_budget_bytes", "KV page pool, bytes", double(e.kv_budget_bytes));
  gauge("fathom_kv_pages_used", "KV pages in use", double(e.kv_pages_used));
  gauge("fathom_kv_pages_total", "KV pages in the pool", double(e.kv_pages_total));
  gauge("fathom_kv_page_bytes", "Bytes per KV page", double(e.kv_page_bytes));
  gauge("fathom_prefix_cache_bytes", "KV pages held by cached prefix blocks, bytes",
        double(e.prefix_cache_bytes));
  o << "# HELP fathom_engine_seconds_total Engine thread time by phase\n# TYPE "
       "fathom_engine_seconds_total counter\n";
  for (auto [phase, v] : {std::pair<const char*, double>{"plan", e.plan_seconds},
                          {"body", e.body_seconds},
                          {"head", e.head_seconds},
                          {"sample", e.sample_seconds},
                          {"post", e.post_seconds},
                          {"mask_wait", e.mask_wait_seconds}})
    o << "fathom_engine_seconds_total{phase=\"" << phase << "\"} " << v << "\n";
  gauge("fathom_swa_replay_tokens_total", "Prompt tokens recomputed by SWA bounded replay",
        double(e.replayed_tokens), "counter");
  gauge("fathom_prefix_cache_blocks", "Prefix-cache blocks held", double(e.prefix_blocks));
  if (e.store_on) {
    // The KV store below the prefix cache: what the engine made of it, then each tier's own
    // counters.
    gauge("fathom_kv_store_hits_total", "Blocks read back from the KV store into the prefix cache",
          double(e.store_hit_blocks), "counter");
    gauge("fathom_kv_store_prefetched_blocks_total",
          "Of those, blocks whose objects were read while the request queued (prefetch)",
          double(e.store_prefetched_blocks), "counter");
    gauge("fathom_kv_store_prefetched_windows_total",
          "Window side objects of store hits read while the request queued (prefetch)",
          double(e.store_prefetched_windows), "counter");
    gauge("fathom_kv_store_misses_total",
          "Admissions that looked in the KV store past the prefix cache and found no block",
          double(e.store_misses), "counter");
    gauge("fathom_kv_store_corrupt_total",
          "KV store objects that failed their checks (recomputed and removed)",
          double(e.store_corrupt), "counter");
    auto tiers = [&](const char* name, const char* help, const char* type,
                     int64_t kv::StoreStats::*field) {
      o << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
      for (const auto& [tier, st] : e.store_tiers)
        o << name << "{tier=\"" << tier << "\"} " << st.*field << "\n";
    };
    using S = kv::StoreStats;
    tiers("fathom_kv_store_tier_hits_total", "Objects a tier was asked for and had", "counter",
          &S::hits);
    tiers("fathom_kv_store_tier_misses_total", "Objects a tier was asked for and did not have",
          "counter", &S::misses);
    tiers("fathom_kv_store_read_bytes_total", "Bytes read from a KV store tier", "counter",
          &S::bytes_read);
    tiers("fathom_kv_store_written_bytes_total", "Bytes written to a KV store tier", "counter",
          &S::bytes_written);
    tiers("fathom_kv_store_writes_total", "Objects written to a KV store tier", "counter",
          &S::writes);
    tiers("fathom_kv_store_dropped_writes_total",
          "KV store writes dropped because the tier's write queue was full", "counter",
          &S::dropped_writes);
    tiers("fathom_kv_store_write_errors_total",
          "KV store writes that failed (full disk, node down)", "counter", &S::write_errors);
    tiers("fathom_kv_store_evictions_total", "KV store objects evicted for the byte budget",
          "counter", &S::evictions);
    tiers("fathom_kv_store_objects", "Objects held by a KV store tier (disk)", "gauge",
          &S::objects);
    tiers("fathom_kv_store_bytes", "Bytes held by a KV store tier (disk)", "gauge", &S::bytes);
    tiers("fathom_kv_store_redirects_total",
          "KV store commands sent again to another node (Redis Cluster MOVED and ASK)", "counter",
          &S::redirects);
    tiers("fathom_kv_store_queued_bytes", "Bytes waiting to be written to a KV store tier", "gauge",
          &S::queued_bytes);
    tiers("fathom_kv_store_expirations_total",
          "KV store objects removed because their retention time ran out (disk; Redis expires "
          "keys itself)",
          "counter", &S::expirations);
    // Each tier's counters by retention class (label `class`).
    auto classes = [&](const char* name, const char* help, int64_t kv::RetentionStats::*field) {
      o << "# HELP " << name << " " << help << "\n# TYPE " << name << " counter\n";
      for (const auto& [tier, st] : e.store_tiers)
        for (const kv::RetentionStats& c : st.classes)
          o << name << "{tier=\"" << tier << "\",class=\"" << c.name << "\"} " << c.*field << "\n";
    };
    using R = kv::RetentionStats;
    classes("fathom_kv_store_class_hits_total",
            "Objects a tier had, by the retention class of the request that asked", &R::hits);
    classes("fathom_kv_store_class_misses_total",
            "Objects a tier did not have, by the retention class of the request that asked",
            &R::misses);
    classes("fathom_kv_store_class_expirations_total",
            "KV store objects whose retention ran out, by their class (disk)", &R::expirations);
    classes("fathom_kv_store_class_evictions_total",
            "KV store objects evicted for the byte budget, by their class (disk)", &R::evictions);
    classes("fathom_kv_store_class_written_bytes_total",
            "Bytes written to a KV store tier, by the objects' retention class", &R::bytes_written);
    // Latency histograms by tier and class (cumulative buckets, as Prometheus reads them).
    auto latencies = [&](const char* name, const char* help, kv::LatencyHistogram R::*field) {
      o << "# HELP " << name << " " << help << "\n# TYPE " << name << " histogram\n";
      for (const auto& [tier, st] : e.store_tiers)
        for (const kv::RetentionStats& c : st.classes) {
          const kv::LatencyHistogram& h = c.*field;
          const std::string labels = "tier=\"" + tier + "\",class=\"" + c.name + "\"";
          int64_t cumulative = 0;
          for (size_t b = 0; b < h.counts.size(); ++b) {
            cumulative += h.counts[b];
            o << name << "_bucket{" << labels << ",le=\"";
            if (b < kv::LatencyHistogram::kBounds.size())
              o << kv::LatencyHistogram::kBounds[b];
            else
              o << "+Inf";
            o << "\"} " << cumulative << "\n";
          }
          o << name << "_sum{" << labels << "} " << h.sum << "\n";
          o << name << "_count{" << labels << "} " << h.count << "\n";
        }
    };
    latencies("fathom_kv_store_read_seconds",
              "Seconds a KV store tier's reads took: one per get, or per pipelined multi-object "
              "get (Redis), by the retention class of the request that asked",
              &R::read_seconds);
    latencies("fathom_kv_store_write_seconds",
              "Seconds a KV store tier took to write one object (on its writer thread), by the "
              "object's retention class",
              &R::write_seconds);
    for (const auto& [tier, st] : e.store_tiers)
      if (tier == "redis")
        gauge("fathom_kv_store_redis_round_trips_total",
              "Requests the Redis tier's reads sent to a node and waited for (a pipelined "
              "multi-block read is one per node)",
              double(st.round_trips), "counter");
  }
  return o.str();
}

}  // namespace fathom::engine
