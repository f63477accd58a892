// `fathom bench ...`: in-process timings printed as one JSON line each.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>

#include "cli/bench_engine_decode.h"
#include "cli/commands.h"
#include "core/json_write.h"
#include "core/py_json.h"
#include "core/thread_pool.h"
#include "kernels/cpu_features.h"
#include "kernels/gemv.h"
#include "kernels/quant.h"
#include "model/draft_vocab.h"
#include "model/v41.h"
#include "prompt/encoder.h"
#include "prompt/reference.h"
#include "tokenizer/tokenizer.h"

namespace fathom::cli {
namespace {

struct BenchTokenizeArgs {
  std::string tokenizer;
  std::string input;
  std::string ids_out;
  int threads = 1;
  int repeat = 3;
  bool plain = false;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run_bench_tokenize(const BenchTokenizeArgs& a) {
  auto t0 = std::chrono::steady_clock::now();
  auto tok = Tokenizer::load_file(a.tokenizer);
  double load_s = seconds_since(t0);
  if (!tok.is_ok()) {
    std::fprintf(stderr, "fathom: %s\n", tok.status().to_string().c_str());
    return 2;
  }
  std::ifstream in(a.input, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "fathom: cannot open input '%s'\n", a.input.c_str());
    return 2;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  ThreadPool pool(static_cast<size_t>(a.threads));
  EncodeOptions opts{.match_added_tokens = !a.plain};
  double best = 1e300, first = 0;
  std::vector<int32_t> ids;
  for (int r = 0; r < a.repeat; ++r) {
    auto t1 = std::chrono::steady_clock::now();
    auto res = (*tok)->encode(text, opts, a.threads > 1 ? &pool : nullptr);
    double s = seconds_since(t1);
    if (!res.is_ok()) {
      std::fprintf(stderr, "fathom: %s\n", res.status().to_string().c_str());
      return 2;
    }
    ids = std::move(res).value();
    if (r == 0) first = s;
    best = std::min(best, s);
  }
  if (!a.ids_out.empty()) {
    std::ofstream out(a.ids_out);
    std::string s;
    json::append_int_array(s, ids);
    out << s << "\n";
  }
  std::printf(
      "{\"impl\":\"fathom\",\"bytes\":%zu,\"seconds\":%.6f,\"first_seconds\":%.6f,"
      "\"mb_per_s\":%.3f,\"tokens\":%zu,\"threads\":%d,"
      "\"repeat\":%d,\"load_seconds\":%.6f,\"fast_pre_tokenizer\":%s}\n",
      text.size(), best, first, double(text.size()) / best / 1e6, ids.size(), a.threads, a.repeat,
      load_s, (*tok)->uses_fast_pre_tokenizer() ? "true" : "false");
  return 0;
}

struct BenchEncodeArgs {
  std::string tokenizer;
  std::string format = "v41";
  std::string input;
  std::string ids_out;
  int threads = 1;
  int repeat = 5;
};

// Renders the conversation in CASE.json (reference mode) and encodes it, best of K.
int run_bench_encode(const BenchEncodeArgs& a) {
  auto tok = Tokenizer::load_file(a.tokenizer);
  if (!tok.is_ok()) {
    std::fprintf(stderr, "fathom: %s\n", tok.status().to_string().c_str());
    return 2;
  }
  std::ifstream in(a.input, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  auto c = pyjson::parse(ss.str());
  if (!c.is_ok()) {
    std::fprintf(stderr, "fathom: %s: %s\n", a.input.c_str(), c.status().to_string().c_str());
    return 2;
  }
  auto req = prompt::ReferenceRequest::from_case(*c);
  if (!req.is_ok()) {
    std::fprintf(stderr, "fathom: %s\n", req.status().to_string().c_str());
    return 2;
  }
  auto enc = prompt::PromptEncoder::create(**tok);
  if (!enc.is_ok()) {
    std::fprintf(stderr, "fathom: %s\n", enc.status().to_string().c_str());
    return 2;
  }
  ThreadPool pool(static_cast<size_t>(a.threads));
  double best = 1e300, best_render = 0, first = 0;
  std::vector<int32_t> ids;
  size_t chars = 0;
  for (int r = 0; r < a.repeat; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    auto out =
        a.format == "v41" ? prompt::render_v41_reference(*req) : prompt::render_v4_reference(*req);
    double render_s = seconds_since(t0);
    if (!out.is_ok()) {
      std::fprintf(stderr, "fathom: %s\n", out.status().to_string().c_str());
      return 2;
    }
    auto res = enc->encode(out->prompt, a.threads > 1 ? &pool : nullptr);
    double s = seconds_since(t0);
    if (!res.is_ok()) {
      std::fprintf(stderr, "fathom: %s\n", res.status().to_string().c_str());
      return 2;
    }
    ids = std::move(res).value();
    if (r == 0) {
      first = s;
      for (const auto& p : out->prompt.pieces()) chars += p.text.size();
    }
    if (s < best) {
      best = s;
      best_render = render_s;
    }
  }
  if (!a.ids_out.empty()) {
    std::ofstream o(a.ids_out);
    std::string s;
    json::append_int_array(s, ids);
    o << s << "\n";
  }
  std::printf(
      "{\"impl\":\"fathom\",\"seconds\":%.6f,\"first_seconds\":%.6f,\"render_seconds\":%.6f,"
      "\"tokens\":%zu,\"prompt_bytes\":%zu,\"threads\":%d,\"repeat\":%d}\n",
      best, first, best_render, ids.size(), chars, a.threads, a.repeat);
  return 0;
}

struct BenchMatmulArgs {
  std::string weights = "fp4";
  int64_t m = 4096, k = 14336, n = 1;
  int threads = 2;
  int repeat = 20;
  bool bandwidth = false;   // also measure the machine's read bandwidth
  bool read_floor = false;  // also time a plain read of the same weight bytes
  int64_t cold_bytes = 0;   // > 0: cycle over copies of the weights spanning this many bytes
};

double read_bandwidth(int threads);

// A plain read of what one run of a product reads: each array's bytes (a sum of 64-bit words),
// split over the pool's threads as a product splits its rows. Run r reads copy r % copies
// (array i's copy c starts at arrays[i].first + c * arrays[i].second). Returns the best run
// (one copy) or the median (copies: every run reads from memory) of `repeat`: the floor
// under any kernel that reads those bytes once, in the same cache state as its timing.
double read_seconds(const std::vector<std::pair<const uint8_t*, size_t>>& arrays, size_t copies,
                    ThreadPool* pool, int threads, int repeat) {
  std::vector<uint64_t> sums(static_cast<size_t>(threads));
  std::vector<double> times;
  for (int r = 0; r < repeat; ++r) {
    const size_t c = size_t(r) % copies;
    auto t0 = std::chrono::steady_clock::now();
    auto part = [&](size_t t) {
      uint64_t acc[16] = {};
      for (const auto& [base, bytes] : arrays) {
        const auto* words = reinterpret_cast<const uint64_t*>(base + c * bytes);
        const size_t count = bytes / 8, b = count / size_t(threads) * t,
                     e = t + 1 == size_t(threads) ? count : b + count / size_t(threads);
        size_t i = b;
        for (; i + 16 <= e; i += 16)
          for (int j = 0; j < 16; ++j) acc[j] += words[i + size_t(j)];
        for (; i < e; ++i) acc[0] += words[i];
      }
      uint64_t sum = 0;
      for (uint64_t v : acc) sum += v;
      sums[t] = sum;
    };
    if (pool != nullptr)
      pool->parallel_for(size_t(threads), part);
    else
      part(0);
    times.push_back(seconds_since(t0));
  }
  static volatile uint64_t sink;  // keeps the sums, so the reads are not optimised away
  for (uint64_t v : sums) sink = sink + v;
  std::sort(times.begin(), times.end());
  return copies > 1 ? times[times.size() / 2] : times.front();
}

// Times the fast kernel for an [M x K] weight matrix in checkpoint format times N rows.
int run_bench_matmul(const BenchMatmulArgs& a) {
  if (a.weights == "fp4" && a.k % 32 != 0) {
    std::fprintf(stderr, "fathom: fp4 needs K divisible by 32\n");
    return 2;
  }
  std::mt19937 rng(1);
  std::vector<uint8_t> w, s;
  std::vector<uint16_t> wb;
  size_t weight_bytes = 0;
  if (a.weights == "fp4") {
    w.resize(size_t(a.m * a.k / 2));
    s.resize(size_t(a.m * a.k / 32));
    weight_bytes = w.size() + s.size();
  } else if (a.weights == "fp8") {
    w.resize(size_t(a.m * a.k));
    s.resize(size_t(((a.m + 31) / 32) * ((a.k + 31) / 32)));
    weight_bytes = w.size() + s.size();
  } else {
    wb.resize(size_t(a.m * a.k));
    weight_bytes = wb.size() * 2;
  }
  // FP8 codes as a checkpoint's are: Gaussian values scaled so that the largest land near 448,
  // rounded to E4M3 (codes with a zero exponent, which take a slower decoding route, are rare
  // there; uniform bytes would make one in sixteen). FP4 codes are uniform (no kernel's cost
  // depends on them).
  std::normal_distribution<float> gauss(0.0f, 448.0f / 4.5f);
  for (auto& b : w)
    b = a.weights == "fp8" ? kernels::e4m3_code(kernels::round_to_e4m3(gauss(rng)))
                           : uint8_t(rng());
  for (auto& b : s) b = uint8_t(118 + rng() % 8);
  for (auto& h : wb) h = uint16_t(0x3C00 + rng() % 0x800);
  // --cold-bytes: copies of the matrix after the first, each run on the next, so that no run
  // finds its weights in a cache (as a decode step finds each layer's).
  const size_t copies =
      a.cold_bytes > 0 ? size_t((a.cold_bytes + int64_t(weight_bytes) - 1) / int64_t(weight_bytes))
                       : 1;
  auto replicate = [&](auto& v) {
    const size_t one = v.size();
    v.resize(one * copies);
    for (size_t c = 1; c < copies; ++c)
      std::copy(v.begin(), v.begin() + ptrdiff_t(one), v.begin() + ptrdiff_t(c * one));
    return one;
  };
  const size_t w_one = replicate(w), s_one = replicate(s), wb_one = replicate(wb);
  std::vector<float> x(size_t(a.n * a.k)), y(size_t(a.n * a.m));
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto& v : x) v = u(rng);
  ThreadPool pool(static_cast<size_t>(a.threads));
  ThreadPool* p = a.threads > 1 ? &pool : nullptr;
  std::vector<double> times;
  for (int r = 0; r < a.repeat; ++r) {
    const size_t c = size_t(r) % copies;
    auto t0 = std::chrono::steady_clock::now();
    if (a.weights == "fp4") {
      kernels::cpu::matmul_fp4({w.data() + c * w_one, s.data() + c * s_one, a.m, a.k}, x.data(),
                               a.n, y.data(), p);
    } else if (a.weights == "fp8") {
      kernels::cpu::matmul_fp8({w.data() + c * w_one, s.data() + c * s_one, a.m, a.k}, x.data(),
                               a.n, y.data(), p);
    } else {
      kernels::cpu::matmul_bf16({wb.data() + c * wb_one, a.m, a.k}, x.data(), a.n, y.data(), p);
    }
    times.push_back(seconds_since(t0));
  }
  std::sort(times.begin(), times.end());
  // Warm, the best run; cold, the median (every run reads weights from memory).
  const double best = copies > 1 ? times[times.size() / 2] : times.front();
  double flops = 2.0 * double(a.m) * double(a.k) * double(a.n);
  std::string extra;
  if (a.read_floor) {
    // The weights, then their scales: the bytes the kernel reads.
    const double t =
        a.weights == "bf16"
            ? read_seconds({{reinterpret_cast<const uint8_t*>(wb.data()), wb_one * 2}}, copies, p,
                           a.threads, a.repeat)
            : read_seconds({{w.data(), w_one}, {s.data(), s_one}}, copies, p, a.threads, a.repeat);
    char buf[96];
    std::snprintf(buf, sizeof buf, ",\"read_floor_seconds\":%.6f", t);
    extra += buf;
  }
  if (a.bandwidth) {
    const double machine = read_bandwidth(a.threads);
    char buf[128];
    std::snprintf(buf, sizeof buf, ",\"machine_read_gb_per_s\":%.3f,\"fraction_of_machine\":%.3f",
                  machine, double(weight_bytes) / best / 1e9 / machine);
    extra += buf;
  }
  std::printf(
      "{\"weights\":\"%s\",\"path\":\"%s\",\"m\":%lld,\"k\":%lld,\"n\":%lld,\"threads\":%d,"
      "\"repeat\":%d,\"copies\":%zu,"
      "\"seconds\":%.6f,\"weight_bytes\":%zu,\"gb_per_s\":%.3f,\"gflops\":%.3f,\"checksum\":%.6g%s}"
      "\n",
      a.weights.c_str(), kernels::cpu_path_name(kernels::cpu_path()), (long long)a.m,
      (long long)a.k, (long long)a.n, a.threads, a.repeat, copies, best, weight_bytes,
      double(weight_bytes) / best / 1e9, flops / best / 1e9, double(y[0]) + double(y[y.size() - 1]),
      extra.c_str());
  return 0;
}

struct BenchDecodeArgs {
  std::string model;
  int64_t prompt_tokens = 512, decode_tokens = 32, chunk = 512;
  int threads = 2;
  std::string numerics = "fast";
  std::string speculative = "off";  // or "dspark": through the engine, beside "off"
  std::string scheduler = "fixed";  // the draft scheduler with dspark
  int64_t speculative_tokens = 0;   // drafts per step (0: the model's draft block)
  int64_t draft_vocab = 0;          // the draft vocabulary's size (0: the whole vocabulary)
  int64_t batch = 1;                // sequences decoding together (forward_each + one head)
};

// VmRSS / VmHWM of this process in bytes.
int64_t proc_status_bytes(const char* key) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  int64_t kb = -1;
  const size_t n = std::strlen(key);
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, key, n) == 0) kb = std::atoll(line + n + 1);
  std::fclose(f);
  return kb * 1024;
}

