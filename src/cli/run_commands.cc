// `fathom mkmodel` (a random checkpoint in the official layout), `fathom forward` (logits of a
// token sequence, by one prefill or prefill + decode) and `fathom generate` (streams the
// continuation of a prompt).
#include <chrono>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "engine/sampler.h"
#include "model/engram.h"
#include "model/mkmodel.h"
#include "model/v41.h"
#include "tokenizer/tokenizer.h"

namespace fathom::cli {
namespace {

int fail(const Status& s) {
  std::fprintf(stderr, "fathom: %s\n", s.to_string().c_str());
  return s.code() == StatusCode::kInternal || s.code() == StatusCode::kIoError ? 1 : 2;
}

Result<model::Numerics> parse_numerics(const std::string& s) {
  if (s == "strict") return model::Numerics::kStrict;
  if (s == "fast") return model::Numerics::kFast;
  return invalid_argument("--numerics must be strict or fast, not \"" + s + "\"");
}

struct MkmodelArgs {
  std::string preset = "tiny", config, out;
  uint64_t seed = 0;
};

int run_mkmodel(const MkmodelArgs& a) {
  Result<model::ModelConfig> c =
      a.config.empty() ? model::preset_config(a.preset) : model::load_model_config_file(a.config);
  if (!c.is_ok()) return fail(c.status());
  const auto t0 = std::chrono::steady_clock::now();
  int last = -1;
  Status s = model::write_random_checkpoint(*c, a.seed, a.out, [&](int64_t done, int64_t total) {
    int pct = int(100 * done / std::max<int64_t>(total, 1));
    if (pct != last && isatty(2)) std::fprintf(stderr, "\rwriting %s: %3d%%", a.out.c_str(), pct);
    last = pct;
  });
  if (isatty(2)) std::fprintf(stderr, "\n");
  if (!s.is_ok()) return fail(s);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("{\"out\":\"%s\",\"preset\":\"%s\",\"seed\":%llu,\"seconds\":%.2f}\n", a.out.c_str(),
              a.config.empty() ? a.preset.c_str() : "config", (unsigned long long)a.seed, secs);
  return 0;
}

Result<std::vector<int32_t>> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0 || v > INT32_MAX)
      return invalid_argument("--ids: \"" + item + "\" is not a token id");
    ids.push_back(int32_t(v));
  }
  if (ids.empty()) return invalid_argument("--ids is empty");
  return ids;
}

struct ForwardArgs {
  std::string model, ids, numerics = "strict", out, tokenizer;
  int64_t prefill = -1;
  bool own_keys = false;
  int threads = 0;
};

int run_forward(const ForwardArgs& a) {
  auto ids = parse_ids(a.ids);
  if (!ids.is_ok()) return fail(ids.status());
  auto num = parse_numerics(a.numerics);
  if (!num.is_ok()) return fail(num.status());
  const int64_t T = int64_t(ids->size());
  if (a.prefill == 0 || a.prefill > T)
    return fail(invalid_argument("--prefill must be between 1 and the number of ids"));
  model::ModelOptions o;
  o.numerics = *num;
  o.own_index_keys = a.own_keys;
  o.threads = a.threads;
  o.tokenizer_path = a.tokenizer;
  auto m = model::V41Model::load(a.model, o);
  if (!m.is_ok()) return fail(m.status());
  const int64_t V = (*m)->config().vocab_size;
  std::vector<float> logits(size_t(T * V));
  auto st = (*m)->new_sequence();
  const int64_t K = a.prefill < 0 ? T : a.prefill;
  Status s = (*m)->forward(*st, std::span(*ids).first(size_t(K)), logits.data());
  for (int64_t p = K; s.is_ok() && p < T; ++p)
    s = (*m)->forward(*st, std::span(*ids).subspan(size_t(p), 1), &logits[size_t(p * V)]);
  if (!s.is_ok()) return fail(s);
  std::FILE* f = std::fopen(a.out.c_str(), "wb");
  if (f == nullptr) return fail(io_error("cannot create " + a.out));
  const bool ok = std::fwrite(logits.data(), sizeof(float), logits.size(), f) == logits.size();
  if (std::fclose(f) != 0 || !ok) return fail(io_error("writing " + a.out + " failed"));
  return 0;
}

struct GenerateArgs {
  std::string model, tokenizer, prompt, numerics = "fast";
  int max_tokens = 64;
  float temperature = 0.0f;
  uint64_t seed = 0;
  int threads = 0;
};

