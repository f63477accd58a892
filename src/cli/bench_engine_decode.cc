#include "cli/bench_engine_decode.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

#include "engine/engine.h"
#include "model/v41.h"
#include "runner/v41_runner.h"

namespace fathom::cli {
namespace {

struct Run {
  double decode_s = 0;  // from the last first token to the last finish
  int64_t tokens = 0;   // generated, first tokens included
  engine::EngineStats stats;
  std::vector<std::vector<int32_t>> outputs;
  std::string error;
};

// `batch` greedy requests (each its own prompt) submitted at once; waits for all.
Run run_engine(const runner::V41Runner& r, const std::vector<int32_t>& prompt,
               const EngineDecodeBench& b, int64_t drafts) {
  using Clock = std::chrono::steady_clock;
  engine::EngineOptions o;
  o.prefix_cache = false;
  o.max_running = std::max<int64_t>(64, b.batch);
  o.speculative_tokens = drafts;
  o.speculative_schedule = b.scheduler == "prefix"         ? engine::DraftSchedule::kPrefix
                           : b.scheduler == "stale-global" ? engine::DraftSchedule::kStaleGlobal
                                                           : engine::DraftSchedule::kFixed;
  engine::Engine e(r, o, -1);
  Run run;
  std::vector<std::shared_ptr<engine::RequestStream>> streams;
  const int64_t vocab = e.vocab_size();
  const Clock::time_point t_submit = Clock::now();
  for (int64_t i = 0; i < b.batch; ++i) {
    engine::GenerationRequest q;
    q.prompt = prompt;
    q.prompt[0] = int32_t((q.prompt[0] + i * 7919) % std::min<int64_t>(vocab, 30000));
    q.max_tokens = b.decode_tokens;
    q.ignore_eos = true;
    q.sampling.temperature = 0;
    auto s = e.submit(std::move(q));
    if (!s.is_ok()) {
      run.error = s.status().to_string();
      return run;
    }
    streams.push_back(*s);
  }
  run.outputs.resize(streams.size());
  double last_first_s = 0;  // the last stream's first token, after submission
  Clock::time_point end = t_submit;
  for (size_t i = 0; i < streams.size(); ++i) {
    engine::StreamEvent ev;
    bool first = true;
    while (streams[i]->next(&ev, 600000)) {
      if (!ev.tokens.empty() && first) {
        first = false;
        last_first_s = std::max(last_first_s, ev.first_token_seconds);  // from submission
      }
      run.outputs[i].insert(run.outputs[i].end(), ev.tokens.begin(), ev.tokens.end());
      if (ev.finished) {
        if (!ev.error.is_ok()) run.error = ev.error.to_string();
        break;
      }
    }
    end = std::max(end, Clock::now());
    run.tokens += int64_t(run.outputs[i].size());
  }
  run.decode_s = std::chrono::duration<double>(end - t_submit).count() - last_first_s;
  run.stats = e.stats();
  return run;
}

}  // namespace

int run_engine_decode_bench(const model::V41Model& model, const std::vector<int32_t>& prompt,
                            const EngineDecodeBench& b) {
  const runner::V41Runner r(model);
  const int64_t block = r.draft_block_size();
  if (block <= 0) {
    std::fprintf(stderr, "fathom: the checkpoint has no DSpark draft stages\n");
    return 2;
  }
  const int64_t drafts = b.speculative_tokens > 0 ? std::min(b.speculative_tokens, block) : block;
  const Run off = run_engine(r, prompt, b, 0);
  const Run on = run_engine(r, prompt, b, drafts);
  for (const Run* x : {&off, &on})
    if (!x->error.empty()) {
      std::fprintf(stderr, "fathom: %s\n", x->error.c_str());
      return 1;
    }
  const engine::EngineStats& s = on.stats;
  // Sequence steps: each emits one token plus its accepted drafts.
  const double seq_steps = double(on.tokens - s.spec_accepted_tokens);
  int64_t drafted = 0, chosen = 0;
  for (size_t k = 0; k < s.spec_chosen_hist.size(); ++k) {
    drafted += s.spec_chosen_hist[k];
    chosen += int64_t(k) * s.spec_chosen_hist[k];
  }
  // Tokens/s after every sequence's first token (the prefills are done by then).
  auto rate = [&](const Run& x) { return double(x.tokens - b.batch) / x.decode_s; };
  std::printf(
      "{\"model\":\"%s\",\"threads\":%d,\"numerics\":\"%s\",\"speculative\":\"dspark\","
      "\"speculative_scheduler\":\"%s\",\"speculative_tokens\":%lld,\"batch\":%lld,"
      "\"prompt_tokens\":%zu,\"decode_tokens\":%lld,\"decode_tokens_per_s\":%.2f,"
      "\"off_decode_tokens_per_s\":%.2f,\"vs_off\":%.3f,\"outputs_identical_to_off\":%s,"
      "\"mean_accepted_length\":%.3f,\"draft_tokens_per_step\":%.3f,"
      "\"verified_tokens_per_step\":%.3f,\"drafting_share\":%.3f,\"mean_chosen_k\":%.3f,"
      "\"verifying_steps\":%lld,\"accepted_drafts\":%lld}\n",
      b.model_dir.c_str(), b.threads, b.numerics.c_str(), b.scheduler.c_str(), (long long)drafts,
      (long long)b.batch, prompt.size(), (long long)b.decode_tokens, rate(on), rate(off),
      rate(on) / rate(off), on.outputs == off.outputs ? "true" : "false",
      double(on.tokens) / seq_steps, double(s.spec_draft_tokens) / seq_steps,
      double(s.spec_verified_tokens) / seq_steps, double(drafted) / seq_steps,
      drafted > 0 ? double(chosen) / double(drafted) : 0.0, (long long)s.spec_steps,
      (long long)s.spec_accepted_tokens);
  return on.outputs == off.outputs ? 0 : 1;
}

}  // namespace fathom::cli