// Read bandwidth of this machine: a 1 GiB buffer summed by `threads` threads, best of 5.
double read_bandwidth(int threads) {
  const size_t bytes = size_t(1) << 30;
  std::vector<uint8_t> buf(bytes, 1);
  ThreadPool pool(static_cast<size_t>(threads));
  return double(bytes) / read_seconds({{buf.data(), bytes}}, 1, &pool, threads, 5) / 1e9;
}

// `batch` sequences (prompts of the same length, each its own tokens) prefilled one after
// another, then decoded together greedily: every step is one forward_each() over all of them
// and one head over their rows, as the engine runs a step of decoding sequences.
int bench_batched_decode(const BenchDecodeArgs& a, const model::V41Model& m,
                         const std::vector<int32_t>& prompt, double load_s, double machine_gbps) {
  const int64_t V = m.config().vocab_size, D = m.config().dim, n = a.batch;
  std::vector<std::unique_ptr<model::SequenceState>> seqs;
  std::vector<float> logits(size_t(std::max(a.chunk, n) * V)), hidden(size_t(n * D));
  std::vector<int32_t> next(static_cast<size_t>(n));
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < n; ++i) {
    seqs.push_back(m.new_sequence());
    std::vector<int32_t> p(prompt);
    p[0] = int32_t((p[0] + i * 7919) % std::min<int64_t>(V, 30000));  // each its own prompt
    for (int64_t at = 0; at < a.prompt_tokens; at += a.chunk) {
      const int64_t c = std::min(a.chunk, a.prompt_tokens - at);
      Status s = m.forward(*seqs.back(), std::span(p).subspan(size_t(at), size_t(c)), logits.data(),
                           nullptr, false);
      if (!s.is_ok()) {
        std::fprintf(stderr, "fathom: %s\n", s.to_string().c_str());
        return 1;
      }
    }
    model::set_prompt_end(*seqs.back(), a.prompt_tokens);
    next[size_t(i)] =
        int32_t(std::max_element(logits.begin(), logits.begin() + V) - logits.begin());
  }
  const double prefill_s = seconds_since(t0);
  std::vector<model::SequenceState*> states;
  for (auto& s : seqs) states.push_back(s.get());
  std::vector<double> step;
  for (int64_t k = 0; k < a.decode_tokens; ++k) {
    std::vector<std::span<const int32_t>> chunks;
    for (int64_t i = 0; i < n; ++i) chunks.push_back(std::span(&next[size_t(i)], 1));
    auto ts = std::chrono::steady_clock::now();
    for (const Status& s : m.forward_each(states, chunks, hidden.data()))
      if (!s.is_ok()) {
        std::fprintf(stderr, "fathom: %s\n", s.to_string().c_str());
        return 1;
      }
    m.head_logits(hidden.data(), n, logits.data());
    step.push_back(seconds_since(ts));
    for (int64_t i = 0; i < n; ++i) {
      const float* r = &logits[size_t(i * V)];
      next[size_t(i)] = int32_t(std::max_element(r, r + V) - r);
    }
  }
  std::sort(step.begin(), step.end());
  const double median = step[step.size() / 2];
  std::printf(
      "{\"model\":\"%s\",\"threads\":%d,\"numerics\":\"%s\",\"path\":\"%s\","
      "\"load_seconds\":%.3f,\"batch\":%lld,\"prefill_tokens\":%lld,"
      "\"prefill_tokens_per_s\":%.2f,\"decode_steps\":%lld,\"decode_median_step_seconds\":%.5f,"
      "\"decode_tokens_per_s\":%.2f,\"weight_bytes_per_token\":%lld,"
      "\"machine_read_gb_per_s\":%.2f}\n",
      a.model.c_str(), a.threads, a.numerics.c_str(), kernels::cpu_path_name(kernels::cpu_path()),
      load_s, (long long)n, (long long)a.prompt_tokens, double(a.prompt_tokens * n) / prefill_s,
      (long long)a.decode_tokens, median, double(n) / median, (long long)m.decode_weight_bytes(),
      machine_gbps);
  return 0;
}