int run_generate(const GenerateArgs& a) {
  auto num = parse_numerics(a.numerics);
  if (!num.is_ok()) return fail(num.status());
  auto tok = Tokenizer::load_file(a.tokenizer);
  if (!tok.is_ok()) return fail(tok.status());
  model::ModelOptions o;
  o.numerics = *num;
  o.threads = a.threads;
  o.tokenizer_path = a.tokenizer;
  auto m = model::V41Model::load(a.model, o);
  if (!m.is_ok()) return fail(m.status());
  const int64_t V = (*m)->config().vocab_size;
  if (int64_t((*tok)->vocab_size()) > V)
    return fail(invalid_argument("the tokenizer has more ids than the model's vocabulary"));
  auto ids = (*tok)->encode(a.prompt);
  if (!ids.is_ok()) return fail(ids.status());
  const int32_t bos = (*tok)->id_of("<｜begin▁of▁sentence｜>");
  const int32_t eos = (*tok)->id_of("<｜end▁of▁sentence｜>");
  if (bos >= 0 && (ids->empty() || (*ids)[0] != bos)) ids->insert(ids->begin(), bos);
  if (ids->empty()) return fail(invalid_argument("--prompt encodes to no tokens"));
  engine::SamplingParams sp;
  sp.temperature = a.temperature;
  sp.seed = a.seed;
  auto st = (*m)->new_sequence();
  std::vector<float> logits(ids->size() * size_t(V));
  engine::SamplerScratch scratch;
  Status s = (*m)->forward(*st, *ids, logits.data());
  if (!s.is_ok()) return fail(s);
  StreamDecoder dec(**tok, true);
  std::vector<int32_t> generated;
  std::string text;
  const float* last = &logits[(ids->size() - 1) * size_t(V)];
  for (int i = 0; i < a.max_tokens; ++i) {
    const int32_t next = engine::sample_token(last, V, sp, *ids, generated, 0,
                                              uint64_t(ids->size() + generated.size()), scratch);
    if (next == eos) break;
    generated.push_back(next);
    text.clear();
    if (next < int32_t((*tok)->vocab_size())) {
      Status d = dec.push(next, text);
      if (!d.is_ok()) return fail(d);
    }
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    if (i + 1 == a.max_tokens) break;
    s = (*m)->forward(*st, std::span(&generated.back(), 1), logits.data());
    if (!s.is_ok()) return fail(s);
    last = logits.data();
  }
  text.clear();
  dec.finish(text);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
  return 0;
}

int run_engram_map(const std::string& tokenizer) {
  auto tok = Tokenizer::load_file(tokenizer);
  if (!tok.is_ok()) return fail(tok.status());
  int64_t size = 0;
  auto map = model::build_compressed_token_map(**tok, &size);
  if (!map.is_ok()) return fail(map.status());
  std::string out = "{\"compressed_vocab_size\":" + std::to_string(size) + ",\"token_map\":[";
  for (size_t i = 0; i < map->size(); ++i) out += (i ? "," : "") + std::to_string((*map)[i]);
  out += "]}\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace

void add_run_commands(CLI::App& app, Runner* run) {
  {
    auto tok = std::make_shared<std::string>();
    auto* c =
        app.add_subcommand("engram-map", "The Engram compressed-token map of a tokenizer, as JSON");
    c->add_option("--tokenizer", *tok, "tokenizer.json")->required();
    c->callback([tok, run] { *run = [tok] { return run_engram_map(*tok); }; });
  }
  {
    auto a = std::make_shared<MkmodelArgs>();
    auto* c =
        app.add_subcommand("mkmodel", "Write a random V4.1 checkpoint in the official layout");
    c->add_option("--preset", a->preset,
                  "tiny (golden shapes), demo (full vocabulary), small, medium (benchmarks)")
        ->check(CLI::IsMember({"tiny", "demo", "small", "medium"}));
    c->add_option("--config", a->config, "A config.json to use instead of a preset");
    c->add_option("--seed", a->seed, "Seed of the random weights");
    c->add_option("--out", a->out, "Output directory")->required();
    c->callback([a, run] { *run = [a] { return run_mkmodel(*a); }; });
  }
  {
    auto a = std::make_shared<ForwardArgs>();
    auto* c = app.add_subcommand("forward", "Logits of a token sequence as float32 [T, vocab]");
    c->add_option("--model", a->model, "Checkpoint directory")->required();
    c->add_option("--ids", a->ids, "Comma-separated token ids")->required();
    c->add_option("--prefill", a->prefill,
                  "Prefill the first K tokens, decode the rest one by one");
    c->add_option("--numerics", a->numerics, "strict (bit-exact with the reference) or fast");
    c->add_flag("--own-index-keys", a->own_keys, "Indexers score their own kv source's keys");
    c->add_option("--tokenizer", a->tokenizer,
                  "tokenizer.json for the Engram token map when the checkpoint has no "
                  "engram_tables.json");
    c->add_option("--threads", a->threads, "Threads for the fast kernels (0 = all)");
    c->add_option("--out", a->out, "Output file")->required();
    c->callback([a, run] { *run = [a] { return run_forward(*a); }; });
  }
  {
    auto a = std::make_shared<GenerateArgs>();
    auto* c = app.add_subcommand("generate", "Stream the continuation of a prompt");
    c->add_option("--model", a->model, "Checkpoint directory")->required();
    c->add_option("--tokenizer", a->tokenizer, "tokenizer.json")->required();
    c->add_option("--prompt", a->prompt, "Prompt text")->required();
    c->add_option("--max-tokens", a->max_tokens, "Tokens to generate")->check(CLI::PositiveNumber);
    c->add_option("--temperature", a->temperature, "0 = greedy");
    c->add_option("--seed", a->seed, "Sampling seed");
    c->add_option("--numerics", a->numerics, "fast (default) or strict");
    c->add_option("--threads", a->threads, "Threads (0 = all)");
    c->callback([a, run] { *run = [a] { return run_generate(*a); }; });
  }
}

}  // namespace fathom::cli