// Batch-1 decode and chunked prefill on a checkpoint, with the weight-read bandwidth
// achieved next to the machine's read bandwidth.
int run_bench_decode(const BenchDecodeArgs& a) {
  model::ModelOptions o;
  o.numerics = a.numerics == "strict" ? model::Numerics::kStrict : model::Numerics::kFast;
  o.threads = a.threads;
  if (a.draft_vocab > 0) {
    auto ids = model::load_draft_vocabulary(a.model, a.draft_vocab);
    if (!ids.is_ok()) {
      std::fprintf(stderr, "fathom: %s\n", ids.status().to_string().c_str());
      return 2;
    }
    o.draft_vocabulary = std::move(*ids);
  }
  auto t_load = std::chrono::steady_clock::now();
  auto m = model::V41Model::load(a.model, o);
  if (!m.is_ok()) {
    std::fprintf(stderr, "fathom: %s\n", m.status().to_string().c_str());
    return 2;
  }
  const double load_s = seconds_since(t_load);
  const int64_t rss_loaded = proc_status_bytes("VmRSS:");
  const int64_t V = (*m)->config().vocab_size;
  std::mt19937 rng(7);
  std::vector<int32_t> prompt(size_t(a.prompt_tokens));
  for (auto& t : prompt) t = int32_t(rng() % uint32_t(std::min<int64_t>(V, 30000)));
  if (a.speculative == "dspark") {
    EngineDecodeBench b;
    b.batch = a.batch;
    b.decode_tokens = a.decode_tokens;
    b.speculative_tokens = a.speculative_tokens;
    b.scheduler = a.scheduler;
    b.model_dir = a.model;
    b.numerics = a.numerics;
    b.threads = a.threads;
    return run_engine_decode_bench(**m, prompt, b);
  }
  // (The speculative bench reports no bandwidth: measured only where it is printed.)
  const double machine_gbps = read_bandwidth(a.threads);
  if (a.batch > 1) return bench_batched_decode(a, **m, prompt, load_s, machine_gbps);
  auto st = (*m)->new_sequence();
  std::vector<float> logits(static_cast<size_t>(V));
  auto t0 = std::chrono::steady_clock::now();
  // As the engine prefills: the head runs for the prompt's last row only.
  for (int64_t at = 0; at < a.prompt_tokens; at += a.chunk) {
    const int64_t n = std::min(a.chunk, a.prompt_tokens - at);
    Status s = (*m)->forward(*st, std::span(prompt).subspan(size_t(at), size_t(n)),
                             at + n == a.prompt_tokens ? logits.data() : nullptr, nullptr, false);
    if (!s.is_ok()) {
      std::fprintf(stderr, "fathom: %s\n", s.to_string().c_str());
      return 1;
    }
  }
  const double prefill_s = seconds_since(t0);
  int32_t next = 1;
  std::vector<double> step;
  for (int64_t i = 0; i < a.decode_tokens; ++i) {
    auto ts = std::chrono::steady_clock::now();
    Status s = (*m)->forward(*st, std::span(&next, 1), logits.data());
    step.push_back(seconds_since(ts));
    if (!s.is_ok()) {
      std::fprintf(stderr, "fathom: %s\n", s.to_string().c_str());
      return 1;
    }
    next = int32_t(std::max_element(logits.begin(), logits.begin() + V) - logits.begin());
  }
  std::sort(step.begin(), step.end());
  const double median = step[step.size() / 2];
  const int64_t bytes = (*m)->decode_weight_bytes();
  const double achieved = double(bytes) / median / 1e9;
  std::printf(
      "{\"model\":\"%s\",\"threads\":%d,\"numerics\":\"%s\",\"path\":\"%s\","
      "\"load_seconds\":%.3f,\"prefill_tokens\":%lld,\"prefill_chunk\":%lld,\"prefill_tokens_per_"
      "s\":%.2f,"
      "\"decode_tokens\":%lld,\"decode_median_seconds\":%.5f,\"decode_tokens_per_s\":%.2f,"
      "\"weight_bytes_per_token\":%lld,\"achieved_weight_gb_per_s\":%.2f,"
      "\"machine_read_gb_per_s\":%.2f,\"fraction_of_machine\":%.3f,"
      "\"rss_after_load_bytes\":%lld,\"rss_peak_bytes\":%lld,\"checkpoint_bytes_mapped\":%lld}\n",
      a.model.c_str(), a.threads, a.numerics.c_str(), kernels::cpu_path_name(kernels::cpu_path()),
      load_s, (long long)a.prompt_tokens, (long long)a.chunk, double(a.prompt_tokens) / prefill_s,
      (long long)a.decode_tokens, median, 1.0 / median, (long long)bytes, achieved, machine_gbps,
      achieved / machine_gbps, (long long)rss_loaded, (long long)proc_status_bytes("VmHWM:"),
      (long long)(*m)->checkpoint_bytes());
  return 0;
}

}  // namespace

void add_bench_commands(CLI::App& app, Runner* run) {
  auto* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  auto args = std::make_shared<BenchTokenizeArgs>();
  auto* t = bench->add_subcommand("tokenize", "Encode a whole file as one text, best of K runs");
  t->add_option("--tokenizer", args->tokenizer, "tokenizer.json file")->required();
  t->add_option("--input", args->input, "Text file")->required();
  t->add_option("--threads", args->threads, "Threads")->check(CLI::Range(1, 256));
  t->add_option("--repeat", args->repeat, "Runs (best is reported)")->check(CLI::Range(1, 1000));
  t->add_flag("--plain", args->plain, "Do not match added-token spellings");
  t->add_option("--ids-out", args->ids_out, "Write the ids as a JSON array to this file");
  t->callback([args, run] { *run = [args] { return run_bench_tokenize(*args); }; });

  auto eargs = std::make_shared<BenchEncodeArgs>();
  auto* e = bench->add_subcommand(
      "encode", "Render + encode a conversation (render input shape), best of K runs");
  e->add_option("--tokenizer", eargs->tokenizer, "tokenizer.json file")->required();
  e->add_option("--format", eargs->format, "Prompt format")->check(CLI::IsMember({"v4", "v41"}));
  e->add_option("--input", eargs->input, "CASE.json")->required();
  e->add_option("--threads", eargs->threads, "Threads")->check(CLI::Range(1, 256));
  e->add_option("--repeat", eargs->repeat, "Runs (best is reported)")->check(CLI::Range(1, 1000));
  e->add_option("--ids-out", eargs->ids_out, "Write the ids as a JSON array to this file");
  e->callback([eargs, run] { *run = [eargs] { return run_bench_encode(*eargs); }; });

  auto margs = std::make_shared<BenchMatmulArgs>();
  auto* m = bench->add_subcommand(
      "matmul", "Time the fast kernel: [M x K] checkpoint-format weights times N rows");
  m->add_option("--weights", margs->weights, "fp8, fp4 or bf16")
      ->check(CLI::IsMember({"fp8", "fp4", "bf16"}));
  m->add_option("--m", margs->m, "Rows (outputs)")->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  m->add_option("--k", margs->k, "Columns (inputs)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  m->add_option("--n", margs->n, "Activation rows (1 = the decode GEMV)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 16));
  m->add_option("--threads", margs->threads, "Threads")->check(CLI::Range(1, 256));
  m->add_option("--repeat", margs->repeat, "Runs (best is reported)")->check(CLI::Range(1, 10000));
  m->add_option("--cold-bytes", margs->cold_bytes,
                "Run on copies of the weights spanning this many bytes, one after another, and "
                "report the median run (weights read from memory, as in decode; 0: one copy, "
                "the best run)")
      ->check(CLI::Range(int64_t(0), int64_t(16) << 30));
  m->add_flag("--read-floor", margs->read_floor,
              "Also time a plain read of the same weight bytes, as the kernel's runs are timed "
              "(same threads, copies and --repeat)");
  m->add_flag("--bandwidth", margs->bandwidth,
              "Also measure this machine's read bandwidth (a 1 GiB sum) and print the fraction");
  m->callback([margs, run] { *run = [margs] { return run_bench_matmul(*margs); }; });

  auto dargs = std::make_shared<BenchDecodeArgs>();
  auto* d = bench->add_subcommand(
      "decode", "Batch-1 decode and chunked prefill: tokens/s and weight-read bandwidth");
  d->add_option("--model", dargs->model, "Checkpoint directory")->required();
  d->add_option("--prompt-tokens", dargs->prompt_tokens, "Prompt length")
      ->check(CLI::PositiveNumber);
  d->add_option("--decode-tokens", dargs->decode_tokens, "Decode steps")
      ->check(CLI::PositiveNumber);
  d->add_option("--chunk", dargs->chunk, "Prefill chunk")->check(CLI::PositiveNumber);
  d->add_option("--threads", dargs->threads, "Threads")->check(CLI::Range(1, 256));
  d->add_option("--numerics", dargs->numerics, "fast or strict")
      ->check(CLI::IsMember({"fast", "strict"}));
  d->add_option("--speculative", dargs->speculative,
                "off, or dspark: --batch greedy requests through the engine with the "
                "checkpoint's draft stages and, in the same run, without them (prints "
                "decode_tokens_per_s, off_decode_tokens_per_s, vs_off, mean_accepted_length, "
                "draft_tokens_per_step, verified_tokens_per_step, mean_chosen_k)")
      ->check(CLI::IsMember({"off", "dspark"}));
  d->add_option("--speculative-scheduler", dargs->scheduler,
                "With --speculative dspark: fixed, prefix or stale-global (as fathom serve)")
      ->check(CLI::IsMember({"fixed", "prefix", "stale-global"}));
  d->add_option("--batch", dargs->batch,
                "Sequences decoding together (one forward_each and one head a step)")
      ->check(CLI::Range(int64_t(1), int64_t(1024)));
  d->add_option("--speculative-tokens", dargs->speculative_tokens,
                "Drafts verified per step (default: the model's draft block)")
      ->check(CLI::PositiveNumber);
  d->add_option("--speculative-draft-vocab", dargs->draft_vocab,
                "The draft stages propose only the N most frequent ids of the checkpoint's "
                "dspark_draft_vocab.json")
      ->check(CLI::PositiveNumber);
  d->callback([dargs, run] { *run = [dargs] { return run_bench_decode(*dargs); }; });

  add_kv_bench_commands(bench, run);
  add_router_bench_command(bench, run);
}

}  // namespace fathom::cli
